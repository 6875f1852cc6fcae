/*
 * test_util.c — unit tests of the small pure helpers: ax_backoff_ms,
 * ax_keycmp and ax_boot_ms (common.h), ax_seterr, ax_random_hex, ax_trace_id_new and ax_utf8_sanitize
 * (core/util.c).
 * The PostgreSQL array-literal builders (adapters/pg.c) are in
 * test_pgarr.c. The UTF-8 sanitizer is checked against an independent
 * strict validator/reference (Unicode Table 3-7) on hand-picked cases and
 * on a fixed-seed random loop; buffers are sized exactly so ASan catches
 * any read past `len`.
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

/* ---- a fixed-seed PRNG (xorshift64*) so runs are reproducible --------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static unsigned rng_below(unsigned n) { return (unsigned)(rng() % n); }

/* ---- ax_backoff_ms ---------------------------------------------------- */

/* min(base * 2^attempt, cap) without overflow. */
static int64_t backoff_expected(unsigned attempt, int64_t base, int64_t cap) {
    int64_t v = base;
    for (unsigned i = 0; i < attempt; i++) {
        if (v > INT64_MAX / 2) {
            v = INT64_MAX;
            break;
        }
        v *= 2;
        if (v >= cap)
            break;
    }
    return v < cap ? v : cap;
}

static void test_backoff_sequence(void **state) {
    (void)state;
    static const int64_t want[] = {200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000};
    for (unsigned a = 0; a < AX_ARRAY_SIZE(want); a++)
        assert_int_equal(ax_backoff_ms(a, 200, 10000), want[a]);
    assert_int_equal(ax_backoff_ms(0, 1, 1), 1);
    assert_int_equal(ax_backoff_ms(0, 5, 1000), 5);
    assert_int_equal(ax_backoff_ms(1, 5, 1000), 10);
    assert_int_equal(ax_backoff_ms(2, 5, 1000), 20);
    assert_int_equal(ax_backoff_ms(7, 5, 1000), 640);
    assert_int_equal(ax_backoff_ms(8, 5, 1000), 1000);
    /* base above the cap: the cap */
    assert_int_equal(ax_backoff_ms(0, 5000, 1000), 1000);
    assert_int_equal(ax_backoff_ms(3, 5000, 1000), 1000);
    /* the configuration's extremes */
    assert_int_equal(ax_backoff_ms(0, 1, 600000), 1);
    assert_int_equal(ax_backoff_ms(1000, 1, 600000), 600000);
    assert_int_equal(ax_backoff_ms(1000, 60000, 600000), 600000);
    assert_int_equal(ax_backoff_ms(1000, 60000, 1), 1);
    assert_int_equal(ax_backoff_ms(4294967295u, 200, 10000), 10000);
}

static void test_backoff_capped_monotonic(void **state) {
    (void)state;
    static const int64_t bases[] = {1, 3, 200, 1000, 60000, 1ll << 40};
    static const int64_t caps[] = {
        1, 7, 10000, 600000, 1ll << 31, (1ll << 31) + 1, 1ll << 40, INT64_MAX / 2,
        /* the largest cap for which doubling base 1 cannot overflow: 2^62 */
        (int64_t)1 << 62,
    };
    for (size_t b = 0; b < AX_ARRAY_SIZE(bases); b++)
        for (size_t c = 0; c < AX_ARRAY_SIZE(caps); c++) {
            int64_t base = bases[b], cap = caps[c], prev = 0;
            for (unsigned a = 0; a <= 1000; a++) {
                int64_t d = ax_backoff_ms(a, base, cap);
                if (d != backoff_expected(a, base, cap))
                    fail_msg("backoff(%u, %lld, %lld) = %lld, want %lld", a, (long long)base,
                             (long long)cap, (long long)d,
                             (long long)backoff_expected(a, base, cap));
                assert_true(d <= cap);
                assert_true(d > 0);
                assert_true(d >= prev);
                prev = d;
            }
            assert_int_equal(prev, cap);
        }
}

/*
 * Regression (fixed): with a cap above 2^62 the doubling
 * `d *= 2` runs while d < cap and overflows int64_t (UB; aborts under
 * UBSan) before the cap is reached, e.g. ax_backoff_ms(1000, 1, INT64_MAX).
 * Unreachable with today's configuration (backoff.max.ms <= 600000).
 */
static void test_backoff_huge_cap(void **state) {
    (void)state;
    assert_int_equal(ax_backoff_ms(1000, 1, INT64_MAX), INT64_MAX);
    assert_int_equal(ax_backoff_ms(63, 1, INT64_MAX), INT64_MAX);
}

/* ---- ax_seterr -------------------------------------------------------- */

static void test_seterr(void **state) {
    (void)state;
    char buf[16];
    assert_int_equal(ax_seterr(NULL, 0, AX_ERR_IO, "x %d", 1), AX_ERR_IO);
    assert_int_equal(ax_seterr(buf, 0, AX_ERR_INVALID, "x"), AX_ERR_INVALID);
    assert_int_equal(ax_seterr(buf, sizeof buf, AX_ERR_NOTFOUND, "%s-%d", "key", 42),
                     AX_ERR_NOTFOUND);
    assert_string_equal(buf, "key-42");
    assert_int_equal(ax_seterr(buf, sizeof buf, 0, "%s", "a much longer message than 15"), 0);
    assert_int_equal(strlen(buf), sizeof buf - 1);
    assert_string_equal(buf, "a much longer m");
}

/* ---- ax_random_hex ---------------------------------------------------- */

static int all_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static void test_random_hex_shape(void **state) {
    (void)state;
    static const size_t sizes[] = {0, 1, 2, 8, 16, 31, 32, 63, 64};
    for (size_t k = 0; k < AX_ARRAY_SIZE(sizes); k++) {
        size_t n = sizes[k];
        char buf[2 * 64 + 1 + 8];
        memset(buf, 'X', sizeof buf);
        ax_random_hex(buf, n);
        assert_int_equal(strlen(buf), 2 * n);
        assert_true(all_hex(buf, 2 * n));
        for (size_t i = 2 * n + 1; i < sizeof buf; i++)
            assert_int_equal(buf[i], 'X'); /* nothing written past the NUL */
    }
}

static void test_random_hex_differs(void **state) {
    (void)state;
    char a[33], b[33];
    ax_random_hex(a, 16);
    ax_random_hex(b, 16);
    assert_string_not_equal(a, b);
    /* every hex digit turns up, and not just in one position */
    unsigned seen[16] = {0};
    for (int i = 0; i < 200; i++) {
        ax_random_hex(a, 16);
        for (size_t j = 0; j < 32; j++)
            seen[a[j] <= '9' ? a[j] - '0' : a[j] - 'a' + 10]++;
    }
    for (int d = 0; d < 16; d++)
        assert_true(seen[d] > 200); /* expected 400 of each out of 6400 */
}

/*
 * Regression (fixed): ax_random_hex silently clamps nbytes to
 * 64 (its internal buffer), so asking for more than 64 bytes yields only
 * 128 hex characters instead of the documented 2*nbytes.
 */
static void test_random_hex_large(void **state) {
    (void)state;
    char buf[2 * 100 + 1];
    ax_random_hex(buf, 100);
    assert_int_equal(strlen(buf), 200);
    assert_true(all_hex(buf, 200));
}

/* ---- ax_trace_id_new ------------------------------------------------- */

/* The value of the first 12 hex digits. */
static int64_t trace_ms(const char *t) {
    int64_t v = 0;
    for (int i = 0; i < 12; i++)
        v = v * 16 + (t[i] <= '9' ? t[i] - '0' : t[i] - 'a' + 10);
    return v;
}

/* 32 lowercase hex digits, the first 12 the time in ms of the call. */
static void test_trace_id_shape(void **state) {
    (void)state;
    char buf[AX_TRACE_ID_LEN + 1 + 8];
    memset(buf, 'X', sizeof buf);
    int64_t before = ax_now_ms();
    ax_trace_id_new(buf);
    int64_t after = ax_now_ms();
    assert_int_equal(strlen(buf), 32);
    assert_true(all_hex(buf, 32));
    for (size_t i = AX_TRACE_ID_LEN + 1; i < sizeof buf; i++)
        assert_int_equal(buf[i], 'X');
    assert_true(trace_ms(buf) >= before);
    assert_true(trace_ms(buf) <= after);
}

/* Ids made later sort after earlier ones (the index's right-hand edge);
 * ids made in the same ms differ in their random part, which uses every
 * digit. */
static void test_trace_id_order(void **state) {
    (void)state;
    char a[AX_TRACE_ID_LEN + 1], b[AX_TRACE_ID_LEN + 1];
    ax_trace_id_new(a);
    int64_t t0 = ax_now_ms();
    while (ax_now_ms() < t0 + 2)
        ;
    ax_trace_id_new(b);
    assert_true(strcmp(a, b) < 0);
    unsigned seen[16] = {0};
    char prev[AX_TRACE_ID_LEN + 1] = "";
    for (int i = 0; i < 200; i++) {
        ax_trace_id_new(a);
        assert_true(all_hex(a, 32)); /* before indexing seen[] by its digits */
        assert_string_not_equal(a, prev);
        memcpy(prev, a, sizeof a);
        for (size_t j = 12; j < 32; j++)
            seen[a[j] <= '9' ? a[j] - '0' : a[j] - 'a' + 10]++;
    }
    for (int d = 0; d < 16; d++)
        assert_true(seen[d] > 125); /* expected 250 of each out of 4000 */
}

/* ---- ax_keycmp ---------------------------------------------------------- */

static int keycmp_q(const void *a, const void *b) {
    return ax_keycmp(*(const char *const *)a, *(const char *const *)b);
}

static int sign(int v) { return (v > 0) - (v < 0); }

/* The order ax_keycmp documents, written another way: lengths, then the
 * reversed strings compared with strcmp. */
static int keycmp_ref(const char *x, const char *y) {
    size_t a = strlen(x), b = strlen(y);
    if (a != b)
        return a < b ? -1 : 1;
    char rx[64], ry[64];
    assert_true(a < sizeof rx);
    for (size_t i = 0; i < a; i++) {
        rx[i] = x[a - 1 - i];
        ry[i] = y[a - 1 - i];
    }
    rx[a] = ry[a] = '\0';
    return strcmp(rx, ry);
}

/* A total order that agrees with equality: antisymmetric, 0 exactly for
 * equal strings, shorter before longer, and transitive over random keys
 * (checked on every triple of a small set, and by sorting a large one and
 * finding each key with bsearch, the way the trigger uses it). */
static void test_keycmp_order(void **state) {
    (void)state;
    assert_int_equal(ax_keycmp("", ""), 0);
    assert_int_equal(ax_keycmp("kafka:t:0:17", "kafka:t:0:17"), 0);
    assert_true(ax_keycmp("kafka:t:0:9", "kafka:t:0:10") < 0);  /* shorter first */
    assert_true(ax_keycmp("kafka:t:0:18", "kafka:t:0:17") > 0); /* last byte decides */
    assert_true(ax_keycmp("kafka:t:1:17", "kafka:t:0:17") > 0);
    assert_true(ax_keycmp("a\xff", "a\x01") > 0);               /* bytes unsigned */
    assert_true(keycmp_ref("a\xff", "a\x01") > 0);
    enum { SMALL = 24, LARGE = 5000 };
    static char buf[LARGE][24];
    const char *k[LARGE];
    for (int i = 0; i < LARGE; i++) {
        /* few lengths and a small alphabet: many ties, many shared suffixes */
        int len = 1 + (int)rng_below(4);
        for (int j = 0; j < len; j++)
            buf[i][j] = "ab:9"[rng_below(4)];
        buf[i][len] = '\0';
        k[i] = buf[i];
    }
    for (int i = 0; i < SMALL; i++)
        for (int j = 0; j < SMALL; j++) {
            int c = ax_keycmp(k[i], k[j]);
            assert_int_equal(sign(c), -sign(ax_keycmp(k[j], k[i])));
            assert_int_equal(c == 0, strcmp(k[i], k[j]) == 0);
            assert_int_equal(sign(c), sign(keycmp_ref(k[i], k[j])));
            for (int m = 0; m < SMALL; m++)
                if (c <= 0 && ax_keycmp(k[j], k[m]) <= 0)
                    assert_true(ax_keycmp(k[i], k[m]) <= 0);
        }
    const char *sorted[LARGE];
    memcpy(sorted, k, sizeof k);
    qsort(sorted, LARGE, sizeof *sorted, keycmp_q);
    for (int i = 1; i < LARGE; i++) {
        assert_true(ax_keycmp(sorted[i - 1], sorted[i]) <= 0);
        assert_true(keycmp_ref(sorted[i - 1], sorted[i]) <= 0);
    }
    for (int i = 0; i < LARGE; i++) {
        const char *const *hit = bsearch(&k[i], sorted, LARGE, sizeof *sorted, keycmp_q);
        assert_non_null(hit);
        assert_string_equal(*hit, k[i]);
    }
    const char *absent = "zzz";
    assert_null(bsearch(&absent, sorted, LARGE, sizeof *sorted, keycmp_q));
}

/* ---- ax_boot_ms ------------------------------------------------------- */

/* Monotonic, and moving with the monotonic clock (a suspend adds to it,
 * which a test cannot make happen). */
static void test_boot_ms(void **state) {
    (void)state;
    int64_t b0 = ax_boot_ms(), m0 = ax_mono_ms();
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    int64_t b1 = ax_boot_ms(), m1 = ax_mono_ms();
    assert_true(b1 - b0 >= 19);
    assert_true(b1 - b0 <= (m1 - m0) + 2);
}

/* ---- an independent strict UTF-8 validator (Unicode Table 3-7) -------- */

/* Length of the well-formed sequence at p (n bytes available), else 0. */
static size_t utf8_seq(const unsigned char *p, size_t n) {
    if (n == 0)
        return 0;
    unsigned char b = p[0];
    unsigned char lo = 0x80, hi = 0xBF;
    size_t len;
    if (b <= 0x7F)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        len = 2;
    else if (b == 0xE0)
        len = 3, lo = 0xA0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF)
        len = 3;
    else if (b == 0xED)
        len = 3, hi = 0x9F;
    else if (b == 0xF0)
        len = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
        len = 4;
    else if (b == 0xF4)
        len = 4, hi = 0x8F;
    else
        return 0;
    if (n < len)
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return len;
}

/* 1 if s[0..n) is well-formed UTF-8 without NUL bytes. */
static int utf8_valid_nonul(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] == 0)
            return 0;
        size_t l = utf8_seq(p + i, n - i);
        if (!l)
            return 0;
        i += l;
    }
    return 1;
}

/* What the sanitizer must produce: keep well-formed sequences, turn each
 * other byte (and NUL) into '?', one byte at a time. */
static size_t utf8_reference(unsigned char *p, size_t n) {
    size_t i = 0, bad = 0;
    while (i < n) {
        size_t l = p[i] ? utf8_seq(p + i, n - i) : 0;
        if (!l) {
            p[i++] = '?';
            bad++;
        } else {
            i += l;
        }
    }
    return bad;
}

/* Encode code point cp; returns the length. */
static size_t utf8_encode(uint32_t cp, unsigned char *o) {
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

static void test_validator_self_check(void **state) {
    (void)state;
    unsigned char b[4];
    /* every scalar value encodes to a sequence the validator accepts */
    for (uint32_t cp = 1; cp <= 0x10FFFF; cp += (cp < 0x20000 ? 1 : 97)) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        size_t n = utf8_encode(cp, b);
        assert_int_equal(utf8_seq(b, n), n);
    }
    assert_int_equal(utf8_seq((const unsigned char *)"\xED\xA0\x80", 3), 0);
    assert_int_equal(utf8_seq((const unsigned char *)"\xC0\x80", 2), 0);
    assert_int_equal(utf8_seq((const unsigned char *)"\xF4\x90\x80\x80", 4), 0);
    assert_int_equal(utf8_seq((const unsigned char *)"\xE2\x82", 2), 0);
}

/* ---- ax_utf8_sanitize: fixed cases ------------------------------------ */

/* Sanitize a heap copy of exactly `len` bytes and check output and count. */
static void check_sanitize(const char *in, size_t len, const char *want, size_t want_bad) {
    char *buf = malloc(len ? len : 1);
    assert_non_null(buf);
    memcpy(buf, in, len);
    size_t bad = ax_utf8_sanitize(buf, len);
    if (memcmp(buf, want, len) != 0 || bad != want_bad) {
        char hex[512] = "";
        for (size_t i = 0, o = 0; i < len && o + 4 < sizeof hex; i++)
            o += (size_t)snprintf(hex + o, sizeof hex - o, "%02X ", (unsigned char)in[i]);
        free(buf);
        fail_msg("sanitize(%s): wrong output or count (%zu, want %zu)", hex, bad, want_bad);
    }
    assert_true(utf8_valid_nonul(buf, len));
    /* idempotent */
    assert_int_equal(ax_utf8_sanitize(buf, len), 0);
    assert_memory_equal(buf, want, len);
    free(buf);
}

#define SAN(in, want, bad) check_sanitize(in, sizeof(in) - 1, want, bad)

static void test_sanitize_valid_unchanged(void **state) {
    (void)state;
    SAN("", "", 0);
    SAN("plain ASCII text, with punctuation !~\t\r\n\x7F", "plain ASCII text, with punctuation !~\t\r\n\x7F", 0);
    SAN("h\xC3\xA9llo w\xC3\xB6rld", "h\xC3\xA9llo w\xC3\xB6rld", 0);            /* é ö */
    SAN("\xE2\x82\xAC \xE6\x97\xA5\xE6\x9C\xAC", "\xE2\x82\xAC \xE6\x97\xA5\xE6\x9C\xAC", 0); /* € 日本 */
    SAN("\xF0\x9F\x98\x80\xF0\x9D\x84\x9E", "\xF0\x9F\x98\x80\xF0\x9D\x84\x9E", 0); /* 😀 𝄞 */
    /* boundaries of each length */
    SAN("\xC2\x80", "\xC2\x80", 0);                 /* U+0080 */
    SAN("\xDF\xBF", "\xDF\xBF", 0);                 /* U+07FF */
    SAN("\xE0\xA0\x80", "\xE0\xA0\x80", 0);         /* U+0800 */
    SAN("\xED\x9F\xBF", "\xED\x9F\xBF", 0);         /* U+D7FF */
    SAN("\xEE\x80\x80", "\xEE\x80\x80", 0);         /* U+E000 */
    SAN("\xEF\xBF\xBF", "\xEF\xBF\xBF", 0);         /* U+FFFF */
    SAN("\xF0\x90\x80\x80", "\xF0\x90\x80\x80", 0); /* U+10000 */
    SAN("\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF", 0); /* U+10FFFF */
    SAN("\xEF\xBB\xBF" "bom", "\xEF\xBB\xBF" "bom", 0);
}

static void test_sanitize_nul(void **state) {
    (void)state;
    SAN("\0", "?", 1);
    SAN("a\0b", "a?b", 1);
    SAN("\0\0\0", "???", 3);
    SAN("\xC3\xA9\0\xC3\xA9", "\xC3\xA9?\xC3\xA9", 1);
    SAN("\xC3\0", "??", 2); /* NUL is not a continuation byte */
}

static void test_sanitize_invalid(void **state) {
    (void)state;
    /* lone continuation bytes */
    SAN("\x80", "?", 1);
    SAN("a\xBF" "b", "a?b", 1);
    SAN("\x80\x81\x82", "???", 3);
    /* bytes that never appear */
    SAN("\xC0", "?", 1);
    SAN("\xF5\xF8\xFC\xFE\xFF", "?????", 5);
    SAN("\xF8\x88\x80\x80\x80", "?????", 5);
    SAN("\xFC\x84\x80\x80\x80\x80", "??????", 6);
    /* overlong encodings */
    SAN("\xC0\x80", "??", 2);
    SAN("\xC1\xBF", "??", 2);
    SAN("\xE0\x80\x80", "???", 3);
    SAN("\xE0\x9F\xBF", "???", 3);
    SAN("\xF0\x80\x80\x80", "????", 4);
    SAN("\xF0\x8F\xBF\xBF", "????", 4);
    SAN("a\xC0\xAF" "b", "a??b", 2); /* overlong '/' */
    /* surrogates */
    SAN("\xED\xA0\x80", "???", 3);
    SAN("\xED\xBF\xBF", "???", 3);
    SAN("\xED\xA0\xBD\xED\xB8\x80", "??????", 6); /* CESU-8 pair */
    /* beyond U+10FFFF */
    SAN("\xF4\x90\x80\x80", "????", 4);
    SAN("\xF5\x80\x80\x80", "????", 4);
    SAN("\xF7\xBF\xBF\xBF", "????", 4);
    /* a lead byte followed by a non-continuation */
    SAN("\xC3" "A", "?A", 1);
    SAN("\xE2\x82" "A", "??A", 2);
    SAN("\xF0\x9F\x98" "A", "???A", 3);
    SAN("\xE2\x82\xE2\x82\xAC", "??\xE2\x82\xAC", 2); /* then a valid € */
    SAN("\xC3\xC3\xA9", "?\xC3\xA9", 1);
    /* a valid sequence with an extra continuation byte */
    SAN("\xC3\xA9\xA9", "\xC3\xA9?", 1);
}

static void test_sanitize_truncated_at_end(void **state) {
    (void)state;
    SAN("\xC3", "?", 1);
    SAN("ab\xE2\x82", "ab??", 2);
    SAN("ab\xE2", "ab?", 1);
    SAN("\xF0\x9F\x98", "???", 3);
    SAN("\xF0\x9F", "??", 2);
    SAN("ok \xF0", "ok ?", 1);
    /* a complete sequence cut by `len`: bytes past len are not looked at */
    char *buf = malloc(4);
    assert_non_null(buf);
    memcpy(buf, "\xF0\x9F\x98\x80", 4);
    assert_int_equal(ax_utf8_sanitize(buf, 3), 3);
    assert_memory_equal(buf, "???\x80", 4);
    memcpy(buf, "\xC3\xA9", 2);
    assert_int_equal(ax_utf8_sanitize(buf, 1), 1);
    assert_memory_equal(buf, "?\xA9", 2);
    free(buf);
    assert_int_equal(ax_utf8_sanitize(NULL, 0), 0);
}

/* ---- ax_utf8_sanitize: fixed-seed random buffers ---------------------- */

static size_t gen_piece(unsigned char *o) {
    static const char *const nasty[] = {
        "\xC0\x80", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF0\x8F\xBF\xBF",
        "\xED\xBF\xBF", "\xF8\x88\x80\x80\x80", "\xEF\xBF\xBE",
    };
    switch (rng_below(8)) {
    case 0: /* any byte */
        o[0] = (unsigned char)rng();
        return 1;
    case 1: /* printable ASCII */
        o[0] = (unsigned char)(0x20 + rng_below(95));
        return 1;
    case 2:
        o[0] = 0;
        return 1;
    case 3: /* continuation byte */
        o[0] = (unsigned char)(0x80 + rng_below(64));
        return 1;
    case 4: /* lead byte, any */
        o[0] = (unsigned char)(0xC0 + rng_below(64));
        return 1;
    case 5:
    case 6: { /* a whole (case 5) or cut (case 6) valid sequence */
        uint32_t cp;
        switch (rng_below(4)) {
        case 0: cp = 0x80 + rng_below(0x800 - 0x80); break;
        case 1: cp = 0x800 + rng_below(0x10000 - 0x800); break;
        case 2: cp = 0x10000 + rng_below(0x110000 - 0x10000); break;
        default: cp = 1 + rng_below(0x7F); break;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF)
            cp -= 0x800;
        size_t n = utf8_encode(cp, o);
        return n > 1 && rng_below(2) ? 1 + rng_below((unsigned)n - 1) : n;
    }
    default: {
        const char *s = nasty[rng_below(AX_ARRAY_SIZE(nasty))];
        size_t n = strlen(s);
        memcpy(o, s, n);
        return n;
    }
    }
}

static void test_sanitize_random(void **state) {
    (void)state;
    rng_state = 0x243F6A8885A308D3ull; /* fixed seed */
    unsigned char tmp[80];
    size_t total_bad = 0, total_clean = 0;
    for (int iter = 0; iter < 10000; iter++) {
        size_t cap = 1 + rng_below(64), len = 0;
        while (len < cap) {
            size_t n = gen_piece(tmp + len);
            len += n;
        }
        if (iter % 4 == 0) /* some fully random buffers too */
            for (size_t i = 0; i < len; i++)
                tmp[i] = (unsigned char)rng();
        char *buf = malloc(len);
        unsigned char *ref = malloc(len);
        assert_non_null(buf);
        assert_non_null(ref);
        memcpy(buf, tmp, len);
        memcpy(ref, tmp, len);
        size_t bad = ax_utf8_sanitize(buf, len);
        size_t want = utf8_reference(ref, len);
        if (!utf8_valid_nonul(buf, len))
            fail_msg("iteration %d: result is not valid UTF-8", iter);
        size_t changed = 0;
        for (size_t i = 0; i < len; i++) {
            if ((unsigned char)buf[i] != tmp[i]) {
                changed++;
                assert_int_equal(buf[i], '?');
            }
        }
        if (bad != changed)
            fail_msg("iteration %d: returned %zu, changed %zu bytes", iter, bad, changed);
        if (bad != want || memcmp(buf, ref, len) != 0)
            fail_msg("iteration %d: differs from the reference (%zu vs %zu)", iter, bad, want);
        /* a clean buffer is left alone */
        assert_int_equal(ax_utf8_sanitize(buf, len), 0);
        total_bad += bad;
        total_clean += bad == 0;
        free(buf);
        free(ref);
    }
    /* the generator exercised both outcomes */
    assert_true(total_bad > 10000);
    assert_true(total_clean > 100);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backoff_sequence),
        cmocka_unit_test(test_backoff_capped_monotonic),
        cmocka_unit_test(test_backoff_huge_cap),
        cmocka_unit_test(test_seterr),
        cmocka_unit_test(test_random_hex_shape),
        cmocka_unit_test(test_random_hex_differs),
        cmocka_unit_test(test_random_hex_large),
        cmocka_unit_test(test_trace_id_shape),
        cmocka_unit_test(test_trace_id_order),
        cmocka_unit_test(test_keycmp_order),
        cmocka_unit_test(test_boot_ms),
        cmocka_unit_test(test_validator_self_check),
        cmocka_unit_test(test_sanitize_valid_unchanged),
        cmocka_unit_test(test_sanitize_nul),
        cmocka_unit_test(test_sanitize_invalid),
        cmocka_unit_test(test_sanitize_truncated_at_end),
        cmocka_unit_test(test_sanitize_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
