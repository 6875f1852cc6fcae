/*
 * dlq.c — axctl dlq list | replay: the dead-letter topic <prefix>dlq.
 *
 * Two kinds of records land there: messages a service could not process
 * (undecodable, unknown job, ...: the original bytes, headers ax.reason and
 * ax.source.topic/partition/offset), and final failures (ax.kind =
 * final_failure: the instance's Result record, after its retries).
 *
 * replay P:O re-offers a record: a rejected message is produced again, as
 * it was, to its source topic (after the cause was fixed); a final failure
 * becomes a new submission of the same job (or inline command) with the same
 * payload — a new instance with its own attempts and outcome, its trace id
 * the old one + "-replay".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/kafka.h"
#include "axctl.h"

static const char *hdr(rd_kafka_message_t *m, const char *name, char *buf, size_t len) {
    rd_kafka_headers_t *h = NULL;
    const void *v;
    size_t n;
    if (rd_kafka_message_headers(m, &h) || !h ||
        rd_kafka_header_get_last(h, name, &v, &n) != RD_KAFKA_RESP_ERR_NO_ERROR || !v)
        return NULL;
    snprintf(buf, len, "%.*s", (int)n, (const char *)v);
    return buf;
}

/* A consumer without a group, assigned to `parts` (offsets set). */
static rd_kafka_t *reader(rd_kafka_topic_partition_list_t *parts) {
    char err[512];
    rd_kafka_conf_t *kc = rd_kafka_conf_new();
    for (size_t i = 0; i < conf.n_kafka; i++)
        if (rd_kafka_conf_set(kc, conf.kafka[i].key, conf.kafka[i].value, err, sizeof err) !=
            RD_KAFKA_CONF_OK) {
            fprintf(stderr, "axctl: kafka.%s: %s\n", conf.kafka[i].key, err);
            exit(2);
        }
    rd_kafka_conf_set(kc, "group.id", "axctl-dlq", err, sizeof err);
    rd_kafka_conf_set(kc, "enable.auto.commit", "false", err, sizeof err);
    rd_kafka_conf_set(kc, "enable.partition.eof", "true", err, sizeof err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "axctl: %s\n", err);
        exit(1);
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_assign(rk, parts);
    return rk;
}

static int partitions(const char *topic) {
    char err[512];
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "axctl-dlq", err, sizeof err);
    if (!rk) {
        fprintf(stderr, "axctl: %s\n", err);
        exit(2);
    }
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
    int n = -1;
    if (rd_kafka_metadata(rk, 0, t, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (md->topic_cnt == 1 && !md->topics[0].err)
            n = md->topics[0].partition_cnt;
        rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(t);
    rd_kafka_destroy(rk);
    if (n < 0) {
        fprintf(stderr, "axctl: topic %s not found\n", topic);
        exit(1);
    }
    return n;
}

static void print_record(rd_kafka_message_t *m) {
    char kind[64], reason[600], st[256], sp[32], so[32], inst[32];
    int64_t ts = rd_kafka_message_timestamp(m, NULL);
    const char *k = hdr(m, "ax.kind", kind, sizeof kind);
    const char *why = hdr(m, "ax.reason", reason, sizeof reason);
    printf("%d:%lld  %lld  %s  ", (int)m->partition, (long long)m->offset, (long long)ts,
           k ? k : "rejected");
    if (k && strcmp(k, "final_failure") == 0)
        printf("instance %s", hdr(m, "ax.instance.id", inst, sizeof inst) ?: "?");
    else
        printf("from %s [%s] @%s", hdr(m, "ax.source.topic", st, sizeof st) ?: "?",
               hdr(m, "ax.source.partition", sp, sizeof sp) ?: "?",
               hdr(m, "ax.source.offset", so, sizeof so) ?: "?");
    printf("  %s\n", why ? why : "");
}

static int dlq_list(int argc, char **argv) {
    int64_t limit = 100;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc)
            limit = parse_int(argv[++i], "--limit");
        else
            die_usagef("dlq list: unknown option '%s'", argv[i]);
    }
    char topic[256];
    ax_conf_topic(&conf, "dlq", topic, sizeof topic);
    int np = partitions(topic);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(np);
    for (int p = 0; p < np; p++)
        rd_kafka_topic_partition_list_add(l, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_t *rk = reader(l);
    int eof = 0;
    int64_t shown = 0;
    while (eof < np && shown < limit) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 5000);
        if (!m)
            break;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
            eof++;
        else if (!m->err) {
            print_record(m);
            shown++;
        } else
            fprintf(stderr, "axctl: %s\n", rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
    }
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return 0;
}

/* Resubmit the instance of a final-failure record. */
static int replay_instance(const char *id) {
    ax_pg_t *pg = pg_open();
    const char *p[] = {id};
    PGresult *r = q(pg,
                    "SELECT job_name, to_json(command)::text, encode(payload, 'hex'), timeout_ms,"
                    "  priority, trace_id FROM job_instance WHERE id = $1::bigint",
                    1, p);
    if (PQntuples(r) != 1) {
        fprintf(stderr, "axctl: instance %s no longer exists\n", id);
        return 1;
    }
    ax_submit_t s;
    ax_submit_init(&s);
    char trace[200];
    snprintf(trace, sizeof trace, "%.150s-replay", PQgetvalue(r, 0, 5));
    s.trace_id = trace;
    s.timeout_ms = ax_pg_int(r, 0, 3);
    s.priority = (int32_t)ax_pg_int(r, 0, 4);
    const char *hex = PQgetvalue(r, 0, 2);
    size_t plen = strlen(hex) / 2;
    uint8_t *payload = malloc(plen + 1);
    for (size_t i = 0; payload && i < plen; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        payload[i] = (uint8_t)v;
    }
    s.payload = payload;
    s.payload_len = plen;
    if (PQgetisnull(r, 0, 0)) {
        fprintf(stderr, "axctl: instance %s is an inline command; resubmit it with axctl submit\n",
                id);
        free(payload);
        return 1;
    }
    s.job = PQgetvalue(r, 0, 0);
    char err[512], topic[256];
    void *buf;
    size_t len;
    if (ax_submit_encode(&s, &buf, &len) < 0) {
        free(payload);
        return 1;
    }
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "axctl", err, sizeof err);
    ax_delivery_t d = {0};
    int rc = rk ? ax_kafka_produce(rk, ax_conf_topic(&conf, "submit", topic, sizeof topic),
                                   trace, strlen(trace), buf, len, NULL, &d, err, sizeof err)
                : -1;
    if (rc == 0)
        rc = ax_kafka_wait(rk, &d, 35000);
    free(buf);
    free(payload);
    if (rk)
        rd_kafka_destroy(rk);
    if (rc < 0) {
        fprintf(stderr, "axctl: replay not acknowledged by Kafka: %s\n", err);
        return 1;
    }
    printf("instance %s resubmitted as trace %s\n", id, trace);
    return 0;
}

static int dlq_replay(int argc, char **argv) {
    if (argc != 1 || !strchr(argv[0], ':'))
        die_usage("dlq replay PARTITION:OFFSET");
    char pbuf[32];
    snprintf(pbuf, sizeof pbuf, "%.*s", (int)(strchr(argv[0], ':') - argv[0]), argv[0]);
    int part = (int)parse_int(pbuf, "PARTITION");
    int64_t off = parse_int(strchr(argv[0], ':') + 1, "OFFSET");
    char topic[256];
    ax_conf_topic(&conf, "dlq", topic, sizeof topic);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, part)->offset = off;
    rd_kafka_t *rk = reader(l);
    rd_kafka_message_t *m = NULL;
    for (int tries = 0; tries < 3 && !m; tries++) {
        m = rd_kafka_consumer_poll(rk, 5000);
        if (m && (m->err || m->offset != off)) {
            rd_kafka_message_destroy(m);
            m = NULL;
            break;
        }
    }
    int rc = 1;
    if (!m) {
        fprintf(stderr, "axctl: no record at %s %d:%lld\n", topic, part, (long long)off);
    } else {
        char kind[64], st[256], inst[32];
        const char *k = hdr(m, "ax.kind", kind, sizeof kind);
        if (k && strcmp(k, "final_failure") == 0) {
            rc = hdr(m, "ax.instance.id", inst, sizeof inst) ? replay_instance(inst) : 1;
        } else if (hdr(m, "ax.source.topic", st, sizeof st)) {
            char err[512];
            rd_kafka_t *p = ax_kafka_producer_new(&conf, "axctl", err, sizeof err);
            ax_delivery_t d = {0};
            rc = p ? ax_kafka_produce(p, st, m->key, m->key_len, m->payload, m->len, NULL, &d, err,
                                      sizeof err)
                   : -1;
            if (rc == 0)
                rc = ax_kafka_wait(p, &d, 35000);
            if (p)
                rd_kafka_destroy(p);
            if (rc == 0)
                printf("record %d:%lld produced again to %s\n", part, (long long)off, st);
            else
                fprintf(stderr, "axctl: %s\n", err);
            rc = rc == 0 ? 0 : 1;
        } else {
            fprintf(stderr, "axctl: record %d:%lld has no source to replay to\n", part,
                    (long long)off);
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return rc;
}

int cmd_dlq(int argc, char **argv) {
    if (argc >= 1 && strcmp(argv[0], "list") == 0)
        return dlq_list(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "replay") == 0)
        return dlq_replay(argc - 1, argv + 1);
    die_usage("dlq list [--limit N] | dlq replay PARTITION:OFFSET");
}
