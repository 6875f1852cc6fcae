/*
 * ax/store_lane.h — priority lanes in PostgreSQL (docs/PRIORITIES.md):
 * lane_status (lag, state and deferred count per lane, for axctl status
 * and a new leader), deferral marks, and the backlog caps of jobs.
 *
 * Returns 0 or an ax error (ax/store.h).
 */
#ifndef AX_STORE_LANE_H
#define AX_STORE_LANE_H

#include <stddef.h>
#include <stdint.h>

#include "ax/lane.h"

typedef struct ax_pg ax_pg_t; /* a connection (ax/pg.h) */

/* The error class of an instance failed by its job's backlog cap (set by
 * the trigger, finished by ax-callback; Attempt.kind BACKLOG_FULL). */
#define AX_ERROR_CLASS_BACKLOG_FULL "backlog_full"

/* One lane as stored in lane_status. */
typedef struct ax_lane_status {
    int lane;
    int64_t lag;
    int over;
    int64_t changed_ms; /* <= 0: unchanged (the stored time stays) */
    int64_t deferred;   /* out: SCHEDULED instances recorded as deferred */
} ax_lane_status_t;

/* The lanes a leader stored within the last minute (*ret_n of them, at most
 * AX_PRIORITIES; .deferred not read). */
int ax_store_lane_status_load(ax_pg_t *pg, const char *deployment,
                              ax_lane_status_t ret_v[AX_PRIORITIES], size_t *ret_n,
                              char *errbuf, size_t errlen);

/* Store v[0..n) (lag, over, changed) and fill in each lane's deferred
 * count, counted up to count_max. */
int ax_store_lane_status_save(ax_pg_t *pg, const char *deployment, ax_lane_status_t *v,
                              size_t n, int64_t count_max, char *errbuf, size_t errlen);

/* Per lane from since_ms[k] (epoch ms): record up to limit instances of
 * lanes[k] that fell due as deferred. Returns per lane how many were
 * marked and the last due_at marked. */
typedef struct ax_deferred_mark {
    int lane;
    int64_t marked;
    int64_t last_due_ms;
} ax_deferred_mark_t;
int ax_store_mark_deferred(ax_pg_t *pg, const int *lanes, const int64_t *since_ms, size_t n,
                           const char *deployment, int64_t limit,
                           ax_deferred_mark_t ret_marks[AX_PRIORITIES], size_t *ret_n,
                           char *errbuf, size_t errlen);


/* One instance failed by its job's backlog cap (to be announced). */
typedef struct ax_capped {
    int64_t id;
    int32_t attempt;
    char *trace_id;
    char *job;
    int64_t backlog_max;
} ax_capped_t;
typedef struct ax_capped_list {
    ax_capped_t *v;
    size_t n;
} ax_capped_list_t;
void ax_capped_list_free(ax_capped_list_t *l);

/* In the leader's transaction: mark the newest SCHEDULED instances beyond
 * each job's backlog cap (error class AX_ERROR_CLASS_BACKLOG_FULL), and
 * return them with the marks older than 5 s whose instance is still
 * SCHEDULED (to be announced again). */
int ax_store_backlog_cap(ax_pg_t *pg, const char *deployment, ax_capped_list_t *out,
                         char *errbuf, size_t errlen);

#endif
