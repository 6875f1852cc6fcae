/*
 * test_store_outcome.c — the parameters of the finish statement
 * (libax/src/store/outcome.c) made from typed results: one array element
 * per result in each of the ten arrays, NULL elements for an exit code not
 * set, an unknown start and a final result (no retry delay), text quoted;
 * the batch in instance id order, a repeated result left out, and the
 * update's id range ($12, $13);
 * and the per-job statistics read back from its rows, with and without a
 * mean run time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "store/outcome_params.h"

static void finish_params(void **state) {
    (void)state;
    const ax_outcome_in_t in[] = {
        {.instance_id = 7, .attempt = 2, .outcome = AX_OUTCOME_FAILED, .exit_code_set = 1,
         .exit_code = 3, .error_class = "exit", .error = "said \"no\"", .output = "a,b",
         .worker = "h:1", .started_ms = 1767225600000, .retry_ms = 500},
        {.instance_id = 8, .attempt = 1, .outcome = AX_OUTCOME_SUCCESS, .output = "",
         .worker = "ax-trigger", .started_ms = 0, .retry_ms = -1},
    };
    ax_strbuf_t a[AX__FIN_ARGS];
    int64_t lo = -1, hi = -1;
    assert_int_equal(ax__outcome_finish_params(a, in, 2, &lo, &hi), 0);
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 8);
    static const char *const want[AX__FIN_ARGS] = {
        "{7,8}", "{2,1}", "{\"FAILED\",\"SUCCESS\"}", "{3,NULL}", "{\"exit\",NULL}",
        "{\"said \\\"no\\\"\",NULL}", "{\"a,b\",\"\"}", "{\"h:1\",\"ax-trigger\"}",
        "{1767225600000,NULL}", "{500,NULL}",
    };
    for (int k = 0; k < AX__FIN_ARGS; k++) {
        if (strcmp(a[k].s, want[k]) != 0)
            fail_msg("$%d is %s, not %s", k + 1, a[k].s, want[k]);
        ax_strbuf_free(&a[k]);
    }
    /* an empty batch: ten empty arrays */
    assert_int_equal(ax__outcome_finish_params(a, NULL, 0, &lo, &hi), 0);
    for (int k = 0; k < AX__FIN_ARGS; k++) {
        assert_string_equal(a[k].s, "{}");
        ax_strbuf_free(&a[k]);
    }
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 0);
}

/* The batch in instance id order, whatever its order (results come in
 * consumption order): the update visits the rows in the order of the
 * arrays, and every column moves with its row. A second result of the same
 * instance and attempt is left out (the first consumed takes effect, as in
 * a batch of its own); another attempt of the same instance stays. The
 * update's id range: the least and greatest instance. */
static void finish_order_and_bounds(void **state) {
    (void)state;
    const ax_outcome_in_t in[] = {
        {.instance_id = 40, .attempt = 1, .outcome = AX_OUTCOME_SUCCESS, .worker = "w40",
         .started_ms = 4000, .retry_ms = -1},
        {.instance_id = 7, .attempt = 2, .outcome = AX_OUTCOME_FAILED, .exit_code_set = 1,
         .exit_code = 3, .error_class = "exit", .error = "e7", .output = "o7", .worker = "w7",
         .started_ms = 700, .retry_ms = 500},
        {.instance_id = 95, .attempt = 3, .outcome = AX_OUTCOME_TIMEOUT, .worker = "w95",
         .retry_ms = -1},
        {.instance_id = 7, .attempt = 2, .outcome = AX_OUTCOME_TIMEOUT, .error_class = "lease_lost",
         .worker = "w7b", .retry_ms = 900},
        {.instance_id = 12, .attempt = 5, .outcome = AX_OUTCOME_SUCCESS, .exit_code_set = 1,
         .exit_code = 0, .worker = "w12", .started_ms = 1200, .retry_ms = -1},
        {.instance_id = 7, .attempt = 3, .outcome = AX_OUTCOME_SUCCESS, .worker = "w7c",
         .retry_ms = -1},
    };
    ax_strbuf_t a[AX__FIN_ARGS];
    int64_t lo = -1, hi = -1;
    assert_int_equal(ax__outcome_finish_params(a, in, 6, &lo, &hi), 0);
    static const char *const want[AX__FIN_ARGS] = {
        "{7,7,12,40,95}",
        "{2,3,5,1,3}",
        "{\"FAILED\",\"SUCCESS\",\"SUCCESS\",\"SUCCESS\",\"TIMEOUT\"}",
        "{3,NULL,0,NULL,NULL}",
        "{\"exit\",NULL,NULL,NULL,NULL}",
        "{\"e7\",NULL,NULL,NULL,NULL}",
        "{\"o7\",NULL,NULL,NULL,NULL}",
        "{\"w7\",\"w7c\",\"w12\",\"w40\",\"w95\"}",
        "{700,NULL,1200,4000,NULL}",
        "{500,NULL,NULL,NULL,NULL}",
    };
    for (int k = 0; k < AX__FIN_ARGS; k++) {
        if (strcmp(a[k].s, want[k]) != 0)
            fail_msg("$%d is %s, not %s", k + 1, a[k].s, want[k]);
        ax_strbuf_free(&a[k]);
    }
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 95);
    /* one result: both bounds its own */
    assert_int_equal(ax__outcome_finish_params(a, in + 2, 1, &lo, &hi), 0);
    assert_string_equal(a[0].s, "{95}");
    assert_int_equal(lo, 95);
    assert_int_equal(hi, 95);
    for (int k = 0; k < AX__FIN_ARGS; k++)
        ax_strbuf_free(&a[k]);
    /* the first is the greatest */
    assert_int_equal(ax__outcome_finish_params(a, in, 2, &lo, &hi), 0);
    assert_string_equal(a[0].s, "{7,40}");
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 40);
    for (int k = 0; k < AX__FIN_ARGS; k++)
        ax_strbuf_free(&a[k]);
}

static void jobstat(void **state) {
    (void)state;
    ax_outcome_jobstat_t j = {.job_id = 5};
    ax__outcome_parse_jobstat("2,3,1,2,1234.5000000000000000", &j);
    assert_int_equal(j.job_id, 5);
    assert_int_equal(j.slots, 2);
    assert_int_equal(j.n, 3);
    assert_int_equal(j.ok, 1);
    assert_int_equal(j.bad, 2);
    assert_true(j.has_mean);
    assert_true(j.mean_ms == 1234.5);
    /* nothing ran (a backlog cut): no mean */
    ax__outcome_parse_jobstat("0,0,0,0", &j);
    assert_int_equal(j.n, 0);
    assert_false(j.has_mean);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(finish_params),
        cmocka_unit_test(finish_order_and_bounds),
        cmocka_unit_test(jobstat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
