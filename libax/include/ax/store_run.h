/*
 * ax/store_run.h — the store family of an executor's instance transitions
 * (job_instance, and job.running_count for jobs with a concurrency limit):
 * claim (SCHEDULED -> LOCKED with a lease), start (LOCKED -> RUNNING),
 * lease renewal, cancel-request polls, and handing back claims that never
 * started. Every statement is a compare-and-set on (id, worker, state), so
 * a lost race changes nothing and is simply absent from the rows returned.
 *
 * Conventions (ax/store.h): returns 0 or an ax/common.h error
 * (AX_ERR_IO retry later, AX_ERR_INVALID bad data, ...) with the reason in
 * errbuf; nothing is logged. Row arrays are malloc'd, owned by the caller
 * and freed with free() (or the family's _free); on error *ret_rows is
 * NULL and *ret_n 0. Batches take arrays of instance ids.
 */
#ifndef AX_STORE_RUN_H
#define AX_STORE_RUN_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t; /* ax/pg.h */

/* A claim's lease: factor x the job's average run time, within [min, max]. */
typedef struct ax_run_lease {
    int64_t factor, min_ms, max_ms;
} ax_run_lease_t;

typedef struct ax_run_claimed {
    int64_t instance_id;
    int64_t lease_ms;
    int shard_index, shard_total;
    int probe; /* shard_mode = 'probe': run as the size probe */
    int32_t attempt;
} ax_run_claimed_t;

/* Claim every instance of ids[i] at attempts[i] (i < n) that is SCHEDULED
 * at that attempt and whose job has no concurrency limit: LOCKED by
 * `worker` with its lease. The rows are the instances won, in id order. */
int ax_run_claim(ax_pg_t *pg, const char *worker, const int64_t *ids, const int32_t *attempts,
                 size_t n, const ax_run_lease_t *lease, ax_run_claimed_t **ret_rows,
                 size_t *ret_n, char *errbuf, size_t errlen);

/* The row of instance `id` among rows[0..n) of `size` bytes each, sorted
 * by id as this family returns them (ax_run_claimed_t, ax_run_held_t: both
 * begin with their instance_id); NULL if absent. */
const void *ax_run_find(const void *rows, size_t n, size_t size, int64_t id);

typedef enum ax_run_limited {
    AX_RUN_LIMITED_GONE = 0, /* not SCHEDULED at that attempt: nothing changed */
    AX_RUN_LIMITED_CLAIMED,  /* LOCKED by worker, holding a slot of job.running_count */
    AX_RUN_LIMITED_NO_SLOT,  /* no free slot: handed back to the trigger, due in 500 ms */
} ax_run_limited_t;

/* Claim one instance, of a job with a concurrency limit (or one the batch
 * claim did not win), in one transaction on `pg`. On 0, *ret_result says
 * what happened and *ret_lease_ms is the lease when CLAIMED; on error the
 * transaction is rolled back and nothing changed. */
int ax_run_claim_limited(ax_pg_t *pg, const char *worker, int64_t id, int32_t attempt,
                         const ax_run_lease_t *lease, ax_run_limited_t *ret_result,
                         int64_t *ret_lease_ms, char *errbuf, size_t errlen);

/* An instance still ours after a start or renewal, and whether its
 * cancellation was requested. */
typedef struct ax_run_held {
    int64_t instance_id;
    int cancel_requested;
} ax_run_held_t;

/* LOCKED -> RUNNING for ids[0..n) held by worker; each lease becomes at
 * least lease_ms from now. Rows: the instances started, in id order. */
int ax_run_start(ax_pg_t *pg, const char *worker, const int64_t *ids, size_t n, int64_t lease_ms,
                 ax_run_held_t **ret_rows, size_t *ret_n, char *errbuf, size_t errlen);

/* Renew to lease_ms from now the leases of ids[0..n) held by worker
 * (LOCKED or RUNNING). Rows: the instances renewed, in id order; an id
 * missing is no longer ours. */
int ax_run_renew(ax_pg_t *pg, const char *worker, const int64_t *ids, size_t n, int64_t lease_ms,
                 ax_run_held_t **ret_rows, size_t *ret_n, char *errbuf, size_t errlen);

/* The ids among ids[0..n) held by worker (LOCKED or RUNNING) whose
 * cancellation was requested. */
int ax_run_cancel_requested(ax_pg_t *pg, const char *worker, const int64_t *ids, size_t n,
                            int64_t **ret_ids, size_t *ret_n, char *errbuf, size_t errlen);

/* Hand ids[0..n) LOCKED by worker back to SCHEDULED, with the concurrency
 * slots they hold, in one transaction. *ret_released (may be NULL): how
 * many instances went back. */
int ax_run_release(ax_pg_t *pg, const char *worker, const int64_t *ids, size_t n,
                   size_t *ret_released, char *errbuf, size_t errlen);

#endif
