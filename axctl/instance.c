/*
 * instance.c — cancelling instances (axctl instance cancel, job delete
 * --cancel-pending), by the paths the services use:
 *
 * - a SCHEDULED instance (not claimed by an executor) is finished CANCELLED
 *   by ax-callback: axctl produces its attempt (outcome CANCELLED, error
 *   class cancelled, worker axctl) to <prefix>callback, as the trigger does
 *   for instances beyond a backlog cap; the callback records it FINISHED and
 *   publishes its result like any other;
 * - a claimed (LOCKED) or RUNNING one is asked to stop, as overlap=cancel
 *   does: cancel_requested_at is set, the executor learns of it at its next
 *   lease renewal (a claimed one when it starts) and stops the handler; the
 *   attempt ends CANCELLED.
 *
 * cancel_requested_at is set on the SCHEDULED ones too: should an executor
 * claim one before the callback recorded the cancellation, the executor
 * finishes it CANCELLED without running it (the callback then ignores the
 * axctl attempt as stale).
 *
 * Called with no transaction open: its cancel request
 * (ax_store_instance_cancel_request) commits at once, before the attempts
 * are produced and their acknowledgements waited for (up to
 * 35 s), so no row lock is held meanwhile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/kafka.h"
#include "ax/store_instance_ops.h"
#include "axctl.h"

/* Produce the cancelled attempt of every SCHEDULED one among rows to
 * <prefix>callback and wait for Kafka's acknowledgements. 0, or -1 with
 * the reason in err. */
static int produce_cancellations(const ax_cancel_row_t *rows, size_t n, const char *why,
                                 char *err, size_t errlen) {
    char topic[256], key[32];
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "axctl", err, errlen);
    if (!rk) {
        fprintf(stderr, "axctl: configuration error: %s\n", err);
        exit(2);
    }
    ax_conf_topic(&conf, "callback", topic, sizeof topic);
    ax_delivery_t d = {0};
    int64_t now = ax_now_ms();
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (strcmp(rows[i].state, "SCHEDULED") != 0)
            continue;
        ax_attempt_t a = {
            .instance_id = rows[i].id,
            .attempt = rows[i].attempt,
            .worker = "axctl",
            .outcome = AX_OUTCOME_CANCELLED,
            .error_class = "cancelled",
            .error = (char *)why,
            .output = "",
            .started_at_ms = now,
            .finished_at_ms = now,
            .trace_id = rows[i].trace_id,
            .retryable = 0,
        };
        void *buf;
        size_t len;
        int klen = snprintf(key, sizeof key, "%lld", (long long)a.instance_id);
        if (ax_attempt_encode(&a, &buf, &len) < 0) {
            snprintf(err, errlen, "instance %lld: cannot encode its attempt",
                     (long long)a.instance_id);
            rc = -1;
            break;
        }
        rc = ax_kafka_produce(rk, topic, key, (size_t)klen, buf, len, NULL, &d, err, errlen);
        free(buf);
    }
    if (ax_kafka_wait(rk, &d, 35000) < 0 && rc == 0) {
        snprintf(err, errlen, "%s", d.err ? rd_kafka_err2str(d.err) : "not acknowledged");
        rc = -1;
    }
    rd_kafka_destroy(rk);
    return rc < 0 ? -1 : 0;
}

int cancel_instance_ids(ax_pg_t *pg, const int64_t *ids, size_t nids, const char *why,
                        int *ret_stopping, int *ret_scheduled) {
    char err[1024];
    ax_cancel_row_t *rows = NULL;
    size_t n = 0;
    *ret_stopping = 0;
    *ret_scheduled = 0;
    if (ax_store_instance_cancel_request(pg, ids, nids, &rows, &n, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return -1;
    }
    int scheduled = 0, parents = 0;
    for (size_t i = 0; i < n; i++) {
        scheduled += strcmp(rows[i].state, "SCHEDULED") == 0;
        /* a running shard parent runs nowhere: its shards are what stops */
        parents += strcmp(rows[i].state, "RUNNING") == 0 && strcmp(rows[i].worker, "shards") == 0;
    }
    *ret_stopping = (int)n - scheduled - parents;
    if (scheduled && produce_cancellations(rows, n, why, err, sizeof err) < 0) {
        /* cancel_requested_at stays: an executor that claims one cancels it */
        fprintf(stderr, "axctl: the cancellation was not acknowledged by Kafka: %s (run "
                        "the command again)\n", err);
        ax_cancel_rows_free(rows, n);
        return -1;
    }
    *ret_scheduled = scheduled;
    ax_cancel_rows_free(rows, n);
    return (int)n;
}

