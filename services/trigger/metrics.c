/*
 * metrics.c — what ax-trigger exports on metrics.listen (docs/METRICS.md):
 * fires by decision and their lateness (counted once the ledger recorded
 * them), instances created, leadership (epoch, leader or not, changes),
 * per lane the executors' lag and the deferred instances, open circuits
 * (a count over the job table every 5 s, by the leader only), and the
 * trigger's own counters carried over once a second. Nothing here when
 * metrics are off (t->metrics stays NULL).
 */
#include <stdio.h>
#include <stdlib.h>

#include "ax/fire.h"
#include "ax/log.h"
#include "ax/metrics.h"
#include "ax/store_circuit.h"
#include "trigger.h"

#define CIRCUITS_EVERY_MS 5000

struct tmetrics {
    ax_metric_t *fires, *lateness, *created, *epoch, *leader, *changes, *lag, *deferred,
        *circuits, *submissions, *dispatched, *swept, *samples, *txns;
    int64_t last_submitted, last_duplicates, last_dispatched, last_swept, last_samples[2];
    int64_t last_committed, last_aborted;
    int64_t circuits_at;
    struct event *ev;
};

static const char *const lanes[AX_PRIORITIES + 1] = {"0", "1", "2", "3", "4", NULL};
static const char *const circuit_states[] = {"open", "half_open", NULL};
static const char *const submission_results[] = {"created", "duplicate", NULL};
static const char *const created_by[] = {"fire", "submit", NULL};
static const char *const sample_reasons[] = {"interval", "demand", NULL};
static const char *const txn_results[] = {"committed", "aborted", NULL};

/* Add what a counter of the trigger grew by since the last call. */
static uint64_t grown(int64_t now, int64_t *last) {
    uint64_t d = now > *last ? (uint64_t)(now - *last) : 0;
    *last = now;
    return d;
}

static void circuits(trigger_t *t, struct tmetrics *m) {
    int64_t now = ax_mono_ms();
    if (!lead_active(t) || now - m->circuits_at < CIRCUITS_EVERY_MS)
        return;
    m->circuits_at = now;
    int64_t open = 0, half = 0;
    char err[512];
    if (ax_store_circuit_count(t->svc.pg, t->svc.conf.topic_prefix, &open, &half, err,
                               sizeof err) < 0) {
        ax_debug("metrics: circuits: %s", err);
        return;
    }
    ax_metric_set(m->circuits, 0, (double)open);
    ax_metric_set(m->circuits, 1, (double)half);
}

static void on_metrics(evutil_socket_t fd, short what, void *arg) {
    trigger_t *t = arg;
    struct tmetrics *m = t->metrics;
    uint64_t added = grown(t->submitted, &m->last_submitted);
    ax_metric_add(m->submissions, 0, added);
    ax_metric_add(m->created, 1, added);
    ax_metric_add(m->submissions, 1, grown(t->duplicates, &m->last_duplicates));
    ax_metric_add(m->dispatched, 0, grown(t->dispatched, &m->last_dispatched));
    ax_metric_add(m->swept, 0, grown(t->swept, &m->last_swept));
    ax_metric_add(m->txns, 0, grown(t->txns_committed, &m->last_committed));
    ax_metric_add(m->txns, 1, grown(t->txns_aborted, &m->last_aborted));
    for (size_t k = 0; k < 2; k++)
        ax_metric_add(m->samples, k, grown(t->lag_samples[k], &m->last_samples[k]));
    ax_metric_set(m->epoch, 0, (double)t->epoch);
    ax_metric_set(m->leader, 0, lead_active(t) ? 1 : 0);
    for (size_t l = 0; l < AX_PRIORITIES; l++) {
        ax_metric_set(m->lag, l, (double)t->lanes[l].lag);
        ax_metric_set(m->deferred, l, (double)t->deferred[l]);
    }
    circuits(t, m);
}

static void tm_register(struct tmetrics *m, ax_metrics_t *reg) {
    m->fires = ax_metrics_counter(reg, "ax_trigger_fires_total",
                                  "Nominal fire times decided and recorded in the ledger, by "
                                  "decision.",
                                  "decision", ax_fire_decision_names);
    m->lateness = ax_metrics_histogram(reg, "ax_trigger_fire_lateness_seconds",
                                       "Time from a fired nominal time to its ledger record.",
                                       NULL, NULL, ax_metrics_latency_buckets,
                                       ax_metrics_latency_buckets_n);
    m->created = ax_metrics_counter(reg, "ax_trigger_instances_created_total",
                                    "Instances created SCHEDULED, by source (a schedule's fire "
                                    "or a submission).",
                                    "source", created_by);
    m->submissions = ax_metrics_counter(reg, "ax_trigger_submissions_total",
                                        "Submissions ingested, by result.", "result",
                                        submission_results);
    m->dispatched = ax_metrics_counter(reg, "ax_trigger_dispatched_total",
                                       "Instances produced to a dispatch topic.", NULL, NULL);
    m->swept = ax_metrics_counter(reg, "ax_trigger_leases_swept_total",
                                  "Expired executor leases reported as lost.", NULL, NULL);
    m->txns = ax_metrics_counter(reg, "ax_trigger_kafka_transactions_total",
                                 "The leader's Kafka transactions (dispatch records; the attempts "
                                 "of swept leases and backlog cuts), by result: committed, or "
                                 "aborted (a failed or fenced commit, an abort after a failed "
                                 "produce, the next dispatch window's transaction begun ahead "
                                 "and aborted with a failed commit, one open when leadership is "
                                 "lost or given up).",
                                 "result", txn_results);
    m->epoch = ax_metrics_gauge(reg, "ax_trigger_leader_epoch",
                                "Epoch of the lease this trigger last led under (0: never led).",
                                NULL, NULL);
    m->leader = ax_metrics_gauge(reg, "ax_trigger_leader",
                                 "1 while this trigger leads (its lease not run out), else 0.",
                                 NULL, NULL);
    m->changes = ax_metrics_counter(reg, "ax_trigger_leadership_changes_total",
                                    "Times this trigger became leader or stopped leading.", NULL,
                                    NULL);
    m->lag = ax_metrics_gauge(reg, "ax_trigger_lane_lag_messages",
                              "Executors' consumer lag on a priority lane (last sample).", "lane",
                              lanes);
    m->deferred = ax_metrics_gauge(reg, "ax_trigger_lane_deferred",
                                   "Instances deferred on a priority lane (last count).", "lane",
                                   lanes);
    m->samples = ax_metrics_counter(reg, "ax_trigger_lag_samples_total",
                                    "Samples of the executors' lag taken up by the leader, by "
                                    "reason: its interval, or on demand (a lane held back, or "
                                    "its room used up since the last sample).",
                                    "reason", sample_reasons);
    m->circuits = ax_metrics_gauge(reg, "ax_trigger_circuits",
                                   "Jobs of the deployment whose circuit breaker is open or "
                                   "half-open (leader only, every 5 s).",
                                   "state", circuit_states);
}

void tm_init(trigger_t *t) {
    ax_metrics_t *reg = t->svc.metrics.reg;
    if (!reg)
        return;
    struct tmetrics *m = calloc(1, sizeof *m);
    if (!m)
        return;
    tm_register(m, reg);
    m->ev = ax_svc_every(&t->svc, 1000, on_metrics, t);
    t->metrics = m;
}

void tm_fini(trigger_t *t) {
    if (!t->metrics)
        return;
    if (t->metrics->ev)
        event_free(t->metrics->ev);
    free(t->metrics);
    t->metrics = NULL;
}

void tm_fires(trigger_t *t, const fire_t *f, size_t n, size_t created) {
    struct tmetrics *m = t->metrics;
    if (!m)
        return;
    int64_t now = lead_now(t);
    for (size_t i = 0; i < n; i++) {
        int d = ax_fire_decision_parse(f[i].decision);
        if (d < 0)
            continue;
        ax_metric_inc(m->fires, (size_t)d);
        if (d == AX_FIRE_FIRED)
            ax_metric_observe(m->lateness, 0,
                              now > f[i].nominal_ms ? (double)(now - f[i].nominal_ms) / 1e3 : 0);
    }
    ax_metric_add(m->created, 0, created);
}

void tm_leadership(trigger_t *t) {
    if (t->metrics)
        ax_metric_inc(t->metrics->changes, 0);
}
