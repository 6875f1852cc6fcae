/*
 * fleet.c — the statements of the fleet views (ax/store_fleet.h).
 */
#include <stdlib.h>
#include <string.h>

#include "ax/store_fleet.h"
#include "store_int.h"
#include "strlist.h"

/* A pool figure of the heartbeat's JSON as a bigint; NULL unless a plain
 * non-negative integer. */
#define POOL_INT(k)                                                                          \
    "CASE WHEN p.value->>'" k "' ~ '^[0-9]{1,18}$' THEN (p.value->>'" k "')::bigint END"

/* One row per (worker, pool), workers without pools once with a NULL
 * pool; `limit` counts workers. A worker whose heartbeat stopped (older
 * than $2 ms, the trigger's rule for a lost executor: 3 heartbeats)
 * without it saying "stopped" is lost. */
enum {
    W_ID,
    W_STATE,
    W_AGE,
    W_HEARTBEAT,
    W_GROUPS,
    W_CPU,
    W_MEM,
    W_RSS,
    W_RUNNING,
    W_WAITING,
    W_FETCHING,
    W_POOL,
    W_POOL_RUNNING,
    W_POOL_SLOTS,
    W_POOL_WAITING,
    W_POOL_QUEUE
};
AX_STMT(st_workers, "fleet.workers",
        "WITH w AS (SELECT w.id, CASE WHEN w.state <> 'stopped'"
        "   AND w.heartbeat_at < now() - $2::bigint * interval '1 millisecond' THEN 'lost'"
        "   ELSE w.state END AS state,"
        "  greatest((extract(epoch FROM now() - w.heartbeat_at) * 1000)::bigint, 0) AS age_ms,"
        "  floor(extract(epoch FROM w.heartbeat_at) * 1000)::bigint AS heartbeat_ms,"
        "  array_to_string(w.groups, ',') AS groups, w.cpu_pct, w.mem_pct, w.rss_bytes,"
        "  w.running, w.waiting, w.fetching, w.heartbeat_at,"
        "  CASE WHEN jsonb_typeof(w.pools) = 'object' THEN w.pools ELSE '{}'::jsonb END AS pools"
        " FROM worker w WHERE $1::boolean OR w.heartbeat_at > now() - interval '1 minute'"
        " ORDER BY w.heartbeat_at DESC, w.id LIMIT $3::bigint)"
        " SELECT w.id, w.state, w.age_ms, w.heartbeat_ms, w.groups, w.cpu_pct::float8,"
        "  w.mem_pct::float8, w.rss_bytes, w.running, w.waiting, w.fetching, p.key,"
        "  " POOL_INT("running") ", " POOL_INT("slots") ", " POOL_INT("waiting") ","
        "  " POOL_INT("queue")
        " FROM w LEFT JOIN LATERAL jsonb_each(w.pools) p ON true"
        " ORDER BY w.heartbeat_at DESC, w.id, p.key");

enum { L_HOLDER, L_EPOCH, L_LEFT };
AX_STMT(st_leader, "fleet.leader",
        "SELECT holder, epoch,"
        "  greatest((extract(epoch FROM expires_at - now()) * 1000)::bigint, 0)"
        " FROM ax_leader WHERE role = $1 AND expires_at > now()");

/* The triggers of role heard from within the last minute that do not
 * hold its lease now (trigger_member, ax_leader), the longest running
 * first; silent for longer than $2 ms: lost. */
enum { S_HOLDER, S_STARTED, S_SEEN, S_AGE, S_LOST };
AX_STMT(st_standbys, "fleet.standbys",
        "SELECT m.holder, floor(extract(epoch FROM m.started_at) * 1000)::bigint,"
        "  floor(extract(epoch FROM m.heartbeat_at) * 1000)::bigint,"
        "  greatest((extract(epoch FROM now() - m.heartbeat_at) * 1000)::bigint, 0),"
        "  m.heartbeat_at < now() - $2::bigint * interval '1 millisecond'"
        " FROM trigger_member m WHERE m.role = $1"
        " AND m.heartbeat_at > now() - interval '1 minute'"
        " AND NOT EXISTS (SELECT 1 FROM ax_leader l WHERE l.role = m.role"
        "   AND l.holder = m.holder AND l.expires_at > now())"
        " ORDER BY m.started_at, m.holder LIMIT $3::bigint");

/* Per lane: the executor group's lag as the leader trigger last measured
 * it (lane_status), whether the lane defers, since when, and the deferred
 * instances counted now. */
enum { LN_LANE, LN_MEASURED, LN_LAG, LN_OVER, LN_CHANGED, LN_AGO, LN_DEFERRED, LN_OLDEST };
AX_STMT(st_lanes, "fleet.lanes",
        "WITH l AS (SELECT generate_series(0, 4) AS lane),"
        " d AS (SELECT priority AS lane, count(*) AS n,"
        "   greatest((extract(epoch FROM now() - min(deferred_at)) * 1000)::bigint, 0) AS oldest"
        "   FROM instance_state WHERE queued"
        "   AND deferred_at IS NOT NULL AND deployment = $1 GROUP BY priority)"
        " SELECT l.lane, s.lane IS NOT NULL, s.lag, s.over,"
        "  floor(extract(epoch FROM s.changed_at) * 1000)::bigint,"
        "  greatest((extract(epoch FROM now() - s.updated_at) * 1000)::bigint, 0),"
        "  coalesce(d.n, 0), coalesce(d.oldest, -1)"
        " FROM l LEFT JOIN lane_status s ON s.lane = l.lane AND s.deployment = $1"
        " LEFT JOIN d ON d.lane = l.lane ORDER BY l.lane");

static int nomem(char *errbuf, size_t errlen, const char *what) {
    return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", what);
}

static int64_t int_or(const PGresult *r, int i, int c, int64_t none) {
    return ax_pg_str(r, i, c) ? ax_pg_int(r, i, c) : none;
}

static double real_or(const PGresult *r, int i, int c, double none) {
    const char *s = ax_pg_str(r, i, c);
    return s ? strtod(s, NULL) : none;
}

/* ---- executors --------------------------------------------------------------------- */

void ax_workers_free(ax_worker_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++) {
        free(rows[i].id);
        free(rows[i].state);
        ax__strlist_free(rows[i].groups, rows[i].ngroups);
        for (size_t k = 0; k < rows[i].npools; k++)
            free(rows[i].pools[k].name);
        free(rows[i].pools);
    }
    free(rows);
}

static int worker_row(const PGresult *r, int i, ax_worker_t *w) {
    *w = (ax_worker_t){
        .id = ax_pg_strdup(r, i, W_ID),
        .state = ax_pg_strdup(r, i, W_STATE),
        .age_ms = ax_pg_int(r, i, W_AGE),
        .heartbeat_ms = ax_pg_int(r, i, W_HEARTBEAT),
        .cpu_pct = real_or(r, i, W_CPU, -1),
        .mem_pct = real_or(r, i, W_MEM, -1),
        .rss_bytes = int_or(r, i, W_RSS, -1),
        .running = ax_pg_int(r, i, W_RUNNING),
        .waiting = ax_pg_int(r, i, W_WAITING),
        .fetching = ax_pg_bool(r, i, W_FETCHING),
    };
    if (!w->id || !w->state)
        return AX_ERR_NOMEM;
    return ax__strlist_split(ax_pg_str(r, i, W_GROUPS), ',', &w->groups, &w->ngroups);
}

static int pool_row(const PGresult *r, int i, ax_worker_t *w) {
    ax_worker_pool_t *np = realloc(w->pools, (w->npools + 1) * sizeof *np);
    if (!np)
        return AX_ERR_NOMEM;
    w->pools = np;
    np[w->npools] = (ax_worker_pool_t){
        .name = ax_pg_strdup(r, i, W_POOL),
        .running = int_or(r, i, W_POOL_RUNNING, -1),
        .slots = int_or(r, i, W_POOL_SLOTS, -1),
        .waiting = int_or(r, i, W_POOL_WAITING, -1),
        .queue = int_or(r, i, W_POOL_QUEUE, -1),
    };
    return np[w->npools++].name ? 0 : AX_ERR_NOMEM;
}

/* Fold the (worker, pool) rows of r into workers; *ret_n of them. */
static int fold_workers(const PGresult *r, ax_worker_t **ret_rows, size_t *ret_n) {
    int nr = PQntuples(r);
    ax_worker_t *rows = nr ? calloc((size_t)nr, sizeof *rows) : NULL;
    size_t n = 0;
    int rc = nr && !rows ? AX_ERR_NOMEM : 0;
    for (int i = 0; rc == 0 && i < nr; i++) {
        if (n == 0 || strcmp(rows[n - 1].id, ax_pg_str(r, i, W_ID)) != 0)
            rc = worker_row(r, i, &rows[n++]);
        if (rc == 0 && ax_pg_str(r, i, W_POOL))
            rc = pool_row(r, i, &rows[n - 1]);
    }
    if (rc < 0) {
        ax_workers_free(rows, n);
        return rc;
    }
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

int ax_store_fleet_workers(ax_pg_t *pg, const ax_worker_filter_t *f, size_t limit,
                           ax_worker_t **ret_rows, size_t *ret_n, char *errbuf, size_t errlen) {
    ax_num_t n_lost, n_limit;
    const char *p[] = {f->include_silent ? "true" : "false", ax_num(&n_lost, f->lost_after_ms),
                       ax_num(&n_limit, limit > (size_t)INT64_MAX ? INT64_MAX : (int64_t)limit)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_workers, 3, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    rc = fold_workers(r, ret_rows, ret_n);
    PQclear(r);
    return rc < 0 ? nomem(errbuf, errlen, "fleet.workers") : 0;
}

/* ---- leader ------------------------------------------------------------------------ */

void ax_leader_info_clear(ax_leader_info_t *l) {
    if (!l)
        return;
    free(l->holder);
    memset(l, 0, sizeof *l);
}

int ax_store_fleet_leader(ax_pg_t *pg, const char *role, ax_leader_info_t *ret, char *errbuf,
                          size_t errlen) {
    const char *p[] = {role};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_leader, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (PQntuples(r) != 1) {
        rc = ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no leader for %s", role);
    } else {
        *ret = (ax_leader_info_t){.holder = ax_pg_strdup(r, 0, L_HOLDER),
                                  .epoch = ax_pg_int(r, 0, L_EPOCH),
                                  .lease_left_ms = ax_pg_int(r, 0, L_LEFT)};
        if (!ret->holder && ax_pg_str(r, 0, L_HOLDER))
            rc = nomem(errbuf, errlen, "fleet.leader");
    }
    PQclear(r);
    return rc;
}

void ax_standbys_free(ax_standby_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++)
        free(rows[i].holder);
    free(rows);
}

int ax_store_fleet_standbys(ax_pg_t *pg, const char *role, int64_t lost_after_ms, size_t limit,
                            ax_standby_t **ret_rows, size_t *ret_n, char *errbuf,
                            size_t errlen) {
    ax_num_t n_lost, n_limit;
    const char *p[] = {role, ax_num(&n_lost, lost_after_ms),
                       ax_num(&n_limit, limit > (size_t)INT64_MAX ? INT64_MAX : (int64_t)limit)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_standbys, 3, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    int nr = PQntuples(r);
    ax_standby_t *rows = nr ? calloc((size_t)nr, sizeof *rows) : NULL;
    size_t n = 0;
    for (int i = 0; rows && i < nr; i++, n++) {
        rows[n] = (ax_standby_t){.holder = ax_pg_strdup(r, i, S_HOLDER),
                                 .started_ms = ax_pg_int(r, i, S_STARTED),
                                 .heartbeat_ms = ax_pg_int(r, i, S_SEEN),
                                 .age_ms = ax_pg_int(r, i, S_AGE),
                                 .lost = ax_pg_bool(r, i, S_LOST)};
        if (!rows[n].holder)
            break;
    }
    PQclear(r);
    if (nr && (!rows || n < (size_t)nr)) {
        ax_standbys_free(rows, n);
        return nomem(errbuf, errlen, "fleet.standbys");
    }
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

/* ---- lanes ------------------------------------------------------------------------- */

int ax_store_fleet_lanes(ax_pg_t *pg, const char *deployment, ax_lane_view_t *out, size_t max,
                         size_t *ret_n, char *errbuf, size_t errlen) {
    const char *p[] = {deployment};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_lanes, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t n = 0;
    for (int i = 0; i < PQntuples(r) && n < max; i++)
        out[n++] = (ax_lane_view_t){
            .lane = (int)ax_pg_int(r, i, LN_LANE),
            .measured = ax_pg_bool(r, i, LN_MEASURED),
            .lag = ax_pg_int(r, i, LN_LAG),
            .over = ax_pg_bool(r, i, LN_OVER),
            .changed_ms = ax_pg_int(r, i, LN_CHANGED),
            .measured_ago_ms = ax_pg_int(r, i, LN_AGO),
            .deferred = ax_pg_int(r, i, LN_DEFERRED),
            .oldest_deferred_ms = ax_pg_int(r, i, LN_OLDEST),
        };
    PQclear(r);
    *ret_n = n;
    return 0;
}
