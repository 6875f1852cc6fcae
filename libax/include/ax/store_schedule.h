/*
 * ax/store_schedule.h — the store's schedule family: what the trigger's
 * timing wheel loads from the job table (with each job's last ledger row
 * and that row's instance), the jobs gone from it, fixed-delay waits, and
 * the job-change notifications (LISTEN ax_job / ax_due).
 *
 * Errors as in ax/store.h. Nothing here logs.
 */
#ifndef AX_STORE_SCHEDULE_H
#define AX_STORE_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "ax/cron.h"
#include "ax/fire.h"
#include "ax/schedule.h"

typedef struct ax_pg ax_pg_t;

/* One job as the wheel arms it. Strings point into the result and stay
 * valid until ax_sched_jobs_free(). */
typedef struct ax_sched_job {
    int64_t id, version;
    int scheduled;            /* enabled, with a schedule: else drop it */
    int kind;                 /* ax_sched_kind_t; -1 if the name is unknown */
    const char *expr;         /* cron expression, or NULL */
    const char *time_zone;
    ax_dst_policy_t dst;
    int64_t interval_ms;      /* 0 if none */
    int64_t anchor_ms;        /* start_at, else schedule_from */
    int64_t from_ms;          /* schedule_from */
    ax_fire_policy_t policy;  /* misfire, overlap, threshold, catch-up max */
    int has_last;             /* the job has a ledger row */
    int64_t last_nominal_ms;  /* its newest nominal time */
    int64_t last_instance_id; /* that row's instance, 0 if none (skipped) */
    int last_finished;        /* that instance is FINISHED */
    int64_t last_finished_ms; /* when (rounded up to the ms) */
    int flow;                 /* a flow job: a fire starts a flow run */
    int priority;             /* as stored (the caller checks the range) */
    int32_t tolerance_ms;
} ax_sched_job_t;

typedef struct ax_sched_jobs {
    ax_sched_job_t *v;
    size_t n;
    void *res_; /* private */
} ax_sched_jobs_t;

/* The jobs of `deployment` to arm: ids == NULL every enabled job with a
 * schedule; else the listed ones (n ids) whatever their state (scheduled
 * tells). Jobs missing from the table are missing from the result. */
int ax_store_schedule_load(ax_pg_t *pg, const int64_t *ids, size_t n, const char *deployment,
                           ax_sched_jobs_t *ret, char *errbuf, size_t errlen);
void ax_sched_jobs_free(ax_sched_jobs_t *jobs);

/* Of the n job ids, those not (or no longer) in the job table of
 * deployment: *ret_ids (malloc'd, free()) gets *ret_n of them. */
int ax_store_schedule_missing(ax_pg_t *pg, const int64_t *ids, size_t n, const char *deployment,
                              int64_t **ret_ids, size_t *ret_n, char *errbuf, size_t errlen);

/* A fixed-delay job's instance that finished. */
typedef struct ax_sched_finished {
    int64_t job_id, instance_id;
    int64_t finished_ms; /* rounded up to the ms */
} ax_sched_finished_t;

/* Of the n instance ids, those FINISHED: *ret (malloc'd, free()). */
int ax_store_schedule_finished(ax_pg_t *pg, const int64_t *instance_ids, size_t n,
                               ax_sched_finished_t **ret, size_t *ret_n, char *errbuf,
                               size_t errlen);

/* LISTEN on this session for job changes (ax_job: the job id) and due
 * retries (ax_due: the deployment). Again after every reconnection. */
int ax_store_schedule_listen(ax_pg_t *pg, char *errbuf, size_t errlen);
int ax_store_schedule_unlisten(ax_pg_t *pg, char *errbuf, size_t errlen);

typedef enum { AX_SCHED_NOTIFY_JOB, AX_SCHED_NOTIFY_DUE } ax_sched_notify_t;
/* Called per notification received; payload is its text. */
typedef void (*ax_sched_notify_fn)(ax_sched_notify_t what, const char *payload, void *arg);
/* Read what arrived without blocking and hand each notification to fn.
 * Returns how many, or AX_ERR_IO (the connection is bad). */
int ax_store_schedule_notifies(ax_pg_t *pg, ax_sched_notify_fn fn, void *arg);

#endif
