/*
 * bench_burst — a burst of N submissions of one defined job, produced as
 * fast as the producer takes them, then (unless --produce-only) waits until
 * every instance of the job is FINISHED and reports: the time to produce,
 * the time to drain (first submission produced → last instance finished),
 * the first-finish latency (first submission produced → first instance
 * finished, both on PostgreSQL's clock), and the leader changes during the
 * burst (ax_leader epoch of <prefix>trigger before and after).
 *
 * Usage: bench_burst [--config FILE] [--set k=v]... [--produce-only] JOB N
 * Used by tests/integration/170_burst.sh (--produce-only) and
 * tests/bench/burst.sh (the benchmark, BENCHMARKS.md "The burst").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/conf.h"
#include "ax/kafka.h"
#include "adapters/pg_raw.h"
#include "bench_common.h"

static int64_t query_int(ax_pg_t *pg, const char *sql, int n, const char *const *p) {
    char err[512];
    PGresult *r;
    if (ax_pg_exec(pg, sql, n, p, NULL, NULL, &r, err, sizeof err) < 0) {
        fprintf(stderr, "bench_burst: %s\n", err);
        exit(1);
    }
    int64_t v = PQntuples(r) ? ax_pg_int(r, 0, 0) : 0;
    PQclear(r);
    return v;
}

int main(int argc, char **argv) {
    ax_conf_t conf;
    static const char usage[] = "Usage: bench_burst [--produce-only] JOB N\n";
    ax_conf_from_args(&conf, &argc, argv, "bench_burst", usage, NULL);
    int produce_only = 0, a = 1;
    if (argc > 1 && strcmp(argv[1], "--produce-only") == 0) {
        produce_only = 1;
        a++;
    }
    if (argc - a != 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *job = argv[a];
    long long n_ll = 0;
    if (!bench_int_arg("bench_burst", "N", argv[a + 1], 1, LONG_MAX, &n_ll))
        return 2;
    long n = (long)n_ll;
    char err[512], topic[256], role[256], run[40], key[96];
    if (ax_codec_init(err, sizeof err) < 0)
        return 1;
    ax_random_hex(run, 6);
    /* big batches, few requests: the burst is produced in seconds */
    ax_conf_set(&conf, "kafka.linger.ms", "20", "bench_burst", err, sizeof err);
    ax_conf_set(&conf, "kafka.batch.num.messages", "10000", "bench_burst", err, sizeof err);
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "bench_burst", err, sizeof err);
    ax_pg_t *pg = ax_pg_new(&conf, "bench_burst", err, sizeof err);
    if (!rk || !pg || ax_pg_ensure(pg, err, sizeof err) < 0) {
        fprintf(stderr, "bench_burst: %s\n", err);
        return 1;
    }
    ax_conf_topic(&conf, "submit", topic, sizeof topic);
    ax_conf_topic(&conf, "trigger", role, sizeof role);
    const char *rp[] = {role};
    const char *jp[] = {job};
    int64_t epoch0 = query_int(pg, "SELECT epoch FROM ax_leader WHERE role = $1", 1, rp);
    int64_t before = query_int(pg, "SELECT count(*) FROM job_instance i JOIN job j ON j.id = i.job_id"
                                   " WHERE j.name = $1", 1, jp);
    int64_t t0_pg = query_int(pg, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                              0, NULL);
    ax_delivery_t d = {0};
    int64_t t0 = ax_mono_ms();
    for (long i = 0; i < n; i++) {
        ax_submit_t s;
        ax_submit_init(&s);
        s.job = (char *)job;
        int klen = snprintf(key, sizeof key, "burst-%s-%ld", run, i);
        void *buf;
        size_t len;
        if (ax_submit_encode(&s, &buf, &len) < 0)
            return 1;
        for (;;) {
            int rc = ax_kafka_produce(rk, topic, key, (size_t)klen, buf, len, NULL, &d, err,
                                      sizeof err);
            if (rc == 0)
                break;
            rd_kafka_poll(rk, 10); /* the queue is full: let it drain */
            if (ax_mono_ms() - t0 > 120000) {
                fprintf(stderr, "bench_burst: %s\n", err);
                return 1;
            }
        }
        free(buf);
        rd_kafka_poll(rk, 0);
    }
    if (ax_kafka_wait(rk, &d, 120000) < 0) {
        fprintf(stderr, "bench_burst: submissions not acknowledged\n");
        return 1;
    }
    int64_t produce_ms = ax_mono_ms() - t0;
    printf("run=%s submissions=%ld produce_ms=%lld start_ms=%lld\n", run, n, (long long)produce_ms,
           (long long)t0_pg);
    fflush(stdout);
    if (produce_only)
        goto out;
    char since[32];
    snprintf(since, sizeof since, "%lld", (long long)t0_pg);
    const char *fp[] = {job, since};
    int64_t first_ms = -1;
    for (;;) {
        int64_t done = query_int(pg, "SELECT count(*) FROM job_instance i JOIN job j"
                                     " ON j.id = i.job_id WHERE j.name = $1 AND i.state = 'FINISHED'",
                                 1, jp);
        if (first_ms < 0)
            first_ms = query_int(pg,
                                 "SELECT coalesce((extract(epoch FROM min(i.finished_at)) * 1000)::bigint"
                                 " - $2::bigint, -1) FROM job_instance i JOIN job j ON j.id = i.job_id"
                                 " WHERE j.name = $1 AND i.finished_at >= to_timestamp($2::bigint / 1000.0)",
                                 2, fp);
        if (done >= before + n)
            break;
        if (ax_mono_ms() - t0 > 3600000) {
            fprintf(stderr, "bench_burst: only %lld of %ld finished in an hour\n",
                    (long long)(done - before), n);
            return 1;
        }
        usleep(200 * 1000);
    }
    int64_t drain_ms = query_int(pg,
                                 "SELECT (extract(epoch FROM max(i.finished_at)) * 1000)::bigint - $2::bigint"
                                 " FROM job_instance i JOIN job j ON j.id = i.job_id WHERE j.name = $1",
                                 2, fp);
    int64_t epoch1 = query_int(pg, "SELECT epoch FROM ax_leader WHERE role = $1", 1, rp);
    printf("drain_ms=%lld first_finish_ms=%lld leader_changes=%lld finished_per_s=%.0f\n",
           (long long)drain_ms, (long long)first_ms, (long long)(epoch1 - epoch0),
           n * 1000.0 / (double)(drain_ms > 0 ? drain_ms : 1));
out:
    ax_pg_destroy(pg);
    rd_kafka_destroy(rk);
    ax_codec_shutdown();
    ax_conf_free(&conf);
    return 0;
}
