/*
 * h_dlq.c — /api/v1/dlq: the dead-letter topic newest first, one record,
 * replay (libax dlq.h, as axctl dlq list|replay) (docs/API.md "DLQ and
 * counters").
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "ax/common.h"
#include "ax/dlq.h"

/* A job for rq, which is deferred once the job is queued. */
static api_dlq_job_t *job_new(req_t *rq, api_dlq_op_t op, void (*finish)(api_dlq_job_t *)) {
    api_dlq_job_t *j = calloc(1, sizeof *j);
    if (!j)
        api_error(rq, 503, "unavailable", NULL, "out of memory");
    else {
        j->rq = rq;
        j->op = op;
        j->finish = finish;
    }
    return j;
}

/* Hand j to the reader's thread; replies 503 if its queue is full. */
static void job_submit(req_t *rq, api_dlq_job_t *j) {
    if (api_dlqw_submit(rq->api->dlqw, j) < 0) {
        j->rq = NULL;
        api_dlq_job_free(j);
        evhttp_add_header(evhttp_request_get_output_headers(rq->r), "Retry-After", "5");
        api_error(rq, 503, "unavailable", NULL, "too many dead-letter requests at once; try "
                                                "again");
        return;
    }
    rq->deferred = 1;
}

/* A DLQ error: as api_fail, with Retry-After on 503 (Kafka away). */
static void dlq_fail(req_t *rq, int rc, const char *err) {
    if (rc == AX_ERR_IO)
        evhttp_add_header(evhttp_request_get_output_headers(rq->r), "Retry-After", "5");
    api_fail(rq, rc, NULL, err);
}

static json_t *rec_json(const ax_dlq_rec_t *r) {
    char id[48];
    snprintf(id, sizeof id, "%d:%lld", (int)r->partition, (long long)r->offset);
    int ff = r->final_failure;
    return json_pack("{s:s,s:i,s:I,s:o,s:s,s:o,s:o,s:o,s:o,s:o}", "id", id, "partition",
                     (int)r->partition, "offset", (json_int_t)r->offset, "time",
                     jtime(r->ts_ms >= 0, r->ts_ms), "kind", ff ? "final_failure" : "rejected",
                     "source", js(r->source[0] ? r->source : NULL), "reason",
                     js(r->reason[0] ? r->reason : NULL), "instance_id",
                     r->instance_id ? json_integer(r->instance_id) : json_null(), "job",
                     js(r->job[0] ? r->job : NULL), "trace_id",
                     js(r->trace_id[0] ? r->trace_id : NULL));
}

static void list_done(api_dlq_job_t *j) {
    req_t *rq = j->rq;
    if (j->rc < 0) {
        dlq_fail(rq, j->rc, j->err);
    } else {
        json_t *items = json_array();
        for (size_t i = 0; i < j->nrecs; i++)
            json_array_append_new(items, rec_json(&j->recs[i]));
        api_page(rq, items, NULL);
    }
    api_dlq_job_free(j);
}

void h_dlq_list(req_t *rq) {
    static const char *const allowed[] = {"limit", "since", "reason", NULL};
    int64_t limit, since;
    int has_since;
    if (q_only(rq, allowed) || q_limit(rq, &limit) || q_time(rq, "since", &has_since, &since))
        return;
    const char *reason = q_get(rq, "reason");
    if (reason && strlen(reason) >= 256) {
        api_error(rq, 400, "bad_request", "reason", "reason: at most 255 bytes");
        return;
    }
    api_dlq_job_t *j = job_new(rq, API_DLQ_LIST, list_done);
    if (!j)
        return;
    j->limit = limit;
    j->since = has_since ? since : INT64_MIN;
    snprintf(j->reason, sizeof j->reason, "%s", reason ? reason : "");
    job_submit(rq, j);
}

/* seg[1] as P:O; -1 after replying 400. */
static int rec_id(req_t *rq, int32_t *part, int64_t *off) {
    const char *s = rq->seg[1];
    char *end;
    long p = strtol(s, &end, 10);
    if (end == s || *end != ':' || p < 0 || p > INT32_MAX) {
        api_error(rq, 400, "bad_request", "id", "id: must be PARTITION:OFFSET, as listed");
        return -1;
    }
    const char *o = end + 1;
    long long x = strtoll(o, &end, 10);
    if (end == o || *end || x < 0) {
        api_error(rq, 400, "bad_request", "id", "id: must be PARTITION:OFFSET, as listed");
        return -1;
    }
    *part = (int32_t)p;
    *off = x;
    return 0;
}

static char *base64(const unsigned char *in, size_t n) {
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
    for (size_t i = 0; out && i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? (unsigned)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        *o++ = t[v >> 18 & 63];
        *o++ = t[v >> 12 & 63];
        *o++ = i + 1 < n ? t[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? t[v & 63] : '=';
    }
    if (out)
        *o = '\0';
    return out;
}

static json_t *headers_json(const rd_kafka_message_t *m) {
    json_t *h = json_object();
    rd_kafka_headers_t *hs = NULL;
    const char *name;
    const void *v;
    size_t n;
    if (rd_kafka_message_headers(m, &hs) || !hs)
        return h;
    for (size_t i = 0; rd_kafka_header_get_all(hs, i, &name, &v, &n) == 0; i++) {
        char *s = strndup(v ? v : "", v ? n : 0);
        if (s) {
            ax_utf8_sanitize(s, strlen(s));
            json_object_set_new(h, name, js(s));
        }
        free(s);
    }
    return h;
}

static void get_done(api_dlq_job_t *j) {
    req_t *rq = j->rq;
    if (j->rc < 0) {
        dlq_fail(rq, j->rc, j->err);
        api_dlq_job_free(j);
        return;
    }
    rd_kafka_message_t *m = j->msg;
    ax_dlq_rec_t r;
    ax_dlq_rec_of(m, &r);
    json_t *o = rec_json(&r);
    char *b = base64(m->payload ? m->payload : (void *)"", m->payload ? m->len : 0);
    json_object_set_new(o, "value_base64", js(b));
    json_object_set_new(o, "headers", headers_json(m));
    free(b);
    api_reply(rq, 200, o);
    api_dlq_job_free(j);
}

void h_dlq_get(req_t *rq) {
    static const char *const allowed[] = {NULL};
    int32_t part;
    int64_t off;
    if (q_only(rq, allowed) || rec_id(rq, &part, &off) < 0)
        return;
    api_dlq_job_t *j = job_new(rq, API_DLQ_FETCH, get_done);
    if (!j)
        return;
    j->part = part;
    j->off = off;
    job_submit(rq, j);
}

static void replay_reply(api_dlq_job_t *j) {
    static const char *const actions[] = {"produced", "resubmitted", "already_replayed"};
    const ax_dlq_replay_t *r = &j->replay;
    char id[48];
    snprintf(id, sizeof id, "%d:%lld", (int)j->part, (long long)j->off);
    api_reply(j->rq, 200,
              json_pack("{s:s,s:s,s:o,s:o,s:o,s:o}", "id", id, "action", actions[r->action],
                        "topic", js(r->topic[0] ? r->topic : NULL), "instance_id",
                        r->instance_id ? json_integer(r->instance_id) : json_null(), "trace_id",
                        js(r->trace_id[0] ? r->trace_id : NULL), "idempotency_key",
                        js(r->idempotency_key[0] ? r->idempotency_key : NULL)));
}

/* The replay's delivery report, served by the loop's producer watch. */
static void replay_delivered(ax_delivery_t *dv, rd_kafka_resp_err_t err) {
    api_dlq_job_t *j = (api_dlq_job_t *)((char *)dv - offsetof(api_dlq_job_t, dv));
    if (dv->pending > 0)
        return;
    if (j->orphan) { /* ax-api stopped meanwhile: nobody to answer */
        api_dlq_job_free(j);
        return;
    }
    api_dlqw_landed(j->rq->api->dlqw, j);
    if (dv->failed) {
        char e[512];
        snprintf(e, sizeof e, "replay not acknowledged by Kafka: %s", rd_kafka_err2str(dv->err));
        dlq_fail(j->rq, AX_ERR_IO, e);
    } else {
        replay_reply(j);
    }
    api_dlq_job_free(j);
}

/* On the loop, the record read: the store look-up and the produce (no
 * wait: replay_delivered replies). */
static void replay_fetched(api_dlq_job_t *j) {
    req_t *rq = j->rq;
    int rc = j->rc;
    if (rc == 0) {
        j->dv.on_report = replay_delivered;
        rc = ax_dlq_replay_start(j->dlq, rq->api->svc.pg, rq->api->svc.producer, j->msg,
                                 &j->replay, &j->dv, j->err, sizeof j->err);
        rd_kafka_message_destroy(j->msg);
        j->msg = NULL;
        if (rc == 0 && j->dv.pending > 0) {
            api_dlqw_flying(rq->api->dlqw, j); /* the delivery report replies */
            return;
        }
    }
    if (rc < 0)
        dlq_fail(rq, rc == AX_ERR_INVALID ? AX_ERR_CONFLICT : rc, j->err);
    else
        replay_reply(j);
    api_dlq_job_free(j);
}

void h_dlq_replay(req_t *rq) {
    int32_t part;
    int64_t off;
    if (rec_id(rq, &part, &off) < 0)
        return;
    api_dlq_job_t *j = job_new(rq, API_DLQ_FETCH, replay_fetched);
    if (!j)
        return;
    j->part = part;
    j->off = off;
    job_submit(rq, j);
}
