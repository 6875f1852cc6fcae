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

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "ax/service.h"
#include "trigger.h"

static const char usage[] =
    "Usage: ax-trigger [--config FILE] [--set KEY=VALUE]...\n\n"
    "Fires the jobs' schedules, persists submitted instances, dispatches them when\n"
    "due, and recovers the instances of lost executors. Run one or more; one leads\n"
    "at a time.\n\n";

void arm_scan(trigger_t *t, int64_t ms) {
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
    if (added && t->leader)
        arm_scan(t, 0);
    rc = 0;
out:
    free(poison);
    return rc;
}

/* ---- dispatch: due SCHEDULED -> ax.dispatch ------------------------------ */

/* Due, not produced yet, and not waiting for an unfinished predecessor
 * (overlap=queue). */
#define NOT_WAITING                                                                   \
    " AND (wait_for IS NULL OR NOT EXISTS (SELECT 1 FROM job_instance p"              \
    " WHERE p.id = job_instance.wait_for AND p.state <> 'FINISHED'))"
static const char sql_due[] =
    "SELECT " DISPATCH_COLS
    " FROM job_instance WHERE state = 'SCHEDULED' AND dispatched_at IS NULL AND due_at <= now()"
    NOT_WAITING " ORDER BY due_at LIMIT $1";

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

/* Produce rows of r (DISPATCH_COLS first) through the leader's
 * transactional producer, skipping rows whose column skip_col (if >= 0) is
 * not NULL; their ids are appended to `ids`. Returns rows produced. */
int produce_dispatch_rows(trigger_t *t, PGresult *r, int skip_col, ax_strbuf_t *ids) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    int produced = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        if (skip_col >= 0 && !PQgetisnull(r, i, skip_col))
            continue;
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
        int rc = ax_dispatch_encode(&d, &buf, &len);
        if (rc == 0) {
            rc = ax_kafka_produce(t->txp, svc->topic_dispatch, key, (size_t)klen, buf, len, NULL,
                                  NULL, err, sizeof err);
            free(buf);
            if (rc < 0)
                ax_warn("%s", err);
            else {
                ax_pgarr_int(ids, d.instance_id);
                produced++;
            }
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

int mark_dispatched(trigger_t *t, const char *ids) {
    char err[512];
    const char *q[] = {ids};
    int rc = ax_pg_exec(t->svc.pg,
                        "UPDATE job_instance SET dispatched_at = now()"
                        " WHERE id = ANY($1::bigint[]) AND dispatched_at IS NULL",
                        1, q, NULL, NULL, NULL, err, sizeof err);
    if (rc < 0)
        ax_warn("mark dispatched: %s (instances will be produced again; executors drop "
                "the duplicates)", err);
    return rc;
}

/* Produce up to one batch of due instances in one Kafka transaction;
 * returns rows handled or <0. */
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
    if (!rows) {
        PQclear(r);
        return 0;
    }
    ax_strbuf_t ids = {0};
    ax_pgarr_begin(&ids);
    if ((rc = lead_txn_begin(t)) == 0) {
        rc = produce_dispatch_rows(t, r, -1, &ids);
        if (rc >= 0)
            rc = lead_txn_commit(t);
    }
    PQclear(r);
    ax_pgarr_end(&ids);
    if (rc == 0) {
        rc = mark_dispatched(t, ids.s);
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
    if (!lead_active(t)) {
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
                   " FROM job_instance WHERE state = 'SCHEDULED' AND dispatched_at IS NULL"
                   NOT_WAITING,
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
    if (svc->stopping || !lead_active(t))
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
        void *buf;
        size_t len;
        char key[32];
        int klen = snprintf(key, sizeof key, "%lld", (long long)a.instance_id);
        if (ax_attempt_encode(&a, &buf, &len) == 0) {
            if (ax_kafka_produce(t->txp, svc->topic_callback, key, (size_t)klen, buf, len,
                                 NULL, NULL, err, sizeof err) == 0)
                ax_pgarr_int(&ids, a.instance_id);
            free(buf);
        }
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
static void on_tick(evutil_socket_t fd, short what, void *arg) { sched_tick(arg); }

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

static struct event *every(trigger_t *t, int64_t ms, event_callback_fn fn) {
    struct event *ev = event_new(t->svc.base, -1, EV_PERSIST, fn, t);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(ev, &tv);
    return ev;
}

int main(int argc, char **argv) {
    trigger_t *t = &g_trigger;
    if (ax_svc_init(&t->svc, "ax-trigger", &argc, argv, usage, "trigger") < 0)
        return 1;
    ax_svc_t *svc = &t->svc;
    svc->on_stop = on_stop;
    lead_init(t);
    if (sched_init(t) < 0)
        return 1;
    t->ev_scan = evtimer_new(svc->base, on_scan, t);
    t->ev_sweep = every(t, svc->conf.trigger_sweep_interval_ms, on_sweep);
    int64_t renew = svc->conf.trigger_lease_ms / 3;
    t->ev_lead = every(t, renew < 1000 ? renew : 1000, on_lead);
    t->ev_reload = every(t, 200, on_tick);
    lead_tick(t); /* take the lease now if it is free */
    arm_scan(t, 0);
    char group[300];
    if (ax_svc_consume(svc, svc->topic_submit,
                       ax_conf_topic(&svc->conf, "trigger", group, sizeof group),
                       (size_t)svc->conf.trigger_batch, on_submit_batch, t) < 0)
        return 1;
    ax_svc_run(svc);
    ax_info("stopped: %lld fired, %lld skipped, %lld submitted, %lld duplicate submissions, "
            "%lld dispatched, %lld swept",
            (long long)t->fired, (long long)t->skipped, (long long)t->submitted,
            (long long)t->duplicates, (long long)t->dispatched, (long long)t->swept);
    event_free(t->ev_scan);
    event_free(t->ev_sweep);
    event_free(t->ev_lead);
    event_free(t->ev_reload);
    sched_destroy(t);
    ax_svc_destroy(svc);
    return 0;
}
