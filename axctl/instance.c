/*
 * instance.c — cancelling instances (axctl instance cancel, job delete
 * --cancel-pending) through ax_ops_cancel (libax, ax/ops.h), which ax-api
 * calls too: the paths the services use are described there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/kafka.h"
#include "ax/ops.h"
#include "axctl.h"

rd_kafka_t *producer_open(void) {
    char err[512];
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "axctl", err, sizeof err);
    if (!rk) {
        fprintf(stderr, "axctl: configuration error: %s\n", err);
        exit(2);
    }
    return rk;
}

int cancel_instance_ids(ax_pg_t *pg, const int64_t *ids, size_t nids, const char *why,
                        int *ret_stopping, int *ret_scheduled) {
    char err[1024];
    ax_cancel_result_t r;
    rd_kafka_t *rk = producer_open();
    int rc = ax_ops_cancel(pg, rk, &conf, ids, nids, why, &r, err, sizeof err);
    rd_kafka_destroy(rk);
    *ret_stopping = r.stopping;
    *ret_scheduled = r.scheduled;
    if (rc == AX_ERR_IO && r.scheduled) {
        /* cancel_requested_at stays: an executor that claims one cancels it */
        fprintf(stderr, "axctl: the cancellation was not acknowledged by Kafka: %s (run "
                        "the command again)\n", err);
        return -1;
    }
    if (rc < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return -1;
    }
    return r.unfinished;
}
