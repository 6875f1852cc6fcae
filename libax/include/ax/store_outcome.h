/*
 * ax/store_outcome.h — how attempts end (tables job_instance, job_attempt,
 * job; infra/migrations): ax-callback's finish statement (the CAS fenced by
 * instance and attempt that persists a batch of results), the job rows it
 * then updates (run statistics, concurrency slots, the circuit breaker),
 * what the retry and size-probe policies need to know of each instance's
 * job, and the shards and flow runs an ended instance advances.
 *
 * A batch is persisted in one transaction (ax_pg_begin on the same
 * connection): ax_store_outcome_finish, then the shards, probes and flows
 * it advances, then ax_store_outcome_jobs last (the job rows stay locked
 * only until the commit that follows). ax_store_outcome_finish_begin and
 * ax_store_outcome_jobs_commit do the same with the BEGIN and the COMMIT
 * in the statements' round trips.
 *
 * Functions return 0 (or a count) or an ax error (ax/common.h): AX_ERR_IO
 * retry later, AX_ERR_INVALID / AX_ERR_CONFLICT bad data in the batch; the
 * reason in errbuf. Rows come back malloc'd and are the caller's: free them
 * with the matching _free (which accepts NULL / zeroed results).
 */
#ifndef AX_STORE_OUTCOME_H
#define AX_STORE_OUTCOME_H

#include <stddef.h>
#include <stdint.h>

#include "ax/codec.h"

typedef struct ax_pg ax_pg_t;

/* ---- the finish statement ------------------------------------------------------------ */

/* One result to persist. An instance cut by the trigger's backlog cap
 * (error_class "backlog_full", worker "ax-trigger") or cancelled by axctl
 * (error_class "cancelled", worker "axctl") is finished from SCHEDULED;
 * any other from LOCKED or RUNNING. */
typedef struct ax_outcome_in {
    int64_t instance_id;
    int32_t attempt;
    ax_outcome_t outcome;
    int exit_code_set;
    int32_t exit_code;
    const char *error_class; /* NULL = none */
    const char *error;
    const char *output;
    const char *worker;
    int64_t started_ms; /* <= 0: not known */
    int64_t retry_ms;   /* >= 0: retried after this long (SCHEDULED, next attempt); < 0: final */
} ax_outcome_in_t;

/* Per job of the batch: what ax_store_outcome_jobs applies. */
typedef struct ax_outcome_jobstat {
    int64_t job_id;
    int64_t slots; /* concurrency slots given back */
    int64_t n;     /* results that count as runs */
    int64_t ok;    /* successes */
    int64_t bad;   /* failures (neither cancelled nor cut by the backlog cap) */
    int has_mean;
    double mean_ms; /* mean run time of those that ran, when has_mean */
} ax_outcome_jobstat_t;

typedef struct ax_outcome_ended {
    int64_t instance_id;
    int retried; /* rescheduled as its next attempt, not finished */
} ax_outcome_ended_t;

typedef struct ax_outcome_flow {
    int64_t instance_id; /* a flow stage's instance that ended for good */
    int ok;              /* with SUCCESS */
} ax_outcome_flow_t;

/* An instance ended for good, its result as ax_store_outbox_pending would
 * read it after the commit (the strings malloc'd), and the results batch
 * row (ax_result_batch) the statement put it in. */
typedef struct ax_outcome_result {
    int64_t batch;
    int present; /* as ax_outbox_row_t's */
    ax_result_t res;
} ax_outcome_result_t;

typedef struct ax_outcome_finished {
    ax_outcome_ended_t *ended; /* the results that ended their attempt (others were stale) */
    size_t nended;
    ax_outcome_flow_t *flows;
    size_t nflows;
    int64_t *children; /* shards that ended for good (their parent may be done) */
    size_t nchildren;
    ax_outcome_jobstat_t *jobs;
    size_t njobs;
    ax_outcome_result_t *results; /* only when asked for; the caller may take them (zero
                                     what it takes) */
    size_t nresults;
} ax_outcome_finished_t;

/* Persist in[0..n) (n > 0, any order) in one statement: each result's
 * instance CAS'd to FINISHED (or SCHEDULED for a retry) if it is still at
 * that attempt, its attempt (on the state row when final, else a
 * job_attempt_log row), and what ended for good into the results outbox:
 * one batch row for the instances of `deployment` (the caller's
 * topic.prefix, "" included; NULL is AX_ERR_INVALID), a per-instance outbox
 * row for each of another deployment (its own publisher's).
 * Stale and duplicate results match nothing. *ret describes what changed;
 * with `results`, ret->results holds the results of what ended for good. */
int ax_store_outcome_finish(ax_pg_t *pg, const char *deployment, const ax_outcome_in_t *in,
                            size_t n, int results, ax_outcome_finished_t *ret, char *errbuf,
                            size_t errlen);
/* The same, beginning the batch's transaction in the same round trip
 * (BEGIN and the statement in one libpq pipeline): call it with no
 * transaction open; on success the transaction is open, on failure the
 * caller rolls back (ax_pg_rollback) as after ax_pg_begin. */
int ax_store_outcome_finish_begin(ax_pg_t *pg, const char *deployment, const ax_outcome_in_t *in,
                                  size_t n, int results, ax_outcome_finished_t *ret,
                                  char *errbuf, size_t errlen);
void ax_outcome_finished_free(ax_outcome_finished_t *f);

/* A job whose circuit the batch opened (for the alert). */
typedef struct ax_outcome_opened {
    char *job;
    int64_t consecutive_failures;
} ax_outcome_opened_t;

/* Apply jobs[0..n) (n > 0): slots given back, runs and mean run time, and
 * the circuit breaker — in SQL, as ax_circuit_on_results() (ax/circuit.h)
 * decides it. *ret_opened (*ret_nopened) lists circuits opened now. */
int ax_store_outcome_jobs(ax_pg_t *pg, const ax_outcome_jobstat_t *jobs, size_t n,
                          ax_outcome_opened_t **ret_opened, size_t *ret_nopened, char *errbuf,
                          size_t errlen);
/* The same, then COMMIT, in one round trip (one libpq pipeline): 0 when
 * both succeeded; on failure the transaction is aborted or gone, and the
 * caller rolls back (ax_pg_rollback) as after a failed ax_pg_commit. */
int ax_store_outcome_jobs_commit(ax_pg_t *pg, const ax_outcome_jobstat_t *jobs, size_t n,
                                 ax_outcome_opened_t **ret_opened, size_t *ret_nopened,
                                 char *errbuf, size_t errlen);
void ax_outcome_opened_free(ax_outcome_opened_t *v, size_t n);

/* ---- what the policies read ---------------------------------------------------------- */

/* The retry policy of a running instance's job. */
typedef struct ax_outcome_retry_job {
    int64_t instance_id;
    int32_t attempt;
    int32_t retry_max;
    int64_t initial_ms;
    double multiplier;
    int64_t max_ms;
    int64_t jitter_ms;
    char *rules; /* the job's retry_rules (JSON text), NULL if none */
    char *job;   /* the job's name */
} ax_outcome_retry_job_t;

typedef struct ax_outcome_retry_jobs {
    ax_outcome_retry_job_t *rows;
    size_t n;
    /* retries pending in the deployment (SCHEDULED, attempt > 1), counted
     * only up to budget + 1 */
    int64_t pending;
} ax_outcome_retry_jobs_t;

/* The instances of ids[0..n) still LOCKED or RUNNING that have a job. */
int ax_store_outcome_retry_jobs(ax_pg_t *pg, const int64_t *ids, size_t n,
                                const char *deployment, int64_t budget,
                                ax_outcome_retry_jobs_t *ret, char *errbuf, size_t errlen);
void ax_outcome_retry_jobs_free(ax_outcome_retry_jobs_t *r);

/* A size probe's parent (dynamic sharding) still waiting for its probe. */
typedef struct ax_outcome_probe_job {
    int64_t instance_id;
    int32_t attempt;
    int64_t shard_base;
    int64_t max_shards;
} ax_outcome_probe_job_t;

int ax_store_outcome_probe_jobs(ax_pg_t *pg, const int64_t *ids, size_t n,
                                ax_outcome_probe_job_t **ret, size_t *ret_n, char *errbuf,
                                size_t errlen);

/* ---- shards and flows, in the batch's transaction ------------------------------------ */

/* Shards that ended for good: *ret_parents (*ret_n) gets the parents
 * their last shard finished (malloc'd; free()). */
int ax_store_outcome_shards_done(ax_pg_t *pg, const int64_t *children, size_t n,
                                 int64_t **ret_parents, size_t *ret_n, char *errbuf,
                                 size_t errlen);

/* A successful size probe: its parent splits into `shards` shards. */
typedef struct ax_outcome_probe {
    int64_t instance_id;
    int64_t shards;
    const char *worker;
    int64_t started_ms;
} ax_outcome_probe_t;

/* Record each probe's attempt and split its parent (a probe of 0 shards
 * finishes the parent at once). */
int ax_store_outcome_probes_split(ax_pg_t *pg, const ax_outcome_probe_t *p, size_t n,
                                  char *errbuf, size_t errlen);

/* Flow stages whose instance ended for good: the flow runs advance. */
int ax_store_outcome_flows_done(ax_pg_t *pg, const ax_outcome_flow_t *f, size_t n, char *errbuf,
                                size_t errlen);

/* Wake the trigger (NOTIFY ax_due): retries are due in its scan. */
int ax_store_outcome_notify_due(ax_pg_t *pg, const char *deployment, char *errbuf,
                                size_t errlen);

#endif
