/*
 * h_instances.c — /api/v1/instances: list with filters and keyset
 * pagination, one instance (attempts, timeline, output), submit (to the
 * submit topic, as axctl submit), cancel and retry (libax ops.h, as axctl
 * instance cancel|retry) (docs/API.md "Instances").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "ax/common.h"
#include "ax/ops.h"
#include "ax/store_api.h"

#define PG(rq) ((rq)->pg)

/* v upper-cased into buf if it is one of names, else NULL. */
static const char *enum_arg(const char *v, const char *const *names, char *buf, size_t len) {
    snprintf(buf, len, "%s", v);
    for (char *c = buf; *c; c++)
        if (*c >= 'a' && *c <= 'z')
            *c = (char)(*c - 32);
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], buf) == 0)
            return buf;
    return NULL;
}

/* The list's filters from the query; 0, or -1 after replying 400. */
static int query_of(req_t *rq, ax_instance_query_t *q, char *st, char *oc, size_t len) {
    static const char *const allowed[] = {"limit", "cursor", "job", "state", "outcome",
                                          "priority", "group", "since", "until", "trace_id",
                                          "idempotency_key", "all_deployments", NULL};
    static const char *const states[] = {"SCHEDULED", "LOCKED", "RUNNING", "FINISHED", NULL};
    static const char *const outcomes[] = {"SUCCESS", "FAILED", "TIMEOUT", "CANCELLED", NULL};
    int64_t pr, before;
    int all;
    memset(q, 0, sizeof *q);
    if (q_only(rq, allowed) || q_limit(rq, &q->limit) || q_int(rq, "priority", 0, 4, -1, &pr) ||
        q_int(rq, "cursor", 1, INT64_MAX, 0, &before) ||
        q_time(rq, "since", &q->has_since, &q->since_ms) ||
        q_time(rq, "until", &q->has_until, &q->until_ms) || q_bool(rq, "all_deployments", &all))
        return -1;
    /* this deployment's instances (topic.prefix), as the services see them */
    q->deployment = all == 1 ? NULL : rq->api->svc.conf.topic_prefix;
    q->priority = (int)pr;
    q->before_id = before;
    q->job = q_get(rq, "job");
    q->group = q_get(rq, "group");
    q->trace_id = q_get(rq, "trace_id");
    q->idempotency_key = q_get(rq, "idempotency_key");
    const char *s = q_get(rq, "state"), *o = q_get(rq, "outcome");
    if (s && !(q->state = enum_arg(s, states, st, len))) {
        api_error(rq, 400, "bad_request", "state",
                  "state: must be SCHEDULED, LOCKED, RUNNING or FINISHED");
        return -1;
    }
    if (o && !(q->outcome = enum_arg(o, outcomes, oc, len))) {
        api_error(rq, 400, "bad_request", "outcome",
                  "outcome: must be SUCCESS, FAILED, TIMEOUT or CANCELLED");
        return -1;
    }
    return 0;
}

void h_instances_list(req_t *rq) {
    ax_instance_query_t q;
    char st[16], oc[16], err[1024];
    if (query_of(rq, &q, st, oc, sizeof st) < 0)
        return;
    int64_t limit = q.limit;
    q.limit = limit + 1;
    ax_json_row_t *rows;
    size_t n;
    int rc = ax_store_api_instances(PG(rq), &q, &rows, &n, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    api_page_rows(rq, rows, n, (size_t)limit);
    ax_json_rows_free(rows, n);
}

void h_instance_get(req_t *rq) {
    static const char *const allowed[] = {NULL};
    int64_t id;
    if (q_only(rq, allowed) || seg_id(rq, 1, "id", &id) < 0)
        return;
    char *text = NULL, err[1024];
    int rc = ax_store_api_instance(PG(rq), id, &text, err, sizeof err);
    api_reply_text(rq, rc, text, err, "the instance");
}

/* ---- submit ---------------------------------------------------------------------------- */

/* A string member into *out (NULL if absent); -1 after replying 400. */
static int body_str(req_t *rq, const char *key, const char **out) {
    json_t *x = json_object_get(rq->body, key);
    *out = NULL;
    if (!x)
        return 0;
    if (!json_is_string(x) || strlen(json_string_value(x)) != json_string_length(x)) {
        api_error(rq, 400, "bad_request", key, "%s: must be a string without NULs", key);
        return -1;
    }
    *out = json_string_value(x);
    return 0;
}

static int body_int(req_t *rq, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    json_t *x = json_object_get(rq->body, key);
    if (!x)
        return 0;
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi) {
        api_error(rq, 400, "bad_request", key, "%s: must be an integer %lld..%lld", key,
                  (long long)lo, (long long)hi);
        return -1;
    }
    *out = json_integer_value(x);
    return 0;
}

/* The command member as argv in argv[0..cap); -1 after replying 400. */
static int body_command(req_t *rq, char **argv, size_t cap, size_t *n) {
    json_t *c = json_object_get(rq->body, "command");
    *n = 0;
    if (!c)
        return 0;
    if (!json_is_array(c) || json_array_size(c) < 1 || json_array_size(c) >= cap) {
        api_error(rq, 400, "bad_request", "command", "command: must be an array of 1..%zu "
                                                     "strings", cap - 1);
        return -1;
    }
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *x = json_array_get(c, i);
        if (!json_is_string(x) || strlen(json_string_value(x)) != json_string_length(x)) {
            api_error(rq, 400, "bad_request", "command", "command: must hold strings only");
            return -1;
        }
        argv[i] = (char *)json_string_value(x);
    }
    *n = json_array_size(c);
    argv[*n] = NULL;
    return 0;
}

static int submit_of(req_t *rq, ax_submit_t *s, char **argv, size_t cap) {
    static const char *const keys[] = {"job", "command", "payload", "priority", "timeout_ms",
                                       "delay_ms", "at", "idempotency_key", "trace_id", NULL};
    if (body_only(rq, keys) < 0)
        return -1;
    const char *payload, *at;
    int64_t pr = -1, timeout = 0, delay = -1;
    if (body_str(rq, "job", (const char **)&s->job) || body_str(rq, "payload", &payload) ||
        body_str(rq, "at", &at) || body_str(rq, "idempotency_key", (const char **)&s->idempotency_key) ||
        body_str(rq, "trace_id", (const char **)&s->trace_id) ||
        body_int(rq, "priority", 0, 4, &pr) ||
        body_int(rq, "timeout_ms", 1, AX_SUBMIT_MS_MAX, &timeout) ||
        body_int(rq, "delay_ms", 0, AX_SUBMIT_MS_MAX, &delay) ||
        body_command(rq, argv, cap, &s->command_len))
        return -1;
    if (s->command_len)
        s->command = argv;
    s->priority = (int32_t)pr;
    s->timeout_ms = timeout;
    s->delay_ms = delay;
    if (payload) {
        s->payload = (uint8_t *)payload;
        s->payload_len = strlen(payload);
    }
    if (at && ax_time_parse(at, &s->run_at_ms) < 0) {
        api_error(rq, 400, "bad_request", "at", "at: must be ISO-8601 with an offset or epoch ms");
        return -1;
    }
    return 0;
}

void h_instances_submit(req_t *rq) {
    ax_submit_t s;
    char *argv[257], trace[40], err[1024], topic[256];
    const char *field = NULL;
    ax_submit_init(&s);
    if (!rq->body) {
        api_error(rq, 400, "invalid_json", NULL, "a Submission object is needed");
        return;
    }
    if (submit_of(rq, &s, argv, AX_ARRAY_SIZE(argv)) < 0)
        return;
    if (!s.trace_id) {
        ax_trace_id_new(trace);
        s.trace_id = trace;
    }
    int rc = ax_ops_submit_check(PG(rq), &s, &field, err, sizeof err);
    if (rc == AX_ERR_NOTFOUND)
        rc = AX_ERR_INVALID; /* an unknown job is bad input here */
    if (rc == 0)
        rc = ax_ops_submit_produce(rq->api->svc.producer, &rq->api->svc.conf, &s, 30000, err,
                                   sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, field, err);
        return;
    }
    ax_conf_topic(&rq->api->svc.conf, "submit", topic, sizeof topic);
    api_reply(rq, 202, json_pack("{s:s,s:o,s:s}", "trace_id", s.trace_id, "idempotency_key",
                                 js(s.idempotency_key), "topic", topic));
}

/* ---- cancel, retry --------------------------------------------------------------------- */

void h_instance_cancel(req_t *rq) {
    int64_t id;
    if (seg_id(rq, 1, "id", &id) < 0)
        return;
    char err[1024], why[200];
    snprintf(why, sizeof why, "cancelled by an operator (ax-api, token %s)", rq->token->name);
    ax_cancel_result_t r;
    int rc = ax_ops_cancel_instance(PG(rq), rq->api->svc.producer, &rq->api->svc.conf, id, why,
                                    &r, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    const char *action = r.parents     ? "shards_cancelled"
                         : r.scheduled ? "cancelled"
                                       : "stop_requested";
    api_reply(rq, 202, json_pack("{s:I,s:s,s:s,s:i,s:i}", "id", (json_int_t)id, "state", r.state,
                                 "action", action, "scheduled", r.scheduled, "stopping",
                                 r.stopping));
}

void h_instance_retry(req_t *rq) {
    int64_t id;
    if (seg_id(rq, 1, "id", &id) < 0)
        return;
    char err[1024];
    ax_retry_result_t r;
    int rc = ax_ops_retry(PG(rq), rq->api->svc.producer, &rq->api->svc.conf, id, &r, err,
                          sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    api_reply(rq, 202, json_pack("{s:I,s:s,s:s,s:o,s:b}", "retry_of", (json_int_t)id, "trace_id",
                                 r.trace_id, "idempotency_key", r.idempotency_key, "instance_id",
                                 r.duplicate ? json_integer(r.instance_id) : json_null(),
                                 "duplicate", r.duplicate));
}
