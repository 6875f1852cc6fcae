/*
 * ax/metrics_http.h — the metrics endpoint of a process: GET /metrics
 * (Prometheus text exposition 0.0.4, ax/metrics.h) over HTTP on a loopback
 * address, served by libevent's evhttp on a thread and event base of its
 * own (a scrape never waits for the service's loop, and a busy loop never
 * delays it); and the collectors every process exports: process_* (from
 * /proc/self), the store's statement figures (ax_store_stats) and
 * librdkafka's statistics of the process's main clients.
 *
 * Served: GET or HEAD /metrics (200); any other path 404; another method
 * 501; request headers larger than 8 KB (400) or any body (413) are refused
 * (evhttp's limits). Metric names and labels: docs/METRICS.md.
 */
#ifndef AX_METRICS_HTTP_H
#define AX_METRICS_HTTP_H

#include <stddef.h>

#include "ax/conf.h"
#include "ax/metrics.h"

typedef struct ax_metrics_server ax_metrics_server_t;
typedef struct ax_kstats ax_kstats_t;

/* Serve m on `listen` (metrics.listen syntax, not empty). The registry
 * must outlive the server. NULL with a reason (bad address, bind failure). */
ax_metrics_server_t *ax_metrics_serve(ax_metrics_t *m, const char *listen, char *errbuf,
                                      size_t errlen);
/* The bound port (useful with port 0). */
int ax_metrics_server_port(const ax_metrics_server_t *s);
/* Stop serving and join the thread; NULL is a no-op. */
void ax_metrics_server_stop(ax_metrics_server_t *s);

/* process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds,
 * process_start_time_seconds. */
int ax_metrics_add_process(ax_metrics_t *m);
/* ax_store_statement_{calls,errors,rows}_total, _seconds_total and
 * ax_store_statement_max_seconds, label statement (the AX_STMT names). */
int ax_metrics_add_store(ax_metrics_t *m);
/* librdkafka's statistics (statistics.interval.ms, default here 5000 unless
 * kafka.statistics.interval.ms is set) of every handle made afterwards by
 * ax/kafka.h whose client.id is `client_id` (a service's producer and
 * consumer, which its loop polls), kept as the last snapshot per handle
 * type and rendered as ax_kafka_* (docs/METRICS.md). Call before making
 * the handles; one per process. The snapshot belongs to the registry (freed
 * with it); unset the hook (ax_kafka_set_stats(NULL, NULL, NULL)) before
 * destroying the registry if a handle may still report. */
ax_kstats_t *ax_metrics_add_kafka(ax_metrics_t *m, const char *client_id);

/* Everything a process exports besides its own families, in one call:
 * with conf->metrics_listen empty, ep is zeroed (ep->reg NULL: every
 * registration returns NULL and every update is a no-op) and 0 returned;
 * else a registry with the three collectors above (Kafka statistics for
 * the handles named `name`), served on metrics.listen. Register the
 * process's own families on ep->reg. AX_ERR_IO with a reason if the
 * address cannot be bound. */
typedef struct ax_metrics_endpoint {
    ax_metrics_t *reg;
    ax_metrics_server_t *srv;
    ax_kstats_t *kstats;
} ax_metrics_endpoint_t;
int ax_metrics_endpoint_start(ax_metrics_endpoint_t *ep, const ax_conf_t *conf, const char *name,
                              char *errbuf, size_t errlen);
/* Stop the server, then free the registry (every ax_metric_t of it). */
void ax_metrics_endpoint_stop(ax_metrics_endpoint_t *ep);

#endif
