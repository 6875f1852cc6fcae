/*
 * it_topic_config — integration-test helper: set one config of a topic
 * (e.g. a smaller max.message.bytes, as a topic made before a size change
 * has). Usage: it_topic_config CONF_FILE TOPIC KEY VALUE, CONF_FILE holding
 * librdkafka properties key=value a line (the kc wrapper's file: bootstrap
 * servers and credentials, never on a command line). Exit 0 when set.
 * The topic's other dynamic configs return to their defaults.
 */
#include "it_conf.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: it_topic_config CONF_FILE TOPIC KEY VALUE\n");
        return 2;
    }
    char err[512];
    rd_kafka_conf_t *c = it_conf_load("it_topic_config", argv[1]);
    if (!c)
        return 2;
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "it_topic_config: %s\n", err);
        return 1;
    }
    rd_kafka_ConfigResource_t *res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, argv[2]);
    /* AlterConfigs (this librdkafka has no incremental one): the topic's
     * other dynamic configs return to their defaults */
    rd_kafka_ConfigResource_set_config(res, argv[3], argv[4]);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AlterConfigs(rk, &res, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    int rc = 1;
    if (!ev) {
        fprintf(stderr, "it_topic_config: no answer\n");
    } else if (rd_kafka_event_error(ev)) {
        fprintf(stderr, "it_topic_config: %s\n", rd_kafka_event_error_string(ev));
    } else {
        const rd_kafka_AlterConfigs_result_t *r =
            rd_kafka_event_AlterConfigs_result(ev);
        size_t n = 0;
        const rd_kafka_ConfigResource_t **rs =
            r ? rd_kafka_AlterConfigs_result_resources(r, &n) : NULL;
        if (n == 1 && rd_kafka_ConfigResource_error(rs[0]) == 0)
            rc = 0;
        else
            fprintf(stderr, "it_topic_config: %s\n",
                    n == 1 ? rd_kafka_ConfigResource_error_string(rs[0]) : "no result");
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_ConfigResource_destroy(res);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return rc;
}
