/*
 * test_codec_direct.c — the direct encoders of the hot records (codec.c,
 * "direct encoding": ax_dispatch_encode, ax_attempt_encode,
 * ax_result_encode) against the avro-c encoders they replaced
 * (ax__*_encode_avro), both ways: for thousands of records with random
 * field values (lengths 0..300 including multi-byte UTF-8, absent optional
 * fields, numbers at the int/long extremes and around the varint length
 * steps) the bytes are identical, avro-c's decoder (through the guard)
 * reads the direct bytes back to the same record, and a string that is not
 * UTF-8 is refused by both. And the direct decoders (Submit, Dispatch,
 * Attempt id 5) against the avro-c ones (ax__*_decode_avro): on those
 * records and on every one of them mutated (bytes changed at random
 * places, cut short, a byte appended) both accept or both refuse, and what
 * they accept is the same record, field by field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "adapters/avro_guard.h"

#define ROUNDS 3000

/* xorshift64*: the same records every run. */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}

static int64_t rnd_long(void) {
    static const int64_t edge[] = {0, 1, -1, 63, 64, -64, -65, 8191, 8192, INT32_MAX, INT32_MIN,
                                   (int64_t)INT32_MAX + 1, INT64_MAX, INT64_MIN, 1764619200000};
    switch (rnd() % 4) {
    case 0:
        return edge[rnd() % (sizeof edge / sizeof edge[0])];
    case 1:
        return (int64_t)(rnd() % 300);
    default:
        return (int64_t)rnd();
    }
}

static int32_t rnd_int(void) {
    int64_t v = rnd_long();
    return rnd() % 2 ? (int32_t)v : (int32_t)(v % 1000);
}

/* A random UTF-8 string (owned by the pool below), NULL with `nullable`. */
static char *g_pool[64];
static int g_npool;
static char *rnd_str(int nullable) {
    if (nullable && rnd() % 3 == 0)
        return NULL;
    static const char *const pieces[] = {"a", "Z", "0", " ", "\"", "\\", "é", "€", "𝄞", "\t", "x"};
    size_t n = rnd() % 4 == 0 ? rnd() % 300 : rnd() % 12;
    char *s = malloc(n * 4 + 1);
    assert_non_null(s);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
        memcpy(s + k, p, strlen(p));
        k += strlen(p);
    }
    s[k] = '\0';
    assert_true(g_npool < 64);
    g_pool[g_npool++] = s;
    return s;
}

static void pool_free(void) {
    while (g_npool > 0)
        free(g_pool[--g_npool]);
}

/* Both encoders give the same result: the same bytes, or both a refusal. */
static void same(int rc_direct, void *bd, size_t ld, int rc_avro, void *ba, size_t la) {
    assert_int_equal(rc_direct, rc_avro);
    if (rc_direct == 0) {
        assert_int_equal(ld, la);
        assert_memory_equal(bd, ba, ld);
    }
    free(bd);
    free(ba);
}

static void fill_dispatch(ax_dispatch_t *d, char **argv, uint8_t *payload) {
    memset(d, 0, sizeof *d);
    d->instance_id = rnd_long();
    d->attempt = rnd_int();
    d->job = rnd_str(1);
    d->handler_kind = rnd() % 2 ? "plugin" : "http";
    d->command_len = rnd() % 4;
    for (size_t i = 0; i < d->command_len; i++)
        argv[i] = rnd_str(0);
    d->command = d->command_len ? argv : NULL;
    d->payload_len = rnd() % 3 ? rnd() % 200 : 0;
    for (size_t i = 0; i < d->payload_len; i++)
        payload[i] = (uint8_t)rnd();
    d->payload = d->payload_len ? payload : NULL;
    d->timeout_ms = rnd_long();
    d->nominal_time_ms = rnd() % 2 ? 0 : rnd_long();
    d->due_at_ms = rnd_long();
    d->priority = rnd_int();
    d->trace_id = rnd_str(0);
    d->idempotency_key = rnd_str(1);
    d->epoch = rnd_long();
}

static void test_dispatch_direct(void **state) {
    char *argv[4], err[512];
    uint8_t payload[200];
    for (int i = 0; i < ROUNDS; i++) {
        ax_dispatch_t d, out;
        fill_dispatch(&d, argv, payload);
        void *bd = NULL, *ba = NULL;
        size_t ld = 0, la = 0;
        int rd = ax_dispatch_encode(&d, &bd, &ld);
        assert_int_equal(rd, 0);
        /* avro-c (behind the guard) reads the direct bytes back */
        if (ax_dispatch_decode(bd, ld, &out, err, sizeof err))
            fail_msg("round %d: %s", i, err);
        assert_int_equal(out.instance_id, d.instance_id);
        assert_int_equal(out.attempt, d.attempt);
        assert_int_equal(out.command_len, d.command_len);
        assert_int_equal(out.payload_len, d.payload_len);
        assert_int_equal(out.nominal_time_ms, d.nominal_time_ms);
        assert_int_equal(out.epoch, d.epoch);
        assert_string_equal(out.trace_id, d.trace_id);
        assert_true((out.idempotency_key == NULL) == (d.idempotency_key == NULL));
        ax_dispatch_clear(&out);
        int ra = ax__dispatch_encode_avro(&d, &ba, &la);
        same(rd, bd, ld, ra, ba, la);
        pool_free();
    }
}

static void fill_attempt(ax_attempt_t *a) {
    memset(a, 0, sizeof *a);
    a->kind = (ax_attempt_kind_t)(rnd() % 3);
    a->instance_id = rnd_long();
    a->attempt = rnd_int();
    a->worker = rnd_str(0);
    a->outcome = (ax_outcome_t)(rnd() % 4);
    a->exit_code_set = (int)(rnd() % 2);
    a->exit_code = rnd_int();
    a->error_class = rnd_str(1);
    a->error = rnd_str(1);
    a->output = rnd_str(0);
    a->started_at_ms = rnd_long();
    a->finished_at_ms = rnd_long();
    a->trace_id = rnd_str(0);
    a->retryable = (int)(rnd() % 2);
}

static void test_attempt_direct(void **state) {
    char err[512];
    for (int i = 0; i < ROUNDS; i++) {
        ax_attempt_t a, out;
        fill_attempt(&a);
        void *bd = NULL, *ba = NULL;
        size_t ld = 0, la = 0;
        int rd = ax_attempt_encode(&a, &bd, &ld);
        assert_int_equal(rd, 0);
        if (ax_attempt_decode(bd, ld, &out, err, sizeof err))
            fail_msg("round %d: %s", i, err);
        assert_int_equal(out.instance_id, a.instance_id);
        assert_int_equal(out.outcome, a.outcome);
        assert_int_equal(out.kind, a.kind);
        assert_int_equal(out.exit_code_set, a.exit_code_set);
        assert_int_equal(out.retryable, a.retryable);
        assert_int_equal(out.finished_at_ms, a.finished_at_ms);
        assert_string_equal(out.output, a.output);
        ax_attempt_clear(&out);
        int ra = ax__attempt_encode_avro(&a, &ba, &la);
        same(rd, bd, ld, ra, ba, la);
        pool_free();
    }
}

static void fill_result(ax_result_t *r) {
    memset(r, 0, sizeof *r);
    r->instance_id = rnd_long();
    r->job = rnd_str(1);
    r->outcome = (ax_outcome_t)(rnd() % 4);
    r->attempts = rnd_int();
    r->exit_code_set = (int)(rnd() % 2);
    r->exit_code = rnd_int();
    r->error_class = rnd_str(1);
    r->error = rnd_str(1);
    r->output = rnd_str(0);
    r->trace_id = rnd_str(0);
    r->idempotency_key = rnd_str(1);
    r->nominal_time_ms = rnd() % 2 ? 0 : rnd_long();
    r->scheduled_at_ms = rnd_long();
    r->locked_at_ms = rnd() % 2 ? 0 : rnd_long();
    r->running_at_ms = rnd() % 2 ? 0 : rnd_long();
    r->finished_at_ms = rnd_long();
}

static void test_result_direct(void **state) {
    char err[512];
    for (int i = 0; i < ROUNDS; i++) {
        ax_result_t r, out;
        fill_result(&r);
        void *bd = NULL, *ba = NULL;
        size_t ld = 0, la = 0;
        int rd = ax_result_encode(&r, &bd, &ld);
        assert_int_equal(rd, 0);
        if (ax_result_decode(bd, ld, &out, err, sizeof err))
            fail_msg("round %d: %s", i, err);
        assert_int_equal(out.instance_id, r.instance_id);
        assert_int_equal(out.locked_at_ms, r.locked_at_ms);
        assert_int_equal(out.running_at_ms, r.running_at_ms);
        assert_true((out.job == NULL) == (r.job == NULL));
        ax_result_clear(&out);
        int ra = ax__result_encode_avro(&r, &ba, &la);
        same(rd, bd, ld, ra, ba, la);
        pool_free();
    }
}

/* Not UTF-8 (a lone continuation byte, a NUL-free overlong): both refuse. */
static void test_refusals_agree(void **state) {
    static const char *const bad[] = {"a\x80", "\xC0\xAF", "\xED\xA0\x80", "\xF5\x80\x80\x80"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        void *bd = NULL, *ba = NULL;
        size_t ld = 0, la = 0;
        char *argv[4];
        uint8_t payload[200];
        ax_dispatch_t d;
        fill_dispatch(&d, argv, payload);
        d.trace_id = (char *)bad[k];
        int rd = ax_dispatch_encode(&d, &bd, &ld);
        assert_int_equal(rd, AX_ERR_INVALID);
        same(rd, bd, ld, ax__dispatch_encode_avro(&d, &ba, &la), ba, la);
        ax_attempt_t a;
        fill_attempt(&a);
        a.output = (char *)bad[k];
        rd = ax_attempt_encode(&a, &bd, &ld);
        assert_int_equal(rd, AX_ERR_INVALID);
        same(rd, bd, ld, ax__attempt_encode_avro(&a, &ba, &la), ba, la);
        ax_result_t r;
        fill_result(&r);
        r.job = (char *)bad[k];
        rd = ax_result_encode(&r, &bd, &ld);
        assert_int_equal(rd, AX_ERR_INVALID);
        same(rd, bd, ld, ax__result_encode_avro(&r, &ba, &la), ba, la);
        pool_free();
    }
}


/* ---- decoders: direct against avro-c ------------------------------------------------ */

static int str_eq(const char *a, const char *b) {
    return (a == NULL) == (b == NULL) && (!a || strcmp(a, b) == 0);
}

static int strv_eq(char **a, size_t na, char **b, size_t nb) {
    if (na != nb || (a == NULL) != (b == NULL))
        return 0;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return 0;
    return !a || (a[na] == NULL && b[nb] == NULL);
}

static int bytes_eq(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
    return na == nb && (a == NULL) == (b == NULL) && (!na || memcmp(a, b, na) == 0);
}

static void dispatch_eq(const ax_dispatch_t *a, const ax_dispatch_t *b) {
    assert_int_equal(a->instance_id, b->instance_id);
    assert_int_equal(a->attempt, b->attempt);
    assert_true(str_eq(a->job, b->job));
    assert_true(str_eq(a->handler_kind, b->handler_kind));
    assert_true(strv_eq(a->command, a->command_len, b->command, b->command_len));
    assert_true(bytes_eq(a->payload, a->payload_len, b->payload, b->payload_len));
    assert_int_equal(a->timeout_ms, b->timeout_ms);
    assert_int_equal(a->nominal_time_ms, b->nominal_time_ms);
    assert_int_equal(a->due_at_ms, b->due_at_ms);
    assert_int_equal(a->priority, b->priority);
    assert_true(str_eq(a->trace_id, b->trace_id));
    assert_true(str_eq(a->idempotency_key, b->idempotency_key));
    assert_int_equal(a->epoch, b->epoch);
}

static void attempt_eq(const ax_attempt_t *a, const ax_attempt_t *b) {
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->instance_id, b->instance_id);
    assert_int_equal(a->attempt, b->attempt);
    assert_true(str_eq(a->worker, b->worker));
    assert_int_equal(a->outcome, b->outcome);
    assert_int_equal(a->exit_code_set, b->exit_code_set);
    assert_int_equal(a->exit_code, b->exit_code);
    assert_true(str_eq(a->error_class, b->error_class));
    assert_true(str_eq(a->error, b->error));
    assert_true(str_eq(a->output, b->output));
    assert_int_equal(a->started_at_ms, b->started_at_ms);
    assert_int_equal(a->finished_at_ms, b->finished_at_ms);
    assert_true(str_eq(a->trace_id, b->trace_id));
    assert_int_equal(a->retryable, b->retryable);
}

static void submit_eq(const ax_submit_t *a, const ax_submit_t *b) {
    assert_true(str_eq(a->job, b->job));
    assert_true(strv_eq(a->command, a->command_len, b->command, b->command_len));
    assert_int_equal(a->run_at_ms, b->run_at_ms);
    assert_int_equal(a->delay_ms, b->delay_ms);
    assert_int_equal(a->priority, b->priority);
    assert_true(bytes_eq(a->payload, a->payload_len, b->payload, b->payload_len));
    assert_true(str_eq(a->idempotency_key, b->idempotency_key));
    assert_true(str_eq(a->trace_id, b->trace_id));
    assert_int_equal(a->timeout_ms, b->timeout_ms);
}

/* Both decoders on buf: the same verdict, the same record when accepted. */
static int g_accepted, g_refused;
static void both_decode(int rec, const uint8_t *buf, size_t len) {
    char e1[512], e2[512];
    int r1, r2;
    if (rec == 0) {
        ax_dispatch_t a, b;
        r1 = ax_dispatch_decode(buf, len, &a, e1, sizeof e1);
        r2 = ax__dispatch_decode_avro(buf, len, &b, e2, sizeof e2);
        if (r1 != r2)
            fail_msg("Dispatch: direct %d (%s), avro-c %d (%s)", r1, r1 ? e1 : "", r2, r2 ? e2 : "");
        if (r1 && strcmp(e1, e2) != 0)
            fail_msg("Dispatch: refused with another reason: direct \"%s\", avro-c \"%s\"", e1, e2);
        if (r1 == 0) {
            dispatch_eq(&a, &b);
            ax_dispatch_clear(&a);
            ax_dispatch_clear(&b);
        }
    } else if (rec == 1) {
        ax_attempt_t a, b;
        r1 = ax_attempt_decode(buf, len, &a, e1, sizeof e1);
        r2 = ax__attempt_decode_avro(buf, len, &b, e2, sizeof e2);
        if (r1 != r2)
            fail_msg("Attempt: direct %d (%s), avro-c %d (%s)", r1, r1 ? e1 : "", r2, r2 ? e2 : "");
        if (r1 && strcmp(e1, e2) != 0)
            fail_msg("Attempt: refused with another reason: direct \"%s\", avro-c \"%s\"", e1, e2);
        if (r1 == 0) {
            attempt_eq(&a, &b);
            ax_attempt_clear(&a);
            ax_attempt_clear(&b);
        }
    } else {
        ax_submit_t a, b;
        r1 = ax_submit_decode(buf, len, &a, e1, sizeof e1);
        r2 = ax__submit_decode_avro(buf, len, &b, e2, sizeof e2);
        if (r1 != r2)
            fail_msg("Submit: direct %d (%s), avro-c %d (%s)", r1, r1 ? e1 : "", r2, r2 ? e2 : "");
        if (r1 && strcmp(e1, e2) != 0)
            fail_msg("Submit: refused with another reason: direct \"%s\", avro-c \"%s\"", e1, e2);
        if (r1 == 0) {
            submit_eq(&a, &b);
            ax_submit_clear(&a);
            ax_submit_clear(&b);
        }
    }
    if (r1 == 0)
        g_accepted++;
    else
        g_refused++;
}

static void fill_submit(ax_submit_t *m, char **argv, uint8_t *payload) {
    ax_submit_init(m);
    if (rnd() % 2) {
        m->job = rnd_str(0);
    } else {
        m->command_len = rnd() % 4;
        for (size_t i = 0; i < m->command_len; i++)
            argv[i] = rnd_str(0);
        m->command = argv;
    }
    m->run_at_ms = rnd() % 2 ? 0 : rnd_long();
    m->delay_ms = rnd() % 2 ? -1 : (int64_t)(rnd() % 100000);
    m->priority = (int32_t)(rnd() % 6) - 1;
    m->payload_len = rnd() % 3 ? rnd() % 200 : 0;
    for (size_t i = 0; i < m->payload_len; i++)
        payload[i] = (uint8_t)rnd();
    m->payload = m->payload_len ? payload : NULL;
    m->idempotency_key = rnd_str(1);
    m->trace_id = rnd_str(1);
    m->timeout_ms = rnd() % 2 ? 0 : (int64_t)(rnd() % 100000);
}

/* buf, then mutations of it: both decoders agree on each. */
static void mutate_all(int rec, const uint8_t *buf, size_t len) {
    uint8_t m[1024];
    if (len + 1 > sizeof m)
        return;
    both_decode(rec, buf, len);
    for (int k = 0; k < 8; k++) { /* one to three bytes changed after the header */
        memcpy(m, buf, len);
        for (int j = 0, nj = 1 + (int)(rnd() % 3); j < nj && len > 5; j++)
            m[5 + rnd() % (len - 5)] = (uint8_t)rnd();
        both_decode(rec, m, len);
    }
    both_decode(rec, buf, rnd() % len); /* cut short */
    memcpy(m, buf, len);
    m[len] = (uint8_t)rnd(); /* one byte too many */
    both_decode(rec, m, len + 1);
}

static void test_decoders_agree(void **state) {
    char *argv[4];
    uint8_t payload[200];
    g_accepted = g_refused = 0;
    for (int i = 0; i < ROUNDS; i++) {
        void *b = NULL;
        size_t l = 0;
        ax_dispatch_t d;
        fill_dispatch(&d, argv, payload);
        if (rnd() % 4 == 0)
            d.handler_kind = "command"; /* its command must name a program: some refused */
        if (ax_dispatch_encode(&d, &b, &l) == 0) {
            mutate_all(0, b, l);
            free(b);
        }
        pool_free();
        ax_attempt_t a;
        fill_attempt(&a);
        assert_int_equal(ax_attempt_encode(&a, &b, &l), 0);
        mutate_all(1, b, l);
        free(b);
        pool_free();
        ax_submit_t s;
        fill_submit(&s, argv, payload);
        if (ax_submit_encode(&s, &b, &l) == 0) {
            mutate_all(2, b, l);
            free(b);
        }
        pool_free();
    }
    /* both kinds of verdict were exercised */
    assert_true(g_accepted > ROUNDS);
    assert_true(g_refused > ROUNDS);
}

/* The direct reader refuses what the guard refuses, with the guard's
 * reason, in the cases random mutations rarely reach: a varint with bits
 * past 64, array blocks with a byte size (right, wrong and negative), an
 * array of more than AX_CODEC_MAX_ITEMS strings, an enum index whose low
 * 32 bits are a valid one. (When both refuse, the reasons agree by
 * construction: the direct decoders take the guard's; the verdicts are
 * what these cases test.) */
static size_t submit_bytes(uint8_t *b, const uint8_t *command, size_t clen, const uint8_t *run_at,
                           size_t rlen) {
    size_t n = 0;
    static const uint8_t head[] = {0, 0, 0, 0, AX_SCHEMA_SUBMIT, 0 /* job: null */};
    memcpy(b + n, head, sizeof head);
    n += sizeof head;
    memcpy(b + n, command, clen); /* command: its union branch and value */
    n += clen;
    memcpy(b + n, run_at, rlen);
    n += rlen;
    /* delay_ms, priority: null; payload: empty; idempotency key, trace id,
     * timeout: null */
    static const uint8_t tail[] = {0, 0, 0, 0, 0, 0};
    memcpy(b + n, tail, sizeof tail);
    return n + sizeof tail;
}

static void test_reader_is_guard(void **state) {
    uint8_t b[128];
    static const uint8_t cmd_a[] = {2, 2, 2, 'a', 0};                 /* ["a"] */
    static const uint8_t cmd_sized[] = {2, 1, 4, 2, 'a', 0};          /* ["a"], block of -1 and size 2 */
    static const uint8_t cmd_missized[] = {2, 1, 10, 2, 'a', 0};      /* the size says 5 */
    static const uint8_t cmd_negsize[] = {2, 1, 1, 2, 'a', 0};        /* the size says -1 */
    static const uint8_t null_at[] = {0};
    static const uint8_t long65[] = {2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2};
    static const uint8_t long64[] = {2, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1};
    g_accepted = g_refused = 0;
    both_decode(2, b, submit_bytes(b, cmd_a, sizeof cmd_a, null_at, 1));
    both_decode(2, b, submit_bytes(b, cmd_sized, sizeof cmd_sized, null_at, 1));
    both_decode(2, b, submit_bytes(b, cmd_a, sizeof cmd_a, long64, sizeof long64));
    assert_int_equal(g_accepted, 3);
    both_decode(2, b, submit_bytes(b, cmd_missized, sizeof cmd_missized, null_at, 1));
    both_decode(2, b, submit_bytes(b, cmd_a, sizeof cmd_a, long65, sizeof long65));
    both_decode(2, b, submit_bytes(b, cmd_negsize, sizeof cmd_negsize, null_at, 1));
    assert_int_equal(g_refused, 3);
    /* an Attempt whose outcome index is 2^32 + 1: its low 32 bits are a
     * valid index (FAILED), the index is not */
    static const uint8_t wide_enum[] = {0, 0, 0, 0, AX_SCHEMA_ATTEMPT, 0x54, 2, 2, 'w', 0x82,
                                        0x80, 0x80, 0x80, 0x20, 0, 0, 0, 0, 2, 4, 0, 0, 0};
    both_decode(1, wide_enum, sizeof wide_enum);
    assert_int_equal(g_refused, 4);
    /* the same record with outcome 1 (FAILED) is accepted: only the index differs */
    static const uint8_t narrow_enum[] = {0, 0, 0, 0, AX_SCHEMA_ATTEMPT, 0x54, 2, 2, 'w', 0x02,
                                          0, 0, 0, 0, 2, 4, 0, 0, 0};
    both_decode(1, narrow_enum, sizeof narrow_enum);
    assert_int_equal(g_accepted, 4);
    /* 70,000 strings "a" in one block: more than AX_CODEC_MAX_ITEMS */
    size_t items = 70000, cap = 32 + 2 * items;
    uint8_t *big = malloc(cap), *cmd = malloc(cap);
    assert_non_null(big);
    assert_non_null(cmd);
    size_t c = 0;
    cmd[c++] = 2;
    for (uint64_t v = (uint64_t)items << 1; ; v >>= 7) { /* zig-zag of a positive count */
        cmd[c++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        if (v <= 0x7f)
            break;
    }
    for (size_t i = 0; i < items; i++) {
        cmd[c++] = 2;
        cmd[c++] = 'a';
    }
    cmd[c++] = 0;
    both_decode(2, big, submit_bytes(big, cmd, c, null_at, 1));
    assert_int_equal(g_refused, 5);
    free(big);
    free(cmd);
}

int main(void) {
    char err[256];
    if (ax_codec_init(err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch_direct),
        cmocka_unit_test(test_attempt_direct),
        cmocka_unit_test(test_result_direct),
        cmocka_unit_test(test_refusals_agree),
        cmocka_unit_test(test_decoders_agree),
        cmocka_unit_test(test_reader_is_guard),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ax_codec_shutdown();
    return rc;
}
