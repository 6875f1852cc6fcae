/*
 * outcome.c — the store's outcome family (ax/store_outcome.h): how
 * ax-callback persists the results of attempts, the job rows a batch
 * updates, what its retry and size-probe policies read, and the shards and
 * flow runs an ended instance advances.
 *
 * "outcome.finish" and "outcome.jobs" run for every batch of results: hot
 * path, their text is kept as it was in the callback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outcome_params.h"

/* ---- array parameters ------------------------------------------------------------------ */


static int arrs_begin(ax_strbuf_t *a, int n) {
    memset(a, 0, (size_t)n * sizeof *a);
    for (int k = 0; k < n; k++)
        if (ax_pgarr_begin(&a[k]) < 0)
            return AX_ERR_NOMEM;
    return 0;
}

static int arrs_end(ax_strbuf_t *a, int n, const char **p) {
    for (int k = 0; k < n; k++) {
        if (ax_pgarr_end(&a[k]) < 0)
            return AX_ERR_NOMEM;
        p[k] = a[k].s;
    }
    return 0;
}

static void arrs_free(ax_strbuf_t *a, int n) {
    for (int k = 0; k < n; k++)
        ax_strbuf_free(&a[k]);
}

static int nomem(char *errbuf, size_t errlen, const char *what) {
    return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", what);
}

/* ---- the finish statement -------------------------------------------------------------- */

/* One statement persists a batch: CAS FINISHED fenced by (instance,
 * attempt) — stale and duplicate results match nothing — plus the
 * job_attempt rows and the results outbox. Its rows say what changed:
 *   'i', instance, retried        every result that ended its attempt (with
 *                                 $11, only the retried: an 'r' row stands
 *                                 for each one ended for good)
 *   'f', instance, success        flow stages that ended for good
 *   'c', instance, ''             shards that ended for good
 *   's', job, "slots,n,ok,bad[,mean_ms]"   per job, for "outcome.jobs"
 *   'r', instance, present, batch, result columns   when asked for ($11):
 *                                 present = the definition was found */
/* The result columns of the 'r' rows, NULL in the others. */
#define FIN_NONE ", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL"
AX_STMT(st_finish, "outcome.finish",
    "WITH u AS MATERIALIZED ("
    "  SELECT * FROM unnest($1::bigint[], $2::int[], $3::ax_outcome[], $4::int[], $5::text[],"
    "    $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[])"
    "    AS u(id, attempt, outcome, exit_code, error_class, error, output, worker, started_ms,"
    "      retry_ms)"
    /* the batch in instance id order (ax__outcome_finish_params sorts
     * it): it drives the update below (or the range is read by primary
     * key), which then visits (and locks) the rows in that order like
     * every other multi-row update of instance_state, so batches do not
     * deadlock (a plan reading the table whole as a hash join's probe side
     * would lock in heap order: a deadlock fails the transaction, and the
     * callback persists the batch again). The state rows are not
     * read before the update (027_finish_slot_given_back): the old values
     * the RETURNING needs and cannot give from the new row, the holds_slot
     * this finish gives back and a retried attempt's running_at, the
     * update writes beside the new ones (slot_given_back,
     * attempt_started_at) */
    "), bid AS MATERIALIZED ("
    /* the id of the results batch row this deployment's ($14, the
     * callback's) instances ended for good go into (ob below), taken first
     * so that the update can write it on their state rows
     * (023_publish_per_batch: the publisher then marks the batch row
     * published, not each instance); unused when no row ends (stale
     * results) */
    "  SELECT nextval(pg_get_serial_sequence('ax_result_batch', 'id')) AS id"
    "  WHERE EXISTS (SELECT 1 FROM u WHERE retry_ms IS NULL)"
    "), fin AS ("
    /* a retry: back to SCHEDULED as the next attempt, due after its delay,
     * for the trigger to dispatch; otherwise FINISHED */
    "  UPDATE instance_state i SET"
    "    state = CASE WHEN o.retry_ms IS NULL THEN 'FINISHED' ELSE 'SCHEDULED' END"
    "      ::ax_instance_state,"
    "    outcome = CASE WHEN o.retry_ms IS NULL THEN o.outcome END,"
    /* one time for the batch, the statement's start: clock_timestamp()
     * per row widened the BRIN summary on finished_at (019) with every
     * row, one WAL record per job (BENCHMARKS.md, "Issue #13: one finish
     * time per statement"). A run's result follows its RUNNING commit; a
     * lease-lost or cancel result can race run.start, whose RUNNING then
     * commits while this statement waits for the row: never before it */
    "    finished_at = CASE WHEN o.retry_ms IS NULL"
    "      THEN greatest(statement_timestamp(), i.running_at) END,"
    "    attempt = i.attempt + CASE WHEN o.retry_ms IS NULL THEN 0 ELSE 1 END,"
    /* a retry's delay counts from the attempt's end as its log row
     * records it (statement_timestamp(), below), not from the
     * transaction's start (now(), a round trip earlier) */
    "    due_at = CASE WHEN o.retry_ms IS NULL THEN i.due_at"
    "             ELSE statement_timestamp() + o.retry_ms * interval '1 millisecond' END,"
    "    dispatched_at = CASE WHEN o.retry_ms IS NULL THEN i.dispatched_at END,"
    /* a retry waits for its backoff, not for backpressure */
    "    deferred_at = CASE WHEN o.retry_ms IS NULL THEN i.deferred_at END,"
    "    worker = CASE WHEN o.retry_ms IS NULL THEN i.worker END,"
    "    locked_at = CASE WHEN o.retry_ms IS NULL THEN i.locked_at END,"
    "    running_at = CASE WHEN o.retry_ms IS NULL THEN i.running_at END,"
    "    exit_code = o.exit_code, error_class = o.error_class,"
    "    error = o.error, output = o.output, lease_expires_at = NULL,"
    /* the slot this version held, given back (RETURNING reads it) */
    "    slot_given_back = i.holds_slot, holds_slot = false,"
    /* the final attempt is recorded here, not as a job_attempt_log row
     * (025_final_attempt_in_state; the view job_attempt shows both) —
     * unless the log holds that attempt already (a size probe's row:
     * outcome.probes_split logs the attempt of an instance whose
     * shard_mode is 'probe', and nothing else logs an attempt that has not
     * ended its instance's attempt number, so only such an instance is
     * looked up in the log; the lookup per row was ~5 % of the statement,
     * perf, BENCHMARKS.md "Issue #13: the twenty-fifth session") */
    "    attempt_worker = CASE WHEN o.retry_ms IS NULL AND (i.shard_mode IS DISTINCT FROM 'probe'"
    "      OR NOT EXISTS (SELECT 1 FROM job_attempt_log a"
    "        WHERE a.instance_id = o.id AND a.attempt = o.attempt))"
    "      THEN o.worker END,"
    /* a retried attempt's run start, which the update clears from
     * running_at, is kept here for RETURNING (the job's mean run time),
     * until the instance's next finish: only a FINISHED row's
     * attempt_started_at is shown (the view job_attempt) */
    /* float8, not numeric, division: both give the double nearest the
     * exact quotient (a millisecond count is exact in a double), so the
     * same time, for less (BENCHMARKS.md, "Issue #13: the twenty-fifth
     * session") */
    "    attempt_started_at = CASE WHEN o.retry_ms IS NULL"
    "      THEN to_timestamp(o.started_ms::float8 / 1000) ELSE i.running_at END,"
    /* an instance of another deployment (a cancellation sent to this
     * deployment's callback topic) goes to the per-instance outbox of its
     * own deployment's publisher instead (fo below) */
    "    result_batch = CASE WHEN o.retry_ms IS NULL AND i.deployment = $14"
    "      THEN (SELECT b.id FROM bid b) END"
    "  FROM u o"
    /* the rows within the batch's id range, joined to the batch: by the
     * join alone the planner chose, for a batch of a few hundred on a
     * table of tens of thousands, a hash join over a sequential scan of
     * the whole table — half of the statement's time (BENCHMARKS.md,
     * "Issue #13: the finish per row"). The range, not id = ANY (the
     * batch's ids): as the inner side of a nested loop an index scan with
     * an array key sorts the array again at every rescan, n sorts of n ids
     * per batch (BENCHMARKS.md, "Issue #13: the array keys rescanned");
     * scalar bounds cost nothing per rescan. The bounds are the batch's
     * lowest and highest instance ($12, $13, from the caller: known to the
     * planner). A stale result of an old instance widens them: the
     * planner, seeing the range, then reads a large table by primary key
     * and a small one whole. The CAS: the row is still at the result's
     * attempt and in a state the result can end, re-checked on the latest
     * version when a concurrent update (a lease renewal, run.start) got
     * there first; an instance cut by the trigger's backlog cap, or
     * cancelled by axctl before it was claimed, is finished from
     * SCHEDULED */
    "  WHERE i.id BETWEEN $12::bigint AND $13::bigint"
    "  AND i.id = o.id AND i.attempt = o.attempt"
    "  AND CASE WHEN (o.error_class = 'backlog_full' AND o.worker = 'ax-trigger')"
    "      OR (o.error_class = 'cancelled' AND o.worker = 'axctl')"
    "      THEN i.state = 'SCHEDULED' ELSE i.state IN ('LOCKED', 'RUNNING') END"
    "  RETURNING i.id, o.attempt, o.outcome, i.exit_code, i.error_class, i.error,"
    "    greatest(statement_timestamp(), i.running_at) AS finished_at,"
    "    i.slot_given_back AS holds_slot, i.job_id,"
    /* when the run began (PostgreSQL's running_at), for the job's mean
     * run time: a retry's from where the update kept it */
    "    CASE WHEN o.retry_ms IS NULL THEN i.running_at"
    "      ELSE i.attempt_started_at END AS running_at, o.worker,"
    "    o.started_ms, o.retry_ms, i.deployment, i.result_batch,"
    "    CASE WHEN $11::boolean THEN i.output END AS output,"
    "    i.locked_at AS locked,"
    "    i.running_at AS ran, i.finished_at AS fin_at"
    "), ob AS ("
    /* ended for good: to be published (the outbox, same transaction), one
     * row per statement holding the ids (020_result_batch: a row per
     * instance, inserted here and deleted by the mark, was three WAL
     * records per job) */
    "  INSERT INTO ax_result_batch (id, deployment, min_id, max_id, n, ids, stamped)"
    "  OVERRIDING SYSTEM VALUE"
    "  SELECT f.result_batch, f.deployment, min(f.id), max(f.id), count(*),"
    "    array_agg(f.id ORDER BY f.id), true FROM fin f"
    "  WHERE f.retry_ms IS NULL AND f.deployment = $14 GROUP BY f.result_batch, f.deployment"
    "), fo AS ("
    /* another deployment's: a row each in the per-instance outbox, which
     * that deployment's publisher reads (outbox.pending) */
    "  INSERT INTO ax_result_outbox (deployment, instance_id)"
    "  SELECT f.deployment, f.id FROM fin f WHERE f.retry_ms IS NULL AND f.deployment <> $14"
    "  ON CONFLICT DO NOTHING"
    /* An attempt that did not end its instance (a retry) gets its row in
     * job_attempt_log; the final one is on the state row (above: per job a
     * heap tuple, a primary-key entry and, later, the retention's delete
     * fewer; BENCHMARKS.md, "Issue #13: the final attempt on the state
     * row"). The insert skips a row that exists instead of ON CONFLICT DO
     * NOTHING, whose speculative insertion writes one more WAL record per
     * row (BENCHMARKS.md, issue #13): the CAS above holds each instance's
     * state row, so no other finish inserts the same key concurrently
     * (a clash with the probe split, which holds the row while it
     * inserts, is a unique violation: the callback persists the batch
     * again one result at a time, services/callback/consume.c, in a new
     * snapshot that sees the row and skips it). */
    "), att AS ("
    "  INSERT INTO job_attempt_log (instance_id, attempt, worker, outcome, exit_code,"
    "    error_class, error, started_at, finished_at)"
    "  SELECT f.id, f.attempt, f.worker, f.outcome, f.exit_code, f.error_class, f.error,"
    "    to_timestamp(f.started_ms::float8 / 1000), f.finished_at FROM fin f"
    "  WHERE f.retry_ms IS NOT NULL AND NOT EXISTS (SELECT 1 FROM job_attempt_log a"
    "   WHERE a.instance_id = f.id AND a.attempt = f.attempt)"
    "), fd AS MATERIALIZED ("
    /* the instances ended for good with their definitions: flow stage and
     * shard parent links, and what their results carry */
    "  SELECT fin.*, d.id AS def, d.flow_run_id, d.parent_id, d.job_name, d.trace_id,"
    "    d.idempotency_key, d.nominal_time, d.scheduled_at FROM fin"
    "  LEFT JOIN instance_def d ON d.id = fin.id WHERE fin.retry_ms IS NULL"
    "), links AS ("
    "  SELECT id, flow_run_id, parent_id, outcome FROM fd"
    "  WHERE flow_run_id IS NOT NULL OR parent_id IS NOT NULL"
    "), s AS ("
    /* an instance cut by the backlog cap never ran: not a run, not a
     * failure of the job (its circuit stays as it is) */
    "  SELECT job_id, count(*) FILTER (WHERE holds_slot) AS slots,"
    "    count(*) FILTER (WHERE error_class IS DISTINCT FROM 'backlog_full'"
    "      AND (worker IS DISTINCT FROM 'axctl' OR error_class IS DISTINCT FROM 'cancelled')) AS n,"
    "    count(*) FILTER (WHERE outcome = 'SUCCESS') AS ok,"
    "    count(*) FILTER (WHERE outcome NOT IN ('SUCCESS', 'CANCELLED')"
    "      AND error_class IS DISTINCT FROM 'backlog_full') AS bad,"
    "    avg(date_part('epoch', finished_at - running_at) * 1000) AS mean_ms"
    "  FROM fin WHERE job_id IS NOT NULL GROUP BY job_id"
    ")"
    /* $11: the results themselves, as the outbox would read them after
     * the commit (outbox.pending's columns), with their batch row: the
     * publisher carries them instead (services/callback/publish.c) */
    " SELECT 'r', fd.id::text, (fd.def IS NOT NULL)::text, fd.result_batch, fd.job_name,"
    "   fd.outcome::text, fd.attempt,"
    "   fd.exit_code, fd.error_class, fd.error, coalesce(fd.output, ''), fd.trace_id,"
    "   fd.idempotency_key, (extract(epoch FROM fd.nominal_time) * 1000)::bigint,"
    "   (extract(epoch FROM fd.scheduled_at) * 1000)::bigint,"
    "   (extract(epoch FROM fd.locked) * 1000)::bigint,"
    "   (extract(epoch FROM fd.ran) * 1000)::bigint,"
    "   (extract(epoch FROM fd.fin_at) * 1000)::bigint"
    "   FROM fd WHERE $11::boolean AND fd.deployment = $14"
    " UNION ALL SELECT 'i', id::text, (retry_ms IS NOT NULL)::text" FIN_NONE " FROM fin"
    /* an 'r' row stands for its 'i' row (ended for good, not retried; of
     * this deployment: another's is published by its own publisher) */
    "   WHERE NOT $11::boolean OR retry_ms IS NOT NULL OR deployment <> $14"
    " UNION ALL SELECT 'f', id::text, (outcome = 'SUCCESS')::text" FIN_NONE " FROM links"
    "   WHERE flow_run_id IS NOT NULL"
    " UNION ALL SELECT 'c', id::text, ''" FIN_NONE " FROM links WHERE parent_id IS NOT NULL"
    /* per job: slots given back, results, successes, failures, mean run
     * time — applied by sql_jobs just before the commit */
    " UNION ALL SELECT 's', job_id::text, concat_ws(',', slots, n, ok, bad, mean_ms)" FIN_NONE
    " FROM s");

enum { FIN_KIND, FIN_ID, FIN_VAL, FIN_BATCH, FIN_RESULT };
enum { FIN_ARGS = AX__FIN_ARGS };

/* qsort's order of the batch: by instance, then by position in the batch
 * (consumption order) */
static int by_instance(const void *x, const void *y) {
    const ax_outcome_in_t *const *a = x, *const *b = y;
    if ((*a)->instance_id != (*b)->instance_id)
        return (*a)->instance_id < (*b)->instance_id ? -1 : 1;
    return *a < *b ? -1 : *a > *b;
}

int ax__outcome_finish_params(ax_strbuf_t *a, const ax_outcome_in_t *in, size_t n, int64_t *lo,
                              int64_t *hi) {
    int rc = arrs_begin(a, FIN_ARGS);
    const ax_outcome_in_t **by = n ? malloc(n * sizeof *by) : NULL;
    *lo = *hi = 0;
    if (n && !by)
        rc = AX_ERR_NOMEM;
    if (by && rc == 0) {
        for (size_t i = 0; i < n; i++)
            by[i] = &in[i];
        qsort(by, n, sizeof *by, by_instance);
        *lo = by[0]->instance_id;
        *hi = by[n - 1]->instance_id;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ax_outcome_in_t *o = by[i];
        /* the same attempt's result twice (delivered again, or a lost
         * lease's TIMEOUT beside the run's own result): the first consumed
         * takes effect, as it would in batches of its own; the other is
         * stale */
        if (i > 0 && o->instance_id == by[i - 1]->instance_id && o->attempt == by[i - 1]->attempt)
            continue;
        if (ax_pgarr_int(&a[0], o->instance_id) < 0 || ax_pgarr_int(&a[1], o->attempt) < 0 ||
            ax_pgarr_text(&a[2], ax_outcome_name(o->outcome)) < 0 ||
            (o->exit_code_set ? ax_pgarr_int(&a[3], o->exit_code)
                              : ax_pgarr_text(&a[3], NULL)) < 0 ||
            ax_pgarr_text(&a[4], o->error_class) < 0 || ax_pgarr_text(&a[5], o->error) < 0 ||
            ax_pgarr_text(&a[6], o->output) < 0 || ax_pgarr_text(&a[7], o->worker) < 0 ||
            (o->started_ms > 0 ? ax_pgarr_int(&a[8], o->started_ms)
                               : ax_pgarr_text(&a[8], NULL)) < 0 ||
            (o->retry_ms >= 0 ? ax_pgarr_int(&a[9], o->retry_ms)
                              : ax_pgarr_text(&a[9], NULL)) < 0)
            rc = AX_ERR_NOMEM;
    }
    free(by);
    if (rc == 0)
        for (int k = 0; k < FIN_ARGS; k++)
            if (ax_pgarr_end(&a[k]) < 0)
                rc = AX_ERR_NOMEM;
    return rc;
}

void ax__outcome_parse_jobstat(const char *t, ax_outcome_jobstat_t *j) {
    int64_t v[4] = {0};
    char *end = NULL;
    for (int k = 0; k < 4; k++) {
        v[k] = strtoll(t, &end, 10);
        t = *end == ',' ? end + 1 : end;
    }
    j->slots = v[0];
    j->n = v[1];
    j->ok = v[2];
    j->bad = v[3];
    j->has_mean = *t != '\0';
    j->mean_ms = j->has_mean ? strtod(t, NULL) : 0;
}

static int finish_rows(const PGresult *r, ax_outcome_finished_t *f) {
    size_t rows = (size_t)PQntuples(r);
    f->ended = calloc(rows + 1, sizeof *f->ended);
    f->flows = calloc(rows + 1, sizeof *f->flows);
    f->children = calloc(rows + 1, sizeof *f->children);
    f->jobs = calloc(rows + 1, sizeof *f->jobs);
    f->results = calloc(rows + 1, sizeof *f->results);
    if (!f->ended || !f->flows || !f->children || !f->jobs || !f->results)
        return AX_ERR_NOMEM;
    for (int i = 0; i < (int)rows; i++) {
        const char *val = PQgetvalue(r, i, FIN_VAL);
        int64_t id = ax_pg_int(r, i, FIN_ID);
        switch (PQgetvalue(r, i, FIN_KIND)[0]) {
        case 'i':
            f->ended[f->nended++] = (ax_outcome_ended_t){id, strcmp(val, "true") == 0};
            break;
        case 'f':
            f->flows[f->nflows++] = (ax_outcome_flow_t){id, strcmp(val, "true") == 0};
            break;
        case 'c':
            f->children[f->nchildren++] = id;
            break;
        case 's':
            f->jobs[f->njobs].job_id = id;
            ax__outcome_parse_jobstat(val, &f->jobs[f->njobs++]);
            break;
        case 'r': {
            /* ended for good: its 'i' row (not retried) is not sent */
            f->ended[f->nended++] = (ax_outcome_ended_t){id, 0};
            ax_outcome_result_t *o = &f->results[f->nresults++];
            o->batch = ax_pg_int(r, i, FIN_BATCH);
            o->res.instance_id = id;
            /* without its definition (cannot be): only leaves the outbox,
             * as outbox.pending reads it */
            o->present = strcmp(val, "true") == 0;
            if (o->present && ax__result_row(r, i, FIN_RESULT, &o->res) < 0)
                return AX_ERR_NOMEM;
            break;
        }
        }
    }
    return 0;
}

static int finish_run(ax_pg_t *pg, int begin, const char *deployment, const ax_outcome_in_t *in,
                      size_t n, int results, ax_outcome_finished_t *ret, char *errbuf,
                      size_t errlen) {
    memset(ret, 0, sizeof *ret);
    ax_strbuf_t a[FIN_ARGS];
    /* $11 carried results, $12 and $13 the batch's id range, $14 the
     * deployment */
    enum { CARRY = FIN_ARGS, LO, HI, DEPLOYMENT, NPARAMS };
    const char *p[NPARAMS];
    /* "" is a deployment (topic.prefix may be empty); NULL is not */
    if (!deployment)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "%s: no deployment", st_finish.name);
    int64_t lo, hi;
    int rc = ax__outcome_finish_params(a, in, n, &lo, &hi);
    for (int k = 0; k < FIN_ARGS; k++)
        p[k] = a[k].s;
    if (rc < 0) {
        arrs_free(a, FIN_ARGS);
        return nomem(errbuf, errlen, st_finish.name);
    }
    ax_num_t nlo, nhi;
    p[CARRY] = results ? "t" : "f";
    p[LO] = ax_num(&nlo, lo);
    p[HI] = ax_num(&nhi, hi);
    p[DEPLOYMENT] = deployment;
    PGresult *r = NULL;
    rc = begin ? ax_stmt_run_framed(pg, 1, &st_finish, NPARAMS, p, 0, &r, errbuf, errlen)
               : ax_stmt_run(pg, &st_finish, NPARAMS, p, NULL, NULL, &r, errbuf, errlen);
    arrs_free(a, FIN_ARGS);
    if (rc < 0)
        return rc;
    rc = finish_rows(r, ret);
    PQclear(r);
    if (rc < 0) {
        ax_outcome_finished_free(ret);
        return nomem(errbuf, errlen, st_finish.name);
    }
    return 0;
}

int ax_store_outcome_finish(ax_pg_t *pg, const char *deployment, const ax_outcome_in_t *in,
                            size_t n, int results, ax_outcome_finished_t *ret, char *errbuf,
                            size_t errlen) {
    return finish_run(pg, 0, deployment, in, n, results, ret, errbuf, errlen);
}

int ax_store_outcome_finish_begin(ax_pg_t *pg, const char *deployment, const ax_outcome_in_t *in,
                                  size_t n, int results, ax_outcome_finished_t *ret,
                                  char *errbuf, size_t errlen) {
    return finish_run(pg, 1, deployment, in, n, results, ret, errbuf, errlen);
}

void ax_outcome_finished_free(ax_outcome_finished_t *f) {
    if (!f)
        return;
    free(f->ended);
    free(f->flows);
    free(f->children);
    free(f->jobs);
    for (size_t i = 0; f->results && i < f->nresults; i++)
        ax_result_clear(&f->results[i].res);
    free(f->results);
    memset(f, 0, sizeof *f);
}

/* ---- the jobs of a batch --------------------------------------------------------------- */

/* The jobs touched by a batch, in the batch's transaction but as its last
 * statement, so the job rows — shared by every callback process finishing
 * the same job — stay locked only until the commit that follows (locked
 * in id order).
 * Its circuit_state / circuit_opened_at / consecutive_failures CASEs are
 * ax_circuit_on_results() (core/circuit.c) in SQL, kept here so the batch
 * needs no extra round trip while it holds the job rows:
 * tests/unit/test_circuit.c checks the module against these CASEs. Change
 * both together. */
AX_STMT(st_jobs, "outcome.jobs",
    "WITH s AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[],"
    "  $5::bigint[], $6::float8[]) AS s(job_id, slots, n, ok, bad, mean_ms)),"
    " l AS (SELECT j.id FROM job j JOIN s ON s.job_id = j.id ORDER BY j.id FOR UPDATE OF j"
    "), jobs AS ("
    /* statistics, concurrency slots, and the circuit breaker: a success
     * closes it; failures count, and open it at the threshold (a failed
     * half-open probe opens it again) */
    "  UPDATE job j SET running_count = j.running_count - s.slots, runs = j.runs + s.n,"
    "    avg_run_ms = CASE WHEN s.mean_ms IS NULL THEN j.avg_run_ms"
    "                      WHEN j.avg_run_ms IS NULL THEN s.mean_ms"
    "                      ELSE j.avg_run_ms * 0.7 + s.mean_ms * 0.3 END,"
    "    consecutive_failures = CASE WHEN s.ok > 0 THEN 0"
    "                                ELSE j.consecutive_failures + s.bad END,"
    "    circuit_state = CASE"
    "      WHEN s.ok > 0 THEN 'closed'"
    /* a half-open probe that did not succeed (failed, or was cancelled)
     * opens the circuit again */
    "      WHEN j.circuit_state = 'half_open' THEN 'open'"
    "      WHEN s.bad > 0 AND j.circuit_threshold > 0"
    "        AND j.consecutive_failures + s.bad >= j.circuit_threshold THEN 'open'"
    "      ELSE j.circuit_state END,"
    "    circuit_opened_at = CASE"
    "      WHEN s.ok > 0 THEN NULL"
    "      WHEN j.circuit_state = 'half_open' THEN now()"
    "      WHEN s.bad > 0 AND j.circuit_threshold > 0 AND j.circuit_state = 'closed'"
    "        AND j.consecutive_failures + s.bad >= j.circuit_threshold THEN now()"
    "      ELSE j.circuit_opened_at END"
    "  FROM s JOIN l ON l.id = s.job_id WHERE j.id = s.job_id"
    "  RETURNING j.name, j.circuit_state, j.consecutive_failures,"
    "    j.circuit_opened_at = now() AS opened_now"
    ")"
    " SELECT 'j', name, consecutive_failures::text FROM jobs WHERE opened_now");

enum { JOBS_KIND, JOBS_NAME, JOBS_FAILURES };
enum { JOBS_ARGS = 6 };

static int jobs_run(ax_pg_t *pg, const ax_outcome_jobstat_t *jobs, size_t n, int commit,
                    ax_outcome_opened_t **ret_opened, size_t *ret_nopened, char *errbuf,
                    size_t errlen) {
    *ret_opened = NULL;
    *ret_nopened = 0;
    ax_strbuf_t a[JOBS_ARGS];
    const char *p[JOBS_ARGS];
    int rc = arrs_begin(a, JOBS_ARGS);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ax_outcome_jobstat_t *j = &jobs[i];
        char mean[40];
        snprintf(mean, sizeof mean, "%.17g", j->mean_ms);
        if (ax_pgarr_int(&a[0], j->job_id) < 0 || ax_pgarr_int(&a[1], j->slots) < 0 ||
            ax_pgarr_int(&a[2], j->n) < 0 || ax_pgarr_int(&a[3], j->ok) < 0 ||
            ax_pgarr_int(&a[4], j->bad) < 0 ||
            ax_pgarr_text(&a[5], j->has_mean ? mean : NULL) < 0) /* if any ran */
            rc = AX_ERR_NOMEM;
    }
    if (rc == 0)
        rc = arrs_end(a, JOBS_ARGS, p);
    if (rc < 0) {
        arrs_free(a, JOBS_ARGS);
        return nomem(errbuf, errlen, st_jobs.name);
    }
    PGresult *r = NULL;
    rc = commit ? ax_stmt_run_framed(pg, 0, &st_jobs, JOBS_ARGS, p, 1, &r, errbuf, errlen)
                : ax_stmt_run(pg, &st_jobs, JOBS_ARGS, p, NULL, NULL, &r, errbuf, errlen);
    arrs_free(a, JOBS_ARGS);
    if (rc < 0)
        return rc;
    size_t rows = (size_t)PQntuples(r);
    ax_outcome_opened_t *v = rows ? calloc(rows, sizeof *v) : NULL;
    if (rows && !v) {
        PQclear(r);
        return nomem(errbuf, errlen, st_jobs.name);
    }
    for (size_t i = 0; i < rows; i++) {
        v[i].job = ax_pg_strdup(r, (int)i, JOBS_NAME);
        v[i].consecutive_failures = ax_pg_int(r, (int)i, JOBS_FAILURES);
    }
    PQclear(r);
    *ret_opened = v;
    *ret_nopened = rows;
    return 0;
}

int ax_store_outcome_jobs(ax_pg_t *pg, const ax_outcome_jobstat_t *jobs, size_t n,
                          ax_outcome_opened_t **ret_opened, size_t *ret_nopened, char *errbuf,
                          size_t errlen) {
    return jobs_run(pg, jobs, n, 0, ret_opened, ret_nopened, errbuf, errlen);
}

int ax_store_outcome_jobs_commit(ax_pg_t *pg, const ax_outcome_jobstat_t *jobs, size_t n,
                                 ax_outcome_opened_t **ret_opened, size_t *ret_nopened,
                                 char *errbuf, size_t errlen) {
    return jobs_run(pg, jobs, n, 1, ret_opened, ret_nopened, errbuf, errlen);
}

void ax_outcome_opened_free(ax_outcome_opened_t *v, size_t n) {
    for (size_t i = 0; v && i < n; i++)
        free(v[i].job);
    free(v);
}

/* ---- what the policies read ------------------------------------------------------------ */

AX_STMT(st_retry_jobs, "outcome.retry_jobs",
        "SELECT i.id, i.attempt, j.retry_max, j.retry_initial_ms, j.retry_multiplier,"
        "  j.retry_max_ms, j.retry_jitter_ms, j.retry_rules::text, j.name,"
        /* pending retries, counted only up to the budget */
        "  (SELECT count(*) FROM (SELECT 1 FROM instance_state q"
        "    WHERE q.retrying AND q.deployment = $2"
        "    LIMIT $3::bigint + 1) b)"
        " FROM instance_state i JOIN job j ON j.id = i.job_id"
        " WHERE i.id = ANY($1::bigint[]) AND i.state IN ('LOCKED', 'RUNNING')");
enum { RJ_ID, RJ_ATTEMPT, RJ_MAX, RJ_INITIAL, RJ_MULT, RJ_MAX_MS, RJ_JITTER, RJ_RULES, RJ_NAME,
       RJ_PENDING };

int ax_store_outcome_retry_jobs(ax_pg_t *pg, const int64_t *ids, size_t n,
                                const char *deployment, int64_t budget,
                                ax_outcome_retry_jobs_t *ret, char *errbuf, size_t errlen) {
    memset(ret, 0, sizeof *ret);
    ax_strbuf_t b = {0};
    ax_num_t nb;
    if (ax_pgarr_ints(&b, ids, n) < 0) {
        ax_strbuf_free(&b);
        return nomem(errbuf, errlen, st_retry_jobs.name);
    }
    const char *p[] = {b.s, deployment, ax_num(&nb, budget)};
    PGresult *r = NULL;
    int rc = ax_stmt_run(pg, &st_retry_jobs, 3, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&b);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    ret->rows = rows ? calloc((size_t)rows, sizeof *ret->rows) : NULL;
    if (rows && !ret->rows) {
        PQclear(r);
        return nomem(errbuf, errlen, st_retry_jobs.name);
    }
    ret->pending = rows ? ax_pg_int(r, 0, RJ_PENDING) : 0;
    for (int i = 0; i < rows; i++) {
        ax_outcome_retry_job_t *o = &ret->rows[i];
        o->instance_id = ax_pg_int(r, i, RJ_ID);
        o->attempt = (int32_t)ax_pg_int(r, i, RJ_ATTEMPT);
        o->retry_max = (int32_t)ax_pg_int(r, i, RJ_MAX);
        o->initial_ms = ax_pg_int(r, i, RJ_INITIAL);
        o->multiplier = atof(PQgetvalue(r, i, RJ_MULT));
        o->max_ms = ax_pg_int(r, i, RJ_MAX_MS);
        o->jitter_ms = ax_pg_int(r, i, RJ_JITTER);
        o->rules = ax_pg_strdup(r, i, RJ_RULES);
        o->job = ax_pg_strdup(r, i, RJ_NAME);
        ret->n++;
    }
    PQclear(r);
    return 0;
}

void ax_outcome_retry_jobs_free(ax_outcome_retry_jobs_t *r) {
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++) {
        free(r->rows[i].rules);
        free(r->rows[i].job);
    }
    free(r->rows);
    memset(r, 0, sizeof *r);
}

AX_STMT(st_probe_jobs, "outcome.probe_jobs",
        "SELECT i.id, i.attempt, j.shard_base, j.max_shards FROM instance_state i"
        " JOIN job j ON j.id = i.job_id WHERE i.id = ANY($1::bigint[])"
        " AND i.shard_mode = 'probe' AND i.shards_pending IS NULL"
        " AND i.state IN ('LOCKED', 'RUNNING')");
enum { PJ_ID, PJ_ATTEMPT, PJ_BASE, PJ_MAX };

int ax_store_outcome_probe_jobs(ax_pg_t *pg, const int64_t *ids, size_t n,
                                ax_outcome_probe_job_t **ret, size_t *ret_n, char *errbuf,
                                size_t errlen) {
    *ret = NULL;
    *ret_n = 0;
    ax_strbuf_t b = {0};
    if (ax_pgarr_ints(&b, ids, n) < 0) {
        ax_strbuf_free(&b);
        return nomem(errbuf, errlen, st_probe_jobs.name);
    }
    const char *p[] = {b.s};
    PGresult *r = NULL;
    int rc = ax_stmt_run(pg, &st_probe_jobs, 1, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&b);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    ax_outcome_probe_job_t *v = rows ? calloc((size_t)rows, sizeof *v) : NULL;
    if (rows && !v) {
        PQclear(r);
        return nomem(errbuf, errlen, st_probe_jobs.name);
    }
    for (int i = 0; i < rows; i++)
        v[i] = (ax_outcome_probe_job_t){ax_pg_int(r, i, PJ_ID),
                                        (int32_t)ax_pg_int(r, i, PJ_ATTEMPT),
                                        ax_pg_int(r, i, PJ_BASE), ax_pg_int(r, i, PJ_MAX)};
    PQclear(r);
    *ret = v;
    *ret_n = (size_t)rows;
    return 0;
}

/* ---- shards and flows -------------------------------------------------------------------- */

AX_STMT(st_shards_done, "outcome.shards_done",
        "SELECT d FROM (SELECT ax_shard_child_done(x) AS d"
        "  FROM unnest($1::bigint[]) AS x ORDER BY x) s WHERE d IS NOT NULL");

int ax_store_outcome_shards_done(ax_pg_t *pg, const int64_t *children, size_t n,
                                 int64_t **ret_parents, size_t *ret_n, char *errbuf,
                                 size_t errlen) {
    *ret_parents = NULL;
    *ret_n = 0;
    ax_strbuf_t b = {0};
    if (ax_pgarr_ints(&b, children, n) < 0) {
        ax_strbuf_free(&b);
        return nomem(errbuf, errlen, st_shards_done.name);
    }
    const char *p[] = {b.s};
    PGresult *r = NULL;
    int rc = ax_stmt_run(pg, &st_shards_done, 1, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&b);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    int64_t *v = rows ? malloc((size_t)rows * sizeof *v) : NULL;
    if (rows && !v) {
        PQclear(r);
        return nomem(errbuf, errlen, st_shards_done.name);
    }
    for (int i = 0; i < rows; i++)
        v[i] = ax_pg_int(r, i, 0);
    PQclear(r);
    *ret_parents = v;
    *ret_n = (size_t)rows;
    return 0;
}

AX_STMT(st_probes_split, "outcome.probes_split",
        "WITH x AS (SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[],"
        "  $4::bigint[]) AS x(id, n, worker, started_ms)),"
        " p AS (SELECT x.* FROM x JOIN instance_state i ON i.id = x.id"
        "  AND i.state IN ('LOCKED', 'RUNNING') AND i.shard_mode = 'probe'"
        "  AND i.shards_pending IS NULL FOR UPDATE OF i),"
        " a AS (INSERT INTO job_attempt_log (instance_id, attempt, worker, outcome,"
        "  error_class, error, started_at, finished_at)"
        "  SELECT p.id, i.attempt, p.worker, 'SUCCESS', 'probe',"
        "   'size probe: ' || p.n || ' shard(s)', to_timestamp(p.started_ms / 1000.0),"
        "   clock_timestamp() FROM p JOIN instance_state i ON i.id = p.id"
        "  ON CONFLICT DO NOTHING)"
        " SELECT ax_shard_expand(id, n) FROM p ORDER BY id");

int ax_store_outcome_probes_split(ax_pg_t *pg, const ax_outcome_probe_t *pr, size_t n,
                                  char *errbuf, size_t errlen) {
    ax_strbuf_t a[4];
    const char *p[4];
    int rc = arrs_begin(a, 4);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (ax_pgarr_int(&a[0], pr[i].instance_id) < 0 || ax_pgarr_int(&a[1], pr[i].shards) < 0 ||
            ax_pgarr_text(&a[2], pr[i].worker) < 0 || ax_pgarr_int(&a[3], pr[i].started_ms) < 0)
            rc = AX_ERR_NOMEM;
    if (rc == 0)
        rc = arrs_end(a, 4, p);
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_probes_split, 4, p, NULL, NULL, NULL, errbuf, errlen);
    else
        rc = nomem(errbuf, errlen, st_probes_split.name);
    arrs_free(a, 4);
    return rc;
}

AX_STMT(st_flows_done, "outcome.flows_done",
        "SELECT ax_flow_stage_done(x.id, x.ok)"
        " FROM unnest($1::bigint[], $2::boolean[]) AS x(id, ok) ORDER BY x.id");

int ax_store_outcome_flows_done(ax_pg_t *pg, const ax_outcome_flow_t *f, size_t n, char *errbuf,
                                size_t errlen) {
    ax_strbuf_t a[2];
    const char *p[2];
    int rc = arrs_begin(a, 2);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (ax_pgarr_int(&a[0], f[i].instance_id) < 0 ||
            ax_pgarr_text(&a[1], f[i].ok ? "true" : "false") < 0)
            rc = AX_ERR_NOMEM;
    if (rc == 0)
        rc = arrs_end(a, 2, p);
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_flows_done, 2, p, NULL, NULL, NULL, errbuf, errlen);
    else
        rc = nomem(errbuf, errlen, st_flows_done.name);
    arrs_free(a, 2);
    return rc;
}

AX_STMT(st_notify_due, "outcome.notify_due", "SELECT pg_notify('ax_due', $1)");

int ax_store_outcome_notify_due(ax_pg_t *pg, const char *deployment, char *errbuf,
                                size_t errlen) {
    const char *p[] = {deployment};
    return ax_stmt_run(pg, &st_notify_due, 1, p, NULL, NULL, NULL, errbuf, errlen);
}
