/*
 * retention.c — the retention sweep's statements (store family
 * "retention"; ax/store_retention.h).
 *
 * Each statement examines one batch of rows in primary-key order from a
 * cursor the caller keeps, deletes what may go and answers where it got
 * to: one short transaction, a bounded number of rows, never a scan of
 * the whole table. Deleting an instance_def row deletes its state row,
 * attempts and submission key (the statement trigger of 016).
 */
#include "ax/store_retention.h"

#include "store_int.h"

/* The lease still ours: a stale leader deletes nothing. */
#define FENCE                                                                                  \
    " EXISTS (SELECT 1 FROM ax_leader WHERE role = $1 AND holder = $2"                         \
    "  AND epoch = $3::bigint AND expires_at > now())"

/* Published: marked alone, or with its whole batch (023_publish_per_batch). */
#define PUBLISHED(s)                                                                           \
    " (" s ".result_published_at IS NOT NULL OR EXISTS (SELECT 1 FROM ax_result_batch rb"      \
    "  WHERE rb.id = " s ".result_batch AND rb.published_at IS NOT NULL))"

/* A live or unpublished instance: its own row and its family stay. */
#define LIVE(s) " (" s ".active OR NOT" PUBLISHED(s) ")"

enum { B_DELETED, B_SEEN, B_LAST_ID, B_LAST_MS, B_YOUNG, B_END, B_MINE };

/* The batch walks the next $8 rows of instance_state in primary-key
 * order, every deployment's, and takes the first $7 of this one's out of
 * them (`seen`): a walk of the key whatever the statistics say. With the
 * deployment in the scan's condition, statistics that knew no row of it (a
 * deployment new since the last ANALYZE) made the planner sort a
 * sequential scan of the whole table for every batch: 35-45 ms a call,
 * once a second while nothing is old enough to go, growing with the table
 * (BENCHMARKS.md, "Issue #13: the retention sweep's walk"). The cursor
 * moves to the last row examined: the walk's last, or this deployment's
 * $7th when it held more. Whether the pass stops here (`young`) is decided
 * by this deployment's last row only: another deployment's rows say
 * nothing of this one's. */
AX_STMT(st_instances, "retention.instances",
        "WITH walk AS (SELECT s.id, s.finished_at, s.active, s.result_published_at,"
        "  s.result_batch, s.deployment"
        "  FROM instance_state s WHERE s.id > $5::bigint"
        "  ORDER BY s.id LIMIT $8::bigint),"
        " mine AS (SELECT count(*) AS n FROM walk WHERE walk.deployment = $4),"
        " seen AS (SELECT * FROM walk WHERE walk.deployment = $4"
        "  ORDER BY walk.id LIMIT $7::bigint),"
        " cut AS (SELECT now() - $6::bigint * interval '1 ms' AS t),"
        /* the ids of this deployment's unconfirmed dispatch batches (a
         * leader's batches hold its own deployment's instances only): a
         * few rows, or with dispatch.transaction.ms the whole open
         * window's (~10,000 at 10,000 jobs/s); NOT IN is a hashed
         * subplan, where NOT EXISTS over the CTE scanned it for every row
         * (126 ms a call against 7.6: BENCHMARKS.md, "10 minutes at
         * 10,000 jobs/s offered with the dispatch window: a regression";
         * tests/integration/211_retention_window.sh) */
        " pend AS MATERIALIZED (SELECT unnest(ids) AS id FROM dispatch_batch"
        "  WHERE deployment = $4),"
        " gone AS MATERIALIZED (SELECT d.id, d.ctid AS tid FROM seen JOIN instance_def d"
        "  ON d.id = seen.id, cut"
        "  WHERE NOT seen.active AND" PUBLISHED("seen")
        "   AND seen.finished_at < cut.t"
        "   AND NOT EXISTS (SELECT 1 FROM instance_def c JOIN instance_state cs ON cs.id = c.id"
        "    WHERE c.parent_id = d.id AND" LIVE("cs") ")"
        "   AND (d.parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM instance_state ps"
        "    WHERE ps.id = d.parent_id AND" LIVE("ps") "))"
        "   AND (d.flow_run_id IS NULL OR NOT EXISTS (SELECT 1 FROM flow_run r"
        "    WHERE r.id = d.flow_run_id AND r.state = 'running'))"
        "   AND NOT EXISTS (SELECT 1 FROM instance_hold h WHERE h.instance_id = d.id)"
        "   AND NOT EXISTS (SELECT 1 FROM dispatch_pending p WHERE p.instance_id = d.id)"
        "   AND d.id NOT IN (SELECT pend.id FROM pend)"
        "   AND" FENCE "),"
        /* by the row's place gone already read, not a second descent of
         * the primary key (a definition is never updated in place on the
         * hot path; one moved meanwhile is left for the next pass) */
        " del AS (DELETE FROM instance_def d USING gone WHERE d.ctid = gone.tid"
        "  AND d.id = gone.id RETURNING d.id),"
        /* a published results batch goes with the last of its instances
         * (those it still lists and that still name it; one a recovery
         * marked alone has its own time): the ones deleted, not gone's
         * (a definition moved since gone read it stays) */
        " rbd AS (DELETE FROM ax_result_batch b WHERE b.id IN (SELECT seen.result_batch"
        "   FROM seen JOIN del ON del.id = seen.id)"
        "  AND b.deployment = $4 AND b.published_at IS NOT NULL"
        "  AND NOT EXISTS (SELECT 1 FROM instance_state s WHERE s.id = ANY(b.ids)"
        "   AND s.result_batch = b.id AND s.id NOT IN (SELECT id FROM del))),"
        /* the deployment's submit-topic watermarks that stood still for the
         * retention (018_hot_writes: a Kafka position's dedupe lasts as
         * long as a submission key's; a topic recreated from offset 0 is
         * then new again) */
        /* SKIP LOCKED: a watermark an ingest holds is moving, not stale,
         * and waiting for it could deadlock with that ingest (it locks
         * the watermarks, then may wait for a submission key this
         * statement's trigger deletes) */
        " wm AS (DELETE FROM submit_offset o WHERE (o.topic, o.partition) IN ("
        "  SELECT x.topic, x.partition FROM submit_offset x, cut"
        "  WHERE x.topic = $4 || 'submit' AND x.updated_at < cut.t AND" FENCE
        "  ORDER BY x.topic, x.partition FOR UPDATE OF x SKIP LOCKED)),"
        " last AS (SELECT max(id) AS id FROM seen)"
        /* one index lookup of the last row's definition (a join here
         * was planned as a backward scan of the whole primary key) */
        " SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM walk),"
        "  CASE WHEN (SELECT n FROM mine) > $7::bigint THEN (SELECT id FROM last)"
        "   ELSE (SELECT max(id) FROM walk) END, 0,"
        "  coalesce((SELECT d.scheduled_at >= cut.t FROM instance_def d, cut"
        "   WHERE d.id = (SELECT id FROM last)), false),"
        /* the end of the table: the walk came short and the cursor is its last */
        "  (SELECT count(*) FROM walk) < $8::bigint AND (SELECT n FROM mine) <= $7::bigint,"
        "  (SELECT n FROM mine)");

/* A job's latest row stays whatever its age: the trigger resumes the
 * schedule, the misfire policy and the overlap check from it. A deleted
 * job's rows (026_job_delete_keeps_history: its delete leaves them) belong
 * to no deployment: any leader deletes them once old, the latest too. */
AX_STMT(st_ledger, "retention.ledger",
        "WITH seen AS (SELECT f.job_id, f.nominal_time, f.decided_at FROM job_fire f"
        "  WHERE (f.job_id, f.nominal_time) > ($5::bigint, to_timestamp($6::bigint / 1000.0))"
        "  ORDER BY f.job_id, f.nominal_time LIMIT $8::bigint),"
        " gone AS (SELECT seen.job_id, seen.nominal_time FROM seen"
        "  LEFT JOIN job j ON j.id = seen.job_id"
        "  WHERE (j.deployment = $4 OR j.id IS NULL)"
        "   AND seen.decided_at < now() - $7::bigint * interval '1 ms'"
        "   AND (j.id IS NULL OR EXISTS (SELECT 1 FROM job_fire l WHERE l.job_id = seen.job_id"
        "    AND l.nominal_time > seen.nominal_time))"
        "   AND" FENCE "),"
        " del AS (DELETE FROM job_fire f USING gone WHERE f.job_id = gone.job_id"
        "  AND f.nominal_time = gone.nominal_time RETURNING 1),"
        " last AS (SELECT job_id, nominal_time FROM seen ORDER BY job_id DESC, nominal_time DESC"
        "  LIMIT 1)"
        " SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM seen),"
        "  (SELECT job_id FROM last),"
        "  (SELECT floor(extract(epoch FROM nominal_time) * 1000)::bigint FROM last), false,"
        "  (SELECT count(*) FROM seen) < $8::bigint, (SELECT count(*) FROM seen)");

static int run_batch(ax_pg_t *pg, ax_stmt_t *st, int np, const char *const *p,
                     ax_retention_batch_t *ret, char *errbuf, size_t errlen) {
    PGresult *r;
    int rc = ax_stmt_run(pg, st, np, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    *ret = (ax_retention_batch_t){0};
    if (PQntuples(r) == 1) {
        ret->deleted = ax_pg_int(r, 0, B_DELETED);
        ret->seen = ax_pg_int(r, 0, B_SEEN);
        ret->last_id = ax_pg_int(r, 0, B_LAST_ID);
        ret->last_job = ret->last_id;
        ret->last_ms = ax_pg_int(r, 0, B_LAST_MS);
        ret->young = ax_pg_bool(r, 0, B_YOUNG);
        ret->end = ax_pg_bool(r, 0, B_END);
        ret->mine = ax_pg_int(r, 0, B_MINE);
    }
    PQclear(r);
    return 0;
}

int ax_store_retention_instances(ax_pg_t *pg, const ax_lease_key_t *lease,
                                 const char *deployment, int64_t after_id, int64_t keep_ms,
                                 int64_t batch, int64_t walk, ax_retention_batch_t *ret,
                                 char *errbuf, size_t errlen) {
    ax_num_t n_epoch, n_after, n_keep, n_batch, n_walk;
    if (walk < batch)
        walk = batch;
    const char *p[] = {lease->role,
                       lease->holder,
                       ax_num(&n_epoch, lease->epoch),
                       deployment,
                       ax_num(&n_after, after_id),
                       ax_num(&n_keep, keep_ms),
                       ax_num(&n_batch, batch),
                       ax_num(&n_walk, walk)};
    return run_batch(pg, &st_instances, 8, p, ret, errbuf, errlen);
}

int ax_store_retention_ledger(ax_pg_t *pg, const ax_lease_key_t *lease, const char *deployment,
                              int64_t after_job, int64_t after_ms, int64_t keep_ms,
                              int64_t batch, ax_retention_batch_t *ret, char *errbuf,
                              size_t errlen) {
    ax_num_t n_epoch, n_job, n_ms, n_keep, n_batch;
    const char *p[] = {lease->role,
                       lease->holder,
                       ax_num(&n_epoch, lease->epoch),
                       deployment,
                       ax_num(&n_job, after_job),
                       ax_num(&n_ms, after_ms),
                       ax_num(&n_keep, keep_ms),
                       ax_num(&n_batch, batch)};
    return run_batch(pg, &st_ledger, 8, p, ret, errbuf, errlen);
}
