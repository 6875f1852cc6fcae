/*
 * it_fence — integration-test helper: fence the producers of one
 * transactional.id, as a new leader's init_transactions would, without
 * taking any lease. Usage: it_fence CONF_FILE TRANSACTIONAL_ID, CONF_FILE
 * holding librdkafka properties key=value a line (the kc wrapper's file).
 * Exit 0 when init_transactions succeeded.
 */
#include "it_conf.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: it_fence CONF_FILE TRANSACTIONAL_ID\n");
        return 2;
    }
    char err[512];
    rd_kafka_conf_t *c = it_conf_load("it_fence", argv[1]);
    if (!c)
        return 2;
    if (rd_kafka_conf_set(c, "transactional.id", argv[2], err, sizeof err)) {
        fprintf(stderr, "it_fence: %s\n", err);
        return 2;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "it_fence: %s\n", err);
        return 1;
    }
    rd_kafka_error_t *e = rd_kafka_init_transactions(rk, 30000);
    int rc = 0;
    if (e) {
        fprintf(stderr, "it_fence: init_transactions: %s\n", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        rc = 1;
    }
    rd_kafka_destroy(rk);
    return rc;
}
