/*
 * bench_broker — what the Kafka broker's CPU pays for: records or batches.
 * Produces N records of SIZE bytes (idempotent, acks=all, as every ax
 * producer) to a topic of its own, to its partitions in turn, with
 * librdkafka's batch.num.messages = BATCH per partition batch (0: as large
 * as they come), then reads them back with a consumer of a new group; the
 * broker's CPU over both (utime + stime of its process from /proc) is the
 * figure, in µs per record and per partition batch. ROUNDS rounds, one line
 * each, then the median (BENCHMARKS.md, "Issue #13: partitions of the
 * service topics"). librdkafka 2.0.2 sends one produce request per
 * partition batch. No assertions: speed depends on the machine.
 *
 * Usage: bench_broker [--config F] [--set k=v]... [--partitions P] [--rounds R]
 *                     N SIZE BATCH
 *
 * The topic is <topic.prefix>bench_broker.<pid> with P partitions (default
 * 8), deleted at the end. The broker is the local kafka.Kafka process
 * (bench_common.h kafka_pid); none found: exit 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/prog.h"
#include "bench_common.h"

static const char usage[] =
    "Usage: bench_broker [--config F] [--set k=v]... [--partitions P] [--rounds R] N SIZE BATCH\n";

static int produce(const ax_conf_t *conf, const char *topic, long n, int size, int parts) {
    char err[512];
    rd_kafka_t *rk = ax_kafka_producer_new(conf, "bench-broker", err, sizeof err);
    if (!rk) {
        fprintf(stderr, "bench_broker: %s\n", err);
        return -1;
    }
    char *buf = malloc((size_t)size);
    if (!buf) {
        rd_kafka_destroy(rk);
        return -1;
    }
    memset(buf, 'x', (size_t)size);
    for (long i = 0; i < n; i++) {
        rd_kafka_resp_err_t e;
        while ((e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
                                      RD_KAFKA_V_PARTITION((int32_t)(i % parts)),
                                      RD_KAFKA_V_VALUE(buf, (size_t)size),
                                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END)) ==
               RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(rk, 1);
        if (e) {
            fprintf(stderr, "bench_broker: produce: %s\n", rd_kafka_err2str(e));
            break;
        }
        rd_kafka_poll(rk, 0);
    }
    int rc = rd_kafka_flush(rk, 120000) ? -1 : 0;
    free(buf);
    rd_kafka_destroy(rk);
    return rc;
}

/* The topic and the consumer groups of the run, deleted at the end. */
static void cleanup(const ax_conf_t *conf, const char *topic, char groups[][128], int ngroups) {
    char err[512];
    rd_kafka_t *rk = ax_kafka_producer_new(conf, "bench-broker-admin", err, sizeof err);
    if (!rk) {
        fprintf(stderr, "bench_broker: cleanup: %s\n", err);
        return;
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_DeleteGroup_t *dg[101];
    for (int i = 0; i < ngroups; i++)
        dg[i] = rd_kafka_DeleteGroup_new(groups[i]);
    if (ngroups > 0) {
        rd_kafka_DeleteGroups(rk, dg, (size_t)ngroups, NULL, q);
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
        if (ev)
            rd_kafka_event_destroy(ev);
        rd_kafka_DeleteGroup_destroy_array(dg, (size_t)ngroups);
    }
    rd_kafka_DeleteTopic_t *dt = rd_kafka_DeleteTopic_new(topic);
    rd_kafka_DeleteTopics(rk, &dt, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    if (!ev || rd_kafka_event_error(ev))
        fprintf(stderr, "bench_broker: cleanup: topic %s not deleted\n", topic);
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_DeleteTopic_destroy(dt);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
}

static long consume(const ax_conf_t *conf, const char *topic, long n, char *group) {
    char err[512];
    rd_kafka_t *rk = ax_kafka_consumer_new(conf, group, "bench-broker", err, sizeof err);
    const char *t[] = {topic};
    if (!rk || ax_kafka_subscribe(rk, t, 1, err, sizeof err) < 0) {
        fprintf(stderr, "bench_broker: %s\n", err);
        if (rk)
            rd_kafka_destroy(rk);
        return -1;
    }
    long got = 0;
    int64_t until = bench_mono_us() + 120 * 1000000LL;
    while (got < n && bench_mono_us() < until) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m)
            continue;
        if (!m->err)
            got++;
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return got;
}

int main(int argc, char **argv) {
    ax_conf_t conf;
    ax_conf_from_args(&conf, &argc, argv, "bench_broker", usage, NULL);
    int parts = 8, rounds = 3, ai = 1;
    long long lv = 0;
    for (; ai < argc && strncmp(argv[ai], "--", 2) == 0; ai++) {
        if (strcmp(argv[ai], "--partitions") == 0 && ai + 1 < argc) {
            if (!bench_int_arg("bench_broker", "--partitions", argv[++ai], 1, INT_MAX, &lv))
                return 2;
            parts = (int)lv;
        } else if (strcmp(argv[ai], "--rounds") == 0 && ai + 1 < argc) {
            if (!bench_int_arg("bench_broker", "--rounds", argv[++ai], 1, 100, &lv))
                return 2;
            rounds = (int)lv;
        } else {
            fprintf(stderr, "%s", usage);
            return 2;
        }
    }
    if (argc - ai != 3) {
        fprintf(stderr, "%s", usage);
        return 2;
    }
    long long n_ll = 0, size_ll = 0, batch_ll = 0;
    if (!bench_int_arg("bench_broker", "N", argv[ai], 1, LONG_MAX, &n_ll) ||
        !bench_int_arg("bench_broker", "SIZE", argv[ai + 1], 1, 100000, &size_ll) ||
        !bench_int_arg("bench_broker", "BATCH", argv[ai + 2], 0, INT_MAX, &batch_ll))
        return 2;
    long n = (long)n_ll;
    int size = (int)size_ll, batch = (int)batch_ll;
    /* the producers' batches (a consumer ignores the property) and the
     * consumers' start (a new group reads from the first record) */
    char err[512], v[32];
    snprintf(v, sizeof v, "%d", batch);
    if ((batch > 0 &&
         ax_conf_set(&conf, "kafka.batch.num.messages", v, "bench_broker", err, sizeof err) < 0) ||
        ax_conf_set(&conf, "kafka.auto.offset.reset", "earliest", "bench_broker", err,
                    sizeof err) < 0) {
        fprintf(stderr, "bench_broker: %s\n", err);
        return 2;
    }
    pid_t broker = kafka_pid();
    if (broker <= 0) {
        fprintf(stderr, "bench_broker: no local kafka.Kafka process\n");
        return 1;
    }
    char topic[256];
    snprintf(topic, sizeof topic, "%sbench_broker.%d", conf.topic_prefix, (int)getpid());
    const char *names[] = {topic};
    if (ax_kafka_create_topic_names(&conf, names, 1, parts, 1, 0, err, sizeof err) < 0) {
        fprintf(stderr, "bench_broker: %s\n", err);
        return 1;
    }
    printf("n=%ld size=%d batch=%d partitions=%d\n", n, size, batch, parts);
    double per_rec[100];
    char groups[101][128];
    int rc = 0, done = 0, ngroups = 0;
    /* a first round unmeasured: the broker's JIT and the topic's files */
    for (int r = 0; r <= rounds && rc == 0; r++) {
        long long t0 = proc_ticks(broker);
        int64_t w0 = bench_mono_us();
        if (produce(&conf, topic, n, size, parts) < 0) {
            rc = 1;
            break;
        }
        int64_t w1 = bench_mono_us();
        snprintf(groups[ngroups], sizeof groups[ngroups], "%sbench_broker.%d.%d",
                 conf.topic_prefix, (int)getpid(), r);
        long got = consume(&conf, topic, n, groups[ngroups++]);
        int64_t w2 = bench_mono_us();
        long long t1 = proc_ticks(broker);
        if (got != n) {
            fprintf(stderr, "bench_broker: read %ld of %ld records\n", got, n);
            rc = 1;
            break;
        }
        double cpu_s = (double)(t1 - t0) / (double)sysconf(_SC_CLK_TCK);
        long batches = batch > 0 ? (n + batch - 1) / batch : 0;
        if (r == 0)
            continue;
        per_rec[done++] = cpu_s * 1e6 / (double)n;
        char pb[32] = "-";
        if (batches)
            snprintf(pb, sizeof pb, "%.0f", cpu_s * 1e6 / (double)batches);
        printf("round=%d produce_s=%.2f consume_s=%.2f broker_cpu_s=%.2f us_per_record=%.2f"
               " us_per_batch=%s\n",
               r, (double)(w1 - w0) / 1e6, (double)(w2 - w1) / 1e6, cpu_s,
               cpu_s * 1e6 / (double)n, pb);
    }
    if (done)
        printf("median_us_per_record=%.2f\n", median(per_rec, done));
    cleanup(&conf, topic, groups, ngroups);
    return rc;
}
