/*
 * test_dlq.c — a dead letter's round trip against librdkafka's mock cluster
 * (no broker): what ax_kafka_dlq writes (the reason, the source, the
 * service and, when the message decoded far enough, ax.instance.id, ax.job
 * and ax.trace.id) is what ax_dlq_list (libax/src/adapters/dlq.c, the
 * reader of axctl dlq list and GET /api/v1/dlq) reads back, newest first,
 * with the reason filter in any case; a header the producer did not know is
 * absent, read as "" / 0.
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
#include "ax/dlq.h"
#include "ax/kafka.h"

typedef struct fixture {
    ax_conf_t mock, conf; /* the producer's (it runs the mock cluster), the readers' */
    rd_kafka_t *p;
} fixture_t;

static void set(ax_conf_t *c, const char *k, const char *v) {
    char err[512];
    if (ax_conf_set(c, k, v, "test", err, sizeof err) != 0)
        fail_msg("%s: %s", k, err);
}

static int setup(void **state) {
    static fixture_t f;
    char err[512];
    memset(&f, 0, sizeof f);
    ax_conf_init(&f.mock);
    ax_conf_init(&f.conf);
    set(&f.mock, "kafka.test.mock.num.brokers", "1");
    set(&f.mock, "kafka.log_level", "0");
    f.p = ax_kafka_producer_new(&f.mock, "test", err, sizeof err);
    if (!f.p)
        fail_msg("producer: %s", err);
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(f.p);
    assert_non_null(mc);
    assert_int_equal(rd_kafka_mock_topic_create(mc, "t.submit", 1, 1), 0);
    assert_int_equal(rd_kafka_mock_topic_create(mc, "t.dlq", 1, 1), 0);
    set(&f.conf, "kafka.bootstrap.servers", rd_kafka_mock_cluster_bootstraps(mc));
    set(&f.conf, "kafka.log_level", "0");
    set(&f.conf, "topic.prefix", "t.");
    *state = &f;
    return 0;
}

static int teardown(void **state) {
    fixture_t *f = *state;
    rd_kafka_destroy(f->p);
    ax_conf_free(&f->mock);
    ax_conf_free(&f->conf);
    return 0;
}

/* A consumer of t.submit [0] from the beginning, as a service has one. */
static rd_kafka_t *consumer(const fixture_t *f) {
    char err[512];
    rd_kafka_conf_t *kc = rd_kafka_conf_new();
    const char *bs = NULL;
    for (size_t i = 0; i < f->conf.n_kafka; i++)
        if (strcmp(f->conf.kafka[i].key, "bootstrap.servers") == 0)
            bs = f->conf.kafka[i].value;
    assert_non_null(bs);
    rd_kafka_conf_set(kc, "bootstrap.servers", bs, err, sizeof err);
    rd_kafka_conf_set(kc, "group.id", "test", err, sizeof err);
    rd_kafka_conf_set(kc, "log_level", "0", err, sizeof err);
    rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof err);
    assert_non_null(c);
    rd_kafka_poll_set_consumer(c);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, "t.submit", 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(c, l);
    rd_kafka_topic_partition_list_destroy(l);
    return c;
}

/* The next record c hands over. */
static rd_kafka_message_t *next(rd_kafka_t *c) {
    rd_kafka_message_t *m = NULL;
    for (int i = 0; i < 50 && !m; i++) {
        m = rd_kafka_consumer_poll(c, 200);
        if (m && m->err) {
            rd_kafka_message_destroy(m);
            m = NULL;
        }
    }
    assert_non_null(m);
    return m;
}

static void test_headers_round_trip(void **state) {
    fixture_t *f = *state;
    char err[512];
    ax_delivery_t dv = {0};
    for (int i = 0; i < 2; i++)
        assert_int_equal(ax_kafka_produce(f->p, "t.submit", "k", 1, "not avro", 8, NULL, &dv, err,
                                          sizeof err), 0);
    assert_int_equal(ax_kafka_wait(f->p, &dv, 10000), 0);

    /* decoded: a submission for an unknown job, with its trace id */
    rd_kafka_t *c = consumer(f);
    rd_kafka_message_t *m0 = next(c);
    assert_int_equal(m0->offset, 0);
    ax_dlq_about_t about = {7, "nightly", "tr-1"};
    assert_int_equal(ax_kafka_dlq(f->p, "t.dlq", m0, "unknown job 'nightly'", "ax-trigger", &about,
                                  1000, &dv, err, sizeof err), 0);
    assert_int_equal(ax_kafka_wait(f->p, &dv, 10000), 0);
    /* undecodable: nothing known about it */
    rd_kafka_message_t *m1 = next(c);
    assert_int_equal(m1->offset, 1);
    assert_int_equal(ax_kafka_dlq(f->p, "t.dlq", m1, "magic byte 0x6e is not 0", "ax-trigger",
                                  NULL, 1000, &dv, err, sizeof err), 0);
    assert_int_equal(ax_kafka_wait(f->p, &dv, 10000), 0);
    rd_kafka_message_destroy(m0);
    rd_kafka_message_destroy(m1);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);

    int rc;
    ax_dlq_t *d = ax_dlq_open(&f->conf, &rc, err, sizeof err);
    if (!d)
        fail_msg("dlq open: %s", err);
    ax_dlq_rec_t *r;
    size_t n;
    rc = ax_dlq_list(d, 10, INT64_MIN, NULL, &r, &n, err, sizeof err);
    if (rc < 0)
        fail_msg("dlq list: %s", err);
    assert_int_equal(n, 2);
    /* newest first: the undecodable one, which names nothing */
    assert_int_equal(r[0].offset, 1);
    assert_string_equal(r[0].reason, "magic byte 0x6e is not 0");
    assert_string_equal(r[0].job, "");
    assert_string_equal(r[0].trace_id, "");
    assert_int_equal(r[0].instance_id, 0);
    assert_int_equal(r[1].offset, 0);
    assert_false(r[1].final_failure);
    assert_string_equal(r[1].source, "t.submit");
    assert_int_equal(r[1].source_partition, 0);
    assert_int_equal(r[1].source_offset, 0);
    assert_string_equal(r[1].service, "ax-trigger");
    assert_string_equal(r[1].job, "nightly");
    assert_string_equal(r[1].trace_id, "tr-1");
    assert_int_equal(r[1].instance_id, 7);
    free(r);

    rc = ax_dlq_list(d, 10, INT64_MIN, "UNKNOWN JOB", &r, &n, err, sizeof err);
    if (rc < 0)
        fail_msg("dlq list --reason: %s", err);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].job, "nightly");
    free(r);
    ax_dlq_close(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_headers_round_trip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
