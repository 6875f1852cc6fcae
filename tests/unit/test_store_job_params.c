/*
 * test_store_job_params.c — the parameters of the job create and update
 * statements (libax/src/store/job.c): a setting not given is NULL (update
 * keeps it, create takes the default); a clearable setting given empty is
 * NULL with its "given" flag true; a schedule writes all its columns.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "store/job_params.h"

static void nothing_given_is_null(void **state) {
    (void)state;
    ax_job_spec_t s = {.name = "j"};
    ax__job_params_t p;
    assert_int_equal(ax__job_spec_params(&p, &s), 0);
    assert_string_equal(p.p[P_NAME], "j");
    for (int i = 0; i < P_CREATE_N; i++) {
        if (i == P_NAME)
            continue;
        if (i == P_SCHED || i == P_RKEY_SET || i == P_BACKLOG_SET || i == P_CONC_SET ||
            i == P_RULES_SET)
            assert_string_equal(p.p[i], "false");
        else
            assert_null(p.p[i]);
    }
    ax__job_params_clear(&p);
}

static void clearing_is_null_given(void **state) {
    (void)state;
    ax_job_spec_t s = {.name = "j", .has_routing_key = 1, .routing_key = NULL,
                       .has_backlog_max = 1, .backlog_max = -1, .has_concurrency = 1,
                       .concurrency_limit = 0, .has_retry_rules = 1, .retry_rules = NULL};
    ax__job_params_t p;
    assert_int_equal(ax__job_spec_params(&p, &s), 0);
    int flags[] = {P_RKEY_SET, P_BACKLOG_SET, P_CONC_SET, P_RULES_SET};
    int values[] = {P_RKEY, P_BACKLOG, P_CONC, P_RULES};
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(p.p[flags[i]], "true");
        assert_null(p.p[values[i]]);
    }
    ax__job_params_clear(&p);
    /* and set to a value */
    s.routing_key = "order";
    s.backlog_max = 0;
    s.concurrency_limit = 3;
    s.retry_rules = "[]";
    assert_int_equal(ax__job_spec_params(&p, &s), 0);
    assert_string_equal(p.p[P_RKEY], "order");
    assert_string_equal(p.p[P_BACKLOG], "0");
    assert_string_equal(p.p[P_CONC], "3");
    assert_string_equal(p.p[P_RULES], "[]");
    ax__job_params_clear(&p);
}

static void schedules(void **state) {
    (void)state;
    /* --after: now + MS, no absolute start */
    ax_job_spec_t s = {.name = "j", .set_schedule = 1, .schedule_kind = "once", .has_after = 1,
                       .after_ms = 0};
    ax__job_params_t p;
    assert_int_equal(ax__job_spec_params(&p, &s), 0);
    assert_string_equal(p.p[P_SCHED], "true");
    assert_string_equal(p.p[P_KIND], "once");
    assert_null(p.p[P_START]);
    assert_string_equal(p.p[P_AFTER], "0");
    assert_null(p.p[P_INTERVAL]);
    assert_null(p.p[P_EXPR]);
    ax__job_params_clear(&p);
    /* fixed rate with a start */
    s = (ax_job_spec_t){.name = "j", .set_schedule = 1, .schedule_kind = "fixed_rate",
                        .interval_ms = 90000, .has_start = 1, .start_ms = 1893456000000};
    assert_int_equal(ax__job_spec_params(&p, &s), 0);
    assert_string_equal(p.p[P_INTERVAL], "90000");
    assert_string_equal(p.p[P_START], "1893456000000");
    assert_null(p.p[P_AFTER]);
    ax__job_params_clear(&p);
    /* --start alone changes only start_at; a kind without a schedule is not written */
    s = (ax_job_spec_t){.name = "j", .schedule_kind = "cron", .schedule_expr = "* * * * *",
                        .has_start = 1, .start_ms = 5};
    assert_int_equal(ax__job_spec_params(&p, &s), 0);
    assert_string_equal(p.p[P_SCHED], "false");
    assert_null(p.p[P_KIND]);
    assert_null(p.p[P_EXPR]);
    assert_string_equal(p.p[P_START], "5");
    ax__job_params_clear(&p);
}

static void payload_command_create(void **state) {
    (void)state;
    char *cmd[] = {"sh", "-c", "echo \"a b\" \\ {x}", NULL};
    ax_job_spec_t s = {.name = "j", .has_payload = 1, .payload = "a\0b", .payload_len = 3,
                       .command = cmd, .ncommand = 3, .disabled = 1, .flow_id = 7};
    ax__job_params_t p;
    assert_int_equal(ax__job_spec_params(&p, &s), 0);
    assert_int_equal(p.fmt[P_PAYLOAD], 1);
    assert_int_equal(p.len[P_PAYLOAD], 3);
    assert_memory_equal(p.p[P_PAYLOAD], "a\0b", 3);
    assert_string_equal(p.p[P_COMMAND], "{\"sh\",\"-c\",\"echo \\\"a b\\\" \\\\ {x}\"}");
    assert_string_equal(p.p[P_ENABLED], "false");
    assert_string_equal(p.p[P_FLOW], "7");
    ax__job_params_clear(&p);
    /* an empty payload given is '' (not NULL: that would keep the old one) */
    s = (ax_job_spec_t){.name = "j", .has_payload = 1, .payload = NULL, .payload_len = 0};
    assert_int_equal(ax__job_spec_params(&p, &s), 0);
    assert_non_null(p.p[P_PAYLOAD]);
    assert_int_equal(p.len[P_PAYLOAD], 0);
    ax__job_params_clear(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nothing_given_is_null),
        cmocka_unit_test(clearing_is_null_given),
        cmocka_unit_test(schedules),
        cmocka_unit_test(payload_command_create),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
