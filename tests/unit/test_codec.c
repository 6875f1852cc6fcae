/*
 * test_codec.c — unit tests of the wire codec (libax/src/adapters/codec.c
 * and avro_guard.c): round trips of the four records, the framing, the
 * bounded validator on hostile input (huge lengths and counts, bad indexes,
 * truncation, trailing bytes, NUL and non-UTF-8 strings), the semantic
 * rules, and a fixed-seed mutation loop. Run under ASan+UBSan by the build,
 * so any out-of-bounds read or huge allocation fails the test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ax/codec.h"
#include "ax/common.h"

#define ERRLEN 256

/* ---- a tiny Avro writer to craft messages the encoders refuse to make -- */

typedef struct wbuf {
    uint8_t b[1024];
    size_t n;
} wbuf_t;

static void w_byte(wbuf_t *w, uint8_t c) {
    assert_true(w->n < sizeof w->b);
    w->b[w->n++] = c;
}

static void w_raw(wbuf_t *w, const void *p, size_t n) {
    assert_true(w->n + n <= sizeof w->b);
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void w_long(wbuf_t *w, int64_t v) {
    uint64_t n = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (n & ~(uint64_t)0x7f) {
        w_byte(w, (uint8_t)((n & 0x7f) | 0x80));
        n >>= 7;
    }
    w_byte(w, (uint8_t)n);
}

static void w_str(wbuf_t *w, const char *s) {
    w_long(w, (int64_t)strlen(s));
    w_raw(w, s, strlen(s));
}

static void w_header(wbuf_t *w, int32_t id) {
    w->n = 0;
    w_byte(w, 0);
    w_byte(w, (uint8_t)(id >> 24));
    w_byte(w, (uint8_t)(id >> 16));
    w_byte(w, (uint8_t)(id >> 8));
    w_byte(w, (uint8_t)id);
}

/* Submit fields after command: run_at, delay_ms, priority (null), payload
 * (empty), idempotency_key, trace_id, timeout_ms (null). */
static void w_submit_tail(wbuf_t *w) {
    w_long(w, 0);
    w_long(w, 0);
    w_long(w, 0);
    w_long(w, 0);
    w_long(w, 0);
    w_long(w, 0);
    w_long(w, 0);
}

/* A valid Submit {job: "j"} in raw bytes. */
static void w_submit_job(wbuf_t *w) {
    w_header(w, AX_SCHEMA_SUBMIT);
    w_long(w, 1);
    w_str(w, "j");
    w_long(w, 0);
    w_submit_tail(w);
}

/* ---- fixtures ---------------------------------------------------------- */

static char *cmd3[] = { "/bin/echo", "héllo wörld", "", NULL };
static uint8_t payload[] = { 0x00, 0x01, 0xff, 0x3d, 0x00 };

static void submit_full(ax_submit_t *m) {
    ax_submit_init(m);
    m->command = cmd3;
    m->command_len = 3;
    m->run_at_ms = 1767225600123;
    m->delay_ms = 0;
    m->priority = 4;
    m->payload = payload;
    m->payload_len = sizeof payload;
    m->idempotency_key = "idem-1";
    m->trace_id = "trace-1";
    m->timeout_ms = 30000;
}

static void submit_min(ax_submit_t *m) {
    ax_submit_init(m);
    m->job = "nightly-report";
}

static void dispatch_full(ax_dispatch_t *m) {
    memset(m, 0, sizeof *m);
    m->instance_id = INT64_MAX;
    m->attempt = 3;
    m->job = "nightly-report";
    m->handler_kind = "command";
    m->command = cmd3;
    m->command_len = 3;
    m->payload = payload;
    m->payload_len = sizeof payload;
    m->timeout_ms = 60000;
    m->nominal_time_ms = 1767225600000;
    m->due_at_ms = 1767225600500;
    m->priority = 0;
    m->trace_id = "trace-2";
    m->idempotency_key = "idem-2";
    m->epoch = 7;
}

static char *cmd1[] = { "true", NULL };

static void dispatch_min(ax_dispatch_t *m) {
    memset(m, 0, sizeof *m);
    m->instance_id = -1;
    m->handler_kind = "command";
    m->command = cmd1;
    m->command_len = 1;
    m->trace_id = "";
}

static void attempt_full(ax_attempt_t *m) {
    memset(m, 0, sizeof *m);
    m->instance_id = 42;
    m->attempt = INT32_MAX;
    m->worker = "host-a:1234";
    m->outcome = AX_OUTCOME_FAILED;
    m->exit_code = -1;
    m->exit_code_set = 1;
    m->error_class = "exit";
    m->error = "exited with status 255";
    m->output = "line 1\nline 2 — ünïcode\n";
    m->started_at_ms = 1767225600000;
    m->finished_at_ms = 1767225601000;
    m->trace_id = "trace-3";
    m->retryable = 1;
    m->kind = AX_ATTEMPT_PROBE;
}

static void attempt_min(ax_attempt_t *m) {
    memset(m, 0, sizeof *m);
    m->worker = "w";
    m->outcome = AX_OUTCOME_SUCCESS;
}

static void result_full(ax_result_t *m) {
    memset(m, 0, sizeof *m);
    m->instance_id = 43;
    m->job = "nightly-report";
    m->outcome = AX_OUTCOME_TIMEOUT;
    m->attempts = 5;
    m->exit_code = 137;
    m->exit_code_set = 1;
    m->error_class = "timeout";
    m->error = "killed after 60000 ms";
    m->output = "partial";
    m->trace_id = "trace-4";
    m->idempotency_key = "idem-4";
    m->nominal_time_ms = 1767225600000;
    m->scheduled_at_ms = 1767225600001;
    m->locked_at_ms = 1767225600002;
    m->running_at_ms = 1767225600003;
    m->finished_at_ms = 1767225660003;
}

static void result_min(ax_result_t *m) {
    memset(m, 0, sizeof *m);
    m->outcome = AX_OUTCOME_CANCELLED;
    m->scheduled_at_ms = 1;
    m->finished_at_ms = 2;
}

/* ---- comparisons ------------------------------------------------------- */

static void assert_opt_str_eq(const char *want, const char *got) {
    if (!want)
        assert_null(got);
    else
        assert_string_equal(want, got);
}

/* Required strings come back "" when they were encoded from NULL. */
static void assert_req_str_eq(const char *want, const char *got) {
    assert_non_null(got);
    assert_string_equal(want ? want : "", got);
}

static void assert_strv_eq(char **want, size_t want_len, char **got, size_t got_len) {
    assert_int_equal(want_len, got_len);
    for (size_t i = 0; i < want_len; i++)
        assert_string_equal(want[i], got[i]);
    assert_null(got[got_len]);   /* NULL-terminated */
}

static void assert_bytes_eq(const uint8_t *want, size_t want_len, const uint8_t *got, size_t got_len) {
    assert_int_equal(want_len, got_len);
    if (want_len)
        assert_memory_equal(want, got, want_len);
    else
        assert_null(got);
}

static void assert_submit_eq(const ax_submit_t *a, const ax_submit_t *b) {
    assert_opt_str_eq(a->job, b->job);
    if (!a->command)
        assert_null(b->command);
    else
        assert_strv_eq(a->command, a->command_len, b->command, b->command_len);
    assert_int_equal(a->run_at_ms, b->run_at_ms);
    assert_int_equal(a->delay_ms, b->delay_ms);
    assert_int_equal(a->priority, b->priority);
    assert_bytes_eq(a->payload, a->payload_len, b->payload, b->payload_len);
    assert_opt_str_eq(a->idempotency_key, b->idempotency_key);
    assert_opt_str_eq(a->trace_id, b->trace_id);
    assert_int_equal(a->timeout_ms, b->timeout_ms);
}

static void assert_dispatch_eq(const ax_dispatch_t *a, const ax_dispatch_t *b) {
    assert_int_equal(a->instance_id, b->instance_id);
    assert_int_equal(a->attempt, b->attempt);
    assert_opt_str_eq(a->job, b->job);
    assert_req_str_eq(a->handler_kind, b->handler_kind);
    assert_strv_eq(a->command, a->command_len, b->command, b->command_len);
    assert_bytes_eq(a->payload, a->payload_len, b->payload, b->payload_len);
    assert_int_equal(a->timeout_ms, b->timeout_ms);
    assert_int_equal(a->nominal_time_ms, b->nominal_time_ms);
    assert_int_equal(a->due_at_ms, b->due_at_ms);
    assert_int_equal(a->priority, b->priority);
    assert_req_str_eq(a->trace_id, b->trace_id);
    assert_opt_str_eq(a->idempotency_key, b->idempotency_key);
    assert_int_equal(a->epoch, b->epoch);
}

static void assert_attempt_eq(const ax_attempt_t *a, const ax_attempt_t *b) {
    assert_int_equal(a->instance_id, b->instance_id);
    assert_int_equal(a->attempt, b->attempt);
    assert_req_str_eq(a->worker, b->worker);
    assert_int_equal(a->outcome, b->outcome);
    assert_int_equal(a->exit_code_set, b->exit_code_set);
    if (a->exit_code_set)
        assert_int_equal(a->exit_code, b->exit_code);
    assert_opt_str_eq(a->error_class, b->error_class);
    assert_opt_str_eq(a->error, b->error);
    assert_req_str_eq(a->output, b->output);
    assert_int_equal(a->started_at_ms, b->started_at_ms);
    assert_int_equal(a->finished_at_ms, b->finished_at_ms);
    assert_req_str_eq(a->trace_id, b->trace_id);
    assert_int_equal(!!a->retryable, b->retryable);
    assert_int_equal(a->kind, b->kind);
}

static void assert_result_eq(const ax_result_t *a, const ax_result_t *b) {
    assert_int_equal(a->instance_id, b->instance_id);
    assert_opt_str_eq(a->job, b->job);
    assert_int_equal(a->outcome, b->outcome);
    assert_int_equal(a->attempts, b->attempts);
    assert_int_equal(a->exit_code_set, b->exit_code_set);
    if (a->exit_code_set)
        assert_int_equal(a->exit_code, b->exit_code);
    assert_opt_str_eq(a->error_class, b->error_class);
    assert_opt_str_eq(a->error, b->error);
    assert_req_str_eq(a->output, b->output);
    assert_req_str_eq(a->trace_id, b->trace_id);
    assert_opt_str_eq(a->idempotency_key, b->idempotency_key);
    assert_int_equal(a->nominal_time_ms, b->nominal_time_ms);
    assert_int_equal(a->scheduled_at_ms, b->scheduled_at_ms);
    assert_int_equal(a->locked_at_ms, b->locked_at_ms);
    assert_int_equal(a->running_at_ms, b->running_at_ms);
    assert_int_equal(a->finished_at_ms, b->finished_at_ms);
}

/* ---- generic decode by schema id (for loops over all four) ------------ */

static int decode_any(int32_t id, const void *buf, size_t len, char *err) {
    int rc = AX_ERR_INVALID;

    switch (id) {
    case AX_SCHEMA_SUBMIT: {
        ax_submit_t m;
        if ((rc = ax_submit_decode(buf, len, &m, err, ERRLEN)) == 0)
            ax_submit_clear(&m);
        break;
    }
    case AX_SCHEMA_DISPATCH: {
        ax_dispatch_t m;
        if ((rc = ax_dispatch_decode(buf, len, &m, err, ERRLEN)) == 0)
            ax_dispatch_clear(&m);
        break;
    }
    case AX_SCHEMA_ATTEMPT:
    case AX_SCHEMA_ATTEMPT_ID3: {
        ax_attempt_t m;
        if ((rc = ax_attempt_decode(buf, len, &m, err, ERRLEN)) == 0)
            ax_attempt_clear(&m);
        break;
    }
    case AX_SCHEMA_RESULT: {
        ax_result_t m;
        if ((rc = ax_result_decode(buf, len, &m, err, ERRLEN)) == 0)
            ax_result_clear(&m);
        break;
    }
    default:
        fail_msg("unknown schema id %d", (int)id);
    }
    return rc;
}

/* Decodes, re-encodes and decodes again: whatever the codec accepts it
 * must also be able to produce. */
static int decode_reencode(int32_t id, const void *buf, size_t len, char *err) {
    void *out = NULL;
    size_t out_len = 0;
    int rc;

    switch (id) {
    case AX_SCHEMA_SUBMIT: {
        ax_submit_t m, m2;
        if ((rc = ax_submit_decode(buf, len, &m, err, ERRLEN)))
            return rc;
        assert_int_equal(ax_submit_encode(&m, &out, &out_len), 0);
        assert_int_equal(ax_submit_decode(out, out_len, &m2, err, ERRLEN), 0);
        assert_submit_eq(&m, &m2);
        ax_submit_clear(&m);
        ax_submit_clear(&m2);
        break;
    }
    case AX_SCHEMA_DISPATCH: {
        ax_dispatch_t m, m2;
        if ((rc = ax_dispatch_decode(buf, len, &m, err, ERRLEN)))
            return rc;
        assert_int_equal(ax_dispatch_encode(&m, &out, &out_len), 0);
        assert_int_equal(ax_dispatch_decode(out, out_len, &m2, err, ERRLEN), 0);
        assert_dispatch_eq(&m, &m2);
        ax_dispatch_clear(&m);
        ax_dispatch_clear(&m2);
        break;
    }
    case AX_SCHEMA_ATTEMPT:
    case AX_SCHEMA_ATTEMPT_ID3: {
        ax_attempt_t m, m2;
        if ((rc = ax_attempt_decode(buf, len, &m, err, ERRLEN)))
            return rc;
        assert_int_equal(ax_attempt_encode(&m, &out, &out_len), 0);
        assert_int_equal(ax_attempt_decode(out, out_len, &m2, err, ERRLEN), 0);
        assert_attempt_eq(&m, &m2);
        ax_attempt_clear(&m);
        ax_attempt_clear(&m2);
        break;
    }
    case AX_SCHEMA_RESULT: {
        ax_result_t m, m2;
        if ((rc = ax_result_decode(buf, len, &m, err, ERRLEN)))
            return rc;
        assert_int_equal(ax_result_encode(&m, &out, &out_len), 0);
        assert_int_equal(ax_result_decode(out, out_len, &m2, err, ERRLEN), 0);
        assert_result_eq(&m, &m2);
        ax_result_clear(&m);
        ax_result_clear(&m2);
        break;
    }
    default:
        fail_msg("unknown schema id %d", (int)id);
    }
    free(out);
    return 0;
}

/* The eight valid encodings (full and minimal of each record) that the
 * hostile-input tests start from. */
typedef struct sample {
    int32_t id;
    uint8_t *buf;
    size_t len;
} sample_t;

static sample_t g_samples[8];

static int setup(void **state) {
    char err[ERRLEN];
    ax_submit_t s;
    ax_dispatch_t d;
    ax_attempt_t a;
    ax_result_t r;
    void *buf;
    size_t len;
    int k = 0;

    if (ax_codec_init(err, sizeof err)) {
        print_error("ax_codec_init: %s\n", err);
        return -1;
    }
#define ADD(ID, ENC, FILL, M)                                   \
    do {                                                        \
        FILL(&M);                                               \
        if (ENC(&M, &buf, &len))                                \
            return -1;                                          \
        g_samples[k].id = ID;                                   \
        g_samples[k].buf = buf;                                 \
        g_samples[k].len = len;                                 \
        k++;                                                    \
    } while (0)
    ADD(AX_SCHEMA_SUBMIT, ax_submit_encode, submit_full, s);
    ADD(AX_SCHEMA_SUBMIT, ax_submit_encode, submit_min, s);
    ADD(AX_SCHEMA_DISPATCH, ax_dispatch_encode, dispatch_full, d);
    ADD(AX_SCHEMA_DISPATCH, ax_dispatch_encode, dispatch_min, d);
    ADD(AX_SCHEMA_ATTEMPT, ax_attempt_encode, attempt_full, a);
    ADD(AX_SCHEMA_ATTEMPT, ax_attempt_encode, attempt_min, a);
    ADD(AX_SCHEMA_RESULT, ax_result_encode, result_full, r);
    ADD(AX_SCHEMA_RESULT, ax_result_encode, result_min, r);
#undef ADD
    return 0;
}

static int teardown(void **state) {
    for (size_t i = 0; i < AX_ARRAY_SIZE(g_samples); i++)
        free(g_samples[i].buf);
    ax_codec_shutdown();
    return 0;
}

/* ---- tests ------------------------------------------------------------- */

static void test_outcome_names(void **state) {
    ax_outcome_t o = AX_OUTCOME_SUCCESS;

    assert_string_equal(ax_outcome_name(AX_OUTCOME_SUCCESS), "SUCCESS");
    assert_string_equal(ax_outcome_name(AX_OUTCOME_FAILED), "FAILED");
    assert_string_equal(ax_outcome_name(AX_OUTCOME_TIMEOUT), "TIMEOUT");
    assert_string_equal(ax_outcome_name(AX_OUTCOME_CANCELLED), "CANCELLED");
    assert_non_null(ax_outcome_name((ax_outcome_t)42));
    assert_int_equal(ax_outcome_parse("TIMEOUT", &o), 0);
    assert_int_equal(o, AX_OUTCOME_TIMEOUT);
    assert_int_equal(ax_outcome_parse("cancelled", &o), 0);
    assert_int_equal(o, AX_OUTCOME_CANCELLED);
    assert_int_equal(ax_outcome_parse("LOST", &o), AX_ERR_INVALID);
    assert_int_equal(ax_outcome_parse(NULL, &o), AX_ERR_INVALID);
    assert_int_equal(o, AX_OUTCOME_CANCELLED);
}

static void test_init_and_clear(void **state) {
    ax_submit_t s;
    ax_dispatch_t d;
    ax_attempt_t a;
    ax_result_t r;
    ax_submit_t zs;

    memset(&zs, 0, sizeof zs);
    ax_submit_init(&s);
    assert_null(s.job);
    assert_null(s.command);
    assert_int_equal(s.delay_ms, -1);
    assert_int_equal(s.priority, -1);
    assert_int_equal(s.run_at_ms, 0);
    assert_int_equal(s.timeout_ms, 0);

    /* zeroed structs */
    memset(&d, 0, sizeof d);
    memset(&a, 0, sizeof a);
    memset(&r, 0, sizeof r);
    ax_submit_clear(&s);
    assert_memory_equal(&s, &zs, sizeof s);
    ax_dispatch_clear(&d);
    ax_attempt_clear(&a);
    ax_result_clear(&r);
    ax_submit_clear(NULL);
    ax_dispatch_clear(NULL);
    ax_attempt_clear(NULL);
    ax_result_clear(NULL);

    /* partially filled: an argv whose tail is not there yet */
    ax_submit_init(&s);
    s.job = strdup("j");
    s.command = calloc(4, sizeof *s.command);
    s.command[0] = strdup("a");
    s.command_len = 1;
    ax_submit_clear(&s);
    assert_memory_equal(&s, &zs, sizeof s);
    ax_submit_clear(&s);   /* twice is fine */

    d.handler_kind = strdup("command");
    d.command = calloc(1, sizeof *d.command);
    ax_dispatch_clear(&d);
    assert_null(d.command);
    assert_null(d.handler_kind);

    a.output = strdup("x");
    ax_attempt_clear(&a);
    assert_null(a.output);
    r.error = strdup("x");
    ax_result_clear(&r);
    assert_null(r.error);
}

static void test_roundtrip_submit(void **state) {
    char err[ERRLEN] = "";
    ax_submit_t in, out;
    void *buf;
    size_t len;
    int32_t id = 0;

    for (int variant = 0; variant < 3; variant++) {
        if (variant == 0)
            submit_full(&in);
        else if (variant == 1)
            submit_min(&in);
        else {
            /* inline command, all optionals unset; delay set to exercise -1 vs 0 */
            ax_submit_init(&in);
            in.command = cmd1;
            in.command_len = 1;
            in.delay_ms = 1500;
        }
        assert_int_equal(ax_submit_encode(&in, &buf, &len), 0);
        assert_int_equal(ax_codec_peek_schema(buf, len, &id, err, sizeof err), 0);
        assert_int_equal(id, AX_SCHEMA_SUBMIT);
        assert_int_equal(ax_codec_validate(AX_SCHEMA_SUBMIT, (uint8_t *)buf + 5, len - 5, err, sizeof err), 0);
        if (ax_submit_decode(buf, len, &out, err, sizeof err))
            fail_msg("decode variant %d: %s", variant, err);
        assert_submit_eq(&in, &out);
        ax_submit_clear(&out);
        free(buf);
    }
}

static void test_roundtrip_dispatch(void **state) {
    char err[ERRLEN] = "";
    ax_dispatch_t in, out;
    void *buf;
    size_t len;

    for (int variant = 0; variant < 3; variant++) {
        if (variant == 0)
            dispatch_full(&in);
        else if (variant == 1)
            dispatch_min(&in);
        else {
            /* another handler kind may carry no command; NULL strings go out as "" */
            memset(&in, 0, sizeof in);
            in.handler_kind = "http";
        }
        assert_int_equal(ax_dispatch_encode(&in, &buf, &len), 0);
        if (ax_dispatch_decode(buf, len, &out, err, sizeof err))
            fail_msg("decode variant %d: %s", variant, err);
        assert_dispatch_eq(&in, &out);
        ax_dispatch_clear(&out);
        free(buf);
    }
}

static void test_roundtrip_attempt(void **state) {
    char err[ERRLEN] = "";
    ax_attempt_t in, out;
    void *buf;
    size_t len;

    for (int variant = 0; variant < 2; variant++) {
        if (variant == 0)
            attempt_full(&in);
        else
            attempt_min(&in);
        assert_int_equal(ax_attempt_encode(&in, &buf, &len), 0);
        if (ax_attempt_decode(buf, len, &out, err, sizeof err))
            fail_msg("decode variant %d: %s", variant, err);
        assert_attempt_eq(&in, &out);
        ax_attempt_clear(&out);
        free(buf);
    }
}

static void test_roundtrip_result(void **state) {
    char err[ERRLEN] = "";
    ax_result_t in, out;
    void *buf;
    size_t len;

    for (int variant = 0; variant < 2; variant++) {
        if (variant == 0)
            result_full(&in);
        else
            result_min(&in);
        assert_int_equal(ax_result_encode(&in, &buf, &len), 0);
        if (ax_result_decode(buf, len, &out, err, sizeof err))
            fail_msg("decode variant %d: %s", variant, err);
        assert_result_eq(&in, &out);
        ax_result_clear(&out);
        free(buf);
    }
}

/* Golden bytes: the layout other languages rely on. */
static void test_wire_layout(void **state) {
    static const uint8_t want[] = {
        0x00, 0x00, 0x00, 0x00, 0x01,   /* magic, schema id 1 */
        0x02, 0x02, 'j',                /* job: branch 1, "j" */
        0x00, 0x00, 0x00, 0x00,         /* command, run_at, delay_ms, priority: null */
        0x00,                           /* payload: empty bytes */
        0x00, 0x00, 0x00,               /* idempotency_key, trace_id, timeout_ms: null */
    };
    ax_submit_t m;
    void *buf;
    size_t len;

    ax_submit_init(&m);
    m.job = "j";
    assert_int_equal(ax_submit_encode(&m, &buf, &len), 0);
    assert_int_equal(len, sizeof want);
    assert_memory_equal(buf, want, sizeof want);
    free(buf);
}

static void test_peek_schema(void **state) {
    static const uint8_t ok[] = { 0, 0, 0, 1, 2, 0xaa };
    static const uint8_t bad_magic[] = { 1, 0, 0, 0, 1 };
    static const uint8_t neg[] = { 0, 0xff, 0xff, 0xff, 0xff };
    char err[ERRLEN] = "";
    int32_t id = 99;

    assert_int_equal(ax_codec_peek_schema(ok, sizeof ok, &id, err, sizeof err), 0);
    assert_int_equal(id, 258);
    assert_int_equal(ax_codec_peek_schema(neg, sizeof neg, &id, err, sizeof err), 0);
    assert_int_equal(id, -1);

    id = 99;
    for (size_t n = 0; n < 5; n++) {
        assert_int_equal(ax_codec_peek_schema(ok, n, &id, err, sizeof err), AX_ERR_INVALID);
        assert_non_null(strstr(err, "shorter than the 5-byte header"));
    }
    assert_int_equal(ax_codec_peek_schema(NULL, 0, &id, err, sizeof err), AX_ERR_INVALID);
    assert_int_equal(ax_codec_peek_schema(bad_magic, sizeof bad_magic, &id, err, sizeof err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "magic byte 0x01"));
    assert_int_equal(id, 99);   /* untouched on failure */
    assert_int_equal(ax_codec_peek_schema(bad_magic, sizeof bad_magic, &id, NULL, 0), AX_ERR_INVALID);
}

/* 0x3d is the zig-zag varint -31: as a length, avro-c 1.11.1 would pass
 * (size_t)-30 to malloc. */
static void test_byte_0x3d(void **state) {
    static const uint8_t one[] = { 0x3d };
    char err[ERRLEN] = "";
    wbuf_t w;

    for (int32_t id = AX_SCHEMA_SUBMIT; id <= AX_SCHEMA_ATTEMPT; id++) {
        assert_int_equal(decode_any(id, one, sizeof one, err), AX_ERR_INVALID);
        assert_int_equal(ax_codec_validate(id, one, sizeof one, err, sizeof err), AX_ERR_INVALID);
        w_header(&w, id);
        w_byte(&w, 0x3d);
        assert_int_equal(decode_any(id, w.b, w.n, err), AX_ERR_INVALID);
    }

    /* Submit: job union index -31 */
    w_header(&w, AX_SCHEMA_SUBMIT);
    w_byte(&w, 0x3d);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "union index -31 at offset 5"));

    /* Submit: job branch 1, string length -31 */
    w_header(&w, AX_SCHEMA_SUBMIT);
    w_byte(&w, 0x02);
    w_byte(&w, 0x3d);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "negative string length -31 at offset 6"));
    assert_non_null(strstr(err, "Submit.job"));

    /* Dispatch: the handler_kind string length is the 0x3d */
    w_header(&w, AX_SCHEMA_DISPATCH);
    w_long(&w, 1);
    w_long(&w, 1);
    w_long(&w, 0);
    w_byte(&w, 0x3d);
    assert_int_equal(decode_any(AX_SCHEMA_DISPATCH, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "negative string length -31 at offset 8"));
}

static void test_huge_lengths(void **state) {
    char err[ERRLEN] = "";
    wbuf_t w;

    /* INT64_MAX string length with 3 bytes after it */
    w_header(&w, AX_SCHEMA_SUBMIT);
    w_byte(&w, 0x02);
    w_long(&w, INT64_MAX);
    w_raw(&w, "abc", 3);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_string_equal(err, "string length 9223372036854775807 at offset 6 exceeds remaining 3 bytes "
                             "(in Submit.job)");

    /* 2^31: avro-c alone would malloc 2 GiB and leak it */
    w_header(&w, AX_SCHEMA_SUBMIT);
    w_byte(&w, 0x02);
    w_long(&w, INT64_C(1) << 31);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "exceeds remaining 0 bytes"));

    /* INT64_MIN length (the varint that overflows most) */
    w_header(&w, AX_SCHEMA_SUBMIT);
    w_byte(&w, 0x02);
    w_long(&w, INT64_MIN);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "negative string length"));

    /* payload bytes length too large */
    w_header(&w, AX_SCHEMA_SUBMIT);
    w_long(&w, 1);
    w_str(&w, "j");
    for (int i = 0; i < 4; i++)
        w_long(&w, 0);
    w_long(&w, 1000);
    w_raw(&w, "xy", 2);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "bytes length 1000 at offset"));
    assert_non_null(strstr(err, "Submit.payload"));

    /* varints: 11 bytes, and a 10th byte with bits past 64 */
    w_header(&w, AX_SCHEMA_DISPATCH);
    for (int i = 0; i < 10; i++)
        w_byte(&w, 0x80);
    w_byte(&w, 0x00);
    assert_int_equal(decode_any(AX_SCHEMA_DISPATCH, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "longer than 64 bits"));
    w_header(&w, AX_SCHEMA_DISPATCH);
    for (int i = 0; i < 9; i++)
        w_byte(&w, 0xff);
    w_byte(&w, 0x02);
    assert_int_equal(decode_any(AX_SCHEMA_DISPATCH, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "longer than 64 bits"));

    /* int out of the 32-bit range (Dispatch.attempt) */
    w_header(&w, AX_SCHEMA_DISPATCH);
    w_long(&w, 1);
    w_long(&w, INT64_C(1) << 32);
    assert_int_equal(decode_any(AX_SCHEMA_DISPATCH, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "int 4294967296 at offset 6 is out of the 32-bit range"));
}

/* Submit {command: <array>} prefix: job null, command branch 1. */
static void w_submit_cmd_prefix(wbuf_t *w) {
    w_header(w, AX_SCHEMA_SUBMIT);
    w_long(w, 0);
    w_long(w, 1);
}

static void test_huge_array_counts(void **state) {
    char err[ERRLEN] = "";
    wbuf_t w;
    ax_submit_t m;

    w_submit_cmd_prefix(&w);
    w_long(&w, INT64_C(1) << 40);
    w_str(&w, "a");
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "more than 65536 items"));

    w_submit_cmd_prefix(&w);
    w_long(&w, AX_CODEC_MAX_ITEMS + 1);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "more than 65536 items"));

    /* within the cap, but more items than bytes left */
    w_submit_cmd_prefix(&w);
    w_long(&w, 1000);
    w_str(&w, "a");
    w_str(&w, "b");
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "array block count 1000 at offset 7 exceeds remaining 4 bytes"));

    /* the cap applies to the whole array, not to each block */
    w_submit_cmd_prefix(&w);
    w_long(&w, 40000);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);

    /* negative count: the block size that follows is bounded too */
    w_submit_cmd_prefix(&w);
    w_long(&w, -1);
    w_long(&w, INT64_MAX);
    w_str(&w, "a");
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "array block size 9223372036854775807"));

    w_submit_cmd_prefix(&w);
    w_long(&w, -(INT64_C(1) << 40));
    w_long(&w, 2);
    w_str(&w, "a");
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);

    w_submit_cmd_prefix(&w);
    w_long(&w, INT64_MIN);
    w_long(&w, 2);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "out of range"));

    /* a block size that lies about the block */
    w_submit_cmd_prefix(&w);
    w_long(&w, -1);
    w_long(&w, 3);
    w_str(&w, "a");
    w_raw(&w, "\0\0", 2);
    w_long(&w, 0);
    w_submit_tail(&w);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "does not match"));

    /* but well-formed negative-count blocks (as Java writers may emit) are fine */
    w_submit_cmd_prefix(&w);
    w_long(&w, -2);
    w_long(&w, 4);
    w_str(&w, "ls");
    w_str(&w, "");
    w_long(&w, 1);
    w_str(&w, "-l");
    w_long(&w, 0);
    w_submit_tail(&w);
    if (ax_submit_decode(w.b, w.n, &m, err, sizeof err))
        fail_msg("blocked array: %s", err);
    assert_int_equal(m.command_len, 3);
    assert_string_equal(m.command[0], "ls");
    assert_string_equal(m.command[1], "");
    assert_string_equal(m.command[2], "-l");
    assert_null(m.command[3]);
    ax_submit_clear(&m);
}

static void test_bad_indexes(void **state) {
    char err[ERRLEN] = "";
    wbuf_t w;

    /* union index 2 and -1 on Submit.job */
    w_header(&w, AX_SCHEMA_SUBMIT);
    w_long(&w, 2);
    w_str(&w, "j");
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "union index 2 at offset 5 is out of range 0..1"));
    w_header(&w, AX_SCHEMA_SUBMIT);
    w_long(&w, -1);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);

    /* Attempt (both ids): enum index 4, then boolean 2 (avro-c would
     * accept both); id 5: kind index 3 */
    for (int32_t id = AX_SCHEMA_ATTEMPT_ID3; id <= AX_SCHEMA_ATTEMPT; id += 2)
        for (int bad = 0; bad < 3; bad++) {
            if (bad == 2 && id == AX_SCHEMA_ATTEMPT_ID3)
                continue;
            w_header(&w, id);
            w_long(&w, 1);
            w_long(&w, 1);
            w_str(&w, "w");
            w_long(&w, bad == 0 ? 4 : 1);
            for (int i = 0; i < 3; i++)
                w_long(&w, 0);
            w_str(&w, "");
            w_long(&w, 0);
            w_long(&w, 0);
            w_str(&w, "");
            w_byte(&w, bad == 1 ? 2 : 0);
            if (id == AX_SCHEMA_ATTEMPT)
                w_long(&w, bad == 2 ? 3 : 0);
            assert_int_equal(decode_any(id, w.b, w.n, err), AX_ERR_INVALID);
            if (bad == 0)
                assert_non_null(
                    strstr(err, "enum index 4 at offset 9 is out of range 0..3 (Outcome)"));
            else if (bad == 1)
                assert_non_null(strstr(err, "boolean byte 0x02"));
            else
                assert_non_null(strstr(err, "out of range 0..2 (AttemptKind)"));
        }
}

/* An Attempt as the version before the kind field wrote it (schema id 3,
 * schemas/attempt_id3.avsc), byte by byte. */
static void w_attempt_id3(wbuf_t *w, const char *worker, int outcome, const char *error_class,
                          const char *output) {
    w_header(w, AX_SCHEMA_ATTEMPT_ID3);
    w_long(w, 77);                 /* instance_id */
    w_long(w, 2);                  /* attempt */
    w_str(w, worker);
    w_long(w, outcome);
    w_long(w, 0);                  /* exit_code: null */
    if (error_class) {
        w_long(w, 1);
        w_str(w, error_class);
    } else {
        w_long(w, 0);
    }
    w_long(w, 0);                  /* error: null */
    w_str(w, output);
    w_long(w, 1767225600000);      /* started_at */
    w_long(w, 1767225600500);      /* finished_at */
    w_str(w, "t-77");
    w_byte(w, 1);                  /* retryable */
}

/* The new reader decodes records of the old writer schema (id 3): the
 * kind it did not carry is inferred from the signals of that version. */
static void test_attempt_id3_decodes(void **state) {
    static const struct {
        const char *worker;
        int outcome;
        const char *error_class, *output;
        ax_attempt_kind_t kind;
    } cases[] = {
        {"host:1", AX_OUTCOME_FAILED, "exit", "boom", AX_ATTEMPT_RUN},
        {"host:1", AX_OUTCOME_SUCCESS, NULL, "", AX_ATTEMPT_RUN},
        {"ax-trigger", AX_OUTCOME_FAILED, "backlog_full", "", AX_ATTEMPT_BACKLOG_FULL},
        {"host:1", AX_OUTCOME_FAILED, "backlog_full", "", AX_ATTEMPT_RUN},
        {"host:1", AX_OUTCOME_SUCCESS, "probe", "12\n", AX_ATTEMPT_PROBE},
        {"host:1", AX_OUTCOME_FAILED, "probe", "", AX_ATTEMPT_RUN},
    };
    char err[ERRLEN] = "";
    wbuf_t w;

    assert_true(ax_attempt_schema_known(AX_SCHEMA_ATTEMPT_ID3));
    assert_true(ax_attempt_schema_known(AX_SCHEMA_ATTEMPT));
    assert_false(ax_attempt_schema_known(AX_SCHEMA_RESULT));
    for (size_t i = 0; i < AX_ARRAY_SIZE(cases); i++) {
        ax_attempt_t m, m2;
        void *buf;
        size_t len;
        w_attempt_id3(&w, cases[i].worker, cases[i].outcome, cases[i].error_class,
                      cases[i].output);
        if (ax_attempt_decode(w.b, w.n, &m, err, sizeof err))
            fail_msg("case %zu: %s", i, err);
        assert_int_equal(m.instance_id, 77);
        assert_int_equal(m.attempt, 2);
        assert_string_equal(m.worker, cases[i].worker);
        assert_int_equal(m.outcome, cases[i].outcome);
        assert_opt_str_eq(cases[i].error_class, m.error_class);
        assert_string_equal(m.output, cases[i].output);
        assert_int_equal(m.finished_at_ms, 1767225600500);
        assert_string_equal(m.trace_id, "t-77");
        assert_int_equal(m.retryable, 1);
        assert_int_equal(m.kind, cases[i].kind);
        /* written again, it is an id 5 record with the same content */
        assert_int_equal(ax_attempt_encode(&m, &buf, &len), 0);
        assert_int_equal(((uint8_t *)buf)[4], AX_SCHEMA_ATTEMPT);
        assert_int_equal(len, w.n + 1); /* one byte more: the kind */
        assert_int_equal(ax_attempt_decode(buf, len, &m2, err, sizeof err), 0);
        assert_attempt_eq(&m, &m2);
        free(buf);
        ax_attempt_clear(&m);
        ax_attempt_clear(&m2);
    }

    /* the framing stays strict: an id 3 record with a kind after it has
     * a byte too many; an id 5 record without its kind is cut short */
    w_attempt_id3(&w, "host:1", AX_OUTCOME_SUCCESS, NULL, "");
    w_byte(&w, 0);
    assert_int_equal(decode_any(AX_SCHEMA_ATTEMPT_ID3, w.b, w.n, err), AX_ERR_INVALID);
    w_attempt_id3(&w, "host:1", AX_OUTCOME_SUCCESS, NULL, "");
    w.b[4] = AX_SCHEMA_ATTEMPT;
    assert_int_equal(decode_any(AX_SCHEMA_ATTEMPT, w.b, w.n, err), AX_ERR_INVALID);
    /* and an Attempt decoder still refuses the other records' ids */
    w_attempt_id3(&w, "host:1", AX_OUTCOME_SUCCESS, NULL, "");
    w.b[4] = AX_SCHEMA_RESULT;
    assert_int_equal(decode_any(AX_SCHEMA_ATTEMPT, w.b, w.n, err), AX_ERR_INVALID);
    assert_string_equal(err, "schema id 4 is not ax.v1.Attempt (5)");
}

/* Every kind travels, and the encoder refuses one it does not know. */
static void test_attempt_kind_roundtrip(void **state) {
    char err[ERRLEN] = "";
    ax_attempt_t in, out;
    void *buf;
    size_t len;

    for (int k = AX_ATTEMPT_RUN; k <= AX_ATTEMPT_PROBE; k++) {
        attempt_min(&in);
        in.kind = (ax_attempt_kind_t)k;
        assert_int_equal(ax_attempt_encode(&in, &buf, &len), 0);
        assert_int_equal(ax_attempt_decode(buf, len, &out, err, sizeof err), 0);
        assert_int_equal(out.kind, k);
        assert_int_equal(((uint8_t *)buf)[len - 1], 2 * k); /* the last field, zig-zag */
        ax_attempt_clear(&out);
        free(buf);
    }
    assert_string_equal(ax_attempt_kind_name(AX_ATTEMPT_BACKLOG_FULL), "BACKLOG_FULL");
    attempt_min(&in);
    in.kind = (ax_attempt_kind_t)3;
    assert_int_equal(ax_attempt_encode(&in, &buf, &len), AX_ERR_INVALID);
}

static void test_trailing_garbage(void **state) {
    char err[ERRLEN] = "";
    uint8_t buf[512];

    for (size_t i = 0; i < AX_ARRAY_SIZE(g_samples); i++) {
        const sample_t *s = &g_samples[i];
        assert_true(s->len + 3 <= sizeof buf);
        memcpy(buf, s->buf, s->len);
        buf[s->len] = 0;
        assert_int_equal(decode_any(s->id, buf, s->len + 1, err), AX_ERR_INVALID);
        assert_non_null(strstr(err, "1 trailing bytes"));
        memcpy(buf + s->len, "\x3d\x3d\x3d", 3);
        assert_int_equal(decode_any(s->id, buf, s->len + 3, err), AX_ERR_INVALID);
        assert_int_equal(ax_codec_validate(s->id, buf + 5, s->len - 5 + 3, err, sizeof err), AX_ERR_INVALID);
    }
}

static void test_truncated_prefixes(void **state) {
    char err[ERRLEN] = "";
    ax_submit_t m, before;

    for (size_t i = 0; i < AX_ARRAY_SIZE(g_samples); i++) {
        const sample_t *s = &g_samples[i];
        for (size_t n = 0; n < s->len; n++) {
            /* a copy of exactly n bytes, so ASan sees any read past it */
            uint8_t *p = malloc(n ? n : 1);
            memcpy(p, s->buf, n);
            if (decode_any(s->id, p, n, err) != AX_ERR_INVALID)
                fail_msg("sample %zu accepted at %zu of %zu bytes", i, n, s->len);
            if (n >= 5)
                assert_int_equal(ax_codec_validate(s->id, p + 5, n - 5, err, sizeof err), AX_ERR_INVALID);
            free(p);
        }
    }

    /* the output struct is left untouched on failure */
    memset(&m, 0x5a, sizeof m);
    memcpy(&before, &m, sizeof m);
    assert_int_equal(ax_submit_decode(g_samples[0].buf, g_samples[0].len - 1, &m, err, sizeof err),
                     AX_ERR_INVALID);
    assert_memory_equal(&m, &before, sizeof m);
}

static void test_bad_strings(void **state) {
    char err[ERRLEN] = "";
    wbuf_t w;
    ax_submit_t m;
    void *buf;
    size_t len;

    /* NUL inside Submit.job */
    w_header(&w, AX_SCHEMA_SUBMIT);
    w_long(&w, 1);
    w_long(&w, 3);
    w_raw(&w, "a\0b", 3);
    w_long(&w, 0);
    w_submit_tail(&w);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_string_equal(err, "string at offset 6 contains a NUL byte at offset 8 (in Submit.job)");

    /* NUL inside an argv element */
    w_submit_cmd_prefix(&w);
    w_long(&w, 1);
    w_long(&w, 2);
    w_raw(&w, "a\0", 2);
    w_long(&w, 0);
    w_submit_tail(&w);
    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "NUL byte"));
    assert_non_null(strstr(err, "Submit.command[0]"));

    /* not UTF-8: a lone continuation byte, an overlong '/', a surrogate */
    static const char *const bad[] = { "a\x80", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82" };
    for (size_t i = 0; i < AX_ARRAY_SIZE(bad); i++) {
        w_header(&w, AX_SCHEMA_SUBMIT);
        w_long(&w, 1);
        w_str(&w, bad[i]);
        w_long(&w, 0);
        w_submit_tail(&w);
        assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, w.b, w.n, err), AX_ERR_INVALID);
        assert_non_null(strstr(err, "not valid UTF-8"));

        /* and the encoder refuses to produce it */
        ax_submit_init(&m);
        m.job = (char *)bad[i];
        assert_int_equal(ax_submit_encode(&m, &buf, &len), AX_ERR_INVALID);
    }
}

static void test_utf8_sanitized_encodes(void **state) {
    char ok[] = "héllo — ✓ 𝄞";
    char bad[] = "a\xff b\xe2\x82 c\xc0\xaf d\xed\xa0\x80 \xe2\x82";
    ax_attempt_t a;
    void *buf;
    size_t len;

    /* ax_utf8_sanitize (core/util.c) is what services run on outside text;
     * whatever it produces must be encodable. */
    assert_int_equal(ax_utf8_sanitize(ok, strlen(ok)), 0);
    assert_string_equal(ok, "héllo — ✓ 𝄞");
    attempt_min(&a);
    a.output = bad;
    assert_int_equal(ax_attempt_encode(&a, &buf, &len), AX_ERR_INVALID);
    assert_int_equal(ax_utf8_sanitize(bad, strlen(bad)), 10);
    assert_string_equal(bad, "a? b?? c?? d??? ??");
    assert_int_equal(ax_attempt_encode(&a, &buf, &len), 0);
    free(buf);
}

static void test_wrong_schema_id(void **state) {
    char err[ERRLEN] = "";
    const sample_t *d = &g_samples[2];   /* a Dispatch */
    uint8_t buf[512];

    assert_int_equal(decode_any(AX_SCHEMA_SUBMIT, d->buf, d->len, err), AX_ERR_INVALID);
    assert_string_equal(err, "schema id 2 is not ax.v1.Submit (1)");

    memcpy(buf, d->buf, d->len);
    buf[4] = 7;
    assert_int_equal(decode_any(AX_SCHEMA_DISPATCH, buf, d->len, err), AX_ERR_INVALID);
    assert_string_equal(err, "schema id 7 is not ax.v1.Dispatch (2)");
    buf[4] = 2;
    buf[0] = 1;
    assert_int_equal(decode_any(AX_SCHEMA_DISPATCH, buf, d->len, err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "magic byte"));

    assert_int_equal(ax_codec_validate(7, d->buf + 5, d->len - 5, err, sizeof err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "unknown schema id 7"));
}

static void test_submit_rules(void **state) {
    char err[ERRLEN] = "";
    ax_submit_t m;
    wbuf_t w;
    void *buf = NULL;
    size_t len;
    static char *empty_prog[] = { "", "x", NULL };

    /* encoders refuse */
    ax_submit_init(&m);
    assert_int_equal(ax_submit_encode(&m, &buf, &len), AX_ERR_INVALID);          /* neither */
    m.job = "j";
    m.command = cmd1;
    m.command_len = 1;
    assert_int_equal(ax_submit_encode(&m, &buf, &len), AX_ERR_INVALID);          /* both */
    m.command = NULL;
    m.command_len = 0;
    m.priority = 5;
    assert_int_equal(ax_submit_encode(&m, &buf, &len), AX_ERR_INVALID);
    m.priority = -2;
    assert_int_equal(ax_submit_encode(&m, &buf, &len), AX_ERR_INVALID);
    m.priority = 0;
    m.delay_ms = -2;
    assert_int_equal(ax_submit_encode(&m, &buf, &len), AX_ERR_INVALID);
    m.delay_ms = -1;
    m.timeout_ms = -1;
    assert_int_equal(ax_submit_encode(&m, &buf, &len), AX_ERR_INVALID);
    m.timeout_ms = 0;
    m.job = "";
    assert_int_equal(ax_submit_encode(&m, &buf, &len), AX_ERR_INVALID);
    m.job = NULL;
    m.command = cmd1;
    m.command_len = 0;
    assert_int_equal(ax_submit_encode(&m, &buf, &len), AX_ERR_INVALID);          /* empty argv */
    m.command = empty_prog;
    m.command_len = 2;
    assert_int_equal(ax_submit_encode(&m, &buf, &len), AX_ERR_INVALID);
    m.command = cmd1;
    m.command_len = 1;
    m.payload_len = 3;
    assert_int_equal(ax_submit_encode(&m, &buf, &len), AX_ERR_INVALID);          /* NULL payload */
    m.payload_len = 0;
    assert_int_equal(ax_submit_encode(&m, &buf, &len), 0);
    free(buf);

    /* decoders refuse the same on the wire: neither */
    w_header(&w, AX_SCHEMA_SUBMIT);
    w_long(&w, 0);
    w_long(&w, 0);
    w_submit_tail(&w);
    assert_int_equal(ax_submit_decode(w.b, w.n, &m, err, sizeof err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "neither job nor command"));

    /* both */
    w_header(&w, AX_SCHEMA_SUBMIT);
    w_long(&w, 1);
    w_str(&w, "j");
    w_long(&w, 1);
    w_long(&w, 1);
    w_str(&w, "true");
    w_long(&w, 0);
    w_submit_tail(&w);
    assert_int_equal(ax_submit_decode(w.b, w.n, &m, err, sizeof err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "both job and command"));

    /* command [] and command [""] */
    w_submit_cmd_prefix(&w);
    w_long(&w, 0);
    w_submit_tail(&w);
    assert_int_equal(ax_submit_decode(w.b, w.n, &m, err, sizeof err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "Submit.command is empty"));
    w_submit_cmd_prefix(&w);
    w_long(&w, 1);
    w_str(&w, "");
    w_long(&w, 0);
    w_submit_tail(&w);
    assert_int_equal(ax_submit_decode(w.b, w.n, &m, err, sizeof err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "the program"));

    /* priority 7, delay_ms -1 present, timeout_ms -5 present */
    for (int field = 0; field < 3; field++) {
        w_header(&w, AX_SCHEMA_SUBMIT);
        w_long(&w, 1);
        w_str(&w, "j");
        w_long(&w, 0);   /* command */
        w_long(&w, 0);   /* run_at */
        if (field == 1) {
            w_long(&w, 1);
            w_long(&w, -1);
        } else {
            w_long(&w, 0);
        }
        if (field == 0) {
            w_long(&w, 1);
            w_long(&w, 7);
        } else {
            w_long(&w, 0);
        }
        w_long(&w, 0);   /* payload */
        w_long(&w, 0);
        w_long(&w, 0);
        if (field == 2) {
            w_long(&w, 1);
            w_long(&w, -5);
        } else {
            w_long(&w, 0);
        }
        assert_int_equal(ax_submit_decode(w.b, w.n, &m, err, sizeof err), AX_ERR_INVALID);
        assert_non_null(strstr(err, field == 0 ? "priority 7" : field == 1 ? "delay_ms -1" : "timeout_ms -5"));
    }

    /* the plain valid one from the same builder */
    w_submit_job(&w);
    if (ax_submit_decode(w.b, w.n, &m, err, sizeof err))
        fail_msg("%s", err);
    assert_string_equal(m.job, "j");
    assert_int_equal(m.priority, -1);
    assert_int_equal(m.delay_ms, -1);
    ax_submit_clear(&m);
}

static void test_dispatch_rules(void **state) {
    char err[ERRLEN] = "";
    ax_dispatch_t m;
    void *buf;
    size_t len;

    dispatch_min(&m);
    m.command_len = 0;
    assert_int_equal(ax_dispatch_encode(&m, &buf, &len), AX_ERR_INVALID);
    m.handler_kind = NULL;
    assert_int_equal(ax_dispatch_encode(&m, &buf, &len), AX_ERR_INVALID);

    /* a "command" Dispatch with an empty argv, crafted on the wire */
    wbuf_t w;
    w_header(&w, AX_SCHEMA_DISPATCH);
    w_long(&w, 1);
    w_long(&w, 1);
    w_long(&w, 0);
    w_str(&w, "command");
    w_long(&w, 0);   /* command [] */
    w_long(&w, 0);   /* payload */
    w_long(&w, 0);   /* timeout_ms */
    w_long(&w, 0);   /* nominal_time null */
    w_long(&w, 0);   /* due_at */
    w_long(&w, 2);   /* priority */
    w_str(&w, "t");
    w_long(&w, 0);
    w_long(&w, 0);   /* epoch */
    assert_int_equal(ax_dispatch_decode(w.b, w.n, &m, err, sizeof err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "Dispatch.command is empty"));
}

static uint64_t xorshift64(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Every mutated copy either decodes (and then re-encodes and decodes the
 * same) or fails with a reason; ASan/UBSan catch the rest. */
static void test_mutations(void **state) {
    char err[ERRLEN];
    uint64_t seed = 0x9e3779b97f4a7c15u;
    int ok = 0, failed = 0;

    for (int iter = 0; iter < 20000; iter++) {
        const sample_t *s = &g_samples[xorshift64(&seed) % AX_ARRAY_SIZE(g_samples)];
        uint8_t tmp[600];
        size_t n = s->len;
        int nmut = 1 + (int)(xorshift64(&seed) % 4);
        uint8_t *p;
        int rc, vrc = 0;

        memcpy(tmp, s->buf, n);
        for (int k = 0; k < nmut; k++) {
            uint64_t r = xorshift64(&seed);
            /* mostly hit the Avro body; sometimes the header */
            size_t pos = n > 5 && (r >> 8) % 10 != 0 ? 5 + (size_t)((r >> 16) % (n - 4))
                                                      : (size_t)((r >> 16) % (n + 1));
            uint8_t byte = (uint8_t)(r >> 40);
            switch (r % 6) {
            case 0:   /* flip a bit */
                if (pos < n)
                    tmp[pos] ^= (uint8_t)(1u << (byte & 7));
                break;
            case 1:   /* set a byte, biased to interesting values */
                if (pos < n)
                    tmp[pos] = (byte & 1) ? byte : (uint8_t[]){ 0x00, 0x01, 0x3d, 0x7f, 0x80, 0xff }[byte % 6];
                break;
            case 2:   /* insert */
                if (n < sizeof tmp && pos <= n) {
                    memmove(tmp + pos + 1, tmp + pos, n - pos);
                    tmp[pos] = byte;
                    n++;
                }
                break;
            case 3:   /* delete */
                if (pos < n) {
                    memmove(tmp + pos, tmp + pos + 1, n - pos - 1);
                    n--;
                }
                break;
            case 4:   /* truncate */
                n = pos < n ? pos : n;
                break;
            default:  /* duplicate a short run */
                if (pos < n && n + 4 <= sizeof tmp) {
                    size_t run = n - pos < 4 ? n - pos : 4;
                    memmove(tmp + pos + run, tmp + pos, n - pos);
                    n += run;
                }
                break;
            }
        }
        /* an exact-size heap copy, so ASan flags any overread */
        p = malloc(n ? n : 1);
        memcpy(p, tmp, n);
        memset(err, 0, sizeof err);
        rc = decode_reencode(s->id, p, n, err);
        if (n >= 5)
            vrc = ax_codec_validate(s->id, p + 5, n - 5, NULL, 0);
        free(p);
        if (rc == 0) {
            ok++;
            assert_int_equal(vrc, 0);   /* decoding implies a valid walk */
        } else {
            failed++;
            assert_true(rc == AX_ERR_INVALID);
            assert_true(err[0] != '\0');
        }
    }
    print_message("mutations: %d decoded, %d rejected\n", ok, failed);
    assert_true(ok > 100);
    assert_true(failed > 1000);
}

/* ---- Records of the released wire format (docs/DEPLOYMENT.md, upgrades) ----
 * One record of every schema ax writes, every field set, as the release
 * before issue #15 wrote them (encoded by commit 6625877's codec): frozen
 * bytes, never regenerated. During a rolling upgrade old and new
 * processes share the topics both ways: the new reader must decode what
 * the old writer wrote (checked here field by field), and what the new
 * writer writes must be what the old reader decodes (checked here as the
 * same bytes). A schema change that adds a writer id breaks the second
 * check by design: introduce the new id reader-first (one release reads
 * it, the next writes it), then move its old fixture to the read-only
 * ones, as the id 3 Attempt is (test_attempt_id3_decodes). */
static char *rel_argv[] = {"/usr/bin/env", "A=1", "report", "--día", NULL};
static uint8_t rel_payload[] = {0x00, 0x01, 0xfe, 0xff, 'p'};
static void rel_submit(ax_submit_t *m) {
    ax_submit_init(m);
    m->command = rel_argv;
    m->command_len = 4;
    m->run_at_ms = 1767225600123;
    m->delay_ms = 250;
    m->priority = 1;
    m->payload = rel_payload;
    m->payload_len = sizeof rel_payload;
    m->idempotency_key = "order-42";
    m->trace_id = "trace-rel";
    m->timeout_ms = 90000;
}
static void rel_dispatch(ax_dispatch_t *m) {
    memset(m, 0, sizeof *m);
    m->instance_id = 9007199254740993;
    m->attempt = 3;
    m->job = "nightly-report";
    m->handler_kind = "command";
    m->command = rel_argv;
    m->command_len = 4;
    m->payload = rel_payload;
    m->payload_len = sizeof rel_payload;
    m->timeout_ms = 90000;
    m->nominal_time_ms = 1767225600000;
    m->due_at_ms = 1767225600100;
    m->priority = 4;
    m->trace_id = "trace-rel";
    m->idempotency_key = "order-42";
    m->epoch = 17;
}
static void rel_attempt(ax_attempt_t *m) {
    memset(m, 0, sizeof *m);
    m->kind = AX_ATTEMPT_PROBE;
    m->instance_id = 9007199254740993;
    m->attempt = 3;
    m->worker = "exec-7:4242";
    m->outcome = AX_OUTCOME_FAILED;
    m->exit_code = 3;
    m->exit_code_set = 1;
    m->error_class = "exit";
    m->error = "exited with status 3";
    m->output = "line 1\nline 2\n";
    m->started_at_ms = 1767225600200;
    m->finished_at_ms = 1767225601700;
    m->trace_id = "trace-rel";
    m->retryable = 1;
}
static void rel_result(ax_result_t *m) {
    memset(m, 0, sizeof *m);
    m->instance_id = 9007199254740993;
    m->job = "nightly-report";
    m->outcome = AX_OUTCOME_TIMEOUT;
    m->attempts = 3;
    m->exit_code = -9;
    m->exit_code_set = 1;
    m->error_class = "timeout";
    m->error = "killed after 90000 ms";
    m->output = "partial";
    m->trace_id = "trace-rel";
    m->idempotency_key = "order-42";
    m->nominal_time_ms = 1767225600000;
    m->scheduled_at_ms = 1767225600050;
    m->locked_at_ms = 1767225600150;
    m->running_at_ms = 1767225600200;
    m->finished_at_ms = 1767225691000;
}

static const uint8_t rel_submit_id1[] = {
    0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x08, 0x18, 0x2f, 0x75, 0x73,
    0x72, 0x2f, 0x62, 0x69, 0x6e, 0x2f, 0x65, 0x6e, 0x76, 0x06, 0x41, 0x3d,
    0x31, 0x0c, 0x72, 0x65, 0x70, 0x6f, 0x72, 0x74, 0x0c, 0x2d, 0x2d, 0x64,
    0xc3, 0xad, 0x61, 0x00, 0x02, 0xf6, 0xa1, 0xd5, 0xed, 0xee, 0x66, 0x02,
    0xf4, 0x03, 0x02, 0x02, 0x0a, 0x00, 0x01, 0xfe, 0xff, 0x70, 0x02, 0x10,
    0x6f, 0x72, 0x64, 0x65, 0x72, 0x2d, 0x34, 0x32, 0x02, 0x12, 0x74, 0x72,
    0x61, 0x63, 0x65, 0x2d, 0x72, 0x65, 0x6c, 0x02, 0xa0, 0xfe, 0x0a,
};
static const uint8_t rel_dispatch_id2[] = {
    0x00, 0x00, 0x00, 0x00, 0x02, 0x82, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x20, 0x06, 0x02, 0x1c, 0x6e, 0x69, 0x67, 0x68, 0x74, 0x6c, 0x79, 0x2d,
    0x72, 0x65, 0x70, 0x6f, 0x72, 0x74, 0x0e, 0x63, 0x6f, 0x6d, 0x6d, 0x61,
    0x6e, 0x64, 0x08, 0x18, 0x2f, 0x75, 0x73, 0x72, 0x2f, 0x62, 0x69, 0x6e,
    0x2f, 0x65, 0x6e, 0x76, 0x06, 0x41, 0x3d, 0x31, 0x0c, 0x72, 0x65, 0x70,
    0x6f, 0x72, 0x74, 0x0c, 0x2d, 0x2d, 0x64, 0xc3, 0xad, 0x61, 0x00, 0x0a,
    0x00, 0x01, 0xfe, 0xff, 0x70, 0xa0, 0xfe, 0x0a, 0x02, 0x80, 0xa0, 0xd5,
    0xed, 0xee, 0x66, 0xc8, 0xa1, 0xd5, 0xed, 0xee, 0x66, 0x08, 0x12, 0x74,
    0x72, 0x61, 0x63, 0x65, 0x2d, 0x72, 0x65, 0x6c, 0x02, 0x10, 0x6f, 0x72,
    0x64, 0x65, 0x72, 0x2d, 0x34, 0x32, 0x22,
};
static const uint8_t rel_attempt_id5[] = {
    0x00, 0x00, 0x00, 0x00, 0x05, 0x82, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x20, 0x06, 0x16, 0x65, 0x78, 0x65, 0x63, 0x2d, 0x37, 0x3a, 0x34, 0x32,
    0x34, 0x32, 0x02, 0x02, 0x06, 0x02, 0x08, 0x65, 0x78, 0x69, 0x74, 0x02,
    0x28, 0x65, 0x78, 0x69, 0x74, 0x65, 0x64, 0x20, 0x77, 0x69, 0x74, 0x68,
    0x20, 0x73, 0x74, 0x61, 0x74, 0x75, 0x73, 0x20, 0x33, 0x1c, 0x6c, 0x69,
    0x6e, 0x65, 0x20, 0x31, 0x0a, 0x6c, 0x69, 0x6e, 0x65, 0x20, 0x32, 0x0a,
    0x90, 0xa3, 0xd5, 0xed, 0xee, 0x66, 0xc8, 0xba, 0xd5, 0xed, 0xee, 0x66,
    0x12, 0x74, 0x72, 0x61, 0x63, 0x65, 0x2d, 0x72, 0x65, 0x6c, 0x01, 0x04,
};
static const uint8_t rel_result_id4[] = {
    0x00, 0x00, 0x00, 0x00, 0x04, 0x82, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x20, 0x02, 0x1c, 0x6e, 0x69, 0x67, 0x68, 0x74, 0x6c, 0x79, 0x2d, 0x72,
    0x65, 0x70, 0x6f, 0x72, 0x74, 0x04, 0x06, 0x02, 0x11, 0x02, 0x0e, 0x74,
    0x69, 0x6d, 0x65, 0x6f, 0x75, 0x74, 0x02, 0x2a, 0x6b, 0x69, 0x6c, 0x6c,
    0x65, 0x64, 0x20, 0x61, 0x66, 0x74, 0x65, 0x72, 0x20, 0x39, 0x30, 0x30,
    0x30, 0x30, 0x20, 0x6d, 0x73, 0x0e, 0x70, 0x61, 0x72, 0x74, 0x69, 0x61,
    0x6c, 0x12, 0x74, 0x72, 0x61, 0x63, 0x65, 0x2d, 0x72, 0x65, 0x6c, 0x02,
    0x10, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x2d, 0x34, 0x32, 0x02, 0x80, 0xa0,
    0xd5, 0xed, 0xee, 0x66, 0xe4, 0xa0, 0xd5, 0xed, 0xee, 0x66, 0x02, 0xac,
    0xa2, 0xd5, 0xed, 0xee, 0x66, 0x02, 0x90, 0xa3, 0xd5, 0xed, 0xee, 0x66,
    0xf0, 0xad, 0xe0, 0xed, 0xee, 0x66,
};

static void test_released_records(void **state) {
    char err[ERRLEN] = "";
    void *buf;
    size_t len;
    ax_submit_t s, s2;
    rel_submit(&s);
    if (ax_submit_decode(rel_submit_id1, sizeof rel_submit_id1, &s2, err, sizeof err))
        fail_msg("released Submit: %s", err);
    assert_submit_eq(&s, &s2);
    ax_submit_clear(&s2);
    assert_int_equal(ax_submit_encode(&s, &buf, &len), 0);
    assert_int_equal(len, sizeof rel_submit_id1);
    assert_memory_equal(buf, rel_submit_id1, len);
    free(buf);

    ax_dispatch_t d, d2;
    rel_dispatch(&d);
    if (ax_dispatch_decode(rel_dispatch_id2, sizeof rel_dispatch_id2, &d2, err, sizeof err))
        fail_msg("released Dispatch: %s", err);
    assert_dispatch_eq(&d, &d2);
    ax_dispatch_clear(&d2);
    assert_int_equal(ax_dispatch_encode(&d, &buf, &len), 0);
    assert_int_equal(len, sizeof rel_dispatch_id2);
    assert_memory_equal(buf, rel_dispatch_id2, len);
    free(buf);

    ax_attempt_t a, a2;
    rel_attempt(&a);
    if (ax_attempt_decode(rel_attempt_id5, sizeof rel_attempt_id5, &a2, err, sizeof err))
        fail_msg("released Attempt: %s", err);
    assert_attempt_eq(&a, &a2);
    ax_attempt_clear(&a2);
    assert_int_equal(ax_attempt_encode(&a, &buf, &len), 0);
    assert_int_equal(len, sizeof rel_attempt_id5);
    assert_memory_equal(buf, rel_attempt_id5, len);
    free(buf);

    ax_result_t r, r2;
    rel_result(&r);
    if (ax_result_decode(rel_result_id4, sizeof rel_result_id4, &r2, err, sizeof err))
        fail_msg("released Result: %s", err);
    assert_result_eq(&r, &r2);
    ax_result_clear(&r2);
    assert_int_equal(ax_result_encode(&r, &buf, &len), 0);
    assert_int_equal(len, sizeof rel_result_id4);
    assert_memory_equal(buf, rel_result_id4, len);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outcome_names),
        cmocka_unit_test(test_init_and_clear),
        cmocka_unit_test(test_roundtrip_submit),
        cmocka_unit_test(test_roundtrip_dispatch),
        cmocka_unit_test(test_roundtrip_attempt),
        cmocka_unit_test(test_roundtrip_result),
        cmocka_unit_test(test_wire_layout),
        cmocka_unit_test(test_peek_schema),
        cmocka_unit_test(test_byte_0x3d),
        cmocka_unit_test(test_huge_lengths),
        cmocka_unit_test(test_huge_array_counts),
        cmocka_unit_test(test_bad_indexes),
        cmocka_unit_test(test_attempt_id3_decodes),
        cmocka_unit_test(test_released_records),
        cmocka_unit_test(test_attempt_kind_roundtrip),
        cmocka_unit_test(test_trailing_garbage),
        cmocka_unit_test(test_truncated_prefixes),
        cmocka_unit_test(test_bad_strings),
        cmocka_unit_test(test_utf8_sanitized_encodes),
        cmocka_unit_test(test_wrong_schema_id),
        cmocka_unit_test(test_submit_rules),
        cmocka_unit_test(test_dispatch_rules),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
