/*
 * test_fire.c — the fire decision (core/fire.c): every misfire policy and
 * overlap policy with the times passed in, the due-time window, the detail
 * texts the ledger records, and the policy name tables.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ax/common.h"
#include "ax/fire.h"

#define S 1000 /* ms */

static ax_fire_policy_t policy(ax_misfire_t m, int64_t threshold, int32_t catchup) {
    return (ax_fire_policy_t){m, AX_OVERLAP_ALLOW, threshold, catchup};
}

/* Decide times (seconds) at now (seconds); decisions into out ("F"/"S"). */
static void decide(const ax_fire_policy_t *p, const int64_t *sec, size_t n, int64_t now_s,
                   ax_fire_due_t *due, char *out) {
    for (size_t i = 0; i < n; i++)
        due[i] = (ax_fire_due_t){.nominal_ms = sec[i] * S};
    ax_fire_misfire(p, due, n, now_s * S);
    for (size_t i = 0; i < n; i++)
        out[i] = due[i].verdict.decision == AX_FIRE_FIRED ? 'F' : 'S';
    out[n] = 0;
}

static void names(void **state) {
    (void)state;
    for (int i = 0; ax_misfire_names[i]; i++)
        assert_int_equal(ax_misfire_parse(ax_misfire_name((ax_misfire_t)i)), i);
    for (int i = 0; ax_overlap_names[i]; i++)
        assert_int_equal(ax_overlap_parse(ax_overlap_name((ax_overlap_t)i)), i);
    for (int i = 0; ax_fire_decision_names[i]; i++)
        assert_int_equal(ax_fire_decision_parse(ax_fire_decision_name((ax_fire_decision_t)i)), i);
    assert_int_equal(ax_misfire_parse("catch_up"), AX_MISFIRE_CATCH_UP);
    assert_int_equal(ax_overlap_parse("cancel"), AX_OVERLAP_CANCEL);
    assert_int_equal(ax_fire_decision_parse("skipped_circuit"), AX_FIRE_SKIPPED_CIRCUIT);
    assert_string_equal(ax_fire_decision_name(AX_FIRE_DEFERRED), "deferred");
    assert_int_equal(ax_misfire_parse("Skip"), -1);
    assert_int_equal(ax_overlap_parse(""), -1);
    assert_int_equal(ax_misfire_parse(NULL), -1);
    assert_string_equal(ax_misfire_name((ax_misfire_t)7), "?");
    assert_int_equal(ax_dst_gap_parse("shift"), AX_DST_GAP_SHIFT);
    assert_int_equal(ax_dst_gap_parse("skip"), AX_DST_GAP_SKIP);
    assert_int_equal(ax_dst_gap_parse("once"), -1);
    assert_int_equal(ax_dst_overlap_parse("once"), AX_DST_OVERLAP_ONCE);
    assert_int_equal(ax_dst_overlap_parse("twice"), AX_DST_OVERLAP_TWICE);
    assert_string_equal(ax_dst_gap_name(AX_DST_GAP_SKIP | AX_DST_OVERLAP_TWICE), "skip");
    assert_string_equal(ax_dst_overlap_name(AX_DST_GAP_SKIP | AX_DST_OVERLAP_TWICE), "twice");
    assert_string_equal(ax_dst_overlap_name(AX_DST_GAP_SKIP), "once");
}

static void window_keeps_newest(void **state) {
    (void)state;
    ax_fire_window_t w;
    ax_fire_window_init(&w, 3);
    for (int64_t i = 1; i <= 10; i++)
        assert_int_equal(ax_fire_window_push(&w, i * S, i == 9 ? AX_CRON_SHIFTED : 0), 0);
    assert_int_equal(w.n, 3);
    assert_int_equal(w.older, 7);
    assert_int_equal(w.older_first, 1 * S);
    assert_int_equal(w.older_last, 7 * S);
    ax_fire_window_linear(&w);
    assert_int_equal(w.v[0].nominal_ms, 8 * S);
    assert_int_equal(w.v[1].nominal_ms, 9 * S);
    assert_int_equal(w.v[1].flags, AX_CRON_SHIFTED);
    assert_int_equal(w.v[2].nominal_ms, 10 * S);
    ax_fire_window_clear(&w);
    assert_int_equal(w.n, 0);
    /* one time: no allocation, nothing older */
    ax_fire_window_init(&w, 1000);
    assert_int_equal(ax_fire_window_push(&w, 5, 0), 0);
    assert_ptr_equal(w.v, &w.one);
    assert_int_equal(w.older, 0);
    ax_fire_window_clear(&w);
}

static void on_time_fires_whatever_the_policy(void **state) {
    (void)state;
    int64_t t[] = {100, 101, 102};
    ax_fire_due_t due[3];
    char got[4];
    for (int m = AX_MISFIRE_FIRE_ONCE; m <= AX_MISFIRE_CATCH_UP; m++) {
        ax_fire_policy_t p = policy((ax_misfire_t)m, 5 * S, 1);
        decide(&p, t, 3, 105, due, got); /* 5 s late is still on time */
        assert_string_equal(got, "FFF");
        assert_int_equal(due[0].verdict.why, AX_FIRE_WHY_ON_TIME);
        assert_int_equal(due[0].verdict.late_ms, 5 * S);
    }
}

static void misfire_skip(void **state) {
    (void)state;
    ax_fire_policy_t p = policy(AX_MISFIRE_SKIP, 10 * S, 10);
    int64_t t[] = {100, 110, 120, 130};
    ax_fire_due_t due[4];
    char got[5];
    decide(&p, t, 4, 135, due, got); /* 35, 25, 15 s late; 5 s on time */
    assert_string_equal(got, "SSSF");
    assert_int_equal(due[0].verdict.why, AX_FIRE_WHY_SKIP);
    decide(&p, t, 4, 200, due, got);
    assert_string_equal(got, "SSSS");
}

static void misfire_fire_once(void **state) {
    (void)state;
    ax_fire_policy_t p = policy(AX_MISFIRE_FIRE_ONCE, 10 * S, 10);
    int64_t t[] = {100, 110, 120, 130};
    ax_fire_due_t due[4];
    char got[5];
    /* all late: only the latest missed time runs */
    decide(&p, t, 4, 200, due, got);
    assert_string_equal(got, "SSSF");
    assert_int_equal(due[3].verdict.why, AX_FIRE_WHY_ONCE_LATEST);
    assert_int_equal(due[2].verdict.why, AX_FIRE_WHY_ONCE_LATER);
    /* one on time: it runs, no late one does */
    decide(&p, t, 4, 135, due, got);
    assert_string_equal(got, "SSSF");
    assert_int_equal(due[3].verdict.why, AX_FIRE_WHY_ON_TIME);
    assert_int_equal(due[2].verdict.why, AX_FIRE_WHY_ONCE_LATER);
    /* a single late time fires */
    decide(&p, t, 1, 200, due, got);
    assert_string_equal(got, "F");
}

static void misfire_catch_up(void **state) {
    (void)state;
    ax_fire_policy_t p = policy(AX_MISFIRE_CATCH_UP, 10 * S, 2);
    int64_t t[] = {100, 110, 120, 130, 140};
    ax_fire_due_t due[5];
    char got[6];
    /* all late: the newest catchup_max run */
    decide(&p, t, 5, 200, due, got);
    assert_string_equal(got, "SSSFF");
    assert_int_equal(due[4].verdict.why, AX_FIRE_WHY_CATCH_UP);
    assert_int_equal(due[0].verdict.why, AX_FIRE_WHY_CATCH_UP_MAX);
    /* on-time ones do not count against catchup_max */
    decide(&p, t, 5, 145, due, got); /* 140 on time; 130 and 120 late, within catchup_max */
    assert_string_equal(got, "SSFFF");
    p.catchup_max = 10;
    decide(&p, t, 5, 200, due, got);
    assert_string_equal(got, "FFFFF");
}

static void misfire_threshold_is_inclusive(void **state) {
    (void)state;
    ax_fire_policy_t p = policy(AX_MISFIRE_SKIP, 10 * S, 1);
    ax_fire_due_t due[1] = {{.nominal_ms = 100 * S}};
    ax_fire_misfire(&p, due, 1, 110 * S);
    assert_int_equal(due[0].verdict.decision, AX_FIRE_FIRED);
    ax_fire_misfire(&p, due, 1, 110 * S + 1);
    assert_int_equal(due[0].verdict.decision, AX_FIRE_SKIPPED_MISFIRE);
}

static void details(void **state) {
    (void)state;
    char d[512];
    ax_fire_policy_t p = policy(AX_MISFIRE_FIRE_ONCE, 10 * S, 3);
    ax_fire_due_t due = {.nominal_ms = 0, .verdict = {AX_FIRE_FIRED, AX_FIRE_WHY_ON_TIME, 1000}};
    assert_int_equal(ax_fire_detail(&p, &due, d, sizeof d), 0); /* a second late: nothing */
    due.verdict.late_ms = 1001;
    ax_fire_detail(&p, &due, d, sizeof d);
    assert_string_equal(d, "late by 1001 ms");
    due.verdict.late_ms = 3;
    due.flags = AX_CRON_SHIFTED;
    ax_fire_detail(&p, &due, d, sizeof d);
    assert_string_equal(d, "late by 3 ms; DST: shifted");
    due.flags = AX_CRON_REPEATED;
    due.verdict = (ax_fire_verdict_t){AX_FIRE_FIRED, AX_FIRE_WHY_ONCE_LATEST, 60000};
    ax_fire_detail(&p, &due, d, sizeof d);
    assert_string_equal(d, "misfire: late by 60000 ms > threshold 10000 ms; policy fire_once runs "
                           "the latest missed time; DST: repeated hour");
    due.flags = 0;
    due.verdict = (ax_fire_verdict_t){AX_FIRE_SKIPPED_MISFIRE, AX_FIRE_WHY_ONCE_LATER, 70000};
    ax_fire_detail(&p, &due, d, sizeof d);
    assert_string_equal(d, "misfire: late by 70000 ms; policy fire_once ran a later time only");
    due.verdict = (ax_fire_verdict_t){AX_FIRE_SKIPPED_MISFIRE, AX_FIRE_WHY_SKIP, 20000};
    ax_fire_detail(&p, &due, d, sizeof d);
    assert_string_equal(d, "misfire: late by 20000 ms > threshold 10000 ms; policy skip");
    due.verdict = (ax_fire_verdict_t){AX_FIRE_FIRED, AX_FIRE_WHY_CATCH_UP, 20000};
    ax_fire_detail(&p, &due, d, sizeof d);
    assert_string_equal(d, "misfire: late by 20000 ms; policy catch_up");
    due.verdict = (ax_fire_verdict_t){AX_FIRE_SKIPPED_MISFIRE, AX_FIRE_WHY_CATCH_UP_MAX, 20000};
    ax_fire_detail(&p, &due, d, sizeof d);
    assert_string_equal(d, "misfire: late by 20000 ms; policy catch_up runs at most 3 missed "
                           "times");
}

static void older_detail(void **state) {
    (void)state;
    ax_fire_window_t w;
    ax_fire_window_init(&w, 1);
    ax_fire_window_push(&w, 0, 0);
    ax_fire_window_push(&w, 60 * S, 0);
    ax_fire_window_push(&w, 120 * S, 0);
    char d[512] = "";
    ax_fire_older_detail(&w, 0, d, sizeof d);
    assert_string_equal(d, "also 2 earlier fire times from 1970-01-01T00:00:00Z through "
                           "1970-01-01T00:01:00Z skipped (misfire), not recorded one by one");
    strcpy(d, "x");
    ax_fire_older_detail(&w, 1, d, sizeof d);
    assert_string_equal(d, "x; also more than 2 earlier fire times from 1970-01-01T00:00:00Z "
                           "through 1970-01-01T00:01:00Z skipped (misfire), not recorded one by "
                           "one");
    ax_fire_window_clear(&w);
}

static void overlap_allow(void **state) {
    (void)state;
    ax_fire_busy_t b = {1, 42, 1, 1};
    ax_fire_overlap_t d = ax_fire_overlap(AX_OVERLAP_ALLOW, &b);
    assert_int_equal(d.action, AX_OVERLAP_RUNS);
    assert_int_equal(d.decision, AX_FIRE_FIRED);
}

static void overlap_idle_runs(void **state) {
    (void)state;
    ax_fire_busy_t idle = {0};
    for (int o = AX_OVERLAP_SKIP; o <= AX_OVERLAP_CANCEL; o++) {
        ax_fire_overlap_t d = ax_fire_overlap((ax_overlap_t)o, &idle);
        assert_int_equal(d.action, AX_OVERLAP_RUNS);
        assert_int_equal(d.decision, AX_FIRE_FIRED);
    }
}

static void overlap_skip(void **state) {
    (void)state;
    char d[256];
    ax_fire_busy_t running = {1, 42, 0, 0}, earlier = {0, 0, 0, 1};
    ax_fire_overlap_t o = ax_fire_overlap(AX_OVERLAP_SKIP, &running);
    assert_int_equal(o.action, AX_OVERLAP_SKIPS);
    assert_int_equal(o.decision, AX_FIRE_SKIPPED_OVERLAP);
    ax_fire_overlap_detail(AX_OVERLAP_SKIP, &o, "42 RUNNING", NULL, d, sizeof d);
    assert_string_equal(d, "overlap=skip: still unfinished: 42 RUNNING");
    o = ax_fire_overlap(AX_OVERLAP_SKIP, &earlier);
    assert_int_equal(o.decision, AX_FIRE_SKIPPED_OVERLAP);
    ax_fire_overlap_detail(AX_OVERLAP_SKIP, &o, NULL, "late by 2000 ms", d, sizeof d);
    assert_string_equal(d, "overlap=skip: still unfinished: an earlier fire of this batch; late "
                           "by 2000 ms");
}

static void overlap_queue(void **state) {
    (void)state;
    char d[256];
    ax_fire_busy_t running = {1, 42, 0, 0}, queued = {1, 43, 1, 0}, earlier = {0, 0, 0, 1};
    ax_fire_overlap_t o = ax_fire_overlap(AX_OVERLAP_QUEUE, &running);
    assert_int_equal(o.action, AX_OVERLAP_QUEUES);
    assert_int_equal(o.decision, AX_FIRE_QUEUED);
    assert_int_equal(o.wait_for, 42);
    ax_fire_overlap_detail(AX_OVERLAP_QUEUE, &o, "42 RUNNING", "", d, sizeof d);
    assert_string_equal(d, "overlap=queue: runs after instance 42 finished");
    /* one waits already: at most one queued */
    o = ax_fire_overlap(AX_OVERLAP_QUEUE, &queued);
    assert_int_equal(o.decision, AX_FIRE_SKIPPED_OVERLAP);
    ax_fire_overlap_detail(AX_OVERLAP_QUEUE, &o, "42 RUNNING, 43 SCHEDULED", NULL, d, sizeof d);
    assert_string_equal(d, "overlap=queue (one already queued): still unfinished: 42 RUNNING, "
                           "43 SCHEDULED");
    /* an earlier fire of this batch is the one queued */
    o = ax_fire_overlap(AX_OVERLAP_QUEUE, &earlier);
    assert_int_equal(o.decision, AX_FIRE_SKIPPED_OVERLAP);
    assert_int_equal(o.wait_for, 0);
}

static void overlap_cancel(void **state) {
    (void)state;
    char d[256];
    ax_fire_busy_t running = {1, 42, 0, 0}, earlier = {0, 0, 0, 1};
    ax_fire_overlap_t o = ax_fire_overlap(AX_OVERLAP_CANCEL, &running);
    assert_int_equal(o.action, AX_OVERLAP_CANCELS);
    assert_int_equal(o.decision, AX_FIRE_FIRED);
    assert_true(o.cancel_unfinished);
    ax_fire_overlap_detail(AX_OVERLAP_CANCEL, &o, "42 RUNNING", "x", d, sizeof d);
    assert_string_equal(d, "overlap=cancel: cancelling 42 RUNNING; x");
    /* only an earlier fire of this batch: it fires, nothing in the table to cancel */
    o = ax_fire_overlap(AX_OVERLAP_CANCEL, &earlier);
    assert_int_equal(o.action, AX_OVERLAP_CANCELS);
    assert_false(o.cancel_unfinished);
    /* the length is reported as snprintf does, for sizing a buffer */
    size_t need = ax_fire_overlap_detail(AX_OVERLAP_CANCEL, &o, NULL, NULL, NULL, 0);
    assert_int_equal(need, strlen("overlap=cancel: cancelling an earlier fire of this batch"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names),
        cmocka_unit_test(window_keeps_newest),
        cmocka_unit_test(on_time_fires_whatever_the_policy),
        cmocka_unit_test(misfire_skip),
        cmocka_unit_test(misfire_fire_once),
        cmocka_unit_test(misfire_catch_up),
        cmocka_unit_test(misfire_threshold_is_inclusive),
        cmocka_unit_test(details),
        cmocka_unit_test(older_detail),
        cmocka_unit_test(overlap_allow),
        cmocka_unit_test(overlap_idle_runs),
        cmocka_unit_test(overlap_skip),
        cmocka_unit_test(overlap_queue),
        cmocka_unit_test(overlap_cancel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
