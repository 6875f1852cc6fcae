/*
 * limits.c — what axctl checks before it writes anything, so a submission or
 * job that ax could never carry is refused here (exit 2) rather than
 * dead-lettered or held later: the size limit (message.max.bytes) and the
 * executor group (a reserved name, or a group without topics).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/kafka.h"
#include "ax/lane.h"
#include "axctl.h"

void submit_size_check(const ax_submit_t *s, size_t longest_trace) {
    size_t max = (size_t)conf.message_max_bytes;
    void *buf;
    size_t len = 0;
    if (ax_submit_encode(s, &buf, &len) == 0)
        free(buf);
    /* the trigger produces the instance as one dispatch record: it must fit too */
    size_t trace = s->trace_id ? strlen(s->trace_id) : 32;
    char *tr = malloc((longest_trace > trace ? longest_trace : trace) + 1);
    if (!tr) {
        fprintf(stderr, "axctl: out of memory\n");
        exit(1);
    }
    memset(tr, 'x', longest_trace > trace ? longest_trace : trace);
    tr[longest_trace > trace ? longest_trace : trace] = '\0';
    size_t dl = ax_dispatch_size_max(s->job, NULL, (const char *const *)s->command,
                                     s->command_len, s->payload_len, tr,
                                     s->idempotency_key ? s->idempotency_key : tr);
    free(tr);
    if (len > max || dl > max)
        die_usagef("submission too large: %zu bytes (payload %zu), its dispatch record up to "
                   "%zu bytes; message.max.bytes is %zu",
                   len, s->payload_len, dl, max);
}

void group_check(const char *group) {
    if (ax_conf_group_reserved(group))
        die_usagef("--group %s: p0-p9 are reserved names (they name priority lanes: "
                   "<prefix>dispatch.p1 is the default group's P1 lane)",
                   group);
    if (strcmp(group, "default") == 0)
        return;
    char err[512];
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "axctl", err, sizeof err);
    if (!rk) {
        fprintf(stderr, "axctl: configuration error: %s\n", err);
        exit(2);
    }
    const struct rd_kafka_metadata *md;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, 10000);
    if (e) {
        fprintf(stderr, "axctl: --group %s: cannot list Kafka's topics to check it: %s\n", group,
                rd_kafka_err2str(e));
        rd_kafka_destroy(rk);
        exit(1);
    }
    char missing[300] = "";
    int nmissing = 0;
    for (int p = 0; p < AX_PRIORITIES; p++) {
        char topic[300];
        ax_conf_dispatch_topic(&conf, group, p, topic, sizeof topic);
        int found = 0;
        for (int i = 0; i < md->topic_cnt && !found; i++)
            found = !md->topics[i].err && strcmp(md->topics[i].topic, topic) == 0;
        if (!found && nmissing++ == 0)
            snprintf(missing, sizeof missing, "%s", topic);
    }
    rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
    if (nmissing)
        die_usagef("--group %s: executor group without topics: no %s%s; create them first "
                   "(axctl topics create --group %s) and run executors with "
                   "executor.groups=%s",
                   group, missing, nmissing > 1 ? " (nor more of its lanes)" : "", group,
                   group);
}
