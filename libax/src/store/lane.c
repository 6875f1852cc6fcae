/*
 * lane.c — lane_status, deferral marks and backlog caps (ax/store_lane.h).
 */
#include <stdlib.h>
#include <string.h>

#include "ax/store_lane.h"
#include "dispatch_int.h"

enum { LS_LANE, LS_LAG, LS_OVER };
AX_STMT(st_status_load, "lane.status_load",
        "SELECT lane, lag, over FROM lane_status WHERE deployment = $1"
        " AND updated_at > now() - interval '1 minute'");

int ax_store_lane_status_load(ax_pg_t *pg, const char *deployment,
                              ax_lane_status_t ret_v[AX_PRIORITIES], size_t *ret_n,
                              char *errbuf, size_t errlen) {
    *ret_n = 0;
    const char *p[] = {deployment};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_status_load, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    for (int i = 0; i < PQntuples(r) && *ret_n < AX_PRIORITIES; i++)
        ret_v[(*ret_n)++] = (ax_lane_status_t){
            .lane = (int)ax_pg_int(r, i, LS_LANE),
            .lag = ax_pg_int(r, i, LS_LAG),
            .over = ax_pg_bool(r, i, LS_OVER),
        };
    PQclear(r);
    return 0;
}

/* Per lane through instance_state_deferred, counted up to $6 (a count of 1M
 * deferred rows every second would hold the loop: BENCHMARKS.md, the
 * burst). Columns: lane, deferred. */
enum { SAVE_LANE, SAVE_DEFERRED };
AX_STMT(st_status_save, "lane.status_save",
        "WITH d AS (SELECT l.lane, (SELECT count(*) FROM (SELECT 1 FROM instance_state"
        "  WHERE queued AND priority = l.lane"
        "  AND deferred_at IS NOT NULL AND deployment = $1 LIMIT $6) c) AS n"
        "  FROM generate_series(0, 4) AS l(lane)),"
        " v AS (SELECT * FROM unnest($2::int[], $3::bigint[], $4::int[], $5::bigint[])"
        "  AS v(lane, lag, over, changed))"
        " INSERT INTO lane_status AS s (deployment, lane, lag, over, deferred,"
        "  changed_at, updated_at)"
        " SELECT $1, v.lane, v.lag, v.over = 1, coalesce(d.n, 0),"
        "  CASE WHEN v.changed > 0 THEN to_timestamp(v.changed / 1000.0) END, now()"
        " FROM v LEFT JOIN d USING (lane)"
        " ON CONFLICT (deployment, lane) DO UPDATE SET lag = excluded.lag,"
        "  over = excluded.over, deferred = excluded.deferred,"
        "  changed_at = coalesce(excluded.changed_at, s.changed_at),"
        "  updated_at = excluded.updated_at"
        " RETURNING lane, deferred");

int ax_store_lane_status_save(ax_pg_t *pg, const char *deployment, ax_lane_status_t *v,
                              size_t n, int64_t count_max, char *errbuf, size_t errlen) {
    ax_strbuf_t lanes = {0}, lags = {0}, overs = {0}, changed = {0};
    ax_pgarr_begin(&lanes);
    ax_pgarr_begin(&lags);
    ax_pgarr_begin(&overs);
    ax_pgarr_begin(&changed);
    for (size_t i = 0; i < n; i++) {
        ax_pgarr_int(&lanes, v[i].lane);
        ax_pgarr_int(&lags, v[i].lag);
        ax_pgarr_int(&overs, v[i].over);
        ax_pgarr_int(&changed, v[i].changed_ms > 0 ? v[i].changed_ms : -1);
    }
    ax_pgarr_end(&lanes);
    ax_pgarr_end(&lags);
    ax_pgarr_end(&overs);
    ax_pgarr_end(&changed);
    ax_num_t n_cap;
    int rc = AX_ERR_NOMEM;
    PGresult *r = NULL;
    if (lanes.s && lags.s && overs.s && changed.s) {
        const char *p[] = {deployment, lanes.s, lags.s, overs.s, changed.s,
                           ax_num(&n_cap, count_max)};
        rc = ax_stmt_run(pg, &st_status_save, 6, p, NULL, NULL, &r, errbuf, errlen);
    }
    ax_strbuf_free(&lanes);
    ax_strbuf_free(&lags);
    ax_strbuf_free(&overs);
    ax_strbuf_free(&changed);
    if (rc < 0)
        return rc;
    for (int i = 0; i < PQntuples(r); i++) {
        int lane = (int)ax_pg_int(r, i, SAVE_LANE);
        for (size_t k = 0; k < n; k++)
            if (v[k].lane == lane)
                v[k].deferred = ax_pg_int(r, i, SAVE_DEFERRED);
    }
    PQclear(r);
    return 0;
}

/* Instances of deferring lanes that fell due since the last mark are
 * recorded as deferred (deferred_at), lane by lane from a per-lane mark
 * ($2, epoch ms) so each is looked at about once: at most $4 per lane, oldest
 * first (keyset: the mark moves to the last one marked), and updated by
 * primary key only — a join onto job_instance here (before 016) became a nested loop
 * over job_instance_due (estimated at 1 row mid-burst) that ran for minutes
 * (issue #11; BENCHMARKS.md). Returns per lane: marked, last due_at (ms). */
enum { MD_LANE, MD_MARKED, MD_LAST };
AX_STMT(st_mark_deferred, "lane.mark_deferred",
    "WITH l AS (SELECT * FROM unnest($1::int[], $2::bigint[]) AS l(lane, since)),"
    " m AS MATERIALIZED (SELECT i.id, i.priority, i.due_at FROM l,"
    "   LATERAL (SELECT id, priority, due_at FROM instance_state WHERE queued"
    "   AND priority = l.lane"
    "   AND due_at >= to_timestamp(l.since / 1000.0) AND due_at <= now()"
    "   AND deployment = $3 AND deferred_at IS NULL ORDER BY due_at LIMIT $4) i),"
    " u AS (UPDATE instance_state SET deferred_at = coalesce(deferred_at, now())"
    "   WHERE id = ANY(ARRAY(SELECT id FROM m)))"
    " SELECT priority, count(*), (extract(epoch FROM max(due_at)) * 1000)::bigint"
    " FROM m GROUP BY priority");

int ax_store_mark_deferred(ax_pg_t *pg, const int *lanes, const int64_t *since_ms, size_t n,
                           const char *deployment, int64_t limit,
                           ax_deferred_mark_t ret_marks[AX_PRIORITIES], size_t *ret_n,
                           char *errbuf, size_t errlen) {
    *ret_n = 0;
    int64_t l64[AX_PRIORITIES];
    for (size_t i = 0; i < n && i < AX_PRIORITIES; i++)
        l64[i] = lanes[i];
    char *la = ax__int_array(l64, n < AX_PRIORITIES ? n : AX_PRIORITIES);
    char *sa = ax__int_array(since_ms, n < AX_PRIORITIES ? n : AX_PRIORITIES);
    ax_num_t n_lim;
    int rc = AX_ERR_NOMEM;
    PGresult *r = NULL;
    if (la && sa) {
        const char *p[] = {la, sa, deployment, ax_num(&n_lim, limit)};
        rc = ax_stmt_run(pg, &st_mark_deferred, 4, p, NULL, NULL, &r, errbuf, errlen);
    }
    free(la);
    free(sa);
    if (rc < 0)
        return rc;
    for (int i = 0; i < PQntuples(r) && *ret_n < AX_PRIORITIES; i++)
        ret_marks[(*ret_n)++] = (ax_deferred_mark_t){
            .lane = (int)ax_pg_int(r, i, MD_LANE),
            .marked = ax_pg_int(r, i, MD_MARKED),
            .last_due_ms = ax_pg_int(r, i, MD_LAST),
        };
    PQclear(r);
    return 0;
}

void ax_capped_list_free(ax_capped_list_t *l) {
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].trace_id);
        free(l->v[i].job);
    }
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* The newest beyond each cap get marked; marks older than 5 s whose
 * instance is still SCHEDULED are announced again (their attempt may never
 * have reached the callback topic; a duplicate is stale there). */
enum { CAP_ID, CAP_ATTEMPT, CAP_TRACE, CAP_JOB, CAP_MAX };
AX_STMT(st_backlog_cap, "lane.backlog_cap",
        "WITH o AS (SELECT i.id, j.name, j.backlog_max FROM job j"
        "  CROSS JOIN LATERAL (SELECT id FROM instance_state"
        "   WHERE job_id = j.id AND active AND state = 'SCHEDULED'"
        "   AND error_class IS DISTINCT FROM 'backlog_full'"
        "   ORDER BY id OFFSET j.backlog_max LIMIT 1000) i"
        "  WHERE j.backlog_max IS NOT NULL AND j.deployment = $1),"
        " m AS (UPDATE instance_state i SET error_class = 'backlog_full',"
        "  capped_at = now() FROM o"
        "  WHERE i.id = o.id AND i.state = 'SCHEDULED'"
        "  RETURNING i.id, i.attempt, (SELECT trace_id FROM instance_def d WHERE d.id = i.id),"
        "   o.name, o.backlog_max),"
        " again AS (UPDATE instance_state i SET capped_at = now() FROM job j"
        "  WHERE j.id = i.job_id AND j.deployment = $1 AND j.backlog_max IS NOT NULL"
        "  AND i.job_id = j.id AND i.active AND i.state = 'SCHEDULED'"
        "  AND i.error_class = 'backlog_full'"
        "  AND i.capped_at < now() - interval '5 seconds'"
        "  RETURNING i.id, i.attempt, (SELECT trace_id FROM instance_def d WHERE d.id = i.id),"
        "   j.name, j.backlog_max)"
        " SELECT * FROM m UNION ALL SELECT * FROM again");

int ax_store_backlog_cap(ax_pg_t *pg, const char *deployment, ax_capped_list_t *out,
                         char *errbuf, size_t errlen) {
    *out = (ax_capped_list_t){0};
    const char *p[] = {deployment};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_backlog_cap, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t n = (size_t)PQntuples(r);
    out->v = n ? calloc(n, sizeof *out->v) : NULL;
    if (n && !out->v) {
        PQclear(r);
        return AX_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        ax_capped_t *c = &out->v[out->n++];
        c->id = ax_pg_int(r, (int)i, CAP_ID);
        c->attempt = (int32_t)ax_pg_int(r, (int)i, CAP_ATTEMPT);
        c->trace_id = strdup(ax_pg_str(r, (int)i, CAP_TRACE) ? ax_pg_str(r, (int)i, CAP_TRACE) : "");
        c->job = strdup(ax_pg_str(r, (int)i, CAP_JOB) ? ax_pg_str(r, (int)i, CAP_JOB) : "");
        c->backlog_max = ax_pg_int(r, (int)i, CAP_MAX);
        if (!c->trace_id || !c->job) {
            PQclear(r);
            ax_capped_list_free(out);
            return AX_ERR_NOMEM;
        }
    }
    PQclear(r);
    return 0;
}
