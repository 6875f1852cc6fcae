/*
 * test_store_strlist.c — the store's splitting of joined text lists
 * (store/strlist.c: a flow stage's upstreams, an executor's groups): no
 * element for "" or NULL, empty elements kept, every element its own copy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/strlist.h"

static void empty(void **state) {
    (void)state;
    char **l = (char **)1;
    size_t n = 7;
    assert_int_equal(ax__strlist_split(NULL, ',', &l, &n), 0);
    assert_null(l);
    assert_int_equal(n, 0);
    assert_int_equal(ax__strlist_split("", ',', &l, &n), 0);
    assert_null(l);
    assert_int_equal(n, 0);
    ax__strlist_free(NULL, 0);
}

static void elements(void **state) {
    (void)state;
    char **l;
    size_t n;
    assert_int_equal(ax__strlist_split("A", ',', &l, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(l[0], "A");
    ax__strlist_free(l, n);
    char s[] = "extract,load_2,x-y";
    assert_int_equal(ax__strlist_split(s, ',', &l, &n), 0);
    s[0] = 'E'; /* copies, not pointers into s */
    assert_int_equal(n, 3);
    assert_string_equal(l[0], "extract");
    assert_string_equal(l[1], "load_2");
    assert_string_equal(l[2], "x-y");
    ax__strlist_free(l, n);
}

static void empty_elements(void **state) {
    (void)state;
    char **l;
    size_t n;
    assert_int_equal(ax__strlist_split(",a,", ',', &l, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(l[0], "");
    assert_string_equal(l[1], "a");
    assert_string_equal(l[2], "");
    ax__strlist_free(l, n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(empty),
        cmocka_unit_test(elements),
        cmocka_unit_test(empty_elements),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
