/*
 * ax/store_ledger.h — the store's fire-ledger family: the leader records
 * each (job, nominal time) decision once (job_fire), and in the same
 * statement creates the instances of fired, queued and deferred times (or
 * starts a flow run), marking the ones to produce dispatch-pending; the
 * overlap look-up of unfinished runs and the cancel of overlap=cancel.
 *
 * All of it runs inside the leader's transaction (ax_pg_begin, the lease
 * check, then these, then ax_pg_commit on the same connection).
 * Errors as in ax/store.h. Nothing here logs.
 */
#ifndef AX_STORE_LEDGER_H
#define AX_STORE_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#include "ax/fire.h"
#include "ax/store_dispatch.h"

typedef struct ax_pg ax_pg_t;

/* One decision to record. */
typedef struct ax_ledger_fire {
    int64_t job_id;
    int64_t nominal_ms;
    ax_fire_decision_t decision;
    const char *detail;   /* NULL: none */
    int64_t wait_for;     /* queued: the instance it waits for, else 0 */
    int flow;             /* a flow job: a fired time starts a flow run */
} ax_ledger_fire_t;

/* An instance the record created (ledger rows already there create none). */
typedef struct ax_ledger_instance {
    int64_t instance_id;
    int64_t job_id;
    int64_t wait_for;     /* queued behind it, else 0 */
    int held;             /* not produced now: queued, deferred, a static shard parent */
} ax_ledger_instance_t;

typedef struct ax_ledger_result {
    ax_ledger_instance_t *v;
    size_t n;
    ax_dispatch_rows_t rows; /* the same instances to produce (.hold: held) */
} ax_ledger_result_t;

/* Record the n decisions of f[] under the leader's epoch for deployment,
 * and create their instances (instances of held rows are not marked
 * dispatch-pending). *ret gets what was created. */
int ax_store_ledger_record(ax_pg_t *pg, const ax_ledger_fire_t *f, size_t n, int64_t epoch,
                           const char *deployment, ax_ledger_result_t *ret, char *errbuf,
                           size_t errlen);
void ax_ledger_result_free(ax_ledger_result_t *r);

/* What of a job is unfinished, for its overlap policy. */
typedef struct ax_ledger_busy {
    int64_t job_id;
    int64_t last_id;  /* the newest unfinished instance (flow job: flow run) */
    char *what;       /* "12 RUNNING, 13 SCHEDULED" / "flow run 4 running" */
    int queued;       /* one of them is queued (waits, SCHEDULED) */
} ax_ledger_busy_t;

/* Of the n jobs, those with unfinished instances or (flow jobs) running
 * flow runs: *ret (free with ax_ledger_busy_free). */
int ax_store_ledger_busy(ax_pg_t *pg, const int64_t *job_ids, size_t n, ax_ledger_busy_t **ret,
                         size_t *ret_n, char *errbuf, size_t errlen);
void ax_ledger_busy_free(ax_ledger_busy_t *v, size_t n);

/* overlap=cancel: ask the unfinished instances of the n jobs to cancel. */
int ax_store_ledger_cancel_unfinished(ax_pg_t *pg, const int64_t *job_ids, size_t n,
                                      char *errbuf, size_t errlen);

#endif
