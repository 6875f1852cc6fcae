/*
 * test_store_outcome.c — the parameters of the finish statement
 * (libax/src/store/outcome.c) made from typed results: one array element
 * per result in each of the ten arrays, NULL elements for an exit code not
 * set, an unknown start and a final result (no retry delay), text quoted;
 * the batch in instance id order and the update's id range ($12, $13);
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
 * consumption order): the update locks the rows in the order of the
 * arrays, as every multi-row update of instance_state does, so two
 * batches never deadlock; equal ids (a result delivered twice) keep
 * their order. The update's id range: the least and greatest instance. */
static void finish_order_and_bounds(void **state) {
    (void)state;
    const ax_outcome_in_t in[] = {
        {.instance_id = 40, .attempt = 1}, {.instance_id = 7, .attempt = 2},
        {.instance_id = 95, .attempt = 3}, {.instance_id = 7, .attempt = 4},
        {.instance_id = 12, .attempt = 5},
    };
    ax_strbuf_t a[AX__FIN_ARGS];
    int64_t lo = -1, hi = -1;
    assert_int_equal(ax__outcome_finish_params(a, in, 5, &lo, &hi), 0);
    assert_string_equal(a[0].s, "{7,7,12,40,95}");
    assert_string_equal(a[1].s, "{2,4,5,1,3}");
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 95);
    for (int k = 0; k < AX__FIN_ARGS; k++)
        ax_strbuf_free(&a[k]);
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
