/*
 * metrics.c — what ax-executor exports on metrics.listen (docs/METRICS.md):
 * fire-to-start and handler duration histograms by handler kind, attempts
 * by outcome, claims by verdict, runs started, and per pool the slots, the
 * runs holding them and those waiting (set once a second from the loop).
 * Pools are labelled by the names they had at start (executor.pools; a
 * pool added by SIGHUP is not exported until a restart). Nothing here when
 * metrics are off (ex->metrics stays NULL).
 */
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/metrics.h"
#include "executor.h"

struct xmetrics {
    ax_metric_t *fire_start, *handler, *attempts, *claims, *started, *slots, *busy, *queued;
    struct event *ev;
};

static const char *const kinds[] = {"command", "http", "plugin", NULL};
static const char *const verdicts[] = {"claimed", "no_slot", "not_claimable", "retry", NULL};
static const char *const outcomes[] = {"SUCCESS", "FAILED", "TIMEOUT", "CANCELLED", NULL};

static void on_metrics(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    struct xmetrics *m = ex->metrics;
    for (size_t i = 0; i < ex->npools; i++) {
        int k = ax_metric_index(m->slots, ex->pools[i].name);
        if (k < 0)
            continue;
        ax_metric_set(m->slots, (size_t)k, (double)ex->pools[i].core.slots);
        ax_metric_set(m->busy, (size_t)k, (double)ex->pools[i].core.running);
        ax_metric_set(m->queued, (size_t)k, (double)ex->pools[i].core.waiting);
    }
}

static void xm_register(struct xmetrics *m, ax_metrics_t *reg, const char *const *pools) {
    m->fire_start = ax_metrics_histogram(reg, "ax_executor_fire_to_start_seconds",
                                         "From an instance's due time to its handler's start, "
                                         "by handler kind.",
                                         "kind", kinds, ax_metrics_latency_buckets,
                                         ax_metrics_latency_buckets_n);
    m->handler = ax_metrics_histogram(reg, "ax_executor_handler_seconds",
                                      "Handler run time, from start to result, by handler kind.",
                                      "kind", kinds, ax_metrics_latency_buckets,
                                      ax_metrics_latency_buckets_n);
    m->attempts = ax_metrics_counter(reg, "ax_executor_attempts_total",
                                     "Attempts run and reported, by outcome.", "outcome",
                                     outcomes);
    m->claims = ax_metrics_counter(reg, "ax_executor_claims_total",
                                   "Claims of dispatched instances (SCHEDULED to LOCKED), by "
                                   "verdict.",
                                   "result", verdicts);
    m->started = ax_metrics_counter(reg, "ax_executor_runs_started_total",
                                    "Runs started (LOCKED to RUNNING), by handler kind.", "kind",
                                    kinds);
    m->slots = ax_metrics_gauge(reg, "ax_executor_pool_slots", "Slots of a pool.", "pool", pools);
    m->busy = ax_metrics_gauge(reg, "ax_executor_pool_slots_busy",
                               "Runs holding a slot of a pool.", "pool", pools);
    m->queued = ax_metrics_gauge(reg, "ax_executor_pool_queued",
                                 "Runs admitted to a pool and waiting for a slot.", "pool",
                                 pools);
}

void xm_init(executor_t *ex) {
    ax_metrics_t *reg = ex->svc.metrics.reg;
    if (!reg)
        return;
    struct xmetrics *m = calloc(1, sizeof *m);
    const char **pools = calloc(ex->npools + 1, sizeof *pools);
    if (!m || !pools) {
        free(m);
        free(pools);
        return;
    }
    for (size_t i = 0; i < ex->npools; i++)
        pools[i] = ex->pools[i].name;
    xm_register(m, reg, ex->npools ? pools : NULL);
    free(pools);
    m->ev = ax_svc_every(&ex->svc, 1000, on_metrics, ex);
    ex->metrics = m;
}

void xm_fini(executor_t *ex) {
    if (!ex->metrics)
        return;
    if (ex->metrics->ev)
        event_free(ex->metrics->ev);
    free(ex->metrics);
    ex->metrics = NULL;
}

static int kind_of(const struct xmetrics *m, const run_t *r) {
    return r->ops ? ax_metric_index(m->handler, r->ops->kind) : -1;
}

void xm_claim(executor_t *ex, int verdict) {
    struct xmetrics *m = ex->metrics;
    if (m && verdict >= AX_CLAIM_CLAIMED && verdict <= AX_CLAIM_RETRY)
        ax_metric_inc(m->claims, (size_t)(verdict - AX_CLAIM_CLAIMED));
}

void xm_started(executor_t *ex, const run_t *r) {
    struct xmetrics *m = ex->metrics;
    int k;
    if (!m || (k = kind_of(m, r)) < 0)
        return;
    ax_metric_inc(m->started, (size_t)k);
    if (r->d.due_at_ms > 0)
        ax_metric_observe(m->fire_start, (size_t)k,
                          r->started_at_ms > r->d.due_at_ms
                              ? (double)(r->started_at_ms - r->d.due_at_ms) / 1e3
                              : 0);
}

void xm_done(executor_t *ex, const run_t *r, int outcome) {
    struct xmetrics *m = ex->metrics;
    if (!m)
        return;
    if (outcome >= 0 && outcome < 4)
        ax_metric_inc(m->attempts, (size_t)outcome);
    int k = kind_of(m, r);
    if (k >= 0 && r->state == RUN_RUNNING)
        ax_metric_observe(m->handler, (size_t)k, (double)(ax_mono_ms() - r->started_mono) / 1e3);
}
