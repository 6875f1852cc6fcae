/*
 * metrics.c — what ax-api exports on metrics.listen (docs/METRICS.md):
 * requests by route and status class, their duration by route, auth
 * failures by reason, requests refused by the rate limit. The route label
 * is the route table's pattern (an id is its star, never the id), or one
 * of a few fixed names for what is not under it, never the raw path: its
 * values are fixed when the process starts. Nothing here when metrics are off
 * (api->metrics stays NULL).
 *
 * ax_api_requests_total has two labels (route, code), which the registry's
 * families do not (one label each): its cells are relaxed atomics here,
 * rendered by a collector on the metrics thread.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "ax/metrics.h"

/* Not under the route table: fixed names. */
static const char *const fixed[] = {"/healthz", "/readyz", "/api/v1/openapi.json", "/console",
                                    "unmatched", NULL};
static const char *const classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
static const char *const reasons[] = {"missing", "invalid", "scope", NULL};

struct api_metrics {
    const char **routes; /* NULL-terminated: fixed, then "/api/v1/" + each pattern */
    char **owned;
    size_t nroutes, nowned;
    uint64_t *counts;    /* nroutes x 5 classes */
    ax_metric_t *duration, *auth, *rate;
};

static void collect(ax_mwriter_t *w, void *arg) {
    api_metrics_t *m = arg;
    ax_mw_family(w, "ax_api_requests_total", AX_METRIC_COUNTER,
                 "Requests answered, by route (the route table's pattern) and status class.");
    for (size_t r = 0; r < m->nroutes; r++)
        for (size_t c = 0; c < 5; c++) {
            uint64_t v = __atomic_load_n(&m->counts[r * 5 + c], __ATOMIC_RELAXED);
            if (!v && c != 1)
                continue; /* 2xx always; other classes once seen */
            const char *labels[] = {"route", m->routes[r], "code", classes[c], NULL};
            ax_mw_sample(w, "ax_api_requests_total", labels, (double)v);
        }
}

static void metrics_free(void *arg) {
    api_metrics_t *m = arg;
    for (size_t i = 0; i < m->nowned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->routes);
    free(m->counts);
    free(m);
}

/* The route labels: the fixed ones, then each distinct pattern. */
static int build_routes(api_metrics_t *m) {
    size_t np = 0;
    while (api_route_pattern(np))
        np++;
    size_t nf = sizeof fixed / sizeof fixed[0] - 1;
    m->routes = calloc(nf + np + 1, sizeof *m->routes);
    m->owned = calloc(np + 1, sizeof *m->owned);
    if (!m->routes || !m->owned)
        return -1;
    for (size_t i = 0; i < nf; i++)
        m->routes[m->nroutes++] = fixed[i];
    for (size_t i = 0; i < np; i++) {
        char buf[128];
        snprintf(buf, sizeof buf, "/api/v1/%s", api_route_pattern(i));
        size_t k = 0;
        while (k < m->nroutes && strcmp(m->routes[k], buf) != 0)
            k++;
        if (k < m->nroutes)
            continue;
        if (!(m->owned[m->nowned] = strdup(buf)))
            return -1;
        m->routes[m->nroutes++] = m->owned[m->nowned++];
    }
    return 0;
}

void api_metrics_init(api_t *a) {
    ax_metrics_t *reg = a->svc.metrics.reg;
    api_metrics_t *m = reg ? calloc(1, sizeof *m) : NULL;
    if (!m)
        return;
    if (build_routes(m) < 0 || !(m->counts = calloc(m->nroutes * 5, sizeof *m->counts))) {
        metrics_free(m);
        return;
    }
    m->duration = ax_metrics_histogram(reg, "ax_api_request_duration_seconds",
                                       "Time from a request's arrival to its reply, by route.",
                                       "route", m->routes, ax_metrics_latency_buckets,
                                       ax_metrics_latency_buckets_n);
    m->auth = ax_metrics_counter(reg, "ax_api_auth_failures_total",
                                 "Requests refused by authentication or scope: no bearer token "
                                 "(missing), an unknown one (invalid), a read token on a "
                                 "mutation (scope).",
                                 "reason", reasons);
    m->rate = ax_metrics_counter(reg, "ax_api_rate_limited_total",
                                 "Requests refused (429) by the per-token rate limit.", NULL, NULL);
    /* the collector owns m from here (freed with the registry) */
    if (ax_metrics_collector(reg, collect, m, metrics_free) < 0)
        return;
    a->metrics = m;
}

int64_t api_clock_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The route label's index of rq. */
static size_t route_ix(const api_metrics_t *m, const req_t *rq) {
    const char *want = NULL;
    char buf[128];
    if (rq->route) {
        snprintf(buf, sizeof buf, "/api/v1/%s", rq->route);
        want = buf;
    } else if (rq->path && (strcmp(rq->path, "/healthz") == 0 || strcmp(rq->path, "/readyz") == 0 ||
                            strcmp(rq->path, "/api/v1/openapi.json") == 0)) {
        want = rq->path;
    } else if (rq->path && (strcmp(rq->path, "/") == 0 || strncmp(rq->path, "/console", 8) == 0 ||
                            strncmp(rq->path, "/javascript/", 12) == 0)) {
        want = "/console";
    }
    for (size_t i = 0; want && i < m->nroutes; i++)
        if (strcmp(m->routes[i], want) == 0)
            return i;
    return 4; /* unmatched */
}

void api_metrics_reply(req_t *rq, int status) {
    api_metrics_t *m = rq->api->metrics;
    if (!m)
        return;
    size_t r = route_ix(m, rq);
    int c = status / 100 - 1;
    if (c < 0 || c > 4)
        c = 4;
    __atomic_fetch_add(&m->counts[r * 5 + (size_t)c], 1, __ATOMIC_RELAXED);
    ax_metric_observe(m->duration, r, (double)(api_clock_us() - rq->start_us) / 1e6);
}

void api_metrics_auth_failure(api_t *a, const char *reason) {
    if (a->metrics)
        ax_metric_inc(a->metrics->auth, (size_t)ax_metric_index(a->metrics->auth, reason));
}

void api_metrics_rate_limited(api_t *a) {
    if (a->metrics)
        ax_metric_inc(a->metrics->rate, 0);
}
