/*
 * h_dlq.c — /api/v1/dlq: the dead-letter topic newest first, one record,
 * replay (libax dlq.h, as axctl dlq list|replay) (docs/API.md "DLQ and
 * counters").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "ax/common.h"
#include "ax/dlq.h"

/* The reader, opened once; NULL after replying 503. */
static ax_dlq_t *reader(req_t *rq) {
    api_t *a = rq->api;
    char err[512];
    int rc;
    if (!a->dlq && !(a->dlq = ax_dlq_open(&a->svc.conf, &rc, err, sizeof err)))
        api_fail(rq, rc == AX_ERR_INVALID ? AX_ERR_IO : rc, NULL, err);
    return a->dlq;
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
                     json_null(), "trace_id", json_null());
}

void h_dlq_list(req_t *rq) {
    static const char *const allowed[] = {"limit", "since", "reason", NULL};
    int64_t limit, since;
    int has_since;
    if (q_only(rq, allowed) || q_limit(rq, &limit) || q_time(rq, "since", &has_since, &since))
        return;
    ax_dlq_t *d = reader(rq);
    if (!d)
        return;
    ax_dlq_rec_t *v;
    size_t n;
    char err[512];
    int rc = ax_dlq_list(d, limit, has_since ? since : INT64_MIN, q_get(rq, "reason"), &v, &n,
                         err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(items, rec_json(&v[i]));
    free(v);
    api_page(rq, items, NULL);
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

void h_dlq_get(req_t *rq) {
    static const char *const allowed[] = {NULL};
    int32_t part;
    int64_t off;
    if (q_only(rq, allowed) || rec_id(rq, &part, &off) < 0)
        return;
    ax_dlq_t *d = reader(rq);
    rd_kafka_message_t *m;
    char err[512];
    if (!d)
        return;
    int rc = ax_dlq_fetch(d, part, off, &m, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    ax_dlq_rec_t r;
    ax_dlq_rec_of(m, &r);
    json_t *o = rec_json(&r);
    char *b = base64(m->payload ? m->payload : (void *)"", m->payload ? m->len : 0);
    json_object_set_new(o, "value_base64", js(b));
    json_object_set_new(o, "headers", headers_json(m));
    free(b);
    rd_kafka_message_destroy(m);
    api_reply(rq, 200, o);
}

void h_dlq_replay(req_t *rq) {
    int32_t part;
    int64_t off;
    if (rec_id(rq, &part, &off) < 0)
        return;
    ax_dlq_t *d = reader(rq);
    rd_kafka_message_t *m;
    char err[512];
    if (!d)
        return;
    int rc = ax_dlq_fetch(d, part, off, &m, err, sizeof err);
    ax_dlq_replay_t r;
    if (rc == 0) {
        rc = ax_dlq_replay(d, rq->api->svc.pg, rq->api->svc.producer, &rq->api->svc.conf, m, &r,
                           err, sizeof err);
        rd_kafka_message_destroy(m);
    }
    if (rc < 0) {
        api_fail(rq, rc == AX_ERR_INVALID ? AX_ERR_CONFLICT : rc, NULL, err);
        return;
    }
    static const char *const actions[] = {"produced", "resubmitted", "already_replayed"};
    char id[48];
    snprintf(id, sizeof id, "%d:%lld", (int)part, (long long)off);
    api_reply(rq, 200,
              json_pack("{s:s,s:s,s:o,s:o,s:o,s:o}", "id", id, "action", actions[r.action],
                        "topic", js(r.topic[0] ? r.topic : NULL), "instance_id",
                        r.instance_id ? json_integer(r.instance_id) : json_null(), "trace_id",
                        js(r.trace_id[0] ? r.trace_id : NULL), "idempotency_key",
                        js(r.idempotency_key[0] ? r.idempotency_key : NULL)));
}
