/*
 * ax/service.h — what the three services share: configuration from the
 * command line, the libevent loop with SIGTERM/SIGINT handling, the
 * PostgreSQL connection, one producer, one consumer whose batches are
 * handed to the service and committed only when the service says the batch
 * is durable, and dead-lettering of what cannot be processed.
 *
 * Batch contract: the service's batch function returns 0 when every message
 * is durable (persisted, produced, or dead-lettered); the offsets are then
 * committed. AX_ERR_IO means "a server is unavailable": the same batch is
 * offered again after a capped exponential backoff, so nothing is lost and
 * nothing is consumed past it meanwhile. Batch functions must therefore be
 * idempotent (CAS updates, ON CONFLICT inserts).
 */
#ifndef AX_SERVICE_H
#define AX_SERVICE_H

#include <event2/event.h>
#include <librdkafka/rdkafka.h>

#include "ax/conf.h"
#include "ax/kafka.h"
#include "ax/metrics_http.h"
#include "ax/pg.h"

typedef struct ax_svc ax_svc_t;
typedef int (*ax_svc_batch_fn)(ax_svc_t *svc, rd_kafka_message_t **msgs, size_t n, void *arg);

struct ax_svc {
    const char *name;          /* "ax-trigger", ... */
    ax_conf_t conf;
    struct event_base *base;
    ax_pg_t *pg;
    rd_kafka_t *producer;
    rd_kafka_t *consumer;
    ax_delivery_t dlv;         /* tracks produces of the current batch */
    char worker_id[128];
    char topic_submit[256], topic_dispatch[256], topic_callback[256], topic_results[256],
        topic_dlq[256];
    volatile int stopping;
    /* consumer batch plumbing */
    ax_kafka_watch_t *cwatch, *pwatch;
    rd_kafka_queue_t *cqueue, *pqueue;
    ax_svc_batch_fn batch_fn;
    void *batch_arg;
    size_t batch_max;
    size_t held_cap; /* entries allocated in held (>= batch_max) */
    rd_kafka_message_t **held;
    size_t held_n;
    unsigned held_failures;
    int64_t held_retry_at;
    int held_offered;      /* held was offered and is not durable yet: retried */
    int64_t held_since;    /* ax_boot_ms() the first held record was taken (a
                            * suspended host's time counts) */
    /* the consumer's assignment as read at ax_kafka_rebalances() ==
     * assigned_gen (NULL: not read yet) */
    rd_kafka_topic_partition_list_t *assigned;
    unsigned long assigned_gen;
    struct event *ev_linger; /* a filling batch's consume.linger.ms */
    int64_t linger_ms;       /* the window in use (ax_svc_consume_linger, else consume.linger.ms) */
    int linger_set;
    struct event *ev_sigterm, *ev_sigint;
    void (*on_stop)(ax_svc_t *svc);
    int64_t dlq_count;
    /* metrics.listen: the registry the service registers its families on
     * (metrics.reg; NULL when metrics are off, which makes every update a
     * no-op), served from ax_svc_init on; process_*, store and Kafka
     * figures included (ax/metrics_http.h). */
    ax_metrics_endpoint_t metrics;
    ax_metric_t *m_dlq; /* ax_dlq_messages_total{reason} */
    /* SIGHUP (see ax_svc_reload()): the keys this service applies while
     * running (NULL-terminated; log.level is always applied), an optional
     * check that may refuse (or complete) the new configuration before
     * anything is applied, and an optional hook run after the keys were
     * applied; `old` then holds the previous values of the applied keys. */
    const char *const *reloadable;
    int (*reload_check)(ax_svc_t *svc, ax_conf_t *n, char *err, size_t len);
    void (*on_reload)(ax_svc_t *svc, const ax_conf_t *old);
    int argc0;
    char **argv0; /* the original command line, for SIGHUP */
    struct event *ev_other[4]; /* SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 */
    /* why ax_svc_init / ax_svc_consume said to end (see ax_svc_exit_status) */
    const char *usage, *used_by;
    ax_conf_action_t conf_action;
    int ended, exit_status;
    char end_msg[1100];
};

/* ax_svc_init's value when there is nothing to run (--help, --version,
 * --print-config, or SIGTERM before PostgreSQL was reachable): exit 0. */
#define AX_SVC_END (-100)

/* Parse the command line, open the loop, PostgreSQL (waits with backoff
 * until reachable) and the producer. Prints nothing and never exits: 0 when
 * the service is to run; < 0 when the program is to end now, and main then
 * returns ax_svc_exit_status(svc): AX_SVC_END (nothing to run), or an
 * ax_err_t (a bad configuration, which exits 2, or another failure, 1). */
int ax_svc_init(ax_svc_t *svc, const char *name, int *argc, char **argv, const char *usage,
                const char *used_by);

/* For main, after ax_svc_init or ax_svc_consume failed: prints what the
 * program was asked for (--help: the usage and the options; --version;
 * --print-config) on stdout, or the reason it cannot run on stderr
 * ("ax-trigger: configuration error: ..."), and returns the exit status: 0,
 * 2 for a configuration error, else 1. (In ax_prog: it prints.) */
int ax_svc_exit_status(const ax_svc_t *svc);

/* A persistent timer on the service's loop calling fn(-1, EV_TIMEOUT, arg)
 * every `ms`; NULL if it could not be made. */
struct event *ax_svc_every(ax_svc_t *svc, int64_t ms, event_callback_fn fn, void *arg);

/* Before ax_svc_consume: the batch window is `ms`, not consume.linger.ms
 * (the callback's callback.consume.linger.ms); the fetches' settings are
 * consume.fetch.wait.max.ms and consume.fetch.min.bytes either way. */
void ax_svc_consume_linger(ax_svc_t *svc, int64_t ms);

/* Subscribe `group` to `topic` and hand batches of at most batch_max to fn:
 * a batch is handed over when full or when its first record has waited
 * consume.linger.ms (0: whatever one poll returns); its offsets are
 * committed once fn made it durable (consume.commit.interval.ms).
 * AX_ERR_INVALID for a bad kafka.* setting of the consumer (main returns
 * ax_svc_exit_status(svc): 2), AX_ERR_IO if the subscription failed. */
int ax_svc_consume(ax_svc_t *svc, const char *topic, const char *group, size_t batch_max,
                   ax_svc_batch_fn fn, void *arg);

/* Check framing/size of msg and decode it with `decode`; on failure the
 * message is dead-lettered with the reason and 1 is returned (skip it).
 * Returns 0 when *out is filled, AX_ERR_IO if the dead-letter produce could
 * not even be queued. */
int ax_svc_reject(ax_svc_t *svc, const rd_kafka_message_t *msg, const char *reason);
/* The same for a message that decoded far enough to say what it was
 * about (instance, job, trace id: headers of the dead letter, shown by
 * axctl dlq list and GET /api/v1/dlq); about may be NULL. */
int ax_svc_reject_about(ax_svc_t *svc, const rd_kafka_message_t *msg, const char *reason,
                        const ax_dlq_about_t *about);
/* Size and framing checks shared by every consumer; returns 0 when the
 * message may be decoded, else fills reason. */
int ax_svc_precheck(ax_svc_t *svc, const rd_kafka_message_t *msg, int32_t want_schema,
                    char *reason, size_t len);

/* Drop the held records of partitions no longer assigned to svc's consumer
 * (revoked or lost while they waited; their new owner reads them again):
 * done before every offer of a batch, against a copy of the assignment
 * read again only after a rebalance (ax_kafka_rebalances). The number
 * dropped. */
size_t ax_svc_drop_unassigned(ax_svc_t *svc);

/* How long ago (ms, CLOCK_BOOTTIME: a suspended host's time counts) the
 * held batch's first record was taken from the consumer; 0 if none is
 * held. */
int64_t ax_svc_held_age_ms(const ax_svc_t *svc);

/* Change the largest batch handed to the batch function (SIGHUP); a batch
 * held for a retry keeps its size. */
int ax_svc_set_batch_max(ax_svc_t *svc, size_t batch_max);

/* Wait for every produce made through svc->dlv; AX_ERR_IO on failure. */
int ax_svc_flush(ax_svc_t *svc, int timeout_ms);

/* SIGHUP: read the configuration again from the same sources as at start
 * (file, AXCONF_* environment, --set). A configuration that does not parse
 * or that reload_check refuses changes nothing (logged as an error). Else
 * every changed key is logged ("key: old → new"; secret values never
 * shown): log.level and the keys in svc->reloadable are applied, any other
 * change is logged as needing a restart and not applied. Returns 0 when
 * reloaded. Called by the SIGHUP handler every service has (set up by
 * ax_svc_init); SIGQUIT stops like SIGTERM, SIGUSR1/SIGUSR2 are logged and
 * ignored, SIGPIPE is ignored. */
int ax_svc_reload(ax_svc_t *svc);

/* Run the loop until SIGTERM/SIGINT; then close the consumer (leaving the
 * group), flush the producer, and free everything. */
int ax_svc_run(ax_svc_t *svc);
void ax_svc_destroy(ax_svc_t *svc);

#endif
