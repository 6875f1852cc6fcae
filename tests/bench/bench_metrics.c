/*
 * bench_metrics — what metrics cost where it matters, in-process, no I/O:
 *
 *   1. the updates on the per-job path, ns each: a counter's add, a
 *      histogram's observe (latency buckets), a gauge's set, a label
 *      lookup (ax_metric_index, as the executor finds a handler kind), and
 *      the same calls on NULL (metrics off); then one job's worth of them
 *      as the services make them with metrics on: the executor's claim,
 *      run started (+ fire-to-start), attempt done (+ handler duration),
 *      two kind lookups, the callback's outcome (3 + 1 adds, 2 observes,
 *      2 lookups), against the same calls on NULL;
 *   2. one render of an executor-shaped registry (its families with the
 *      command, http and plugin kinds and one pool, the process_* and
 *      store collectors), µs each, the whole, its families alone and the
 *      process_* collector alone.
 *
 * Usage: bench_metrics [ITERATIONS] [RENDERS]   (defaults 20000000, 2000)
 *
 * Prints one key=value line a section (medians of 5 repetitions). Single
 * thread: the cells of one series are touched by one service thread in
 * the services too (the executor's loop), so there is no contention to
 * model; the relaxed atomics still cost their lock prefix.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ax/metrics.h"
#include "ax/metrics_http.h"
#include "bench_common.h"

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double med5(double v[5]) {
    qsort(v, 5, sizeof *v, cmp);
    return v[2];
}

typedef struct {
    ax_metric_t *claims, *started, *attempts, *outcomes, *fire_start, *handler, *slots;
} fams_t;

static const char *const kinds[] = {"command", "http", "plugin", NULL};
static const char *const outcomes[] = {"SUCCESS", "FAILED", "TIMEOUT", "CANCELLED", NULL};
static const char *const results[] = {"claimed", "no_slot", "not_claimable", "retry", NULL};
static const char *const pools[] = {"command", NULL};

static void fams_make(ax_metrics_t *m, fams_t *f) {
    const double *b = ax_metrics_latency_buckets;
    size_t nb = ax_metrics_latency_buckets_n;
    f->fire_start = ax_metrics_histogram(m, "ax_executor_fire_to_start_seconds", "Due to start.",
                                         "kind", kinds, b, nb);
    f->handler = ax_metrics_histogram(m, "ax_executor_handler_seconds", "Handler run time.",
                                      "kind", kinds, b, nb);
    f->attempts = ax_metrics_counter(m, "ax_executor_attempts_total", "Attempts.", "outcome",
                                     outcomes);
    f->claims = ax_metrics_counter(m, "ax_executor_claims_total", "Claims.", "result", results);
    f->started = ax_metrics_counter(m, "ax_executor_runs_started_total", "Runs.", "kind", kinds);
    f->outcomes = ax_metrics_counter(m, "ax_callback_outcomes_total", "Outcomes.", "outcome",
                                     outcomes);
    f->slots = ax_metrics_gauge(m, "ax_executor_pool_slots", "Slots.", "pool", pools);
    ax_metrics_gauge(m, "ax_executor_pool_slots_busy", "Busy.", "pool", pools);
    ax_metrics_gauge(m, "ax_executor_pool_queued", "Queued.", "pool", pools);
}

/* One job's updates, as services/executor/metrics.c and services/callback/metrics.c make them. */
static void one_job(const fams_t *f, uint64_t i) {
    int k = ax_metric_index(f->handler, "plugin"); /* kind_of, at start */
    ax_metric_inc(f->claims, 0);
    if (k >= 0 || !f->handler) {
        ax_metric_inc(f->started, (size_t)k);
        ax_metric_observe(f->fire_start, (size_t)k, 0.05 + (double)(i & 7) * 1e-3);
    }
    ax_metric_inc(f->attempts, 0);
    k = ax_metric_index(f->handler, "plugin"); /* kind_of, at the end */
    if (k >= 0 || !f->handler)
        ax_metric_observe(f->handler, (size_t)k, 0.0002);
    ax_metric_inc(f->outcomes, 0);
}

enum { OP_ADD, OP_OBSERVE, OP_SET, OP_INDEX, OP_JOB };

/* ns per call of op over `it` calls, median of 5. */
static double time_op(const fams_t *f, int op, long it) {
    double r[5];
    volatile int sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_ns();
        for (long i = 0; i < it; i++) {
            switch (op) {
            case OP_ADD: ax_metric_inc(f->claims, (size_t)(i & 3)); break;
            case OP_OBSERVE: ax_metric_observe(f->fire_start, 2, 0.05 + (double)(i & 7) * 1e-3); break;
            case OP_SET: ax_metric_set(f->slots, 0, (double)(i & 15)); break;
            case OP_INDEX: sink += ax_metric_index(f->handler, "plugin"); break;
            default: one_job(f, (uint64_t)i); break;
            }
            __asm__ volatile("" ::: "memory"); /* keep every call */
        }
        r[rep] = (now_ns() - t0) / (double)it;
    }
    (void)sink;
    return med5(r);
}

/* µs per render of m, median of 5 batches of n. */
static double time_render(ax_metrics_t *m, long n, size_t *ret_bytes, size_t *ret_lines) {
    ax_mbuf_t b = {0};
    double r[5];
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            b.len = 0;
            ax_metrics_render(m, &b);
        }
        r[rep] = (now_ns() - t0) / (double)n / 1e3;
    }
    size_t lines = 0;
    for (size_t i = 0; i < b.len; i++)
        lines += b.p[i] == '\n';
    *ret_bytes = b.len;
    *ret_lines = lines;
    ax_mbuf_free(&b);
    return med5(r);
}

int main(int argc, char **argv) {
    long long it_ll = 20000000, nr_ll = 2000;
    if ((argc > 1 && !bench_int_arg("bench_metrics", "ITERATIONS", argv[1], 1, LONG_MAX, &it_ll)) ||
        (argc > 2 && !bench_int_arg("bench_metrics", "RENDERS", argv[2], 1, LONG_MAX, &nr_ll)))
        return 2;
    long it = (long)it_ll, nr = (long)nr_ll;
    ax_metrics_t *m = ax_metrics_new();
    fams_t on, off;
    memset(&off, 0, sizeof off);
    if (!m)
        return 1;
    fams_make(m, &on);
    if (!on.claims || !on.fire_start || !on.handler || !on.outcomes)
        return 1;
    printf("update_ns add=%.2f observe=%.2f set=%.2f index=%.2f null_add=%.2f null_observe=%.2f\n",
           time_op(&on, OP_ADD, it), time_op(&on, OP_OBSERVE, it), time_op(&on, OP_SET, it),
           time_op(&on, OP_INDEX, it), time_op(&off, OP_ADD, it), time_op(&off, OP_OBSERVE, it));
    double job_on = time_op(&on, OP_JOB, it / 4), job_off = time_op(&off, OP_JOB, it / 4);
    printf("per_job_ns on=%.1f off=%.1f added=%.1f\n", job_on, job_off, job_on - job_off);
    /* Rendering: the families alone, process_* alone, the executor's whole set. */
    size_t bytes, lines;
    double fam_us = time_render(m, nr, &bytes, &lines);
    printf("render_us families=%.2f (%zu lines, %zu bytes)", fam_us, lines, bytes);
    ax_metrics_t *p = ax_metrics_new();
    if (!p || ax_metrics_add_process(p) < 0)
        return 1;
    printf(" process=%.2f", time_render(p, nr, &bytes, &lines));
    if (ax_metrics_add_process(m) < 0 || ax_metrics_add_store(m) < 0)
        return 1;
    double all = time_render(m, nr, &bytes, &lines);
    printf(" executor_shaped=%.2f (%zu lines, %zu bytes)\n", all, lines, bytes);
    ax_metrics_destroy(p);
    ax_metrics_destroy(m);
    return 0;
}
