/*
 * ax/store_instance_ops.h — what operators do to instances (axctl instance
 * cancel, job delete --cancel-pending; the REST API next): ask unfinished
 * instances to stop.
 *
 * Functions return 0 or an ax error (ax/common.h; AX_ERR_IO: retry later)
 * with the reason in errbuf. Rows returned in arrays are the caller's:
 * free them with the matching _free (which accepts NULL).
 */
#ifndef AX_STORE_INSTANCE_OPS_H
#define AX_STORE_INSTANCE_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t;

/* An instance asked to stop, as it was when asked. */
typedef struct ax_cancel_row {
    int64_t id;
    char *state;    /* "SCHEDULED", "LOCKED" or "RUNNING" */
    int32_t attempt;
    char *trace_id;
    char *worker;   /* "" if none; "shards" for a running shard parent */
} ax_cancel_row_t;

/* Set cancel_requested_at (kept if already set) on the unfinished
 * instances among ids[0..n), committed at once unless the caller opened a
 * transaction. *ret_rows (malloc'd, *ret_n of them; NULL if none) are the
 * instances it was set on: the finished ones are left out. */
int ax_store_instance_cancel_request(ax_pg_t *pg, const int64_t *ids, size_t n,
                                     ax_cancel_row_t **ret_rows, size_t *ret_n, char *errbuf,
                                     size_t errlen);
void ax_cancel_rows_free(ax_cancel_row_t *rows, size_t n);

#endif
