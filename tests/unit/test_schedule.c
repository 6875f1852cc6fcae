/*
 * test_schedule.c — ax_schedule_next (core/schedule.c): fixed-rate grids
 * (checked against a brute-force walk of the grid), once, fixed-delay's
 * first fire, cron delegation with DST flags, kind names and errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ax/schedule.h"
#include "tzdata_loader.h"

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static uint64_t rng(void) {
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return rs * 2685821657736338717ull;
}

static void fixed_rate_grid(void **state) {
    ax_schedule_t s;
    char err[256];
    assert_int_equal(ax_schedule_init(&s, AX_SCHED_FIXED_RATE, NULL, NULL, 0, 500, 1000, err,
                                      sizeof err), 0);
    int64_t n;
    assert_int_equal(ax_schedule_next(&s, 0, &n, NULL), 0);
    assert_int_equal(n, 1000); /* before the anchor: the anchor */
    assert_int_equal(ax_schedule_next(&s, 999, &n, NULL), 0);
    assert_int_equal(n, 1000);
    assert_int_equal(ax_schedule_next(&s, 1000, &n, NULL), 0);
    assert_int_equal(n, 1500); /* strictly after */
    assert_int_equal(ax_schedule_next(&s, 1499, &n, NULL), 0);
    assert_int_equal(n, 1500);
    /* random anchors, intervals and points against a walk of the grid */
    for (int i = 0; i < 20000; i++) {
        int64_t iv = 1 + (int64_t)(rng() % 100000), anchor = (int64_t)(rng() % 2000000000000ull);
        int64_t after = anchor - 500000 + (int64_t)(rng() % 5000000);
        ax_schedule_init(&s, AX_SCHED_FIXED_RATE, NULL, NULL, 0, iv, anchor, err, sizeof err);
        int64_t want = anchor;
        while (want <= after)
            want += iv;
        assert_int_equal(ax_schedule_next(&s, after, &n, NULL), 0);
        assert_int_equal(n, want);
    }
}

static void once_and_fixed_delay(void **state) {
    ax_schedule_t s;
    char err[256];
    int64_t n;
    for (int k = 0; k < 2; k++) {
        ax_sched_kind_t kind = k ? AX_SCHED_FIXED_DELAY : AX_SCHED_ONCE;
        assert_int_equal(ax_schedule_init(&s, kind, NULL, NULL, 0, k ? 300 : 0, 5000, err,
                                          sizeof err), 0);
        assert_int_equal(ax_schedule_next(&s, 4999, &n, NULL), 0);
        assert_int_equal(n, 5000);
        assert_int_equal(ax_schedule_next(&s, 5000, &n, NULL), AX_ERR_NOTFOUND);
    }
}

static void cron_with_dst(void **state) {
    ax_schedule_t s;
    char err[256];
    /* 02:30 daily in New York; 2027-03-14 has no 02:30 (spring forward) */
    assert_int_equal(ax_schedule_init(&s, AX_SCHED_CRON, "30 2 * * *", "America/New_York", 0, 0,
                                      0, err, sizeof err), 0);
    int64_t n;
    int flags;
    /* from 2027-03-13T12:00Z */
    assert_int_equal(ax_schedule_next(&s, 1804939200000LL, &n, &flags), 0);
    assert_int_equal(n, 1805009400000LL); /* 2027-03-14T03:30-04:00 = 07:30Z */
    assert_true(flags & AX_CRON_SHIFTED);
    ax_schedule_clear(&s);
    assert_int_equal(ax_schedule_init(&s, AX_SCHED_CRON, "30 2 * * *", "America/New_York",
                                      AX_DST_GAP_SKIP, 0, 0, err, sizeof err), 0);
    assert_int_equal(ax_schedule_next(&s, 1804939200000LL, &n, &flags), 0);
    assert_int_equal(n, 1805092200000LL); /* 03-15 02:30-04:00 */
    assert_int_equal(flags, 0);
    ax_schedule_clear(&s);
}

static void errors_and_names(void **state) {
    ax_schedule_t s;
    char err[256];
    assert_int_equal(ax_schedule_init(&s, AX_SCHED_CRON, "61 * * * *", NULL, 0, 0, 0, err,
                                      sizeof err), AX_ERR_INVALID);
    assert_non_null(strstr(err, "position 1"));
    assert_int_equal(ax_schedule_init(&s, AX_SCHED_CRON, NULL, NULL, 0, 0, 0, err, sizeof err),
                     AX_ERR_INVALID);
    assert_int_equal(ax_schedule_init(&s, AX_SCHED_FIXED_RATE, NULL, NULL, 0, 0, 0, err,
                                      sizeof err), AX_ERR_INVALID);
    assert_int_equal(ax_schedule_init(&s, AX_SCHED_FIXED_DELAY, NULL, NULL, 0, -5, 0, err,
                                      sizeof err), AX_ERR_INVALID);
    const char *names[] = {"none", "cron", "fixed_rate", "fixed_delay", "once"};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ax_sched_kind_parse(names[i]), i);
        assert_string_equal(ax_sched_kind_name((ax_sched_kind_t)i), names[i]);
    }
    assert_int_equal(ax_sched_kind_parse("hourly"), -1);
    assert_int_equal(ax_sched_kind_parse(NULL), -1);
    int64_t n;
    ax_schedule_init(&s, AX_SCHED_NONE, NULL, NULL, 0, 0, 0, err, sizeof err);
    assert_int_equal(ax_schedule_next(&s, 0, &n, NULL), AX_ERR_NOTFOUND);
}

int main(void) {
    ax_tz_set_loader(test_tzif_load);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixed_rate_grid),
        cmocka_unit_test(once_and_fixed_delay),
        cmocka_unit_test(cron_with_dst),
        cmocka_unit_test(errors_and_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
