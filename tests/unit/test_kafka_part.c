/*
 * test_kafka_part.c — the producers' partitioner (libax/src/adapters/kafka.c)
 * against librdkafka's mock cluster: a delivery's part_hint puts its record
 * on partition (hint - 1) mod the topic's count, chunks of
 * produce.partition.chunk records in turn (ax_kafka_chunk_hint); hint 0
 * keeps the key's partition (murmur2, as before); with kafka.partitioner
 * set the hints are ignored. And what tells a dispatch window's partition
 * primer from a record (ax_kafka_is_primer).
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

#define NPARTS 8
#define NREC 300

typedef struct rec {
    ax_delivery_t d; /* first: on_message casts back */
    int32_t partition;
} rec_t;

static void on_message(ax_delivery_t *d, const rd_kafka_message_t *m) {
    ((rec_t *)d)->partition = m->partition;
}

/* Produce NREC records keyed "k<i>" with hints from chunk (0: none) through
 * a producer of conf with `extra` (a kafka.* key=value, or NULL) and note
 * each record's partition. */
static void produce_all(rec_t *recs, int64_t chunk, const char *extra_key,
                        const char *extra_val) {
    ax_conf_t conf;
    char err[512];
    ax_conf_init(&conf);
    assert_int_equal(ax_conf_set(&conf, "kafka.test.mock.num.brokers", "1", "t", err, sizeof err),
                     0);
    assert_int_equal(ax_conf_set(&conf, "kafka.log_level", "0", "t", err, sizeof err), 0);
    if (extra_key)
        assert_int_equal(ax_conf_set(&conf, extra_key, extra_val, "t", err, sizeof err), 0);
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "test", err, sizeof err);
    if (!rk)
        fail_msg("producer: %s", err);
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(rk);
    assert_non_null(mc);
    assert_int_equal(rd_kafka_mock_topic_create(mc, "t", NPARTS, 1), 0);
    for (int i = 0; i < NREC; i++) {
        char key[16];
        int klen = snprintf(key, sizeof key, "k%d", i);
        recs[i] = (rec_t){.d.on_message = on_message, .partition = -1};
        recs[i].d.part_hint = ax_kafka_chunk_hint(i, chunk);
        assert_int_equal(ax_kafka_produce(rk, "t", key, (size_t)klen, "v", 1, NULL, &recs[i].d,
                                          err, sizeof err),
                         0);
    }
    assert_int_equal(rd_kafka_flush(rk, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_poll(rk, 0);
    for (int i = 0; i < NREC; i++) {
        assert_int_equal(recs[i].d.pending, 0);
        assert_int_equal(recs[i].d.failed, 0);
    }
    rd_kafka_destroy(rk);
    ax_conf_free(&conf);
}

static int32_t key_partition(int i) {
    char key[16];
    int klen = snprintf(key, sizeof key, "k%d", i);
    return rd_kafka_msg_partitioner_murmur2(NULL, key, (size_t)klen, NPARTS, NULL, NULL);
}

static void test_chunk_hint(void **state) {
    assert_int_equal(ax_kafka_chunk_hint(0, 0), 0);
    assert_int_equal(ax_kafka_chunk_hint(12345, 0), 0);
    assert_int_equal(ax_kafka_chunk_hint(0, 100), 1);
    assert_int_equal(ax_kafka_chunk_hint(99, 100), 1);
    assert_int_equal(ax_kafka_chunk_hint(100, 100), 2);
    assert_int_equal(ax_kafka_chunk_hint(250, 100), 3);
    assert_int_equal(ax_kafka_chunk_hint(7, 1), 8);
}

/* A partition primer (dispatch.prime) is a record keyed ax-primer with no
 * value; anything else, an error report or a value, is not one. */
static void test_is_primer(void **state) {
    char key[] = AX_KAFKA_PRIMER_KEY, other[] = "ax-primes", val[] = "x";
    rd_kafka_message_t m = {.key = key, .key_len = sizeof key - 1};
    assert_int_equal(ax_kafka_is_primer(&m), 1);
    m.payload = val, m.len = 1; /* a value */
    assert_int_equal(ax_kafka_is_primer(&m), 0);
    m.payload = NULL, m.len = 0, m.err = RD_KAFKA_RESP_ERR__PARTITION_EOF;
    assert_int_equal(ax_kafka_is_primer(&m), 0);
    m.err = 0, m.key = other; /* another key, one letter apart */
    assert_int_equal(ax_kafka_is_primer(&m), 0);
    m.key = key, m.key_len = 2; /* a prefix of it */
    assert_int_equal(ax_kafka_is_primer(&m), 0);
    m.key = NULL, m.key_len = 0; /* no key */
    assert_int_equal(ax_kafka_is_primer(&m), 0);
    assert_int_equal(ax_kafka_is_primer(NULL), 0);
}

static void test_chunks_in_turn(void **state) {
    static rec_t recs[NREC];
    produce_all(recs, 100, NULL, NULL);
    for (int i = 0; i < NREC; i++)
        assert_int_equal(recs[i].partition, i / 100);
    produce_all(recs, 1, NULL, NULL); /* one per partition in turn, wrapping */
    for (int i = 0; i < NREC; i++)
        assert_int_equal(recs[i].partition, i % NPARTS);
}

static void test_no_hint_is_by_key(void **state) {
    static rec_t recs[NREC];
    produce_all(recs, 0, NULL, NULL);
    int seen[NPARTS] = {0};
    for (int i = 0; i < NREC; i++) {
        assert_int_equal(recs[i].partition, key_partition(i));
        seen[recs[i].partition] = 1;
    }
    for (int p = 0; p < NPARTS; p++)
        assert_int_equal(seen[p], 1); /* keys spread over all of them */
}

static void test_configured_partitioner_wins(void **state) {
    static rec_t recs[NREC];
    produce_all(recs, 100, "kafka.partitioner", "murmur2");
    for (int i = 0; i < NREC; i++)
        assert_int_equal(recs[i].partition, key_partition(i));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunk_hint),
        cmocka_unit_test(test_is_primer),
        cmocka_unit_test(test_chunks_in_turn),
        cmocka_unit_test(test_no_hint_is_by_key),
        cmocka_unit_test(test_configured_partitioner_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
