/*
 * ax/store_fleet.h — the fleet as operators see it (axctl workers, axctl
 * status; the REST API next): executors from their heartbeat rows (table
 * worker) with their pools, the leader trigger's lease (ax_leader) and
 * the standby triggers' heartbeats (trigger_member), and
 * per lane the lag the leader measured (lane_status) with the instances
 * deferred now.
 *
 * Functions return 0 or an ax error (ax/common.h): AX_ERR_NOTFOUND nothing
 * there, AX_ERR_IO retry later; the reason in errbuf. Rows are malloc'd
 * and the caller's: free arrays with the matching _free, one row with its
 * _clear (both accept NULL / zeroed rows). Times are epoch ms, ages ms.
 */
#ifndef AX_STORE_FLEET_H
#define AX_STORE_FLEET_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t;

/* ---- executors --------------------------------------------------------------------- */

/* One handler pool of an executor as its last heartbeat reported it;
 * -1: a figure it did not report. */
typedef struct ax_worker_pool {
    char *name;
    int64_t running, slots, waiting, queue;
} ax_worker_pool_t;

typedef struct ax_worker {
    char *id;
    char *state;          /* running, draining, stopped; "lost" (see the filter) */
    int64_t age_ms;       /* since its last heartbeat, >= 0 */
    int64_t heartbeat_ms; /* its last heartbeat */
    char **groups;        /* the executor groups it serves (ngroups) */
    size_t ngroups;
    double cpu_pct, mem_pct; /* of its machine; < 0: not reported */
    int64_t rss_bytes;       /* of its process; -1: not reported */
    int64_t running, waiting;
    int fetching; /* 0 while above a watermark or draining */
    ax_worker_pool_t *pools; /* by name (npools) */
    size_t npools;
} ax_worker_t;

typedef struct ax_worker_filter {
    int include_silent;    /* 0: only those heard from within the last minute */
    int64_t lost_after_ms; /* silent longer than this and not stopped: state "lost" */
} ax_worker_filter_t;

/* Workers, the most recently heard from first (then by id). */
int ax_store_fleet_workers(ax_pg_t *pg, const ax_worker_filter_t *f, size_t limit,
                           ax_worker_t **ret_rows, size_t *ret_n, char *errbuf, size_t errlen);
void ax_workers_free(ax_worker_t *rows, size_t n);

/* ---- leader ------------------------------------------------------------------------ */

typedef struct ax_leader_info {
    char *holder;
    int64_t epoch;
    int64_t lease_left_ms; /* >= 0 */
} ax_leader_info_t;

/* The holder of role's lease (<topic.prefix>trigger); AX_ERR_NOTFOUND if
 * no lease runs (no leader). */
int ax_store_fleet_leader(ax_pg_t *pg, const char *role, ax_leader_info_t *ret, char *errbuf,
                          size_t errlen);
void ax_leader_info_clear(ax_leader_info_t *l);

/* A trigger of the role that does not lead, from its heartbeat row
 * (trigger_member, written at every lease tick of every trigger). */
typedef struct ax_standby {
    char *holder;         /* as the lease would name it: <worker id>/<random> */
    int64_t started_ms;   /* its first heartbeat */
    int64_t heartbeat_ms; /* its last */
    int64_t age_ms;       /* since its last, >= 0 */
    int lost;             /* silent longer than lost_after_ms */
} ax_standby_t;

/* A trigger beats every lease tick (trigger.lease.ms / 3, at most a
 * second): three missed beats make it lost. */
static inline int64_t ax_standby_lost_after_ms(int64_t lease_ms) {
    return 3 * (lease_ms / 3 < 1000 ? lease_ms / 3 : 1000);
}

/* The standbys of role heard from within the last minute, at most limit,
 * the longest running first. */
int ax_store_fleet_standbys(ax_pg_t *pg, const char *role, int64_t lost_after_ms, size_t limit,
                            ax_standby_t **ret_rows, size_t *ret_n, char *errbuf,
                            size_t errlen);
void ax_standbys_free(ax_standby_t *rows, size_t n);

/* ---- lanes ------------------------------------------------------------------------- */

typedef struct ax_lane_view {
    int lane;                /* 0..4: P0..P4 */
    int measured;            /* 0: the leader has not measured it (the next four unset) */
    int64_t lag;             /* the executor group's lag, as last measured */
    int over;                /* 1: deferring (lag above the high mark), 0: flowing */
    int64_t changed_ms;      /* since when in that state; 0: unknown */
    int64_t measured_ago_ms; /* age of the measurement */
    int64_t deferred;        /* instances deferred now */
    int64_t oldest_deferred_ms; /* age of the oldest of them; -1: none */
} ax_lane_view_t;

/* Every lane of deployment (its topic.prefix), P0 first: up to max of
 * them in out[], *ret_n how many. */
int ax_store_fleet_lanes(ax_pg_t *pg, const char *deployment, ax_lane_view_t *out, size_t max,
                         size_t *ret_n, char *errbuf, size_t errlen);

#endif
