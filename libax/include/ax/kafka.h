/*
 * ax/kafka.h — the Kafka adapter: clients configured from the kafka.* keys,
 * librdkafka queues wired into a libevent loop, dead-lettering, and offset
 * commits that only ever move past work that is durable.
 *
 * Producers are idempotent (enable.idempotence=true, acks=all). Consumers
 * never auto-commit and never auto-store offsets: the services commit after
 * their PostgreSQL write (and any produce it implies) succeeded.
 */
#ifndef AX_KAFKA_H
#define AX_KAFKA_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>

#include "ax/conf.h"

struct event_base;
struct event;

/* Delivery tracking: every message produced with ax_kafka_produce() carries a
 * pointer to one of these; the delivery report decrements `pending` and
 * records the first error. */
typedef struct ax_delivery {
    int pending;
    int failed;
    rd_kafka_resp_err_t err;
    void (*on_report)(struct ax_delivery *d, rd_kafka_resp_err_t err); /* optional */
} ax_delivery_t;

rd_kafka_t *ax_kafka_producer_new(const ax_conf_t *conf, const char *client_id, char *errbuf,
                                  size_t errlen);
/* A transactional producer: transactional.id = txn_id, and
 * rd_kafka_init_transactions() done (up to timeout_ms), which fences every
 * older producer with the same id — its open transaction is aborted and its
 * next produce or commit fails fatally. */
rd_kafka_t *ax_kafka_txn_producer_new(const ax_conf_t *conf, const char *client_id,
                                      const char *txn_id, int timeout_ms, char *errbuf,
                                      size_t errlen);
int ax_kafka_txn_begin(rd_kafka_t *rk, char *errbuf, size_t errlen);
/* Flush and commit the open transaction. 0 when committed; AX_ERR_IO when
 * it was aborted (nothing of it is visible to read_committed consumers;
 * produce it again later); AX_ERR_CONFLICT when the producer was fenced or
 * failed fatally — destroy it. */
int ax_kafka_txn_commit(rd_kafka_t *rk, int timeout_ms, char *errbuf, size_t errlen);
/* Abort the open transaction (best effort). */
void ax_kafka_txn_abort(rd_kafka_t *rk, int timeout_ms);

/* A consumer in `group`. `rebalance` may be NULL (the default cooperative
 * handler is used). */
rd_kafka_t *ax_kafka_consumer_new(const ax_conf_t *conf, const char *group, const char *client_id,
                                  char *errbuf, size_t errlen);
int ax_kafka_subscribe(rd_kafka_t *rk, const char *const *topics, size_t n, char *errbuf,
                       size_t errlen);

/* Produce a copy of value (and key) to topic with the delivery tracker `d`
 * (may be NULL; embed one per message and use on_report for per-message
 * completion). Headers
 * (may be NULL) are adopted by librdkafka on success; on failure they stay
 * the caller's. Retries RD_KAFKA_RESP_ERR__QUEUE_FULL by polling. */
int ax_kafka_produce(rd_kafka_t *rk, const char *topic, const void *key, size_t key_len,
                     const void *value, size_t value_len, rd_kafka_headers_t *hdrs,
                     ax_delivery_t *d, char *errbuf, size_t errlen);

/* Serve delivery reports until d->pending is 0 or timeout_ms passed.
 * Returns 0 if everything was delivered, AX_ERR_IO otherwise. */
int ax_kafka_wait(rd_kafka_t *rk, ax_delivery_t *d, int timeout_ms);

/* Copy `msg` (value unchanged) to the dead-letter topic with headers
 * ax.reason, ax.source.topic, ax.source.partition, ax.source.offset,
 * ax.service. The value is truncated to `max_bytes`. Tracked by `d`. */
int ax_kafka_dlq(rd_kafka_t *producer, const char *dlq_topic, const rd_kafka_message_t *msg,
                 const char *reason, const char *service, size_t max_bytes, ax_delivery_t *d,
                 char *errbuf, size_t errlen);

/* Synchronously commit, per partition, the highest offset+1 among msgs. */
int ax_kafka_commit_msgs(rd_kafka_t *consumer, rd_kafka_message_t **msgs, size_t n,
                         char *errbuf, size_t errlen);

/* Call `cb(arg)` from the loop whenever `q` has something (via
 * rd_kafka_queue_io_event_enable on a pipe), and at least every
 * `fallback_ms`. Returns the event (free with ax_kafka_watch_free). */
typedef struct ax_kafka_watch ax_kafka_watch_t;
ax_kafka_watch_t *ax_kafka_watch(struct event_base *base, rd_kafka_queue_t *q, int fallback_ms,
                                 void (*cb)(void *arg), void *arg);
/* Run the callback again once the loop has run what is pending. */
void ax_kafka_watch_kick(ax_kafka_watch_t *w);
void ax_kafka_watch_free(ax_kafka_watch_t *w);

/* Create the ax topics (prefix from conf) with `partitions` partitions;
 * existing topics are left as they are. */
int ax_kafka_create_topics(const ax_conf_t *conf, int partitions, int replication, char *errbuf,
                           size_t errlen);
/* Delete every topic ax_kafka_create_topics() creates for conf's prefix
 * (submit, callback, results, dlq and the default group's five dispatch
 * lanes), and first the consumer groups <prefix><groups[i]> (they must have
 * no members). Topics and groups that do not exist are not errors. 0 when
 * all is gone; AX_ERR_IO (the last failure in errbuf) when Kafka refused
 * or did not answer something; the rest is still attempted. */
int ax_kafka_delete_topics(const ax_conf_t *conf, const char *const *groups, size_t ngroups,
                           char *errbuf, size_t errlen);
/* Create the topics `names` (full names, prefix included) with `partitions`
 * partitions and `replication` replicas, in one admin request; existing
 * topics are left as they are. AX_ERR_INVALID for invalid arguments
 * (nothing is created), AX_ERR_IO when Kafka refused or did not answer. */
int ax_kafka_create_topic_names(const ax_conf_t *conf, const char *const *names, size_t n,
                                int partitions, int replication, char *errbuf, size_t errlen);

#endif
