/*
 * bench_e2e — end-to-end throughput and latency of the whole pipeline:
 * produces N inline submissions of a command (default `true`) to
 * <prefix>submit, waits until every instance's final outcome is published,
 * and reports submissions/s, completed instances/s, and the
 * scheduled→finished latency percentiles measured by PostgreSQL's clock.
 *
 * Usage: bench_e2e [--config FILE] [--set k=v] N [COMMAND ARG...]
 * Needs the three services running against the same configuration.
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

int main(int argc, char **argv) {
    ax_conf_t conf;
    ax_conf_from_args(&conf, &argc, argv, "bench_e2e", "Usage: bench_e2e N [COMMAND ARG...]\n", NULL);
    if (argc < 2) {
        fprintf(stderr, "usage: bench_e2e N [COMMAND ARG...]\n");
        return 2;
    }
    long long n_ll = 0;
    if (!bench_int_arg("bench_e2e", "N", argv[1], 0, LONG_MAX, &n_ll))
        return 2;
    long n = (long)n_ll;
    char *def_cmd[] = {"true", NULL};
    char **cmd = argc > 2 ? argv + 2 : def_cmd;
    size_t cmd_len = argc > 2 ? (size_t)(argc - 2) : 1;
    char err[512], topic[256], run[40], trace[96];
    if (ax_codec_init(err, sizeof err) < 0)
        return 1;
    ax_random_hex(run, 6);
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "bench", err, sizeof err);
    ax_pg_t *pg = ax_pg_new(&conf, "bench", err, sizeof err);
    if (!rk || !pg || ax_pg_ensure(pg, err, sizeof err) < 0) {
        fprintf(stderr, "bench_e2e: %s\n", err);
        return 1;
    }
    ax_conf_topic(&conf, "submit", topic, sizeof topic);
    ax_delivery_t d = {0};
    int64_t t0 = ax_mono_ms();
    for (long i = 0; i < n; i++) {
        ax_submit_t s;
        ax_submit_init(&s);
        s.command = cmd;
        s.command_len = cmd_len;
        snprintf(trace, sizeof trace, "bench-%s-%ld", run, i);
        s.trace_id = trace;
        void *buf;
        size_t len;
        if (ax_submit_encode(&s, &buf, &len) < 0)
            return 1;
        if (ax_kafka_produce(rk, topic, trace, strlen(trace), buf, len, NULL, &d, err, sizeof err) < 0) {
            fprintf(stderr, "bench_e2e: %s\n", err);
            return 1;
        }
        free(buf);
        rd_kafka_poll(rk, 0);
    }
    if (ax_kafka_wait(rk, &d, 60000) < 0) {
        fprintf(stderr, "bench_e2e: submissions not acknowledged\n");
        return 1;
    }
    int64_t t_submit = ax_mono_ms() - t0;
    char like[64];
    snprintf(like, sizeof like, "bench-%s-%%", run);
    const char *p[] = {like};
    long done = 0;
    while (done < n) {
        PGresult *r;
        if (ax_pg_exec(pg, "SELECT count(*) FROM job_instance WHERE trace_id LIKE $1"
                           " AND result_published_at IS NOT NULL",
                       1, p, NULL, NULL, &r, err, sizeof err) < 0) {
            fprintf(stderr, "bench_e2e: %s\n", err);
            return 1;
        }
        done = atol(PQgetvalue(r, 0, 0));
        PQclear(r);
        if (done < n)
            usleep(50 * 1000);
        if (ax_mono_ms() - t0 > 600000) {
            fprintf(stderr, "bench_e2e: only %ld of %ld finished in 600 s\n", done, n);
            return 1;
        }
    }
    int64_t t_all = ax_mono_ms() - t0;
    PGresult *r;
    if (ax_pg_exec(pg,
                   "SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY"
                   "  extract(epoch FROM finished_at - scheduled_at) * 1000),"
                   "  count(*) FILTER (WHERE outcome = 'SUCCESS')"
                   " FROM job_instance WHERE trace_id LIKE $1",
                   1, p, NULL, NULL, &r, err, sizeof err) < 0) {
        fprintf(stderr, "bench_e2e: %s\n", err);
        return 1;
    }
    printf("instances=%ld submit_ms=%lld submit_per_s=%.0f total_ms=%lld completed_per_s=%.0f "
           "latency_ms_p50_p99=%s success=%s\n",
           n, (long long)t_submit, n * 1000.0 / (double)(t_submit ? t_submit : 1),
           (long long)t_all, n * 1000.0 / (double)t_all, PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
    PQclear(r);
    ax_pg_destroy(pg);
    rd_kafka_destroy(rk);
    ax_codec_shutdown();
    ax_conf_free(&conf);
    return 0;
}
