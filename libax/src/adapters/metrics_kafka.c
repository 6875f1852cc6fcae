/*
 * metrics_kafka.c — librdkafka's statistics as ax_kafka_* metrics (see
 * ax/metrics_http.h). The statistics callback (on the thread polling the
 * handle) parses the JSON with jansson into a fixed snapshot per handle
 * type (producer, consumer); the scrape renders the last snapshots under
 * the same mutex. Bounded: two handle types, at most KSTATS_TOPICS topics
 * (a consumer's subscriptions) with their lag summed over partitions.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/kafka.h"
#include "ax/metrics_http.h"

#define KSTATS_TOPICS 64

typedef struct {
    int seen;
    double replyq, msg_cnt, msg_size, tx, rx, txmsgs, rxmsgs, outbuf, waitresp;
    size_t ntopics;
    char topic[KSTATS_TOPICS][256];
    double lag[KSTATS_TOPICS];
} kclient_t;

struct ax_kstats {
    pthread_mutex_t mu;
    kclient_t client[2]; /* producer, consumer */
};

static const char *const client_names[] = {"producer", "consumer"};

static double num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : 0;
}

static void parse_brokers(kclient_t *c, json_t *brokers) {
    const char *k;
    json_t *b;
    json_object_foreach(brokers, k, b) {
        c->outbuf += num(b, "outbuf_cnt");
        c->waitresp += num(b, "waitresp_cnt");
    }
}

static void parse_topics(kclient_t *c, json_t *topics) {
    const char *name;
    json_t *t;
    json_object_foreach(topics, name, t) {
        if (c->ntopics >= KSTATS_TOPICS)
            break;
        const char *pk;
        json_t *p;
        double lag = 0;
        int any = 0;
        json_object_foreach(json_object_get(t, "partitions"), pk, p) {
            double l = num(p, "consumer_lag");
            if (atoi(pk) < 0 || l < 0)
                continue;
            lag += l;
            any = 1;
        }
        if (!any)
            continue;
        snprintf(c->topic[c->ntopics], sizeof c->topic[0], "%s", name);
        c->lag[c->ntopics++] = lag;
    }
}

static void on_stats(rd_kafka_t *rk, const char *json, size_t len, void *arg) {
    ax_kstats_t *k = arg;
    json_t *root = json_loadb(json, len, 0, NULL);
    if (!root)
        return;
    kclient_t c = {0};
    int idx = rd_kafka_type(rk) == RD_KAFKA_CONSUMER ? 1 : 0;
    c.seen = 1;
    c.replyq = num(root, "replyq");
    c.msg_cnt = num(root, "msg_cnt");
    c.msg_size = num(root, "msg_size");
    c.tx = num(root, "tx");
    c.rx = num(root, "rx");
    c.txmsgs = num(root, "txmsgs");
    c.rxmsgs = num(root, "rxmsgs");
    parse_brokers(&c, json_object_get(root, "brokers"));
    if (idx == 1)
        parse_topics(&c, json_object_get(root, "topics"));
    json_decref(root);
    pthread_mutex_lock(&k->mu);
    k->client[idx] = c;
    pthread_mutex_unlock(&k->mu);
}

typedef struct {
    const char *name, *help;
    ax_metric_type_t type;
    size_t off;
} kfamily_t;

#define KOFF(f) offsetof(kclient_t, f)
static const kfamily_t kfamilies[] = {
    {"ax_kafka_queue_ops", "Operations (callbacks, events) waiting in the client's queue.",
     AX_METRIC_GAUGE, KOFF(replyq)},
    {"ax_kafka_queue_messages", "Messages waiting in the producer's queues to be sent.",
     AX_METRIC_GAUGE, KOFF(msg_cnt)},
    {"ax_kafka_queue_bytes", "Bytes of the messages waiting in the producer's queues.",
     AX_METRIC_GAUGE, KOFF(msg_size)},
    {"ax_kafka_requests_total", "Requests sent to Kafka brokers.", AX_METRIC_COUNTER, KOFF(tx)},
    {"ax_kafka_responses_total", "Responses received from Kafka brokers.", AX_METRIC_COUNTER,
     KOFF(rx)},
    {"ax_kafka_messages_sent_total", "Messages sent (produced) to Kafka brokers.",
     AX_METRIC_COUNTER, KOFF(txmsgs)},
    {"ax_kafka_messages_received_total", "Messages received (consumed) from Kafka brokers.",
     AX_METRIC_COUNTER, KOFF(rxmsgs)},
    {"ax_kafka_broker_outbuf_requests", "Requests waiting to be sent, all brokers.",
     AX_METRIC_GAUGE, KOFF(outbuf)},
    {"ax_kafka_broker_inflight_requests", "Requests sent and awaiting a response, all brokers.",
     AX_METRIC_GAUGE, KOFF(waitresp)},
};

static void collect_kafka(ax_mwriter_t *w, void *arg) {
    ax_kstats_t *k = arg;
    pthread_mutex_lock(&k->mu);
    if (k->client[0].seen || k->client[1].seen)
        for (size_t f = 0; f < AX_ARRAY_SIZE(kfamilies); f++) {
            ax_mw_family(w, kfamilies[f].name, kfamilies[f].type, kfamilies[f].help);
            for (size_t i = 0; i < 2; i++) {
                if (!k->client[i].seen)
                    continue;
                const char *lab[] = {"client", client_names[i], NULL};
                double v = *(const double *)((const char *)&k->client[i] + kfamilies[f].off);
                ax_mw_sample(w, kfamilies[f].name, lab, v);
            }
        }
    const kclient_t *c = &k->client[1];
    if (c->seen) {
        ax_mw_family(w, "ax_kafka_consumer_lag_messages", AX_METRIC_GAUGE,
                     "Messages behind the partitions' high watermark, summed per topic over the "
                     "partitions assigned to this consumer.");
        for (size_t i = 0; i < c->ntopics; i++) {
            const char *lab[] = {"topic", c->topic[i], NULL};
            ax_mw_sample(w, "ax_kafka_consumer_lag_messages", lab, c->lag[i]);
        }
    }
    pthread_mutex_unlock(&k->mu);
}

static void kstats_free(void *arg) {
    ax_kstats_t *k = arg;
    pthread_mutex_destroy(&k->mu);
    free(k);
}

ax_kstats_t *ax_metrics_add_kafka(ax_metrics_t *m, const char *client_id) {
    if (!m)
        return NULL;
    ax_kstats_t *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    pthread_mutex_init(&k->mu, NULL);
    if (ax_metrics_collector(m, collect_kafka, k, kstats_free) < 0)
        return NULL;
    ax_kafka_set_stats(client_id, on_stats, k);
    return k;
}
