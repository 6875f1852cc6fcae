/*
 * ax-trigger — owns time. Turns submissions (ax.submit) into SCHEDULED
 * instances in PostgreSQL, produces each instance to the dispatch topic when
 * it is due (marking it dispatched only after Kafka acknowledged it), and
 * sweeps expired leases so instances of a lost executor end TIMEOUT.
 *
 * Every trigger ingests submissions; only the one holding the leader lock
 * (a PostgreSQL advisory lock on its session) dispatches and sweeps.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "ax/service.h"

#define LEADER_LOCK_KEY "872001"

static const char usage[] =
    "Usage: ax-trigger [--config FILE] [--set KEY=VALUE]...\n\n"
    "Persists submitted instances, dispatches them when due, and recovers the\n"
    "instances of lost executors. Run one or more; one leads at a time.\n\n";

typedef struct trigger {
    ax_svc_t svc;
    struct event *ev_scan, *ev_sweep;
    int leader;
    unsigned scan_failures;
    int64_t submitted, duplicates, dispatched, swept;
} trigger_t;

static void arm_scan(trigger_t *t, int64_t ms) {
    if (ms < 0)
        ms = 0;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(t->ev_scan, &tv);
}

/* ---- ingest: ax.submit -> SCHEDULED ------------------------------------- */

static const char sql_insert_job[] =
    "INSERT INTO job_instance (job_id, job_name, handler_kind, command, payload, timeout_ms,"
    "  priority, due_at, trace_id, idempotency_key, submit_key)"
    " SELECT j.id, j.name, j.handler_kind, j.command, $2::bytea, COALESCE($3::bigint, j.timeout_ms),"
    "  COALESCE($4::smallint, j.priority),"
    "  CASE WHEN $5::bigint IS NOT NULL THEN to_timestamp($5::bigint / 1000.0)"
    "       ELSE now() + make_interval(secs => COALESCE($6::bigint, 0) / 1000.0) END,"
    "  $7, $8, $9"
    " FROM job j WHERE j.name = $1"
    " ON CONFLICT (submit_key) DO NOTHING RETURNING id";

static const char sql_insert_inline[] =
    "INSERT INTO job_instance (handler_kind, command, payload, timeout_ms, priority, due_at,"
    "  trace_id, idempotency_key, submit_key)"
    " VALUES ('command', $1::text[], $2::bytea, COALESCE($3::bigint, $10::bigint),"
    "  COALESCE($4::smallint, 2),"
    "  CASE WHEN $5::bigint IS NOT NULL THEN to_timestamp($5::bigint / 1000.0)"
    "       ELSE now() + make_interval(secs => COALESCE($6::bigint, 0) / 1000.0) END,"
    "  $7, $8, $9)"
    " ON CONFLICT (submit_key) DO NOTHING RETURNING id";

/* Insert one decoded submission. Returns 1 inserted, 0 duplicate,
 * AX_ERR_NOTFOUND unknown job, <0 other errors. */
static int ingest_one(trigger_t *t, const rd_kafka_message_t *msg, const ax_submit_t *s,
                      char *err, size_t errlen) {
    char submit_key[512], trace[40], timeout[32], prio[16], run_at[32], delay[32], deftmo[32];
    if (s->idempotency_key)
        snprintf(submit_key, sizeof submit_key, "idem:%s", s->idempotency_key);
    else
        snprintf(submit_key, sizeof submit_key, "kafka:%s:%d:%lld", rd_kafka_topic_name(msg->rkt),
                 (int)msg->partition, (long long)msg->offset);
    if (!s->trace_id)
        ax_random_hex(trace, 16);
    snprintf(timeout, sizeof timeout, "%lld", (long long)s->timeout_ms);
    snprintf(prio, sizeof prio, "%d", (int)s->priority);
    snprintf(run_at, sizeof run_at, "%lld", (long long)s->run_at_ms);
    snprintf(delay, sizeof delay, "%lld", (long long)s->delay_ms);
    snprintf(deftmo, sizeof deftmo, "%lld", (long long)t->svc.conf.executor_default_timeout_ms);
    const char *idem = s->idempotency_key ? s->idempotency_key : submit_key;
    ax_strbuf_t argv = {0};
    const char *p[10] = {
        NULL,
        (const char *)s->payload,
        s->timeout_ms > 0 ? timeout : NULL,
        s->priority >= 0 ? prio : NULL,
        s->run_at_ms > 0 ? run_at : NULL,
        s->delay_ms >= 0 ? delay : NULL,
        s->trace_id ? s->trace_id : trace,
        idem,
        submit_key,
        deftmo,
    };
    int lengths[10] = {0, (int)s->payload_len};
    int formats[10] = {0, 1};
    static const uint8_t empty = 0;
    if (!p[1])
        p[1] = (const char *)&empty;
    PGresult *r = NULL;
    int rc;
    if (s->job) {
        p[0] = s->job;
        rc = ax_pg_exec(t->svc.pg, sql_insert_job, 9, p, lengths, formats, &r, err, errlen);
    } else {
        ax_pgarr_begin(&argv);
        for (size_t i = 0; i < s->command_len; i++)
            ax_pgarr_text(&argv, s->command[i]);
        ax_pgarr_end(&argv);
        p[0] = argv.s;
        rc = ax_pg_exec(t->svc.pg, sql_insert_inline, 10, p, lengths, formats, &r, err, errlen);
    }
    ax_strbuf_free(&argv);
    if (rc < 0)
        return rc;
    int inserted = PQntuples(r);
    PQclear(r);
    if (inserted)
        return 1;
    if (s->job) {
        const char *q[] = {s->job};
        if ((rc = ax_pg_exec(t->svc.pg, "SELECT 1 FROM job WHERE name = $1", 1, q, NULL, NULL, &r,
                             err, errlen)) < 0)
            return rc;
        int exists = PQntuples(r);
        PQclear(r);
        if (!exists) {
            snprintf(err, errlen, "unknown job '%s'", s->job);
            return AX_ERR_NOTFOUND;
        }
    }
    return 0;
}

static int on_submit_batch(ax_svc_t *svc, rd_kafka_message_t **msgs, size_t n, void *arg) {
    trigger_t *t = arg;
    char err[1024], reason[512];
    char *poison = calloc(n, 1);
    if (!poison)
        return AX_ERR_NOMEM;
    int rc;
    /* A statement that fails for one message (bad data) aborts the
     * transaction: mark that message poison, dead-letter it, and redo. */
again:
    rc = ax_pg_begin(svc->pg, err, sizeof err);
    if (rc < 0)
        goto out;
    int64_t added = 0, dups = 0;
    for (size_t i = 0; i < n; i++) {
        if (poison[i])
            continue;
        rd_kafka_message_t *m = msgs[i];
        ax_submit_t s;
        if (ax_svc_precheck(svc, m, AX_SCHEMA_SUBMIT, reason, sizeof reason) < 0 ||
            ax_submit_decode(m->payload, m->len, &s, reason, sizeof reason) < 0) {
            poison[i] = 2;
            continue;
        }
        rc = ingest_one(t, m, &s, err, sizeof err);
        ax_submit_clear(&s);
        if (rc == AX_ERR_INVALID || rc == AX_ERR_NOTFOUND || rc == AX_ERR_CONFLICT) {
            ax_pg_rollback(svc->pg);
            ax_warn("submission %s [%d] @%lld rejected: %s", rd_kafka_topic_name(m->rkt),
                    (int)m->partition, (long long)m->offset, err);
            poison[i] = 1;
            if (ax_svc_reject(svc, m, err) < 0) {
                rc = AX_ERR_IO;
                goto out;
            }
            goto again;
        }
        if (rc < 0) {
            ax_pg_rollback(svc->pg);
            ax_warn("ingest: %s", err);
            goto out;
        }
        if (rc == 1)
            added++;
        else
            dups++;
    }
    if ((rc = ax_pg_commit(svc->pg, err, sizeof err)) < 0) {
        ax_warn("ingest commit: %s", err);
        goto out;
    }
    /* Undecodable messages are dead-lettered once the batch is durable. */
    for (size_t i = 0; i < n; i++) {
        if (poison[i] != 2)
            continue;
        ax_submit_t s;
        if (ax_svc_precheck(svc, msgs[i], AX_SCHEMA_SUBMIT, reason, sizeof reason) == 0 &&
            ax_submit_decode(msgs[i]->payload, msgs[i]->len, &s, reason, sizeof reason) == 0)
            ax_submit_clear(&s);
        if (ax_svc_reject(svc, msgs[i], reason) < 0) {
            rc = AX_ERR_IO;
            goto out;
        }
    }
    t->submitted += added;
    t->duplicates += dups;
    if (dups) {
        ax_info("%lld duplicate submission(s) ignored", (long long)dups);
        ax_pg_count(svc->pg, "trigger.duplicate_submissions", dups);
    }
    if (added)
        ax_debug("%lld instance(s) scheduled", (long long)added);
    if (t->leader)
        arm_scan(t, 0);
    rc = 0;
out:
    free(poison);
    return rc;
}

/* ---- leadership ----------------------------------------------------------- */

static int ensure_leader(trigger_t *t) {
    char err[512];
    if (ax_pg_ensure(t->svc.pg, err, sizeof err) < 0) {
        if (t->leader)
            ax_warn("lost PostgreSQL, so leadership: %s", err);
        t->leader = 0;
        return 0;
    }
    if (ax_pg_reconnected(t->svc.pg))
        t->leader = 0; /* the advisory lock died with the old session */
    if (t->leader)
        return 1;
    PGresult *r;
    if (ax_pg_exec(t->svc.pg, "SELECT pg_try_advisory_lock(" LEADER_LOCK_KEY ")", 0, NULL, NULL,
                   NULL, &r, err, sizeof err) < 0)
        return 0;
    t->leader = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    if (t->leader)
        ax_info("leader: dispatching and sweeping");
    return t->leader;
}

/* ---- dispatch: due SCHEDULED -> ax.dispatch ------------------------------ */

static const char sql_due[] =
    "SELECT id, attempt, job_name, handler_kind, to_json(command)::text, payload, timeout_ms,"
    "  (extract(epoch FROM nominal_time) * 1000)::bigint, (extract(epoch FROM due_at) * 1000)::bigint,"
    "  priority, trace_id, idempotency_key"
    " FROM job_instance WHERE state = 'SCHEDULED' AND dispatched_at IS NULL AND due_at <= now()"
    " ORDER BY due_at LIMIT $1";

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

/* Produce up to one batch of due instances; returns rows handled or <0. */
static int dispatch_batch(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[1024], lim[32];
    snprintf(lim, sizeof lim, "%lld", (long long)svc->conf.trigger_batch);
    const char *p[] = {lim};
    PGresult *r;
    int rc = ax_pg_exec(svc->pg, sql_due, 1, p, NULL, NULL, &r, err, sizeof err);
    if (rc < 0) {
        ax_warn("due scan: %s", err);
        return rc;
    }
    int rows = PQntuples(r);
    ax_strbuf_t ids = {0};
    ax_pgarr_begin(&ids);
    ax_delivery_t dlv = {0};
    for (int i = 0; i < rows; i++) {
        ax_dispatch_t d = {0};
        d.instance_id = ax_pg_int(r, i, 0);
        d.attempt = (int32_t)ax_pg_int(r, i, 1);
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
        d.priority = (int32_t)ax_pg_int(r, i, 9);
        d.trace_id = strdup(PQgetvalue(r, i, 10));
        d.idempotency_key = strdup(PQgetvalue(r, i, 11));
        void *buf;
        size_t len;
        char key[32];
        int klen = snprintf(key, sizeof key, "%lld", (long long)d.instance_id);
        if (ax_dispatch_encode(&d, &buf, &len) == 0) {
            if (ax_kafka_produce(svc->producer, svc->topic_dispatch, key, (size_t)klen, buf, len,
                                 NULL, &dlv, err, sizeof err) == 0)
                ax_pgarr_int(&ids, d.instance_id);
            else
                ax_warn("%s", err);
            free(buf);
        }
        /* PQunescapeBytea memory must go back through PQfreemem. */
        PQfreemem(d.payload);
        d.payload = NULL;
        ax_dispatch_clear(&d);
    }
    PQclear(r);
    ax_pgarr_end(&ids);
    if (ax_kafka_wait(svc->producer, &dlv, 35000) < 0) {
        ax_warn("dispatch: %d of %d not acknowledged by Kafka (%s); will retry", dlv.failed + dlv.pending,
                rows, rd_kafka_err2str(dlv.err));
        ax_strbuf_free(&ids);
        return AX_ERR_IO;
    }
    if (rows) {
        const char *q[] = {ids.s};
        rc = ax_pg_exec(svc->pg,
                        "UPDATE job_instance SET dispatched_at = now()"
                        " WHERE id = ANY($1::bigint[]) AND dispatched_at IS NULL",
                        1, q, NULL, NULL, NULL, err, sizeof err);
        if (rc < 0)
            ax_warn("mark dispatched: %s (instances will be produced again; executors drop "
                    "the duplicates)", err);
        t->dispatched += rows;
    }
    ax_strbuf_free(&ids);
    return rc < 0 ? rc : rows;
}

static void on_scan(evutil_socket_t fd, short what, void *arg) {
    trigger_t *t = arg;
    ax_svc_t *svc = &t->svc;
    char err[512];
    if (svc->stopping)
        return;
    if (!ensure_leader(t)) {
        arm_scan(t, svc->conf.trigger_scan_interval_ms);
        return;
    }
    for (int round = 0; round < 16; round++) {
        int n = dispatch_batch(t);
        if (n < 0) {
            arm_scan(t, ax_backoff_ms(t->scan_failures++, svc->conf.backoff_initial_ms,
                                      svc->conf.backoff_max_ms));
            return;
        }
        t->scan_failures = 0;
        if (n < svc->conf.trigger_batch)
            break;
        if (round == 15) {
            arm_scan(t, 0); /* more due: yield to the loop, then go on */
            return;
        }
    }
    /* Sleep until the next due instance, at most the scan interval. */
    PGresult *r;
    int64_t next = svc->conf.trigger_scan_interval_ms;
    if (ax_pg_exec(svc->pg,
                   "SELECT ceil(extract(epoch FROM (min(due_at) - now())) * 1000)::bigint"
                   " FROM job_instance WHERE state = 'SCHEDULED' AND dispatched_at IS NULL",
                   0, NULL, NULL, NULL, &r, err, sizeof err) == 0) {
        if (!PQgetisnull(r, 0, 0) && ax_pg_int(r, 0, 0) < next)
            next = ax_pg_int(r, 0, 0);
        PQclear(r);
    }
    arm_scan(t, next);
}

/* ---- lease sweep: expired LOCKED/RUNNING -> TIMEOUT via the callback ----- */

static void on_sweep(evutil_socket_t fd, short what, void *arg) {
    trigger_t *t = arg;
    ax_svc_t *svc = &t->svc;
    char err[1024], lim[32];
    if (svc->stopping || !ensure_leader(t))
        return;
    /* A dispatch nobody claimed (its message dead-lettered by an executor,
     * say) would leave the instance SCHEDULED forever: produce it again. */
    char after[32];
    snprintf(after, sizeof after, "%lld", (long long)svc->conf.trigger_redispatch_after_ms);
    const char *ra[] = {after};
    PGresult *r;
    if (ax_pg_exec(svc->pg,
                   "UPDATE job_instance SET dispatched_at = NULL WHERE state = 'SCHEDULED'"
                   " AND dispatched_at < now() - $1::bigint * interval '1 millisecond'"
                   " RETURNING id",
                   1, ra, NULL, NULL, &r, err, sizeof err) == 0) {
        if (PQntuples(r) > 0) {
            ax_warn("%d instance(s) dispatched but never claimed: producing them again",
                    PQntuples(r));
            arm_scan(t, 0);
        }
        PQclear(r);
    }
    snprintf(lim, sizeof lim, "%lld", (long long)svc->conf.trigger_batch);
    const char *p[] = {lim};
    if (ax_pg_exec(svc->pg,
                   "SELECT id, attempt, trace_id, coalesce(worker, ''),"
                   "  (extract(epoch FROM coalesce(running_at, locked_at)) * 1000)::bigint"
                   " FROM job_instance WHERE state IN ('LOCKED', 'RUNNING')"
                   " AND lease_expires_at < now() ORDER BY lease_expires_at LIMIT $1",
                   1, p, NULL, NULL, &r, err, sizeof err) < 0) {
        ax_warn("lease sweep: %s", err);
        return;
    }
    int rows = PQntuples(r);
    ax_delivery_t dlv = {0};
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
        void *buf;
        size_t len;
        char key[32];
        int klen = snprintf(key, sizeof key, "%lld", (long long)a.instance_id);
        if (ax_attempt_encode(&a, &buf, &len) == 0) {
            if (ax_kafka_produce(svc->producer, svc->topic_callback, key, (size_t)klen, buf, len,
                                 NULL, &dlv, err, sizeof err) == 0)
                ax_pgarr_int(&ids, a.instance_id);
            free(buf);
        }
        ax_warn("instance %lld attempt %d: %s", (long long)a.instance_id, (int)a.attempt, reason);
    }
    PQclear(r);
    ax_pgarr_end(&ids);
    if (rows && ax_kafka_wait(svc->producer, &dlv, 35000) == 0) {
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

int main(int argc, char **argv) {
    static trigger_t t;
    if (ax_svc_init(&t.svc, "ax-trigger", &argc, argv, usage, "trigger") < 0)
        return 1;
    ax_svc_t *svc = &t.svc;
    t.ev_scan = evtimer_new(svc->base, on_scan, &t);
    t.ev_sweep = event_new(svc->base, -1, EV_PERSIST, on_sweep, &t);
    int64_t sw = svc->conf.trigger_sweep_interval_ms;
    struct timeval tv = {sw / 1000, (sw % 1000) * 1000};
    event_add(t.ev_sweep, &tv);
    arm_scan(&t, 0);
    char group[300];
    if (ax_svc_consume(svc, svc->topic_submit, ax_conf_topic(&svc->conf, "trigger", group, sizeof group),
                       (size_t)svc->conf.trigger_batch,
                       on_submit_batch, &t) < 0)
        return 1;
    ax_svc_run(svc);
    ax_info("stopped: %lld scheduled, %lld duplicate submissions, %lld dispatched, %lld swept",
            (long long)t.submitted, (long long)t.duplicates, (long long)t.dispatched,
            (long long)t.swept);
    event_free(t.ev_scan);
    event_free(t.ev_sweep);
    ax_svc_destroy(svc);
    return 0;
}
