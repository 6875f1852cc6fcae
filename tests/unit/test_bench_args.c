/*
 * test_bench_args.c — the benchmark programs' numeric arguments
 * (tests/bench/bench_common.h: bench_int_arg, bench_num_arg): the whole
 * text must be a number within the bounds, or the program exits 2 naming
 * the option (atoi() had taken "abc" for 0, and bench_exec --timeline abc
 * ran without its timeline).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../bench/bench_common.h"

static void ints_within_bounds(void **state) {
    (void)state;
    long long v = -7;
    assert_true(bench_int_arg("t", "--x", "1", 1, 10, &v));
    assert_int_equal(v, 1);
    assert_true(bench_int_arg("t", "--x", "10", 1, 10, &v));
    assert_int_equal(v, 10);
    assert_true(bench_int_arg("t", "--x", "-3", -5, 5, &v));
    assert_int_equal(v, -3);
    assert_true(bench_int_arg("t", "--x", "0", 0, 65535, &v));
    assert_int_equal(v, 0);
}

static void ints_refused(void **state) {
    (void)state;
    const char *bad[] = {"abc", "", "1x", " ", "0x10", "1.5", "11", "0", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long long v = 42;
        assert_false(bench_int_arg("t", "--x", bad[i], 1, 10, &v));
        assert_int_equal(v, 42); /* untouched */
    }
    long long v = 42;
    assert_false(bench_int_arg("t", "--x", NULL, 1, 10, &v));
    assert_int_equal(v, 42);
}

static void numbers(void **state) {
    (void)state;
    double d = -1;
    assert_true(bench_num_arg("t", "RATE", "1000", 0, 1e9, &d));
    assert_true(d == 1000.0);
    assert_true(bench_num_arg("t", "RATE", "2.5", 0, 1e9, &d));
    assert_true(d == 2.5);
    assert_true(bench_num_arg("t", "RATE", "0", 0, 1e9, &d));
    assert_true(d == 0.0);
    const char *bad[] = {"fast", "", "1e", "-1", "nan", "2e9", "3 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = 7;
        assert_false(bench_num_arg("t", "RATE", bad[i], 0, 1e9, &d));
        assert_true(d == 7.0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ints_within_bounds),
        cmocka_unit_test(ints_refused),
        cmocka_unit_test(numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
