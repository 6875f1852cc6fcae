/*
 * test_pgarr.c — the PostgreSQL array-literal builders ax_strbuf_* /
 * ax_pgarr_* (adapters/pg.c): empty arrays, integers at the extremes, text
 * quoting and NULL, reuse of one buffer, and growth checked by reading the
 * literal back; and the TCP settings every connection gets by default
 * (ax_pg_tcp_defaults), from the leases.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ax/common.h"
#include "ax/conf.h"
#include "ax/pg.h"
#include "adapters/pg_raw.h"

/* ---- a fixed-seed PRNG (xorshift64*) so runs are reproducible --------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static unsigned rng_below(unsigned n) { return (unsigned)(rng() % n); }

/* ---- ax_strbuf / ax_pgarr --------------------------------------------- */

static void assert_buf_invariants(const ax_strbuf_t *b) {
    assert_non_null(b->s);
    assert_true(b->len < b->cap);
    assert_int_equal(b->s[b->len], '\0');
    assert_int_equal(strlen(b->s), b->len);
}

static void test_strbuf_add(void **state) {
    (void)state;
    ax_strbuf_t b = {0};
    assert_int_equal(ax_strbuf_add(&b, "", 0), 0);
    assert_buf_invariants(&b);
    assert_string_equal(b.s, "");
    assert_int_equal(ax_strbuf_add(&b, "hello world", 5), 0); /* only n bytes */
    assert_int_equal(ax_strbuf_add(&b, ", there", 7), 0);
    assert_string_equal(b.s, "hello, there");
    assert_int_equal(b.len, 12);
    assert_buf_invariants(&b);
    /* one add larger than several doublings */
    char big[5000];
    memset(big, 'q', sizeof big);
    assert_int_equal(ax_strbuf_add(&b, big, sizeof big), 0);
    assert_int_equal(b.len, 12 + sizeof big);
    assert_buf_invariants(&b);
    assert_int_equal(b.s[12 + sizeof big - 1], 'q');
    ax_strbuf_free(&b);
    assert_null(b.s);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    ax_strbuf_free(&b); /* twice is fine */
}

static void test_pgarr_empty_and_ints(void **state) {
    (void)state;
    ax_strbuf_t b = {0};
    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{}");
    assert_int_equal(b.len, 2);

    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_int_equal(ax_pgarr_int(&b, 1), 0);
    assert_int_equal(ax_pgarr_int(&b, -2), 0);
    assert_int_equal(ax_pgarr_int(&b, 3), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{1,-2,3}");

    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_int_equal(ax_pgarr_int(&b, 0), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{0}");

    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_int_equal(ax_pgarr_int(&b, INT64_MIN), 0);
    assert_int_equal(ax_pgarr_int(&b, INT64_MAX), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{-9223372036854775808,9223372036854775807}");
    assert_buf_invariants(&b);
    ax_strbuf_free(&b);
}

static void test_pgarr_text(void **state) {
    (void)state;
    ax_strbuf_t b = {0};
    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_int_equal(ax_pgarr_text(&b, "a\"b\\c"), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{\"a\\\"b\\\\c\"}");

    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_int_equal(ax_pgarr_text(&b, NULL), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{NULL}");

    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_int_equal(ax_pgarr_text(&b, "x"), 0);
    assert_int_equal(ax_pgarr_text(&b, NULL), 0);
    assert_int_equal(ax_pgarr_text(&b, ""), 0);
    assert_int_equal(ax_pgarr_text(&b, "NULL"), 0); /* the word, not SQL NULL */
    assert_int_equal(ax_pgarr_text(&b, "a,b"), 0);
    assert_int_equal(ax_pgarr_text(&b, "{c}"), 0);
    assert_int_equal(ax_pgarr_text(&b, " sp "), 0);
    assert_int_equal(ax_pgarr_text(&b, "\\\\"), 0);
    assert_int_equal(ax_pgarr_text(&b, "\xC3\xA9"), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{\"x\",NULL,\"\",\"NULL\",\"a,b\",\"{c}\",\" sp \",\"\\\\\\\\\","
                             "\"\xC3\xA9\"}");

    /* NULL first, then a value: the comma still goes in */
    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_int_equal(ax_pgarr_text(&b, NULL), 0);
    assert_int_equal(ax_pgarr_text(&b, "y"), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{NULL,\"y\"}");
    assert_buf_invariants(&b);
    ax_strbuf_free(&b);
}

static void test_pgarr_reuse(void **state) {
    (void)state;
    ax_strbuf_t b = {0};
    assert_int_equal(ax_pgarr_begin(&b), 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(ax_pgarr_int(&b, i), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    size_t cap = b.cap;
    /* begin() starts fresh, keeping the allocation */
    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_string_equal(b.s, "{");
    assert_int_equal(b.len, 1);
    assert_int_equal(ax_pgarr_int(&b, 7), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{7}");
    assert_int_equal(b.cap, cap);
    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_int_equal(ax_pgarr_text(&b, "t"), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{\"t\"}");
    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{}");
    ax_strbuf_free(&b);
    /* and after free, usable again */
    assert_int_equal(ax_pgarr_begin(&b), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_string_equal(b.s, "{}");
    ax_strbuf_free(&b);
}

static void test_pgarr_growth_ints(void **state) {
    (void)state;
    ax_strbuf_t b = {0};
    assert_int_equal(ax_pgarr_begin(&b), 0);
    for (int64_t i = 0; i < 10000; i++)
        assert_int_equal(ax_pgarr_int(&b, i * 1000003 - 5000000000ll), 0);
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_buf_invariants(&b);
    assert_true(b.len > 256);
    /* parse it back */
    assert_int_equal(b.s[0], '{');
    assert_int_equal(b.s[b.len - 1], '}');
    const char *p = b.s + 1;
    for (int64_t i = 0; i < 10000; i++) {
        char *end;
        long long v = strtoll(p, &end, 10);
        assert_true(end != p);
        assert_int_equal(v, i * 1000003 - 5000000000ll);
        assert_int_equal(*end, i == 9999 ? '}' : ',');
        p = end + 1;
    }
    assert_ptr_equal(p, b.s + b.len);
    ax_strbuf_free(&b);
}

/* Parse a text[] literal as built above; returns the element count,
 * elements (NULL for SQL NULL) go to out[] (malloc'd). */
static size_t parse_text_array(const char *s, char **out, size_t max) {
    size_t n = 0;
    assert_int_equal(s[0], '{');
    s++;
    if (*s == '}') {
        assert_int_equal(s[1], '\0');
        return 0;
    }
    for (;;) {
        assert_true(n < max);
        if (strncmp(s, "NULL", 4) == 0 && (s[4] == ',' || s[4] == '}')) {
            out[n++] = NULL;
            s += 4;
        } else {
            assert_int_equal(*s, '"');
            s++;
            char *e = malloc(strlen(s) + 1);
            assert_non_null(e);
            size_t k = 0;
            while (*s != '"') {
                assert_true(*s != '\0');
                if (*s == '\\')
                    s++;
                assert_true(*s != '\0');
                e[k++] = *s++;
            }
            e[k] = '\0';
            s++;
            out[n++] = e;
        }
        if (*s == '}')
            break;
        assert_int_equal(*s, ',');
        s++;
    }
    assert_int_equal(s[1], '\0');
    return n;
}

static void test_pgarr_growth_text_round_trip(void **state) {
    (void)state;
    enum { N = 10000 };
    static const char alphabet[] = "ab\"\\,{} NUL\xC3\xA9'";
    char **in = calloc(N, sizeof *in), **out = calloc(N, sizeof *out);
    assert_non_null(in);
    assert_non_null(out);
    rng_state = 0x13198A2E03707344ull;
    ax_strbuf_t b = {0};
    assert_int_equal(ax_pgarr_begin(&b), 0);
    for (size_t i = 0; i < N; i++) {
        if (rng_below(10) == 0) {
            in[i] = NULL;
        } else {
            size_t len = rng_below(12);
            in[i] = malloc(len + 1);
            assert_non_null(in[i]);
            for (size_t k = 0; k < len; k++)
                in[i][k] = alphabet[rng_below(sizeof alphabet - 1)];
            in[i][len] = '\0';
        }
        assert_int_equal(ax_pgarr_text(&b, in[i]), 0);
    }
    assert_int_equal(ax_pgarr_end(&b), 0);
    assert_buf_invariants(&b);
    assert_int_equal(parse_text_array(b.s, out, N), N);
    for (size_t i = 0; i < N; i++) {
        if (!in[i])
            assert_null(out[i]);
        else
            assert_string_equal(out[i], in[i]);
        free(in[i]);
        free(out[i]);
    }
    free(in);
    free(out);
    ax_strbuf_free(&b);
}

/* Half the shortest lease, within 1..30 s; keepalives and the connect
 * timeout follow it. */
static void test_tcp_defaults(void **st) {
    (void)st;
    ax_conf_t c;
    ax_conf_init(&c);
    ax_pg_tcp_t d;
    ax_pg_tcp_defaults(&c, &d); /* executor.lease.min.ms 5000, trigger.lease.ms 10000 */
    assert_int_equal(d.user_timeout_ms, 2500);
    assert_int_equal(d.keepalives_idle_s, 1);
    assert_int_equal(d.keepalives_interval_s, 1);
    assert_int_equal(d.keepalives_count, 3);
    assert_int_equal(d.connect_timeout_s, 5);
    /* the fence's deadline (95% of the lease minus the margin) comes after */
    assert_true(d.user_timeout_ms < c.executor_lease_min_ms * 95 / 100 -
                                        c.executor_fence_margin_ms);
    c.executor_lease_min_ms = 60000;
    c.trigger_lease_ms = 20000;
    ax_pg_tcp_defaults(&c, &d);
    assert_int_equal(d.user_timeout_ms, 10000);
    assert_int_equal(d.keepalives_idle_s, 5);
    assert_int_equal(d.keepalives_interval_s, 2);
    assert_int_equal(d.connect_timeout_s, 20);
    c.executor_lease_min_ms = 500;
    ax_pg_tcp_defaults(&c, &d);
    assert_int_equal(d.user_timeout_ms, 1000);
    assert_int_equal(d.connect_timeout_s, 2);
    c.executor_lease_min_ms = 86400000;
    c.trigger_lease_ms = 600000;
    ax_pg_tcp_defaults(&c, &d);
    assert_int_equal(d.user_timeout_ms, 30000);
    ax_conf_free(&c);
}

/* The user's pg.* TCP values replace the defaults for both sides of the
 * session; pg.keepalives = 0 turns keepalives off; a value that is not a
 * whole number is refused by name before anything connects (it would go
 * into the server's session options too). */
static void test_tcp_effective(void **st) {
    (void)st;
    char err[256];
    ax_conf_t c;
    ax_conf_init(&c);
    ax_pg_tcp_t d, e;
    ax_pg_tcp_defaults(&c, &d);
    assert_int_equal(ax_pg_tcp_effective(&c, &e), 1);
    assert_memory_equal(&d, &e, sizeof d);
    assert_int_equal(ax_conf_set(&c, "pg.keepalives_idle", "7", "test", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&c, "pg.tcp_user_timeout", "12000", "test", err, sizeof err), 0);
    assert_int_equal(ax_pg_tcp_effective(&c, &e), 1);
    assert_int_equal(e.keepalives_idle_s, 7);
    assert_int_equal(e.user_timeout_ms, 12000);
    assert_int_equal(e.keepalives_interval_s, d.keepalives_interval_s);
    assert_int_equal(e.keepalives_count, d.keepalives_count);
    ax_pg_t *pg = ax_pg_new(&c, "test", err, sizeof err);
    assert_non_null(pg);
    ax_pg_destroy(pg);
    assert_int_equal(ax_conf_set(&c, "pg.keepalives", "0", "test", err, sizeof err), 0);
    assert_int_equal(ax_pg_tcp_effective(&c, &e), 0);
    assert_int_equal(ax_conf_set(&c, "pg.keepalives_count", "3 -c work_mem=1TB", "test", err,
                                 sizeof err),
                     0);
    err[0] = 0;
    assert_null(ax_pg_new(&c, "test", err, sizeof err));
    assert_non_null(strstr(err, "pg.keepalives_count"));
    ax_conf_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strbuf_add),
        cmocka_unit_test(test_tcp_defaults),
        cmocka_unit_test(test_tcp_effective),
        cmocka_unit_test(test_pgarr_empty_and_ints),
        cmocka_unit_test(test_pgarr_text),
        cmocka_unit_test(test_pgarr_reuse),
        cmocka_unit_test(test_pgarr_growth_ints),
        cmocka_unit_test(test_pgarr_growth_text_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
