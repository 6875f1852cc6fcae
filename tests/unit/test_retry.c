/*
 * test_retry.c — the retry decision (core/retry.c): defaults, backoff
 * delays against an independent integer reference within their jitter
 * bounds, "soon" and "fixed" waits, overflow at the extremes, the default
 * chain class by class, the handler's non-retryable declaration, exhaustion
 * at max_retries, and the names and class checks the rule parser uses.
 * Parsing a job's JSON rule chain, prefix matching and first-match-wins
 * are in test_retry_json.c (the parser is an adapter: it links jansson).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ax/common.h"
#include "ax/retry.h"

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static uint64_t rng(void) {
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return rs * 2685821657736338717ull;
}
/* uniform in [0, 1) with 53 random bits */
static double rnd01(void) { return (double)(rng() >> 11) * 0x1.0p-53; }

static const double RND_MAX = 0x1.fffffffffffffp-1; /* the largest double below 1 */

static ax_retry_policy_t defaults(void) {
    ax_retry_policy_t p;
    ax_retry_policy_default(&p);
    return p;
}

/* ---- defaults ----------------------------------------------------------- */

static void test_defaults(void **state) {
    ax_retry_policy_t p = defaults();
    assert_int_equal(p.max_retries, 3);
    assert_int_equal(p.initial_ms, 2000);
    assert_true(p.multiplier == 2.0);
    assert_int_equal(p.max_ms, 30000);
    assert_int_equal(p.jitter_ms, 2000);
    assert_int_equal(p.nrules, 11);
    assert_int_equal(ax_retry_policy_check(&p, NULL, 0), AX_OK);
    /* the last default rule matches anything with exponential backoff */
    assert_string_equal(p.rules[p.nrules - 1].error_class, "");
    assert_int_equal(p.rules[p.nrules - 1].action, AX_RETRY_RETRY);
    assert_int_equal(p.rules[p.nrules - 1].kind, AX_RETRY_BACKOFF);

    /* the default delays without jitter: 2 s, 4 s, 8 s, then exhausted */
    static const int64_t want[] = {2000, 4000, 8000};
    for (int k = 1; k <= 3; k++) {
        ax_retry_decision_t d = ax_retry_decide(&p, "exit", 1, k, 0.0);
        assert_int_equal(d.retry, 1);
        assert_int_equal(d.alert, 0);
        assert_int_equal(d.delay_ms, want[k - 1]);
        assert_string_equal(d.reason, "retry");
        /* and with the most jitter: + 2000 */
        d = ax_retry_decide(&p, "exit", 1, k, RND_MAX);
        assert_int_equal(d.delay_ms, want[k - 1] + 2000);
    }
    ax_retry_decision_t d = ax_retry_decide(&p, "exit", 1, 4, 0.0);
    assert_int_equal(d.retry, 0);
    assert_string_equal(d.reason, "retries exhausted");

    /* names */
    assert_string_equal(ax_retry_action_name(AX_RETRY_RETRY), "retry");
    assert_string_equal(ax_retry_action_name(AX_RETRY_FAIL), "fail");
    assert_string_equal(ax_retry_action_name(AX_RETRY_FAIL_ALERT), "alert");
    assert_string_equal(ax_retry_action_name((ax_retry_action_t)7), "?");
    assert_string_equal(ax_retry_wait_name(AX_RETRY_BACKOFF), "backoff");
    assert_string_equal(ax_retry_wait_name(AX_RETRY_FIXED), "fixed");
    assert_string_equal(ax_retry_wait_name(AX_RETRY_SOON), "soon");
    assert_string_equal(ax_retry_wait_name(-1), "?");
}

/* ---- backoff ------------------------------------------------------------ */

/* min(initial * m^(k-1), cap) in integers (m >= 1 an integer), saturating. */
static int64_t ref_base(int64_t initial, int64_t m, int64_t cap, int k) {
    if (initial >= cap)
        return cap;
    __int128 v = initial;
    for (int i = 1; i < k && v < cap; i++)
        v *= m;
    return v < cap ? (int64_t)v : cap;
}

static void test_backoff_bounds(void **state) {
    static const struct {
        int64_t initial, mult, cap, jitter;
    } cases[] = {
        {2000, 2, 30000, 2000}, /* the defaults */
        {2000, 2, 30000, 0},    {100, 3, 1000000, 999}, {1, 10, 600000, 1},
        {500, 1, 30000, 2000},  {0, 2, 30000, 2000},    {5000, 2, 1000, 2000}, /* initial > cap */
        {1000, 2, 1000, 5},     {7, 2, INT64_MAX / 4, 1000000},
    };
    for (size_t c = 0; c < AX_ARRAY_SIZE(cases); c++) {
        ax_retry_policy_t p = defaults();
        p.max_retries = 1000;
        p.initial_ms = cases[c].initial;
        p.multiplier = (double)cases[c].mult;
        p.max_ms = cases[c].cap;
        p.jitter_ms = cases[c].jitter;
        int64_t prev = -1;
        for (int k = 1; k <= 10; k++) {
            int64_t base = ref_base(cases[c].initial, cases[c].mult, cases[c].cap, k);
            assert_true(base <= cases[c].cap);
            assert_true(base >= prev); /* never shrinks */
            prev = base;
            /* the edges: rnd 0 gives the base, rnd -> 1 the base + jitter */
            ax_retry_decision_t d = ax_retry_decide(&p, "exit", 1, k, 0.0);
            assert_int_equal(d.retry, 1);
            assert_int_equal(d.delay_ms, base);
            d = ax_retry_decide(&p, "exit", 1, k, RND_MAX);
            assert_int_equal(d.delay_ms, base + cases[c].jitter);
            /* many values in between: within bounds, monotonic in rnd, and
             * equal to floor(rnd * (jitter + 1)) */
            double rv[2001];
            for (int i = 0; i < 2001; i++)
                rv[i] = rnd01();
            for (int i = 0; i < 2001; i++) {
                d = ax_retry_decide(&p, "exit", 1, k, rv[i]);
                assert_in_range(d.delay_ms, base, base + cases[c].jitter);
                if (cases[c].jitter < (1 << 20)) {
                    int64_t j = (int64_t)floor(rv[i] * (double)(cases[c].jitter + 1));
                    assert_int_equal(d.delay_ms, base + j);
                }
                ax_retry_decision_t e = ax_retry_decide(&p, "exit", 1, k, rv[i] / 2);
                assert_true(e.delay_ms <= d.delay_ms);
            }
        }
    }
}

/* Every jitter value 0..J is reachable: rnd in the middle of bucket i gives i. */
static void test_jitter_uniform(void **state) {
    ax_retry_policy_t p = defaults();
    for (int64_t i = 0; i <= 2000; i++) {
        double r = ((double)i + 0.5) / 2001.0;
        assert_int_equal(ax_retry_decide(&p, "exit", 1, 1, r).delay_ms, 2000 + i);
    }
    /* out-of-range rnd is clamped into [0, 1) */
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 1, -0.5).delay_ms, 2000);
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 1, NAN).delay_ms, 2000);
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 1, 1.0).delay_ms, 4000);
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 1, 7.5).delay_ms, 4000);
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 1, INFINITY).delay_ms, 4000);
}

/* A non-integer multiplier, with exactly representable steps. */
static void test_backoff_fractional(void **state) {
    ax_retry_policy_t p = defaults();
    p.max_retries = 10;
    p.jitter_ms = 0;
    p.multiplier = 1.5;
    static const int64_t want[] = {2000, 3000, 4500, 6750, 10125, 15187, 22781, 30000, 30000};
    for (int k = 1; k <= 9; k++)
        assert_int_equal(ax_retry_decide(&p, "exit", 1, k, 0.5).delay_ms, want[k - 1]);
}

/* Huge multipliers, attempts, caps and jitters: no overflow (UBSan would
 * abort), the cap respected, results saturate at INT64_MAX. */
static void test_backoff_extremes(void **state) {
    static const double mults[] = {1.0, 1.0000001, 2.0, 1e9, 1e300, DBL_MAX, INFINITY};
    static const int attempts[] = {1, 2, 63, 64, 1000, 100000, INT_MAX};
    static const int64_t caps[] = {0, 1, 30000, INT64_MAX / 2, INT64_MAX - 1, INT64_MAX};
    static const int64_t inits[] = {0, 1, 2000, INT64_MAX / 3, INT64_MAX};
    static const int64_t jitters[] = {0, 2000, INT64_MAX / 2, INT64_MAX};
    static const double rnds[] = {0.0, 0.5, RND_MAX};
    ax_retry_policy_t p = defaults();
    p.max_retries = INT_MAX;
    for (size_t a = 0; a < AX_ARRAY_SIZE(mults); a++)
        for (size_t b = 0; b < AX_ARRAY_SIZE(attempts); b++)
            for (size_t c = 0; c < AX_ARRAY_SIZE(caps); c++)
                for (size_t e = 0; e < AX_ARRAY_SIZE(inits); e++)
                    for (size_t f = 0; f < AX_ARRAY_SIZE(jitters); f++)
                        for (size_t g = 0; g < AX_ARRAY_SIZE(rnds); g++) {
                            p.multiplier = mults[a];
                            p.max_ms = caps[c];
                            p.initial_ms = inits[e];
                            p.jitter_ms = jitters[f];
                            ax_retry_decision_t d =
                                ax_retry_decide(&p, "exit", 1, attempts[b], rnds[g]);
                            assert_int_equal(d.retry, 1);
                            int64_t base = inits[e] < caps[c] ? inits[e] : caps[c];
                            assert_true(d.delay_ms >= base);
                            /* at most cap + jitter, saturated */
                            int64_t hi = caps[c] > INT64_MAX - jitters[f]
                                             ? INT64_MAX
                                             : caps[c] + jitters[f];
                            assert_true(d.delay_ms <= hi);
                            if (rnds[g] == 0.0 && mults[a] >= 1e9 && attempts[b] >= 63 &&
                                inits[e] > 0)
                                assert_int_equal(d.delay_ms, caps[c]); /* grown to the cap */
                        }
    /* saturation: a cap of INT64_MAX plus any jitter is INT64_MAX */
    p.initial_ms = 1;
    p.multiplier = 2;
    p.max_ms = INT64_MAX;
    p.jitter_ms = 2000;
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 100, RND_MAX).delay_ms, INT64_MAX);
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 63, 0.0).delay_ms, 1ll << 62);
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 64, 0.0).delay_ms, INT64_MAX);
    /* bad numbers are tolerated: negatives as 0, a bad multiplier as 1 */
    static const double bad_mults[] = {NAN, -2.0, 0.0, 0.5, -INFINITY};
    for (size_t i = 0; i < AX_ARRAY_SIZE(bad_mults); i++) {
        p = defaults();
        p.multiplier = bad_mults[i];
        for (int k = 1; k <= 3; k++)
            assert_int_equal(ax_retry_decide(&p, "exit", 1, k, 0.0).delay_ms, 2000);
    }
    p = defaults();
    p.initial_ms = -5;
    p.jitter_ms = -5;
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 2, RND_MAX).delay_ms, 0);
    p = defaults();
    p.max_ms = -1;
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 2, 0.0).delay_ms, 0);
}

static void test_policy_check(void **state) {
    char err[256];
    static const struct {
        int field;
        const char *name;
    } bad[] = {{0, "max_retries"}, {1, "initial_ms"}, {2, "multiplier"}, {3, "multiplier"},
               {4, "max_ms"},      {5, "jitter_ms"},  {6, "rules"}};
    for (size_t i = 0; i < AX_ARRAY_SIZE(bad); i++) {
        ax_retry_policy_t p = defaults();
        switch (bad[i].field) {
        case 0: p.max_retries = -1; break;
        case 1: p.initial_ms = -1; break;
        case 2: p.multiplier = 0.99; break;
        case 3: p.multiplier = NAN; break;
        case 4: p.max_ms = -1; break;
        case 5: p.jitter_ms = -1; break;
        case 6: p.nrules = AX_RETRY_MAX_RULES + 1; break;
        }
        err[0] = '\0';
        assert_int_equal(ax_retry_policy_check(&p, err, sizeof err), AX_ERR_INVALID);
        assert_non_null(strstr(err, bad[i].name));
    }
    ax_retry_policy_t p = defaults();
    p.max_retries = 0;
    p.initial_ms = p.max_ms = p.jitter_ms = 0;
    p.multiplier = 1.0;
    assert_int_equal(ax_retry_policy_check(&p, err, sizeof err), AX_OK);
    /* +inf (which a double precision column can hold) means: straight to the cap */
    p = defaults();
    p.multiplier = INFINITY;
    assert_int_equal(ax_retry_policy_check(&p, err, sizeof err), AX_OK);
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 1, 0.0).delay_ms, 2000);
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 2, 0.0).delay_ms, 30000);
}

/* ---- soon and fixed ------------------------------------------------------ */

static void test_soon(void **state) {
    static const struct {
        int64_t initial, cap, jitter, lo, hi;
    } cases[] = {
        {2000, 30000, 2000, 1000, 1250}, /* the defaults: 1 s + up to 250 ms */
        {300, 30000, 2000, 300, 550},    {2000, 30000, 100, 1000, 1100},
        {2000, 30000, 0, 1000, 1000},    {2000, 500, 2000, 500, 750}, /* the cap */
        {0, 30000, 0, 0, 0},             {INT64_MAX, INT64_MAX, INT64_MAX, 1000, 1250},
    };
    for (size_t c = 0; c < AX_ARRAY_SIZE(cases); c++) {
        ax_retry_policy_t p = defaults();
        p.max_retries = 100;
        p.initial_ms = cases[c].initial;
        p.max_ms = cases[c].cap;
        p.jitter_ms = cases[c].jitter;
        static const char *const cls[] = {"timeout", "network", "worker_lost", "lease_lost"};
        for (size_t i = 0; i < AX_ARRAY_SIZE(cls); i++)
            for (int k = 1; k <= 100; k += 11) { /* no growth with the attempt */
                ax_retry_decision_t d = ax_retry_decide(&p, cls[i], 1, k, 0.0);
                assert_int_equal(d.retry, 1);
                assert_int_equal(d.delay_ms, cases[c].lo);
                d = ax_retry_decide(&p, cls[i], 1, k, RND_MAX);
                assert_int_equal(d.delay_ms, cases[c].hi);
                for (int j = 0; j < 100; j++)
                    assert_in_range(ax_retry_decide(&p, cls[i], 1, k, rnd01()).delay_ms,
                                    cases[c].lo, cases[c].hi);
            }
    }
}

static void test_fixed(void **state) {
    ax_retry_policy_t p = defaults();
    for (int k = 1; k <= 3; k++)
        for (int j = 0; j < 200; j++) {
            double r = j == 0 ? 0.0 : j == 1 ? RND_MAX : rnd01();
            ax_retry_decision_t d = ax_retry_decide(&p, "conflict", 1, k, r);
            assert_int_equal(d.retry, 1);
            assert_int_equal(d.delay_ms, 10000); /* exactly: no jitter, no growth */
        }
    /* not capped by max_ms */
    p.max_ms = 100;
    assert_int_equal(ax_retry_decide(&p, "conflict", 1, 1, 0.5).delay_ms, 10000);
    /* a hand-built rule with a negative delay waits 0 */
    p.rules[0] = (ax_retry_rule_t){"neg", AX_RETRY_RETRY, AX_RETRY_FIXED, -7};
    assert_int_equal(ax_retry_decide(&p, "neg", 1, 1, 0.5).delay_ms, 0);
}

/* ---- the default chain ------------------------------------------------- */

static void test_default_classes(void **state) {
    static const struct {
        const char *cls;
        int retry, alert;
        const char *reason;
        int64_t delay; /* attempt 1, rnd 0 */
    } cases[] = {
        {"fatal", 0, 1, "fatal error class", 0},
        {"system", 0, 1, "fatal error class", 0},
        {"backlog_full", 0, 1, "fatal error class", 0},
        {"spawn", 0, 0, "error class not retried", 0},
        {"cancelled", 0, 0, "error class not retried", 0},
        {"timeout", 1, 0, "retry", 1000},
        {"network", 1, 0, "retry", 1000},
        {"worker_lost", 1, 0, "retry", 1000},
        {"lease_lost", 1, 0, "retry", 1000},
        {"conflict", 1, 0, "retry", 10000},
        {"exit", 1, 0, "retry", 2000},
        {"signal", 1, 0, "retry", 2000},
        {"http", 1, 0, "retry", 2000},
        {"plugin", 1, 0, "retry", 2000},
        {"shutdown", 1, 0, "retry", 2000},
        {"", 1, 0, "retry", 2000},
        {NULL, 1, 0, "retry", 2000},
        /* exact matches only: no prefixes, case-sensitive */
        {"fatality", 1, 0, "retry", 2000},
        {"Fatal", 1, 0, "retry", 2000},
        {"timeouts", 1, 0, "retry", 2000},
        {"time", 1, 0, "retry", 2000},
    };
    ax_retry_policy_t p = defaults();
    ax_retry_policy_t empty = defaults();
    empty.nrules = 0; /* no job rules: the built-in chain decides alone */
    for (size_t i = 0; i < AX_ARRAY_SIZE(cases); i++) {
        for (int w = 0; w < 2; w++) {
            ax_retry_decision_t d = ax_retry_decide(w ? &empty : &p, cases[i].cls, 1, 1, 0.0);
            assert_int_equal(d.retry, cases[i].retry);
            assert_int_equal(d.alert, cases[i].alert);
            assert_string_equal(d.reason, cases[i].reason);
            assert_int_equal(d.delay_ms, cases[i].delay);
        }
    }
}

/* ---- the handler's declaration and exhaustion --------------------------- */

static void test_not_retryable(void **state) {
    ax_retry_policy_t p = defaults();
    static const char *const retried[] = {"exit", "timeout", "conflict", "http", "plugin"};
    for (size_t i = 0; i < AX_ARRAY_SIZE(retried); i++)
        for (int k = 1; k <= 5; k++) {
            ax_retry_decision_t d = ax_retry_decide(&p, retried[i], 0, k, 0.3);
            assert_int_equal(d.retry, 0);
            assert_int_equal(d.alert, 0);
            assert_int_equal(d.delay_ms, 0);
            assert_string_equal(d.reason, "not retryable");
        }
    /* a fail/alert rule still decides, alert included */
    ax_retry_decision_t d = ax_retry_decide(&p, "fatal", 0, 1, 0.3);
    assert_int_equal(d.retry, 0);
    assert_int_equal(d.alert, 1);
    assert_string_equal(d.reason, "fatal error class");
    d = ax_retry_decide(&p, "spawn", 0, 1, 0.3);
    assert_int_equal(d.alert, 0);
    assert_string_equal(d.reason, "error class not retried");
    /* any non-zero value means retryable */
    assert_int_equal(ax_retry_decide(&p, "exit", -1, 1, 0.3).retry, 1);
    assert_int_equal(ax_retry_decide(&p, "exit", 2, 1, 0.3).retry, 1);
}

static void test_exhaustion(void **state) {
    for (int max = 0; max <= 6; max++) {
        ax_retry_policy_t p = defaults();
        p.max_retries = max;
        for (int k = 1; k <= 10; k++) {
            ax_retry_decision_t d = ax_retry_decide(&p, "exit", 1, k, 0.0);
            assert_int_equal(d.retry, k <= max);
            assert_string_equal(d.reason, k <= max ? "retry" : "retries exhausted");
            assert_int_equal(d.alert, 0);
            if (k > max)
                assert_int_equal(d.delay_ms, 0);
            /* soon and fixed waits are counted the same way */
            assert_int_equal(ax_retry_decide(&p, "timeout", 1, k, 0.0).retry, k <= max);
            assert_int_equal(ax_retry_decide(&p, "conflict", 1, k, 0.0).retry, k <= max);
            /* a fatal class reports itself, not exhaustion */
            d = ax_retry_decide(&p, "fatal", 1, k, 0.0);
            assert_int_equal(d.alert, 1);
            assert_string_equal(d.reason, "fatal error class");
        }
    }
    ax_retry_policy_t p = defaults();
    /* attempts below 1 count as the first */
    assert_int_equal(ax_retry_decide(&p, "exit", 1, 0, 0.0).delay_ms, 2000);
    assert_int_equal(ax_retry_decide(&p, "exit", 1, INT_MIN, 0.0).delay_ms, 2000);
    assert_int_equal(ax_retry_decide(&p, "exit", 1, INT_MAX, 0.0).retry, 0);
    /* a negative max_retries counts as 0 */
    p.max_retries = -3;
    assert_string_equal(ax_retry_decide(&p, "exit", 1, 1, 0.0).reason, "retries exhausted");
}

/* ---- names and classes (the rule parser's checks) ------------------------ */

static void test_names_and_class_check(void **state) {
    static const char *const actions[] = {"retry", "fail", "alert"};
    static const char *const waits[] = {"backoff", "fixed", "soon"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ax_retry_action_parse(actions[i]), i);
        assert_string_equal(ax_retry_action_name((ax_retry_action_t)i), actions[i]);
        assert_int_equal(ax_retry_wait_parse(waits[i]), i);
        assert_string_equal(ax_retry_wait_name(i), waits[i]);
    }
    assert_int_equal(ax_retry_action_parse("Retry"), -1);
    assert_int_equal(ax_retry_action_parse(""), -1);
    assert_int_equal(ax_retry_action_parse(NULL), -1);
    assert_int_equal(ax_retry_wait_parse("backoff "), -1);
    assert_string_equal(ax_retry_action_name((ax_retry_action_t)3), "?");
    assert_string_equal(ax_retry_wait_name(-1), "?");

    char err[128];
    assert_int_equal(ax_retry_class_check("", 0, err, sizeof err), AX_OK);
    assert_int_equal(ax_retry_class_check("*", 1, err, sizeof err), AX_OK);
    assert_int_equal(ax_retry_class_check("http_5xx", 8, err, sizeof err), AX_OK);
    assert_int_equal(ax_retry_class_check("net*", 4, err, sizeof err), AX_OK);
    assert_int_equal(ax_retry_class_check("n*t", 3, err, sizeof err), AX_ERR_INVALID);
    assert_string_equal(err, "'*' only at the end (a prefix)");
    assert_int_equal(ax_retry_class_check("a b", 3, err, sizeof err), AX_ERR_INVALID);
    assert_string_equal(err, "byte 1 is not printable ASCII");
    assert_int_equal(ax_retry_class_check("\x7f", 1, NULL, 0), AX_ERR_INVALID);
    char c31[32], c32[33];
    memset(c31, 'c', 31);
    memset(c32, 'c', 32);
    assert_int_equal(ax_retry_class_check(c31, 31, err, sizeof err), AX_OK);
    assert_int_equal(ax_retry_class_check(c32, 32, err, sizeof err), AX_ERR_INVALID);
    assert_string_equal(err, "32 bytes, at most 31");

    /* the default chain back in place, the numbers untouched */
    ax_retry_policy_t p = defaults(), d = defaults();
    p.max_retries = 9;
    p.nrules = 1;
    ax_retry_rules_default(&p);
    assert_int_equal(p.max_retries, 9);
    assert_int_equal(p.nrules, d.nrules);
    assert_memory_equal(p.rules, d.rules, d.nrules * sizeof d.rules[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_backoff_bounds),
        cmocka_unit_test(test_jitter_uniform),
        cmocka_unit_test(test_backoff_fractional),
        cmocka_unit_test(test_backoff_extremes),
        cmocka_unit_test(test_policy_check),
        cmocka_unit_test(test_soon),
        cmocka_unit_test(test_fixed),
        cmocka_unit_test(test_default_classes),
        cmocka_unit_test(test_not_retryable),
        cmocka_unit_test(test_exhaustion),
        cmocka_unit_test(test_names_and_class_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
