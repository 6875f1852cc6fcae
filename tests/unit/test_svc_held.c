/*
 * test_svc_held.c — a service's held batch loses the records of partitions
 * its consumer's group took away while they waited (ax_svc_drop_unassigned,
 * libax/src/adapters/service.c), against librdkafka's mock cluster: a
 * consumer made as the services make theirs (ax_kafka_batch_consumer_new:
 * cooperative-sticky, ax's rebalance callback) takes every record of a
 * two-partition topic; a second member joins the group and one partition
 * moves to it. The first consumer's held records of that partition are
 * dropped, the other partition's kept in their order; without a revocation
 * nothing is dropped.
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
#define TOPIC "t.submit"

static void set(ax_conf_t *c, const char *k, const char *v) {
    char err[512];
    if (ax_conf_set(c, k, v, "t", err, sizeof err) < 0)
        fail_msg("%s: %s", k, err);
}

static rd_kafka_t *member(const ax_conf_t *conf, const char *id) {
    char err[512];
    rd_kafka_t *c = ax_kafka_batch_consumer_new(conf, "g", id, NULL, err, sizeof err);
    if (!c)
        fail_msg("consumer: %s", err);
    const char *topics[] = {TOPIC};
    assert_int_equal(ax_kafka_subscribe(c, topics, 1, err, sizeof err), 0);
    return c;
}

static int assigned_count(rd_kafka_t *c) {
    rd_kafka_topic_partition_list_t *a = NULL;
    assert_int_equal(rd_kafka_assignment(c, &a), RD_KAFKA_RESP_ERR_NO_ERROR);
    int n = a->cnt;
    rd_kafka_topic_partition_list_destroy(a);
    return n;
}

/* One poll of c; a record is kept in held (when given) or destroyed. */
static void poll_one(rd_kafka_t *c, rd_kafka_message_t **held, size_t *n, size_t cap) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (!m)
        return;
    if (!m->err && held && *n < cap)
        held[(*n)++] = m;
    else
        rd_kafka_message_destroy(m);
}

static void test_drop_revoked(void **state) {
    (void)state;
    char err[512];
    ax_conf_t mock, conf;
    ax_conf_init(&mock);
    ax_conf_init(&conf);
    set(&mock, "kafka.test.mock.num.brokers", "1");
    set(&mock, "kafka.log_level", "0");
    rd_kafka_t *p = ax_kafka_producer_new(&mock, "test", err, sizeof err);
    if (!p)
        fail_msg("producer: %s", err);
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(p);
    assert_non_null(mc);
    assert_int_equal(rd_kafka_mock_topic_create(mc, TOPIC, 2, 1), 0);
    for (int part = 0; part < 2; part++)
        for (int i = 0; i < PER_PART; i++)
            assert_int_equal(rd_kafka_producev(p, RD_KAFKA_V_TOPIC(TOPIC),
                                               RD_KAFKA_V_PARTITION(part),
                                               RD_KAFKA_V_VALUE("v", 1), RD_KAFKA_V_END),
                             RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(rd_kafka_flush(p, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    set(&conf, "kafka.bootstrap.servers", rd_kafka_mock_cluster_bootstraps(mc));
    set(&conf, "kafka.log_level", "0");
    /* the mock's group waits up to a session for every member to rejoin */
    set(&conf, "kafka.session.timeout.ms", "6000");
    set(&conf, "kafka.heartbeat.interval.ms", "100");

    /* the first member alone: both partitions, every record held */
    rd_kafka_t *a = member(&conf, "a");
    rd_kafka_message_t *held[2 * PER_PART] = {0};
    size_t n = 0;
    for (int tries = 0; tries < 300 && n < 2 * PER_PART; tries++)
        poll_one(a, held, &n, 2 * PER_PART);
    assert_int_equal(n, 2 * PER_PART);
    assert_int_equal(assigned_count(a), 2);
    ax_svc_t svc = {.consumer = a, .held = held, .held_n = n, .held_cap = n};
    /* both partitions still assigned: nothing dropped */
    assert_int_equal(ax_svc_drop_unassigned(&svc), 0);
    assert_int_equal(svc.held_n, 2 * PER_PART);

    /* a second member joins: one partition moves to it (cooperative: a's
     * callback revokes it during a's polls, then b is given it) */
    unsigned long before = ax_kafka_rebalances();
    rd_kafka_t *b = member(&conf, "b");
    for (int tries = 0; tries < 600 && assigned_count(b) == 0; tries++) {
        poll_one(a, NULL, NULL, 0);
        poll_one(b, NULL, NULL, 0);
    }
    assert_int_equal(assigned_count(b), 1);
    assert_int_equal(assigned_count(a), 1);
    assert_true(ax_kafka_rebalances() > before);
    rd_kafka_topic_partition_list_t *kept = NULL;
    assert_int_equal(rd_kafka_assignment(a, &kept), RD_KAFKA_RESP_ERR_NO_ERROR);
    int32_t keep = kept->elems[0].partition;
    rd_kafka_topic_partition_list_destroy(kept);

    /* a's held records of the moved partition go; the rest stay in order */
    assert_int_equal(ax_svc_drop_unassigned(&svc), PER_PART);
    assert_int_equal(svc.held_n, PER_PART);
    for (size_t i = 0; i < svc.held_n; i++) {
        assert_int_equal(held[i]->partition, keep);
        assert_int_equal(held[i]->offset, (int64_t)i);
    }
    for (size_t i = svc.held_n; i < 2 * PER_PART; i++)
        assert_null(held[i]);
    /* the rest is assigned */
    assert_int_equal(ax_svc_drop_unassigned(&svc), 0);
    assert_int_equal(svc.held_n, PER_PART);

    for (size_t i = 0; i < svc.held_n; i++)
        rd_kafka_message_destroy(held[i]);
    rd_kafka_consumer_close(b);
    rd_kafka_destroy(b);
    /* the copy of the assignment outlives the consumer, as a service's
     * does (ax_svc_destroy): it must hold no reference that
     * rd_kafka_destroy() would wait for */
    rd_kafka_consumer_close(a);
    rd_kafka_destroy(a);
    rd_kafka_topic_partition_list_destroy(svc.assigned);
    rd_kafka_destroy(p);
    ax_conf_free(&mock);
    ax_conf_free(&conf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drop_revoked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
