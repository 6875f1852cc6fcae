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

/* Read the rows of r (DISPATCH_COLS first) into out; hold_col >= 0 names
 * the column whose non-NULL value sets .hold. 0 or AX_ERR_NOMEM. */
int ax__dispatch_rows_read(const PGresult *r, int hold_col, ax_dispatch_rows_t *out);

/* Text form of an int array parameter "{1,2,...}" (malloc'd; NULL on
 * out of memory). */
char *ax__int_array(const int64_t *v, size_t n);

#endif
