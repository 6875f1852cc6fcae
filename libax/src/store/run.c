/*
 * run.c — the executor's instance transitions (ax/store_run.h): claim,
 * start, lease renewal, cancel polls, hand-back. Hot path.
 *
 * Every statement finds its rows by primary key (id = ANY; the claim's
 * update, joined to its batch, by id within the batch's range) whatever
 * the planner's statistics say: the queues' partial indexes of instance_state
 * are on generated columns (queued, flying, active, retrying) that no
 * statement here names, so a state condition next to id = ANY cannot make
 * the planner walk a queue instead. Before the split it could: with
 * job_instance_active (state <> 'FINISHED') and the statistics of before a
 * burst, each start of 16 runs walked every unfinished instance, 15-200 ms
 * with 40,000 waiting, until autovacuum analyzed (issue #12's burst drain;
 * BENCHMARKS.md, tests/bench/explain_executor.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/store_run.h"
#include "store_int.h"

/* One statement claims every instance of jobs without a concurrency limit:
 * LOCKED, this worker, lease = factor x the job's average run time within
 * the bounds. id = ANY($2): primary-key lookups, linear in the batch
 * whatever the planner believes about the partial indexes. The CAS is the
 * UPDATE's own condition (state and attempt, re-checked on the latest
 * version when a concurrent claim got there first), not a SELECT ... FOR
 * UPDATE before it: that lock wrote a WAL record per row besides the HOT
 * update (BENCHMARKS.md, issue #13). The rows are still visited in id
 * order (c, sorted, drives the primary-key lookups). Each id's attempt
 * comes from the batch itself, one primary-key lookup per entry (the
 * LIMIT keeps the lookup a subquery, so the batch is always the outer
 * side: a join was planned with the batch's unnest rescanned per row),
 * not from array_position(), which scanned the whole array once per row.
 * The UPDATE's CAS compares the state with c's (SCHEDULED, read there), a
 * join condition, not with a constant: with the statistics of a table
 * analyzed near-empty a constant SCHEDULED was estimated at one row, and
 * the update became a nested loop of every SCHEDULED row x the batch
 * (2.2 s for 1,024 of 20,000; with the same statistics a hash join that
 * read the whole table, 18 ms, and with id = ANY beside it one of the
 * batch's rows by primary key, 5 ms). A concurrent claim still makes it
 * fail: the re-check on the row's latest version compares that version's
 * state with c's.
 * That guard is now the batch's id range ($7, $8: its least and greatest
 * id), not id = ANY($2): as the inner side of a nested loop (the plan for
 * a batch estimated small), an index scan with an array key sorts the
 * whole array again at every rescan (_bt_preprocess_array_keys, PostgreSQL
 * 15), so a claim of n rows cost n sorts of n ids — 54 ms for 1,000 rows
 * against 6.5 with the range, 168 against 12.8 for 2,000, and 13 % of
 * PostgreSQL's CPU at full load (perf; BENCHMARKS.md, "Issue #13: the
 * array keys rescanned"). Scalar bounds cost nothing per rescan, and a
 * plan without the nested loop still reads only the batch's id range.
 * (Every execution is planned for its parameters, force_custom_plan: the
 * estimate came from the statistics, not from a cached plan.) Such
 * statistics are what a quiet hour leaves before a burst, and what every
 * bench_exec run leaves for the next (its cleanup's VACUUM ANALYZE).
 * The batch's rows are read first (b) and joined to their jobs after, once:
 * with the job table's statistics small and exact (a handful of jobs,
 * analyzed), the planner put the job's join inside the per-row loop, a
 * hash right join per batch entry (a 1,024-bucket table built, the job
 * table read and every bucket scanned for the unmatched row, 1,000 times a
 * claim: 5 % of the executor's backend at full load, perf; BENCHMARKS.md,
 * "Issue #13: the twenty-second session"). Materialized, b is one row per
 * entry before any job is looked at. */
AX_STMT(st_claim, "run.claim",
        "WITH b AS MATERIALIZED ("
        "  SELECT i.id, i.attempt, i.state, i.job_id"
        "  FROM unnest($2::bigint[], $3::int[]) AS u(id, attempt),"
        "  LATERAL (SELECT * FROM instance_state i WHERE i.id = u.id AND i.state = 'SCHEDULED'"
        "    AND i.attempt = u.attempt LIMIT 1) i"
        "), c AS MATERIALIZED ("
        "  SELECT b.id, b.attempt, b.state,"
        "    least(greatest($4::bigint * coalesce(j.avg_run_ms, 0), $5::bigint),"
        "    $6::bigint)::bigint AS lease"
        "  FROM b LEFT JOIN job j ON j.id = b.job_id"
        "  WHERE j.concurrency_limit IS NULL"
        "  ORDER BY b.id"
        ")"
        " UPDATE instance_state i SET state = 'LOCKED', worker = $1, locked_at = clock_timestamp(),"
        "  lease_expires_at = now() + c.lease * interval '1 millisecond'"
        " FROM c WHERE i.id BETWEEN $7::bigint AND $8::bigint AND i.id = c.id AND i.state = c.state"
        "  AND i.attempt = c.attempt"
        " RETURNING i.id, c.lease, i.shard_index, i.shard_total, i.shard_mode = 'probe', i.attempt");
enum { CLAIM_ID, CLAIM_LEASE, CLAIM_SHARD_INDEX, CLAIM_SHARD_TOTAL, CLAIM_PROBE, CLAIM_ATTEMPT };

AX_STMT(st_limited_lock, "run.claim_limited.lock",
        "SELECT job_id FROM instance_state WHERE id = $1::bigint AND attempt = $2::int"
        " AND state = 'SCHEDULED' FOR UPDATE");
enum { LOCK_JOB_ID };

AX_STMT(st_limited_slot, "run.claim_limited.slot",
        "UPDATE job SET running_count = running_count + 1 WHERE id = $1::bigint"
        " AND (concurrency_limit IS NULL OR running_count < concurrency_limit)"
        " RETURNING least(greatest($2::bigint * coalesce(avg_run_ms, 0), $3::bigint),"
        "   $4::bigint)::bigint");
enum { SLOT_LEASE };

AX_STMT(st_limited_take, "run.claim_limited.take",
        "UPDATE instance_state SET state = 'LOCKED', worker = $2, holds_slot = true,"
        "  locked_at = clock_timestamp(),"
        "  lease_expires_at = now() + $3::bigint * interval '1 millisecond'"
        " WHERE id = $1::bigint");

/* No slot: back to the trigger, due again shortly. */
AX_STMT(st_limited_back, "run.claim_limited.hand_back",
        "UPDATE instance_state SET dispatched_at = NULL,"
        "  due_at = now() + interval '500 milliseconds' WHERE id = $1::bigint");

/* A queued claim's lease is renewed rarely: starting gives it a fresh
 * one, at least the given length. */
AX_STMT(st_start, "run.start",
        "UPDATE instance_state SET state = 'RUNNING', running_at = clock_timestamp(),"
        "  lease_expires_at = greatest(lease_expires_at,"
        "    now() + $3::bigint * interval '1 millisecond')"
        " WHERE id = ANY($2::bigint[]) AND state = 'LOCKED' AND worker = $1"
        " RETURNING id, cancel_requested_at IS NOT NULL");

AX_STMT(st_renew, "run.renew",
        "UPDATE instance_state SET lease_expires_at = now()"
        "  + $3::bigint * interval '1 millisecond'"
        " WHERE id = ANY($2::bigint[]) AND worker = $1"
        "  AND state IN ('LOCKED', 'RUNNING')"
        " RETURNING id, cancel_requested_at IS NOT NULL");
enum { HELD_ID, HELD_CANCEL };

/* "flying" (implied by the state: the same rows) lets the planner read the
 * in-flight instances' partial index instead of the whole table: without
 * it, a poll of a few thousand ids was planned as a sequential scan of
 * instance_state (125 ms against 3.4 ms over 80,000 rows, BENCHMARKS.md
 * "Issue #13: the finish and the outbox per batch"). */
AX_STMT(st_cancel_poll, "run.cancel_poll",
        "SELECT id FROM instance_state WHERE flying AND id = ANY($2::bigint[]) AND worker = $1"
        " AND cancel_requested_at IS NOT NULL AND state IN ('LOCKED', 'RUNNING')");
enum { CANCEL_ID };

AX_STMT(st_release_slots, "run.release.slots",
        "UPDATE job SET running_count = running_count - c.n"
        " FROM (SELECT job_id, count(*) AS n FROM instance_state"
        "   WHERE id = ANY($2::bigint[]) AND state = 'LOCKED' AND worker = $1"
        "   AND holds_slot GROUP BY job_id) c WHERE job.id = c.job_id");

AX_STMT(st_release, "run.release",
        "UPDATE instance_state SET state = 'SCHEDULED', worker = NULL,"
        "  locked_at = NULL, lease_expires_at = NULL, holds_slot = false"
        " WHERE id = ANY($2::bigint[]) AND state = 'LOCKED' AND worker = $1");

static int id_first_cmp(const void *key, const void *row) {
    int64_t a = *(const int64_t *)key, b = *(const int64_t *)row;
    return a < b ? -1 : a > b;
}

const void *ax_run_find(const void *rows, size_t n, size_t size, int64_t id) {
    return n ? bsearch(&id, rows, n, size, id_first_cmp) : NULL;
}

/* "{1,2,3}" of ids[0..n) in b (free with ax_strbuf_free). */
static int id_array(ax_strbuf_t *b, const int64_t *ids, size_t n, char *errbuf, size_t errlen) {
    if (ax_pgarr_ints(b, ids, n) < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
    return 0;
}

static int claimed_cmp(const void *a, const void *b) {
    int64_t x = ((const ax_run_claimed_t *)a)->instance_id;
    int64_t y = ((const ax_run_claimed_t *)b)->instance_id;
    return x < y ? -1 : x > y;
}

static int held_cmp(const void *a, const void *b) {
    int64_t x = ((const ax_run_held_t *)a)->instance_id;
    int64_t y = ((const ax_run_held_t *)b)->instance_id;
    return x < y ? -1 : x > y;
}

int ax_run_claim(ax_pg_t *pg, const char *worker, const int64_t *ids, const int32_t *attempts,
                 size_t n, const ax_run_lease_t *lease, ax_run_claimed_t **ret_rows,
                 size_t *ret_n, char *errbuf, size_t errlen) {
    *ret_rows = NULL;
    *ret_n = 0;
    ax_strbuf_t ids_a = {0}, att_a = {0};
    int rc = id_array(&ids_a, ids, n, errbuf, errlen);
    if (rc < 0)
        return rc;
    rc = ax_pgarr_begin(&att_a);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = ax_pgarr_int(&att_a, attempts[i]);
    if (rc == 0)
        rc = ax_pgarr_end(&att_a);
    if (rc < 0) {
        ax_strbuf_free(&ids_a);
        ax_strbuf_free(&att_a);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
    }
    int64_t id_lo = n ? ids[0] : 0, id_hi = n ? ids[0] : -1;
    for (size_t i = 1; i < n; i++) {
        if (ids[i] < id_lo)
            id_lo = ids[i];
        if (ids[i] > id_hi)
            id_hi = ids[i];
    }
    ax_num_t f, lo, hi, nlo, nhi;
    const char *p[] = {worker, ids_a.s, att_a.s, ax_num(&f, lease->factor),
                       ax_num(&lo, lease->min_ms), ax_num(&hi, lease->max_ms),
                       ax_num(&nlo, id_lo), ax_num(&nhi, id_hi)};
    PGresult *r = NULL;
    rc = ax_stmt_run(pg, &st_claim, 8, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&ids_a);
    ax_strbuf_free(&att_a);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    ax_run_claimed_t *out = calloc((size_t)rows + 1, sizeof *out);
    if (!out) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < rows; i++)
        out[i] = (ax_run_claimed_t){
            .instance_id = ax_pg_int(r, i, CLAIM_ID),
            .lease_ms = ax_pg_int(r, i, CLAIM_LEASE),
            .shard_index = (int)ax_pg_int(r, i, CLAIM_SHARD_INDEX),
            .shard_total = (int)ax_pg_int(r, i, CLAIM_SHARD_TOTAL),
            .probe = ax_pg_bool(r, i, CLAIM_PROBE),
            .attempt = (int32_t)ax_pg_int(r, i, CLAIM_ATTEMPT),
        };
    PQclear(r);
    qsort(out, (size_t)rows, sizeof *out, claimed_cmp);
    *ret_rows = out;
    *ret_n = (size_t)rows;
    return 0;
}

/* The statements of ax_run_claim_limited after BEGIN; the caller commits
 * on 0 and rolls back otherwise. */
static int claim_limited_txn(ax_pg_t *pg, const char *worker, int64_t id, int32_t attempt,
                             const ax_run_lease_t *lease, ax_run_limited_t *ret_result,
                             int64_t *ret_lease_ms, char *errbuf, size_t errlen) {
    ax_num_t n_id, n_att, n_f, n_lo, n_hi, n_ls;
    const char *p[] = {ax_num(&n_id, id), ax_num(&n_att, attempt)};
    PGresult *r = NULL;
    int rc = ax_stmt_run(pg, &st_limited_lock, 2, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    int gone = PQntuples(r) == 0 || PQgetisnull(r, 0, LOCK_JOB_ID);
    char job[32];
    snprintf(job, sizeof job, "%s", gone ? "" : PQgetvalue(r, 0, LOCK_JOB_ID));
    PQclear(r);
    if (gone) {
        *ret_result = AX_RUN_LIMITED_GONE;
        return 0;
    }
    const char *q[] = {job, ax_num(&n_f, lease->factor), ax_num(&n_lo, lease->min_ms),
                       ax_num(&n_hi, lease->max_ms)};
    rc = ax_stmt_run(pg, &st_limited_slot, 4, q, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    int won = PQntuples(r) == 1;
    int64_t ls = won ? ax_pg_int(r, 0, SLOT_LEASE) : 0;
    PQclear(r);
    if (!won) {
        *ret_result = AX_RUN_LIMITED_NO_SLOT;
        return ax_stmt_run(pg, &st_limited_back, 1, p, NULL, NULL, NULL, errbuf, errlen);
    }
    const char *w[] = {p[0], worker, ax_num(&n_ls, ls)};
    rc = ax_stmt_run(pg, &st_limited_take, 3, w, NULL, NULL, NULL, errbuf, errlen);
    if (rc < 0)
        return rc;
    *ret_result = AX_RUN_LIMITED_CLAIMED;
    *ret_lease_ms = ls;
    return 0;
}

int ax_run_claim_limited(ax_pg_t *pg, const char *worker, int64_t id, int32_t attempt,
                         const ax_run_lease_t *lease, ax_run_limited_t *ret_result,
                         int64_t *ret_lease_ms, char *errbuf, size_t errlen) {
    ax_run_limited_t res = AX_RUN_LIMITED_GONE;
    int64_t ls = -1;
    int rc = ax_pg_begin(pg, errbuf, errlen);
    if (rc < 0)
        return rc;
    rc = claim_limited_txn(pg, worker, id, attempt, lease, &res, &ls, errbuf, errlen);
    if (rc == 0)
        rc = ax_pg_commit(pg, errbuf, errlen);
    if (rc < 0) {
        ax_pg_rollback(pg);
        return rc;
    }
    *ret_result = res;
    if (ret_lease_ms)
        *ret_lease_ms = ls;
    return 0;
}

/* Run a batch statement ($1 worker, $2 ids, $3 lease) returning (id, flag). */
static int held_rows(ax_pg_t *pg, ax_stmt_t *st, const char *worker, const int64_t *ids,
                     size_t n, int64_t lease_ms, ax_run_held_t **ret_rows, size_t *ret_n,
                     char *errbuf, size_t errlen) {
    *ret_rows = NULL;
    *ret_n = 0;
    ax_strbuf_t a = {0};
    int rc = id_array(&a, ids, n, errbuf, errlen);
    if (rc < 0)
        return rc;
    ax_num_t ls;
    const char *p[] = {worker, a.s, ax_num(&ls, lease_ms)};
    PGresult *r = NULL;
    rc = ax_stmt_run(pg, st, 3, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&a);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    ax_run_held_t *out = calloc((size_t)rows + 1, sizeof *out);
    if (!out) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < rows; i++)
        out[i] = (ax_run_held_t){ax_pg_int(r, i, HELD_ID), ax_pg_bool(r, i, HELD_CANCEL)};
    PQclear(r);
    qsort(out, (size_t)rows, sizeof *out, held_cmp);
    *ret_rows = out;
    *ret_n = (size_t)rows;
    return 0;
}

int ax_run_start(ax_pg_t *pg, const char *worker, const int64_t *ids, size_t n, int64_t lease_ms,
                 ax_run_held_t **ret_rows, size_t *ret_n, char *errbuf, size_t errlen) {
    return held_rows(pg, &st_start, worker, ids, n, lease_ms, ret_rows, ret_n, errbuf, errlen);
}

int ax_run_renew(ax_pg_t *pg, const char *worker, const int64_t *ids, size_t n, int64_t lease_ms,
                 ax_run_held_t **ret_rows, size_t *ret_n, char *errbuf, size_t errlen) {
    return held_rows(pg, &st_renew, worker, ids, n, lease_ms, ret_rows, ret_n, errbuf, errlen);
}

int ax_run_cancel_requested(ax_pg_t *pg, const char *worker, const int64_t *ids, size_t n,
                            int64_t **ret_ids, size_t *ret_n, char *errbuf, size_t errlen) {
    *ret_ids = NULL;
    *ret_n = 0;
    ax_strbuf_t a = {0};
    int rc = id_array(&a, ids, n, errbuf, errlen);
    if (rc < 0)
        return rc;
    const char *p[] = {worker, a.s};
    PGresult *r = NULL;
    rc = ax_stmt_run(pg, &st_cancel_poll, 2, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&a);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    int64_t *out = calloc((size_t)rows + 1, sizeof *out);
    if (!out) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < rows; i++)
        out[i] = ax_pg_int(r, i, CANCEL_ID);
    PQclear(r);
    *ret_ids = out;
    *ret_n = (size_t)rows;
    return 0;
}

int ax_run_release(ax_pg_t *pg, const char *worker, const int64_t *ids, size_t n,
                   size_t *ret_released, char *errbuf, size_t errlen) {
    ax_strbuf_t a = {0};
    int rc = id_array(&a, ids, n, errbuf, errlen);
    if (rc < 0)
        return rc;
    const char *p[] = {worker, a.s};
    PGresult *r = NULL;
    rc = ax_pg_begin(pg, errbuf, errlen);
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_release_slots, 2, p, NULL, NULL, NULL, errbuf, errlen);
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_release, 2, p, NULL, NULL, &r, errbuf, errlen);
    if (rc == 0)
        rc = ax_pg_commit(pg, errbuf, errlen);
    ax_strbuf_free(&a);
    if (rc < 0) {
        PQclear(r);
        ax_pg_rollback(pg);
        return rc;
    }
    if (ret_released)
        *ret_released = (size_t)strtoull(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    return 0;
}
