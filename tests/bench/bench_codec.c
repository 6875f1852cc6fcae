/*
 * bench_codec — the wire codec (libax/src/adapters/codec.c) per record:
 * ns per encode and per decode of the records the no-op path carries
 * (Submit, Dispatch, Attempt, Result), each filled as the services fill
 * them for a plugin job (a trace id, a job name, a two-string command, a
 * short payload), and beside them the avro-c (generic value) encoders and
 * decoders the direct ones replaced (codec.c, ax__*_avro; "-" where a
 * record has none: Submit is encoded and Result decoded through avro-c
 * only). Each figure is measured REPS times over N operations; one line
 * per record with the medians. No assertions: speed depends on the
 * machine. Build with -O2 (CMAKE_BUILD_TYPE=RelWithDebInfo).
 *
 * Usage: bench_codec [N, default 200000]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "adapters/avro_guard.h"
#include "bench_common.h"

#define REPS 5

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct rec {
    const char *name;
    int (*enc)(const void *m, void **buf, size_t *len);
    int (*dec)(const void *buf, size_t len); /* decodes and clears */
    const void *m;
    int (*enc_avro)(const void *m, void **buf, size_t *len); /* NULL: none */
    int (*dec_avro)(const void *buf, size_t len);
} rec_t;

static char *argv2[] = {"/usr/lib/ax/plugins/ax-noop.so", "arg", NULL};
static uint8_t payload[] = "{\"n\":1}";

static int enc_submit(const void *m, void **b, size_t *l) { return ax_submit_encode(m, b, l); }
static int enc_dispatch(const void *m, void **b, size_t *l) { return ax_dispatch_encode(m, b, l); }
static int enc_attempt(const void *m, void **b, size_t *l) { return ax_attempt_encode(m, b, l); }
static int enc_result(const void *m, void **b, size_t *l) { return ax_result_encode(m, b, l); }
static int enca_dispatch(const void *m, void **b, size_t *l) {
    return ax__dispatch_encode_avro(m, b, l);
}
static int enca_attempt(const void *m, void **b, size_t *l) {
    return ax__attempt_encode_avro(m, b, l);
}
static int enca_result(const void *m, void **b, size_t *l) { return ax__result_encode_avro(m, b, l); }
static int deca_submit(const void *b, size_t l) {
    ax_submit_t m;
    int rc = ax__submit_decode_avro(b, l, &m, NULL, 0);
    if (!rc)
        ax_submit_clear(&m);
    return rc;
}
static int deca_dispatch(const void *b, size_t l) {
    ax_dispatch_t m;
    int rc = ax__dispatch_decode_avro(b, l, &m, NULL, 0);
    if (!rc)
        ax_dispatch_clear(&m);
    return rc;
}
static int deca_attempt(const void *b, size_t l) {
    ax_attempt_t m;
    int rc = ax__attempt_decode_avro(b, l, &m, NULL, 0);
    if (!rc)
        ax_attempt_clear(&m);
    return rc;
}
static int dec_submit(const void *b, size_t l) {
    ax_submit_t m;
    int rc = ax_submit_decode(b, l, &m, NULL, 0);
    if (!rc)
        ax_submit_clear(&m);
    return rc;
}
static int dec_dispatch(const void *b, size_t l) {
    ax_dispatch_t m;
    int rc = ax_dispatch_decode(b, l, &m, NULL, 0);
    if (!rc)
        ax_dispatch_clear(&m);
    return rc;
}
static int dec_attempt(const void *b, size_t l) {
    ax_attempt_t m;
    int rc = ax_attempt_decode(b, l, &m, NULL, 0);
    if (!rc)
        ax_attempt_clear(&m);
    return rc;
}
static int dec_result(const void *b, size_t l) {
    ax_result_t m;
    int rc = ax_result_decode(b, l, &m, NULL, 0);
    if (!rc)
        ax_result_clear(&m);
    return rc;
}

/* Median ns per call of enc (or dec on buf), "-" when there is none. */
static void time_enc(int (*enc)(const void *, void **, size_t *), const void *m, long n,
                     char *out, size_t outlen) {
    int64_t t[REPS];
    if (!enc) {
        snprintf(out, outlen, "-");
        return;
    }
    for (int k = 0; k < REPS; k++) {
        int64_t t0 = now_ns();
        for (long i = 0; i < n; i++) {
            void *b;
            size_t l;
            if (enc(m, &b, &l))
                exit(1);
            free(b);
        }
        t[k] = (now_ns() - t0) / n;
    }
    qsort(t, REPS, sizeof t[0], cmp_i64);
    snprintf(out, outlen, "%lld", (long long)t[REPS / 2]);
}

static void time_dec(int (*dec)(const void *, size_t), const void *buf, size_t len, long n,
                     char *out, size_t outlen) {
    int64_t t[REPS];
    if (!dec) {
        snprintf(out, outlen, "-");
        return;
    }
    for (int k = 0; k < REPS; k++) {
        int64_t t0 = now_ns();
        for (long i = 0; i < n; i++)
            if (dec(buf, len))
                exit(1);
        t[k] = (now_ns() - t0) / n;
    }
    qsort(t, REPS, sizeof t[0], cmp_i64);
    snprintf(out, outlen, "%lld", (long long)t[REPS / 2]);
}

static void measure(const rec_t *r, long n) {
    void *buf = NULL;
    size_t len = 0;
    if (r->enc(r->m, &buf, &len)) {
        fprintf(stderr, "bench_codec: %s: cannot encode\n", r->name);
        exit(1);
    }
    char e[32], d[32], ea[32], da[32];
    time_enc(r->enc, r->m, n, e, sizeof e);
    time_enc(r->enc_avro, r->m, n, ea, sizeof ea);
    time_dec(r->dec, buf, len, n, d, sizeof d);
    time_dec(r->dec_avro, buf, len, n, da, sizeof da);
    printf("record=%s bytes=%zu encode_ns=%s encode_avro_c_ns=%s decode_ns=%s "
           "decode_avro_c_ns=%s\n",
           r->name, len, e, ea, d, da);
    free(buf);
}

int main(int argc, char **argv) {
    long long n_ll = 200000;
    if (argc > 1 && !bench_int_arg("bench_codec", "N", argv[1], 1, LONG_MAX, &n_ll))
        return 2;
    long n = (long)n_ll;
    char err[256];
    if (ax_codec_init(err, sizeof err)) {
        fprintf(stderr, "usage: bench_codec [N]\n");
        return 2;
    }
    const char *trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    ax_submit_t s;
    ax_submit_init(&s);
    s.job = "bench-exec-12345";
    s.trace_id = (char *)trace;
    ax_dispatch_t d = {.instance_id = 123456789, .attempt = 1, .job = "bench-exec-12345",
                       .handler_kind = "plugin", .command = argv2, .command_len = 2,
                       .payload = payload, .payload_len = sizeof payload - 1,
                       .timeout_ms = 30000, .nominal_time_ms = 1764619200000,
                       .due_at_ms = 1764619200000, .priority = 2, .trace_id = (char *)trace,
                       .idempotency_key = "inst-123456789", .epoch = 7};
    ax_attempt_t a = {.instance_id = 123456789, .attempt = 1, .worker = "bench-1-executor0",
                      .outcome = AX_OUTCOME_SUCCESS, .started_at_ms = 1764619200001,
                      .finished_at_ms = 1764619200002, .trace_id = (char *)trace,
                      .output = "", .kind = AX_ATTEMPT_RUN};
    ax_result_t res = {.instance_id = 123456789, .job = "bench-exec-12345", .attempts = 1,
                       .outcome = AX_OUTCOME_SUCCESS, .output = "",
                       .finished_at_ms = 1764619200002, .trace_id = (char *)trace};
    const rec_t recs[] = {{"Submit", enc_submit, dec_submit, &s, NULL, deca_submit},
                          {"Dispatch", enc_dispatch, dec_dispatch, &d, enca_dispatch, deca_dispatch},
                          {"Attempt", enc_attempt, dec_attempt, &a, enca_attempt, deca_attempt},
                          {"Result", enc_result, dec_result, &res, enca_result, NULL}};
    printf("n=%ld reps=%d\n", n, REPS);
    for (size_t i = 0; i < sizeof recs / sizeof recs[0]; i++)
        measure(&recs[i], n);
    ax_codec_shutdown();
    return 0;
}
