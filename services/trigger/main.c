/*
 * ax-trigger — owns time. Turns submissions (ax.submit) into SCHEDULED
 * instances in PostgreSQL, produces each instance to the dispatch topic when
 * it is due (marking it dispatched only after Kafka acknowledged it), and
 * sweeps expired leases so instances of a lost executor end TIMEOUT.
 *
 * Every trigger ingests submissions; only the leader (leader.c: a lease
 * row with an epoch, and a transactional producer) runs the schedules
 * (sched.c), dispatches and sweeps.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/alert.h"
#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "ax/service.h"
#include "trigger.h"

static const char usage[] =
    "Usage: ax-trigger [--config FILE] [--set KEY=VALUE]...\n\n"
    "Fires the jobs' schedules, persists submitted instances, dispatches them when\n"
    "due, and recovers the instances of lost executors. Run one or more; one leads\n"
    "at a time. SIGHUP reloads the configuration (the keys it can apply while running:\n"
    "see docs/OPERATIONS.md); SIGTERM stops (a leader releases its lease first).\n\n";

void arm_scan(trigger_t *t, int64_t ms) {
    if (ms < 0)
        ms = 0;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(t->ev_scan, &tv);
}

/* ---- ingest: ax.submit -> SCHEDULED ------------------------------------- */

/* One statement inserts a batch of submissions, of defined jobs (joined by
 * name; an unknown name inserts nothing) and inline commands (argv as a JSON
 * array). The key (submit_key) dedups redelivered submissions, through the
 * insert-only table submission. Payloads travel hex.
 *
 * On the leader ($14: its epoch, checked in this transaction; 0 elsewhere)
 * an instance due now, whose lane flows with room and nothing deferred
 * ($15, per priority: lane_direct), and that is not a static shard
 * parent, is marked dispatched with a dispatch_pending row in the same
 * statement and produced right after the commit (produce_settle), so it
 * skips the due scan and its extra update of the row. The rest waits for
 * the leader's due scan. Columns: DISPATCH_COLS, hold (NULL: produce now),
 * submit_key. */
#define DUE_NOW "u.run_at IS NULL AND coalesce(u.delay, 0) = 0"
#define LANE_DEFERS "coalesce(($13::bigint[])[u.p + 1], 1) <> 0"
static const char sql_ingest[] =
    "WITH u AS ("
    /* one row per key (a batch may carry a submission twice) */
    " SELECT DISTINCT ON (u.skey) u.*, j.id AS jid, j.name AS jname, j.handler_kind, j.command,"
    "  j.timeout_ms, coalesce(u.prio, j.priority, 2) AS p, j.executor_group, j.routing_key,"
    "  j.shard_count, j.shard_base"
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::smallint[],"
    "   $6::bigint[], $7::bigint[], $8::text[], $9::text[], $10::text[])"
    "   AS u(job, argv, payload, timeout, prio, run_at, delay, trace, idem, skey)"
    " LEFT JOIN job j ON j.name = u.job"
    /* a flow's schedule job (handler flow) is not submitted: axctl flow run */
    " WHERE u.job IS NULL OR (j.id IS NOT NULL AND j.handler_kind <> 'flow'"
    /* p0-p9 are lanes, never groups (dead-lettered, below) */
    "  AND j.executor_group !~ '^p[0-9]$')"
    "), sk AS ("
    /* the key decides: an instance only for a key not seen before */
    " INSERT INTO submission (submit_key, instance_id)"
    " SELECT skey, nextval('job_instance_id_seq') FROM u ON CONFLICT DO NOTHING"
    " RETURNING submit_key, instance_id"
    "), ins AS ("
    " INSERT INTO job_instance (id, job_id, job_name, handler_kind, command, payload, timeout_ms,"
    "  priority, due_at, trace_id, idempotency_key, submit_key, deployment, executor_group,"
    "  routing_field, shard_mode, deferred_at, dispatched_at)"
    " SELECT sk.instance_id, u.jid, u.jname, coalesce(u.handler_kind, 'command'),"
    "  CASE WHEN u.job IS NULL"
    "       THEN ARRAY(SELECT json_array_elements_text(u.argv::json)) ELSE u.command END,"
    "  decode(u.payload, 'hex'), coalesce(u.timeout, u.timeout_ms, $11::bigint), u.p,"
    "  CASE WHEN u.run_at IS NOT NULL THEN to_timestamp(u.run_at / 1000.0)"
    "       ELSE now() + make_interval(secs => coalesce(u.delay, 0) / 1000.0) END,"
    "  u.trace, u.idem, u.skey, $12, coalesce(u.executor_group, 'default'), u.routing_key,"
    "  CASE WHEN u.shard_count IS NOT NULL THEN 'static'"
    "       WHEN u.shard_base IS NOT NULL THEN 'probe' END,"
    /* due now while its lane defers: recorded as deferred at once */
    "  CASE WHEN " DUE_NOW " AND " LANE_DEFERS " THEN now() END,"
    "  CASE WHEN $14::bigint > 0 AND " DUE_NOW " AND ($15::int[])[u.p + 1] = 1"
    "   AND u.shard_count IS NULL THEN now() END"
    " FROM u JOIN sk ON sk.submit_key = u.skey"
    " RETURNING " DISPATCH_COLS ", CASE WHEN dispatched_at IS NULL THEN 1 END AS hold, submit_key"
    "), pend AS ("
    "  INSERT INTO dispatch_pending (instance_id, epoch, deployment)"
    "  SELECT id, $14::bigint, $12 FROM ins WHERE hold IS NULL"
    ")"
    " SELECT * FROM ins";
#define INGEST_HOLD 14
#define INGEST_SUBMIT_KEY 15

typedef struct ingest_row {
    ax_submit_t s;
    char submit_key[600];
    int state; /* 0 pending, 1 poison (dead-letter with reason), 2 inserted, 3 duplicate */
    char reason[512];
} ingest_row_t;

static void hex(ax_strbuf_t *b, const uint8_t *p, size_t n) {
    static const char d[] = "0123456789abcdef";
    char tmp[512];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        tmp[k++] = d[p[i] >> 4];
        tmp[k++] = d[p[i] & 15];
        if (k == sizeof tmp) {
            ax_strbuf_add(b, tmp, k);
            k = 0;
        }
    }
    ax_strbuf_add(b, tmp, k);
}

/* Insert rows [from, to) that are pending; sets their state. Returns 0,
 * or <0 (AX_ERR_INVALID: the statement refused the data). */
static int ingest_rows(trigger_t *t, ingest_row_t *rows, size_t from, size_t to, char *err,
                       size_t errlen) {
    ax_svc_t *svc = &t->svc;
    ax_strbuf_t a[10] = {{0}}, pl = {0};
    for (int k = 0; k < 10; k++)
        ax_pgarr_begin(&a[k]);
    size_t used = 0;
    for (size_t i = from; i < to; i++) {
        ingest_row_t *w = &rows[i];
        if (w->state)
            continue;
        const ax_submit_t *s = &w->s;
        ax_pgarr_text(&a[0], s->job);
        if (s->job) {
            ax_pgarr_text(&a[1], NULL);
        } else {
            json_t *arr = json_array();
            for (size_t k = 0; k < s->command_len; k++)
                json_array_append_new(arr, json_string(s->command[k]));
            char *js = json_dumps(arr, JSON_COMPACT);
            ax_pgarr_text(&a[1], js);
            free(js);
            json_decref(arr);
        }
        pl.len = 0;
        hex(&pl, s->payload, s->payload_len);
        ax_strbuf_add(&pl, "", 1);
        ax_pgarr_text(&a[2], pl.s);
        if (s->timeout_ms > 0)
            ax_pgarr_int(&a[3], s->timeout_ms);
        else
            ax_pgarr_text(&a[3], NULL);
        if (s->priority >= 0)
            ax_pgarr_int(&a[4], s->priority);
        else
            ax_pgarr_text(&a[4], NULL);
        if (s->run_at_ms > 0)
            ax_pgarr_int(&a[5], s->run_at_ms);
        else
            ax_pgarr_text(&a[5], NULL);
        if (s->delay_ms >= 0)
            ax_pgarr_int(&a[6], s->delay_ms);
        else
            ax_pgarr_text(&a[6], NULL);
        char trace[40];
        if (!s->trace_id)
            ax_random_hex(trace, 16);
        ax_pgarr_text(&a[7], s->trace_id ? s->trace_id : trace);
        ax_pgarr_text(&a[8], s->idempotency_key ? s->idempotency_key : w->submit_key);
        ax_pgarr_text(&a[9], w->submit_key);
        used++;
    }
    int rc = 0;
    PGresult *r = NULL;
    if (used) {
        for (int k = 0; k < 10; k++)
            ax_pgarr_end(&a[k]);
        char deftmo[32];
        snprintf(deftmo, sizeof deftmo, "%lld", (long long)svc->conf.executor_default_timeout_ms);
        /* only the leader knows the lanes: a standby never marks deferrals */
        char ages[200] = "{0,0,0,0,0}";
        if (lead_active(t))
            lane_ages(t, ages, sizeof ages);
        /* the leader produces what is due at once itself (fenced by its
         * epoch, re-read in this transaction) */
        char epoch[32] = "0";
        int tx = 0;
        if (lead_active(t) && ax_pg_begin(svc->pg, err, errlen) == 0) {
            tx = 1;
            int lc = lead_check_in_tx(t, err, errlen);
            if (lc == 0)
                snprintf(epoch, sizeof epoch, "%lld", (long long)t->epoch);
            else {
                ax_pg_rollback(svc->pg);
                tx = 0;
                if (lc == AX_ERR_CONFLICT)
                    lead_lost(t, err); /* fenced: ingest as a standby */
            }
        }
        char direct[64];
        lane_direct(t, direct, sizeof direct);
        const char *p[] = {a[0].s, a[1].s, a[2].s, a[3].s, a[4].s, a[5].s, a[6].s, a[7].s,
                           a[8].s, a[9].s, deftmo, svc->conf.topic_prefix, ages, epoch, direct};
        rc = ax_pg_exec(svc->pg, sql_ingest, 15, p, NULL, NULL, &r, err, errlen);
        if (tx && rc == 0)
            rc = ax_pg_commit(svc->pg, err, errlen);
        else if (tx)
            ax_pg_rollback(svc->pg);
        if (rc < 0) {
            PQclear(r);
            r = NULL;
        }
        if (rc == 0 && strcmp(epoch, "0") != 0)
            produce_settle(t, r, INGEST_HOLD);
    }
    for (int k = 0; k < 10; k++)
        ax_strbuf_free(&a[k]);
    ax_strbuf_free(&pl);
    if (rc < 0 || !used)
        return rc;
    /* Inserted, duplicate (same submit_key seen before), or unknown job. */
    int n = PQntuples(r);
    ax_strbuf_t names = {0};
    ax_pgarr_begin(&names);
    int missing = 0;
    for (size_t i = from; i < to; i++) {
        ingest_row_t *w = &rows[i];
        if (w->state)
            continue;
        for (int k = 0; k < n && !w->state; k++)
            if (strcmp(PQgetvalue(r, k, INGEST_SUBMIT_KEY), w->submit_key) == 0)
                w->state = 2;
        if (!w->state && w->s.job) {
            ax_pgarr_text(&names, w->s.job);
            missing = 1;
        }
        if (!w->state && !w->s.job)
            w->state = 3;
    }
    PQclear(r);
    ax_pgarr_end(&names);
    if (missing) {
        const char *q[] = {names.s};
        rc = ax_pg_exec(svc->pg,
                        "SELECT name, handler_kind = 'flow', executor_group FROM job"
                        " WHERE name = ANY($1::text[])",
                        1, q, NULL, NULL, &r, err, errlen);
        if (rc == 0) {
            for (size_t i = from; i < to; i++) {
                ingest_row_t *w = &rows[i];
                if (w->state)
                    continue;
                int exists = 0, flow = 0;
                const char *group = "";
                for (int k = 0; k < PQntuples(r) && !exists; k++)
                    if (strcmp(PQgetvalue(r, k, 0), w->s.job) == 0) {
                        exists = 1;
                        flow = strcmp(PQgetvalue(r, k, 1), "t") == 0;
                        group = PQgetvalue(r, k, 2);
                    }
                if (exists && !flow && ax_conf_group_reserved(group)) {
                    w->state = 1;
                    snprintf(w->reason, sizeof w->reason,
                             "job '%.300s' names executor group '%s', a reserved name (p0-p9 "
                             "are priority lanes)",
                             w->s.job, group);
                } else if (flow) {
                    w->state = 1;
                    snprintf(w->reason, sizeof w->reason,
                             "job '%.400s' starts a flow: run it with axctl flow run", w->s.job);
                } else if (exists) {
                    w->state = 3;
                } else {
                    w->state = 1;
                    snprintf(w->reason, sizeof w->reason, "unknown job '%.400s'", w->s.job);
                }
            }
            PQclear(r);
        }
    }
    ax_strbuf_free(&names);
    return rc;
}

/* An instance is produced onward as one dispatch record, which must fit
 * message.max.bytes like every ax message: a submission whose dispatch
 * could not (payload + argv + the other fields at their longest) is
 * dead-lettered now instead of failing the leader's Kafka transaction
 * later. A defined job's own command is not known here; the dispatch path
 * holds an instance whose record turns out too large (produce_dispatch_rows). */
static void submit_size_check(ax_svc_t *svc, ingest_row_t *w) {
    const ax_submit_t *s = &w->s;
    size_t max = (size_t)svc->conf.message_max_bytes;
    size_t n = ax_dispatch_size_max(s->job, NULL, (const char *const *)s->command,
                                    s->command_len, s->payload_len, s->trace_id,
                                    s->idempotency_key ? s->idempotency_key : w->submit_key);
    if (n <= max)
        return;
    w->state = 1;
    snprintf(w->reason, sizeof w->reason,
             "too large: its dispatch record would take up to %zu bytes (payload %zu bytes), "
             "over message.max.bytes %zu",
             n, s->payload_len, max);
}

static int on_submit_batch(ax_svc_t *svc, rd_kafka_message_t **msgs, size_t n, void *arg) {
    trigger_t *t = arg;
    char err[1024];
    ingest_row_t *rows = calloc(n, sizeof *rows);
    if (!rows)
        return AX_ERR_NOMEM;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        rd_kafka_message_t *m = msgs[i];
        ingest_row_t *w = &rows[i];
        if (ax_svc_precheck(svc, m, AX_SCHEMA_SUBMIT, w->reason, sizeof w->reason) < 0 ||
            ax_submit_decode(m->payload, m->len, &w->s, w->reason, sizeof w->reason) < 0) {
            w->state = 1;
            continue;
        }
        if (w->s.idempotency_key)
            snprintf(w->submit_key, sizeof w->submit_key, "idem:%.512s", w->s.idempotency_key);
        else
            snprintf(w->submit_key, sizeof w->submit_key, "kafka:%s:%d:%lld",
                     rd_kafka_topic_name(m->rkt), (int)m->partition, (long long)m->offset);
        submit_size_check(svc, w);
    }
    /* One statement for the batch; if it refuses the data, one row at a
     * time so only the bad submission is dead-lettered. */
    rc = ingest_rows(t, rows, 0, n, err, sizeof err);
    if (rc == AX_ERR_INVALID || rc == AX_ERR_CONFLICT) {
        ax_warn("ingest: %s; retrying one submission at a time", err);
        rc = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
            rc = ingest_rows(t, rows, i, i + 1, err, sizeof err);
            if (rc == AX_ERR_INVALID || rc == AX_ERR_CONFLICT) {
                rows[i].state = 1;
                snprintf(rows[i].reason, sizeof rows[i].reason, "cannot persist: %.450s", err);
                rc = 0;
            }
        }
    }
    if (rc < 0) {
        ax_warn("ingest: %s", err);
        goto out;
    }
    int64_t added = 0, dups = 0;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].state == 1) {
            ax_warn("submission %s [%d] @%lld rejected: %s", rd_kafka_topic_name(msgs[i]->rkt),
                    (int)msgs[i]->partition, (long long)msgs[i]->offset, rows[i].reason);
            if (ax_svc_reject(svc, msgs[i], rows[i].reason) < 0) {
                rc = AX_ERR_IO;
                goto out;
            }
        }
        added += rows[i].state == 2;
        dups += rows[i].state == 3;
    }
    t->submitted += added;
    t->duplicates += dups;
    if (dups) {
        ax_info("%lld duplicate submission(s) ignored", (long long)dups);
        ax_pg_count(svc->pg, "trigger.duplicate_submissions", dups);
    }
    if (added)
        ax_debug("%lld instance(s) scheduled", (long long)added);
    if (added && t->leader)
        arm_scan(t, 0);
out:
    for (size_t i = 0; i < n; i++)
        ax_submit_clear(&rows[i].s);
    free(rows);
    return rc;
}

/* ---- the leader's transactions ------------------------------------------- */

int lead_tx_finish(trigger_t *t, int rc, const char *what, char *err, size_t errlen) {
    if (rc == 0)
        rc = ax_pg_commit(t->svc.pg, err, errlen);
    if (rc < 0) {
        ax_pg_rollback(t->svc.pg);
        if (rc == AX_ERR_CONFLICT)
            lead_lost(t, err);
        else
            ax_warn("%s: %s", what, err);
    }
    return rc;
}

int produce_attempt(trigger_t *t, const ax_attempt_t *a, char *err, size_t errlen) {
    void *buf;
    size_t len;
    char key[32];
    int klen = snprintf(key, sizeof key, "%lld", (long long)a->instance_id);
    int rc = ax_attempt_encode(a, &buf, &len);
    if (rc < 0)
        return ax_seterr(err, errlen, rc, "instance %lld: cannot encode its attempt",
                         (long long)a->instance_id);
    rc = ax_kafka_produce(t->txp, t->svc.topic_callback, key, (size_t)klen, buf, len, NULL, NULL,
                          err, errlen);
    free(buf);
    return rc;
}

/* ---- dispatch: due SCHEDULED -> ax.dispatch ------------------------------ */

/* Due, not produced yet, and not waiting for an unfinished predecessor
 * (overlap=queue). */
#define NOT_WAITING                                                                   \
    " AND (wait_for IS NULL OR NOT EXISTS (SELECT 1 FROM job_instance p"              \
    " WHERE p.id = job_instance.wait_for AND p.state <> 'FINISHED'))"
/* Per lane ($4: the release plan's wait per priority, NULL = held until the
 * lane itself is back under its low mark), oldest first through the
 * (priority, due_at) index, then merged in order of effective priority
 * (priority - waited / aging; $5 = trigger.aging.ms, or a huge number
 * without aging), each onto its target lane ($6, per priority) and no more
 * onto a lane than it has room for ($7, per lane: lane_room). Backlog-capped instances (error class backlog_full) wait
 * for ax-callback to finish them. */
static const char sql_due[] =
    "WITH d0 AS ("
    "  SELECT c.id, c.due_at, c.priority, ($6::int[])[c.priority + 1] AS lane"
    "  FROM unnest($4::bigint[]) WITH ORDINALITY AS l(wait_ms, lane1),"
    "  LATERAL (SELECT id, due_at, priority FROM job_instance WHERE state = 'SCHEDULED'"
    "    AND dispatched_at IS NULL AND priority = l.lane1 - 1"
    "    AND due_at <= now() - l.wait_ms * interval '1 millisecond' AND deployment = $2"
    NOT_WAITING
    "    AND shard_mode IS DISTINCT FROM 'static'"
    "    AND error_class IS DISTINCT FROM 'backlog_full'"
    "    ORDER BY due_at LIMIT least($1, ($7::bigint[])[($6::int[])[l.lane1] + 1])"
    "    FOR UPDATE SKIP LOCKED) c"
    "  WHERE l.wait_ms IS NOT NULL"
    "), d1 AS ("
    "  SELECT id, c.priority * $5::float8 - extract(epoch FROM now() - c.due_at) * 1000 AS eff,"
    "    lane FROM d0 c"
    "), d AS MATERIALIZED ("
    /* no more onto a lane than its room ($7, per lane) */
    "  SELECT id AS due_id, eff FROM (SELECT *, row_number() OVER (PARTITION BY lane ORDER BY eff)"
    "    AS rn FROM d1) x WHERE rn <= ($7::bigint[])[lane + 1] ORDER BY eff LIMIT $1"
    "), u AS ("
    /* by primary key only: the rows are locked above; a join here could
     * become a nested loop over job_instance_due, which the planner
     * estimates at 1 row in the middle of a burst (BENCHMARKS.md) */
    "  UPDATE job_instance SET dispatched_at = now() WHERE id = ANY(ARRAY(SELECT due_id FROM d))"
    "  RETURNING " DISPATCH_COLS
    "), pend AS ("
    "  INSERT INTO dispatch_pending (instance_id, epoch, deployment)"
    "  SELECT id, $3::bigint, $2 FROM u"
    ")"
    " SELECT * FROM u";

/* Instances of deferring lanes that fell due since the last mark are
 * recorded as deferred (deferred_at), lane by lane from a per-lane mark
 * ($2, epoch ms) so each is looked at about once: at most $4 per lane, oldest
 * first (keyset: the mark moves to the last one marked), and updated by
 * primary key only — a join onto job_instance here became a nested loop
 * over job_instance_due (estimated at 1 row mid-burst) that ran for minutes
 * (issue #11; BENCHMARKS.md). Returns per lane: marked, last due_at (ms). */
static const char sql_mark_deferred[] =
    "WITH l AS (SELECT * FROM unnest($1::int[], $2::bigint[]) AS l(lane, since)),"
    " m AS MATERIALIZED (SELECT i.id, i.priority, i.due_at FROM l,"
    "   LATERAL (SELECT id, priority, due_at FROM job_instance WHERE state = 'SCHEDULED'"
    "   AND dispatched_at IS NULL AND priority = l.lane"
    "   AND due_at >= to_timestamp(l.since / 1000.0) AND due_at <= now()"
    "   AND deployment = $3 AND deferred_at IS NULL ORDER BY due_at LIMIT $4) i),"
    " u AS (UPDATE job_instance SET deferred_at = coalesce(deferred_at, now())"
    "   WHERE id = ANY(ARRAY(SELECT id FROM m)))"
    " SELECT priority, count(*), (extract(epoch FROM max(due_at)) * 1000)::bigint"
    " FROM m GROUP BY priority";

/* The release plan as a PostgreSQL array: wait per priority, NULL = held. */
void lane_ages(const trigger_t *t, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "{");
    for (int p = 0; p < AX_PRIORITIES && o < len; p++) {
        if (t->lane_min_age_ms[p] == INT64_MAX)
            o += (size_t)snprintf(buf + o, len - o, "%sNULL", p ? "," : "");
        else
            o += (size_t)snprintf(buf + o, len - o, "%s%lld", p ? "," : "",
                                  (long long)t->lane_min_age_ms[p]);
    }
    if (o < len)
        snprintf(buf + o, len - o, "}");
}

/* The room of a lane: how many more it may be sent before the next lag
 * sample, high mark - lag - sent since the sample; unlimited for P0 and
 * while the lag monitor is not working. */
int64_t lane_room(const trigger_t *t, int lane) {
    if (lane <= 0 || lane >= AX_PRIORITIES || t->lag_ok <= 0)
        return INT64_MAX / 4;
    int64_t room = t->svc.conf.trigger_lag_high - t->lanes[lane].lag - t->lane_sent[lane];
    return room > 0 ? room : 0;
}

/* Per priority: 1 if an instance due now may be produced by the ingest
 * statement itself: its lane flows, nothing of it is deferred (older work
 * goes first, through the due scan) and there is room for a batch. */
void lane_direct(const trigger_t *t, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "{");
    for (int p = 0; p < AX_PRIORITIES && o < len; p++) {
        int ok = p == 0 || (t->lane_min_age_ms[p] == 0 && t->deferred[p] == 0 &&
                            lane_room(t, p) >= t->svc.conf.trigger_batch);
        o += (size_t)snprintf(buf + o, len - o, "%s%d", p ? "," : "", ok);
    }
    if (o < len)
        snprintf(buf + o, len - o, "}");
}

static void mark_deferred(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512], lanes[64], since[200];
    size_t lo = 0, so = 0;
    int any = 0;
    int64_t now = ax_now_ms();
    lo += (size_t)snprintf(lanes, sizeof lanes, "{");
    so += (size_t)snprintf(since, sizeof since, "{");
    for (int p = 1; p < AX_PRIORITIES; p++) {
        if (t->lane_min_age_ms[p] == 0) {
            t->mark_since_ms[p] = 0;
            continue;
        }
        if (!t->mark_since_ms[p]) /* starts deferring: look back a little */
            t->mark_since_ms[p] = now - 60000;
        lo += (size_t)snprintf(lanes + lo, sizeof lanes - lo, "%s%d", any ? "," : "", p);
        so += (size_t)snprintf(since + so, sizeof since - so, "%s%lld", any ? "," : "",
                               (long long)t->mark_since_ms[p]);
        any = 1;
    }
    if (!any)
        return;
    snprintf(lanes + lo, sizeof lanes - lo, "}");
    snprintf(since + so, sizeof since - so, "}");
    char lim[32];
    snprintf(lim, sizeof lim, "%lld", (long long)svc->conf.trigger_batch);
    const char *prm[] = {lanes, since, svc->conf.topic_prefix, lim};
    PGresult *r;
    if (ax_pg_exec(svc->pg, sql_mark_deferred, 4, prm, NULL, NULL, &r, err, sizeof err) < 0) {
        ax_warn("mark deferred: %s", err);
        return;
    }
    int full[AX_PRIORITIES] = {0};
    for (int i = 0; i < PQntuples(r); i++) {
        int p = (int)ax_pg_int(r, i, 0);
        if (p <= 0 || p >= AX_PRIORITIES || ax_pg_int(r, i, 1) < svc->conf.trigger_batch)
            continue;
        /* a full batch: go on from the last one marked at the next scan */
        full[p] = 1;
        t->mark_since_ms[p] = ax_pg_int(r, i, 2);
    }
    PQclear(r);
    /* a small overlap: rows inserted late with an earlier due_at */
    for (int p = 1; p < AX_PRIORITIES; p++)
        if (t->lane_min_age_ms[p] != 0 && !full[p])
            t->mark_since_ms[p] = now - 2000;
}

static int json_argv(const char *text, ax_dispatch_t *d) {
    json_error_t je;
    json_t *a = json_loads(text, 0, &je);
    if (!json_is_array(a) || json_array_size(a) == 0) {
        json_decref(a);
        return -1;
    }
    size_t n = json_array_size(a);
    d->command = calloc(n + 1, sizeof *d->command);
    for (size_t i = 0; d->command && i < n; i++)
        d->command[i] = strdup(json_string_value(json_array_get(a, i)) ?: "");
    d->command_len = n;
    json_decref(a);
    return d->command ? 0 : -1;
}

/* The message key: the value of the payload's routing field when the job
 * names one and the payload is a JSON object holding it as a string or an
 * integer, so one key always lands on one partition (murmur2, as Java
 * clients hash); else the instance id, which spreads evenly. */
static int routing_key(const char *field, const ax_dispatch_t *d, char *key, size_t len) {
    if (field && d->payload_len) {
        json_error_t je;
        json_t *o = json_loadb((const char *)d->payload, d->payload_len, 0, &je);
        json_t *v = json_is_object(o) ? json_object_get(o, field) : NULL;
        int n = -1;
        if (json_is_string(v) && json_string_length(v) < len)
            n = snprintf(key, len, "%s", json_string_value(v));
        else if (json_is_integer(v))
            n = snprintf(key, len, "%lld", (long long)json_integer_value(v));
        json_decref(o);
        if (n > 0)
            return n;
    }
    return snprintf(key, len, "%lld", (long long)d->instance_id);
}

/* Why the instance of row i must not be produced to `topic` now (into l),
 * or 0 to produce it: its group is a reserved name, or the topic does not
 * exist (never produced to: that would hold the transaction). */
static int hold_reason(trigger_t *t, PGresult *r, int i, const char *topic, hold_list_t *l) {
    int64_t id = ax_pg_int(r, i, 0);
    const char *group = PQgetvalue(r, i, 12), *job = PQgetisnull(r, i, 2) ? NULL
                                                                          : PQgetvalue(r, i, 2);
    if (ax_conf_group_reserved(group)) {
        hold_add(l, id, job, NULL, 1,
                 "executor group '%s' is reserved: p0-p9 name the priority lanes; change the "
                 "job's group (axctl job update --group) and cancel this instance",
                 group);
        return 1;
    }
    int known = hold_topic_known(t, topic);
    if (known == 0)
        hold_add(l, id, job, topic, 1,
                 "executor group '%s' has no topic %s (create it: axctl topics create "
                 "--group %s); produced once it exists",
                 group, topic, group);
    else if (known < 0)
        hold_add(l, id, job, topic, 0, "waiting for the first list of topics");
    return known != 1;
}

/* One dispatch record's delivery report: a record Kafka refused for
 * itself (too large for the topic, say: a topic not made by axctl topics
 * create) is noted, so the batch is not retried with it forever; any other
 * error (authorization, say) is not the record's: it is counted, and the
 * failed transaction counts towards giving up leadership. Freed by its
 * report, whenever that is served (the commit's flush, or the next). */
typedef struct row_dlv {
    ax_delivery_t d;
    trigger_t *t;
    int64_t id;
    size_t len;
} row_dlv_t;

static void on_row_report(ax_delivery_t *d, rd_kafka_resp_err_t err) {
    row_dlv_t *rd = (row_dlv_t *)d;
    trigger_t *t = rd->t;
    if (err && !ax_kafka_err_record_refused(err))
        t->nfailed_other++;
    if (ax_kafka_err_record_refused(err)) {
        if (t->nrefused == t->caprefused) {
            size_t cap = t->caprefused ? t->caprefused * 2 : 16;
            struct refusal *v = realloc(t->refused, cap * sizeof *v);
            if (v) {
                t->refused = v;
                t->caprefused = cap;
            }
        }
        if (t->nrefused < t->caprefused)
            t->refused[t->nrefused++] = (struct refusal){rd->id, rd->len, err};
    }
    free(rd);
}

/* After a failed commit: the largest record of this batch Kafka refused
 * for itself is held (one per failed transaction: a record set refused as
 * a whole names every record in it). Returns 1 if one was. */
static int hold_refused(trigger_t *t, PGresult *r, int skip_col, hold_list_t *holds) {
    struct refusal *best = NULL;
    for (size_t k = 0; k < t->nrefused; k++) {
        int in = 0;
        for (int i = 0; i < PQntuples(r) && !in; i++)
            in = (skip_col < 0 || PQgetisnull(r, i, skip_col)) &&
                 ax_pg_int(r, i, 0) == t->refused[k].id;
        if (in && (!best || t->refused[k].len > best->len))
            best = &t->refused[k];
    }
    if (best)
        for (int i = 0; i < PQntuples(r); i++)
            if (ax_pg_int(r, i, 0) == best->id) {
                hold_add(holds, best->id, PQgetisnull(r, i, 2) ? NULL : PQgetvalue(r, i, 2),
                         NULL, 1,
                         "Kafka refused its dispatch record of %zu bytes (%s): the topic "
                         "accepts less than message.max.bytes; create topics with axctl "
                         "topics create, or set max.message.bytes >= %lld",
                         best->len, rd_kafka_err2str(best->err),
                         (long long)ax_kafka_record_max(&t->svc.conf));
                break;
            }
    t->nrefused = 0;
    return best != NULL;
}

/* Produce rows of r (DISPATCH_COLS first) through the leader's
 * transactional producer, skipping rows whose column skip_col (if >= 0) is
 * not NULL; their ids are appended to `ids`, the ids of rows that cannot
 * be produced to `holds` with their reason (hold.c). Returns rows
 * produced, or AX_ERR_IO (err) when a produce failed: the caller aborts. */
static int produce_dispatch_rows(trigger_t *t, PGresult *r, int skip_col, ax_strbuf_t *ids,
                                 hold_list_t *holds, char *err, size_t errlen) {
    int produced = 0;
    size_t max = (size_t)t->svc.conf.message_max_bytes;
    for (int i = 0; i < PQntuples(r); i++) {
        if (skip_col >= 0 && !PQgetisnull(r, i, skip_col))
            continue;
        ax_dispatch_t d = {0};
        d.instance_id = ax_pg_int(r, i, 0);
        d.attempt = (int32_t)ax_pg_int(r, i, 1);
        d.priority = (int32_t)ax_pg_int(r, i, 9);
        char key[256], topic[300];
        ax_conf_dispatch_topic(&t->svc.conf, PQgetvalue(r, i, 12), lane_of(t, &d), topic,
                               sizeof topic);
        if (hold_reason(t, r, i, topic, holds))
            continue;
        d.job = PQgetisnull(r, i, 2) ? NULL : strdup(PQgetvalue(r, i, 2));
        d.handler_kind = strdup(PQgetvalue(r, i, 3));
        if (PQgetisnull(r, i, 4) || json_argv(PQgetvalue(r, i, 4), &d) < 0) {
            ax_error("instance %lld has no command; skipping", (long long)d.instance_id);
            ax_dispatch_clear(&d);
            continue;
        }
        size_t plen = 0;
        d.payload = PQunescapeBytea((const unsigned char *)PQgetvalue(r, i, 5), &plen);
        d.payload_len = plen;
        d.timeout_ms = ax_pg_int(r, i, 6);
        d.nominal_time_ms = ax_pg_int(r, i, 7);
        d.due_at_ms = ax_pg_int(r, i, 8);
        d.trace_id = strdup(PQgetvalue(r, i, 10));
        d.idempotency_key = strdup(PQgetvalue(r, i, 11));
        void *buf;
        size_t len;
        int klen = routing_key(PQgetisnull(r, i, 13) ? NULL : PQgetvalue(r, i, 13), &d, key,
                               sizeof key);
        int rc = ax_dispatch_encode(&d, &buf, &len);
        if (rc == 0 && len > max) {
            /* a defined job's command made it too large: never produced */
            hold_add(holds, d.instance_id, d.job, NULL, 1,
                     "its dispatch record takes %zu bytes, over message.max.bytes %zu "
                     "(payload %zu bytes)",
                     len, max, d.payload_len);
            free(buf);
        } else if (rc == 0) {
            row_dlv_t *rd = calloc(1, sizeof *rd);
            if (rd) {
                rd->d.on_report = on_row_report;
                rd->t = t;
                rd->id = d.instance_id;
                rd->len = len;
            }
            rc = ax_kafka_produce(t->txp, topic, key, (size_t)klen, buf, len, NULL,
                                  rd ? &rd->d : NULL, err, errlen);
            if (rc < 0)
                free(rd); /* not adopted: no report comes */
            free(buf);
            if (rc == 0) {
                ax_pgarr_int(ids, d.instance_id);
                t->lane_sent[lane_of(t, &d)]++;
                produced++;
            } else if (strstr(err, "nknown topic")) {
                /* gone since the last topic list: held, not the batch aborted */
                hold_add(holds, d.instance_id, d.job, topic, 1, "%s", err);
                rc = 0;
            }
        } else {
            snprintf(err, errlen, "instance %lld: cannot encode its dispatch",
                     (long long)d.instance_id);
        }
        /* PQunescapeBytea memory must go back through PQfreemem. */
        PQfreemem(d.payload);
        d.payload = NULL;
        ax_dispatch_clear(&d);
        if (rc < 0)
            return AX_ERR_IO;
    }
    return produced;
}

/* Instances whose dispatch is undone: by primary key only, the state
 * checked in the SET (a WHERE on state lets the planner walk a partial
 * index of job_instance, estimated at 1 row mid-burst: BENCHMARKS.md). */
#define UNDISPATCH "CASE WHEN state = 'SCHEDULED' THEN NULL ELSE dispatched_at END"

int produce_settle(trigger_t *t, PGresult *r, int skip_col) {
    ax_svc_t *svc = &t->svc;
    char err[512] = "";
    ax_strbuf_t ids = {0}, all = {0};
    hold_list_t holds = {0};
    ax_pgarr_begin(&ids);
    ax_pgarr_begin(&all);
    int rows = 0;
    for (int i = 0; i < PQntuples(r); i++)
        if (skip_col < 0 || PQgetisnull(r, i, skip_col)) {
            ax_pgarr_int(&all, ax_pg_int(r, i, 0));
            rows++;
        }
    ax_pgarr_end(&all);
    int produced = 0;
    t->nrefused = 0;
    t->nfailed_other = 0;
    if (rows) {
        produced = AX_ERR_IO;
        if (lead_txn_begin(t) == 0) {
            produced = produce_dispatch_rows(t, r, skip_col, &ids, &holds, err, sizeof err);
            if (produced < 0) {
                /* never left open: every later begin would fail */
                char why[700];
                snprintf(why, sizeof why, "dispatch of %d instance(s): %s", rows, err);
                lead_txn_abort(t, why);
            } else if (lead_txn_commit(t) < 0) {
                produced = AX_ERR_IO;
                /* aborted because of one record: hold it, retry the rest */
                hold_list_free(&holds);
                if (t->leader && hold_refused(t, r, skip_col, &holds) && holds.n) {
                    if (!t->nfailed_other)
                        t->txn_failures = 0; /* the producer works; the record did not */
                    char id[32];
                    snprintf(id, sizeof id, "{%lld}", (long long)holds.v[0].id);
                    if (hold_record(t, id, &holds, err, sizeof err) < 0)
                        ax_warn("dispatch hold: %s", err);
                }
                hold_list_free(&holds);
            }
        }
    }
    ax_pgarr_end(&ids);
    const char *p[] = {all.s};
    if (rows && produced >= 0 && holds.n) {
        if (hold_record(t, all.s, &holds, err, sizeof err) < 0)
            ax_warn("dispatch settle: %s (recovered later: the instances may be produced "
                    "twice; executors drop the duplicates)", err);
        t->dispatched += produced;
    } else if (rows && produced >= 0) {
        if (ax_pg_exec(svc->pg, "DELETE FROM dispatch_pending WHERE instance_id = ANY($1::bigint[])",
                       1, p, NULL, NULL, NULL, err, sizeof err) < 0)
            ax_warn("dispatch settle: %s (recovered later: the instances may be produced "
                    "twice; executors drop the duplicates)", err);
        t->dispatched += produced;
    } else if (rows) {
        /* Nothing of the transaction is visible: back to the due scan. */
        if (ax_pg_exec(svc->pg,
                       "WITH p AS MATERIALIZED (DELETE FROM dispatch_pending"
                       "  WHERE instance_id = ANY($1::bigint[]) RETURNING instance_id)"
                       " UPDATE job_instance SET dispatched_at = " UNDISPATCH
                       " WHERE id = ANY(ARRAY(SELECT instance_id FROM p))",
                       1, p, NULL, NULL, NULL, err, sizeof err) < 0)
            ax_warn("dispatch undo: %s (recovered later)", err);
        arm_scan(t, svc->conf.backoff_initial_ms);
    }
    hold_list_free(&holds);
    ax_strbuf_free(&ids);
    ax_strbuf_free(&all);
    return produced;
}

void recover_pending(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512], epoch[32];
    snprintf(epoch, sizeof epoch, "%lld", (long long)t->epoch);
    const char *p[] = {svc->conf.topic_prefix, epoch};
    PGresult *r;
    if (ax_pg_exec(svc->pg,
                   "WITH p AS MATERIALIZED (DELETE FROM dispatch_pending WHERE deployment = $1"
                   "  AND (epoch < $2::bigint OR created_at < now() - interval '1 minute')"
                   "  RETURNING instance_id),"
                   " u AS (UPDATE job_instance SET dispatched_at = " UNDISPATCH
                   "  WHERE id = ANY(ARRAY(SELECT instance_id FROM p)) RETURNING id, state)"
                   " SELECT id FROM u WHERE state = 'SCHEDULED'",
                   2, p, NULL, NULL, &r, err, sizeof err) < 0) {
        ax_warn("dispatch recovery: %s", err);
        return;
    }
    if (PQntuples(r)) {
        ax_warn("%d instance(s) whose dispatch was not confirmed: producing them again",
                PQntuples(r));
        arm_scan(t, 0);
    }
    PQclear(r);
}

/* Produce up to one batch of due instances in one Kafka transaction;
 * returns rows handled or <0. */
static int dispatch_batch(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[1024], lim[32], epoch[32];
    snprintf(lim, sizeof lim, "%lld", (long long)svc->conf.trigger_batch);
    snprintf(epoch, sizeof epoch, "%lld", (long long)t->epoch);
    char ages[200], aging[32];
    lane_ages(t, ages, sizeof ages);
    snprintf(aging, sizeof aging, "%lld",
             (long long)(svc->conf.trigger_aging_ms > 0 ? svc->conf.trigger_aging_ms
                                                        : 1000000000000000LL));
    char targets[64], rooms[200];
    size_t to = (size_t)snprintf(targets, sizeof targets, "{");
    size_t ro = (size_t)snprintf(rooms, sizeof rooms, "{");
    for (int k = 0; k < AX_PRIORITIES; k++) {
        to += (size_t)snprintf(targets + to, sizeof targets - to, "%s%d", k ? "," : "",
                               t->lane_target[k]);
        ro += (size_t)snprintf(rooms + ro, sizeof rooms - ro, "%s%lld", k ? "," : "",
                               (long long)lane_room(t, k));
    }
    snprintf(targets + to, sizeof targets - to, "}");
    snprintf(rooms + ro, sizeof rooms - ro, "}");
    const char *p[] = {lim, svc->conf.topic_prefix, epoch, ages, aging, targets, rooms};
    PGresult *r = NULL;
    /* Like every dispatch batch: in a transaction that re-reads the lease
     * row with our epoch, so a stale leader marks nothing. */
    int rc = ax_pg_begin(svc->pg, err, sizeof err);
    if (rc == 0)
        rc = lead_check_in_tx(t, err, sizeof err);
    /* statically sharded parents due now become their shards */
    if (rc == 0)
        rc = ax_pg_exec(svc->pg,
                        "SELECT ax_shard_expand(i.id, j.shard_count) FROM job_instance i"
                        " JOIN job j ON j.id = i.job_id WHERE i.state = 'SCHEDULED'"
                        " AND i.shard_mode = 'static' AND i.dispatched_at IS NULL"
                        " AND i.due_at <= now() AND i.deployment = $2 LIMIT $1",
                        2, p, NULL, NULL, NULL, err, sizeof err);
    if (rc == 0)
        rc = ax_pg_exec(svc->pg, sql_due, 7, p, NULL, NULL, &r, err, sizeof err);
    if ((rc = lead_tx_finish(t, rc, "due scan", err, sizeof err)) < 0) {
        PQclear(r);
        return rc;
    }
    int rows = PQntuples(r);
    rc = rows ? produce_settle(t, r, -1) : 0;
    PQclear(r);
    return rc < 0 ? rc : rows;
}

static void on_scan(evutil_socket_t fd, short what, void *arg) {
    trigger_t *t = arg;
    ax_svc_t *svc = &t->svc;
    char err[512];
    if (svc->stopping)
        return;
    if (!lead_active(t)) {
        arm_scan(t, svc->conf.trigger_scan_interval_ms);
        return;
    }
    int n = 0;
    int64_t start = ax_mono_ms();
    for (int round = 0; round < 16; round++) {
        n = dispatch_batch(t);
        if (n < 0) {
            arm_scan(t, ax_backoff_ms(t->scan_failures++, svc->conf.backoff_initial_ms,
                                      svc->conf.backoff_max_ms));
            return;
        }
        t->scan_failures = 0;
        if (n < svc->conf.trigger_batch)
            break;
        /* more due: yield to the loop (its lease timer, ingest, schedules)
         * after 16 batches or a second, then go on */
        if (round == 15 || ax_mono_ms() - start >= 1000) {
            arm_scan(t, 0);
            return;
        }
    }
    mark_deferred(t);
    /* Sleep until the next instance the release plan lets go, at most the
     * scan interval. */
    PGresult *r;
    int64_t next = svc->conf.trigger_scan_interval_ms;
    char ages[200];
    lane_ages(t, ages, sizeof ages);
    if (ax_pg_exec(svc->pg,
                   "SELECT ceil(min(extract(epoch FROM (m.due + l.wait_ms * interval"
                   "  '1 millisecond' - now()))) * 1000)::bigint"
                   " FROM unnest($2::bigint[]) WITH ORDINALITY AS l(wait_ms, lane1),"
                   " LATERAL (SELECT min(due_at) AS due FROM job_instance"
                   "  WHERE state = 'SCHEDULED' AND dispatched_at IS NULL"
                   "  AND priority = l.lane1 - 1 AND deployment = $1" NOT_WAITING
                   "  AND error_class IS DISTINCT FROM 'backlog_full') m"
                   " WHERE l.wait_ms IS NOT NULL",
                   2, (const char *[]){svc->conf.topic_prefix, ages}, NULL, NULL, &r, err,
                   sizeof err) == 0) {
        if (!PQgetisnull(r, 0, 0) && ax_pg_int(r, 0, 0) < next)
            next = ax_pg_int(r, 0, 0);
        PQclear(r);
    }
    /* Due work the last batch could not take (its lane has no room until
     * the next lag sample, or rows locked elsewhere): not before then. */
    if (n == 0 && next <= 0)
        next = svc->conf.trigger_lag_interval_ms;
    arm_scan(t, next);
}

/* ---- lease sweep: expired LOCKED/RUNNING -> TIMEOUT via the callback ----- */

static void on_sweep(evutil_socket_t fd, short what, void *arg) {
    trigger_t *t = arg;
    ax_svc_t *svc = &t->svc;
    char err[1024], lim[32];
    if (svc->stopping || !lead_active(t))
        return;
    lead_note_reconnect(t);
    recover_pending(t);
    if (ax_mono_ms() - t->pg_up_since < svc->conf.trigger_sweep_grace_ms)
        return; /* executors renew their leases first */
    /* A dispatch nobody claimed (its message dead-lettered by an executor,
     * say) would leave the instance SCHEDULED forever: produce it again. */
    char after[32];
    snprintf(after, sizeof after, "%lld", (long long)svc->conf.trigger_redispatch_after_ms);
    snprintf(lim, sizeof lim, "%lld", (long long)svc->conf.trigger_batch);
    const char *ra[] = {after, svc->conf.topic_prefix, lim};
    PGresult *r;
    if (ax_pg_exec(svc->pg,
                   /* a batch at a time (job_instance_dispatched), updated by
                    * primary key only (UNDISPATCH) */
                   "WITH u AS (UPDATE job_instance SET dispatched_at = " UNDISPATCH
                   " WHERE id = ANY(ARRAY(SELECT id FROM job_instance WHERE state = 'SCHEDULED'"
                   " AND dispatched_at < now() - $1::bigint * interval '1 millisecond'"
                   " AND deployment = $2 AND NOT EXISTS (SELECT 1 FROM instance_hold h"
                   "  WHERE h.instance_id = job_instance.id)"
                   " ORDER BY dispatched_at LIMIT $3)) RETURNING id, state)"
                   " SELECT id FROM u WHERE state = 'SCHEDULED'",
                   3, ra, NULL, NULL, &r, err, sizeof err) == 0) {
        if (PQntuples(r) > 0) {
            ax_warn("%d instance(s) dispatched but never claimed: producing them again",
                    PQntuples(r));
            arm_scan(t, 0);
        }
        PQclear(r);
    }
    snprintf(lim, sizeof lim, "%lld", (long long)svc->conf.trigger_batch);
    /* An expired lease means a lost worker only if the worker is gone too:
     * its heartbeat (worker table) stopped, or it said it stopped. A live
     * executor renews what it runs and stops what it cannot renew; an
     * expired lease of a live executor's instance means its result is on
     * its way through a lagging callback — reporting it lost would only add
     * work there. A lease expired for 10 minutes is swept regardless. */
    char stale[32];
    snprintf(stale, sizeof stale, "%lld", (long long)(3 * svc->conf.executor_heartbeat_ms));
    const char *p[] = {lim, svc->conf.topic_prefix, stale};
    if (ax_pg_exec(svc->pg,
                   "SELECT i.id, i.attempt, i.trace_id, coalesce(i.worker, ''),"
                   "  (extract(epoch FROM coalesce(i.running_at, i.locked_at)) * 1000)::bigint"
                   " FROM job_instance i LEFT JOIN worker w ON w.id = i.worker"
                   " WHERE i.state IN ('LOCKED', 'RUNNING')"
                   " AND i.lease_expires_at < now() AND i.deployment = $2"
                   " AND (w.id IS NULL OR w.state = 'stopped'"
                   "      OR w.heartbeat_at < now() - $3::bigint * interval '1 millisecond'"
                   "      OR i.lease_expires_at < now() - interval '10 minutes')"
                   " ORDER BY i.lease_expires_at LIMIT $1",
                   3, p, NULL, NULL, &r, err, sizeof err) < 0) {
        ax_warn("lease sweep: %s", err);
        return;
    }
    int rows = PQntuples(r);
    if (rows == 0 || lead_txn_begin(t) < 0) {
        PQclear(r);
        return;
    }
    ax_strbuf_t ids = {0};
    ax_pgarr_begin(&ids);
    for (int i = 0; i < rows; i++) {
        char reason[300];
        snprintf(reason, sizeof reason, "worker %s lost: lease expired without a result",
                 PQgetvalue(r, i, 3));
        ax_attempt_t a = {
            .instance_id = ax_pg_int(r, i, 0),
            .attempt = (int32_t)ax_pg_int(r, i, 1),
            .worker = PQgetvalue(r, i, 3),
            .outcome = AX_OUTCOME_TIMEOUT,
            .error_class = "worker_lost",
            .error = reason,
            .output = "",
            .started_at_ms = ax_pg_int(r, i, 4),
            .finished_at_ms = ax_now_ms(),
            .trace_id = PQgetvalue(r, i, 2),
            .retryable = 1,
        };
        if (produce_attempt(t, &a, err, sizeof err) == 0)
            ax_pgarr_int(&ids, a.instance_id);
        else
            ax_warn("%s", err);
        ax_warn("instance %lld attempt %d: %s", (long long)a.instance_id, (int)a.attempt, reason);
    }
    PQclear(r);
    ax_pgarr_end(&ids);
    if (lead_txn_commit(t) == 0) {
        /* Push the lease out so the next sweep does not report it again
         * while the callback service catches up. */
        const char *q[] = {ids.s};
        ax_pg_exec(svc->pg,
                   "UPDATE job_instance SET lease_expires_at = now() + interval '60 seconds'"
                   " WHERE id = ANY($1::bigint[]) AND state IN ('LOCKED', 'RUNNING')",
                   1, q, NULL, NULL, NULL, err, sizeof err);
        t->swept += rows;
    }
    ax_strbuf_free(&ids);
}

static void on_lead(evutil_socket_t fd, short what, void *arg) { lead_tick(arg); }
static void on_lag(evutil_socket_t fd, short what, void *arg) { lag_tick(arg); }
static void on_tick(evutil_socket_t fd, short what, void *arg) { sched_tick(arg); }
static void on_hold(evutil_socket_t fd, short what, void *arg) { hold_tick(arg); }

static trigger_t g_trigger;

static void on_stop(ax_svc_t *svc) {
    trigger_t *t = &g_trigger;
    if (t->leader) {
        sched_on_follower(t);
        if (t->txp) {
            rd_kafka_destroy(t->txp);
            t->txp = NULL;
        }
        t->leader = 0;
        lead_release(t); /* a standby takes over without waiting for expiry */
    }
    event_base_loopbreak(svc->base);
}

/* ---- SIGHUP: keys applied while running; any other change waits for a restart ---------- */
static const char *const reloadable_keys[] = {
    "trigger.scan.interval.ms", "trigger.sweep.interval.ms", "trigger.sweep.grace.ms",
    "trigger.redispatch.after.ms", "trigger.fire.batch", "trigger.clock.jump.ms",
    "trigger.misfire.record.max", "trigger.lag.high", "trigger.lag.low", "trigger.aging.ms",
    "trigger.backlog.alert.depth", "trigger.backlog.alert.ms", "trigger.coalesce.ms",
    "trigger.coalesce.load", "submit.default.timeout.ms",
    "alert.webhook.url", "alert.webhook.secret", "alert.webhook.timeout.ms",
    "backoff.initial.ms", "backoff.max.ms", NULL};

static int reload_check(ax_svc_t *svc, ax_conf_t *n, char *err, size_t len) {
    if (n->trigger_lag_low >= n->trigger_lag_high)
        return ax_seterr(err, len, AX_ERR_INVALID,
                         "trigger.lag.low (%lld) must be below trigger.lag.high (%lld)",
                         (long long)n->trigger_lag_low, (long long)n->trigger_lag_high);
    return alert_check(n, err, len);
}

static int str_changed(const char *a, const char *b) {
    return strcmp(a ? a : "", b ? b : "") != 0;
}

static void on_reload(ax_svc_t *svc, const ax_conf_t *old);

static struct event *every(trigger_t *t, int64_t ms, event_callback_fn fn) {
    struct event *ev = event_new(t->svc.base, -1, EV_PERSIST, fn, t);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(ev, &tv);
    return ev;
}

static void on_reload(ax_svc_t *svc, const ax_conf_t *old) {
    trigger_t *t = &g_trigger;
    const ax_conf_t *c = &svc->conf;
    char err[512];
    if (c->trigger_sweep_interval_ms != old->trigger_sweep_interval_ms) {
        int64_t ms = c->trigger_sweep_interval_ms;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        event_add(t->ev_sweep, &tv);
    }
    if (c->trigger_aging_ms != old->trigger_aging_ms)
        ax_lane_plan(t->lanes, c->trigger_aging_ms, t->lane_min_age_ms, t->lane_target);
    if (str_changed(c->alert_webhook_url, old->alert_webhook_url) ||
        str_changed(c->alert_webhook_secret, old->alert_webhook_secret) ||
        c->alert_webhook_timeout_ms != old->alert_webhook_timeout_ms) {
        if (alert_init(svc, err, sizeof err) < 0)
            ax_error("SIGHUP: alert webhook off: %s", err); /* alert_check passed: unexpected */
    }
    arm_scan(t, 0);
}

int main(int argc, char **argv) {
    trigger_t *t = &g_trigger;
    if (ax_svc_init(&t->svc, "ax-trigger", &argc, argv, usage, "trigger") < 0)
        return ax_svc_exit_status(&t->svc);
    ax_svc_t *svc = &t->svc;
    svc->on_stop = on_stop;
    svc->reloadable = reloadable_keys;
    svc->reload_check = reload_check;
    svc->on_reload = on_reload;
    char err[512];
    if (svc->conf.trigger_lag_low >= svc->conf.trigger_lag_high) {
        fprintf(stderr, "ax-trigger: configuration error: trigger.lag.low (%lld) must be below "
                "trigger.lag.high (%lld)\n", (long long)svc->conf.trigger_lag_low,
                (long long)svc->conf.trigger_lag_high);
        return 2;
    }
    if (alert_init(svc, err, sizeof err) < 0) {
        fprintf(stderr, "ax-trigger: configuration error: alert.webhook.url: %s\n", err);
        return 2;
    }
    if (svc->conf.trigger_starve_ms == 0)
        svc->conf.trigger_starve_ms = svc->conf.trigger_lease_ms * 2 / 3;
    if (svc->conf.trigger_starve_ms >= svc->conf.trigger_lease_ms) {
        fprintf(stderr, "ax-trigger: configuration error: trigger.starve.ms (%lld) must be below "
                "trigger.lease.ms (%lld)\n", (long long)svc->conf.trigger_starve_ms,
                (long long)svc->conf.trigger_lease_ms);
        return 2;
    }
    if (svc->conf.pg_statement_timeout_ms == 0 ||
        svc->conf.pg_statement_timeout_ms >= svc->conf.trigger_starve_ms)
        ax_warn("db.statement.timeout.ms (%lld) is not below trigger.starve.ms (%lld): one slow "
                "statement makes this trigger step down as leader",
                (long long)svc->conf.pg_statement_timeout_ms,
                (long long)svc->conf.trigger_starve_ms);
    ax_lane_plan(t->lanes, svc->conf.trigger_aging_ms, t->lane_min_age_ms, t->lane_target);
    lead_init(t);
    if (lead_start(t) < 0)
        return 1;
    if (sched_init(t) < 0)
        return 1;
    t->ev_scan = evtimer_new(svc->base, on_scan, t);
    t->ev_sweep = every(t, svc->conf.trigger_sweep_interval_ms, on_sweep);
    int64_t renew = svc->conf.trigger_lease_ms / 3;
    t->ev_lead = every(t, renew < 1000 ? renew : 1000, on_lead);
    t->ev_reload = every(t, 200, on_tick);
    struct event *ev_hold = NULL;
    if (hold_start(t) == 0)
        ev_hold = every(t, 1000, on_hold);
    else
        ax_warn("no list of topics: instances are produced without checking their topic");
    struct event *ev_lag = NULL;
    if (lag_start(t) == 0)
        ev_lag = every(t, svc->conf.trigger_lag_interval_ms, on_lag);
    else
        ax_warn("lag monitor not running: lanes are never deferred");
    lead_tick(t); /* take the lease now if it is free */
    arm_scan(t, 0);
    char group[300];
    if (ax_svc_consume(svc, svc->topic_submit,
                       ax_conf_topic(&svc->conf, "trigger", group, sizeof group),
                       (size_t)svc->conf.trigger_batch, on_submit_batch, t) < 0)
        return ax_svc_exit_status(svc);
    ax_svc_run(svc);
    ax_info("stopped: %lld fired (%lld deferred, %lld coalesced timers), %lld skipped, "
            "%lld submitted, %lld duplicate submissions, %lld dispatched, %lld swept",
            (long long)t->fired, (long long)t->deferred_fires, (long long)t->coalesced,
            (long long)t->skipped, (long long)t->submitted, (long long)t->duplicates,
            (long long)t->dispatched, (long long)t->swept);
    event_free(t->ev_scan);
    event_free(t->ev_sweep);
    event_free(t->ev_lead);
    event_free(t->ev_reload);
    if (ev_lag)
        event_free(ev_lag);
    lag_stop(t);
    if (ev_hold)
        event_free(ev_hold);
    hold_stop(t);
    lead_fini(t);
    alert_fini();
    sched_destroy(t);
    free(t->refused);
    ax_svc_destroy(svc);
    return 0;
}
