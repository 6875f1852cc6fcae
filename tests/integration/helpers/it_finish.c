/*
 * it_finish — integration-test helper: the callback's batch transaction
 * with its BEGIN and COMMIT in the statements' round trips
 * (ax_store_outcome_finish_begin, ax_store_outcome_jobs_commit: one libpq
 * pipeline each, store/stmt.c ax_stmt_run_framed), on four RUNNING
 * instances (attempt 1) of one job that the test made. Prints one line per
 * step, "STEP rc=RC txn=STATUS [ended=N jobs=J]" (STATUS: libpq's
 * transaction status, idle / intrans / inerror / other), then the test
 * checks the rows:
 *   ok      ID1 and ID2 SUCCESS: finish_begin (the transaction open after
 *           it), jobs_commit (idle after it)
 *   bad     ID3 with an output that is not UTF-8: the statement fails, the
 *           transaction is left aborted (inerror), and after ax_pg_rollback
 *           idle, ID3 untouched
 *   stale   the session's prepared statements dropped behind the store's
 *           back (DEALLOCATE ALL): finish_begin of ID3 prepares again and
 *           succeeds, the transaction open; then jobs_commit
 *   stalejobs finish_begin of ID4, the session's statements dropped
 *           (DEALLOCATE ALL), jobs_commit: fails as retriable (AX_ERR_IO),
 *           the session closed; rolled back
 *   stalefin  in a transaction (ax_pg_begin) on the new session, the
 *           finish prepared (a result for no instance), the statements
 *           dropped, then ax_store_outcome_finish of ID4: the same; ID4
 *           untouched by both
 *   commit  ID4 SUCCESS (on a new session), then a deferred unique violation in the same
 *           transaction: jobs_commit fails at the COMMIT (rc < 0), the
 *           transaction gone, ID4 untouched; "commit.error E" the error
 *   jobs    ID5 (the test gave it a concurrency slot its job does not
 *           count): the job rows' statement fails (running_count would go
 *           below 0), the COMMIT is not run, the transaction left aborted
 * Usage: it_finish CONFIG_FILE DEPLOYMENT ID1 ID2 ID3 ID4 ID5. Exit 0, or 2
 * when it cannot start.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapters/pg_raw.h"
#include "ax/conf.h"
#include "ax/store_outcome.h"
#include "store/store_int.h"

extern char **environ;

static char err[1024];

static const char *txn(ax_pg_t *pg) {
    if (!ax_pg_conn(pg))
        return "closed";
    switch (PQtransactionStatus(ax_pg_conn(pg))) {
    case PQTRANS_IDLE:
        return "idle";
    case PQTRANS_INTRANS:
        return "intrans";
    case PQTRANS_INERROR:
        return "inerror";
    default:
        return "other";
    }
}

static ax_outcome_in_t result(int64_t id, const char *output) {
    return (ax_outcome_in_t){.instance_id = id, .attempt = 1, .outcome = AX_OUTCOME_SUCCESS,
                             .exit_code_set = 1, .output = output, .worker = "it-finish",
                             .started_ms = 1, .retry_ms = -1};
}

/* finish_begin of in[0..n), printed as STEP; *f kept for jobs_commit */
static int begin_step(ax_pg_t *pg, const char *deployment, const char *step,
                      const ax_outcome_in_t *in, size_t n, ax_outcome_finished_t *f) {
    int rc = ax_store_outcome_finish_begin(pg, deployment, in, n, 0, f, err, sizeof err);
    printf("%s rc=%d txn=%s ended=%zu jobs=%zu\n", step, rc < 0 ? rc : 0, txn(pg),
           rc < 0 ? 0 : f->nended, rc < 0 ? 0 : f->njobs);
    if (rc < 0)
        fprintf(stderr, "it_finish: %s: %s\n", step, err);
    return rc;
}

static int commit_step(ax_pg_t *pg, const char *step, ax_outcome_finished_t *f) {
    ax_outcome_opened_t *opened = NULL;
    size_t nopened = 0;
    int rc = ax_store_outcome_jobs_commit(pg, f->jobs, f->njobs, &opened, &nopened, err,
                                          sizeof err);
    printf("%s rc=%d txn=%s\n", step, rc < 0 ? rc : 0, txn(pg));
    if (rc < 0) {
        fprintf(stderr, "it_finish: %s: %s\n", step, err);
        printf("%s.error %s\n", step, err);
    }
    ax_outcome_opened_free(opened, nopened);
    ax_outcome_finished_free(f);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: it_finish CONFIG_FILE DEPLOYMENT ID1 ID2 ID3 ID4 ID5\n");
        return 2;
    }
    static ax_conf_t conf;
    ax_conf_init(&conf);
    if (ax_conf_load_file(&conf, argv[1], 1, err, sizeof err) < 0 ||
        ax_conf_load_env(&conf, environ, err, sizeof err) < 0) {
        fprintf(stderr, "it_finish: %s\n", err);
        return 2;
    }
    ax_pg_t *pg = ax_pg_new(&conf, "it_finish", err, sizeof err);
    if (!pg || ax_pg_ensure(pg, err, sizeof err) < 0) {
        fprintf(stderr, "it_finish: %s\n", err);
        return 2;
    }
    const char *d = argv[2];
    int64_t id[5];
    for (int k = 0; k < 5; k++)
        id[k] = strtoll(argv[3 + k], NULL, 10);
    ax_outcome_finished_t f = {0};

    ax_outcome_in_t ok[2] = {result(id[0], "one"), result(id[1], "two")};
    if (begin_step(pg, d, "ok.begin", ok, 2, &f) == 0)
        commit_step(pg, "ok.commit", &f);
    else
        ax_pg_rollback(pg);

    ax_outcome_in_t bad = result(id[2], "\xff\xfe not UTF-8");
    if (begin_step(pg, d, "bad.begin", &bad, 1, &f) == 0)
        commit_step(pg, "bad.commit", &f);
    ax_pg_rollback(pg);
    printf("bad.rollback txn=%s\n", txn(pg));

    if (ax_pg_exec(pg, "DEALLOCATE ALL", 0, NULL, NULL, NULL, NULL, err, sizeof err) < 0)
        fprintf(stderr, "it_finish: DEALLOCATE ALL: %s\n", err);
    ax_outcome_in_t again = result(id[2], "three");
    if (begin_step(pg, d, "stale.begin", &again, 1, &f) == 0)
        commit_step(pg, "stale.commit", &f);
    else
        ax_pg_rollback(pg);

    /* a stale plan inside the caller's transaction: retriable, the
     * session closed (store/stmt.c stale_in_txn). Both statements are
     * prepared on this session (the stale step's). */
    ax_outcome_in_t four = result(id[3], "four");
    if (begin_step(pg, d, "stalejobs.begin", &four, 1, &f) == 0) {
        if (ax_pg_exec(pg, "DEALLOCATE ALL", 0, NULL, NULL, NULL, NULL, err, sizeof err) < 0)
            fprintf(stderr, "it_finish: stalejobs: %s\n", err);
        commit_step(pg, "stalejobs.commit", &f);
    }
    ax_pg_rollback(pg);
    /* a new session: the finish prepared by a result that matches nothing */
    ax_outcome_in_t none = result(-1, "none");
    int rc = ax_pg_begin(pg, err, sizeof err);
    if (rc == 0 && (rc = ax_store_outcome_finish(pg, d, &none, 1, 0, &f, err, sizeof err)) == 0)
        ax_outcome_finished_free(&f);
    if (rc < 0 ||
        ax_pg_exec(pg, "DEALLOCATE ALL", 0, NULL, NULL, NULL, NULL, err, sizeof err) < 0)
        fprintf(stderr, "it_finish: stalefin: %s\n", err);
    rc = ax_store_outcome_finish(pg, d, &four, 1, 0, &f, err, sizeof err);
    printf("stalefin rc=%d txn=%s\n", rc < 0 ? rc : 0, txn(pg));
    if (rc < 0)
        printf("stalefin.error %s\n", err);
    else
        ax_outcome_finished_free(&f);
    ax_pg_rollback(pg);

    if (begin_step(pg, d, "commit.begin", &four, 1, &f) == 0) {
        if (ax_pg_exec(pg,
                       "CREATE TEMP TABLE it_finish_deferred (x int UNIQUE DEFERRABLE INITIALLY"
                       " DEFERRED) ON COMMIT DROP",
                       0, NULL, NULL, NULL, NULL, err, sizeof err) < 0 ||
            ax_pg_exec(pg, "INSERT INTO it_finish_deferred VALUES (1), (1)", 0, NULL, NULL, NULL,
                       NULL, err, sizeof err) < 0)
            fprintf(stderr, "it_finish: the deferred violation: %s\n", err);
        commit_step(pg, "commit.commit", &f);
    }
    ax_pg_rollback(pg);
    printf("commit.rollback txn=%s\n", txn(pg));

    ax_outcome_in_t five = result(id[4], "five");
    if (begin_step(pg, d, "jobs.begin", &five, 1, &f) == 0)
        commit_step(pg, "jobs.commit", &f);
    ax_pg_rollback(pg);
    printf("jobs.rollback txn=%s\n", txn(pg));
    ax_pg_destroy(pg);
    return 0;
}
