/*
 * ax/store_dispatch.h — the way of an instance to the dispatch topic:
 * ingest of submissions, the due scan, the pending-dispatch marks that
 * settle or undo a dispatch, and the lease sweep.
 *
 * A dispatch is marked in PostgreSQL before it is produced: the statement
 * that returns the rows sets dispatched_at and inserts one dispatch_batch
 * row holding their ids (with the leader's epoch; 018_hot_writes); after
 * the Kafka commit the batch is settled (deleted), after a failure undone
 * (the instances become undispatched again, the due scan retries them).
 *
 * Returns 0 or an ax error (ax/store.h). Output arrays are the caller's
 * and freed with their _free function (which accepts a zeroed struct).
 */
#ifndef AX_STORE_DISPATCH_H
#define AX_STORE_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "ax/lane.h"

typedef struct ax_pg ax_pg_t; /* a connection (ax/pg.h) */

/* One instance as the dispatch statements return it (the dispatch column
 * layout, also returned by the fire statement). Strings are malloc'd. */
typedef struct ax_dispatch_row {
    int64_t id;
    int32_t attempt;
    char *job;            /* NULL: an inline command */
    char *handler_kind;
    char *command_json;   /* the argv as a JSON array of strings; NULL: none */
    uint8_t *payload;     /* malloc'd (payload_len bytes) or NULL */
    size_t payload_len;
    int64_t timeout_ms;
    int64_t nominal_ms;   /* 0: not fired by a schedule */
    int64_t due_ms;
    int32_t priority;
    char *trace_id;
    char *idempotency_key;
    char *executor_group;
    char *routing_field;  /* NULL: none */
    int hold;             /* 1: marked nothing, not to be produced now */
} ax_dispatch_row_t;

typedef struct ax_dispatch_rows {
    ax_dispatch_row_t *v;
    size_t n;
} ax_dispatch_rows_t;
void ax_dispatch_rows_free(ax_dispatch_rows_t *rows);

/* ---- ingest --------------------------------------------------------------- */

/* One submission to insert. A job name, or argv_json (inline command). */
typedef struct ax_ingest_in {
    const char *job;
    const char *argv_json;   /* JSON array of strings, when job is NULL */
    const uint8_t *payload;
    size_t payload_len;
    int64_t timeout_ms;      /* <= 0: the job's, or the default */
    int priority;            /* < 0: the job's */
    int64_t run_at_ms;       /* <= 0: none */
    int64_t delay_ms;        /* < 0: none */
    const char *trace_id;
    const char *idempotency_key;
    const char *submit_key;  /* dedups redelivered submissions */
    /* a Kafka position's partition: its end offset as last fetched (<= 0:
     * unknown). A watermark above it, written before the batch was taken
     * (ax_ingest_ctx_t.taken_ms_ago), means the log was recreated or
     * truncated (offsets from 0 again): the watermark starts over. */
    int64_t log_end;
} ax_ingest_in_t;

/* What the ingest statement needs besides the submissions. */
typedef struct ax_ingest_ctx {
    const char *deployment;
    int64_t default_timeout_ms;
    /* per priority: the release plan's wait (INT64_MAX: held); a due-now
     * instance of a lane with a wait is recorded as deferred. NULL: none
     * (a standby never marks deferrals) */
    const int64_t *lane_wait_ms;
    /* the leader's lease (role, holder, epoch; epoch 0: a standby), checked
     * and locked FOR SHARE by the statement itself, which then commits on
     * its own when run outside a transaction block (the trigger's ingest
     * connection): a lease no longer held ingests as a standby's, nothing
     * marked dispatched or deferred (ax_ingest_out_t.fenced) */
    int64_t epoch;
    const char *role;
    const char *holder;
    /* per priority: 1 if a due-now instance is dispatched by the statement
     * itself (dispatch_batch, produced by the caller after commit) */
    const int *direct;
    /* how many ms ago the batch's first message was taken from the
     * consumer (0: just now). A watermark above a partition's log_end that
     * was written since is not an older log's but a newer owner's of the
     * partition (this consumer's cached end offset stood still after it
     * lost the partition): no start-over, the batch's positions below it
     * are duplicates. */
    int64_t taken_ms_ago;
} ax_ingest_ctx_t;

/* The inserted instances (rows[k].hold = 0: marked dispatched, to be
 * produced; 1: left for the due scan), with the submit key each came
 * from (submit_key[k], malloc'd). Duplicates and unknown jobs insert
 * nothing. */
typedef struct ax_ingest_out {
    ax_dispatch_rows_t rows;
    char **submit_key;
    /* epoch given and the lease found no longer held (known only when the
     * statement inserted a row: one inserting nothing never reads the
     * lease): nothing was marked dispatched */
    int fenced;
} ax_ingest_out_t;
void ax_ingest_out_free(ax_ingest_out_t *out);

int ax_store_ingest(ax_pg_t *pg, const ax_ingest_ctx_t *c, const ax_ingest_in_t *in, size_t n,
                    ax_ingest_out_t *out, char *errbuf, size_t errlen);

/* The jobs of these names that exist: whether each starts a flow and its
 * executor group (what an insert of nothing tells apart). */
typedef struct ax_ingest_job {
    char *name;
    int flow;
    char *executor_group;
} ax_ingest_job_t;
typedef struct ax_ingest_jobs {
    ax_ingest_job_t *v;
    size_t n;
} ax_ingest_jobs_t;
void ax_ingest_jobs_free(ax_ingest_jobs_t *jobs);
int ax_store_ingest_jobs(ax_pg_t *pg, const char *const *names, size_t n, ax_ingest_jobs_t *out,
                         char *errbuf, size_t errlen);

/* ---- due scan (in the leader's transaction) -------------------------------- */

/* Statically sharded parents due now become their shards (at most limit). */
int ax_store_due_expand_shards(ax_pg_t *pg, const char *deployment, int64_t limit, char *errbuf,
                               size_t errlen);

/* The release plan of the due scan. */
typedef struct ax_due_plan {
    const char *deployment;
    int64_t limit;                      /* candidates per lane at most */
    const int64_t *wait_ms;             /* [AX_PRIORITIES], INT64_MAX: held */
    const int *target;                  /* [AX_PRIORITIES]: the lane it goes out on */
    const int64_t *room;                /* [AX_PRIORITIES] per lane */
} ax_due_plan_t;

/* Lock (FOR UPDATE SKIP LOCKED) and return the candidates of the due scan:
 * per priority whose wait has passed, the oldest due first, at most
 * min(limit, room of its target lane). The caller picks from them
 * (ax_lane_pick) and marks the picked ones in the same transaction. */
int ax_store_due_candidates(ax_pg_t *pg, const ax_due_plan_t *plan, ax_lane_cand_t **ret_v,
                            size_t *ret_n, char *errbuf, size_t errlen);

/* Mark ids[] dispatched with one dispatch_batch row of this epoch; returns
 * their rows. */
int ax_store_due_mark(ax_pg_t *pg, const int64_t *ids, size_t n, int64_t epoch,
                      const char *deployment, ax_dispatch_rows_t *out, char *errbuf,
                      size_t errlen);

/* In how many ms the next instance the plan lets go falls due (<= 0: due
 * now); *ret_ms = INT64_MAX when none waits. */
int ax_store_due_next(ax_pg_t *pg, const char *deployment, const int64_t *wait_ms,
                      int64_t *ret_ms, char *errbuf, size_t errlen);

/* ---- settle, undo, recovery -------------------------------------------------- */

/* After the Kafka commit: ids[] leave the deployment's pending batches (a
 * batch whose ids are all among them is deleted, one row). */
int ax_store_pending_settle(ax_pg_t *pg, const char *deployment, const int64_t *ids, size_t n,
                            char *errbuf, size_t errlen);

/* Which dispatches to undo: those of ids[] in the deployment's pending
 * batches (the Kafka transaction failed: nothing of it is visible), or,
 * with ids NULL, every pending batch of the deployment of an epoch below
 * `epoch` or older than a minute (what a
 * failed or abandoned transaction left; also a previous release's
 * dispatch_pending rows). */
typedef struct ax_pending_undo {
    const int64_t *ids;
    size_t n;
    const char *deployment;
    int64_t epoch;
} ax_pending_undo_t;

/* Make the instances undispatched again (those still SCHEDULED go back to
 * the due scan). *ret_again (if non-NULL) receives how many of the
 * recovered are SCHEDULED again (recovery only; 0 for ids). */
int ax_store_pending_undo(ax_pg_t *pg, const ax_pending_undo_t *u, int64_t *ret_again,
                          char *errbuf, size_t errlen);

/* Dispatches nobody claimed for after_ms (not held): undispatched, so the
 * due scan produces them again; at most limit. *ret_n: how many. */
int ax_store_redispatch_unclaimed(ax_pg_t *pg, const char *deployment, int64_t after_ms,
                                  int64_t limit, int64_t *ret_n, char *errbuf, size_t errlen);

/* ---- lease sweep -------------------------------------------------------------- */

/* An instance whose lease expired while its worker is gone (heartbeat
 * older than stale_ms, or stopped) or for 10 minutes. */
typedef struct ax_lost_lease {
    int64_t id;
    int32_t attempt;
    char *trace_id;
    char *worker;       /* "" if none */
    int64_t started_ms; /* running_at, else locked_at */
} ax_lost_lease_t;
typedef struct ax_lost_leases {
    ax_lost_lease_t *v;
    size_t n;
} ax_lost_leases_t;
void ax_lost_leases_free(ax_lost_leases_t *l);
int ax_store_lost_leases(ax_pg_t *pg, const char *deployment, int64_t stale_ms, int64_t limit,
                         ax_lost_leases_t *out, char *errbuf, size_t errlen);

/* Push the leases of ids[] out by 60 s (their TIMEOUT is on its way). */
int ax_store_lease_push(ax_pg_t *pg, const int64_t *ids, size_t n, char *errbuf, size_t errlen);

#endif
