/*
 * test_store_kafka_pos.c — the ingest's parse of a submit key that is a
 * Kafka position (store/dispatch.c, ax__kafka_pos): the keys the regular
 * expression ^kafka:[^:]+:[0-9]{1,9}:[0-9]{1,18}$ matched (which the
 * ingest statement evaluated per row before) and none it did not, at the
 * digit-count limits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/dispatch_int.h"

static int pos(const char *k, char *topic, int32_t *part, int64_t *off) {
    const char *t = NULL;
    size_t tl = 0;
    int r = ax__kafka_pos(k, &t, &tl, part, off);
    if (r) {
        memcpy(topic, t, tl);
        topic[tl] = 0;
    }
    return r;
}

static void positions(void **state) {
    (void)state;
    char t[64];
    int32_t p = -1;
    int64_t o = -1;
    assert_int_equal(pos("kafka:ax.submit:3:12345", t, &p, &o), 1);
    assert_string_equal(t, "ax.submit");
    assert_int_equal(p, 3);
    assert_int_equal(o, 12345);
    assert_int_equal(pos("kafka:t:0:0", t, &p, &o), 1);
    assert_string_equal(t, "t");
    assert_int_equal(p, 0);
    assert_int_equal(o, 0);
    /* nine and eighteen digits, leading zeros */
    assert_int_equal(pos("kafka:a-b_c.d:999999999:999999999999999999", t, &p, &o), 1);
    assert_int_equal(p, 999999999);
    assert_int_equal(o, 999999999999999999LL);
    assert_int_equal(pos("kafka:x:007:0042", t, &p, &o), 1);
    assert_int_equal(p, 7);
    assert_int_equal(o, 42);
    /* a topic is any bytes but ':' */
    assert_int_equal(pos("kafka:k\xc3\xa4t z:1:2", t, &p, &o), 1);
    assert_string_equal(t, "k\xc3\xa4t z");
}

static void not_positions(void **state) {
    (void)state;
    char t[64];
    int32_t p = -1;
    int64_t o = -1;
    const char *bad[] = {
        "idem:kafka:t:1:2",  "kafka::1:2",       "kafka:t:1",       "kafka:t:1:",
        "kafka:t::2",        "kafka:t:1:2:3",    "kafka:t:a:2",     "kafka:t:1:2x",
        "kafka:t:-1:2",      "kafka:t:1:+2",     "kafka:t:1:2\n",   "kafka:t: 1:2",
        "kafka:t:1234567890:2", "kafka:t:1:1234567890123456789", "Kafka:t:1:2",
        "kafka",             "",                 "kafka:t:1:2 ",    "kafka:t",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        p = -1;
        o = -1;
        assert_int_equal(pos(bad[i], t, &p, &o), 0);
        assert_int_equal(p, -1); /* untouched */
        assert_int_equal(o, -1);
    }
    assert_int_equal(pos(NULL, t, &p, &o), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(positions),
        cmocka_unit_test(not_positions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
