/*
 * dispatch_int.h — private to libax/src/store: the dispatch column layout
 * that every statement marking instances dispatched returns (dispatch.c,
 * and the fire statement), and its reader.
 */
#ifndef AX_STORE_DISPATCH_INT_H
#define AX_STORE_DISPATCH_INT_H

#include "ax/store_dispatch.h"
#include "store_int.h"

#define DISPATCH_COLS                                                                     \
    "id, attempt, job_name, handler_kind, to_json(command)::text, payload, timeout_ms,"  \
    " (extract(epoch FROM nominal_time) * 1000)::bigint,"                                \
    " (extract(epoch FROM due_at) * 1000)::bigint, priority, trace_id, idempotency_key,"    \
    " executor_group, routing_field"

/* Column indices of DISPATCH_COLS. */
enum {
    DC_ID, DC_ATTEMPT, DC_JOB, DC_HANDLER_KIND, DC_COMMAND, DC_PAYLOAD, DC_TIMEOUT,
    DC_NOMINAL, DC_DUE, DC_PRIORITY, DC_TRACE, DC_IDEM, DC_GROUP, DC_ROUTING,
    DC_NCOLS
};

/* The pending-dispatch marker of a batch (018_hot_writes): one
 * dispatch_batch row holding the ids a dispatching statement marked. As the
 * last CTE of a statement whose CTE `src` has column id and a filter: the
 * epoch and deployment are the statement's parameters. No row for an empty
 * batch. */
#define PEND_BATCH(src, where, epoch, deployment)                                         \
    "pend AS (INSERT INTO dispatch_batch (epoch, deployment, ids)"                         \
    " SELECT " epoch ", " deployment ", array_agg(id) FROM " src " WHERE " where           \
    " HAVING count(*) > 0)"

/* CTEs that take the ids of the array parameter `a` out of the pending
 * batches of deployment `dep` holding them: a batch whose ids are all among
 * them is deleted (the settle's case: one row), one holding others too
 * keeps those. CTE `taken` lists the ids taken (instance_id).
 * dispatch_batch holds only the unconfirmed batches (a few rows per
 * deployment): the deployment's are read whole, and each batch's ids are
 * looked up in a hashed set of `a` (array operators such as <@ and &&
 * compare every pair: 10 ms for two arrays of 1,000). A deployment's
 * batches hold only its own instances (every writer stores its own), so
 * other deployments' windows are not read. */
#define PEND_TAKE(a, dep)                                                                 \
    "pa AS MATERIALIZED (SELECT unnest(" a ") AS id),"                                     \
    " pt AS MATERIALIZED (SELECT b.id, b.ids, ARRAY(SELECT v FROM unnest(b.ids) v"        \
    "  WHERE v NOT IN (SELECT id FROM pa)) AS rest FROM dispatch_batch b"                 \
    "  WHERE b.deployment = " dep "),"                                                     \
    " ptd AS (DELETE FROM dispatch_batch b USING pt"                                      \
    "  WHERE b.id = pt.id AND cardinality(pt.rest) = 0),"                                 \
    " ptu AS (UPDATE dispatch_batch b SET ids = pt.rest FROM pt"                          \
    "  WHERE b.id = pt.id AND cardinality(pt.rest) BETWEEN 1 AND cardinality(pt.ids) - 1)," \
    " taken AS (SELECT v AS instance_id FROM pt, unnest(pt.ids) v"                        \
    "  WHERE v IN (SELECT id FROM pa))"

/* Read the rows of r (DISPATCH_COLS first) into out; hold_col >= 0 names
 * the column whose non-NULL value sets .hold. 0 or AX_ERR_NOMEM. */
int ax__dispatch_rows_read(const PGresult *r, int hold_col, ax_dispatch_rows_t *out);

/* A submit key that is a Kafka position, kafka:TOPIC:PARTITION:OFFSET,
 * exactly as ^kafka:[^:]+:[0-9]{1,9}:[0-9]{1,18}$ matches it: 1 with the
 * topic (topic[0..*tlen), not NUL-terminated), partition and offset; 0
 * for any other key (an idempotency key's idem:..., NULL). */
int ax__kafka_pos(const char *k, const char **topic, size_t *tlen, int32_t *part,
                  int64_t *off);

/* Text form of an int array parameter "{1,2,...}" (malloc'd; NULL on
 * out of memory). */
char *ax__int_array(const int64_t *v, size_t n);

#endif
