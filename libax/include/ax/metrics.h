/*
 * ax/metrics.h — a registry of Prometheus metrics and its text exposition
 * (format 0.0.4). Pure: no I/O; the HTTP endpoint and the collectors that
 * read /proc, the store's statement figures and librdkafka's statistics
 * are in ax/metrics_http.h.
 *
 * A metric is a family with at most one label, whose values are all given
 * at registration (so every label set is bounded and known in advance); a
 * series is addressed by the index of its value. Updates are relaxed
 * atomics on preallocated cells: no lock, no allocation, callable from any
 * thread. Every update function accepts a NULL metric and does nothing, so
 * a service whose metrics are off (no registry: every registration returns
 * NULL) pays one branch per update. An index out of range is ignored.
 *
 * Registration and rendering take the registry's mutex; register before
 * the endpoint serves, or concurrently (both are safe).
 *
 * Collectors add families computed at scrape time (values of other
 * modules, files): they are called during ax_metrics_render, on the
 * rendering thread, and write through ax_mw_family/ax_mw_sample. They must
 * be thread-safe with respect to whatever they read.
 */
#ifndef AX_METRICS_H
#define AX_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { AX_METRIC_COUNTER, AX_METRIC_GAUGE, AX_METRIC_HISTOGRAM } ax_metric_type_t;

typedef struct ax_metrics ax_metrics_t;
typedef struct ax_metric ax_metric_t;

/* A growable text buffer; `oom` is set (and the text cut) if it could not grow. */
typedef struct ax_mbuf {
    char *p;
    size_t len, cap;
    int oom;
} ax_mbuf_t;
void ax_mbuf_free(ax_mbuf_t *b);

ax_metrics_t *ax_metrics_new(void);
void ax_metrics_destroy(ax_metrics_t *m);

/* Register a family. `name` follows Prometheus' rules ([a-zA-Z_:][a-zA-Z0-9_:]*;
 * a counter's ends in _total); `label` is NULL for a single series, else
 * a label name and `values` the NULL-terminated list of its values (copied;
 * at most AX_METRIC_VALUES_MAX). A histogram takes `nb` strictly increasing
 * finite upper bounds (the +Inf bucket is implied; at most
 * AX_METRIC_BUCKETS_MAX). Returns NULL if m is NULL, on a bad name, label
 * or bounds, a duplicate name, or no memory: updating NULL does nothing. */
#define AX_METRIC_VALUES_MAX 256
#define AX_METRIC_BUCKETS_MAX 32
ax_metric_t *ax_metrics_counter(ax_metrics_t *m, const char *name, const char *help,
                                const char *label, const char *const *values);
ax_metric_t *ax_metrics_gauge(ax_metrics_t *m, const char *name, const char *help,
                              const char *label, const char *const *values);
ax_metric_t *ax_metrics_histogram(ax_metrics_t *m, const char *name, const char *help,
                                  const char *label, const char *const *values,
                                  const double *bounds, size_t nb);

/* Bucket bounds in seconds for latencies from 1 ms to 60 s (14 bounds). */
extern const double ax_metrics_latency_buckets[];
extern const size_t ax_metrics_latency_buckets_n;

/* The index of a label value of f, or -1 (also for a NULL f). */
int ax_metric_index(const ax_metric_t *f, const char *value);

/* Counters: add n. Gauges: set, or add d (may be negative). Histograms:
 * observe v (in the family's base unit). */
void ax_metric_add(ax_metric_t *f, size_t i, uint64_t n);
#define ax_metric_inc(f, i) ax_metric_add((f), (i), 1)
void ax_metric_set(ax_metric_t *f, size_t i, double v);
void ax_metric_gadd(ax_metric_t *f, size_t i, double d);
void ax_metric_observe(ax_metric_t *f, size_t i, double v);

/* Read back (tests, and services that export what they also use):
 * a counter's or gauge's value, a histogram's count. 0 for NULL. */
double ax_metric_value(const ax_metric_t *f, size_t i);

/* Collectors (see the top of this file). */
typedef struct ax_mwriter ax_mwriter_t;
typedef void (*ax_metrics_collect_fn)(ax_mwriter_t *w, void *arg);
/* fn(w, arg) at every render, under the registry's mutex (it must not
 * register); free_arg (may be NULL) is called on arg when the registry is
 * destroyed, and at once if the collector could not be added. */
int ax_metrics_collector(ax_metrics_t *m, ax_metrics_collect_fn fn, void *arg,
                         void (*free_arg)(void *arg));
/* Start a family: its HELP and TYPE lines. */
void ax_mw_family(ax_mwriter_t *w, const char *name, ax_metric_type_t type, const char *help);
/* One sample: `name` (the family's name, or with _bucket/_sum/_count),
 * `labels` NULL or a NULL-terminated list of name, value pairs (values
 * escaped here), and the value. */
void ax_mw_sample(ax_mwriter_t *w, const char *name, const char *const *labels, double v);

/* The text exposition of every family, then of every collector, appended
 * to out. 0, or AX_ERR_NOMEM (out->oom). Content type:
 * AX_METRICS_CONTENT_TYPE. */
#define AX_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
int ax_metrics_render(ax_metrics_t *m, ax_mbuf_t *out);

/* The value of metrics.listen: "" (off: *ret_port = -1, host "") or
 * HOST:PORT with HOST a loopback address (127.x.y.z, [::1], localhost)
 * and PORT 0..65535 (0: any free port). AX_ERR_INVALID with a reason
 * otherwise. */
int ax_metrics_listen_parse(const char *s, char *ret_host, size_t hostlen, int *ret_port,
                            char *errbuf, size_t errlen);

#endif
