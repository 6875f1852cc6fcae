/*
 * ax/ops.h — what operators do, shared by axctl and ax-api so both behave
 * the same: check and produce a submission to <prefix>submit, cancel
 * instances (the paths the services use), retry a finished instance.
 *
 * Functions return 0 or an ax error (ax/common.h) with the reason in
 * errbuf: AX_ERR_INVALID for bad input (*ret_field, when given, names the
 * member at fault in the API's terms: "job", "trace_id", ...), AX_ERR_IO
 * when Kafka or PostgreSQL did not take it (retry), AX_ERR_NOTFOUND,
 * AX_ERR_CONFLICT (see each). They never print or exit.
 */
#ifndef AX_OPS_H
#define AX_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "ax/codec.h"
#include "ax/conf.h"

typedef struct ax_pg ax_pg_t;

/* Longest delay and timeout of a submission: a century. */
#define AX_SUBMIT_MS_MAX INT64_C(3153600000000)

/* The checks of a submission before it is produced: exactly one of job and
 * command, UTF-8 text, key and trace id lengths, one of at and delay,
 * priority 0..4, timeout and delay within AX_SUBMIT_MS_MAX. With pg, the
 * job must exist and not start a flow (AX_ERR_NOTFOUND / AX_ERR_INVALID,
 * field "job"). */
int ax_ops_submit_check(ax_pg_t *pg, const ax_submit_t *s, const char **ret_field, char *errbuf,
                        size_t errlen);

/* Produce s to <prefix>submit keyed by its idempotency key (else its trace
 * id, which must be set) and wait up to timeout_ms for Kafka's
 * acknowledgement. */
int ax_ops_submit_produce(rd_kafka_t *rk, const ax_conf_t *c, const ax_submit_t *s,
                          int timeout_ms, char *errbuf, size_t errlen);

/* What a cancel did. */
typedef struct ax_cancel_result {
    int unfinished; /* of the ids, how many were not finished */
    int scheduled;  /* SCHEDULED: finished CANCELLED through ax-callback */
    int stopping;   /* LOCKED/RUNNING: asked to stop (their executors kill them) */
    int parents;    /* 1: the instance was a running shard parent (its shards counted) */
    char state[16]; /* the (first) instance's state when asked: SCHEDULED, LOCKED, RUNNING */
} ax_cancel_result_t;

/* Cancel the unfinished instances among ids[0..n) as axctl instance
 * cancel does: cancel_requested_at is set (committed at once; call with
 * no transaction open), then the SCHEDULED ones get a CANCELLED attempt
 * produced to <prefix>callback (error text `why`) through rk, waited for.
 * AX_ERR_IO: not acknowledged (the request stays: an executor claiming one
 * cancels it). */
int ax_ops_cancel(ax_pg_t *pg, rd_kafka_t *rk, const ax_conf_t *c, const int64_t *ids, size_t n,
                  const char *why, ax_cancel_result_t *ret, char *errbuf, size_t errlen);

/* Cancel instance id (axctl instance cancel, POST .../cancel): as above;
 * a running shard parent has its unfinished shards cancelled instead
 * (ret->parents 1). AX_ERR_NOTFOUND: no such instance; AX_ERR_CONFLICT:
 * finished already (or meanwhile), or a parent whose shards all finished. */
int ax_ops_cancel_instance(ax_pg_t *pg, rd_kafka_t *rk, const ax_conf_t *c, int64_t id,
                           const char *why, ax_cancel_result_t *ret, char *errbuf,
                           size_t errlen);

/* What a retry produced. */
typedef struct ax_retry_result {
    char trace_id[200];
    char idempotency_key[64];
    int duplicate;        /* the key had made an instance already: nothing produced */
    int64_t instance_id;  /* that instance when duplicate, else 0 */
} ax_retry_result_t;

/* Submit finished instance id's job again with its payload, priority and
 * timeout, trace id "<old>-retry", idempotency key "retry:<id>" (so a
 * second retry of the same instance makes no second instance).
 * AX_ERR_NOTFOUND: no such instance; AX_ERR_CONFLICT: not finished, or an
 * inline command (no job to submit). */
int ax_ops_retry(ax_pg_t *pg, rd_kafka_t *rk, const ax_conf_t *c, int64_t id,
                 ax_retry_result_t *ret, char *errbuf, size_t errlen);

#endif
