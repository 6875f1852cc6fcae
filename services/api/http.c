/*
 * http.c — one request: routing under /api/v1, bearer-token auth with
 * scopes, the per-token rate limit, the body's size and JSON, and replies
 * (JSON, errors as {"error":{"code","message","field"}}). Every mutating
 * call is logged with the token's name (never the token).
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "api.h"
#include "ax/common.h"
#include "ax/log.h"

/* ---- routes ---------------------------------------------------------------------------- */

typedef struct route {
    enum evhttp_cmd_type method;
    const char *pattern; /* segments after /api/v1, "*" matches one */
    api_handler_fn fn;
    /* LOOP: the handler runs on the loop (it uses the producer, the DLQ
     * reader or the token table); else on a thread of the pool (pool.c) */
    int on_loop;
} route_t;

#define LOOP 1
#define POOL 0

static const route_t routes[] = {
    {EVHTTP_REQ_GET, "jobs", h_jobs_list, POOL},
    {EVHTTP_REQ_POST, "jobs", h_jobs_create, POOL},
    {EVHTTP_REQ_POST, "jobs/pause-all", h_jobs_pause_all, POOL},
    {EVHTTP_REQ_POST, "jobs/resume-all", h_jobs_resume_all, POOL},
    {EVHTTP_REQ_GET, "jobs/*", h_job_get, POOL},
    {EVHTTP_REQ_PATCH, "jobs/*", h_job_update, POOL},
    {EVHTTP_REQ_DELETE, "jobs/*", h_job_delete, LOOP},
    {EVHTTP_REQ_POST, "jobs/*/enable", h_job_enable, POOL},
    {EVHTTP_REQ_POST, "jobs/*/disable", h_job_disable, POOL},
    {EVHTTP_REQ_GET, "jobs/*/next", h_job_next, POOL},
    {EVHTTP_REQ_GET, "jobs/*/history", h_job_history, POOL},
    {EVHTTP_REQ_GET, "jobs/*/circuit", h_job_circuit, POOL},
    {EVHTTP_REQ_POST, "jobs/*/circuit/reset", h_job_circuit_reset, POOL},
    {EVHTTP_REQ_GET, "instances", h_instances_list, POOL},
    {EVHTTP_REQ_POST, "instances", h_instances_submit, LOOP},
    {EVHTTP_REQ_GET, "instances/*", h_instance_get, POOL},
    {EVHTTP_REQ_POST, "instances/*/cancel", h_instance_cancel, LOOP},
    {EVHTTP_REQ_POST, "instances/*/retry", h_instance_retry, LOOP},
    {EVHTTP_REQ_GET, "flows", h_flows_list, POOL},
    {EVHTTP_REQ_POST, "flows", h_flows_create, POOL},
    {EVHTTP_REQ_GET, "flows/*", h_flow_get, POOL},
    {EVHTTP_REQ_DELETE, "flows/*", h_flow_delete, POOL},
    {EVHTTP_REQ_POST, "flows/*/runs", h_flow_run, POOL},
    {EVHTTP_REQ_GET, "flows/*/runs", h_flow_runs, POOL},
    {EVHTTP_REQ_GET, "flows/*/runs/*", h_flow_run_get, POOL},
    {EVHTTP_REQ_GET, "executors", h_executors, POOL},
    {EVHTTP_REQ_GET, "lanes", h_lanes, POOL},
    {EVHTTP_REQ_GET, "leader", h_leader, POOL},
    {EVHTTP_REQ_GET, "counters", h_counters, POOL},
    {EVHTTP_REQ_GET, "whoami", h_whoami, LOOP},
    {EVHTTP_REQ_GET, "stats", h_stats, POOL},
    {EVHTTP_REQ_GET, "dlq", h_dlq_list, LOOP},
    {EVHTTP_REQ_GET, "dlq/*", h_dlq_get, LOOP},
    {EVHTTP_REQ_POST, "dlq/*/replay", h_dlq_replay, LOOP},
};

const char *api_route_pattern(size_t i) {
    return i < AX_ARRAY_SIZE(routes) ? routes[i].pattern : NULL;
}

static const char *method_name(enum evhttp_cmd_type m) {
    switch (m) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_PATCH: return "PATCH";
    default: return "OTHER";
    }
}

/* 1 if the request's segments match pattern. */
static int route_match(const req_t *rq, const char *pattern) {
    int k = 0;
    const char *p = pattern;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (k >= rq->nseg)
            return 0;
        if (!(n == 1 && *p == '*') && (strlen(rq->seg[k]) != n || memcmp(rq->seg[k], p, n) != 0))
            return 0;
        if (n == 1 && *p == '*' && !rq->seg[k][0])
            return 0;
        k++;
        p = e ? e + 1 : p + n;
    }
    return k == rq->nseg;
}

/* The route for the request; NULL after replying 404 or 405. A literal
 * segment wins over "*" (routes are listed literal first). */
static const route_t *route_find(req_t *rq) {
    char allow[128] = "";
    for (size_t i = 0; i < AX_ARRAY_SIZE(routes); i++) {
        if (!route_match(rq, routes[i].pattern))
            continue;
        if (routes[i].method == rq->method)
            return &routes[i];
        const char *m = method_name(routes[i].method);
        if (!strstr(allow, m))
            snprintf(allow + strlen(allow), sizeof allow - strlen(allow), "%s%s",
                     *allow ? ", " : "", m);
    }
    if (!*allow) {
        api_error(rq, 404, "not_found", NULL, "no such path: %s", rq->path);
        return NULL;
    }
    evhttp_add_header(evhttp_request_get_output_headers(rq->r), "Allow", allow);
    api_error(rq, 405, "method_not_allowed", NULL, "%s is not allowed on %s (allowed: %s)",
              rq->method_name, rq->path, allow);
    return NULL;
}

/* ---- replies --------------------------------------------------------------------------- */

static int mutation(const req_t *rq) {
    return rq->method != EVHTTP_REQ_GET && rq->method != EVHTTP_REQ_HEAD;
}

/* The reply of rq: status and t (the JSON text and its newline, or NULL
 * for out of memory), sent now on the loop, else by the loop later. */
static void reply_set(req_t *rq, int status, char *t) {
    rq->replied = 1;
    rq->reply_status = status;
    rq->reply_text = t;
    if (!rq->pooled)
        api_send(rq);
}

void api_reply(req_t *rq, int status, json_t *obj) {
    if (rq->replied) {
        json_decref(obj);
        return;
    }
    char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(obj);
    size_t n = text ? strlen(text) : 0;
    char *t = text ? realloc(text, n + 2) : NULL;
    if (t) {
        t[n] = '\n';
        t[n + 1] = '\0';
    } else {
        free(text);
    }
    reply_set(rq, status, t);
}

static void text_free(const void *data, size_t len, void *extra) {
    free((void *)data);
}

void api_send(req_t *rq) {
    int status = rq->reply_status;
    struct evkeyvalq *h = evhttp_request_get_output_headers(rq->r);
    evhttp_add_header(h, "Content-Type", "application/json; charset=utf-8");
    evhttp_add_header(h, "Cache-Control", "no-store");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    if (status == 401)
        evhttp_add_header(h, "WWW-Authenticate", "Bearer realm=\"ax\"");
    struct evbuffer *b = evbuffer_new();
    if (b && rq->reply_text &&
        evbuffer_add_reference(b, rq->reply_text, strlen(rq->reply_text), text_free, NULL) == 0) {
        rq->reply_text = NULL; /* the buffer's, freed once written */
    } else if (b) {
        status = 500;
        evbuffer_add_printf(b, "{\"error\":{\"code\":\"internal\",\"message\":\"out of "
                               "memory\",\"field\":null}}\n");
    }
    evhttp_send_reply(rq->r, status, NULL, b);
    evbuffer_free(b);
    free(rq->reply_text);
    rq->reply_text = NULL;
    api_metrics_reply(rq, status);
    if (mutation(rq) && rq->token) {
        rq->api->mutations++;
        ax_info("api: %s %s by %s -> %d", rq->method_name, rq->path, rq->who, status);
    } else if (status >= 500) {
        ax_warn("api: %s %s -> %d", rq->method_name, rq->path, status);
    }
}

void api_error(req_t *rq, int status, const char *code, const char *field, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ax_utf8_sanitize(msg, strlen(msg));
    json_t *e = json_pack("{s:{s:s,s:s,s:o}}", "error", "code", code, "message", msg, "field",
                          field ? json_string(field) : json_null());
    api_reply(rq, status, e);
}

void api_fail(req_t *rq, int rc, const char *field, const char *err) {
    /* the first line of a PostgreSQL error: no DETAIL/HINT */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", err && *err ? err : "failed");
    msg[strcspn(msg, "\n")] = '\0';
    switch (rc) {
    case AX_ERR_NOTFOUND: api_error(rq, 404, "not_found", field, "%s", msg); break;
    case AX_ERR_CONFLICT: api_error(rq, 409, "conflict", field, "%s", msg); break;
    case AX_ERR_INVALID:
    case AX_ERR_TOOBIG: api_error(rq, 400, "bad_request", field, "%s", msg); break;
    case AX_ERR_IO: api_error(rq, 503, "unavailable", NULL, "%s", msg); break;
    default: api_error(rq, 500, "internal", NULL, "%s", msg); break;
    }
}

void api_page(req_t *rq, json_t *items, const char *next_cursor) {
    api_reply(rq, 200, json_pack("{s:o,s:o}", "items", items, "next_cursor",
                                 next_cursor ? json_string(next_cursor) : json_null()));
}

void api_page_rows(req_t *rq, const ax_json_row_t *rows, size_t n, size_t limit) {
    if (rq->replied)
        return;
    int more = n > limit;
    n = more ? limit : n;
    char next[48] = "null";
    if (more)
        snprintf(next, sizeof next, "\"%lld\"", (long long)rows[n - 1].id);
    size_t len = sizeof "{\"items\":[],\"next_cursor\":}\n" + strlen(next) + n;
    for (size_t i = 0; i < n; i++)
        len += rows[i].json ? strlen(rows[i].json) : 0;
    char *t = malloc(len), *p = t;
    if (!t) {
        reply_set(rq, 500, NULL);
        return;
    }
    p += sprintf(p, "{\"items\":[");
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        const char *j = rows[i].json;
        size_t k = j ? strlen(j) : 0;
        if (!k || !ax_utf8_valid(j, k))
            continue; /* as a row jansson would not parse */
        if (!first)
            *p++ = ',';
        memcpy(p, j, k);
        p += k;
        first = 0;
    }
    sprintf(p, "],\"next_cursor\":%s}\n", next);
    reply_set(rq, 200, t);
}

void api_reply_json_text(req_t *rq, int status, char *text) {
    size_t n = text ? strlen(text) : 0;
    if (rq->replied || !n || !ax_utf8_valid(text, n)) {
        free(text);
        if (!rq->replied)
            api_error(rq, 500, "internal", NULL, "the store's JSON text is not valid");
        return;
    }
    char *t = realloc(text, n + 2);
    if (!t) {
        free(text);
        reply_set(rq, 500, NULL);
        return;
    }
    t[n] = '\n';
    t[n + 1] = '\0';
    reply_set(rq, status, t);
}

void api_page_int(req_t *rq, json_t *items, int more, int64_t last) {
    char next[24];
    if (more)
        snprintf(next, sizeof next, "%lld", (long long)last);
    api_page(rq, items, more ? next : NULL);
}

/* ---- auth ------------------------------------------------------------------------------ */

/* 0 when the request may go on (else replied 401/403/429). */
static int authorize(req_t *rq) {
    api_t *a = rq->api;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(rq->r), "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0 || !h[7]) {
        api_metrics_auth_failure(a, "missing");
        api_error(rq, 401, "unauthorized", NULL, "an Authorization: Bearer <token> header is "
                                                 "needed");
        return -1;
    }
    const char *t = h + 7;
    while (*t == ' ')
        t++;
    size_t n = strcspn(t, " ");
    ax_api_token_t *tok = ax_api_tokens_find(&a->tokens, t, n);
    if (!tok) {
        api_metrics_auth_failure(a, "invalid");
        api_error(rq, 401, "unauthorized", NULL, "the token is not valid");
        return -1;
    }
    int64_t retry_s;
    if (!ax_api_rate_take(tok, ax_mono_ms(), a->svc.conf.api_rate_limit,
                          a->svc.conf.api_rate_burst, &retry_s)) {
        char v[24];
        api_metrics_rate_limited(a);
        snprintf(v, sizeof v, "%lld", (long long)retry_s);
        evhttp_add_header(evhttp_request_get_output_headers(rq->r), "Retry-After", v);
        api_error(rq, 429, "rate_limited", NULL, "more than %lld requests/s for token %s",
                  (long long)a->svc.conf.api_rate_limit, tok->name);
        return -1;
    }
    rq->token = tok;
    snprintf(rq->who, sizeof rq->who, "%.63s", tok->name);
    if (mutation(rq) && tok->scope != AX_SCOPE_ADMIN) {
        api_metrics_auth_failure(a, "scope");
        api_error(rq, 403, "forbidden", NULL, "token %s has scope read: %s needs admin",
                  tok->name, rq->method_name);
        return -1;
    }
    return 0;
}

/* A mutation's body: absent/empty, or a JSON object. 0, or -1 (replied). */
static int read_body(req_t *rq) {
    struct evbuffer *b = evhttp_request_get_input_buffer(rq->r);
    size_t n = b ? evbuffer_get_length(b) : 0;
    if (n == 0)
        return 0;
    if ((int64_t)n > rq->api->svc.conf.api_body_max) {
        api_error(rq, 413, "payload_too_large", NULL, "the body is over %lld bytes (api.body.max)",
                  (long long)rq->api->svc.conf.api_body_max);
        return -1;
    }
    json_error_t e;
    const char *data = (const char *)evbuffer_pullup(b, -1);
    rq->body = json_loadb(data, n, JSON_REJECT_DUPLICATES, &e);
    if (!rq->body || !json_is_object(rq->body)) {
        api_error(rq, 400, "invalid_json", NULL, "the body must be a JSON object%s%s",
                  rq->body ? "" : ": ", rq->body ? "" : e.text);
        return -1;
    }
    return 0;
}

/* ---- the request ----------------------------------------------------------------------- */

/* Split the decoded path after /api/v1 into segments. */
static int split(req_t *rq, const char *rest) {
    rq->segs_buf = strdup(*rest == '/' ? rest + 1 : rest);
    if (!rq->segs_buf)
        return -1;
    char *p = rq->segs_buf;
    size_t len = strlen(p);
    if (len && p[len - 1] == '/')
        p[len - 1] = '\0';
    while (*p) {
        if (rq->nseg == API_MAX_SEGS)
            return -1;
        rq->seg[rq->nseg++] = p;
        char *e = strchr(p, '/');
        if (!e)
            break;
        *e = '\0';
        p = e + 1;
    }
    return 0;
}

static void serve(req_t *rq) {
    if (api_files_route(rq))
        return;
    const char *pre = "/api/v1";
    if (strncmp(rq->path, pre, 7) != 0 || (rq->path[7] != '/' && rq->path[7] != '\0')) {
        api_error(rq, 404, "not_found", NULL, "no such path: %s", rq->path);
        return;
    }
    if (split(rq, rq->path + 7) < 0) {
        api_error(rq, 404, "not_found", NULL, "no such path: %s", rq->path);
        return;
    }
    const route_t *rt = route_find(rq);
    if (rt)
        rq->route = rt->pattern;
    if (!rt || authorize(rq) < 0 || (mutation(rq) && read_body(rq) < 0))
        return;
    rq->fn = rt->fn;
    if (!rt->on_loop && rq->api->pool) {
        rq->deferred = 1; /* the pool's until the loop sends the reply */
        if (api_pool_submit(rq->api->pool, rq) < 0) {
            rq->deferred = 0;
            evhttp_add_header(evhttp_request_get_output_headers(rq->r), "Retry-After", "1");
            api_error(rq, 503, "unavailable", NULL, "too many requests wait for a handler thread");
        }
        return;
    }
    rt->fn(rq);
    if (!rq->replied && !rq->deferred)
        api_error(rq, 500, "internal", NULL, "no reply");
}

void api_req_free(req_t *rq) {
    if (!rq)
        return;
    evhttp_clear_headers(&rq->query);
    json_decref(rq->body);
    free(rq->segs_buf);
    free(rq->path);
    free(rq->reply_text);
    free(rq);
}

/* TCP_NODELAY on the request's connection: a reply is written in more
 * than one segment (headers, then the body), and with Nagle the last one
 * waited for the client's delayed ACK, 40 ms a page on a kept-alive
 * connection (BENCHMARKS.md). */
static void nodelay(struct evhttp_request *r) {
    struct evhttp_connection *c = evhttp_request_get_connection(r);
    struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    int one = 1;
    if (fd >= 0)
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void api_on_request(struct evhttp_request *r, void *arg) {
    api_t *a = arg;
    nodelay(r);
    req_t *rq = calloc(1, sizeof *rq);
    if (!rq) {
        evhttp_send_error(r, 503, "out of memory");
        return;
    }
    rq->api = a;
    rq->pg = a->svc.pg;
    rq->r = r;
    rq->start_us = api_clock_us();
    rq->method = evhttp_request_get_command(r);
    rq->method_name = method_name(rq->method);
    TAILQ_INIT(&rq->query);
    a->requests++;
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(r);
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    const char *query = u ? evhttp_uri_get_query(u) : NULL;
    rq->path = evhttp_uridecode(path && *path ? path : "/", 0, NULL);
    if (!rq->path || strlen(rq->path) > 2048 || !ax_utf8_valid(rq->path, strlen(rq->path))) {
        free(rq->path);
        rq->path = strdup("?");
        api_error(rq, 400, "bad_request", NULL, "the path is not valid");
    } else if (query && evhttp_parse_query_str(query, &rq->query) < 0) {
        api_error(rq, 400, "bad_request", NULL, "the query string does not parse");
    } else {
        serve(rq);
    }
    if (!rq->deferred)
        api_req_free(rq);
}

/* ---- query parameters ------------------------------------------------------------------ */

int q_only(req_t *rq, const char *const *allowed) {
    struct evkeyval *kv;
    TAILQ_FOREACH(kv, &rq->query, next) {
        int i = 0;
        while (allowed[i] && strcmp(allowed[i], kv->key) != 0)
            i++;
        if (!allowed[i] || !ax_utf8_valid(kv->value, strlen(kv->value))) {
            api_error(rq, 400, "bad_request", kv->key,
                      allowed[i] ? "%s: not valid UTF-8" : "%s: unknown query parameter",
                      allowed[i] ? kv->key : kv->key);
            return -1;
        }
    }
    return 0;
}

int body_only(req_t *rq, const char *const *keys) {
    const char *k;
    json_t *v;
    json_object_foreach(rq->body, k, v) {
        int i = 0;
        while (keys[i] && strcmp(keys[i], k) != 0)
            i++;
        if (!keys[i]) {
            api_error(rq, 400, "bad_request", k, "%s: unknown member", k);
            return -1;
        }
    }
    return 0;
}

const char *q_get(req_t *rq, const char *name) {
    return evhttp_find_header(&rq->query, name);
}

int q_int(req_t *rq, const char *name, int64_t lo, int64_t hi, int64_t def, int64_t *out) {
    const char *v = q_get(rq, name);
    *out = def;
    if (!v)
        return 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < lo || x > hi || (*v == '0' && v[1])) {
        api_error(rq, 400, "bad_request", name, "%s: must be an integer %lld..%lld", name,
                  (long long)lo, (long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

int q_limit(req_t *rq, int64_t *out) {
    return q_int(rq, "limit", 1, 500, 50, out);
}

int q_time(req_t *rq, const char *name, int *has, int64_t *ms) {
    const char *v = q_get(rq, name);
    *has = 0;
    if (!v)
        return 0;
    if (ax_time_parse(v, ms) < 0) {
        api_error(rq, 400, "bad_request", name,
                  "%s: must be ISO-8601 with an offset (2026-12-01T02:30:00Z) or epoch ms", name);
        return -1;
    }
    *has = 1;
    return 0;
}

int q_bool(req_t *rq, const char *name, int *out) {
    const char *v = q_get(rq, name);
    *out = -1;
    if (!v)
        return 0;
    if (strcmp(v, "true") == 0 || strcmp(v, "false") == 0) {
        *out = v[0] == 't';
        return 0;
    }
    api_error(rq, 400, "bad_request", name, "%s: must be true or false", name);
    return -1;
}

int seg_id(req_t *rq, int k, const char *what, int64_t *out) {
    const char *v = rq->seg[k];
    char *end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < 1 || !isdigit((unsigned char)*v)) {
        api_error(rq, 400, "bad_request", what, "%s: must be a positive integer, not '%s'", what,
                  v);
        return -1;
    }
    *out = x;
    return 0;
}

/* ---- JSON helpers ---------------------------------------------------------------------- */

json_t *js(const char *s) {
    if (!s)
        return json_null();
    json_t *j = json_string(s);
    if (!j) { /* not UTF-8: as it would print */
        char *c = strdup(s);
        if (!c)
            return json_null();
        ax_utf8_sanitize(c, strlen(c));
        j = json_string(c);
        free(c);
    }
    return j ? j : json_null();
}

json_t *jtime(int has, int64_t ms) {
    if (!has)
        return json_null();
    time_t s = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    int frac = (int)(ms - (int64_t)s * 1000);
    struct tm tm;
    char t[40], out[64];
    if (!gmtime_r(&s, &tm))
        return json_null();
    strftime(t, sizeof t, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, sizeof out, "%s.%03d+00:00", t, frac);
    return json_string(out);
}

json_t *jparse(const char *text) {
    return text ? json_loads(text, 0, NULL) : NULL;
}

void api_reply_text(req_t *rq, int rc, char *text, const char *err, const char *what) {
    if (rc < 0) {
        free(text);
        api_fail(rq, rc, NULL, err);
        return;
    }
    if (!text) {
        api_error(rq, 500, "internal", NULL, "%s: not JSON", what);
        return;
    }
    /* PostgreSQL's json text as it is: valid JSON by construction (not
     * parsed and written again, BENCHMARKS.md), UTF-8 checked */
    api_reply_json_text(rq, 200, text);
}
