/*
 * ax-api — the REST API and the web console's server (api.h tells what
 * and how; the files are its parts). Here: the command line, the token
 * table, listening (TLS when configured), SIGHUP, and the wiring.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

#include "api.h"
#include "ax/log.h"

static const char usage[] =
    "Usage: ax-api [--config FILE] [--set KEY=VALUE]...\n\n"
    "Serves the REST API under /api/v1 (docs/API.md), /healthz, /readyz and the web\n"
    "console on api.listen; bearer tokens from api.tokens (docs/SECURITY.md). SIGHUP\n"
    "reloads api.tokens and the rate limits; SIGTERM stops.\n\n";

static const char *const reloadable_keys[] = {"api.tokens", "api.rate.limit", "api.rate.burst",
                                              "api.body.max", NULL};

static int reload_check(ax_svc_t *svc, ax_conf_t *n, char *err, size_t len) {
    ax_api_tokens_t t;
    int rc = ax_api_tokens_parse(n->api_tokens, &t, err, len);
    ax_api_tokens_free(&t);
    return rc;
}

static void on_reload(ax_svc_t *svc, const ax_conf_t *old) {
    api_t *a = (api_t *)svc;
    char err[512];
    ax_api_tokens_t t;
    if (ax_api_tokens_parse(svc->conf.api_tokens, &t, err, sizeof err) < 0) {
        ax_error("SIGHUP: %s; the tokens stay", err);
        return;
    }
    ax_api_tokens_free(&a->tokens);
    a->tokens = t;
    evhttp_set_max_body_size(a->http, (ev_ssize_t)svc->conf.api_body_max * 2 + 65536);
    ax_info("SIGHUP: %zu token(s)", t.n);
}

/* HOST:PORT of api.listen; 0, or -1 (said why in err). */
static int listen_addr(const char *v, char *host, size_t hlen, int *port, char *err, size_t len) {
    const char *colon = v ? strrchr(v, ':') : NULL;
    char *end;
    long p = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon == v || !colon[1] || *end || p < 0 || p > 65535 ||
        (size_t)(colon - v) >= hlen) {
        snprintf(err, len, "api.listen: '%s' is not HOST:PORT", v ? v : "");
        return -1;
    }
    snprintf(host, hlen, "%.*s", (int)(colon - v), v);
    *port = (int)p;
    return 0;
}

/* The configuration checks before listening: exit 2 naming the key. */
static int api_setup(api_t *a, char *err, size_t len) {
    ax_conf_t *c = &a->svc.conf;
    char host[256];
    int port;
    if (ax_api_tokens_parse(c->api_tokens, &a->tokens, err, len) < 0 ||
        listen_addr(c->api_listen, host, sizeof host, &port, err, len) < 0)
        return 2;
    int cert = c->api_tls_cert && *c->api_tls_cert, key = c->api_tls_key && *c->api_tls_key;
    if (cert != key) {
        snprintf(err, len, "%s: give both api.tls.cert and api.tls.key, or neither",
                 cert ? "api.tls.key" : "api.tls.cert");
        return 2;
    }
    if (cert && !(a->tls = ax_tls_server_new(c->api_tls_cert, c->api_tls_key, err, len)))
        return 2;
    if (!(a->http = evhttp_new(a->svc.base))) {
        snprintf(err, len, "out of memory");
        return 1;
    }
    if (a->tls)
        ax_tls_serve(a->tls, a->http);
    evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_PATCH | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_HEAD | EVHTTP_REQ_OPTIONS);
    evhttp_set_max_headers_size(a->http, 16384);
    /* bodies up to twice api.body.max are read, so an oversized one gets
     * the JSON 413; beyond that libevent refuses it (413) before reading */
    evhttp_set_max_body_size(a->http, (ev_ssize_t)c->api_body_max * 2 + 65536);
    evhttp_set_timeout(a->http, 30);
    evhttp_set_gencb(a->http, api_on_request, a);
    if (!evhttp_bind_socket_with_handle(a->http, host, (ev_uint16_t)port)) {
        snprintf(err, len, "api.listen: cannot listen on %s", c->api_listen);
        return 1;
    }
    api_metrics_init(a);
    if (!(a->dlqw = api_dlqw_start(a, err, len)) || !(a->pool = api_pool_start(a, err, len)))
        return 1;
    if (a->tokens.n == 0)
        ax_warn("api.tokens is empty: every /api/v1 request is refused (401)");
    ax_info("listening on %s://%s (%zu token(s), %lld handler thread(s))",
            a->tls ? "https" : "http", c->api_listen, a->tokens.n, (long long)c->api_threads);
    return 0;
}

int main(int argc, char **argv) {
    /* the service's state: main's, for the life of the process */
    static api_t api;
    if (ax_svc_init(&api.svc, "ax-api", &argc, argv, usage, "api") < 0)
        return ax_svc_exit_status(&api.svc);
    ax_svc_t *svc = &api.svc;
    svc->reloadable = reloadable_keys;
    svc->reload_check = reload_check;
    svc->on_reload = on_reload;
    char err[1024];
    int rc = api_setup(&api, err, sizeof err);
    if (rc) {
        fprintf(stderr, "ax-api: %s%s\n", rc == 2 ? "configuration error: " : "", err);
        /* never exit with live librdkafka threads (they race the exit) */
        api_pool_stop(api.pool);
        api_dlqw_stop(api.dlqw);
        if (api.http)
            evhttp_free(api.http);
        ax_tls_destroy(api.tls);
        ax_api_tokens_free(&api.tokens);
        ax_svc_destroy(svc);
        return rc;
    }
    ax_svc_run(svc);
    ax_info("stopped: %lld requests served, %lld mutations", (long long)api.requests,
            (long long)api.mutations);
    /* replays in flight reply (their requests still live), then the
     * reader's thread stops, then the server goes */
    rd_kafka_flush(svc->producer, 10000);
    api_pool_stop(api.pool);
    api_dlqw_stop(api.dlqw);
    evhttp_free(api.http);
    ax_tls_destroy(api.tls);
    ax_api_tokens_free(&api.tokens);
    ax_svc_destroy(svc);
    return 0;
}
