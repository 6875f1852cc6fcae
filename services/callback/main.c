/*
 * ax-callback — closes the loop. Persists each attempt's result as
 * FINISHED + outcome with a CAS fenced by (instance, attempt): a result for
 * an attempt that is not the current one, or for an instance already
 * finished, is stale and only counted. An instance ended for good goes
 * into the results outbox in the same transaction; the batch's offsets are
 * committed then. One callback process per deployment publishes the outbox:
 * one final-outcome event per instance on the results topic, exactly once
 * as read_committed consumers see it (see "Publishing" below).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "ax/retry.h"
#include "ax/service.h"

#include "ax/alert.h"

static const char usage[] =
    "Usage: ax-callback [--config FILE] [--set KEY=VALUE]...\n\n"
    "Persists attempt results and publishes final outcomes. SIGHUP reloads the\n"
    "configuration (the keys it can apply while running: see docs/OPERATIONS.md);\n"
    "SIGTERM stops after the batch at hand.\n\n";

typedef struct pub_dlv pub_dlv_t;
struct pub_dlv {
    ax_delivery_t d; /* first: the delivery report's opaque */
    const char *topic;
    int64_t *next;   /* per results partition: highest delivered offset + 1, or -1 */
    int32_t nparts;
    /* records Kafka refused for their size in this transaction (their
     * instance, the value's length) */
    struct pub_refusal { int64_t id; size_t len; } *refused;
    size_t nrefused, caprefused;
};

/* An instance whose result Kafka refused: produced again cut (level 1:
 * without its output; 2: without output and error; 3: given up). */
struct pub_cut { int64_t id; int level; };

/* The results publisher (see "Publishing" below). */
typedef struct publisher {
    int holder;          /* holds the advisory lock lock_name ... */
    int pg_pid;          /* ... in this PostgreSQL session (of lockpg) */
    /* The lock's own connection, used for nothing else; a thread runs a
     * statement on it every PUB_PING_MS while the holder's event loop turns
     * (pub_tick) at least every PUB_HUNG_MS, so its idle_session_timeout
     * ends it only when the process is stopped or hung, never during a
     * Kafka wait. The thread sets lock_lost when the session is gone. */
    ax_pg_t *lockpg;
    pthread_t ping_thr;
    pthread_mutex_t lock_mu;
    atomic_int lock_lost, ping_stop, ping_holder;
    atomic_llong loop_ms; /* the event loop's last turn (ax_mono_ms) */
    int need_recover;    /* read the topic to its end before producing */
    /* the recovery in progress (read in slices between event-loop turns):
     * its reader, per partition the position reached (saved with every
     * chunk marked) and whether its end was reached */
    rd_kafka_t *rrk;
    int rparts, rneof;
    int64_t *rpos;
    char *reof;
    ax_strbuf_t rids;
    int64_t rchunk, rfound, rmarked, rsaved_ms;
    struct pub_cut *cuts;
    size_t ncuts, capcuts;
    int64_t next_try_ms, next_init_ms;
    rd_kafka_t *txp;     /* transactional producer (txn_id), while the holder */
    pub_dlv_t dlv;
    char lock_name[300], txn_id[300];
    struct event *timer;
} publisher_t;

typedef struct callback {
    ax_svc_t svc;
    int64_t finished, stale, published, retried;
    /* per batch: size probes that split their parent */
    ax_strbuf_t probe_ids, probe_n, probe_worker, probe_started;
    size_t nprobes;
    publisher_t pub;
} callback_t;

/* One statement persists a batch: CAS FINISHED fenced by (instance,
 * attempt) — stale and duplicate results match nothing — plus the
 * job_attempt rows, the concurrency slots given back and the jobs' run-time
 * statistics (which size future leases). */
/* Alerts: logged, counted (ax_counter "alerts.<kind>"); the webhook is
 * sent by alert_send() when alert.webhook.url is set. */
static void alert(callback_t *cb, const char *kind, const char *job, const char *text) {
    alert_raise(cb->svc.pg, kind, job, text);
}

static const char sql_finish[] =
    "WITH u AS ("
    "  SELECT * FROM unnest($1::bigint[], $2::int[], $3::ax_outcome[], $4::int[], $5::text[],"
    "    $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[])"
    "    AS u(id, attempt, outcome, exit_code, error_class, error, output, worker, started_ms,"
    "      retry_ms)"
    "), old AS ("
    /* primary-key lookups (id = ANY), locked in id order like every other
     * multi-row update of job_instance, so batches never deadlock */
    "  SELECT i.id, i.holds_slot, i.job_id, i.running_at FROM job_instance i"
    "  WHERE i.id = ANY($1::bigint[])"
    "    AND i.attempt = ($2::int[])[array_position($1::bigint[], i.id)]"
    /* an instance cut by the trigger's backlog cap, or cancelled by axctl
     * before it was claimed, is finished from SCHEDULED */
    "    AND CASE WHEN (($5::text[])[array_position($1::bigint[], i.id)] = 'backlog_full'"
    "              AND ($8::text[])[array_position($1::bigint[], i.id)] = 'ax-trigger')"
    "          OR (($5::text[])[array_position($1::bigint[], i.id)] = 'cancelled'"
    "              AND ($8::text[])[array_position($1::bigint[], i.id)] = 'axctl')"
    "        THEN i.state = 'SCHEDULED' ELSE i.state IN ('LOCKED', 'RUNNING') END"
    "    ORDER BY i.id FOR UPDATE"
    "), fin AS ("
    /* a retry: back to SCHEDULED as the next attempt, due after its delay,
     * for the trigger to dispatch; otherwise FINISHED */
    "  UPDATE job_instance i SET"
    "    state = CASE WHEN u.retry_ms IS NULL THEN 'FINISHED' ELSE 'SCHEDULED' END"
    "      ::ax_instance_state,"
    "    outcome = CASE WHEN u.retry_ms IS NULL THEN u.outcome END,"
    "    finished_at = CASE WHEN u.retry_ms IS NULL THEN clock_timestamp() END,"
    "    attempt = i.attempt + CASE WHEN u.retry_ms IS NULL THEN 0 ELSE 1 END,"
    "    due_at = CASE WHEN u.retry_ms IS NULL THEN i.due_at"
    "             ELSE now() + u.retry_ms * interval '1 millisecond' END,"
    "    dispatched_at = CASE WHEN u.retry_ms IS NULL THEN i.dispatched_at END,"
    /* a retry waits for its backoff, not for backpressure */
    "    deferred_at = CASE WHEN u.retry_ms IS NULL THEN i.deferred_at END,"
    "    worker = CASE WHEN u.retry_ms IS NULL THEN i.worker END,"
    "    locked_at = CASE WHEN u.retry_ms IS NULL THEN i.locked_at END,"
    "    running_at = CASE WHEN u.retry_ms IS NULL THEN i.running_at END,"
    "    exit_code = u.exit_code, error_class = u.error_class,"
    "    error = u.error, output = u.output, lease_expires_at = NULL, holds_slot = false"
    "  FROM u JOIN old ON old.id = u.id"
    "  WHERE i.id = u.id AND i.attempt = u.attempt"
    "  AND CASE WHEN (u.error_class = 'backlog_full' AND u.worker = 'ax-trigger')"
    "      OR (u.error_class = 'cancelled' AND u.worker = 'axctl')"
    "      THEN i.state = 'SCHEDULED' ELSE i.state IN ('LOCKED', 'RUNNING') END"
    "  RETURNING i.id, u.attempt, u.outcome, i.exit_code, i.error_class, i.error,"
    "    clock_timestamp() AS finished_at, old.holds_slot, old.job_id, old.running_at, u.worker,"
    "    u.started_ms, u.retry_ms, i.flow_run_id, i.parent_id, i.deployment"
    "), ob AS ("
    /* ended for good: to be published (the outbox, same transaction) */
    "  INSERT INTO ax_result_outbox (deployment, instance_id)"
    "  SELECT deployment, id FROM fin WHERE retry_ms IS NULL ON CONFLICT DO NOTHING"
    "), att AS ("
    "  INSERT INTO job_attempt (instance_id, attempt, worker, outcome, exit_code, error_class,"
    "    error, started_at, finished_at)"
    "  SELECT id, attempt, worker, outcome, exit_code, error_class, error,"
    "    to_timestamp(started_ms / 1000.0), finished_at FROM fin"
    "  ON CONFLICT DO NOTHING"
    "), s AS ("
    /* an instance cut by the backlog cap never ran: not a run, not a
     * failure of the job (its circuit stays as it is) */
    "  SELECT job_id, count(*) FILTER (WHERE holds_slot) AS slots,"
    "    count(*) FILTER (WHERE error_class IS DISTINCT FROM 'backlog_full'"
    "      AND (worker IS DISTINCT FROM 'axctl' OR error_class IS DISTINCT FROM 'cancelled')) AS n,"
    "    count(*) FILTER (WHERE outcome = 'SUCCESS') AS ok,"
    "    count(*) FILTER (WHERE outcome NOT IN ('SUCCESS', 'CANCELLED')"
    "      AND error_class IS DISTINCT FROM 'backlog_full') AS bad,"
    "    avg(extract(epoch FROM finished_at - running_at) * 1000) AS mean_ms"
    "  FROM fin WHERE job_id IS NOT NULL GROUP BY job_id"
    ")"
    " SELECT 'i', id::text, (retry_ms IS NOT NULL)::text FROM fin"
    " UNION ALL SELECT 'f', id::text, (outcome = 'SUCCESS')::text FROM fin"
    "   WHERE retry_ms IS NULL AND flow_run_id IS NOT NULL"
    " UNION ALL SELECT 'c', id::text, '' FROM fin WHERE retry_ms IS NULL AND parent_id IS NOT NULL"
    /* per job: slots given back, results, successes, failures, mean run
     * time — applied by sql_jobs just before the commit */
    " UNION ALL SELECT 's', job_id::text, concat_ws(',', slots, n, ok, bad, mean_ms) FROM s";

/* The jobs touched by a batch, in the batch's transaction but as its last
 * statement, so the job rows — shared by every callback process finishing
 * the same job — stay locked only until the commit that follows (locked
 * in id order). */
static const char sql_jobs[] =
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
    " SELECT 'j', name, consecutive_failures::text FROM jobs WHERE opened_now";

typedef struct finish_batch {
    ax_strbuf_t a[10];
    size_t n;
} finish_batch_t;

static void fb_begin(finish_batch_t *b) {
    memset(b, 0, sizeof *b);
    for (int k = 0; k < 10; k++)
        ax_pgarr_begin(&b->a[k]);
}

/* retry_ms < 0: final. */
static void fb_add(finish_batch_t *b, const ax_attempt_t *a, int64_t retry_ms) {
    char code[16];
    snprintf(code, sizeof code, "%d", (int)a->exit_code);
    ax_pgarr_int(&b->a[0], a->instance_id);
    ax_pgarr_int(&b->a[1], a->attempt);
    ax_pgarr_text(&b->a[2], ax_outcome_name(a->outcome));
    if (a->exit_code_set)
        ax_pgarr_int(&b->a[3], a->exit_code);
    else
        ax_pgarr_text(&b->a[3], NULL);
    ax_pgarr_text(&b->a[4], a->error_class);
    ax_pgarr_text(&b->a[5], a->error);
    ax_pgarr_text(&b->a[6], a->output);
    ax_pgarr_text(&b->a[7], a->worker);
    if (a->started_at_ms > 0)
        ax_pgarr_int(&b->a[8], a->started_at_ms);
    else
        ax_pgarr_text(&b->a[8], NULL);
    if (retry_ms >= 0)
        ax_pgarr_int(&b->a[9], retry_ms);
    else
        ax_pgarr_text(&b->a[9], NULL);
    b->n++;
}

static void fb_free(finish_batch_t *b) {
    for (int k = 0; k < 10; k++)
        ax_strbuf_free(&b->a[k]);
}

/* Apply the per-job rows ('s': job id, "slots,n,ok,bad[,mean_ms]") of a
 * finish result with sql_jobs; *jr gets its rows (circuits that opened). */
static int apply_jobs(callback_t *cb, PGresult *r, PGresult **jr, char *err, size_t errlen) {
    ax_strbuf_t a[6] = {{0}};
    for (int k = 0; k < 6; k++)
        ax_pgarr_begin(&a[k]);
    int njobs = 0;
    for (int i = 0; r && i < PQntuples(r); i++) {
        if (PQgetvalue(r, i, 0)[0] != 's')
            continue;
        long long v[4] = {0};
        const char *t = PQgetvalue(r, i, 2);
        char *end = NULL;
        for (int k = 0; k < 4; k++) {
            v[k] = strtoll(t, &end, 10);
            t = *end == ',' ? end + 1 : end;
        }
        ax_pgarr_int(&a[0], ax_pg_int(r, i, 1));
        for (int k = 0; k < 4; k++)
            ax_pgarr_int(&a[k + 1], v[k]);
        ax_pgarr_text(&a[5], *t ? t : NULL); /* mean run time, if any ran */
        njobs++;
    }
    int rc = 0;
    if (njobs) {
        const char *p[6];
        for (int k = 0; k < 6; k++) {
            ax_pgarr_end(&a[k]);
            p[k] = a[k].s;
        }
        rc = ax_pg_exec(cb->svc.pg, sql_jobs, 6, p, NULL, NULL, jr, err, errlen);
    }
    for (int k = 0; k < 6; k++)
        ax_strbuf_free(&a[k]);
    return rc;
}

/* Instances of $1 that a statement other than the finish (the last shard,
 * a size probe of 0) finished: into the outbox, to be published. */
static const char sql_outbox_finished[] =
    "INSERT INTO ax_result_outbox (deployment, instance_id)"
    " SELECT deployment, id FROM job_instance WHERE id = ANY($1::bigint[])"
    "  AND state = 'FINISHED' AND result_published_at IS NULL"
    " ON CONFLICT DO NOTHING";

/* Returns the number of results that ended an attempt (finished or
 * rescheduled), or <0; counts retries and alerts circuits that opened. */
static int fb_exec(callback_t *cb, finish_batch_t *b, int64_t *retried, char *err,
                   size_t errlen) {
    ax_svc_t *svc = &cb->svc;
    if (!b->n && !cb->nprobes)
        return 0;
    const char *p[10];
    for (int k = 0; k < 10; k++) {
        ax_pgarr_end(&b->a[k]);
        p[k] = b->a[k].s;
    }
    PGresult *r = NULL;
    /* One transaction: the batch, and the flows its instances advance. */
    int rc = ax_pg_begin(svc->pg, err, errlen);
    if (rc == 0 && b->n)
        rc = ax_pg_exec(svc->pg, sql_finish, 10, p, NULL, NULL, &r, err, errlen);
    ax_strbuf_t fids = {0}, fok = {0};
    ax_pgarr_begin(&fids);
    ax_pgarr_begin(&fok);
    int nflow = 0;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++)
        if (PQgetvalue(r, i, 0)[0] == 'f') {
            ax_pgarr_int(&fids, ax_pg_int(r, i, 1));
            ax_pgarr_text(&fok, PQgetvalue(r, i, 2));
            nflow++;
        }
    ax_pgarr_end(&fids);
    ax_pgarr_end(&fok);
    /* shards: a child that ended for good may finish its parent */
    ax_strbuf_t cids = {0};
    ax_pgarr_begin(&cids);
    int nchild = 0;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++)
        if (PQgetvalue(r, i, 0)[0] == 'c') {
            ax_pgarr_int(&cids, ax_pg_int(r, i, 1));
            nchild++;
        }
    ax_pgarr_end(&cids);
    if (rc == 0 && nchild) {
        const char *cp[] = {cids.s};
        PGresult *pr;
        rc = ax_pg_exec(svc->pg,
                        "SELECT d FROM (SELECT ax_shard_child_done(x) AS d"
                        "  FROM unnest($1::bigint[]) AS x ORDER BY x) s WHERE d IS NOT NULL",
                        1, cp, NULL, NULL, &pr, err, errlen);
        ax_strbuf_t pids = {0};
        ax_pgarr_begin(&pids);
        int nparents = 0;
        for (int i = 0; rc == 0 && i < PQntuples(pr); i++, nparents++)
            ax_pgarr_int(&pids, ax_pg_int(pr, i, 0));
        ax_pgarr_end(&pids);
        if (rc == 0)
            PQclear(pr);
        /* parents finished by their last shard are published too */
        const char *pp[] = {pids.s};
        if (rc == 0 && nparents)
            rc = ax_pg_exec(svc->pg,
                            sql_outbox_finished,
                            1, pp, NULL, NULL, NULL, err, errlen);
        ax_strbuf_free(&pids);
    }
    ax_strbuf_free(&cids);
    /* size probes: record the probe's attempt, split the parent */
    if (rc == 0 && cb->nprobes) {
        ax_pgarr_end(&cb->probe_ids);
        ax_pgarr_end(&cb->probe_n);
        ax_pgarr_end(&cb->probe_worker);
        ax_pgarr_end(&cb->probe_started);
        const char *pp[] = {cb->probe_ids.s, cb->probe_n.s, cb->probe_worker.s,
                            cb->probe_started.s};
        rc = ax_pg_exec(svc->pg,
                        "WITH x AS (SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[],"
                        "  $4::bigint[]) AS x(id, n, worker, started_ms)),"
                        " p AS (SELECT x.* FROM x JOIN job_instance i ON i.id = x.id"
                        "  AND i.state IN ('LOCKED', 'RUNNING') AND i.shard_mode = 'probe'"
                        "  AND i.shards_pending IS NULL FOR UPDATE OF i),"
                        " a AS (INSERT INTO job_attempt (instance_id, attempt, worker, outcome,"
                        "  error_class, error, started_at, finished_at)"
                        "  SELECT p.id, i.attempt, p.worker, 'SUCCESS', 'probe',"
                        "   'size probe: ' || p.n || ' shard(s)', to_timestamp(p.started_ms / 1000.0),"
                        "   clock_timestamp() FROM p JOIN job_instance i ON i.id = p.id"
                        "  ON CONFLICT DO NOTHING)"
                        " SELECT ax_shard_expand(id, n) FROM p ORDER BY id",
                        4, pp, NULL, NULL, NULL, err, errlen);
        /* a probe that found nothing (0 shards) finished its parent at
         * once: published like any other final outcome */
        if (rc == 0)
            rc = ax_pg_exec(svc->pg,
                            sql_outbox_finished,
                            1, pp, NULL, NULL, NULL, err, errlen);
    }
    if (rc == 0 && nflow) {
        const char *fp[] = {fids.s, fok.s};
        rc = ax_pg_exec(svc->pg,
                        "SELECT ax_flow_stage_done(x.id, x.ok)"
                        " FROM unnest($1::bigint[], $2::boolean[]) AS x(id, ok) ORDER BY x.id",
                        2, fp, NULL, NULL, NULL, err, errlen);
    }
    ax_strbuf_free(&fids);
    ax_strbuf_free(&fok);
    PGresult *jr = NULL;
    if (rc == 0)
        rc = apply_jobs(cb, r, &jr, err, errlen);
    if (rc == 0)
        rc = ax_pg_commit(svc->pg, err, errlen);
    if (rc < 0) {
        ax_pg_rollback(svc->pg);
        PQclear(r);
        PQclear(jr);
        return rc;
    }
    cb->nprobes = 0; /* split for good */
    int n = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        if (PQgetvalue(r, i, 0)[0] == 'i') {
            n++;
            if (strcmp(PQgetvalue(r, i, 2), "true") == 0)
                (*retried)++;
        }
    }
    for (int i = 0; jr && i < PQntuples(jr); i++) {
        char text[512];
        snprintf(text, sizeof text, "circuit of job %s opened after %s consecutive failures",
                 PQgetvalue(jr, i, 1), PQgetvalue(jr, i, 2));
        alert(cb, "circuit_open", PQgetvalue(jr, i, 1), text);
    }
    PQclear(r);
    PQclear(jr);
    return n;
}

/* ---- Publishing: each final outcome exactly once on the results topic ----
 *
 * The finish statement writes every instance it ends for good into
 * ax_result_outbox (same PostgreSQL transaction). One callback process of a
 * deployment at a time publishes: the holder of a session advisory lock,
 * with a transactional producer of a stable transactional.id — its
 * init_transactions fences the previous holder's producer (whose open
 * transaction is aborted: read_committed consumers never see it). A batch of
 * outbox rows is produced in one Kafka transaction (results and the
 * dead-letter copies of final failures), and once committed one statement
 * deletes the rows from the outbox, sets result_published_at and advances,
 * per results-topic partition, the offset up to which the topic is
 * reconciled with the rows (ax_results_offset).
 *
 * A holder that starts, takes over, or does not know whether its last
 * transaction was committed and marked (a failed commit or mark: PostgreSQL
 * or Kafka down, a crash) first recovers from the topic itself: it reads it
 * read_committed from the stored offsets to its end, marks every instance it
 * finds there published and advances the offsets, and only then publishes
 * anything new. So a result already on the topic is never produced again.
 * It reads in slices between event-loop turns and saves its positions with
 * every chunk it marks, so a recovery cut short is resumed, not restarted.
 * The lock lives on a connection of its own, kept alive by a thread while
 * the event loop turns (Kafka waits never idle it out). */
#define PUB_IDLE_S "10s"
enum { PUB_BATCH = 5000, PUB_ROUNDS = 8, PUB_TICK_MS = 100, PUB_TRY_MS = 1000,
       PUB_MARK_CHUNK = 10000, PUB_PING_MS = 1000, PUB_HUNG_MS = 90000, PUB_SLICE_MS = 50,
       PUB_SAVE_MS = 1000 };

static const char sql_outbox[] =
    "SELECT o.instance_id, i.id IS NOT NULL, i.job_name, i.outcome, i.attempt, i.exit_code,"
    "  i.error_class, i.error, coalesce(i.output, ''), i.trace_id, i.idempotency_key,"
    "  (extract(epoch FROM i.nominal_time) * 1000)::bigint,"
    "  (extract(epoch FROM i.scheduled_at) * 1000)::bigint,"
    "  (extract(epoch FROM i.locked_at) * 1000)::bigint,"
    "  (extract(epoch FROM i.running_at) * 1000)::bigint,"
    "  (extract(epoch FROM i.finished_at) * 1000)::bigint"
    " FROM ax_result_outbox o LEFT JOIN job_instance i ON i.id = o.instance_id"
    "  AND i.state = 'FINISHED' AND i.result_published_at IS NULL"
    " WHERE o.deployment = $1 ORDER BY o.instance_id LIMIT $2::int";

/* One statement (atomic): the instances leave the outbox and are marked
 * published (locked in id order), and the reconciled offsets advance. */
#define SQL_MARK \
    "WITH d AS (DELETE FROM ax_result_outbox WHERE deployment = $1" \
    "  AND instance_id = ANY($2::bigint[])" \
    "), l AS (SELECT id FROM job_instance WHERE id = ANY($2::bigint[]) AND state = 'FINISHED'" \
    "  AND result_published_at IS NULL ORDER BY id FOR UPDATE" \
    "), m AS (UPDATE job_instance i SET result_published_at = now() FROM l WHERE i.id = l.id" \
    "), o AS (INSERT INTO ax_results_offset (topic, partition, next_offset)" \
    "  SELECT $3, p, n FROM unnest($4::int[], $5::bigint[]) AS x(p, n)" \
    "  ON CONFLICT (topic, partition) DO UPDATE" \
    "  SET next_offset = greatest(ax_results_offset.next_offset, excluded.next_offset)," \
    "    updated_at = now()" \
    ") SELECT count(*) FROM l"
/* The same statement, named for pg_stat_activity / pg_stat_statements by
 * who sends it: the publisher after its Kafka commit, or a recovery. */
static const char sql_mark_published[] = "/* ax: results published */ " SQL_MARK;
static const char sql_mark_recovered[] = "/* ax: results recovered */ " SQL_MARK;

static int is_size_refusal(rd_kafka_resp_err_t e) {
    return e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
           e == RD_KAFKA_RESP_ERR_INVALID_RECORD || e == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE;
}

static void pub_on_message(ax_delivery_t *d, const rd_kafka_message_t *m) {
    pub_dlv_t *pd = (pub_dlv_t *)d;
    if (m->err) {
        /* refused for its size: noted, so the batch produced again after
         * the failed commit carries a cut result for this instance */
        char key[24];
        if (!is_size_refusal(m->err) || !m->key || m->key_len == 0 || m->key_len >= sizeof key)
            return;
        memcpy(key, m->key, m->key_len);
        key[m->key_len] = 0;
        long long id = strtoll(key, NULL, 10);
        if (id <= 0)
            return;
        if (pd->nrefused == pd->caprefused) {
            size_t cap = pd->caprefused ? pd->caprefused * 2 : 16;
            struct pub_refusal *v = realloc(pd->refused, cap * sizeof *v);
            if (!v)
                return;
            pd->refused = v;
            pd->caprefused = cap;
        }
        pd->refused[pd->nrefused++] = (struct pub_refusal){id, m->len};
        return;
    }
    if (m->partition < 0 || strcmp(rd_kafka_topic_name(m->rkt), pd->topic) != 0)
        return;
    if (m->partition >= pd->nparts) {
        int64_t *n = realloc(pd->next, (size_t)(m->partition + 1) * sizeof *n);
        if (!n)
            return; /* the offset stays behind: recovery reads a little more */
        for (int32_t p = pd->nparts; p <= m->partition; p++)
            n[p] = -1;
        pd->next = n;
        pd->nparts = m->partition + 1;
    }
    if (pd->next[m->partition] < m->offset + 1)
        pd->next[m->partition] = m->offset + 1;
}

static void pub_dlv_reset(pub_dlv_t *pd) {
    pd->d.pending = pd->d.failed = 0;
    pd->d.err = 0;
    pd->nrefused = 0;
    for (int32_t p = 0; p < pd->nparts; p++)
        pd->next[p] = -1;
}

static int pub_cut_level(publisher_t *pb, int64_t id) {
    for (size_t k = 0; k < pb->ncuts; k++)
        if (pb->cuts[k].id == id)
            return pb->cuts[k].level;
    return 0;
}

/* The result of `id` is produced cut one level more from now on. */
static int pub_cut_more(publisher_t *pb, int64_t id) {
    for (size_t k = 0; k < pb->ncuts; k++)
        if (pb->cuts[k].id == id)
            return pb->cuts[k].level < 3 ? ++pb->cuts[k].level : 3;
    if (pb->ncuts == pb->capcuts) {
        size_t cap = pb->capcuts ? pb->capcuts * 2 : 16;
        struct pub_cut *v = realloc(pb->cuts, cap * sizeof *v);
        if (!v)
            return 3; /* out of memory: given up */
        pb->cuts = v;
        pb->capcuts = cap;
    }
    pb->cuts[pb->ncuts++] = (struct pub_cut){id, 1};
    return 1;
}

static void pub_cut_forget(publisher_t *pb, int64_t id) {
    for (size_t k = 0; k < pb->ncuts; k++)
        if (pb->cuts[k].id == id) {
            pb->cuts[k] = pb->cuts[--pb->ncuts];
            return;
        }
}

/* Mark `ids` (an array literal, may be "{}") published and advance the
 * offsets: pos[k] for results partition k, where pos[k] >= 0. Returns the
 * number of rows marked, or < 0. */
static int pub_mark(callback_t *cb, const char *sql, const char *ids, const int64_t *pos,
                    int nparts, char *err, size_t errlen) {
    ax_svc_t *svc = &cb->svc;
    ax_strbuf_t ps = {0}, os = {0};
    ax_pgarr_begin(&ps);
    ax_pgarr_begin(&os);
    for (int k = 0; k < nparts; k++)
        if (pos[k] >= 0) {
            ax_pgarr_int(&ps, k);
            ax_pgarr_int(&os, pos[k]);
        }
    ax_pgarr_end(&ps);
    ax_pgarr_end(&os);
    const char *p[] = {svc->conf.topic_prefix, ids, svc->topic_results, ps.s, os.s};
    PGresult *r;
    int rc = ax_pg_exec(svc->pg, sql, 5, p, NULL, NULL, &r, err, errlen);
    ax_strbuf_free(&ps);
    ax_strbuf_free(&os);
    if (rc < 0)
        return rc;
    int n = (int)ax_pg_int(r, 0, 0);
    PQclear(r);
    return n;
}

/* The lock connection's keeper (see publisher_t). */
static void *pub_ping_main(void *arg) {
    publisher_t *pb = arg;
    while (!atomic_load(&pb->ping_stop)) {
        usleep(PUB_PING_MS * 1000);
        if (!atomic_load(&pb->ping_holder) || atomic_load(&pb->lock_lost))
            continue;
        if (ax_mono_ms() - atomic_load(&pb->loop_ms) > PUB_HUNG_MS)
            continue; /* hung: the session times out, the lock goes to another */
        pthread_mutex_lock(&pb->lock_mu);
        char err[256];
        PGconn *c = ax_pg_conn(pb->lockpg);
        if (atomic_load(&pb->ping_holder) &&
            (!c || PQstatus(c) != CONNECTION_OK || PQbackendPID(c) != pb->pg_pid ||
             ax_pg_exec(pb->lockpg, "SELECT 1", 0, NULL, NULL, NULL, NULL, err, sizeof err) < 0))
            atomic_store(&pb->lock_lost, 1);
        pthread_mutex_unlock(&pb->lock_mu);
    }
    return NULL;
}

static void pub_recover_end(publisher_t *pb) {
    if (pb->rrk) {
        rd_kafka_assign(pb->rrk, NULL);
        rd_kafka_consumer_close(pb->rrk);
        rd_kafka_destroy(pb->rrk);
        pb->rrk = NULL;
    }
    free(pb->rpos);
    free(pb->reof);
    pb->rpos = NULL;
    pb->reof = NULL;
    ax_strbuf_free(&pb->rids);
    pb->rparts = pb->rneof = 0;
}

/* Give up publishing: the producer goes (a fenced or failed one is of no
 * use), and the lock too when this session still holds it. */
static void pub_drop(callback_t *cb, const char *why) {
    if (cb->pub.txp) {
        rd_kafka_destroy(cb->pub.txp);
        cb->pub.txp = NULL;
    }
    pub_recover_end(&cb->pub);
    if (!cb->pub.holder)
        return;
    ax_warn("results publisher: %s; no longer publishing", why);
    atomic_store(&cb->pub.ping_holder, 0);
    pthread_mutex_lock(&cb->pub.lock_mu);
    PGconn *c = ax_pg_conn(cb->pub.lockpg);
    if (c && PQstatus(c) == CONNECTION_OK && PQbackendPID(c) == cb->pub.pg_pid) {
        char err[256];
        const char *p[] = {cb->pub.lock_name};
        ax_pg_exec(cb->pub.lockpg,
                   "SELECT pg_advisory_unlock(hashtextextended($1, 0)),"
                   " set_config('idle_session_timeout', '0', false)",
                   1, p, NULL, NULL, NULL, err, sizeof err);
    }
    pthread_mutex_unlock(&cb->pub.lock_mu);
    cb->pub.holder = 0;
    cb->pub.next_try_ms = ax_mono_ms() + PUB_TRY_MS;
}

/* Save what the recovery read so far: its instances marked published,
 * and each partition's position with them. */
static int pub_recover_save(callback_t *cb, char *err, size_t errlen) {
    publisher_t *pb = &cb->pub;
    ax_pgarr_end(&pb->rids);
    int n = pub_mark(cb, sql_mark_recovered, pb->rids.s, pb->rpos, pb->rparts, err, errlen);
    ax_strbuf_free(&pb->rids);
    ax_pgarr_begin(&pb->rids);
    pb->rchunk = 0;
    pb->rsaved_ms = ax_mono_ms();
    if (n < 0)
        return n;
    if (n > 0) /* per save: a recovery cut short later has still said what it marked */
        ax_info("results recovery: %d instance(s) found on %s marked published", n,
                cb->svc.topic_results);
    pb->rmarked += n;
    return 0;
}

/* Start a recovery: a reader of its own (nothing fetched for an earlier
 * recovery — an older end of a partition — can be taken for this one's),
 * assigned at the stored positions. With no stored position for the topic
 * at all (first start, or an upgrade: what the code before migration 015
 * published has result_published_at set, and no publisher of this code has
 * produced yet — it stores these rows before its first transaction) every
 * partition starts at its current end, stored now; a partition without a
 * row while others have one (added since) is read from its beginning. */
static int pub_recover_start(callback_t *cb) {
    ax_svc_t *svc = &cb->svc;
    publisher_t *pb = &cb->pub;
    char err[1024];
    char cid[300];
    snprintf(cid, sizeof cid, "%s-results-recovery", svc->name);
    pb->rrk = ax_kafka_reader_new(&svc->conf, cid, err, sizeof err);
    if (!pb->rrk) {
        ax_warn("results recovery: %s", err);
        return AX_ERR_IO;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(pb->rrk, svc->topic_results, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t kerr = rkt ? rd_kafka_metadata(pb->rrk, 0, rkt, &md, 10000)
                                   : RD_KAFKA_RESP_ERR__INVALID_ARG;
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    if (kerr || !md || md->topic_cnt != 1 || md->topics[0].err ||
        md->topics[0].partition_cnt <= 0) {
        ax_warn("results recovery: no metadata for %s: %s", svc->topic_results,
                rd_kafka_err2str(kerr ? kerr : md && md->topic_cnt == 1 ? md->topics[0].err
                                                                         : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
        if (md)
            rd_kafka_metadata_destroy(md);
        return AX_ERR_IO;
    }
    int nparts = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    const char *tp[] = {svc->topic_results};
    PGresult *r;
    int rc = ax_pg_exec(svc->pg,
                        "SELECT partition, next_offset FROM ax_results_offset WHERE topic = $1",
                        1, tp, NULL, NULL, &r, err, sizeof err);
    if (rc < 0) {
        ax_warn("results recovery: %s", err);
        return rc;
    }
    if (PQntuples(r) == 0) {
        PQclear(r);
        int64_t *ends = calloc((size_t)nparts, sizeof *ends);
        if (!ends) {
            snprintf(err, sizeof err, "out of memory");
            rc = AX_ERR_NOMEM;
        }
        for (int p = 0; p < nparts && rc == 0; p++) {
            int64_t lo = 0;
            kerr = rd_kafka_query_watermark_offsets(pb->rrk, svc->topic_results, p, &lo,
                                                    &ends[p], 10000);
            if (kerr) {
                snprintf(err, sizeof err, "end of %s [%d]: %s", svc->topic_results, p,
                         rd_kafka_err2str(kerr));
                rc = AX_ERR_IO;
            }
        }
        if (rc == 0)
            rc = pub_mark(cb, sql_mark_recovered, "{}", ends, nparts, err, sizeof err);
        free(ends);
        if (rc >= 0)
            rc = ax_pg_exec(svc->pg,
                            "SELECT partition, next_offset FROM ax_results_offset"
                            " WHERE topic = $1",
                            1, tp, NULL, NULL, &r, err, sizeof err);
        if (rc < 0) {
            ax_warn("results recovery: %s", err);
            return rc;
        }
        ax_info("results recovery: no reconciled offsets for %s yet: its current end stored",
                svc->topic_results);
    }
    pb->rpos = malloc((size_t)nparts * sizeof *pb->rpos);
    pb->reof = calloc((size_t)nparts, 1);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(nparts);
    if (!pb->rpos || !pb->reof) {
        PQclear(r);
        rd_kafka_topic_partition_list_destroy(l);
        return AX_ERR_NOMEM;
    }
    pb->rparts = nparts;
    for (int p = 0; p < nparts; p++) {
        rd_kafka_topic_partition_list_add(l, svc->topic_results, p)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
        pb->rpos[p] = -1;
    }
    for (int i = 0; i < PQntuples(r); i++) {
        int p = (int)ax_pg_int(r, i, 0);
        if (p >= 0 && p < nparts)
            l->elems[p].offset = pb->rpos[p] = ax_pg_int(r, i, 1);
    }
    PQclear(r);
    kerr = rd_kafka_assign(pb->rrk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (kerr) {
        ax_warn("results recovery: assign: %s", rd_kafka_err2str(kerr));
        return AX_ERR_IO;
    }
    ax_pgarr_begin(&pb->rids);
    pb->rfound = pb->rmarked = pb->rchunk = 0;
    pb->rsaved_ms = ax_mono_ms();
    return 0;
}

/* One slice of the recovery (at most PUB_SLICE_MS): read the topic
 * read_committed towards its end, mark every instance found there
 * published, each chunk with the positions reached. 1 when every partition
 * is at its end (need_recover cleared), 0 to go on at the next turn, < 0
 * on failure (the next recovery resumes from the saved positions). */
static int pub_recover_step(callback_t *cb) {
    ax_svc_t *svc = &cb->svc;
    publisher_t *pb = &cb->pub;
    char err[1024];
    if (!pb->rrk) {
        int rc = pub_recover_start(cb);
        if (rc < 0) {
            pub_recover_end(pb);
            return rc;
        }
    }
    int64_t until = ax_mono_ms() + PUB_SLICE_MS;
    while (pb->rneof < pb->rparts) {
        int64_t left = until - ax_mono_ms();
        if (left <= 0)
            break;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(pb->rrk, (int)(left < 20 ? left : 20));
        if (!m)
            continue;
        int p = m->partition;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (p >= 0 && p < pb->rparts && !pb->reof[p]) {
                pb->reof[p] = 1;
                pb->rpos[p] = m->offset;
                pb->rneof++;
            }
        } else if (m->err) {
            ax_warn("results recovery: %s", rd_kafka_message_errstr(m));
        } else {
            if (p >= 0 && p < pb->rparts && pb->rpos[p] < m->offset + 1)
                pb->rpos[p] = m->offset + 1;
            if (m->key && m->key_len > 0 && m->key_len < 24) {
                char key[24];
                memcpy(key, m->key, m->key_len);
                key[m->key_len] = 0;
                char *e = NULL;
                long long id = strtoll(key, &e, 10);
                if (e && !*e && id > 0) {
                    ax_pgarr_int(&pb->rids, id);
                    pb->rfound++;
                    pb->rchunk++;
                }
            }
        }
        rd_kafka_message_destroy(m);
        if (pb->rchunk >= PUB_MARK_CHUNK && pub_recover_save(cb, err, sizeof err) < 0) {
            ax_warn("results recovery: mark published: %s", err);
            pub_recover_end(pb);
            return AX_ERR_IO;
        }
    }
    int done = pb->rneof >= pb->rparts;
    /* the positions reached are saved with every chunk, and at least
     * every PUB_SAVE_MS: a recovery cut short resumes from them */
    if ((done || pb->rchunk > 0 || ax_mono_ms() - pb->rsaved_ms >= PUB_SAVE_MS) &&
        pub_recover_save(cb, err, sizeof err) < 0) {
        ax_warn("results recovery: mark published: %s", err);
        pub_recover_end(pb);
        return AX_ERR_IO;
    }
    if (!done)
        return 0;
    pb->need_recover = 0;
    cb->published += pb->rmarked;
    ax_info("results recovery: %s read to its end (%lld result(s) since the reconciled "
            "offsets, %lld of them marked published only now)",
            svc->topic_results, (long long)pb->rfound, (long long)pb->rmarked);
    pub_recover_end(pb);
    return 1;
}

/* Be the publisher if we can: hold the lock (in the lock connection's
 * session — a new session after a PostgreSQL restart holds nothing), have
 * a producer whose init fenced every earlier one, and have recovered.
 * 1 when ready. */
static int pub_ready(callback_t *cb) {
    ax_svc_t *svc = &cb->svc;
    char err[1024];
    if (cb->pub.holder && atomic_load(&cb->pub.lock_lost))
        pub_drop(cb, "the PostgreSQL session holding the lock is gone");
    if (!cb->pub.holder) {
        if (ax_mono_ms() < cb->pub.next_try_ms)
            return 0;
        cb->pub.next_try_ms = ax_mono_ms() + PUB_TRY_MS;
        /* The lock's session ends when it sits idle for PUB_IDLE_S (the
         * keeper thread runs a statement every PUB_PING_MS while the event
         * loop turns): a stopped (SIGSTOP) or hung holder loses the lock,
         * and the next one fences it. */
        pthread_mutex_lock(&cb->pub.lock_mu);
        const char *p[] = {cb->pub.lock_name, PUB_IDLE_S};
        PGresult *r = NULL;
        int got = 0;
        if (ax_pg_ensure(cb->pub.lockpg, err, sizeof err) == 0 &&
            ax_pg_exec(cb->pub.lockpg,
                       "SELECT CASE WHEN pg_try_advisory_lock(hashtextextended($1, 0))"
                       " THEN set_config('idle_session_timeout', $2, false) IS NOT NULL"
                       " ELSE false END",
                       2, p, NULL, NULL, &r, err, sizeof err) == 0) {
            got = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
            PQclear(r);
        }
        if (got) {
            cb->pub.pg_pid = PQbackendPID(ax_pg_conn(cb->pub.lockpg));
            atomic_store(&cb->pub.lock_lost, 0);
            atomic_store(&cb->pub.ping_holder, 1);
        }
        pthread_mutex_unlock(&cb->pub.lock_mu);
        if (!got)
            return 0;
        cb->pub.holder = 1;
        cb->pub.need_recover = 1;
        ax_info("results publisher: this process publishes (lock %s)", cb->pub.lock_name);
    }
    /* Recovery reads only after a fresh init_transactions: it returns once
     * every earlier transaction of the id — ours too — is decided and its
     * markers written, so the topic's last stable offset is past all of it. */
    if (cb->pub.need_recover && cb->pub.txp && !cb->pub.rrk) {
        rd_kafka_destroy(cb->pub.txp);
        cb->pub.txp = NULL;
    }
    if (!cb->pub.txp) {
        if (ax_mono_ms() < cb->pub.next_init_ms)
            return 0;
        char cid[300];
        snprintf(cid, sizeof cid, "%s-results", svc->worker_id);
        /* fences every older producer of this id: its open transaction is
         * aborted, its commit fails */
        cb->pub.txp = ax_kafka_txn_producer_new(&svc->conf, cid, cb->pub.txn_id, 10000, err,
                                                sizeof err);
        if (!cb->pub.txp) {
            ax_warn("results publisher: %s", err);
            cb->pub.next_init_ms = ax_mono_ms() + 5 * PUB_TRY_MS;
            return 0;
        }
    }
    if (cb->pub.need_recover) {
        int rc = pub_recover_step(cb);
        if (rc < 0) {
            /* tried again after a new init, from the positions saved */
            rd_kafka_destroy(cb->pub.txp);
            cb->pub.txp = NULL;
            cb->pub.next_init_ms = ax_mono_ms() + PUB_TRY_MS;
        }
        if (rc <= 0)
            return 0;
    }
    rd_kafka_poll(cb->pub.txp, 0);
    return 1;
}

/* One Kafka transaction: up to PUB_BATCH outbox rows. Returns the number of
 * outbox rows handled (0: the outbox is empty), or < 0. */
static int pub_batch(callback_t *cb) {
    ax_svc_t *svc = &cb->svc;
    char err[1024], lim[16];
    snprintf(lim, sizeof lim, "%d", PUB_BATCH);
    const char *p[] = {svc->conf.topic_prefix, lim};
    PGresult *r;
    int rc = ax_pg_exec(svc->pg, sql_outbox, 2, p, NULL, NULL, &r, err, sizeof err);
    if (rc < 0) {
        ax_warn("results: %s", err);
        return rc;
    }
    int rows = PQntuples(r);
    if (rows == 0) {
        PQclear(r);
        return 0;
    }
    pub_dlv_t *pd = &cb->pub.dlv;
    pub_dlv_reset(pd);
    ax_strbuf_t ids = {0};
    ax_pgarr_begin(&ids);
    int produced = 0;
    rc = ax_kafka_txn_begin(cb->pub.txp, err, sizeof err);
    for (int i = 0; rc == 0 && i < rows; i++) {
        ax_pgarr_int(&ids, ax_pg_int(r, i, 0));
        if (strcmp(PQgetvalue(r, i, 1), "t") != 0)
            continue; /* deleted, or published already: only leaves the outbox */
        ax_result_t res = {
            .instance_id = ax_pg_int(r, i, 0),
            .job = PQgetisnull(r, i, 2) ? NULL : PQgetvalue(r, i, 2),
            .attempts = (int32_t)ax_pg_int(r, i, 4),
            .exit_code = (int32_t)ax_pg_int(r, i, 5),
            .exit_code_set = !PQgetisnull(r, i, 5),
            .error_class = PQgetisnull(r, i, 6) ? NULL : PQgetvalue(r, i, 6),
            .error = PQgetisnull(r, i, 7) ? NULL : PQgetvalue(r, i, 7),
            .output = PQgetvalue(r, i, 8),
            .trace_id = PQgetvalue(r, i, 9),
            .idempotency_key = PQgetvalue(r, i, 10),
            .nominal_time_ms = ax_pg_int(r, i, 11),
            .scheduled_at_ms = ax_pg_int(r, i, 12),
            .locked_at_ms = ax_pg_int(r, i, 13),
            .running_at_ms = ax_pg_int(r, i, 14),
            .finished_at_ms = ax_pg_int(r, i, 15),
        };
        ax_outcome_parse(PQgetvalue(r, i, 3), &res.outcome);
        void *buf = NULL;
        size_t len;
        char key[32];
        int klen = snprintf(key, sizeof key, "%lld", (long long)res.instance_id);
        /* A result Kafka refused (a results topic accepting less than this
         * one's size) goes out cut: without its output, then without its
         * error too, the cut noted in the error; one refused at once by the
         * producer is cut at once. Given up (logged, only leaves the
         * outbox) when even that is refused. */
        int level = pub_cut_level(&cb->pub, res.instance_id), sent = 0;
        char *cut_err = NULL;
        for (; level < 3 && !sent; level = pub_cut_more(&cb->pub, res.instance_id)) {
            free(cut_err);
            cut_err = NULL;
            if (level == 1) {
                res.output = "";
                if (asprintf(&cut_err, "%s%sresult output cut: the results topic refused the "
                                       "record", res.error ? res.error : "",
                             res.error ? "; " : "") < 0)
                    cut_err = NULL;
                res.error = cut_err ? cut_err : "result output cut";
            } else if (level == 2) {
                res.output = "";
                res.error = "result output and error cut: the results topic refused the record";
            }
            if (ax_result_encode(&res, &buf, &len) < 0) {
                ax_error("instance %lld: cannot encode result; not published",
                         (long long)res.instance_id);
                break;
            }
            /* a failed delivery fails the commit (and the batch is produced
             * again, the refused record cut) */
            if (ax_kafka_produce(cb->pub.txp, svc->topic_results, key, (size_t)klen, buf, len,
                                 NULL, &pd->d, err, sizeof err) == 0) {
                sent = 1;
                break;
            }
            ax_error("instance %lld: result refused: %s", (long long)res.instance_id, err);
            free(buf);
            buf = NULL;
        }
        if (!sent) {
            /* given up: dead-lettered with the reason (the record cut), and
             * it leaves the outbox like a published one */
            if (level >= 3) {
                ax_error("instance %lld: result not published: the results topic refused it "
                         "even cut; dead-lettered",
                         (long long)res.instance_id);
                res.output = "";
                res.error = "result output and error cut: the results topic refused the record";
                if (ax_result_encode(&res, &buf, &len) == 0) {
                    rd_kafka_headers_t *h = rd_kafka_headers_new(4);
                    rd_kafka_header_add(h, "ax.reason", -1,
                                        "the results topic refused this result, even cut", -1);
                    rd_kafka_header_add(h, "ax.kind", -1, "result_refused", -1);
                    rd_kafka_header_add(h, "ax.instance.id", -1, key, klen);
                    rd_kafka_header_add(h, "ax.service", -1, svc->name, -1);
                    if (ax_kafka_produce(cb->pub.txp, svc->topic_dlq, key, (size_t)klen, buf,
                                         len, h, &pd->d, err, sizeof err) < 0) {
                        rd_kafka_headers_destroy(h);
                        ax_error("instance %lld: not dead-lettered either: %s",
                                 (long long)res.instance_id, err);
                    }
                }
            }
            free(cut_err);
            free(buf);
            continue;
        }
        if (level > 0)
            ax_warn("instance %lld: result published cut (%s)", (long long)res.instance_id,
                    level == 1 ? "without its output" : "without output and error");
        produced++;
        /* A final failure is also recorded on the dead-letter topic (the
         * same Result record, the reason in headers) for `axctl dlq`, in
         * the same transaction. */
        if (res.outcome != AX_OUTCOME_SUCCESS && res.outcome != AX_OUTCOME_CANCELLED) {
            rd_kafka_headers_t *h = rd_kafka_headers_new(4);
            const char *reason = res.error ? res.error : ax_outcome_name(res.outcome);
            rd_kafka_header_add(h, "ax.reason", -1, reason, -1);
            rd_kafka_header_add(h, "ax.kind", -1, "final_failure", -1);
            rd_kafka_header_add(h, "ax.instance.id", -1, key, klen);
            rd_kafka_header_add(h, "ax.service", -1, svc->name, -1);
            if (ax_kafka_produce(cb->pub.txp, svc->topic_dlq, key, (size_t)klen, buf, len, h,
                                 &pd->d, err, sizeof err) < 0) {
                rd_kafka_headers_destroy(h);
                ax_error("instance %lld: final failure not dead-lettered: %s",
                         (long long)res.instance_id, err);
            }
        }
        free(buf);
        free(cut_err);
    }
    ax_pgarr_end(&ids);
    if (rc == 0)
        rc = ax_kafka_txn_commit(cb->pub.txp, 35000, err, sizeof err);
    else
        ax_kafka_txn_abort(cb->pub.txp, 10000);
    if (rc == 0 && pd->d.failed) /* cannot be: a failed delivery fails the commit */
        rc = ax_seterr(err, sizeof err, AX_ERR_IO, "%d result(s) not delivered", pd->d.failed);
    if (rc < 0) {
        /* Aborted — or not known: the commit may have gone through. A new
         * producer (fencing this one) and a recovery from the topic decide. */
        ax_warn("results: %d not published (%s); recovering from the topic first", produced,
                err);
        /* The largest record Kafka refused for its size is cut from now on
         * (one per failed transaction: a record set refused as a whole
         * names every record in it). */
        struct pub_refusal *big = NULL;
        for (size_t k = 0; k < pd->nrefused; k++)
            if (!big || pd->refused[k].len > big->len)
                big = &pd->refused[k];
        if (big) {
            int lv = pub_cut_more(&cb->pub, big->id);
            ax_warn("instance %lld: Kafka refused its result of %zu bytes; produced again %s",
                    (long long)big->id, big->len,
                    lv == 1 ? "without its output" : lv == 2 ? "without output and error"
                                                           : "not at all (given up)");
        }
        PQclear(r);
        ax_strbuf_free(&ids);
        cb->pub.need_recover = 1;
        if (rc == AX_ERR_CONFLICT)
            pub_drop(cb, "the producer was fenced");
        return AX_ERR_IO;
    }
    int n = pub_mark(cb, sql_mark_published, ids.s, pd->next, (int)pd->nparts, err, sizeof err);
    if (n >= 0)
        for (size_t k = cb->pub.ncuts; k-- > 0;)
            for (int i = 0; i < rows; i++)
                if (cb->pub.cuts[k].id == ax_pg_int(r, i, 0)) {
                    pub_cut_forget(&cb->pub, cb->pub.cuts[k].id);
                    break;
                }
    PQclear(r);
    ax_strbuf_free(&ids);
    if (n < 0) {
        /* committed on Kafka, not marked: nothing more is produced before
         * the topic itself says what is published */
        ax_warn("mark published: %s; recovering from the topic first", err);
        cb->pub.need_recover = 1;
        return n;
    }
    cb->published += n;
    return rows;
}

/* Publish what the outbox holds, if this process is the publisher. */
static void pub_tick(callback_t *cb) {
    atomic_store(&cb->pub.loop_ms, ax_mono_ms());
    if (cb->svc.stopping || !pub_ready(cb))
        return;
    for (int round = 0; round < PUB_ROUNDS; round++) {
        int n = pub_batch(cb);
        if (n < PUB_BATCH)
            return;
    }
}

static void pub_timer(evutil_socket_t fd, short what, void *arg) {
    pub_tick(arg);
}

/* Persist a batch in one statement. If the statement is refused (bad
 * data in one result), fall back to one result at a time so only the bad
 * one is dead-lettered. */
/* Which failed results are retried, and after how long (retry_ms[i] >= 0),
 * by each job's policy (inline commands are not retried) and the global
 * retry budget. A final failure gets the reason appended to its error. */
static int decide_retries(callback_t *cb, ax_attempt_t *as, const char *skip, size_t n,
                          int64_t *retry_ms, char *err, size_t errlen) {
    ax_svc_t *svc = &cb->svc;
    ax_strbuf_t ids = {0};
    ax_pgarr_begin(&ids);
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        retry_ms[i] = -1;
        if (!skip[i] && as[i].outcome != AX_OUTCOME_SUCCESS) {
            ax_pgarr_int(&ids, as[i].instance_id);
            failed++;
        }
    }
    ax_pgarr_end(&ids);
    int rc = 0;
    if (!failed)
        goto out;
    char budget_s[32];
    snprintf(budget_s, sizeof budget_s, "%lld", (long long)svc->conf.callback_retry_budget);
    const char *p[] = {ids.s, svc->conf.topic_prefix, budget_s};
    PGresult *r;
    rc = ax_pg_exec(svc->pg,
                    "SELECT i.id, i.attempt, j.retry_max, j.retry_initial_ms, j.retry_multiplier,"
                    "  j.retry_max_ms, j.retry_jitter_ms, j.retry_rules::text, j.name,"
                    /* pending retries, counted only up to the budget */
                    "  (SELECT count(*) FROM (SELECT 1 FROM job_instance q"
                    "    WHERE q.state = 'SCHEDULED' AND q.attempt > 1 AND q.deployment = $2"
                    "    LIMIT $3::bigint + 1) b)"
                    " FROM job_instance i JOIN job j ON j.id = i.job_id"
                    " WHERE i.id = ANY($1::bigint[]) AND i.state IN ('LOCKED', 'RUNNING')",
                    3, p, NULL, NULL, &r, err, errlen);
    if (rc < 0)
        goto out;
    int64_t pending = PQntuples(r) ? ax_pg_int(r, 0, 9) : 0;
    int64_t budget = svc->conf.callback_retry_budget - pending, over = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip[i] || as[i].outcome == AX_OUTCOME_SUCCESS)
            continue;
        int row = -1;
        for (int k = 0; k < PQntuples(r) && row < 0; k++)
            if (ax_pg_int(r, k, 0) == as[i].instance_id && ax_pg_int(r, k, 1) == as[i].attempt)
                row = k;
        if (row < 0)
            continue; /* inline, stale or duplicate: the CAS decides */
        ax_retry_policy_t pol;
        ax_retry_policy_default(&pol);
        pol.max_retries = (int)ax_pg_int(r, row, 2);
        pol.initial_ms = ax_pg_int(r, row, 3);
        pol.multiplier = atof(PQgetvalue(r, row, 4));
        pol.max_ms = ax_pg_int(r, row, 5);
        pol.jitter_ms = ax_pg_int(r, row, 6);
        char perr[256];
        if (!PQgetisnull(r, row, 7) &&
            ax_retry_rules_parse(&pol, PQgetvalue(r, row, 7), perr, sizeof perr) < 0)
            ax_warn("job %s: retry_rules ignored (%s); default chain used", PQgetvalue(r, row, 8),
                    perr);
        ax_retry_decision_t d = ax_retry_decide(&pol, as[i].error_class, as[i].retryable,
                                                as[i].attempt, drand48());
        const char *why = d.reason;
        if (d.retry && budget <= 0) {
            d.retry = 0;
            why = "retry budget exhausted";
            over++;
        }
        if (d.retry) {
            /* a day at most, whatever the job's numbers say */
            retry_ms[i] = d.delay_ms < AX_RETRY_MAX_DELAY_MS ? d.delay_ms : AX_RETRY_MAX_DELAY_MS;
            budget--;
            ax_info("instance %lld attempt %d %s (%s): retry in %lld ms",
                    (long long)as[i].instance_id, (int)as[i].attempt,
                    ax_outcome_name(as[i].outcome), as[i].error_class ? as[i].error_class : "",
                    (long long)d.delay_ms);
            continue;
        }
        char *e = NULL;
        if (asprintf(&e, "%s; not retried: %s (attempt %d of %d)", as[i].error ? as[i].error : "",
                     why, (int)as[i].attempt, pol.max_retries + 1) >= 0) {
            free(as[i].error);
            as[i].error = e;
        }
        if (d.alert) {
            char text[700];
            snprintf(text, sizeof text, "instance %lld failed for good: %s",
                     (long long)as[i].instance_id, as[i].error);
            alert(cb, "final_failure", PQgetvalue(r, row, 8), text);
        }
    }
    if (over) {
        char text[256];
        snprintf(text, sizeof text, "%lld retries refused: %lld retries already pending (budget "
                                    "%lld); those instances ended FAILED",
                 (long long)over, (long long)pending, (long long)svc->conf.callback_retry_budget);
        alert(cb, "retry_budget", NULL, text);
    }
    PQclear(r);
out:
    ax_strbuf_free(&ids);
    return rc;
}

/* Successful size probes (dynamic sharding): their output is the data
 * volume; the parent splits into ceil(volume / shard_base) shards, at most
 * max_shards (fb_exec does it in the batch's transaction). A probe that
 * printed no number fails (not retried). Marks probes in is_probe. */
static int find_probes(callback_t *cb, ax_attempt_t *as, const char *skip, char *is_probe,
                       size_t n, char *err, size_t errlen) {
    ax_svc_t *svc = &cb->svc;
    ax_strbuf_t ids = {0};
    size_t nprobe = 0;
    ax_pgarr_begin(&ids);
    for (size_t i = 0; i < n; i++)
        if (!skip[i] && as[i].outcome == AX_OUTCOME_SUCCESS && as[i].error_class &&
            strcmp(as[i].error_class, "probe") == 0) {
            ax_pgarr_int(&ids, as[i].instance_id);
            nprobe++;
        }
    ax_pgarr_end(&ids);
    if (!nprobe) { /* the executor marks size probes: no query otherwise */
        ax_strbuf_free(&ids);
        return 0;
    }
    const char *p[] = {ids.s};
    PGresult *r;
    int rc = ax_pg_exec(svc->pg,
                        "SELECT i.id, i.attempt, j.shard_base, j.max_shards FROM job_instance i"
                        " JOIN job j ON j.id = i.job_id WHERE i.id = ANY($1::bigint[])"
                        " AND i.shard_mode = 'probe' AND i.shards_pending IS NULL"
                        " AND i.state IN ('LOCKED', 'RUNNING')",
                        1, p, NULL, NULL, &r, err, errlen);
    ax_strbuf_free(&ids);
    if (rc < 0)
        return rc;
    for (int k = 0; k < PQntuples(r); k++)
        for (size_t i = 0; i < n; i++) {
            if (skip[i] || as[i].outcome != AX_OUTCOME_SUCCESS ||
                as[i].instance_id != ax_pg_int(r, k, 0) || as[i].attempt != ax_pg_int(r, k, 1))
                continue;
            char *end = NULL;
            const char *out = as[i].output ? as[i].output : "";
            long long vol = strtoll(out, &end, 10);
            while (end && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
                end++;
            if (!end || end == out || *end || vol < 0) {
                as[i].outcome = AX_OUTCOME_FAILED;
                free(as[i].error_class);
                free(as[i].error);
                as[i].error_class = strdup("probe");
                as[i].error = strdup("size probe (AX_SHARD_PROBE=1) did not print a data volume "
                                     "(a non-negative integer)");
                as[i].retryable = 0;
                continue;
            }
            int64_t base = ax_pg_int(r, k, 2), cap = ax_pg_int(r, k, 3);
            int64_t shards = base > 0 ? (vol + base - 1) / base : 1;
            if (shards > cap)
                shards = cap;
            if (!cb->nprobes) {
                ax_pgarr_begin(&cb->probe_ids);
                ax_pgarr_begin(&cb->probe_n);
                ax_pgarr_begin(&cb->probe_worker);
                ax_pgarr_begin(&cb->probe_started);
            }
            ax_pgarr_int(&cb->probe_ids, as[i].instance_id);
            ax_pgarr_int(&cb->probe_n, shards);
            ax_pgarr_text(&cb->probe_worker, as[i].worker);
            ax_pgarr_int(&cb->probe_started, as[i].started_at_ms);
            cb->nprobes++;
            is_probe[i] = 1;
            ax_info("instance %lld: size probe says %lld -> %lld shard(s)",
                    (long long)as[i].instance_id, vol, (long long)shards);
        }
    PQclear(r);
    return 0;
}

static int on_attempt_batch(ax_svc_t *svc, rd_kafka_message_t **msgs, size_t n, void *arg) {
    callback_t *cb = arg;
    char err[1024], reason[512];
    char *skip = calloc(n, 1);
    int rc = 0, one_by_one = 0;
    int64_t *retry_ms = NULL;
    char *is_probe = NULL;
    if (!skip)
        return AX_ERR_NOMEM;
    /* decode once; undecodable results go to the dead-letter topic */
    ax_attempt_t *as = calloc(n, sizeof *as);
    if (!as) {
        free(skip);
        return AX_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (ax_svc_precheck(svc, msgs[i], AX_SCHEMA_ATTEMPT, reason, sizeof reason) < 0 ||
            ax_attempt_decode(msgs[i]->payload, msgs[i]->len, &as[i], reason, sizeof reason) < 0) {
            skip[i] = 1;
            if (ax_svc_reject(svc, msgs[i], reason) < 0) {
                rc = AX_ERR_IO;
                goto out;
            }
            continue;
        }
        if (as[i].output)
            ax_utf8_sanitize(as[i].output, strlen(as[i].output));
    }
    /* The trigger's backlog_full attempt and an executor's result for the
     * same instance in one batch: the executor claimed it after the cap
     * marked it, so its result is the one that counts (the statement
     * checks one state per instance). */
    for (size_t i = 0; i < n; i++) {
        if (skip[i] || !as[i].error_class || strcmp(as[i].error_class, "backlog_full") != 0 ||
            !as[i].worker || strcmp(as[i].worker, "ax-trigger") != 0)
            continue;
        for (size_t j = 0; j < n; j++)
            if (j != i && !skip[j] && as[j].instance_id == as[i].instance_id &&
                (!as[j].worker || strcmp(as[j].worker, "ax-trigger") != 0)) {
                skip[i] = 1;
                break;
            }
    }
    retry_ms = calloc(n, sizeof *retry_ms);
    if (!retry_ms) {
        rc = AX_ERR_NOMEM;
        goto out;
    }
    is_probe = calloc(n, 1);
    cb->nprobes = 0;
    if (!is_probe || (rc = find_probes(cb, as, skip, is_probe, n, err, sizeof err)) < 0 ||
        (rc = decide_retries(cb, as, skip, n, retry_ms, err, sizeof err)) < 0) {
        ax_warn("result policies: %s", err);
        if (!is_probe)
            rc = AX_ERR_NOMEM;
        goto out;
    }
    int64_t done = 0, offered = 0, retried = 0;
    for (size_t start = 0; start < n;) {
        finish_batch_t b;
        fb_begin(&b);
        size_t end = one_by_one ? start + 1 : n, used = 0;
        for (size_t i = start; i < end; i++)
            if (!skip[i] && !is_probe[i]) {
                fb_add(&b, &as[i], retry_ms[i]);
                used++;
            }
        int got = used || cb->nprobes ? fb_exec(cb, &b, &retried, err, sizeof err) : 0;
        fb_free(&b);
        if (got == AX_ERR_INVALID || got == AX_ERR_CONFLICT) {
            if (!one_by_one) {
                ax_warn("persist results: %s; retrying one result at a time", err);
                one_by_one = 1;
                continue;
            }
            skip[start] = 1;
            snprintf(reason, sizeof reason, "cannot persist result: %.400s", err);
            if (ax_svc_reject(svc, msgs[start], reason) < 0) {
                rc = AX_ERR_IO;
                goto out;
            }
            start = end;
            continue;
        }
        if (got < 0) {
            ax_warn("persist results: %s", err);
            rc = got;
            goto out;
        }
        done += got;
        offered += (int64_t)used;
        start = end;
    }
    if (retried) {
        /* wake the trigger: the retries are due in its scan */
        const char *q[] = {svc->conf.topic_prefix};
        ax_pg_exec(svc->pg, "SELECT pg_notify('ax_due', $1)", 1, q, NULL, NULL, NULL, err,
                   sizeof err);
        cb->retried += retried;
    }
    int64_t stale = offered - done;
    cb->finished += done;
    cb->stale += stale;
    if (stale) {
        ax_info("%lld stale or duplicate result(s) ignored", (long long)stale);
        ax_pg_count(svc->pg, "callback.stale_results", stale);
    }
    /* What the batch ended for good is in the outbox, durable: the batch is
     * done. The publisher (this process or another) publishes it; here at
     * once if this process is the publisher. */
    rc = 0;
    pub_tick(cb);
out:
    for (size_t i = 0; i < n; i++)
        ax_attempt_clear(&as[i]);
    free(retry_ms);
    free(is_probe);
    ax_strbuf_free(&cb->probe_ids);
    ax_strbuf_free(&cb->probe_n);
    ax_strbuf_free(&cb->probe_worker);
    ax_strbuf_free(&cb->probe_started);
    cb->nprobes = 0;
    free(as);
    free(skip);
    return rc;
}

/* ---- SIGHUP: keys applied while running; any other change waits for a restart ---------- */
static const char *const reloadable_keys[] = {
    "callback.retry.budget", "callback.batch", "alert.webhook.url", "alert.webhook.secret",
    "alert.webhook.timeout.ms", "backoff.initial.ms", "backoff.max.ms", NULL};

static int reload_check(ax_svc_t *svc, ax_conf_t *n, char *err, size_t len) {
    return alert_check(n, err, len);
}

static int str_changed(const char *a, const char *b) {
    return strcmp(a ? a : "", b ? b : "") != 0;
}

static void on_reload(ax_svc_t *svc, const ax_conf_t *old) {
    const ax_conf_t *c = &svc->conf;
    char err[512];
    if (c->callback_batch != old->callback_batch &&
        ax_svc_set_batch_max(svc, (size_t)c->callback_batch) < 0)
        ax_error("SIGHUP: callback.batch: out of memory; batches stay at %zu", svc->batch_max);
    if (str_changed(c->alert_webhook_url, old->alert_webhook_url) ||
        str_changed(c->alert_webhook_secret, old->alert_webhook_secret) ||
        c->alert_webhook_timeout_ms != old->alert_webhook_timeout_ms) {
        if (alert_init(svc, err, sizeof err) < 0)
            ax_error("SIGHUP: alert webhook off: %s", err);
    }
}

int main(int argc, char **argv) {
    static callback_t cb;
    if (ax_svc_init(&cb.svc, "ax-callback", &argc, argv, usage, "callback") < 0)
        return ax_svc_exit_status(&cb.svc);
    ax_svc_t *svc = &cb.svc;
    svc->reloadable = reloadable_keys;
    svc->reload_check = reload_check;
    svc->on_reload = on_reload;
    char aerr[512];
    if (alert_init(svc, aerr, sizeof aerr) < 0) {
        fprintf(stderr, "ax-callback: configuration error: %s\n", aerr);
        exit(2);
    }
    srand48((long)(ax_now_ms() ^ (int64_t)getpid() << 16));
    /* one publisher per deployment: the lock's name and the producer's
     * transactional.id are the deployment's */
    char buf[256];
    snprintf(cb.pub.lock_name, sizeof cb.pub.lock_name, "ax-callback results publisher %s",
             svc->conf.topic_prefix);
    snprintf(cb.pub.txn_id, sizeof cb.pub.txn_id, "%s",
             ax_conf_topic(&svc->conf, "callback-results", buf, sizeof buf));
    cb.pub.lockpg = ax_pg_new(&svc->conf, "ax-callback results lock", aerr, sizeof aerr);
    if (!cb.pub.lockpg) {
        ax_error("results publisher: %s", aerr);
        return 1;
    }
    atomic_store(&cb.pub.loop_ms, ax_mono_ms());
    if (pthread_mutex_init(&cb.pub.lock_mu, NULL) != 0 ||
        pthread_create(&cb.pub.ping_thr, NULL, pub_ping_main, &cb.pub) != 0)
        return 1;
    cb.pub.dlv.topic = svc->topic_results;
    cb.pub.dlv.d.on_message = pub_on_message;
    cb.pub.timer = event_new(svc->base, -1, EV_PERSIST, pub_timer, &cb);
    struct timeval tv = {0, PUB_TICK_MS * 1000};
    if (!cb.pub.timer || event_add(cb.pub.timer, &tv) < 0)
        return 1;
    char group[300];
    if (ax_svc_consume(svc, svc->topic_callback,
                       ax_conf_topic(&svc->conf, "callback", group, sizeof group),
                       (size_t)svc->conf.callback_batch,
                       on_attempt_batch, &cb) < 0)
        return ax_svc_exit_status(svc);
    ax_svc_run(svc);
    ax_info("stopped: %lld attempts recorded, %lld retries scheduled, %lld stale results "
            "ignored, %lld outcomes published",
            (long long)cb.finished, (long long)cb.retried, (long long)cb.stale,
            (long long)cb.published);
    event_free(cb.pub.timer);
    atomic_store(&cb.pub.ping_stop, 1);
    pthread_join(cb.pub.ping_thr, NULL);
    pub_recover_end(&cb.pub);
    if (cb.pub.txp)
        rd_kafka_destroy(cb.pub.txp);
    ax_pg_destroy(cb.pub.lockpg);
    pthread_mutex_destroy(&cb.pub.lock_mu);
    free(cb.pub.dlv.next);
    free(cb.pub.dlv.refused);
    free(cb.pub.cuts);
    alert_fini();
    ax_svc_destroy(svc);
    return 0;
}
