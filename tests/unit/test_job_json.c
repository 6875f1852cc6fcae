/*
 * test_job_json.c — ax-api's JobSpec JSON into a job spec (libax
 * adapters/job_json.c): every member read into its spec field, unknown and
 * out-of-range members refused naming their JSON path, create-only members
 * refused on update, and the checks that need more than ranges (cron
 * expression, time zone, group, handler/command, retry rules) naming the
 * member at fault.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ax/common.h"
#include "ax/cron.h"
#include "ax/job_json.h"
#include "ax/tzfile.h"

static json_t *doc; /* the JSON the last spec points into */

static int parse(const char *text, int create, ax_job_spec_buf_t *b, const char **field) {
    json_error_t e;
    json_decref(doc);
    json_t *o = doc = json_loads(text, 0, &e);
    assert_non_null(o);
    char err[512];
    int rc = ax_job_spec_from_json(o, create, b, field, err, sizeof err);
    if (rc == 0)
        rc = ax_job_spec_check(&b->spec, create, field, err, sizeof err);
    if (rc == 0)
        assert_null(*field);
    else
        assert_non_null(strstr(err, *field)); /* the message names it too */
    return rc; /* the spec points into doc: kept until the next parse */
}

static void test_full(void **state) {
    (void)state;
    ax_job_spec_buf_t b;
    const char *f = NULL;
    assert_int_equal(
        parse("{\"name\":\"nightly\",\"enabled\":false,\"schedule\":{\"kind\":\"cron\","
              "\"expr\":\"30 2 * * *\",\"time_zone\":\"Europe/Paris\",\"dst_gap\":\"skip\"},"
              "\"command\":[\"/bin/echo\",\"hi\"],\"payload\":\"p\",\"group\":\"batch\","
              "\"routing_key\":\"customer\",\"priority\":1,\"timeout_ms\":5000,"
              "\"concurrency\":null,\"backlog_max\":10,\"tolerance_ms\":5,\"misfire\":\"skip\","
              "\"misfire_threshold_ms\":2000,\"catchup_max\":3,\"overlap\":\"queue\","
              "\"retry\":{\"max\":2,\"initial_ms\":100,\"multiplier\":1.5,\"max_delay_ms\":900,"
              "\"jitter_ms\":0,\"rules\":[{\"class\":\"exit\",\"action\":\"fail\"}]},"
              "\"circuit\":{\"threshold\":0,\"cooldown_ms\":1000}}",
              1, &b, &f),
        0);
    const ax_job_spec_t *s = &b.spec;
    assert_string_equal(s->name, "nightly");
    assert_int_equal(s->disabled, 1);
    assert_int_equal(s->set_schedule, 1);
    assert_string_equal(s->schedule_kind, "cron");
    assert_string_equal(s->schedule_expr, "30 2 * * *");
    assert_string_equal(s->time_zone, "Europe/Paris");
    assert_string_equal(s->dst_gap, "skip");
    assert_int_equal(s->ncommand, 2);
    assert_string_equal(s->command[1], "hi");
    assert_int_equal(s->has_payload, 1);
    assert_int_equal(s->payload_len, 1);
    assert_string_equal(s->executor_group, "batch");
    assert_string_equal(s->routing_key, "customer");
    assert_true(s->has_priority && s->priority == 1);
    assert_true(s->has_timeout && s->timeout_ms == 5000);
    assert_true(s->has_concurrency && s->concurrency_limit == 0); /* null clears */
    assert_true(s->has_backlog_max && s->backlog_max == 10);
    assert_string_equal(s->misfire_policy, "skip");
    assert_string_equal(s->overlap_policy, "queue");
    assert_true(s->has_retry_max && s->retry_max == 2);
    assert_string_equal(s->retry_multiplier, "1.5");
    assert_true(s->has_retry_rules);
    assert_string_equal(s->retry_rules, "[{\"class\":\"exit\",\"action\":\"fail\"}]");
    assert_true(s->has_circuit_threshold && s->circuit_threshold == 0);
    ax_job_spec_buf_clear(&b);
}

static void refused(const char *text, int create, const char *field) {
    ax_job_spec_buf_t b;
    const char *f = NULL;
    int rc = parse(text, create, &b, &f);
    if (rc != AX_ERR_INVALID || strcmp(f, field) != 0)
        fail_msg("%s: rc %d, field %s (expected %s)", text, rc, f ? f : "(none)", field);
    ax_job_spec_buf_clear(&b);
}

static void test_refusals(void **state) {
    (void)state;
    refused("{\"command\":[\"x\"]}", 1, "name");
    refused("{\"name\":\"-x\",\"command\":[\"x\"]}", 1, "name");
    refused("{\"name\":\"a\"}", 1, "command");
    refused("{\"name\":\"a\",\"command\":[]}", 1, "command");
    refused("{\"name\":\"a\",\"command\":[1]}", 1, "command");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"colour\":1}", 1, "colour");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"priority\":5}", 1, "priority");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"priority\":\"1\"}", 1, "priority");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"overlap\":\"maybe\"}", 1, "overlap");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"misfire_threshold_ms\":999}", 1,
            "misfire_threshold_ms");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"schedule\":{\"kind\":\"cron\"}}", 1,
            "schedule.expr");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"schedule\":{\"kind\":\"cron\",\"expr\":\"61 * * * *\"}}",
            1, "schedule.expr");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"schedule\":{\"kind\":\"cron\",\"expr\":\"* * * * *\","
            "\"time_zone\":\"Nowhere/City\"}}", 1, "schedule.time_zone");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"schedule\":{\"kind\":\"fixed_rate\"}}", 1,
            "schedule.interval_ms");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"schedule\":{\"kind\":\"once\",\"at\":\"tomorrow\"}}",
            1, "schedule.at");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"schedule\":{\"kind\":\"once\"}}", 1,
            "schedule.at");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"schedule\":{\"kind\":\"weekly\"}}", 1,
            "schedule.kind");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"schedule\":{\"kind\":\"none\",\"zone\":1}}", 1,
            "schedule.zone");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"retry\":{\"multiplier\":0.5}}", 1,
            "retry.multiplier");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"retry\":{\"rules\":[{\"class\":\"nope\"}]}}", 1,
            "retry.rules");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"circuit\":{\"threshold\":-1}}", 1,
            "circuit.threshold");
    refused("{\"name\":\"a\",\"command\":[\"x\"],\"group\":\"p1\"}", 1, "group");
    refused("{\"name\":\"a\",\"command\":[\"ftp://x\"],\"handler\":\"http\"}", 1, "command");
    refused("{\"name\":\"a\",\"command\":[\"rel.so\"],\"handler\":\"plugin\"}", 1, "command");
    refused("{\"name\":\"a\"}", 0, "name");
    refused("{\"enabled\":true}", 0, "enabled");
}

static void test_update(void **state) {
    (void)state;
    ax_job_spec_buf_t b;
    const char *f = NULL;
    assert_int_equal(parse("{\"priority\":4,\"backlog_max\":null,\"routing_key\":\"\"}", 0, &b, &f), 0);
    assert_true(b.spec.has_priority && b.spec.priority == 4);
    assert_true(b.spec.has_backlog_max && b.spec.backlog_max < 0); /* null clears */
    assert_true(b.spec.has_routing_key && !b.spec.routing_key);    /* "" clears */
    assert_int_equal(b.spec.set_schedule, 0);
    assert_int_equal(b.spec.ncommand, 0);
    ax_job_spec_buf_clear(&b);
}

int main(void) {
    ax_tz_set_loader(ax_tzfile_load);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_update),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    json_decref(doc);
    return rc;
}
