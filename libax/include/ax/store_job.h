/*
 * ax/store_job.h — the job table as operators see it (axctl job, flow
 * schedules; the REST API next): one job row type read by every job query,
 * create/update from a typed spec, enable/disable, delete, the fire
 * ledger, the circuit breaker's reset.
 *
 * Functions return 0 or an ax error (ax/common.h): AX_ERR_NOTFOUND when
 * the named job does not exist, AX_ERR_CONFLICT on a duplicate name,
 * AX_ERR_IO to retry later, AX_ERR_INVALID for data PostgreSQL refused;
 * the reason is in errbuf. Rows and arrays returned are the caller's: free
 * them with the matching _free (each accepts NULL). Times are epoch
 * milliseconds. Statements run on the caller's connection, inside the
 * caller's transaction if one is open.
 */
#ifndef AX_STORE_JOB_H
#define AX_STORE_JOB_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t;

/* A job with its last ledger entry: every setting but the payload (bytes,
 * read with ax_store_job_columns) and the run statistics. Strings are
 * malloc'd; optional values have a has_ flag (the value is 0 without it). */
typedef struct ax_job {
    int64_t id;
    char *name;
    int enabled;
    char *schedule_kind; /* "none", "cron", "fixed_rate", "fixed_delay", "once" */
    char *schedule_expr; /* NULL unless cron */
    char *time_zone;
    char *dst_gap;       /* "shift" | "skip" */
    char *dst_overlap;   /* "once" | "twice" */
    int64_t interval_ms; /* 0 if none */
    int has_start;
    int64_t start_ms;
    int64_t schedule_from_ms;
    /* the ledger's newest entry and its instance */
    int has_last_fire;
    int64_t last_fire_ms;
    char *last_decision;
    int has_last_instance;
    int64_t last_instance_id;
    char *last_instance_state; /* NULL if the instance is gone */
    int has_last_finished;
    int64_t last_finished_ms;
    int64_t now_ms; /* the server's clock when read */
    /* run settings */
    char *handler_kind;
    int ncommand;        /* elements of command */
    char *command0;      /* command[1], NULL if none */
    char *executor_group;
    int has_concurrency_limit;
    int64_t concurrency_limit;
    char *routing_key;   /* NULL if none */
    int64_t running_count;
    int64_t flow_id;     /* 0 unless a flow's schedule job */
    /* circuit breaker */
    char *circuit_state; /* "closed", "open", "half_open" */
    int64_t consecutive_failures;
    int64_t circuit_threshold;
    int has_circuit_opened;
    int64_t circuit_opened_ms;
    int64_t circuit_cooldown_ms;
    /* policies and limits */
    int64_t version; /* bumped by every change of a setting */
    char *misfire_policy, *overlap_policy;
    int64_t misfire_threshold_ms, catchup_max, timeout_ms, priority;
    int64_t retry_max, retry_initial_ms, retry_max_delay_ms, retry_jitter_ms;
    double retry_multiplier;
    char *retry_rules;  /* JSON, NULL: the default chain */
    int has_backlog_max;
    int64_t backlog_max;
    int64_t tolerance_ms;
    char *command_json; /* the command as a JSON array, NULL if none */
    int64_t created_ms, updated_ms;
} ax_job_t;

void ax_job_clear(ax_job_t *j);
void ax_jobs_free(ax_job_t *rows, size_t n);

/* The job named `name` (for_update: its row locked until the caller's
 * transaction ends); AX_ERR_NOTFOUND if none. */
int ax_store_job_get(ax_pg_t *pg, const char *name, int for_update, ax_job_t *ret_job,
                     char *errbuf, size_t errlen);
/* The schedule job of flow `flow_id`; AX_ERR_NOTFOUND if it has none. */
int ax_store_job_get_by_flow(ax_pg_t *pg, int64_t flow_id, int for_update, ax_job_t *ret_job,
                             char *errbuf, size_t errlen);
/* Every job, by name. */
int ax_store_job_list(ax_pg_t *pg, ax_job_t **ret_rows, size_t *ret_n, char *errbuf,
                      size_t errlen);

/* A bounded page of jobs by name (ax-api): after after_name (NULL: from
 * the first), whose name starts with prefix (NULL: any), enabled 0/1 (-1:
 * either); at most limit. */
typedef struct ax_job_page {
    const char *after_name, *prefix;
    int enabled;
    int64_t limit;
} ax_job_page_t;
int ax_store_job_page(ax_pg_t *pg, const ax_job_page_t *f, ax_job_t **ret_rows, size_t *ret_n,
                      char *errbuf, size_t errlen);

/* What to write: NULL strings and has_ flags off mean "not given" (update:
 * keep; create: the table's default). */
typedef struct ax_job_spec {
    const char *name;
    /* create only */
    int disabled;
    int64_t flow_id; /* 0: none */
    /* A schedule: all its columns are written, those it does not use
     * cleared. start_at is start_ms if has_start, else now + after_ms if
     * has_after. Without set_schedule, has_start changes start_at alone. */
    int set_schedule;
    const char *schedule_kind;
    const char *schedule_expr;
    int64_t interval_ms; /* 0: none */
    int has_start, has_after;
    int64_t start_ms, after_ms;
    const char *time_zone, *dst_gap, *dst_overlap;
    const char *misfire_policy, *overlap_policy;
    int has_misfire_threshold, has_catchup_max, has_timeout, has_priority, has_payload;
    int64_t misfire_threshold_ms, catchup_max, timeout_ms, priority;
    const void *payload;
    size_t payload_len;
    const char *handler_kind;
    const char *executor_group;
    int has_routing_key;      /* routing_key NULL: clear */
    const char *routing_key;
    int has_backlog_max;      /* backlog_max < 0: clear */
    int64_t backlog_max;
    int has_tolerance;
    int64_t tolerance_ms;
    int has_concurrency;      /* concurrency_limit 0: clear */
    int64_t concurrency_limit;
    int has_retry_max, has_retry_initial, has_retry_max_delay, has_retry_jitter;
    int64_t retry_max, retry_initial_ms, retry_max_delay_ms, retry_jitter_ms;
    const char *retry_multiplier; /* a number's text; NULL: not given */
    int has_retry_rules;      /* retry_rules NULL: clear */
    const char *retry_rules;  /* JSON */
    int has_circuit_threshold, has_circuit_cooldown;
    int64_t circuit_threshold, circuit_cooldown_ms;
    char **command;           /* ncommand > 0: replace */
    int ncommand;
} ax_job_spec_t;

/* A new job; AX_ERR_CONFLICT if the name is taken. */
int ax_store_job_create(ax_pg_t *pg, const ax_job_spec_t *spec, char *errbuf, size_t errlen);
/* Change the given settings of job spec->name; AX_ERR_NOTFOUND if none. */
int ax_store_job_update(ax_pg_t *pg, const ax_job_spec_t *spec, char *errbuf, size_t errlen);

/* Enable or disable; *ret_changed = 0 if it already was. */
int ax_store_job_set_enabled(ax_pg_t *pg, const char *name, int enabled, int *ret_changed,
                             char *errbuf, size_t errlen);

/* A job's unfinished instances (ids ascending). */
typedef struct ax_job_pending {
    int64_t *ids;
    size_t n;
} ax_job_pending_t;
void ax_job_pending_clear(ax_job_pending_t *p);

/* The unfinished instances of job `job_id` (with_cancel_requested: also
 * those already asked to stop). */
int ax_store_job_pending(ax_pg_t *pg, int64_t job_id, int with_cancel_requested,
                         ax_job_pending_t *ret, char *errbuf, size_t errlen);

/* In a short transaction of its own: lock the job's unfinished instances,
 * then the job (the order the callback and the executors lock them in),
 * and delete it unless it has unfinished instances nobody asked to cancel.
 * AX_ERR_NOTFOUND: job `job_id` is no longer named `name`; AX_ERR_CONFLICT:
 * refused, those instances in *ret_fresh. Rolled back on any error. */
int ax_store_job_delete(ax_pg_t *pg, const char *name, int64_t job_id,
                        ax_job_pending_t *ret_fresh, char *errbuf, size_t errlen);

/* One fire ledger entry with its instance. */
typedef struct ax_job_fire {
    int64_t nominal_ms;
    char *decision;
    int has_instance;
    int64_t instance_id;
    int instance_exists;
    char *instance_state;   /* NULL if gone */
    char *instance_outcome; /* NULL if none */
    char *detail;           /* NULL if none */
} ax_job_fire_t;
void ax_job_fires_free(ax_job_fire_t *rows, size_t n);

/* The ledger of job `name`, newest first: at most `limit` entries, from
 * since_ms on if has_since. */
int ax_store_job_history(ax_pg_t *pg, const char *name, int has_since, int64_t since_ms,
                         int64_t limit, ax_job_fire_t **ret_rows, size_t *ret_n, char *errbuf,
                         size_t errlen);

/* The same, a page (ax-api): entries before before_ms if has_before (a
 * keyset cursor: the previous page's last nominal time). */
int ax_store_job_history_page(ax_pg_t *pg, const char *name, int has_since, int64_t since_ms,
                              int has_before, int64_t before_ms, int64_t limit,
                              ax_job_fire_t **ret_rows, size_t *ret_n, char *errbuf,
                              size_t errlen);

/* Every column of job `name` in table order, whatever columns the table
 * has (axctl job show). */
typedef enum {
    AX_JOB_COL_NULL,
    AX_JOB_COL_TEXT,
    AX_JOB_COL_TIME,
    AX_JOB_COL_BYTES
} ax_job_col_kind_t;
typedef struct ax_job_col {
    char *key;
    ax_job_col_kind_t kind;
    char *text;      /* TEXT: its JSON text form; BYTES: "\x" and hex digits */
    int64_t time_ms; /* TIME */
} ax_job_col_t;
void ax_job_cols_free(ax_job_col_t *rows, size_t n);
int ax_store_job_columns(ax_pg_t *pg, const char *name, ax_job_col_t **ret_rows, size_t *ret_n,
                         char *errbuf, size_t errlen);

/* Close the job's circuit breaker (consecutive failures 0) in a
 * transaction of its own; *ret_before is the job as it was. Only circuit
 * columns change: the job's version stays. */
int ax_store_job_circuit_reset(ax_pg_t *pg, const char *name, ax_job_t *ret_before,
                               char *errbuf, size_t errlen);

#endif
