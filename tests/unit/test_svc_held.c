/*
 * test_svc_held.c — a service's held batch loses the records of partitions
 * no longer assigned to its consumer (ax_svc_drop_unassigned,
 * libax/src/adapters/service.c), against librdkafka's mock cluster: records
 * of two partitions held, one partition taken away, then both; the records
 * kept are the assigned partition's, in their order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "ax/common.h"
#include "ax/conf.h"
#include "ax/kafka.h"
#include "ax/service.h"

#define PER_PART 10

static rd_kafka_topic_partition_list_t *parts(int n) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
    for (int p = 0; p < n; p++)
        rd_kafka_topic_partition_list_add(l, "t.submit", p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    return l;
}

static void test_drop_unassigned(void **state) {
    (void)state;
    char err[512];
    ax_conf_t conf;
    ax_conf_init(&conf);
    assert_int_equal(ax_conf_set(&conf, "kafka.test.mock.num.brokers", "1", "t", err, sizeof err),
                     0);
    assert_int_equal(ax_conf_set(&conf, "kafka.log_level", "0", "t", err, sizeof err), 0);
    rd_kafka_t *p = ax_kafka_producer_new(&conf, "test", err, sizeof err);
    if (!p)
        fail_msg("producer: %s", err);
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(p);
    assert_non_null(mc);
    assert_int_equal(rd_kafka_mock_topic_create(mc, "t.submit", 2, 1), 0);
    for (int part = 0; part < 2; part++)
        for (int i = 0; i < PER_PART; i++)
            assert_int_equal(rd_kafka_producev(p, RD_KAFKA_V_TOPIC("t.submit"),
                                               RD_KAFKA_V_PARTITION(part),
                                               RD_KAFKA_V_VALUE("v", 1), RD_KAFKA_V_END),
                             RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(rd_kafka_flush(p, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);

    rd_kafka_conf_t *kc = rd_kafka_conf_new();
    assert_int_equal(rd_kafka_conf_set(kc, "bootstrap.servers", rd_kafka_mock_cluster_bootstraps(mc),
                                       err, sizeof err),
                     RD_KAFKA_CONF_OK);
    rd_kafka_conf_set(kc, "group.id", "test", err, sizeof err);
    rd_kafka_conf_set(kc, "log_level", "0", err, sizeof err);
    rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof err);
    assert_non_null(c);
    rd_kafka_poll_set_consumer(c);
    rd_kafka_topic_partition_list_t *both = parts(2), *first = parts(1);
    assert_int_equal(rd_kafka_assign(c, both), RD_KAFKA_RESP_ERR_NO_ERROR);

    /* what a service holds: both partitions' records, in the order taken */
    rd_kafka_message_t *held[2 * PER_PART] = {0};
    size_t n = 0;
    for (int tries = 0; tries < 100 && n < 2 * PER_PART; tries++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 200);
        if (!m)
            continue;
        if (m->err) {
            rd_kafka_message_destroy(m);
            continue;
        }
        held[n++] = m;
    }
    assert_int_equal(n, 2 * PER_PART);
    ax_svc_t svc = {.consumer = c, .held = held, .held_n = n, .held_cap = n};

    /* all still assigned: nothing dropped */
    assert_int_equal(ax_svc_drop_unassigned(&svc), 0);
    assert_int_equal(svc.held_n, 2 * PER_PART);

    /* partition 1 taken away: its records go, partition 0's stay in order */
    assert_int_equal(rd_kafka_assign(c, first), RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(ax_svc_drop_unassigned(&svc), PER_PART);
    assert_int_equal(svc.held_n, PER_PART);
    for (size_t i = 0; i < svc.held_n; i++) {
        assert_int_equal(held[i]->partition, 0);
        assert_int_equal(held[i]->offset, (int64_t)i);
    }
    for (size_t i = svc.held_n; i < 2 * PER_PART; i++)
        assert_null(held[i]);

    /* nothing assigned: the rest goes */
    assert_int_equal(rd_kafka_assign(c, NULL), RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(ax_svc_drop_unassigned(&svc), PER_PART);
    assert_int_equal(svc.held_n, 0);
    assert_int_equal(ax_svc_drop_unassigned(&svc), 0);

    rd_kafka_topic_partition_list_destroy(both);
    rd_kafka_topic_partition_list_destroy(first);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    rd_kafka_destroy(p);
    ax_conf_free(&conf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drop_unassigned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
