/*
 * h_http.c — the http handler: one POST per run with libevent's HTTP client,
 * on the loop thread.
 *
 * A run's command is {URL}; only http:// is supported (libevent's client
 * has no TLS here: an https:// URL fails, not retryable, saying so). The
 * body is the instance as JSON:
 *   {"instance_id":N, "attempt":N, "job":"name"|null, "trace_id":"...",
 *    "idempotency_key":"..."|null, "timeout_ms":N, "payload":"..."}
 * with the payload as a JSON string (invalid UTF-8 and NUL bytes become '?').
 * Headers: Content-Type: application/json, Idempotency-Key (the instance's
 * key, or "ax-<instance_id>" when it has none, so every attempt of one
 * instance carries the same key), X-Ax-Trace-Id, X-Ax-Instance-Id,
 * X-Ax-Attempt, Connection: close (one connection per run).
 *
 * Outcome: 2xx SUCCESS; 5xx, 408 and 429 FAILED retryable (error_class
 * "http", the status in exit_code); other statuses (4xx, redirects, which
 * are not followed) FAILED not retryable; connection refused/reset, a name
 * that does not resolve, a broken response: FAILED retryable ("network");
 * no complete response within d.timeout_ms: TIMEOUT retryable ("timeout").
 * Up to executor.output.cap bytes of the response body become the output.
 *
 * libevent may call the request's callbacks synchronously (even inside
 * evhttp_make_request() or evhttp_cancel_request()), so callbacks only
 * record the result; an ev_report event, activated once, frees the
 * connection and calls run_done() from a fresh loop callback.
 *
 * Fencing (fence.c): the fence thread shuts down a dup of the request's
 * socket (handler_http_fd) at the run's deadline, whatever the loop is
 * doing: the server sees the connection end, and the loop, once it runs,
 * the request fail.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "ax/common.h"
#include "ax/log.h"
#include "executor.h"

typedef struct http_h http_h_t;

typedef struct hrun {
    struct hrun *prev, *next; /* live list */
    http_h_t *hh;
    run_t *r;
    struct evhttp_connection *conn;
    struct evhttp_request *req; /* in flight; NULL once libevent let go of it */
    struct event *timer, *ev_report;
    int finished;               /* h->res holds the result; ev_report is active */
    int stopped;                /* timed out or cancelled: ignore libevent */
    int64_t timeout_ms;
    char where[300];            /* "http://host:port/path", for messages */
    char *body;                 /* response body excerpt */
    size_t body_len, body_cap;
    handler_result_t res;
} hrun_t;

struct http_h {
    executor_t *ex;
    struct evdns_base *dns; /* NULL: libevent resolves with blocking getaddrinfo */
    hrun_t *live;
};

static void hrun_free(hrun_t *h) {
    if (h->prev)
        h->prev->next = h->next;
    else if (h->hh->live == h)
        h->hh->live = h->next;
    if (h->next)
        h->next->prev = h->prev;
    if (h->conn)
        evhttp_connection_free(h->conn); /* frees a request still queued on it */
    if (h->timer)
        event_free(h->timer);
    if (h->ev_report)
        event_free(h->ev_report);
    free(h->body);
    free(h);
}

static void set_result(hrun_t *h, ax_outcome_t outcome, const char *cls, int retryable,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void set_result(hrun_t *h, ax_outcome_t outcome, const char *cls, int retryable,
                       const char *fmt, ...) {
    h->res.outcome = outcome;
    h->res.error_class = cls;
    h->res.retryable = retryable;
    h->res.error[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(h->res.error, sizeof h->res.error, fmt, ap);
        va_end(ap);
    }
}

static void finish(hrun_t *h) {
    if (h->finished)
        return;
    h->finished = 1;
    event_del(h->timer);
    event_active(h->ev_report, EV_TIMEOUT, 1);
}

static void on_report(evutil_socket_t fd, short what, void *arg) {
    hrun_t *h = arg;
    run_t *r = h->r;
    if (h->body_len) {
        ax_utf8_sanitize(h->body, h->body_len);
        h->res.output = h->body;
        h->res.output_len = h->body_len;
    }
    h->r = NULL;
    r->hstate = NULL;
    run_done(r, &h->res);
    hrun_free(h);
}

static void keep_body(hrun_t *h, struct evhttp_request *req) {
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = in ? evbuffer_get_length(in) : 0;
    if (n && h->body_len < h->body_cap) {
        size_t take = h->body_cap - h->body_len;
        if (take > n)
            take = n;
        evbuffer_copyout(in, h->body + h->body_len, take);
        h->body_len += take;
    }
    /* libevent drains the buffer after the chunk callback; beyond the cap
     * it is read and dropped. */
}

static void on_chunk(struct evhttp_request *req, void *arg) {
    hrun_t *h = arg;
    if (!h->stopped && !h->finished)
        keep_body(h, req);
}

static void network_failure(hrun_t *h, const char *why) {
    set_result(h, AX_OUTCOME_FAILED, "network", 1, "POST %s: %s", h->where, why);
}

static void on_error(enum evhttp_request_error err, void *arg) {
    hrun_t *h = arg;
    h->req = NULL; /* libevent frees it */
    if (h->stopped || h->finished)
        return;
    switch (err) {
    case EVREQ_HTTP_TIMEOUT:
        set_result(h, AX_OUTCOME_TIMEOUT, "timeout", 1, "POST %s: no response within %lld ms",
                   h->where, (long long)h->timeout_ms);
        break;
    case EVREQ_HTTP_EOF:
        network_failure(h, "connection closed before a complete response");
        break;
    case EVREQ_HTTP_INVALID_HEADER:
        network_failure(h, "invalid response header");
        break;
    case EVREQ_HTTP_DATA_TOO_LONG:
        network_failure(h, "response headers too long");
        break;
    default:
        network_failure(h, "connection failed or reset");
        break;
    }
    finish(h);
}

static void on_response(struct evhttp_request *req, void *arg) {
    hrun_t *h = arg;
    h->req = NULL; /* libevent frees it after this callback */
    if (h->stopped || h->finished)
        return;
    int status = req ? evhttp_request_get_response_code(req) : 0;
    if (status == 0) {
        /* Connecting failed: refused, unreachable, or the name did not
         * resolve (libevent does not tell which). */
        network_failure(h, "cannot connect (connection refused, host unreachable, or name not "
                           "resolved)");
        finish(h);
        return;
    }
    keep_body(h, req);
    const char *line = evhttp_request_get_response_code_line(req);
    h->res.exit_code = status;
    h->res.exit_code_set = 1;
    if (status >= 200 && status < 300)
        set_result(h, AX_OUTCOME_SUCCESS, NULL, 0, NULL);
    else
        set_result(h, AX_OUTCOME_FAILED, "http",
                   status >= 500 || status == 408 || status == 429, "POST %s: HTTP %d %s",
                   h->where, status, line ? line : "");
    finish(h);
}

/* Stop the request (timeout or cancel) with the given result, unless the
 * result is already known. */
static void stop(hrun_t *h) {
    h->stopped = 1;
    struct evhttp_request *req = h->req;
    h->req = NULL;
    if (req)
        evhttp_cancel_request(req); /* calls on_error(CANCEL) at once, ignored */
    finish(h);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg) {
    hrun_t *h = arg;
    if (h->finished)
        return;
    set_result(h, AX_OUTCOME_TIMEOUT, "timeout", 1, "POST %s: no response within %lld ms",
               h->where, (long long)h->timeout_ms);
    stop(h);
}

static void cancel(executor_t *ex, run_t *r, const char *why) {
    hrun_t *h = r->hstate;
    if (!h || h->finished)
        return;
    set_result(h, AX_OUTCOME_FAILED, why ? why : "cancelled", 1, "POST %s: request aborted (%s)",
               h->where, why ? why : "cancelled");
    stop(h);
}

static int init(executor_t *ex) {
    if (ex->http)
        return 0;
    http_h_t *hh = calloc(1, sizeof *hh);
    if (!hh)
        return AX_ERR_NOMEM;
    hh->ex = ex;
    hh->dns = evdns_base_new(ex->svc.base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
                                               EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (!hh->dns)
        ax_warn("http handler: no asynchronous DNS (cannot read /etc/resolv.conf); host names "
                "are resolved with blocking lookups");
    ex->http = hh;
    return 0;
}

static void fini(executor_t *ex) {
    http_h_t *hh = ex->http;
    if (!hh)
        return;
    /* Runs still here are abandoned without a report (the executor is going
     * away); their requests are dropped with their connections. */
    while (hh->live) {
        if (hh->live->r)
            hh->live->r->hstate = NULL;
        hrun_free(hh->live);
    }
    if (hh->dns)
        evdns_base_free(hh->dns, 0);
    free(hh);
    ex->http = NULL;
}

static int fail_now(handler_result_t *res, const char *cls, int retryable, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_now(handler_result_t *res, const char *cls, int retryable, const char *fmt, ...) {
    va_list ap;
    res->outcome = AX_OUTCOME_FAILED;
    res->error_class = cls;
    res->retryable = retryable;
    va_start(ap, fmt);
    vsnprintf(res->error, sizeof res->error, fmt, ap);
    va_end(ap);
    return -1;
}

/* The request body; NULL when out of memory. */
static char *body_json(const ax_dispatch_t *d) {
    char *payload = malloc(d->payload_len + 1);
    if (!payload)
        return NULL;
    if (d->payload_len)
        memcpy(payload, d->payload, d->payload_len);
    payload[d->payload_len] = '\0';
    ax_utf8_sanitize(payload, d->payload_len);
    json_t *o = json_object();
    char *out = NULL;
    if (o && json_object_set_new(o, "instance_id", json_integer(d->instance_id)) == 0 &&
        json_object_set_new(o, "attempt", json_integer(d->attempt)) == 0 &&
        json_object_set_new(o, "job", d->job ? json_string(d->job) : json_null()) == 0 &&
        json_object_set_new(o, "trace_id", json_string(d->trace_id ? d->trace_id : "")) == 0 &&
        json_object_set_new(o, "idempotency_key",
                            d->idempotency_key ? json_string(d->idempotency_key)
                                               : json_null()) == 0 &&
        json_object_set_new(o, "timeout_ms", json_integer(d->timeout_ms)) == 0 &&
        json_object_set_new(o, "payload", json_stringn(payload, d->payload_len)) == 0)
        out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    free(payload);
    return out;
}

/* The POST request of h with its headers and body; on failure h is freed
 * and res filled (<0). */
static int request_new(hrun_t *h, const ax_dispatch_t *d, const char *hosthdr,
                       handler_result_t *res, struct evhttp_request **ret_req) {
    struct evhttp_request *req = evhttp_request_new(on_response, h);
    if (!req) {
        hrun_free(h);
        return fail_now(res, "http", 1, "out of memory");
    }
    evhttp_request_set_error_cb(req, on_error);
    evhttp_request_set_chunked_cb(req, on_chunk);
    char idem[64], id[32], attempt[16];
    snprintf(id, sizeof id, "%lld", (long long)d->instance_id);
    snprintf(attempt, sizeof attempt, "%d", (int)d->attempt);
    snprintf(idem, sizeof idem, "ax-%lld", (long long)d->instance_id);
    struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
    char *body = body_json(d);
    int bad = !body;
    if (!bad)
        bad = evhttp_add_header(hd, "Host", hosthdr) < 0 ||
              evhttp_add_header(hd, "Content-Type", "application/json") < 0 ||
              evhttp_add_header(hd, "User-Agent", "ax-executor/" AX_VERSION) < 0 ||
              evhttp_add_header(hd, "Connection", "close") < 0 ||
              evhttp_add_header(hd, "X-Ax-Trace-Id", d->trace_id ? d->trace_id : "") < 0 ||
              evhttp_add_header(hd, "X-Ax-Instance-Id", id) < 0 ||
              evhttp_add_header(hd, "X-Ax-Attempt", attempt) < 0 ||
              evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body)) < 0;
    int badkey = !bad && evhttp_add_header(hd, "Idempotency-Key", d->idempotency_key
                                                                      ? d->idempotency_key
                                                                      : idem) < 0;
    free(body);
    if (bad || badkey) {
        evhttp_request_free(req);
        hrun_free(h);
        if (badkey)
            return fail_now(res, "http", 0,
                            "the idempotency key cannot be sent as an HTTP header value");
        return fail_now(res, "http", 1, "out of memory");
    }
    *ret_req = req;
    return 0;
}

static int start(executor_t *ex, run_t *r, handler_result_t *res) {
    const ax_dispatch_t *d = &r->d;
    if (!ex->http && init(ex) < 0)
        return fail_now(res, "http", 1, "out of memory");
    http_h_t *hh = ex->http;
    if (d->command_len != 1 || !d->command || !d->command[0])
        return fail_now(res, "http", 0, "an http job's command must be {URL}");
    const char *url = d->command[0];
    struct evhttp_uri *uri = evhttp_uri_parse(url);
    if (!uri)
        return fail_now(res, "http", 0, "not a valid URL: '%s'", url);
    const char *scheme = evhttp_uri_get_scheme(uri), *host = evhttp_uri_get_host(uri);
    if (!scheme || strcasecmp(scheme, "http") != 0) {
        int https = scheme && strcasecmp(scheme, "https") == 0;
        evhttp_uri_free(uri);
        if (https)
            return fail_now(res, "http", 0,
                            "https is not supported by the http handler (libevent's HTTP "
                            "client has no TLS here); use an http:// URL, e.g. through a "
                            "local TLS proxy, or a command or plugin job");
        return fail_now(res, "http", 0, "the URL must start with http://: '%s'", url);
    }
    if (!host || !*host) {
        evhttp_uri_free(uri);
        return fail_now(res, "http", 0, "the URL has no host: '%s'", url);
    }
    int port = evhttp_uri_get_port(uri);
    if (port < 0)
        port = 80;
    const char *path = evhttp_uri_get_path(uri), *query = evhttp_uri_get_query(uri);
    if (!path || !*path)
        path = "/";
    char target[4096], hosthdr[300];
    int tn = snprintf(target, sizeof target, "%s%s%s", path, query ? "?" : "", query ? query : "");
    /* evhttp_uri keeps an IPv6 literal without its brackets */
    int v6 = strchr(host, ':') != NULL;
    snprintf(hosthdr, sizeof hosthdr, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
    if (tn < 0 || (size_t)tn >= sizeof target) {
        evhttp_uri_free(uri);
        return fail_now(res, "http", 0, "the URL is too long");
    }

    hrun_t *h = calloc(1, sizeof *h);
    if (!h) {
        evhttp_uri_free(uri);
        return fail_now(res, "http", 1, "out of memory");
    }
    h->hh = hh;
    h->next = hh->live; /* linked first: hrun_free() unlinks */
    if (hh->live)
        hh->live->prev = h;
    hh->live = h;
    snprintf(h->where, sizeof h->where, "http://%.200s%.80s", hosthdr, path);
    h->timeout_ms = d->timeout_ms > 0 ? d->timeout_ms : ex->svc.conf.executor_default_timeout_ms;
    h->body_cap = (size_t)ex->svc.conf.executor_output_cap;
    h->body = malloc(h->body_cap + 1);
    h->timer = evtimer_new(ex->svc.base, on_timeout, h);
    h->ev_report = event_new(ex->svc.base, -1, 0, on_report, h);
    h->conn = evhttp_connection_base_new(ex->svc.base, hh->dns, host, (unsigned short)port);
    evhttp_uri_free(uri);
    if (!h->body || !h->timer || !h->ev_report || !h->conn) {
        hrun_free(h);
        return fail_now(res, "http", 1, "out of memory");
    }
    /* Our timer ends the run; the connection's own timeouts only back it up. */
    struct timeval ctv = AX_TV_MS(h->timeout_ms + 1000);
    evhttp_connection_set_timeout_tv(h->conn, &ctv);
    evhttp_connection_set_retries(h->conn, 0);
    evhttp_connection_set_max_headers_size(h->conn, 64 * 1024);

    struct evhttp_request *req = NULL;
    int rc = request_new(h, d, hosthdr, res, &req);
    if (rc < 0)
        return rc;

    h->r = r;
    r->hstate = h;
    h->req = req;
    struct timeval tv = AX_TV_MS(h->timeout_ms);
    evtimer_add(h->timer, &tv);
    if (evhttp_make_request(h->conn, req, EVHTTP_REQ_POST, target) != 0) {
        /* libevent has freed or dropped the request (it cannot fail later);
         * a result recorded meanwhile is reported as usual. */
        h->req = NULL;
        if (!h->finished) {
            char where[sizeof h->where];
            memcpy(where, h->where, sizeof where);
            h->r = NULL;
            r->hstate = NULL;
            hrun_free(h);
            return fail_now(res, "network", 1, "POST %s: cannot start the request", where);
        }
    }
    return 0;
}

int handler_http_fd(const run_t *r) {
    const hrun_t *h = r->hstate;
    if (!h || !h->conn || h->finished || h->stopped)
        return -1; /* once finished, libevent may have closed it */
    struct bufferevent *bev = evhttp_connection_get_bufferevent(h->conn);
    return bev ? (int)bufferevent_getfd(bev) : -1;
}

const handler_ops_t handler_http = {"http", init, fini, start, cancel, NULL};
