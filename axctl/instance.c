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
 * Called with no transaction open: its UPDATE commits at once, before the
 * attempts are produced and their acknowledgements waited for (up to
 * 35 s), so no row lock is held meanwhile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/kafka.h"
#include "axctl.h"

int cancel_instances(ax_pg_t *pg, const char *ids, const char *why, int *ret_stopping,
                     int *ret_scheduled) {
    const char *p[] = {ids};
    PGresult *r = q(pg,
                    "UPDATE job_instance SET cancel_requested_at = coalesce(cancel_requested_at,"
                    "  now()) WHERE id = ANY($1::bigint[]) AND state <> 'FINISHED'"
                    " RETURNING id, state, attempt, trace_id, coalesce(worker, '')",
                    1, p);
    int rows = PQntuples(r), scheduled = 0, parents = 0, rc = 0;
    *ret_stopping = 0;
    *ret_scheduled = 0;
    for (int i = 0; i < rows; i++) {
        scheduled += strcmp(PQgetvalue(r, i, 1), "SCHEDULED") == 0;
        /* a running shard parent runs nowhere: its shards are what stops */
        parents += strcmp(PQgetvalue(r, i, 1), "RUNNING") == 0 &&
                   strcmp(PQgetvalue(r, i, 4), "shards") == 0;
    }
    *ret_stopping = rows - scheduled - parents;
    if (scheduled) {
        char err[512], topic[256], key[32];
        rd_kafka_t *rk = ax_kafka_producer_new(&conf, "axctl", err, sizeof err);
        if (!rk) {
            fprintf(stderr, "axctl: configuration error: %s\n", err);
            exit(2);
        }
        ax_conf_topic(&conf, "callback", topic, sizeof topic);
        ax_delivery_t d = {0};
        int64_t now = ax_now_ms();
        for (int i = 0; i < rows && rc == 0; i++) {
            if (strcmp(PQgetvalue(r, i, 1), "SCHEDULED") != 0)
                continue;
            ax_attempt_t a = {
                .instance_id = ax_pg_int(r, i, 0),
                .attempt = (int32_t)ax_pg_int(r, i, 2),
                .worker = "axctl",
                .outcome = AX_OUTCOME_CANCELLED,
                .error_class = "cancelled",
                .error = (char *)why,
                .output = "",
                .started_at_ms = now,
                .finished_at_ms = now,
                .trace_id = PQgetvalue(r, i, 3),
                .retryable = 0,
            };
            void *buf;
            size_t len;
            int klen = snprintf(key, sizeof key, "%lld", (long long)a.instance_id);
            if (ax_attempt_encode(&a, &buf, &len) < 0) {
                snprintf(err, sizeof err, "instance %lld: cannot encode its attempt",
                         (long long)a.instance_id);
                rc = -1;
                break;
            }
            rc = ax_kafka_produce(rk, topic, key, (size_t)klen, buf, len, NULL, &d, err,
                                  sizeof err);
            free(buf);
        }
        if (ax_kafka_wait(rk, &d, 35000) < 0 && rc == 0) {
            snprintf(err, sizeof err, "%s", d.err ? rd_kafka_err2str(d.err) : "not acknowledged");
            rc = -1;
        }
        rd_kafka_destroy(rk);
        if (rc < 0) {
            /* cancel_requested_at stays: an executor that claims one cancels it */
            fprintf(stderr, "axctl: the cancellation was not acknowledged by Kafka: %s (run "
                            "the command again)\n", err);
            PQclear(r);
            return -1;
        }
        *ret_scheduled = scheduled;
    }
    PQclear(r);
    return rows;
}
