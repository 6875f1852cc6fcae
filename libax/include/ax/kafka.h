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
    /* optional: every delivery report's message (its topic, partition and
     * offset), before on_report */
    void (*on_message)(struct ax_delivery *d, const rd_kafka_message_t *m);
    /* The partition of the messages produced with it, through the
     * partitioner of the producers made here: 0 = by key (murmur2, as Java
     * clients hash); k > 0 = partition (k - 1) modulo the topic's count
     * (ax_kafka_chunk_hint). Read when the message is partitioned, which
     * may be after ax_kafka_produce returned (the topic's partition count
     * not known yet): set it before producing and leave it while pending.
     * Ignored when kafka.partitioner is configured. */
    int64_t part_hint;
} ax_delivery_t;

/* Records spread in chunks (produce.partition.chunk): the part_hint of the
 * record numbered seq (0, 1, 2, ... in production order) of a producer,
 * chunk records per partition in turn; 0 (by key) when chunk is 0. A
 * transaction of n such records touches min(partitions, n / chunk + 2)
 * partitions, however many the topic has, where keys would touch all. */
int64_t ax_kafka_chunk_hint(int64_t seq, int64_t chunk);
/* 1 if kafka.partitioner names librdkafka's partitioner: part_hint is then
 * ignored by the producers made here. */
int ax_kafka_partitioner_set(const ax_conf_t *conf);

/* Size limits (docs/CONFIGURATION.md, message.max.bytes): a message's
 * value is at most message.max.bytes (M); a Kafka record, with its key,
 * headers and the protocol's framing, at most M + AX_KAFKA_HEADROOM. Every
 * producer and consumer handle gets message.max.bytes = that record
 * maximum (producers also batch.size = min(that, 1,000,000)), and the
 * topics ax creates get max.message.bytes = the same, so whatever one part
 * accepts the others can carry. */
#define AX_KAFKA_HEADROOM 65536
int64_t ax_kafka_record_max(const ax_conf_t *conf);
/* 1 if a delivery error refuses the record itself (its size or format:
 * MSG_SIZE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD), so sending
 * it again can never work; 0 for any other error (authorization, broker
 * or network trouble: not the record's fault). */
int ax_kafka_err_record_refused(rd_kafka_resp_err_t err);

/* A partition primer on a dispatch topic (dispatch.prime): a record with
 * this key and no value, produced by the leading trigger into a new
 * dispatch window so that the partition joins the Kafka transaction
 * before a batch's records need it. It carries no instance: executors
 * skip it (ax_kafka_is_primer) and move their offsets past it. */
#define AX_KAFKA_PRIMER_KEY "ax-primer"
int ax_kafka_is_primer(const rd_kafka_message_t *m);

/* When set (by a command-line tool that reports errors itself), librdkafka's
 * log lines and error events of every handle made here are logged at debug
 * only: none reaches stderr at the default log.level. */
extern int ax_kafka_quiet_logs;

/* librdkafka's statistics JSON of every handle made afterwards whose
 * client.id is client_id (statistics.interval.ms 5000 unless
 * kafka.statistics.interval.ms says otherwise): fn is called from the
 * thread polling the handle, with the JSON text (not NUL-terminated, valid
 * during the call). One hook per process (ax/metrics_http.h sets it). */
typedef void (*ax_kafka_stats_fn)(rd_kafka_t *rk, const char *json, size_t len, void *arg);
void ax_kafka_set_stats(const char *client_id, ax_kafka_stats_fn fn, void *arg);

rd_kafka_t *ax_kafka_producer_new(const ax_conf_t *conf, const char *client_id, char *errbuf,
                                  size_t errlen);
/* A transactional producer: transactional.id = txn_id, linger.ms =
 * linger_ms (unless kafka.linger.ms says otherwise; the commit flushes
 * whatever lingers), and rd_kafka_init_transactions() done (up to
 * timeout_ms), which fences every older producer with the same id — its
 * open transaction is aborted and its next produce or commit fails
 * fatally. */
rd_kafka_t *ax_kafka_txn_producer_new(const ax_conf_t *conf, const char *client_id,
                                      const char *txn_id, int linger_ms, int timeout_ms,
                                      char *errbuf, size_t errlen);
/* Begin a transaction. AX_ERR_CONFLICT when the producer failed fatally
 * (destroy it); AX_ERR_IO otherwise (e.g. one is still open: end it with
 * ax_kafka_txn_end_abort). */
int ax_kafka_txn_begin(rd_kafka_t *rk, char *errbuf, size_t errlen);
/* Flush and commit the open transaction, retrying what librdkafka calls
 * retriable within timeout_ms in all. 0 when committed; AX_ERR_IO when it
 * was aborted (nothing of it is visible to read_committed consumers;
 * produce it again later); AX_ERR_CONFLICT when the producer was fenced,
 * failed fatally, or the transaction could be neither committed nor
 * aborted — the producer cannot be used any more: destroy it. Never
 * returns with the transaction still open unless it returns
 * AX_ERR_CONFLICT. */
int ax_kafka_txn_commit(rd_kafka_t *rk, int timeout_ms, char *errbuf, size_t errlen);
/* Abort the open transaction: 0 when aborted (or none was open);
 * AX_ERR_CONFLICT when the producer is fenced/fatal or the abort failed
 * (the transaction may still be open: destroy the producer). */
int ax_kafka_txn_end_abort(rd_kafka_t *rk, int timeout_ms, char *errbuf, size_t errlen);
/* Abort the open transaction (best effort; a failure is logged). */
void ax_kafka_txn_abort(rd_kafka_t *rk, int timeout_ms);

/* A reader for assign()-only use: read_committed whatever kafka.* says,
 * partition EOF events on, no group membership and no commits. */
rd_kafka_t *ax_kafka_reader_new(const ax_conf_t *conf, const char *client_id, char *errbuf,
                                size_t errlen);

/* A consumer in `group`. `rebalance` may be NULL (the default cooperative
 * handler is used). */
rd_kafka_t *ax_kafka_consumer_new(const ax_conf_t *conf, const char *group, const char *client_id,
                                  char *errbuf, size_t errlen);
/* How a consumer of batches trades latency for fewer requests: fetches held
 * at the broker up to fetch_wait_ms for fetch_min_bytes (0: librdkafka's
 * defaults, answered as soon as anything is there), offsets committed every
 * commit_interval_ms from those stored by ax_kafka_store_msgs (0: none
 * committed but by ax_kafka_commit_msgs). */
typedef struct ax_kafka_batching {
    int fetch_wait_ms;
    int fetch_min_bytes;
    int commit_interval_ms;
} ax_kafka_batching_t;
/* ax_kafka_consumer_new with batching (b may be NULL: none). */
rd_kafka_t *ax_kafka_batch_consumer_new(const ax_conf_t *conf, const char *group,
                                        const char *client_id, const ax_kafka_batching_t *b,
                                        char *errbuf, size_t errlen);
int ax_kafka_subscribe(rd_kafka_t *rk, const char *const *topics, size_t n, char *errbuf,
                       size_t errlen);
/* How many times the rebalance callback of a consumer of this process
 * changed its assignment (partitions assigned, revoked or lost): a copy of
 * an assignment read since the last change is still the assignment
 * (ax_svc_drop_unassigned reads it again only then: rd_kafka_assignment()
 * waits for librdkafka's main thread). */
unsigned long ax_kafka_rebalances(void);

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

/* What a dead message was about, when it decoded far enough to say:
 * instance id (0: unknown), job and trace id (NULL: unknown). */
typedef struct ax_dlq_about {
    int64_t instance_id;
    const char *job;
    const char *trace_id;
} ax_dlq_about_t;

/* Copy `msg` (value unchanged) to the dead-letter topic with headers
 * ax.reason, ax.source.topic, ax.source.partition, ax.source.offset,
 * ax.service and, from `about` (may be NULL), ax.instance.id, ax.job and
 * ax.trace.id for what it knows. The value is truncated to `max_bytes`.
 * Tracked by `d`. */
int ax_kafka_dlq(rd_kafka_t *producer, const char *dlq_topic, const rd_kafka_message_t *msg,
                 const char *reason, const char *service, const ax_dlq_about_t *about,
                 size_t max_bytes, ax_delivery_t *d, char *errbuf, size_t errlen);

/* Add about's known fields to h as ax.instance.id, ax.job, ax.trace.id. */
void ax_kafka_dlq_about(rd_kafka_headers_t *h, const ax_dlq_about_t *about);

/* Synchronously commit, per partition, the highest offset+1 among msgs. */
int ax_kafka_commit_msgs(rd_kafka_t *consumer, rd_kafka_message_t **msgs, size_t n,
                         char *errbuf, size_t errlen);
/* Store the same offsets for the consumer's auto commit (a consumer made with
 * ax_kafka_batching_t.commit_interval_ms > 0); AX_ERR_IO when a partition is
 * no longer assigned (its new owner sees those records again). */
int ax_kafka_store_msgs(rd_kafka_t *consumer, rd_kafka_message_t **msgs, size_t n,
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

/* The partitions of the topics the services read and write in one place
 * (submit, callback, results, dlq) when not given: as many as the lanes',
 * at most AX_SERVICE_PARTITIONS. Their readers are a few triggers and
 * callbacks (and the results' readers), not the executors; each partition
 * a producer batch or a transaction touches costs the broker a request (and
 * in a transaction a verification and a marker), so every one of them
 * beyond their readers is paid per batch for nothing (docs/DEPLOYMENT.md,
 * "Sizing"; BENCHMARKS.md, "Issue #13: partitions of the service topics"). */
#define AX_SERVICE_PARTITIONS 2
int ax_kafka_service_partitions(int lane_partitions);
/* The suffixes of a deployment's service topics (topic.prefix + suffix):
 * submit, callback, results, dlq — the ones `service_partitions` sizes. */
#define AX_KAFKA_SERVICE_TOPICS_N 4
extern const char *const ax_kafka_service_topics[AX_KAFKA_SERVICE_TOPICS_N];
/* Create the ax topics (prefix from conf): the default group's dispatch
 * lanes with `partitions` partitions (executors scale to that many),
 * submit, callback, results and dlq with `service_partitions` (0:
 * ax_kafka_service_partitions(partitions)); `replication` replicas (0:
 * ax_kafka_replication_default, with its min.insync.replicas) and
 * max.message.bytes = ax_kafka_record_max(conf); existing topics are left
 * as they are. */
int ax_kafka_create_topics(const ax_conf_t *conf, int partitions, int service_partitions,
                           int replication, char *errbuf, size_t errlen);
/* Delete every topic ax_kafka_create_topics() creates for conf's prefix
 * (submit, callback, results, dlq and the default group's five dispatch
 * lanes), and first the consumer groups <prefix><groups[i]> (they must have
 * no members). Topics and groups that do not exist are not errors. 0 when
 * all is gone; AX_ERR_IO (the last failure in errbuf) when Kafka refused
 * or did not answer something; the rest is still attempted. */
int ax_kafka_delete_topics(const ax_conf_t *conf, const char *const *groups, size_t ngroups,
                           char *errbuf, size_t errlen);
/* Create the topics `names` (full names, prefix included) with `partitions`
 * partitions, `replication` replicas, min.insync.replicas = min_insync
 * (0: the broker's default) and max.message.bytes =
 * ax_kafka_record_max(conf), in one admin request; existing
 * topics are left as they are. AX_ERR_INVALID for invalid arguments
 * (nothing is created), AX_ERR_IO when Kafka refused or did not answer. */
int ax_kafka_create_topic_names(const ax_conf_t *conf, const char *const *names, size_t n,
                                int partitions, int replication, int min_insync, char *errbuf,
                                size_t errlen);
/* The replication of new topics on the cluster conf points at (its size
 * from its metadata, 10 s at most, in *ret_brokers): replication factor 3
 * and min.insync.replicas 2 on 3 brokers or more, else 1 and 1. AX_ERR_IO
 * when the cluster does not answer. */
int ax_kafka_replication_default(const ax_conf_t *conf, int *ret_repl, int *ret_isr,
                                 int *ret_brokers, char *errbuf, size_t errlen);

#endif
