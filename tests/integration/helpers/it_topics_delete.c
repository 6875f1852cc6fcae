/*
 * it_topics_delete — integration-test helper: delete every topic whose name
 * starts with PREFIX (a test's topic prefix: the topics `axctl topics
 * create` made and any the test added). Usage: it_topics_delete CONF_FILE
 * PREFIX, CONF_FILE holding librdkafka properties key=value a line (the kc
 * wrapper's file). lib.sh's cleanup runs it, so that a broker that outlives
 * the tests (a developer's infra/up set-up, infra/test's run of every pass)
 * does not keep ~9 topics of every test run: 1,549 of them (3,364
 * partitions) had gathered on one development broker, and their metrics
 * and log structures held ~75 MB of its 512 MB heap (249 MB live before
 * they were deleted, 173 MB after; BENCHMARKS.md, "Issue #13: the
 * twenty-seventh session").
 * Exit 0 when every topic of the prefix was deleted (or is being deleted:
 * the controller's deletion goes on past the 10 s operation timeout) or
 * there was none; 1 when the broker could not be asked or refused one.
 */
#include <stdlib.h>

#include "it_conf.h"

int main(int argc, char **argv) {
    if (argc != 3 || !argv[2][0]) {
        fprintf(stderr, "usage: it_topics_delete CONF_FILE PREFIX\n");
        return 2;
    }
    const char *prefix = argv[2];
    size_t plen = strlen(prefix);
    char err[512];
    rd_kafka_conf_t *c = it_conf_load("it_topics_delete", argv[1]);
    if (!c)
        return 2;
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "it_topics_delete: %s\n", err);
        rd_kafka_conf_destroy(c);
        return 1;
    }
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, 5000);
    if (e) {
        fprintf(stderr, "it_topics_delete: metadata: %s\n", rd_kafka_err2str(e));
        rd_kafka_destroy(rk);
        return 1;
    }
    rd_kafka_DeleteTopic_t **del = calloc((size_t)md->topic_cnt + 1, sizeof *del);
    size_t n = 0;
    for (int i = 0; del && i < md->topic_cnt; i++)
        if (strncmp(md->topics[i].topic, prefix, plen) == 0)
            del[n++] = rd_kafka_DeleteTopic_new(md->topics[i].topic);
    rd_kafka_metadata_destroy(md);
    int rc = del ? 0 : 1;
    if (n) {
        rd_kafka_AdminOptions_t *o = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DELETETOPICS);
        rd_kafka_AdminOptions_set_operation_timeout(o, 10000, err, sizeof err);
        rd_kafka_AdminOptions_set_request_timeout(o, 15000, err, sizeof err);
        rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
        rd_kafka_DeleteTopics(rk, del, n, o, q);
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 20000);
        if (!ev || rd_kafka_event_error(ev)) {
            fprintf(stderr, "it_topics_delete: %s\n",
                    ev ? rd_kafka_event_error_string(ev) : "no answer");
            rc = 1;
        } else {
            size_t nr = 0;
            const rd_kafka_DeleteTopics_result_t *res = rd_kafka_event_DeleteTopics_result(ev);
            const rd_kafka_topic_result_t **tr =
                res ? rd_kafka_DeleteTopics_result_topics(res, &nr) : NULL;
            if (!res) {
                fprintf(stderr, "it_topics_delete: not a DeleteTopics result\n");
                rc = 1;
            }
            /* gone already, or still going after the operation timeout */
            for (size_t i = 0; i < nr; i++)
                if (rd_kafka_topic_result_error(tr[i]) &&
                    rd_kafka_topic_result_error(tr[i]) != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART &&
                    rd_kafka_topic_result_error(tr[i]) != RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT) {
                    fprintf(stderr, "it_topics_delete: %s: %s\n", rd_kafka_topic_result_name(tr[i]),
                            rd_kafka_topic_result_error_string(tr[i]));
                    rc = 1;
                }
        }
        if (ev)
            rd_kafka_event_destroy(ev);
        rd_kafka_queue_destroy(q);
        rd_kafka_AdminOptions_destroy(o);
        rd_kafka_DeleteTopic_destroy_array(del, n);
    }
    free(del);
    rd_kafka_destroy(rk);
    return rc;
}
