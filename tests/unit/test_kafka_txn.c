/*
 * test_kafka_txn.c — the Kafka adapter's size limits and transaction ending
 * (libax/src/adapters/kafka.c) against librdkafka's mock cluster (fault
 * injection, no broker): every handle carries message.max.bytes + 64 KiB; a
 * produce that fails inside a transaction is ended with
 * ax_kafka_txn_end_abort so the next begin works (left open, every later
 * begin fails "in state InTransaction": issue #11, defect 1); a commit the
 * broker refuses is aborted by ax_kafka_txn_commit, never left open; and
 * every client (producer, transactional producer, reader) sends without
 * Nagle's delay unless kafka.socket.nagle.disable says otherwise.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "ax/common.h"
#include "ax/conf.h"
#include "ax/kafka.h"

#define API_PRODUCE 0

static ax_conf_t conf;
static rd_kafka_t *rk;

static int setup(void **state) {
    char err[512];
    ax_conf_init(&conf);
    assert_int_equal(ax_conf_set(&conf, "message.max.bytes", "1000", "test", err, sizeof err), 0);
    assert_int_equal(ax_conf_set(&conf, "kafka.test.mock.num.brokers", "1", "test", err,
                                 sizeof err), 0);
    assert_int_equal(ax_conf_set(&conf, "kafka.log_level", "0", "test", err, sizeof err), 0);
    rk = ax_kafka_txn_producer_new(&conf, "test", "test-txn", 5, 10000, err, sizeof err);
    if (!rk)
        fail_msg("txn producer: %s", err);
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(rk);
    assert_non_null(mc);
    assert_int_equal(rd_kafka_mock_topic_create(mc, "t", 1, 1), 0);
    return 0;
}

static int teardown(void **state) {
    rd_kafka_destroy(rk);
    ax_conf_free(&conf);
    return 0;
}

static void test_handle_limits(void **state) {
    char v[64];
    size_t n = sizeof v;
    assert_int_equal(ax_kafka_record_max(&conf), 1000 + AX_KAFKA_HEADROOM);
    assert_int_equal(rd_kafka_conf_get(rd_kafka_conf(rk), "message.max.bytes", v, &n),
                     RD_KAFKA_CONF_OK);
    assert_string_equal(v, "66536");
    n = sizeof v;
    assert_int_equal(rd_kafka_conf_get(rd_kafka_conf(rk), "batch.size", v, &n), RD_KAFKA_CONF_OK);
    assert_string_equal(v, "66536");
}

/* A handle's socket.nagle.disable, as librdkafka holds it. */
static void assert_nagle(rd_kafka_t *h, const char *want) {
    char v[64];
    size_t n = sizeof v;
    assert_int_equal(rd_kafka_conf_get(rd_kafka_conf(h), "socket.nagle.disable", v, &n),
                     RD_KAFKA_CONF_OK);
    assert_string_equal(v, want);
}

/* Every client sends without Nagle's delay unless kafka.* says otherwise:
 * the transactional producer of setup(), a plain producer told otherwise,
 * a reader by default. */
static void test_nagle_off_by_default(void **state) {
    char err[512];
    assert_nagle(rk, "true");
    for (int reader = 0; reader < 2; reader++) {
        ax_conf_t c;
        ax_conf_init(&c);
        assert_int_equal(
            ax_conf_set(&c, "kafka.test.mock.num.brokers", "1", "test", err, sizeof err), 0);
        if (!reader)
            assert_int_equal(ax_conf_set(&c, "kafka.socket.nagle.disable", "false", "test", err,
                                         sizeof err), 0);
        rd_kafka_t *h = reader ? ax_kafka_reader_new(&c, "test-nagle-reader", err, sizeof err)
                               : ax_kafka_producer_new(&c, "test-nagle", err, sizeof err);
        if (!h)
            fail_msg("client: %s", err);
        assert_nagle(h, reader ? "true" : "false");
        rd_kafka_destroy(h);
        ax_conf_free(&c);
    }
}

static void test_failed_produce_is_aborted(void **state) {
    char err[512];
    static char big[70000];
    assert_int_equal(ax_kafka_txn_begin(rk, err, sizeof err), 0);
    assert_int_equal(ax_kafka_produce(rk, "t", "k", 1, "small", 5, NULL, NULL, err, sizeof err), 0);
    /* over the record maximum: refused at once */
    assert_true(ax_kafka_produce(rk, "t", "k", 1, big, sizeof big, NULL, NULL, err, sizeof err) <
                0);
    assert_non_null(strstr(err, "too large"));
    /* left open, the next begin fails: the defect */
    assert_int_equal(ax_kafka_txn_begin(rk, err, sizeof err), AX_ERR_IO);
    assert_non_null(strstr(err, "InTransaction"));
    /* ended, it works again */
    assert_int_equal(ax_kafka_txn_end_abort(rk, 10000, err, sizeof err), 0);
    assert_int_equal(ax_kafka_txn_begin(rk, err, sizeof err), 0);
    assert_int_equal(ax_kafka_produce(rk, "t", "k", 1, "small", 5, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(ax_kafka_txn_commit(rk, 10000, err, sizeof err), 0);
}

static void test_nothing_open_abort_is_ok(void **state) {
    char err[512];
    assert_int_equal(ax_kafka_txn_end_abort(rk, 10000, err, sizeof err), 0);
}

static void test_refused_commit_is_aborted(void **state) {
    char err[512];
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(rk);
    assert_int_equal(ax_kafka_txn_begin(rk, err, sizeof err), 0);
    /* the broker refuses the record (as a topic with a smaller
     * max.message.bytes would) */
    rd_kafka_mock_push_request_errors(mc, API_PRODUCE, 1, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
    ax_delivery_t d = {0};
    assert_int_equal(ax_kafka_produce(rk, "t", "k", 1, "value", 5, NULL, &d, err, sizeof err), 0);
    int rc = ax_kafka_txn_commit(rk, 10000, err, sizeof err);
    assert_int_equal(rc, AX_ERR_IO);
    assert_non_null(strstr(err, "(aborted)"));
    /* not left open */
    assert_int_equal(ax_kafka_txn_begin(rk, err, sizeof err), 0);
    assert_int_equal(ax_kafka_txn_commit(rk, 10000, err, sizeof err), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handle_limits),
        cmocka_unit_test(test_nagle_off_by_default),
        cmocka_unit_test(test_failed_produce_is_aborted),
        cmocka_unit_test(test_nothing_open_abort_is_ok),
        cmocka_unit_test(test_refused_commit_is_aborted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
