/*
 * ax/dlq.h — the dead-letter topic <prefix>dlq as operators read and
 * replay it (axctl dlq, ax-api /api/v1/dlq share this).
 *
 * Two kinds of records land there: messages a service could not process
 * (the original bytes, headers ax.reason and ax.source.topic/partition/
 * offset; ax.instance.id, ax.job, ax.trace.id when the message decoded far
 * enough to name them), and final failures (ax.kind = final_failure: the
 * instance's Result record, after its retries; headers ax.instance.id,
 * ax.job, ax.trace.id).
 *
 * Replaying re-offers a record: a rejected message is produced again to
 * its source topic; a final failure becomes a new submission of the same
 * job with the same payload (trace id the old one + "-replay"). A
 * submission replayed carries an idempotency key (its own, else
 * "dlq-replay:<dlq topic>:P:O"), so replaying a record twice makes one
 * instance, and the second replay says so.
 *
 * Functions return 0 or an ax error with the reason in errbuf:
 * AX_ERR_NOTFOUND (no such record), AX_ERR_IO (Kafka/PostgreSQL away),
 * AX_ERR_INVALID (the record cannot be replayed), AX_ERR_CONFLICT.
 */
#ifndef AX_DLQ_H
#define AX_DLQ_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "ax/conf.h"

typedef struct ax_pg ax_pg_t;
typedef struct ax_dlq ax_dlq_t;

/* One record as listed. Strings are "" when the header is absent. */
typedef struct ax_dlq_rec {
    int32_t partition;
    int64_t offset;
    int64_t ts_ms;
    int final_failure;      /* ax.kind = final_failure */
    char source[256];       /* ax.source.topic */
    int64_t source_partition, source_offset; /* -1 if absent */
    char reason[600];       /* ax.reason */
    int64_t instance_id;    /* ax.instance.id, 0 if absent */
    char service[64];       /* ax.service */
    char job[256];          /* ax.job */
    char trace_id[200];     /* ax.trace.id */
} ax_dlq_rec_t;

/* A reader of <prefix>dlq (a consumer without a group). NULL with the
 * reason (AX_ERR_INVALID for a bad kafka.* key in *ret_rc). */
ax_dlq_t *ax_dlq_open(const ax_conf_t *c, int *ret_rc, char *errbuf, size_t errlen);
void ax_dlq_close(ax_dlq_t *d);
const char *ax_dlq_topic(const ax_dlq_t *d);
/* The topic's partition count; AX_ERR_IO if it cannot be read. */
int ax_dlq_partitions(ax_dlq_t *d, int *ret_n, char *errbuf, size_t errlen);

/* The newest records first: at most limit, from since_ms on (INT64_MIN:
 * all), whose reason holds `reason` in any case (NULL: any). *ret (malloc'd,
 * *ret_n). */
int ax_dlq_list(ax_dlq_t *d, int64_t limit, int64_t since_ms, const char *reason,
                ax_dlq_rec_t **ret, size_t *ret_n, char *errbuf, size_t errlen);

/* The record at partition:offset (*ret to rd_kafka_message_destroy).
 * AX_ERR_NOTFOUND with "no such record (...)" / "no record at ...". */
int ax_dlq_fetch(ax_dlq_t *d, int32_t partition, int64_t offset, rd_kafka_message_t **ret,
                 char *errbuf, size_t errlen);
void ax_dlq_rec_of(const rd_kafka_message_t *m, ax_dlq_rec_t *ret);

typedef enum {
    AX_DLQ_PRODUCED,        /* produced again to its source topic */
    AX_DLQ_RESUBMITTED,     /* a final failure's job submitted again */
    AX_DLQ_ALREADY,         /* its idempotency key made an instance already: nothing produced */
} ax_dlq_action_t;

typedef struct ax_dlq_replay {
    ax_dlq_action_t action;
    char topic[256];        /* where it went */
    char idempotency_key[600]; /* "" if none (a record that does not decode) */
    char trace_id[200];     /* RESUBMITTED/ALREADY: the instance's trace id */
    int64_t instance_id;    /* ALREADY: the instance the key made */
    char state[16];         /* ALREADY: its state */
    int undecodable;        /* PRODUCED as it was: it does not decode (decode_err) */
    char decode_err[256];
} ax_dlq_replay_t;

/* Replay record m (read from d) through producer rk, checking in pg
 * whether its key already made an instance. */
int ax_dlq_replay(ax_dlq_t *d, ax_pg_t *pg, rd_kafka_t *rk, const ax_conf_t *c,
                  const rd_kafka_message_t *m, ax_dlq_replay_t *ret, char *errbuf,
                  size_t errlen);

/* The same without waiting (ax-api, whose loop serves rk's delivery
 * reports): the record is handed to rk tracked by dv, whose on_report
 * tells the outcome. 0 with dv->pending 0 when nothing was produced
 * (AX_DLQ_ALREADY); an error when nothing was handed over. d is only
 * read (its topic names), so another thread may be using d's consumer. */
typedef struct ax_delivery ax_delivery_t;
int ax_dlq_replay_start(const ax_dlq_t *d, ax_pg_t *pg, rd_kafka_t *rk,
                        const rd_kafka_message_t *m, ax_dlq_replay_t *ret, ax_delivery_t *dv,
                        char *errbuf, size_t errlen);

#endif
