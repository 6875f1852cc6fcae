/*
 * ops.c — operators' actions shared by axctl and ax-api (ax/ops.h):
 * submissions, cancellations and retries, by the paths the services use.
 *
 * Cancelling:
 * - a SCHEDULED instance (not claimed by an executor) is finished CANCELLED
 *   by ax-callback: its attempt (outcome CANCELLED, error class cancelled,
 *   worker axctl) is produced to <prefix>callback, as the trigger does for
 *   instances beyond a backlog cap; the callback records it FINISHED and
 *   publishes its result like any other;
 * - a claimed (LOCKED) or RUNNING one is asked to stop, as overlap=cancel
 *   does: cancel_requested_at is set, the executor learns of it at its next
 *   lease renewal (a claimed one when it starts) and stops the handler (a
 *   command's whole process group); the attempt ends CANCELLED.
 * cancel_requested_at is set on the SCHEDULED ones too: should an executor
 * claim one before the callback recorded the cancellation, the executor
 * finishes it CANCELLED without running it (the callback then ignores the
 * produced attempt as stale). The request commits before the attempts are
 * produced and their acknowledgements waited for (up to 35 s), so no row
 * lock is held meanwhile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/kafka.h"
#include "ax/ops.h"
#include "ax/store_dlq.h"
#include "ax/store_instance_admin.h"
#include "ax/store_instance_ops.h"
#include "ax/store_job.h"

static int bad(const char **ret_field, const char *field, char *errbuf, size_t errlen,
               const char *msg) {
    if (ret_field)
        *ret_field = field;
    return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "%s", msg);
}

static int text_ok(const char *s) {
    return !s || ax_utf8_valid(s, strlen(s));
}

/* The job must exist and be submittable. */
static int job_check(ax_pg_t *pg, const char *name, const char **ret_field, char *errbuf,
                     size_t errlen) {
    ax_job_t j;
    int rc = ax_store_job_get(pg, name, 0, &j, errbuf, errlen);
    if (rc == AX_ERR_NOTFOUND) {
        if (ret_field)
            *ret_field = "job";
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no job named '%s'", name);
    }
    if (rc < 0)
        return rc;
    int flow = strcmp(j.handler_kind, "flow") == 0;
    ax_job_clear(&j);
    if (flow)
        return bad(ret_field, "job", errbuf, errlen, "the job starts a flow: run the flow");
    return 0;
}

int ax_ops_submit_check(ax_pg_t *pg, const ax_submit_t *s, const char **ret_field, char *errbuf,
                        size_t errlen) {
    if (!s->job == !s->command)
        return bad(ret_field, s->job ? "command" : "job", errbuf, errlen,
                   "give exactly one of a job or a command");
    if (s->job && !*s->job)
        return bad(ret_field, "job", errbuf, errlen, "the job name is empty");
    if (s->command && (s->command_len == 0 || !s->command[0][0]))
        return bad(ret_field, "command", errbuf, errlen,
                   "the command must start with a program name");
    if (!text_ok(s->job))
        return bad(ret_field, "job", errbuf, errlen, "not valid UTF-8 text");
    if (!text_ok(s->idempotency_key))
        return bad(ret_field, "idempotency_key", errbuf, errlen, "not valid UTF-8 text");
    if (!text_ok(s->trace_id))
        return bad(ret_field, "trace_id", errbuf, errlen, "not valid UTF-8 text");
    for (size_t k = 0; k < s->command_len; k++)
        if (!text_ok(s->command[k]))
            return bad(ret_field, "command", errbuf, errlen, "not valid UTF-8 text");
    if (s->idempotency_key && (!*s->idempotency_key || strlen(s->idempotency_key) > 512))
        return bad(ret_field, "idempotency_key", errbuf, errlen, "must be 1..512 bytes");
    if (s->trace_id && (!*s->trace_id || strlen(s->trace_id) > 150))
        return bad(ret_field, "trace_id", errbuf, errlen, "must be 1..150 bytes");
    if (s->run_at_ms && s->delay_ms >= 0)
        return bad(ret_field, "at", errbuf, errlen, "give one of at or delay_ms");
    if (s->delay_ms > AX_SUBMIT_MS_MAX)
        return bad(ret_field, "delay_ms", errbuf, errlen, "must be 0..3153600000000");
    if (s->priority < -1 || s->priority > 4)
        return bad(ret_field, "priority", errbuf, errlen, "must be 0..4");
    if (s->timeout_ms < 0 || s->timeout_ms > AX_SUBMIT_MS_MAX)
        return bad(ret_field, "timeout_ms", errbuf, errlen, "must be 1..3153600000000");
    return pg && s->job ? job_check(pg, s->job, ret_field, errbuf, errlen) : 0;
}

static int produce_wait(rd_kafka_t *rk, const char *topic, const char *key, const void *buf,
                        size_t len, int64_t part_hint, int timeout_ms, char *errbuf,
                        size_t errlen) {
    ax_delivery_t d = {.part_hint = part_hint};
    int rc = ax_kafka_produce(rk, topic, key, strlen(key), buf, len, NULL, &d, errbuf, errlen);
    if ((rc == 0 || d.pending) && ax_kafka_wait(rk, &d, timeout_ms) < 0)
        rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "not acknowledged by Kafka: %s",
                       d.err ? rd_kafka_err2str(d.err) : "timed out");
    return rc < 0 ? (rc == AX_ERR_INVALID ? rc : AX_ERR_IO) : 0;
}

int ax_ops_submit_produce(rd_kafka_t *rk, const ax_conf_t *c, const ax_submit_t *s,
                          int timeout_ms, char *errbuf, size_t errlen) {
    char topic[256];
    void *buf;
    size_t len;
    const char *key = s->idempotency_key ? s->idempotency_key : s->trace_id;
    if (!key)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "a submission needs a trace id");
    if (ax_submit_encode(s, &buf, &len) < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "cannot encode the submission");
    ax_conf_topic(c, "submit", topic, sizeof topic);
    /* without an idempotency key: in chunks of submit.partition.chunk over
     * the partitions (concurrent requests share produce requests) */
    static _Atomic int64_t seq;
    int64_t hint =
        s->idempotency_key ? 0 : ax_kafka_chunk_hint(seq++, c->submit_partition_chunk);
    int rc = produce_wait(rk, topic, key, buf, len, hint, timeout_ms, errbuf, errlen);
    free(buf);
    return rc;
}

/* The CANCELLED attempt of every SCHEDULED one among rows, to <prefix>callback. */
static int produce_cancellations(rd_kafka_t *rk, const ax_conf_t *c, const ax_cancel_row_t *rows,
                                 size_t n, const char *why, char *errbuf, size_t errlen) {
    char topic[256], key[32];
    ax_conf_topic(c, "callback", topic, sizeof topic);
    ax_delivery_t d = {0};
    int64_t now = ax_now_ms();
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (strcmp(rows[i].state, "SCHEDULED") != 0)
            continue;
        ax_attempt_t a = {
            .instance_id = rows[i].id,
            .attempt = rows[i].attempt,
            .worker = "axctl",
            .outcome = AX_OUTCOME_CANCELLED,
            .error_class = "cancelled",
            .error = (char *)why,
            .output = "",
            .started_at_ms = now,
            .finished_at_ms = now,
            .trace_id = rows[i].trace_id,
            .retryable = 0,
        };
        void *buf;
        size_t len;
        int klen = snprintf(key, sizeof key, "%lld", (long long)a.instance_id);
        if (ax_attempt_encode(&a, &buf, &len) < 0)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "instance %lld: cannot encode its attempt", (long long)a.instance_id);
        rc = ax_kafka_produce(rk, topic, key, (size_t)klen, buf, len, NULL, &d, errbuf, errlen);
        free(buf);
    }
    if (ax_kafka_wait(rk, &d, 35000) < 0 && rc == 0)
        rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "%s",
                       d.err ? rd_kafka_err2str(d.err) : "not acknowledged");
    return rc < 0 ? AX_ERR_IO : 0;
}

int ax_ops_cancel(ax_pg_t *pg, rd_kafka_t *rk, const ax_conf_t *c, const int64_t *ids, size_t n,
                  const char *why, ax_cancel_result_t *ret, char *errbuf, size_t errlen) {
    ax_cancel_row_t *rows = NULL;
    size_t k = 0;
    int skipped = 0;
    memset(ret, 0, sizeof *ret);
    int rc = ax_store_instance_cancel_request(pg, ids, n, &rows, &k, errbuf, errlen);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < k; i++) {
        ret->scheduled += strcmp(rows[i].state, "SCHEDULED") == 0;
        /* a running shard parent runs nowhere: nothing to stop there */
        skipped += strcmp(rows[i].state, "RUNNING") == 0 && strcmp(rows[i].worker, "shards") == 0;
    }
    ret->unfinished = (int)k;
    if (k)
        snprintf(ret->state, sizeof ret->state, "%s", rows[0].state);
    ret->stopping = (int)k - ret->scheduled - skipped;
    if (ret->scheduled)
        rc = produce_cancellations(rk, c, rows, k, why, errbuf, errlen);
    ax_cancel_rows_free(rows, k);
    return rc;
}

int ax_ops_cancel_instance(ax_pg_t *pg, rd_kafka_t *rk, const ax_conf_t *c, int64_t id,
                           const char *why, ax_cancel_result_t *ret, char *errbuf,
                           size_t errlen) {
    ax_instance_view_t v;
    memset(ret, 0, sizeof *ret);
    int rc = ax_store_instance_admin_show(pg, id, &v, errbuf, errlen);
    if (rc < 0)
        return rc;
    int finished = strcmp(v.state, "FINISHED") == 0;
    int parent = strcmp(v.state, "RUNNING") == 0 && v.worker && strcmp(v.worker, "shards") == 0;
    if (finished)
        rc = ax_seterr(errbuf, errlen, AX_ERR_CONFLICT,
                       "instance %lld already finished (%s): nothing to cancel", (long long)id,
                       v.outcome ? v.outcome : "");
    ax_instance_view_clear(&v);
    if (rc < 0)
        return rc;
    if (!parent) {
        rc = ax_ops_cancel(pg, rk, c, &id, 1, why, ret, errbuf, errlen);
        if (rc == 0 && ret->unfinished == 0)
            rc = ax_seterr(errbuf, errlen, AX_ERR_CONFLICT,
                           "instance %lld finished meanwhile: nothing to cancel", (long long)id);
        return rc;
    }
    /* a running shard parent runs nowhere: its unfinished shards are
     * cancelled; it finishes (FAILED) when the last has */
    int64_t *ids = NULL;
    size_t k = 0;
    rc = ax_store_instance_admin_open_shards(pg, id, &ids, &k, errbuf, errlen);
    if (rc == 0 && k)
        rc = ax_ops_cancel(pg, rk, c, ids, k, why, ret, errbuf, errlen);
    else if (rc == 0)
        rc = ax_seterr(errbuf, errlen, AX_ERR_CONFLICT,
                       "instance %lld is a shard parent whose shards have all finished: nothing "
                       "to cancel (it finishes with them)", (long long)id);
    free(ids);
    ret->parents = 1;
    snprintf(ret->state, sizeof ret->state, "RUNNING");
    return rc;
}

int ax_ops_retry(ax_pg_t *pg, rd_kafka_t *rk, const ax_conf_t *c, int64_t id,
                 ax_retry_result_t *ret, char *errbuf, size_t errlen) {
    ax_instance_view_t v;
    memset(ret, 0, sizeof *ret);
    int rc = ax_store_instance_admin_show(pg, id, &v, errbuf, errlen);
    if (rc < 0)
        return rc;
    int finished = v.state && strcmp(v.state, "FINISHED") == 0;
    ax_instance_view_clear(&v);
    if (!finished)
        return ax_seterr(errbuf, errlen, AX_ERR_CONFLICT,
                         "instance %lld is not finished (cancel it first)", (long long)id);
    snprintf(ret->idempotency_key, sizeof ret->idempotency_key, "retry:%lld", (long long)id);
    ax_dlq_replayed_t done = {0};
    rc = ax_store_dlq_replayed(pg, ret->idempotency_key, &done, errbuf, errlen);
    if (rc == 0) {
        ret->duplicate = 1;
        ret->instance_id = done.instance_id;
        snprintf(ret->trace_id, sizeof ret->trace_id, "%s", done.trace_id ? done.trace_id : "");
        ax_dlq_replayed_clear(&done);
        return 0;
    }
    if (rc != AX_ERR_NOTFOUND)
        return rc;
    ax_dlq_instance_t in = {0};
    if ((rc = ax_store_dlq_instance(pg, id, &in, errbuf, errlen)) < 0)
        return rc;
    if (!in.job) {
        ax_dlq_instance_clear(&in);
        return ax_seterr(errbuf, errlen, AX_ERR_CONFLICT,
                         "instance %lld is an inline command: submit it again", (long long)id);
    }
    snprintf(ret->trace_id, sizeof ret->trace_id, "%.150s-retry", in.trace_id ? in.trace_id : "");
    ax_submit_t s;
    ax_submit_init(&s);
    s.job = in.job;
    s.trace_id = ret->trace_id;
    s.idempotency_key = ret->idempotency_key;
    s.timeout_ms = in.timeout_ms;
    s.priority = in.priority;
    s.payload = in.payload;
    s.payload_len = in.payload_len;
    rc = ax_ops_submit_produce(rk, c, &s, 35000, errbuf, errlen);
    ax_dlq_instance_clear(&in);
    return rc;
}
