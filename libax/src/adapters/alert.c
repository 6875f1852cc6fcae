/*
 * alert.c — the alert webhook sender (see alert.h and docs/ALERTS.md).
 *
 * One delivery per alert, alive while it is being sent or waits for its
 * next try; one connection per try (Connection: close). libevent may call
 * a request's callbacks synchronously (even inside evhttp_make_request()),
 * so those callbacks only record the result and activate ev_done; the
 * connection is freed and the next step decided from that fresh loop
 * callback. One timer per delivery serves both as the try's deadline and
 * as the wait before the next try.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "ax/alert.h"
#include "ax/common.h"
#include "ax/hmac.h"
#include "ax/log.h"
#include "ax/pg.h"
#include "ax/store_counter.h"

typedef struct delivery delivery_t;

typedef struct alert_sender {
    ax_svc_t *svc;
    struct evdns_base *dns; /* NULL: libevent resolves with blocking getaddrinfo */
    char *host;
    int port;
    char *target;        /* path and query */
    char hosthdr[300];   /* Host: header */
    char where[320];     /* http://host:port, for logs: no path (it may hold a token) */
    char *secret;        /* NULL: unsigned */
    size_t secret_len;
    int64_t timeout_ms;
    delivery_t *live;
    size_t n_live;
    int64_t dropped;
} alert_sender_t;

static alert_sender_t *sender; /* NULL: no webhook */

struct delivery {
    delivery_t *prev, *next;
    alert_sender_t *s;
    char id[33];
    char kind[32];
    char *body;
    size_t body_len;
    int tries;          /* tries started */
    int sending;        /* a try is under way (else waiting for the next) */
    int finished;       /* the try's result is recorded; ev_done is active */
    int status;         /* HTTP status of the try; 0 = none */
    char why[160];      /* the try's failure */
    struct evhttp_connection *conn;
    struct event *timer, *ev_done;
};

static void count(alert_sender_t *s, const char *name) {
    ax_store_counter_add(s->svc->pg, name, 1, NULL, 0);
}

static void delivery_free(delivery_t *d) {
    alert_sender_t *s = d->s;
    if (d->prev)
        d->prev->next = d->next;
    else if (s->live == d)
        s->live = d->next;
    if (d->next)
        d->next->prev = d->prev;
    s->n_live--;
    if (d->conn)
        evhttp_connection_free(d->conn); /* frees a request still queued on it */
    if (d->timer)
        event_free(d->timer);
    if (d->ev_done)
        event_free(d->ev_done);
    free(d->body);
    free(d);
}

/* Record the try's result (first one wins) and hand over to on_done. */
static void finish(delivery_t *d, int status, const char *why) {
    if (d->finished || !d->sending)
        return;
    d->finished = 1;
    d->status = status;
    snprintf(d->why, sizeof d->why, "%s", why);
    event_del(d->timer);
    event_active(d->ev_done, EV_TIMEOUT, 1);
}

static void on_error(enum evhttp_request_error err, void *arg) {
    delivery_t *d = arg;
    switch (err) {
    case EVREQ_HTTP_TIMEOUT:
        finish(d, 0, "no response in time");
        break;
    case EVREQ_HTTP_EOF:
        finish(d, 0, "connection closed before a complete response");
        break;
    case EVREQ_HTTP_INVALID_HEADER:
        finish(d, 0, "invalid response header");
        break;
    default:
        finish(d, 0, "connection failed or reset");
        break;
    }
}

static void on_response(struct evhttp_request *req, void *arg) {
    delivery_t *d = arg;
    int status = req ? evhttp_request_get_response_code(req) : 0;
    if (status == 0) {
        finish(d, 0, "cannot connect (connection refused, host unreachable, or name not "
                     "resolved)");
        return;
    }
    char why[64];
    snprintf(why, sizeof why, "HTTP %d", status);
    finish(d, status, why);
}

static void start_try(delivery_t *d);

static void on_done(evutil_socket_t fd, short what, void *arg) {
    delivery_t *d = arg;
    alert_sender_t *s = d->s;
    if (d->conn) {
        evhttp_connection_free(d->conn);
        d->conn = NULL;
    }
    d->sending = 0;
    d->finished = 0;
    if (d->status >= 200 && d->status < 300) {
        ax_debug("alert %s (%s) delivered to %s (try %d)", d->id, d->kind, s->where, d->tries);
        count(s, "alerts.webhook.delivered");
        delivery_free(d);
        return;
    }
    if (d->tries > ALERT_RETRIES) {
        ax_warn("alert %s (%s) dropped: webhook %s failed %d times, last: %s", d->id, d->kind,
                s->where, d->tries, d->why);
        count(s, "alerts.webhook.failed");
        delivery_free(d);
        return;
    }
    int64_t wait_ms = ax_backoff_ms((unsigned)(d->tries - 1), 1000, 60000);
    ax_info("alert %s (%s): webhook %s try %d failed (%s); next try in %lld ms", d->id, d->kind,
            s->where, d->tries, d->why, (long long)wait_ms);
    struct timeval tv = AX_TV_MS(wait_ms);
    evtimer_add(d->timer, &tv);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    delivery_t *d = arg;
    if (d->sending) {
        char why[64];
        snprintf(why, sizeof why, "no response within %lld ms", (long long)d->s->timeout_ms);
        finish(d, 0, why); /* on_done frees the connection and its request */
    } else {
        start_try(d);
    }
}

/* Start one try; its result always reaches on_done. */
static void start_try(delivery_t *d) {
    alert_sender_t *s = d->s;
    d->tries++;
    d->sending = 1;
    d->finished = 0;
    d->status = 0;
    struct timeval tv = AX_TV_MS(s->timeout_ms);
    evtimer_add(d->timer, &tv);

    d->conn = evhttp_connection_base_new(s->svc->base, s->dns, s->host, (unsigned short)s->port);
    if (!d->conn) {
        finish(d, 0, "cannot create a connection");
        return;
    }
    /* Our timer ends the try; the connection's own timeout only backs it up. */
    struct timeval ctv = AX_TV_MS(s->timeout_ms + 1000);
    evhttp_connection_set_timeout_tv(d->conn, &ctv);
    evhttp_connection_set_retries(d->conn, 0);
    evhttp_connection_set_max_headers_size(d->conn, 64 * 1024);
    evhttp_connection_set_max_body_size(d->conn, 1 << 20);

    struct evhttp_request *req = evhttp_request_new(on_response, d);
    if (!req) {
        finish(d, 0, "out of memory");
        return;
    }
    evhttp_request_set_error_cb(req, on_error);
    /* Signed per try, with the try's time: a receiver may reject old
     * timestamps, and a retry is not a replay. */
    char ts[24], sig[8 + AX_SHA256_HEX_LEN] = "";
    snprintf(ts, sizeof ts, "%lld", (long long)(ax_now_ms() / 1000));
    if (s->secret) {
        unsigned char mac[AX_SHA256_LEN];
        ax_hmac_sha256_t h;
        ax_hmac_sha256_init(&h, s->secret, s->secret_len);
        ax_hmac_sha256_update(&h, ts, strlen(ts));
        ax_hmac_sha256_update(&h, ".", 1);
        ax_hmac_sha256_update(&h, d->body, d->body_len);
        ax_hmac_sha256_final(&h, mac);
        memcpy(sig, "sha256=", 7);
        ax_hex_encode(mac, sizeof mac, sig + 7);
    }
    struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
    int bad = evhttp_add_header(hd, "Host", s->hosthdr) < 0 ||
              evhttp_add_header(hd, "Content-Type", "application/json") < 0 ||
              evhttp_add_header(hd, "User-Agent", "ax-callback/" AX_VERSION) < 0 ||
              evhttp_add_header(hd, "Connection", "close") < 0 ||
              evhttp_add_header(hd, "X-Ax-Alert-Id", d->id) < 0 ||
              evhttp_add_header(hd, "X-Ax-Timestamp", ts) < 0 ||
              (s->secret && evhttp_add_header(hd, "X-Ax-Signature", sig) < 0) ||
              evbuffer_add(evhttp_request_get_output_buffer(req), d->body, d->body_len) < 0;
    if (bad) {
        evhttp_request_free(req);
        finish(d, 0, "out of memory");
        return;
    }
    if (evhttp_make_request(d->conn, req, EVHTTP_REQ_POST, s->target) != 0)
        finish(d, 0, "cannot start the request"); /* libevent freed or dropped req */
}

static json_t *jstr(const char *v) {
    char *c = strdup(v);
    if (!c)
        return NULL;
    ax_utf8_sanitize(c, strlen(c));
    json_t *j = json_string(c);
    free(c);
    return j;
}

void alert_send(const char *kind, const char *job, const char *text) {
    alert_sender_t *s = sender;
    if (!s)
        return;
    if (s->n_live >= ALERT_MAX_IN_FLIGHT) {
        s->dropped++;
        ax_warn("alert (%s) not sent to webhook %s: %d alerts already in flight (%lld dropped "
                "so far)",
                kind, s->where, ALERT_MAX_IN_FLIGHT, (long long)s->dropped);
        count(s, "alerts.webhook.dropped");
        return;
    }
    delivery_t *d = calloc(1, sizeof *d);
    if (!d) {
        ax_warn("alert (%s) not sent to webhook: out of memory", kind);
        return;
    }
    d->s = s;
    d->next = s->live; /* linked first: delivery_free() unlinks */
    if (s->live)
        s->live->prev = d;
    s->live = d;
    s->n_live++;
    ax_random_hex(d->id, 16);
    snprintf(d->kind, sizeof d->kind, "%s", kind);
    json_t *o = json_object();
    if (o && json_object_set_new(o, "kind", jstr(kind)) == 0 &&
        json_object_set_new(o, "job", job ? jstr(job) : json_null()) == 0 &&
        json_object_set_new(o, "text", jstr(text ? text : "")) == 0 &&
        json_object_set_new(o, "deployment", jstr(s->svc->conf.topic_prefix)) == 0 &&
        json_object_set_new(o, "worker", jstr(s->svc->worker_id)) == 0 &&
        json_object_set_new(o, "time", json_integer(ax_now_ms())) == 0 &&
        json_object_set_new(o, "id", json_string(d->id)) == 0)
        d->body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    d->body_len = d->body ? strlen(d->body) : 0;
    d->timer = evtimer_new(s->svc->base, on_timer, d);
    d->ev_done = event_new(s->svc->base, -1, 0, on_done, d);
    if (!d->body || !d->timer || !d->ev_done) {
        ax_warn("alert (%s) not sent to webhook: out of memory", kind);
        delivery_free(d);
        return;
    }
    /* The first try starts from a fresh loop callback: the caller may keep
     * the loop busy a while (a batch's statements), which must not count
     * against the try's timeout. */
    event_active(d->timer, EV_TIMEOUT, 1);
}

static void sender_free(alert_sender_t *s);

/* Parse and check alert.webhook.url; *out is the parsed URL (caller frees). */
static int parse_url(const char *url, struct evhttp_uri **out, char *errbuf, size_t errlen) {
    struct evhttp_uri *uri = evhttp_uri_parse(url);
    if (!uri)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "alert.webhook.url: not a valid URL");
    const char *scheme = evhttp_uri_get_scheme(uri), *host = evhttp_uri_get_host(uri);
    int rc = 0;
    if (scheme && strcasecmp(scheme, "https") == 0)
        rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                       "alert.webhook.url: https is not supported (libevent's HTTP client has "
                       "no TLS here); use an http:// URL, e.g. a local TLS-terminating proxy");
    else if (!scheme || strcasecmp(scheme, "http") != 0)
        rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                       "alert.webhook.url: the URL must start with http://");
    else if (!host || !*host)
        rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID, "alert.webhook.url: the URL has no host");
    else if (evhttp_uri_get_userinfo(uri))
        rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                       "alert.webhook.url: user:password in the URL is not supported (sign "
                       "with alert.webhook.secret instead)");
    if (rc < 0) {
        evhttp_uri_free(uri);
        return rc;
    }
    *out = uri;
    return 0;
}

int alert_check(const ax_conf_t *c, char *errbuf, size_t errlen) {
    struct evhttp_uri *uri = NULL;
    if (!c->alert_webhook_url || !*c->alert_webhook_url)
        return 0;
    int rc = parse_url(c->alert_webhook_url, &uri, errbuf, errlen);
    if (uri)
        evhttp_uri_free(uri);
    return rc;
}

int alert_init(ax_svc_t *svc, char *errbuf, size_t errlen) {
    const char *url = svc->conf.alert_webhook_url;
    alert_fini();
    if (!url || !*url)
        return 0;
    struct evhttp_uri *uri = NULL;
    int rc = parse_url(url, &uri, errbuf, errlen);
    if (rc < 0)
        return rc;
    const char *host = evhttp_uri_get_host(uri);
    alert_sender_t *s = calloc(1, sizeof *s);
    if (!s) {
        evhttp_uri_free(uri);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
    }
    s->svc = svc;
    s->port = evhttp_uri_get_port(uri);
    if (s->port < 0)
        s->port = 80;
    const char *path = evhttp_uri_get_path(uri), *query = evhttp_uri_get_query(uri);
    if (!path || !*path)
        path = "/";
    s->host = strdup(host);
    size_t tl = strlen(path) + (query ? strlen(query) + 1 : 0) + 1;
    s->target = malloc(tl);
    if (s->target)
        snprintf(s->target, tl, "%s%s%s", path, query ? "?" : "", query ? query : "");
    /* evhttp_uri keeps an IPv6 literal without its brackets */
    int v6 = strchr(host, ':') != NULL;
    snprintf(s->hosthdr, sizeof s->hosthdr, "%s%.256s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "",
             s->port);
    snprintf(s->where, sizeof s->where, "http://%s", s->hosthdr);
    evhttp_uri_free(uri);
    const char *secret = svc->conf.alert_webhook_secret;
    if (secret && *secret) {
        s->secret = strdup(secret);
        s->secret_len = strlen(secret);
    }
    s->timeout_ms = svc->conf.alert_webhook_timeout_ms;
    if (!s->host || !s->target || (secret && *secret && !s->secret)) {
        sender_free(s);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
    }
    s->dns = evdns_base_new(svc->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
                                           EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (!s->dns)
        ax_warn("alert webhook: no asynchronous DNS (cannot read /etc/resolv.conf); a host "
                "name is resolved with blocking lookups");
    ax_info("alert webhook: %s (%s, timeout %lld ms)", s->where,
            s->secret ? "signed" : "UNSIGNED: set alert.webhook.secret", (long long)s->timeout_ms);
    sender = s;
    return 0;
}

void alert_fini(void) {
    sender_free(sender);
    sender = NULL;
}

static void sender_free(alert_sender_t *s) {
    if (!s)
        return;
    if (s->n_live)
        ax_warn("%zu alert(s) not delivered to webhook %s at shutdown (dropped)", s->n_live,
                s->where);
    while (s->live)
        delivery_free(s->live);
    if (s->dns)
        evdns_base_free(s->dns, 0);
    free(s->host);
    free(s->target);
    if (s->secret) {
        volatile char *p = s->secret;
        for (size_t i = 0; i < s->secret_len; i++)
            p[i] = 0;
        free(s->secret);
    }
    free(s);
}

void alert_raise(struct ax_pg *pg, const char *kind, const char *job, const char *text) {
    char name[96];
    ax_warn("ALERT %s%s%s: %s", kind, job ? " job " : "", job ? job : "", text);
    snprintf(name, sizeof name, "alerts.%s", kind);
    if (pg)
        ax_store_counter_add(pg, name, 1, NULL, 0);
    alert_send(kind, job, text); /* asynchronous, best effort; no-op without a URL */
}
