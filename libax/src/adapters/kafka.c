/*
 * kafka.c — the Kafka adapter. librdkafka is driven from the services'
 * libevent loops: queue events are signalled through a pipe
 * (rd_kafka_queue_io_event_enable) so no thread of ours ever blocks on Kafka.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/kafka.h"
#include "ax/lane.h"
#include "ax/log.h"

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    ax_delivery_t *d = m->_private;
    if (!d)
        return;
    d->pending--;
    if (m->err) {
        d->failed++;
        if (!d->err)
            d->err = m->err;
    }
    if (d->on_message)
        d->on_message(d, m);
    if (d->on_report)
        d->on_report(d, m->err);
}

int ax_kafka_quiet_logs;

int64_t ax_kafka_chunk_hint(int64_t seq, int64_t chunk) {
    return chunk > 0 && seq >= 0 ? seq / chunk + 1 : 0;
}

/* The producers' partitioner: a delivery's part_hint, else murmur2 of the
 * key (random without one: murmur2_random, the "partitioner" these
 * producers had before). */
static int32_t partition_cb(const rd_kafka_topic_t *rkt, const void *key, size_t keylen,
                            int32_t partition_cnt, void *rkt_opaque, void *msg_opaque) {
    const ax_delivery_t *d = msg_opaque;
    if (d && d->part_hint > 0 && partition_cnt > 0)
        return (int32_t)((d->part_hint - 1) % partition_cnt);
    return rd_kafka_msg_partitioner_murmur2_random(rkt, key, keylen, partition_cnt, rkt_opaque,
                                                   msg_opaque);
}

int ax_kafka_partitioner_set(const ax_conf_t *conf) {
    for (size_t i = 0; i < conf->n_kafka; i++)
        if (strcmp(conf->kafka[i].key, "partitioner") == 0)
            return 1;
    return 0;
}

/* Install partition_cb unless kafka.partitioner chose one. */
static void set_partitioner(rd_kafka_conf_t *kc, const ax_conf_t *conf) {
    if (ax_kafka_partitioner_set(conf))
        return;
    rd_kafka_topic_conf_t *tc = rd_kafka_conf_get_default_topic_conf(kc);
    if (tc) {
        rd_kafka_topic_conf_set_partitioner_cb(tc, partition_cb);
        return;
    }
    tc = rd_kafka_topic_conf_new();
    rd_kafka_topic_conf_set_partitioner_cb(tc, partition_cb);
    rd_kafka_conf_set_default_topic_conf(kc, tc);
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    if (ax_kafka_quiet_logs)
        ax_debug("kafka %s: %s", fac, buf);
    else if (level <= 3)
        ax_error("kafka %s: %s", fac, buf);
    else if (level <= 5)
        ax_warn("kafka %s: %s", fac, buf);
    else
        ax_debug("kafka %s: %s", fac, buf);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    /* Transport errors are normal while a broker restarts; librdkafka retries. */
    if (ax_kafka_quiet_logs)
        ax_debug("kafka: %s: %s", rd_kafka_err2name(err), reason);
    else if (err == RD_KAFKA_RESP_ERR__FATAL)
        ax_error("kafka fatal error: %s", reason);
    else
        ax_warn("kafka: %s: %s", rd_kafka_err2name(err), reason);
}

int64_t ax_kafka_record_max(const ax_conf_t *conf) {
    return conf->message_max_bytes + AX_KAFKA_HEADROOM;
}

int ax_kafka_is_primer(const rd_kafka_message_t *m) {
    return m && !m->err && m->len == 0 && m->key && m->key_len == sizeof AX_KAFKA_PRIMER_KEY - 1 &&
           memcmp(m->key, AX_KAFKA_PRIMER_KEY, m->key_len) == 0;
}

int ax_kafka_err_record_refused(rd_kafka_resp_err_t err) {
    return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
           err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE ||
           err == RD_KAFKA_RESP_ERR_INVALID_RECORD;
}

/* A producer's batches stay within what the topics accept (a batch is
 * checked as one record set against the topic's max.message.bytes). */
static int producer_batch(rd_kafka_conf_t *kc, const ax_conf_t *conf, char *errbuf,
                          size_t errlen) {
    char v[32], err[512];
    for (size_t i = 0; i < conf->n_kafka; i++)
        if (strcmp(conf->kafka[i].key, "batch.size") == 0)
            return 0; /* kafka.batch.size given: the operator's choice */
    int64_t b = ax_kafka_record_max(conf);
    snprintf(v, sizeof v, "%lld", (long long)(b < 1000000 ? b : 1000000));
    if (rd_kafka_conf_set(kc, "batch.size", v, err, sizeof err) != RD_KAFKA_CONF_OK)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "batch.size: %s", err);
    return 0;
}

/* Statistics (ax_kafka_set_stats): one hook per process, set before the
 * handles it concerns are made, so a plain static like ax_kafka_quiet_logs. */
static struct {
    ax_kafka_stats_fn fn;
    void *arg;
    char client_id[128];
} stats_hook;

void ax_kafka_set_stats(const char *client_id, ax_kafka_stats_fn fn, void *arg) {
    snprintf(stats_hook.client_id, sizeof stats_hook.client_id, "%s", client_id ? client_id : "");
    stats_hook.arg = arg;
    stats_hook.fn = fn;
}

static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    (void)opaque;
    if (stats_hook.fn)
        stats_hook.fn(rk, json, len, stats_hook.arg);
    return 0; /* librdkafka frees json */
}

/* defaults, then derived (ax keys turned into librdkafka settings; may be
 * NULL), then the operator's kafka.* keys: those win. */
static rd_kafka_conf_t *base_conf_derived(const ax_conf_t *conf, const char *client_id,
                                          const char *const *defaults,
                                          const char *const *derived, char *errbuf,
                                          size_t errlen) {
    rd_kafka_conf_t *kc = rd_kafka_conf_new();
    char err[512];
    /* Every client sends at once (TCP_NODELAY): with Nagle's algorithm a
     * small request behind one not yet acknowledged waited for the ACK.
     * Measured at 1,000 jobs/s: fire-to-start p99 18.5 -> 12.7 ms and the
     * broker 23 -> 15 % of a core (BENCHMARKS.md, "Issue #13: Nagle's delay"). */
    static const char *const common[] = {"socket.nagle.disable", "true", NULL, NULL};
    const char *const *lists[] = {common, defaults, derived};
    for (size_t li = 0; li < AX_ARRAY_SIZE(lists); li++)
        for (const char *const *d = lists[li]; d && d[0]; d += 2)
            if (rd_kafka_conf_set(kc, d[0], d[1], err, sizeof err) != RD_KAFKA_CONF_OK) {
                ax_seterr(errbuf, errlen, AX_ERR_INVALID, "kafka default %s: %s", d[0], err);
                goto fail;
            }
    if (client_id && rd_kafka_conf_set(kc, "client.id", client_id, err, sizeof err))
        goto fail;
    /* One maximum end to end (message.max.bytes, ax_kafka_record_max):
     * what this client may produce or must be able to fetch. librdkafka
     * derives fetch.max.bytes and receive.message.max.bytes from it. */
    char mmb[32];
    snprintf(mmb, sizeof mmb, "%lld", (long long)ax_kafka_record_max(conf));
    if (rd_kafka_conf_set(kc, "message.max.bytes", mmb, err, sizeof err) != RD_KAFKA_CONF_OK) {
        ax_seterr(errbuf, errlen, AX_ERR_INVALID, "message.max.bytes: %s", err);
        goto fail;
    }
    int stats = stats_hook.fn && client_id && strcmp(client_id, stats_hook.client_id) == 0;
    if (stats) {
        rd_kafka_conf_set(kc, "statistics.interval.ms", "5000", err, sizeof err);
        rd_kafka_conf_set_stats_cb(kc, stats_cb);
    }
    for (size_t i = 0; i < conf->n_kafka; i++)
        if (rd_kafka_conf_set(kc, conf->kafka[i].key, conf->kafka[i].value, err, sizeof err) !=
            RD_KAFKA_CONF_OK) {
            ax_seterr(errbuf, errlen, AX_ERR_INVALID, "kafka.%s: %s", conf->kafka[i].key, err);
            goto fail;
        }
    rd_kafka_conf_set_log_cb(kc, log_cb);
    rd_kafka_conf_set_error_cb(kc, error_cb);
    return kc;
fail:
    rd_kafka_conf_destroy(kc);
    return NULL;
}

static rd_kafka_conf_t *base_conf(const ax_conf_t *conf, const char *client_id,
                                  const char *const *defaults, char *errbuf, size_t errlen) {
    return base_conf_derived(conf, client_id, defaults, NULL, errbuf, errlen);
}

rd_kafka_t *ax_kafka_producer_new(const ax_conf_t *conf, const char *client_id, char *errbuf,
                                  size_t errlen) {
    static const char *const defaults[] = {
        "enable.idempotence", "true", "acks", "all", "partitioner", "murmur2_random",
        "message.timeout.ms", "30000", "socket.keepalive.enable", "true",
        "reconnect.backoff.max.ms", "5000", NULL, NULL};
    char linger[24];
    snprintf(linger, sizeof linger, "%lld", (long long)conf->producer_linger_ms);
    const char *const derived[] = {"linger.ms", linger, NULL, NULL};
    rd_kafka_conf_t *kc = base_conf_derived(conf, client_id, defaults, derived, errbuf, errlen);
    if (!kc)
        return NULL;
    if (producer_batch(kc, conf, errbuf, errlen) < 0) {
        rd_kafka_conf_destroy(kc);
        return NULL;
    }
    rd_kafka_conf_set_dr_msg_cb(kc, dr_msg_cb);
    set_partitioner(kc, conf);
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, err, sizeof err);
    if (!rk) {
        ax_seterr(errbuf, errlen, AX_ERR_INVALID, "kafka producer: %s", err);
        rd_kafka_conf_destroy(kc);
    }
    return rk;
}

rd_kafka_t *ax_kafka_txn_producer_new(const ax_conf_t *conf, const char *client_id,
                                      const char *txn_id, int linger_ms, int timeout_ms,
                                      char *errbuf, size_t errlen) {
    char linger[24];
    snprintf(linger, sizeof linger, "%d", linger_ms < 0 ? 0 : linger_ms);
    const char *const defaults[] = {
        "enable.idempotence", "true", "acks", "all", "linger.ms", linger,
        "partitioner", "murmur2_random", "message.timeout.ms", "30000",
        "socket.keepalive.enable", "true", "reconnect.backoff.max.ms", "5000",
        "transaction.timeout.ms", "60000", NULL, NULL};
    rd_kafka_conf_t *kc = base_conf(conf, client_id, defaults, errbuf, errlen);
    if (!kc)
        return NULL;
    if (producer_batch(kc, conf, errbuf, errlen) < 0) {
        rd_kafka_conf_destroy(kc);
        return NULL;
    }
    char err[512];
    if (rd_kafka_conf_set(kc, "transactional.id", txn_id, err, sizeof err) != RD_KAFKA_CONF_OK) {
        ax_seterr(errbuf, errlen, AX_ERR_INVALID, "kafka producer: %s", err);
        rd_kafka_conf_destroy(kc);
        return NULL;
    }
    rd_kafka_conf_set_dr_msg_cb(kc, dr_msg_cb);
    set_partitioner(kc, conf);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, err, sizeof err);
    if (!rk) {
        ax_seterr(errbuf, errlen, AX_ERR_INVALID, "kafka producer: %s", err);
        rd_kafka_conf_destroy(kc);
        return NULL;
    }
    rd_kafka_error_t *e = rd_kafka_init_transactions(rk, timeout_ms);
    if (e) {
        ax_seterr(errbuf, errlen, AX_ERR_IO, "kafka init_transactions: %s",
                  rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        rd_kafka_destroy(rk);
        return NULL;
    }
    return rk;
}

int ax_kafka_txn_begin(rd_kafka_t *rk, char *errbuf, size_t errlen) {
    rd_kafka_error_t *e = rd_kafka_begin_transaction(rk);
    if (!e)
        return AX_OK;
    int rc = rd_kafka_error_is_fatal(e) ? AX_ERR_CONFLICT : AX_ERR_IO;
    ax_seterr(errbuf, errlen, rc, "kafka begin_transaction: %s", rd_kafka_error_string(e));
    rd_kafka_error_destroy(e);
    return rc;
}

int ax_kafka_txn_end_abort(rd_kafka_t *rk, int timeout_ms, char *errbuf, size_t errlen) {
    rd_kafka_error_t *e = rd_kafka_abort_transaction(rk, timeout_ms);
    if (!e)
        return AX_OK;
    /* none open: nothing to end */
    if (rd_kafka_error_code(e) == RD_KAFKA_RESP_ERR__STATE && !rd_kafka_error_is_fatal(e) &&
        strstr(rd_kafka_error_string(e), "in state Ready")) {
        rd_kafka_error_destroy(e);
        return AX_OK;
    }
    ax_seterr(errbuf, errlen, AX_ERR_CONFLICT, "kafka abort_transaction: %s",
              rd_kafka_error_string(e));
    rd_kafka_error_destroy(e);
    return AX_ERR_CONFLICT;
}

void ax_kafka_txn_abort(rd_kafka_t *rk, int timeout_ms) {
    char err[512];
    if (ax_kafka_txn_end_abort(rk, timeout_ms, err, sizeof err) < 0)
        ax_warn("%s", err);
}

int ax_kafka_txn_commit(rd_kafka_t *rk, int timeout_ms, char *errbuf, size_t errlen) {
    int64_t deadline = ax_mono_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - ax_mono_ms();
        rd_kafka_error_t *e = rd_kafka_commit_transaction(rk, left > 1000 ? (int)left : 1000);
        if (!e)
            return AX_OK;
        int rc;
        char aerr[512] = "";
        if (rd_kafka_error_is_fatal(e) ||
            rd_kafka_error_code(e) == RD_KAFKA_RESP_ERR__FENCED ||
            rd_kafka_error_code(e) == RD_KAFKA_RESP_ERR_PRODUCER_FENCED) {
            rc = AX_ERR_CONFLICT;
        } else if (!rd_kafka_error_txn_requires_abort(e) && rd_kafka_error_is_retriable(e) &&
                   ax_mono_ms() < deadline) {
            rd_kafka_error_destroy(e);
            continue;
        } else {
            /* abortable, or retriable but out of time: end it */
            left = deadline - ax_mono_ms();
            rc = ax_kafka_txn_end_abort(rk, left > 5000 ? (int)left : 5000, aerr, sizeof aerr) < 0
                     ? AX_ERR_CONFLICT
                     : AX_ERR_IO;
        }
        ax_seterr(errbuf, errlen, rc, "kafka commit_transaction: %s%s%s%s",
                  rd_kafka_error_string(e), rc == AX_ERR_IO ? " (aborted)" : "",
                  aerr[0] ? "; " : "", aerr);
        rd_kafka_error_destroy(e);
        return rc;
    }
}

static atomic_ulong rebalances;

unsigned long ax_kafka_rebalances(void) {
    return atomic_load(&rebalances);
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque) {
    int coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    rd_kafka_error_t *e = NULL;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        ax_info("kafka: %d partition(s) assigned", parts->cnt);
        if (coop)
            e = rd_kafka_incremental_assign(rk, parts);
        else
            rd_kafka_assign(rk, parts);
    } else {
        ax_info("kafka: %d partition(s) revoked", parts->cnt);
        if (coop)
            e = rd_kafka_incremental_unassign(rk, parts);
        else
            rd_kafka_assign(rk, NULL);
    }
    atomic_fetch_add(&rebalances, 1); /* after the change: a reader sees the new assignment */
    if (e) {
        ax_warn("kafka rebalance: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
}

rd_kafka_t *ax_kafka_consumer_new(const ax_conf_t *conf, const char *group, const char *client_id,
                                  char *errbuf, size_t errlen) {
    return ax_kafka_batch_consumer_new(conf, group, client_id, NULL, errbuf, errlen);
}

rd_kafka_t *ax_kafka_batch_consumer_new(const ax_conf_t *conf, const char *group,
                                        const char *client_id, const ax_kafka_batching_t *b,
                                        char *errbuf, size_t errlen) {
    static const char *const defaults[] = {
        "enable.auto.commit", "false", "enable.auto.offset.store", "false",
        "auto.offset.reset", "earliest", "partition.assignment.strategy", "cooperative-sticky",
        "enable.partition.eof", "false", "socket.keepalive.enable", "true",
        "reconnect.backoff.max.ms", "5000", "session.timeout.ms", "10000",
        "heartbeat.interval.ms", "1000", NULL, NULL};
    char wait[24], minb[24], every[24];
    const char *derived[9] = {NULL};
    size_t nd = 0;
    if (b && b->fetch_wait_ms > 0) {
        snprintf(wait, sizeof wait, "%d", b->fetch_wait_ms);
        snprintf(minb, sizeof minb, "%d", b->fetch_min_bytes > 0 ? b->fetch_min_bytes : 1);
        derived[nd++] = "fetch.wait.max.ms";
        derived[nd++] = wait;
        derived[nd++] = "fetch.min.bytes";
        derived[nd++] = minb;
    }
    if (b && b->commit_interval_ms > 0) {
        /* only offsets stored by ax_kafka_store_msgs are committed */
        snprintf(every, sizeof every, "%d", b->commit_interval_ms);
        derived[nd++] = "enable.auto.commit";
        derived[nd++] = "true";
        derived[nd++] = "auto.commit.interval.ms";
        derived[nd++] = every;
    }
    rd_kafka_conf_t *kc = base_conf_derived(conf, client_id, defaults, derived, errbuf, errlen);
    if (!kc)
        return NULL;
    char err[512];
    if (rd_kafka_conf_set(kc, "group.id", group, err, sizeof err) != RD_KAFKA_CONF_OK) {
        ax_seterr(errbuf, errlen, AX_ERR_INVALID, "kafka group.id: %s", err);
        rd_kafka_conf_destroy(kc);
        return NULL;
    }
    rd_kafka_conf_set_rebalance_cb(kc, rebalance_cb);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof err);
    if (!rk) {
        ax_seterr(errbuf, errlen, AX_ERR_INVALID, "kafka consumer: %s", err);
        rd_kafka_conf_destroy(kc);
        return NULL;
    }
    rd_kafka_poll_set_consumer(rk);
    return rk;
}

rd_kafka_t *ax_kafka_reader_new(const ax_conf_t *conf, const char *client_id, char *errbuf,
                                size_t errlen) {
    static const char *const defaults[] = {
        "enable.auto.commit", "false", "enable.auto.offset.store", "false",
        "auto.offset.reset", "earliest", "enable.partition.eof", "true",
        "socket.keepalive.enable", "true", "reconnect.backoff.max.ms", "5000", NULL, NULL};
    rd_kafka_conf_t *kc = base_conf(conf, client_id, defaults, errbuf, errlen);
    if (!kc)
        return NULL;
    char err[512], group[300];
    snprintf(group, sizeof group, "%s-reader", client_id ? client_id : "ax");
    if (rd_kafka_conf_set(kc, "group.id", group, err, sizeof err) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(kc, "isolation.level", "read_committed", err, sizeof err) !=
            RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(kc, "enable.partition.eof", "true", err, sizeof err) !=
            RD_KAFKA_CONF_OK) {
        ax_seterr(errbuf, errlen, AX_ERR_INVALID, "kafka reader: %s", err);
        rd_kafka_conf_destroy(kc);
        return NULL;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof err);
    if (!rk) {
        ax_seterr(errbuf, errlen, AX_ERR_INVALID, "kafka reader: %s", err);
        rd_kafka_conf_destroy(kc);
        return NULL;
    }
    rd_kafka_poll_set_consumer(rk);
    return rk;
}

int ax_kafka_subscribe(rd_kafka_t *rk, const char *const *topics, size_t n, char *errbuf,
                       size_t errlen) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)n);
    for (size_t i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(l, topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (err)
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "kafka subscribe: %s", rd_kafka_err2str(err));
    return 0;
}

int ax_kafka_produce(rd_kafka_t *rk, const char *topic, const void *key, size_t key_len,
                     const void *value, size_t value_len, rd_kafka_headers_t *hdrs,
                     ax_delivery_t *d, char *errbuf, size_t errlen) {
    for (int tries = 0;; tries++) {
        rd_kafka_resp_err_t err;
        if (hdrs)
            err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
                                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                    RD_KAFKA_V_KEY(key, key_len),
                                    RD_KAFKA_V_VALUE((void *)value, value_len),
                                    RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(d), RD_KAFKA_V_END);
        else
            err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
                                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                    RD_KAFKA_V_KEY(key, key_len),
                                    RD_KAFKA_V_VALUE((void *)value, value_len),
                                    RD_KAFKA_V_OPAQUE(d), RD_KAFKA_V_END);
        if (!err) {
            if (d)
                d->pending++;
            return 0;
        }
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL && tries < 1000) {
            rd_kafka_poll(rk, 10);
            continue;
        }
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "kafka produce to %s: %s", topic,
                         rd_kafka_err2str(err));
    }
}

int ax_kafka_wait(rd_kafka_t *rk, ax_delivery_t *d, int timeout_ms) {
    int64_t deadline = ax_mono_ms() + timeout_ms;
    while (d->pending > 0 && ax_mono_ms() < deadline)
        rd_kafka_poll(rk, 20);
    return d->pending == 0 && d->failed == 0 ? 0 : AX_ERR_IO;
}

void ax_kafka_dlq_about(rd_kafka_headers_t *h, const ax_dlq_about_t *about) {
    if (!about)
        return;
    if (about->instance_id > 0) {
        char id[32];
        snprintf(id, sizeof id, "%" PRId64, about->instance_id);
        rd_kafka_header_add(h, "ax.instance.id", -1, id, -1);
    }
    if (about->job && *about->job)
        rd_kafka_header_add(h, "ax.job", -1, about->job, -1);
    if (about->trace_id && *about->trace_id)
        rd_kafka_header_add(h, "ax.trace.id", -1, about->trace_id, -1);
}

int ax_kafka_dlq(rd_kafka_t *producer, const char *dlq_topic, const rd_kafka_message_t *msg,
                 const char *reason, const char *service, const ax_dlq_about_t *about,
                 size_t max_bytes, ax_delivery_t *d, char *errbuf, size_t errlen) {
    rd_kafka_headers_t *h = rd_kafka_headers_new(8);
    char part[16], off[32];
    snprintf(part, sizeof part, "%" PRId32, msg->partition);
    snprintf(off, sizeof off, "%" PRId64, msg->offset);
    rd_kafka_header_add(h, "ax.reason", -1, reason, -1);
    rd_kafka_header_add(h, "ax.source.topic", -1, rd_kafka_topic_name(msg->rkt), -1);
    rd_kafka_header_add(h, "ax.source.partition", -1, part, -1);
    rd_kafka_header_add(h, "ax.source.offset", -1, off, -1);
    rd_kafka_header_add(h, "ax.service", -1, service, -1);
    ax_kafka_dlq_about(h, about);
    size_t len = msg->len < max_bytes ? msg->len : max_bytes;
    int rc = ax_kafka_produce(producer, dlq_topic, msg->key, msg->key_len, msg->payload, len, h, d,
                              errbuf, errlen);
    if (rc < 0)
        rd_kafka_headers_destroy(h);
    return rc;
}

/* The next offset of every partition of msgs[] (errors and NULLs left out). */
static rd_kafka_topic_partition_list_t *next_offsets(rd_kafka_message_t **msgs, size_t n) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)n);
    for (size_t i = 0; i < n; i++) {
        const rd_kafka_message_t *m = msgs[i];
        if (!m || m->err)
            continue;
        const char *t = rd_kafka_topic_name(m->rkt);
        rd_kafka_topic_partition_t *p = rd_kafka_topic_partition_list_find(l, t, m->partition);
        if (!p)
            p = rd_kafka_topic_partition_list_add(l, t, m->partition);
        if (p->offset < m->offset + 1)
            p->offset = m->offset + 1;
    }
    return l;
}

int ax_kafka_commit_msgs(rd_kafka_t *consumer, rd_kafka_message_t **msgs, size_t n,
                         char *errbuf, size_t errlen) {
    if (n == 0)
        return 0;
    rd_kafka_topic_partition_list_t *l = next_offsets(msgs, n);
    rd_kafka_resp_err_t err = l->cnt ? rd_kafka_commit(consumer, l, 0) : 0;
    rd_kafka_topic_partition_list_destroy(l);
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET)
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "kafka commit: %s", rd_kafka_err2str(err));
    return 0;
}

int ax_kafka_store_msgs(rd_kafka_t *consumer, rd_kafka_message_t **msgs, size_t n,
                        char *errbuf, size_t errlen) {
    if (n == 0)
        return 0;
    rd_kafka_topic_partition_list_t *l = next_offsets(msgs, n);
    rd_kafka_resp_err_t err = l->cnt ? rd_kafka_offsets_store(consumer, l) : 0;
    int lost = 0;
    for (int i = 0; !err && i < l->cnt; i++)
        if (l->elems[i].err)
            lost++; /* no longer assigned: its new owner sees the records again */
    rd_kafka_topic_partition_list_destroy(l);
    if (err)
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "kafka offsets store: %s",
                         rd_kafka_err2str(err));
    if (lost)
        return ax_seterr(errbuf, errlen, AX_ERR_IO,
                         "kafka offsets store: %d partition(s) no longer assigned", lost);
    return 0;
}

struct ax_kafka_watch {
    int fds[2];
    struct event *ev_pipe;
    struct event *ev_timer;
    rd_kafka_queue_t *q;
    void (*cb)(void *);
    void *arg;
};

static void watch_pipe(evutil_socket_t fd, short what, void *arg) {
    ax_kafka_watch_t *w = arg;
    char buf[256];
    while (read(fd, buf, sizeof buf) > 0)
        ;
    w->cb(w->arg);
}

static void watch_timer(evutil_socket_t fd, short what, void *arg) {
    ax_kafka_watch_t *w = arg;
    w->cb(w->arg);
}

ax_kafka_watch_t *ax_kafka_watch(struct event_base *base, rd_kafka_queue_t *q, int fallback_ms,
                                 void (*cb)(void *arg), void *arg) {
    ax_kafka_watch_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    if (pipe2(w->fds, O_NONBLOCK | O_CLOEXEC) < 0) {
        free(w);
        return NULL;
    }
    w->q = q;
    w->cb = cb;
    w->arg = arg;
    w->ev_pipe = event_new(base, w->fds[0], EV_READ | EV_PERSIST, watch_pipe, w);
    w->ev_timer = event_new(base, -1, EV_PERSIST, watch_timer, w);
    struct timeval tv = AX_TV_MS(fallback_ms);
    event_add(w->ev_pipe, NULL);
    event_add(w->ev_timer, &tv);
    rd_kafka_queue_io_event_enable(q, w->fds[1], "1", 1);
    return w;
}

void ax_kafka_watch_kick(ax_kafka_watch_t *w) {
    /* through the pipe, not event_active: an event activated from a
     * callback runs in the same pass, before any timer that fell due */
    if (w && write(w->fds[1], "1", 1) < 0) {
        /* full: a wake-up is pending anyway */
    }
}

void ax_kafka_watch_free(ax_kafka_watch_t *w) {
    if (!w)
        return;
    rd_kafka_queue_io_event_enable(w->q, -1, NULL, 0);
    event_free(w->ev_pipe);
    event_free(w->ev_timer);
    close(w->fds[0]);
    close(w->fds[1]);
    free(w);
}

const char *const ax_kafka_service_topics[AX_KAFKA_SERVICE_TOPICS_N] = {"submit", "callback",
                                                                       "results", "dlq"};

/* The topics ax_kafka_create_topics() creates for conf's prefix: the
 * service topics (the first AX_SERVICE_TOPICS_N) and the default group's
 * five lanes. */
enum { AX_SERVICE_TOPICS_N = AX_KAFKA_SERVICE_TOPICS_N,
       AX_TOPICS_N = AX_SERVICE_TOPICS_N + AX_PRIORITIES };
static size_t ax_topic_names(const ax_conf_t *conf, char names[AX_TOPICS_N][256],
                             const char *np[AX_TOPICS_N]) {
    size_t n = 0;
    for (size_t i = 0; i < AX_SERVICE_TOPICS_N; i++, n++)
        np[n] = ax_conf_topic(conf, ax_kafka_service_topics[i], names[n], sizeof names[n]);
    for (int p = 0; p < AX_PRIORITIES; p++, n++)
        np[n] = ax_conf_dispatch_topic(conf, NULL, p, names[n], sizeof names[n]);
    return n;
}

int ax_kafka_service_partitions(int lane_partitions) {
    return lane_partitions < AX_SERVICE_PARTITIONS ? lane_partitions : AX_SERVICE_PARTITIONS;
}

int ax_kafka_create_topics(const ax_conf_t *conf, int partitions, int service_partitions,
                           int replication, char *errbuf, size_t errlen) {
    char names[AX_TOPICS_N][256];
    const char *np[AX_TOPICS_N];
    size_t n = ax_topic_names(conf, names, np);
    int isr = 0, brokers;
    if (replication <= 0) {
        int rc = ax_kafka_replication_default(conf, &replication, &isr, &brokers, errbuf, errlen);
        if (rc < 0)
            return rc;
    }
    if (service_partitions <= 0)
        service_partitions = ax_kafka_service_partitions(partitions);
    /* submit, callback, results, dlq; then the lanes */
    int rc = ax_kafka_create_topic_names(conf, np, AX_SERVICE_TOPICS_N, service_partitions,
                                         replication, isr, errbuf, errlen);
    if (rc == 0)
        rc = ax_kafka_create_topic_names(conf, np + AX_SERVICE_TOPICS_N, n - AX_SERVICE_TOPICS_N,
                                         partitions, replication, isr, errbuf, errlen);
    return rc;
}

/* Wait for one admin result on q; AX_ERR_IO (with the reason) when there is
 * none in time or the request as a whole failed. */
static rd_kafka_event_t *admin_wait(rd_kafka_queue_t *q, const char *what, int *rc, char *errbuf,
                                    size_t errlen) {
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 60000);
    if (!ev) {
        *rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "%s: no answer from Kafka in 60 s", what);
    } else if (rd_kafka_event_error(ev)) {
        *rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "%s: %s", what, rd_kafka_event_error_string(ev));
        rd_kafka_event_destroy(ev);
        ev = NULL;
    }
    return ev;
}

int ax_kafka_delete_topics(const ax_conf_t *conf, const char *const *groups, size_t ngroups,
                           char *errbuf, size_t errlen) {
    char err[512], names[AX_TOPICS_N][256];
    const char *np[AX_TOPICS_N];
    size_t n = ax_topic_names(conf, names, np);
    if (ngroups > 0 && !groups)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "delete topics: no group names");
    rd_kafka_t *rk = ax_kafka_producer_new(conf, "ax-admin", errbuf, errlen);
    if (!rk)
        return AX_ERR_INVALID;
    int rc = 0;
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    if (ngroups > 0) {
        rd_kafka_DeleteGroup_t **dg = calloc(ngroups, sizeof *dg);
        if (!dg) {
            rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "delete groups: out of memory");
        } else {
            char g[512];
            for (size_t i = 0; i < ngroups; i++) {
                snprintf(g, sizeof g, "%s%s", conf->topic_prefix ? conf->topic_prefix : "",
                         groups[i]);
                dg[i] = rd_kafka_DeleteGroup_new(g);
            }
            rd_kafka_AdminOptions_t *opt =
                rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DELETEGROUPS);
            rd_kafka_AdminOptions_set_request_timeout(opt, 30000, err, sizeof err);
            rd_kafka_DeleteGroups(rk, dg, ngroups, opt, q);
            rd_kafka_event_t *ev = admin_wait(q, "delete groups", &rc, errbuf, errlen);
            if (ev) {
                const rd_kafka_DeleteGroups_result_t *res = rd_kafka_event_DeleteGroups_result(ev);
                size_t cnt = 0;
                const rd_kafka_group_result_t **gr =
                    res ? rd_kafka_DeleteGroups_result_groups(res, &cnt) : NULL;
                for (size_t i = 0; i < cnt; i++) {
                    const rd_kafka_error_t *e = rd_kafka_group_result_error(gr[i]);
                    if (!e || rd_kafka_error_code(e) == RD_KAFKA_RESP_ERR_GROUP_ID_NOT_FOUND)
                        continue;
                    rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "delete group %s: %s",
                                   rd_kafka_group_result_name(gr[i]), rd_kafka_error_string(e));
                }
                rd_kafka_event_destroy(ev);
            }
            rd_kafka_AdminOptions_destroy(opt);
            rd_kafka_DeleteGroup_destroy_array(dg, ngroups);
            free(dg);
        }
    }
    /* The topics, also when a group could not be deleted. */
    rd_kafka_DeleteTopic_t *dt[AX_TOPICS_N];
    for (size_t i = 0; i < n; i++)
        dt[i] = rd_kafka_DeleteTopic_new(np[i]);
    rd_kafka_AdminOptions_t *opt = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DELETETOPICS);
    rd_kafka_AdminOptions_set_operation_timeout(opt, 30000, err, sizeof err);
    rd_kafka_AdminOptions_set_request_timeout(opt, 30000, err, sizeof err);
    rd_kafka_DeleteTopics(rk, dt, n, opt, q);
    rd_kafka_event_t *ev = admin_wait(q, "delete topics", &rc, errbuf, errlen);
    if (ev) {
        const rd_kafka_DeleteTopics_result_t *res = rd_kafka_event_DeleteTopics_result(ev);
        size_t cnt = 0;
        const rd_kafka_topic_result_t **tr =
            res ? rd_kafka_DeleteTopics_result_topics(res, &cnt) : NULL;
        for (size_t i = 0; i < cnt; i++) {
            rd_kafka_resp_err_t e = rd_kafka_topic_result_error(tr[i]);
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR || e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
                continue;
            rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "delete topic %s: %s",
                           rd_kafka_topic_result_name(tr[i]),
                           rd_kafka_topic_result_error_string(tr[i]));
        }
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_AdminOptions_destroy(opt);
    rd_kafka_DeleteTopic_destroy_array(dt, n);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return rc;
}

int ax_kafka_replication_default(const ax_conf_t *conf, int *ret_repl, int *ret_isr,
                                 int *ret_brokers, char *errbuf, size_t errlen) {
    rd_kafka_t *rk = ax_kafka_producer_new(conf, "axctl-admin", errbuf, errlen);
    if (!rk)
        return AX_ERR_INVALID;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, NULL, &md, 10000);
    int rc = 0;
    if (e)
        rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "cluster metadata: %s", rd_kafka_err2str(e));
    else
        *ret_brokers = md->broker_cnt;
    if (rc == 0) {
        *ret_repl = md->broker_cnt >= 3 ? 3 : 1;
        *ret_isr = md->broker_cnt >= 3 ? 2 : 1;
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
    return rc;
}

int ax_kafka_create_topic_names(const ax_conf_t *conf, const char *const *names, size_t n,
                                int partitions, int replication, int min_insync, char *errbuf,
                                size_t errlen) {
    char err[512];
    if (n == 0)
        return 0;
    rd_kafka_NewTopic_t **nt = calloc(n, sizeof *nt);
    if (!nt)
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "create topics: out of memory");
    char mmb[32], isr[16];
    snprintf(mmb, sizeof mmb, "%lld", (long long)ax_kafka_record_max(conf));
    snprintf(isr, sizeof isr, "%d", min_insync);
    for (size_t i = 0; i < n; i++) {
        nt[i] = rd_kafka_NewTopic_new(names[i], partitions, replication, err, sizeof err);
        /* the record maximum every ax client is configured with */
        if (nt[i] && (rd_kafka_NewTopic_set_config(nt[i], "max.message.bytes", mmb) ||
                      (min_insync > 0 &&
                       rd_kafka_NewTopic_set_config(nt[i], "min.insync.replicas", isr)))) {
            snprintf(err, sizeof err, "cannot set max.message.bytes / min.insync.replicas");
            rd_kafka_NewTopic_destroy(nt[i]);
            nt[i] = NULL;
        }
        if (!nt[i]) {
            for (size_t k = 0; k < i; k++)
                rd_kafka_NewTopic_destroy(nt[k]);
            free(nt);
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "create topic %s: %s", names[i],
                             err);
        }
    }
    rd_kafka_t *rk = ax_kafka_producer_new(conf, "axctl-admin", errbuf, errlen);
    if (!rk) {
        for (size_t i = 0; i < n; i++)
            rd_kafka_NewTopic_destroy(nt[i]);
        free(nt);
        return AX_ERR_INVALID;
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opt = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_operation_timeout(opt, 30000, err, sizeof err);
    rd_kafka_AdminOptions_set_request_timeout(opt, 30000, err, sizeof err);
    rd_kafka_CreateTopics(rk, nt, n, opt, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 60000);
    int rc = 0;
    if (!ev) {
        rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "create topics: no answer from Kafka in 60 s");
    } else if (rd_kafka_event_error(ev)) {
        rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "create topics: %s",
                       rd_kafka_event_error_string(ev));
    } else {
        const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(ev);
        size_t cnt;
        const rd_kafka_topic_result_t **tr = rd_kafka_CreateTopics_result_topics(res, &cnt);
        for (size_t i = 0; i < cnt; i++) {
            rd_kafka_resp_err_t e = rd_kafka_topic_result_error(tr[i]);
            if (e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
                ax_info("topic %s exists", rd_kafka_topic_result_name(tr[i]));
            else if (e)
                rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "create topic %s: %s",
                               rd_kafka_topic_result_name(tr[i]),
                               rd_kafka_topic_result_error_string(tr[i]));
            else
                ax_info("topic %s created (%d partitions, replication factor %d)",
                        rd_kafka_topic_result_name(tr[i]), partitions, replication);
        }
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_AdminOptions_destroy(opt);
    rd_kafka_queue_destroy(q);
    for (size_t i = 0; i < n; i++)
        rd_kafka_NewTopic_destroy(nt[i]);
    free(nt);
    rd_kafka_destroy(rk);
    return rc;
}
