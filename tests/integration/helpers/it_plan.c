/*
 * it_plan — integration-test helper: the store's plan modes on one
 * PostgreSQL session (store/stmt.c, AX_STMT_GENERIC; adapters/pg.c,
 * ax_pg_plan). Prints one line per check, "NAME VALUE":
 *   mode.*      SHOW plan_cache_mode after each step (session SETs, a SET
 *               LOCAL undone by ROLLBACK and by COMMIT)
 *   ingest      generic and custom plan counts of dispatch.ingest on this
 *               session (pg_prepared_statements) after two batches
 *   settle      the same for dispatch.settle (an AX_STMT) run after them
 * Usage: it_plan CONFIG_FILE DEPLOYMENT JOB. Exit 0, or 1 when a call
 * failed (its error on stderr).
 *
 * it_plan CONFIG_FILE DEPLOYMENT JOB replan MS: db.replan.interval.ms (the
 * configuration's, MS) on dispatch.ingest, three batches: the first plans
 * it, the second at once runs on the same prepared statement, the third,
 * MS + 200 ms later and outside a transaction block (as the trigger's
 * ingest connection runs it), on one prepared again. Prints "replan.N prepared=T generic=G"
 * after batch N (T: pg_prepared_statements' prepare_time as epoch
 * microseconds, G its generic plans so far), or "replan.N count=C" when the
 * session holds C prepared statements of its text instead of one (the old
 * one not deallocated, or none).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adapters/pg_raw.h"
#include "ax/conf.h"
#include "ax/store_dispatch.h"
#include "store/store_int.h"

extern char **environ;

static char err[1024];

static int show(ax_pg_t *pg, const char *name) {
    PGresult *r = NULL;
    if (ax_pg_exec(pg, "SHOW plan_cache_mode", 0, NULL, NULL, NULL, &r, err, sizeof err) < 0) {
        fprintf(stderr, "it_plan: %s: %s\n", name, err);
        return 1;
    }
    printf("%s %s\n", name, PQgetvalue(r, 0, 0));
    PQclear(r);
    return 0;
}

static int plans(ax_pg_t *pg, const char *name, const char *prefix) {
    const char *p[] = {prefix};
    PGresult *r = NULL;
    if (ax_pg_exec(pg,
                   "SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)"
                   " FROM pg_prepared_statements WHERE statement LIKE $1 || '%'",
                   1, p, NULL, NULL, &r, err, sizeof err) < 0) {
        fprintf(stderr, "it_plan: %s: %s\n", name, err);
        return 1;
    }
    printf("%s generic=%s custom=%s\n", name, PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
    PQclear(r);
    return 0;
}

static int step(int rc, const char *what);

static int ingest_one(ax_pg_t *pg, const char *deployment, const char *job, const char *tag,
                      int b) {
    char key[128], trace[64];
    snprintf(key, sizeof key, "idem:%s%s%d", deployment, tag, b);
    snprintf(trace, sizeof trace, "it-%s-%d", tag, b);
    ax_ingest_in_t in = {.job = job, .submit_key = key, .trace_id = trace,
                         .idempotency_key = key, .priority = -1, .delay_ms = -1};
    ax_ingest_ctx_t c = {.deployment = deployment, .default_timeout_ms = 60000};
    ax_ingest_out_t out = {0};
    int rc = step(ax_store_ingest(pg, &c, &in, 1, &out, err, sizeof err), "ingest");
    if (!rc && out.rows.n != 1) {
        fprintf(stderr, "it_plan: ingest made %zu instances, not 1\n", out.rows.n);
        rc = 1;
    }
    ax_ingest_out_free(&out);
    return rc;
}

#define INGEST_TEXT "WITH ld AS ("

static int prepared(ax_pg_t *pg, const char *name) {
    const char *p[] = {INGEST_TEXT};
    PGresult *r = NULL;
    if (ax_pg_exec(pg,
                   "SELECT (extract(epoch FROM prepare_time) * 1000000)::bigint, generic_plans"
                   " FROM pg_prepared_statements WHERE statement LIKE $1 || '%'",
                   1, p, NULL, NULL, &r, err, sizeof err) < 0) {
        fprintf(stderr, "it_plan: %s: %s\n", name, err);
        return 1;
    }
    if (PQntuples(r) != 1)
        printf("%s count=%d\n", name, PQntuples(r));
    else
        printf("%s prepared=%s generic=%s\n", name, PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
    PQclear(r);
    return 0;
}

static int replan_mode(ax_pg_t *pg, const char *deployment, const char *job, long ms) {
    int rc = ingest_one(pg, deployment, job, "replan", 1) || prepared(pg, "replan.1");
    rc = rc || ingest_one(pg, deployment, job, "replan", 2) || prepared(pg, "replan.2");
    if (rc)
        return rc;
    struct timespec ts = {.tv_sec = (ms + 200) / 1000, .tv_nsec = (ms + 200) % 1000 * 1000000L};
    nanosleep(&ts, NULL);
    /* outside a transaction block, as the trigger's ingest connection runs it */
    rc = ingest_one(pg, deployment, job, "replan", 3) || prepared(pg, "replan.3");
    return rc;
}

static int step(int rc, const char *what) {
    if (rc < 0)
        fprintf(stderr, "it_plan: %s: %s\n", what, err);
    return rc < 0;
}

int main(int argc, char **argv) {
    long replan_ms = -1;
    if (argc == 6 && strcmp(argv[4], "replan") == 0) {
        char *end;
        replan_ms = strtol(argv[5], &end, 10);
        if (*end || end == argv[5] || replan_ms < 1 || replan_ms > 60000)
            replan_ms = -1;
    }
    if (argc != 4 && replan_ms < 0) {
        fprintf(stderr, "usage: it_plan CONFIG_FILE DEPLOYMENT JOB [replan MS]\n");
        return 2;
    }
    static ax_conf_t conf;
    ax_conf_init(&conf);
    if (ax_conf_load_file(&conf, argv[1], 1, err, sizeof err) < 0 ||
        ax_conf_load_env(&conf, environ, err, sizeof err) < 0) {
        fprintf(stderr, "it_plan: %s\n", err);
        return 2;
    }
    ax_pg_t *pg = ax_pg_new(&conf, "it_plan", err, sizeof err);
    if (!pg || ax_pg_ensure(pg, err, sizeof err) < 0) {
        fprintf(stderr, "it_plan: %s\n", err);
        return 2;
    }
    if (replan_ms > 0) {
        int rc = replan_mode(pg, argv[2], argv[3], replan_ms);
        ax_pg_destroy(pg);
        return rc ? 1 : 0;
    }
    int rc = show(pg, "mode.start");
    /* the connection's other option: no JIT compilation (adapters/pg.c) */
    PGresult *jr = NULL;
    if (ax_pg_exec(pg, "SHOW jit", 0, NULL, NULL, NULL, &jr, err, sizeof err) < 0) {
        fprintf(stderr, "it_plan: jit: %s\n", err);
        rc = 1;
    } else {
        printf("jit %s\n", PQgetvalue(jr, 0, 0));
        PQclear(jr);
    }
    rc |= step(ax_pg_plan(pg, 1, err, sizeof err), "generic") || show(pg, "mode.generic");
    /* in a transaction: SET LOCAL, undone by the rollback */
    rc |= step(ax_pg_begin(pg, err, sizeof err), "begin") ||
          step(ax_pg_plan(pg, 0, err, sizeof err), "custom in txn") || show(pg, "mode.txn_custom");
    ax_pg_rollback(pg);
    rc |= show(pg, "mode.after_rollback");
    /* and by the commit */
    rc |= step(ax_pg_begin(pg, err, sizeof err), "begin") ||
          step(ax_pg_plan(pg, 0, err, sizeof err), "custom in txn") ||
          step(ax_pg_commit(pg, err, sizeof err), "commit") || show(pg, "mode.after_commit");
    rc |= step(ax_pg_plan(pg, 0, err, sizeof err), "custom") || show(pg, "mode.custom");

    /* the store's statements: dispatch.ingest generic, dispatch.settle not */
    for (int b = 0; b < 2 && !rc; b++)
        rc |= ingest_one(pg, argv[2], argv[3], "plan", b);
    rc |= show(pg, "mode.after_ingest");
    rc |= step(ax_store_pending_settle(pg, "it-plan.", NULL, 0, err, sizeof err), "settle") ||
          show(pg, "mode.after_settle");
    rc |= plans(pg, "ingest", INGEST_TEXT) || plans(pg, "settle", "WITH pa AS MATERIALIZED");
    ax_pg_destroy(pg);
    return rc ? 1 : 0;
}
