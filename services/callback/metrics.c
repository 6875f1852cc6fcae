/*
 * metrics.c — what ax-callback exports on metrics.listen (docs/METRICS.md):
 * instances that ended for good by outcome (counted once their
 * transaction committed), retries scheduled, stale results ignored,
 * results published, the retry budget and how much of it is in use (as
 * the last retry decision read it). Dead letters are counted by the
 * service scaffolding (ax_dlq_messages_total). Nothing here when metrics
 * are off (cb->metrics stays NULL).
 */
#include <stdlib.h>

#include "ax/metrics.h"
#include "callback.h"

struct cmetrics {
    ax_metric_t *outcomes, *retries, *stale, *published, *source, *budget, *budget_used;
    int64_t last_retried, last_stale, last_published, last_carried, last_read;
    struct event *ev;
};

static const char *const outcomes[] = {"SUCCESS", "FAILED", "TIMEOUT", "CANCELLED", NULL};
static const char *const sources[] = {"carried", "outbox", NULL};

static uint64_t grown(int64_t now, int64_t *last) {
    uint64_t d = now > *last ? (uint64_t)(now - *last) : 0;
    *last = now;
    return d;
}

static void on_metrics(evutil_socket_t fd, short what, void *arg) {
    callback_t *cb = arg;
    struct cmetrics *m = cb->metrics;
    ax_metric_add(m->retries, 0, grown(cb->retried, &m->last_retried));
    ax_metric_add(m->stale, 0, grown(cb->stale, &m->last_stale));
    ax_metric_add(m->published, 0, grown(atomic_load(&cb->published), &m->last_published));
    ax_metric_add(m->source, 0, grown(atomic_load(&cb->pub.carried), &m->last_carried));
    ax_metric_add(m->source, 1, grown(atomic_load(&cb->pub.read), &m->last_read));
    ax_metric_set(m->budget, 0, (double)cb->svc.conf.callback_retry_budget);
}

void cm_init(callback_t *cb) {
    ax_metrics_t *reg = cb->svc.metrics.reg;
    struct cmetrics *m = reg ? calloc(1, sizeof *m) : NULL;
    if (!m)
        return;
    m->outcomes = ax_metrics_counter(reg, "ax_callback_outcomes_total",
                                     "Instances that ended for good (FINISHED), by outcome.",
                                     "outcome", outcomes);
    m->retries = ax_metrics_counter(reg, "ax_callback_retries_total",
                                    "Failed attempts rescheduled as a next attempt.", NULL, NULL);
    m->stale = ax_metrics_counter(reg, "ax_callback_stale_results_total",
                                  "Results ignored as stale or duplicate (their attempt was "
                                  "already decided).",
                                  NULL, NULL);
    m->published = ax_metrics_counter(reg, "ax_callback_results_published_total",
                                      "Final outcomes published on the results topic.", NULL,
                                      NULL);
    m->source = ax_metrics_counter(reg, "ax_callback_results_source_total",
                                   "Results the publisher produced, by where it took them "
                                   "from: carried from this process's own finish, or read "
                                   "from the outbox.",
                                   "source", sources);
    m->budget = ax_metrics_gauge(reg, "ax_callback_retry_budget",
                                 "Retries that may be pending at once (callback.retry.budget).",
                                 NULL, NULL);
    m->budget_used = ax_metrics_gauge(reg, "ax_callback_retry_budget_in_use",
                                      "Retries pending (SCHEDULED with attempt > 1) as the last "
                                      "retry decision read them.",
                                      NULL, NULL);
    m->ev = ax_svc_every(&cb->svc, 1000, on_metrics, cb);
    cb->metrics = m;
}

void cm_fini(callback_t *cb) {
    if (!cb->metrics)
        return;
    if (cb->metrics->ev)
        event_free(cb->metrics->ev);
    free(cb->metrics);
    cb->metrics = NULL;
}

static void count_outcome(struct cmetrics *m, const ax_outcome_in_t *in) {
    if (in->outcome >= AX_OUTCOME_SUCCESS && in->outcome <= AX_OUTCOME_CANCELLED)
        ax_metric_inc(m->outcomes, (size_t)in->outcome);
}

void cm_finished(callback_t *cb, const ax_outcome_in_t *in, size_t n,
                 const ax_outcome_finished_t *f) {
    struct cmetrics *m = cb->metrics;
    if (!m)
        return;
    if (f->nended == n) { /* the usual batch: nothing stale */
        for (size_t i = 0; i < n; i++)
            if (in[i].retry_ms < 0)
                count_outcome(m, &in[i]);
        return;
    }
    for (size_t k = 0; k < f->nended; k++) {
        if (f->ended[k].retried)
            continue;
        for (size_t i = 0; i < n; i++)
            if (in[i].instance_id == f->ended[k].instance_id) {
                count_outcome(m, &in[i]);
                break;
            }
    }
}

void cm_budget_in_use(callback_t *cb, int64_t pending) {
    if (cb->metrics)
        ax_metric_set(cb->metrics->budget_used, 0, (double)pending);
}
