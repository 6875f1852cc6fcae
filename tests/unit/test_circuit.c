/*
 * test_circuit.c — the circuit breaker (core/circuit.c), time as a
 * parameter: the trigger's fire decision (closed runs; open skips until the
 * cool-down passed, then one probe and half-open; half-open skips; the
 * year cap on cool-downs), the callback's result step case by case, and the
 * module against a literal transcription of the SQL CASEs of the store's
 * "outcome.jobs" statement (libax/src/store/outcome.c) over a grid of
 * inputs: the statement applies the circuit in the batch's transaction and
 * must stay this module in SQL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ax/circuit.h"
#include "ax/common.h"

#define C AX_CIRCUIT_CLOSED
#define O AX_CIRCUIT_OPEN
#define H AX_CIRCUIT_HALF_OPEN

static void names(void **state) {
    (void)state;
    ax_circuit_state_t s = C;
    assert_string_equal(ax_circuit_state_name(AX_CIRCUIT_HALF_OPEN), "half_open");
    assert_int_equal(ax_circuit_state_parse("open", &s), 0);
    assert_int_equal(s, AX_CIRCUIT_OPEN);
    for (ax_circuit_state_t k = C; k <= H; k++) {
        assert_int_equal(ax_circuit_state_parse(ax_circuit_state_name(k), &s), 0);
        assert_int_equal(s, k);
    }
    assert_int_equal(ax_circuit_state_parse("half-open", &s), AX_ERR_INVALID);
    assert_int_equal(ax_circuit_state_parse(NULL, &s), AX_ERR_INVALID);
    assert_string_equal(ax_circuit_state_name((ax_circuit_state_t)7), "unknown");
}

static void on_fire(void **state) {
    (void)state;
    ax_circuit_t c = {.state = C, .cooldown_ms = 1000, .opened_at_ms = -1};
    assert_int_equal(ax_circuit_on_fire(&c, 5), AX_CIRCUIT_FIRE_RUN);
    assert_int_equal(c.state, C);

    c = (ax_circuit_t){.state = O, .cooldown_ms = 1000, .opened_at_ms = 10000};
    assert_int_equal(ax_circuit_on_fire(&c, 10999), AX_CIRCUIT_FIRE_SKIP);
    assert_int_equal(c.state, O);
    /* the cool-down is over at exactly opened + cooldown */
    assert_int_equal(ax_circuit_on_fire(&c, 11000), AX_CIRCUIT_FIRE_PROBE);
    assert_int_equal(c.state, H);
    /* the same batch's next fire: the probe is out */
    assert_int_equal(ax_circuit_on_fire(&c, 11000), AX_CIRCUIT_FIRE_SKIP);
    assert_int_equal(ax_circuit_on_fire(&c, 99999999), AX_CIRCUIT_FIRE_SKIP);

    /* open without a known opening time: never probed */
    c = (ax_circuit_t){.state = O, .cooldown_ms = 0, .opened_at_ms = -1};
    assert_int_equal(ax_circuit_on_fire(&c, INT64_MAX / 2), AX_CIRCUIT_FIRE_SKIP);
    /* a cool-down of 0 probes at once */
    c = (ax_circuit_t){.state = O, .cooldown_ms = 0, .opened_at_ms = 500};
    assert_int_equal(ax_circuit_on_fire(&c, 500), AX_CIRCUIT_FIRE_PROBE);
    /* cool-downs are capped at a year (no overflow with huge values) */
    c = (ax_circuit_t){.state = O, .cooldown_ms = INT64_MAX, .opened_at_ms = 1000};
    assert_int_equal(ax_circuit_on_fire(&c, 1000 + AX_CIRCUIT_COOLDOWN_MAX_MS - 1),
                     AX_CIRCUIT_FIRE_SKIP);
    assert_int_equal(ax_circuit_on_fire(&c, 1000 + AX_CIRCUIT_COOLDOWN_MAX_MS),
                     AX_CIRCUIT_FIRE_PROBE);
}

/* Named cases of the result step: before, ok, bad, after, opened now. */
static const struct rcase {
    const char *what;
    ax_circuit_state_t state;
    int64_t cf, thr, opened;
    int64_t ok, bad;
    ax_circuit_state_t state2;
    int64_t cf2, opened2;
    int now;
} g_cases[] = {
    {"success closes a closed circuit", C, 2, 3, -1, 1, 0, C, 0, -1, 0},
    {"success closes an open circuit", O, 5, 3, 100, 1, 4, C, 0, -1, 0},
    {"the probe's success closes it", H, 5, 3, 100, 1, 0, C, 0, -1, 0},
    {"failures count below the threshold", C, 1, 3, -1, 0, 1, C, 2, -1, 0},
    {"the threshold opens it", C, 2, 3, -1, 0, 1, O, 3, 7, 1},
    {"a batch over the threshold opens it", C, 0, 3, -1, 0, 5, O, 5, 7, 1},
    {"threshold 0: the breaker is off", C, 99, 0, -1, 0, 1, C, 100, -1, 0},
    {"failures while open keep its opening time", O, 3, 3, 100, 0, 2, O, 5, 100, 0},
    {"the failed probe opens it again", H, 3, 3, 100, 0, 1, O, 4, 7, 1},
    {"a cancelled probe opens it again", H, 3, 3, 100, 0, 0, O, 3, 7, 1},
    {"nothing counted: no change", C, 2, 3, -1, 0, 0, C, 2, -1, 0},
    {"nothing counted while open: no change", O, 4, 3, 100, 0, 0, O, 4, 100, 0},
};

static void on_results(void **state) {
    (void)state;
    for (size_t i = 0; i < AX_ARRAY_SIZE(g_cases); i++) {
        const struct rcase *k = &g_cases[i];
        ax_circuit_t c = {.state = k->state, .consecutive_failures = k->cf,
                          .threshold = k->thr, .opened_at_ms = k->opened};
        int now = ax_circuit_on_results(&c, k->ok, k->bad, 7);
        if (c.state != k->state2 || c.consecutive_failures != k->cf2 ||
            c.opened_at_ms != k->opened2 || now != k->now)
            fail_msg("%s: got %s/%lld/%lld/%d", k->what, ax_circuit_state_name(c.state),
                     (long long)c.consecutive_failures, (long long)c.opened_at_ms, now);
    }
}

/* The SQL of "outcome.jobs", transcribed literally: every CASE reads the
 * old row (j.*) and the batch's counts (s.*); NULL is -1. */
static void sql_jobs(const ax_circuit_t *j, int64_t ok, int64_t bad, int64_t now,
                     ax_circuit_t *out, int *opened_now) {
    *out = *j;
    /* consecutive_failures = CASE WHEN s.ok > 0 THEN 0
     *                             ELSE j.consecutive_failures + s.bad END */
    out->consecutive_failures = ok > 0 ? 0 : j->consecutive_failures + bad;
    /* circuit_state = CASE WHEN s.ok > 0 THEN 'closed'
     *   WHEN j.circuit_state = 'half_open' THEN 'open'
     *   WHEN s.bad > 0 AND j.circuit_threshold > 0
     *     AND j.consecutive_failures + s.bad >= j.circuit_threshold THEN 'open'
     *   ELSE j.circuit_state END */
    if (ok > 0)
        out->state = C;
    else if (j->state == H)
        out->state = O;
    else if (bad > 0 && j->threshold > 0 && j->consecutive_failures + bad >= j->threshold)
        out->state = O;
    /* circuit_opened_at = CASE WHEN s.ok > 0 THEN NULL
     *   WHEN j.circuit_state = 'half_open' THEN now()
     *   WHEN s.bad > 0 AND j.circuit_threshold > 0 AND j.circuit_state = 'closed'
     *     AND j.consecutive_failures + s.bad >= j.circuit_threshold THEN now()
     *   ELSE j.circuit_opened_at END */
    if (ok > 0)
        out->opened_at_ms = -1;
    else if (j->state == H)
        out->opened_at_ms = now;
    else if (bad > 0 && j->threshold > 0 && j->state == C &&
             j->consecutive_failures + bad >= j->threshold)
        out->opened_at_ms = now;
    /* RETURNING j.circuit_opened_at = now() AS opened_now (the old opening
     * time is always earlier than the transaction's now()) */
    *opened_now = out->opened_at_ms == now;
}

static void matches_sql(void **state) {
    (void)state;
    const int64_t now = 1000000;
    size_t n = 0;
    for (ax_circuit_state_t st = C; st <= H; st++)
        for (int64_t cf = 0; cf <= 6; cf++)
            for (int64_t thr = -1; thr <= 5; thr++)
                for (int64_t ok = 0; ok <= 2; ok++)
                    for (int64_t bad = 0; bad <= 6; bad++) {
                        ax_circuit_t j = {.state = st, .consecutive_failures = cf,
                                          .threshold = thr, .cooldown_ms = 60000,
                                          .opened_at_ms = st == C ? -1 : now - 5000};
                        ax_circuit_t want, got = j;
                        int want_now, got_now;
                        sql_jobs(&j, ok, bad, now, &want, &want_now);
                        got_now = ax_circuit_on_results(&got, ok, bad, now);
                        if (got.state != want.state ||
                            got.consecutive_failures != want.consecutive_failures ||
                            got.opened_at_ms != want.opened_at_ms || got_now != want_now)
                            fail_msg("%s cf=%lld thr=%lld ok=%lld bad=%lld: module %s/%lld/%lld/%d,"
                                     " SQL %s/%lld/%lld/%d",
                                     ax_circuit_state_name(j.state), (long long)cf,
                                     (long long)thr, (long long)ok, (long long)bad,
                                     ax_circuit_state_name(got.state),
                                     (long long)got.consecutive_failures,
                                     (long long)got.opened_at_ms, got_now,
                                     ax_circuit_state_name(want.state),
                                     (long long)want.consecutive_failures,
                                     (long long)want.opened_at_ms, want_now);
                        n++;
                    }
    assert_true(n > 1000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names),
        cmocka_unit_test(on_fire),
        cmocka_unit_test(on_results),
        cmocka_unit_test(matches_sql),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
