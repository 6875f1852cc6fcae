/*
 * ax/store_flow.h — flows (tables flow, flow_stage, flow_run,
 * flow_stage_run; infra/migrations/005_flows.sql, 008_flow_schedule.sql,
 * 028_trace_id_time_first.sql):
 * defining, listing, starting and deleting them, and their runs with each
 * stage's state. The state machine itself (ax_flow_start, ax_flow_advance,
 * ax_flow_stage_done) is PostgreSQL's.
 *
 * Functions return 0 or an ax error (ax/common.h): AX_ERR_NOTFOUND no such
 * flow, AX_ERR_CONFLICT a flow of that name exists, AX_ERR_INVALID bad data
 * (a CHECK of the schema), AX_ERR_IO retry later; the reason in errbuf.
 * Rows come back malloc'd and are the caller's: free arrays with the
 * matching _free, one row with its _clear (both accept NULL / zeroed rows).
 *
 * Lists take a filter and a limit (at most that many rows) and are ordered
 * by a unique key, which the filter's after/before field continues from
 * (keyset pagination: pass the last row's key to get the next page).
 * Times are PostgreSQL's text form of a timestamptz.
 */
#ifndef AX_STORE_FLOW_H
#define AX_STORE_FLOW_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t;

/* ---- defining ---------------------------------------------------------------------- */

typedef struct ax_flow_stage_def {
    const char *name; /* ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$ */
    const char *job;
    const char *const *deps; /* upstream stage names */
    size_t ndeps;
} ax_flow_stage_def_t;

typedef struct ax_flow_def {
    const char *name;       /* ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ */
    const char *on_failure; /* "stop" or "continue" */
    const ax_flow_stage_def_t *stages;
    size_t nstages;
} ax_flow_def_t;

/* *ret_index: the first of jobs[0..n) that names no job, or -1 if all do. */
int ax_store_flow_missing_job(ax_pg_t *pg, const char *const *jobs, size_t n, long *ret_index,
                              char *errbuf, size_t errlen);

/* Write the flow and its stages, *ret_id its id. Run it inside the
 * caller's transaction (ax_pg_begin) so a failure leaves nothing: on a
 * stage's failure errbuf starts with "stage 'NAME': ". The DAG is the
 * caller's to check (no cycle, every upstream a stage). */
int ax_store_flow_define(ax_pg_t *pg, const ax_flow_def_t *def, int64_t *ret_id, char *errbuf,
                         size_t errlen);

/* Inside the caller's transaction: lock flow NAME's row (FOR UPDATE), so
 * its schedule can be changed; *ret_id its id. */
int ax_store_flow_lock(ax_pg_t *pg, const char *name, int64_t *ret_id, char *errbuf,
                       size_t errlen);

/* Delete flow NAME with its stages, runs and schedule job. */
int ax_store_flow_delete(ax_pg_t *pg, const char *name, char *errbuf, size_t errlen);

/* Start a run of flow NAME (ax_flow_start: the run, its stages, the first
 * instances), started_by "manual" (axctl), ...; *ret_run_id its id. */
int ax_store_flow_start(ax_pg_t *pg, const char *name, const char *started_by,
                        int64_t *ret_run_id, char *errbuf, size_t errlen);

/* ---- reading ----------------------------------------------------------------------- */

typedef struct ax_flow {
    int64_t id;
    char *name;
    char *on_failure;
    int64_t nstages;
    /* its schedule job (flow.NAME), all NULL/0 if it has none */
    char *sched_job;
    int sched_enabled;
    char *sched_misfire;
    char *sched_overlap;
    /* its newest run: id 0 and state NULL if it never ran */
    int64_t last_run_id;
    char *last_run_state;
} ax_flow_t;

typedef struct ax_flow_filter {
    const char *name;       /* only this flow; NULL: any */
    const char *after_name; /* keyset: names after this one; NULL: from the first */
} ax_flow_filter_t;

/* Flows by name. */
int ax_store_flow_list(ax_pg_t *pg, const ax_flow_filter_t *f, size_t limit, ax_flow_t **ret_rows,
                       size_t *ret_n, char *errbuf, size_t errlen);
/* Flow NAME; AX_ERR_NOTFOUND if none. */
int ax_store_flow_get(ax_pg_t *pg, const char *name, ax_flow_t *ret, char *errbuf, size_t errlen);
void ax_flow_clear(ax_flow_t *f);
void ax_flows_free(ax_flow_t *rows, size_t n);

typedef struct ax_flow_stage {
    char *name;
    char *job;
    char **deps; /* upstream stage names (ndeps of them) */
    size_t ndeps;
} ax_flow_stage_t;

/* Flow flow_id's stages by name, after after_name (NULL: from the first). */
int ax_store_flow_stages(ax_pg_t *pg, int64_t flow_id, const char *after_name, size_t limit,
                         ax_flow_stage_t **ret_rows, size_t *ret_n, char *errbuf, size_t errlen);
void ax_flow_stages_free(ax_flow_stage_t *rows, size_t n);

typedef struct ax_flow_stage_run {
    char *stage;
    char *state;         /* pending, running, succeeded, failed, skipped */
    int64_t instance_id; /* 0: not started */
} ax_flow_stage_run_t;

typedef struct ax_flow_run {
    int64_t id;
    char *state;      /* running, succeeded, failed */
    char *started_by; /* manual, schedule */
    char *started_at;
    char *finished_at;  /* NULL while running */
    char *nominal_time; /* the scheduled fire time that started it; NULL if none */
    ax_flow_stage_run_t *stages; /* by stage name */
    size_t nstages;
} ax_flow_run_t;

typedef struct ax_flow_run_filter {
    int64_t flow_id;   /* required */
    int64_t run_id;    /* only this run; 0: any */
    int64_t before_id; /* keyset: runs older than this one; 0: from the newest */
} ax_flow_run_filter_t;

/* A flow's runs, newest first, each with its stages' states. */
int ax_store_flow_runs(ax_pg_t *pg, const ax_flow_run_filter_t *f, size_t limit,
                       ax_flow_run_t **ret_rows, size_t *ret_n, char *errbuf, size_t errlen);
void ax_flow_runs_free(ax_flow_run_t *rows, size_t n);

#endif
