/*
 * ax/store_instance_admin.h — instances as operators look at them (axctl
 * instance show/list/cancel, submit --wait; the REST API next).
 *
 * Functions return 0 or an ax error (ax/common.h): AX_ERR_NOTFOUND when
 * there is no such instance, AX_ERR_IO to retry later; the reason is in
 * errbuf. Rows returned are the caller's: free them with the matching
 * _free (each accepts NULL).
 */
#ifndef AX_STORE_INSTANCE_ADMIN_H
#define AX_STORE_INSTANCE_ADMIN_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t;

/* An instance. Strings are malloc'd, NULL when the column is; times are
 * ISO-8601 text as PostgreSQL writes them in JSON (microseconds, the
 * session's zone). */
typedef struct ax_instance_view {
    int64_t id;
    char *job; /* NULL: an inline command */
    int64_t attempt;
    char *state; /* "SCHEDULED", "LOCKED", "RUNNING", "FINISHED" */
    char *outcome;
    int has_exit_code;
    int64_t exit_code;
    char *error_class, *error, *output, *trace_id, *idempotency_key, *worker;
    char *due_at, *scheduled_at, *dispatched_at, *locked_at, *running_at, *finished_at,
        *result_published_at;
    char *held_reason; /* why it is held (instance_hold), NULL if it is not */
} ax_instance_view_t;

void ax_instance_view_clear(ax_instance_view_t *v);
void ax_instance_views_free(ax_instance_view_t *rows, size_t n);

int ax_store_instance_admin_show(ax_pg_t *pg, int64_t id, ax_instance_view_t *ret,
                                 char *errbuf, size_t errlen);

/* NULL filters match everything; state as stored (upper case). */
typedef struct ax_instance_filter {
    const char *trace_id, *job, *state;
    int64_t limit;
} ax_instance_filter_t;

/* Newest first. */
int ax_store_instance_admin_list(ax_pg_t *pg, const ax_instance_filter_t *f,
                                 ax_instance_view_t **ret_rows, size_t *ret_n, char *errbuf,
                                 size_t errlen);

/* The newest instance with trace id `trace` that is FINISHED with its
 * result published; AX_ERR_NOTFOUND while there is none. */
int ax_store_instance_admin_final(ax_pg_t *pg, const char *trace, ax_instance_view_t *ret,
                                  char *errbuf, size_t errlen);

/* The unfinished shards of parent `parent_id`, ids ascending (*ret_ids
 * malloc'd, NULL if none). */
int ax_store_instance_admin_open_shards(ax_pg_t *pg, int64_t parent_id, int64_t **ret_ids,
                                        size_t *ret_n, char *errbuf, size_t errlen);

#endif
