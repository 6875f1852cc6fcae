/*
 * schedule.c — the store's schedule family (ax/store_schedule.h): loading
 * jobs for the trigger's timing wheel, jobs gone, fixed-delay waits, and
 * the job-change notifications.
 */
#include <stdlib.h>
#include <string.h>

#include "ax/store_schedule.h"
#include "dispatch_int.h"
#include "store_int.h"

/* The job row the wheel arms, with its last ledger row and that row's
 * instance. */
AX_STMT(st_load, "schedule.load",
    "SELECT j.id, j.version, j.schedule_kind, j.schedule_expr, j.time_zone, j.dst_gap,"
    "  j.dst_overlap, coalesce(j.interval_ms, 0),"
    "  (extract(epoch FROM coalesce(j.start_at, j.schedule_from)) * 1000)::bigint,"
    "  (extract(epoch FROM j.schedule_from) * 1000)::bigint,"
    "  j.misfire_policy, j.misfire_threshold_ms, j.catchup_max, j.overlap_policy,"
    "  (extract(epoch FROM lf.nominal_time) * 1000)::bigint, lf.instance_id, i.state,"
    "  ceil(extract(epoch FROM i.finished_at) * 1000)::bigint,"
    "  (j.enabled AND j.schedule_kind <> 'none'), j.flow_id IS NOT NULL,"
    "  j.priority, j.tolerance_ms"
    " FROM job j"
    " LEFT JOIN LATERAL (SELECT f.nominal_time, f.instance_id FROM job_fire f"
    "   WHERE f.job_id = j.id ORDER BY f.nominal_time DESC LIMIT 1) lf ON true"
    " LEFT JOIN job_instance i ON i.id = lf.instance_id"
    " WHERE j.deployment = $2"
    "   AND CASE WHEN $1::bigint[] IS NULL THEN j.enabled AND j.schedule_kind <> 'none'"
    "            ELSE j.id = ANY($1::bigint[]) END");
enum {
    LOAD_ID, LOAD_VERSION, LOAD_KIND, LOAD_EXPR, LOAD_TZ, LOAD_DST_GAP, LOAD_DST_OVERLAP,
    LOAD_INTERVAL, LOAD_ANCHOR, LOAD_FROM, LOAD_MISFIRE, LOAD_THRESHOLD, LOAD_CATCHUP,
    LOAD_OVERLAP, LOAD_LAST_NOMINAL, LOAD_LAST_INSTANCE, LOAD_LAST_STATE, LOAD_LAST_FINISHED,
    LOAD_SCHEDULED, LOAD_FLOW, LOAD_PRIORITY, LOAD_TOLERANCE,
};

AX_STMT(st_missing, "schedule.missing",
        "SELECT x FROM unnest($1::bigint[]) x WHERE NOT EXISTS"
        " (SELECT 1 FROM job WHERE id = x AND deployment = $2)");

AX_STMT(st_finished, "schedule.finished",
        "SELECT job_id, id, ceil(extract(epoch FROM finished_at) * 1000)::bigint"
        " FROM instance_state WHERE id = ANY($1::bigint[]) AND state = 'FINISHED'");
enum { FIN_JOB, FIN_ID, FIN_AT };

AX_STMT(st_listen_job, "schedule.listen_job", "LISTEN ax_job");
AX_STMT(st_listen_due, "schedule.listen_due", "LISTEN ax_due");
AX_STMT(st_unlisten, "schedule.unlisten", "UNLISTEN *");

/* The name's value, or the table's first (the default) if it is none: the
 * job table's CHECKs allow only the names. */
static int named(int v) { return v < 0 ? 0 : v; }

static void load_row(const PGresult *r, int i, ax_sched_job_t *j) {
    memset(j, 0, sizeof *j);
    j->id = ax_pg_int(r, i, LOAD_ID);
    j->version = ax_pg_int(r, i, LOAD_VERSION);
    j->scheduled = ax_pg_bool(r, i, LOAD_SCHEDULED);
    j->kind = ax_sched_kind_parse(PQgetvalue(r, i, LOAD_KIND));
    j->expr = ax_pg_str(r, i, LOAD_EXPR);
    j->time_zone = PQgetvalue(r, i, LOAD_TZ);
    j->dst = (ax_dst_policy_t)named(ax_dst_gap_parse(PQgetvalue(r, i, LOAD_DST_GAP))) |
             (ax_dst_policy_t)named(ax_dst_overlap_parse(PQgetvalue(r, i, LOAD_DST_OVERLAP)));
    j->interval_ms = ax_pg_int(r, i, LOAD_INTERVAL);
    j->anchor_ms = ax_pg_int(r, i, LOAD_ANCHOR);
    j->from_ms = ax_pg_int(r, i, LOAD_FROM);
    j->policy.misfire = (ax_misfire_t)named(ax_misfire_parse(PQgetvalue(r, i, LOAD_MISFIRE)));
    j->policy.threshold_ms = ax_pg_int(r, i, LOAD_THRESHOLD);
    j->policy.catchup_max = (int32_t)ax_pg_int(r, i, LOAD_CATCHUP);
    j->policy.overlap = (ax_overlap_t)named(ax_overlap_parse(PQgetvalue(r, i, LOAD_OVERLAP)));
    j->has_last = !PQgetisnull(r, i, LOAD_LAST_NOMINAL);
    j->last_nominal_ms = ax_pg_int(r, i, LOAD_LAST_NOMINAL);
    j->last_instance_id = ax_pg_int(r, i, LOAD_LAST_INSTANCE);
    const char *state = ax_pg_str(r, i, LOAD_LAST_STATE);
    j->last_finished = state && strcmp(state, "FINISHED") == 0;
    j->last_finished_ms = ax_pg_int(r, i, LOAD_LAST_FINISHED);
    j->flow = ax_pg_bool(r, i, LOAD_FLOW);
    j->priority = (int)ax_pg_int(r, i, LOAD_PRIORITY);
    j->tolerance_ms = (int32_t)ax_pg_int(r, i, LOAD_TOLERANCE);
}

int ax_store_schedule_load(ax_pg_t *pg, const int64_t *ids, size_t n, const char *deployment,
                           ax_sched_jobs_t *ret, char *errbuf, size_t errlen) {
    char *a = ids ? ax__int_array(ids, n) : NULL;
    if (ids && !a)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "schedule.load: out of memory");
    const char *p[] = {a, deployment};
    PGresult *r = NULL;
    int rc = ax_stmt_run(pg, &st_load, 2, p, NULL, NULL, &r, errbuf, errlen);
    free(a);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    ax_sched_job_t *v = rows ? malloc((size_t)rows * sizeof *v) : NULL;
    if (rows && !v) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "schedule.load: out of memory");
    }
    for (int i = 0; i < rows; i++)
        load_row(r, i, &v[i]);
    *ret = (ax_sched_jobs_t){v, (size_t)rows, r};
    return 0;
}

void ax_sched_jobs_free(ax_sched_jobs_t *jobs) {
    if (!jobs)
        return;
    free(jobs->v);
    PQclear(jobs->res_);
    memset(jobs, 0, sizeof *jobs);
}

/* One bigint[] parameter (and an optional second text one), an int8 result. */
static int run_ids(ax_pg_t *pg, ax_stmt_t *st, const int64_t *ids, size_t n, const char *p2,
                   PGresult **ret, char *errbuf, size_t errlen) {
    char *a = ax__int_array(ids, n);
    if (!a)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st->name);
    const char *p[] = {a, p2};
    int rc = ax_stmt_run(pg, st, p2 ? 2 : 1, p, NULL, NULL, ret, errbuf, errlen);
    free(a);
    return rc;
}

int ax_store_schedule_missing(ax_pg_t *pg, const int64_t *ids, size_t n, const char *deployment,
                              int64_t **ret_ids, size_t *ret_n, char *errbuf, size_t errlen) {
    PGresult *r;
    int rc = run_ids(pg, &st_missing, ids, n, deployment, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    int64_t *v = malloc(((size_t)rows + 1) * sizeof *v);
    if (!v) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "schedule.missing: out of memory");
    }
    for (int i = 0; i < rows; i++)
        v[i] = ax_pg_int(r, i, 0);
    PQclear(r);
    *ret_ids = v;
    *ret_n = (size_t)rows;
    return 0;
}

int ax_store_schedule_finished(ax_pg_t *pg, const int64_t *instance_ids, size_t n,
                               ax_sched_finished_t **ret, size_t *ret_n, char *errbuf,
                               size_t errlen) {
    PGresult *r;
    int rc = run_ids(pg, &st_finished, instance_ids, n, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    ax_sched_finished_t *v = malloc(((size_t)rows + 1) * sizeof *v);
    if (!v) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "schedule.finished: out of memory");
    }
    for (int i = 0; i < rows; i++)
        v[i] = (ax_sched_finished_t){ax_pg_int(r, i, FIN_JOB), ax_pg_int(r, i, FIN_ID),
                                     ax_pg_int(r, i, FIN_AT)};
    PQclear(r);
    *ret = v;
    *ret_n = (size_t)rows;
    return 0;
}

int ax_store_schedule_listen(ax_pg_t *pg, char *errbuf, size_t errlen) {
    int rc = ax_stmt_run(pg, &st_listen_job, 0, NULL, NULL, NULL, NULL, errbuf, errlen);
    return rc < 0 ? rc : ax_stmt_run(pg, &st_listen_due, 0, NULL, NULL, NULL, NULL, errbuf, errlen);
}

int ax_store_schedule_unlisten(ax_pg_t *pg, char *errbuf, size_t errlen) {
    return ax_stmt_run(pg, &st_unlisten, 0, NULL, NULL, NULL, NULL, errbuf, errlen);
}

int ax_store_schedule_notifies(ax_pg_t *pg, ax_sched_notify_fn fn, void *arg) {
    PGconn *c = ax_pg_conn(pg);
    if (!c || !PQconsumeInput(c))
        return AX_ERR_IO;
    int n = 0;
    PGnotify *nf;
    while ((nf = PQnotifies(c))) {
        if (strcmp(nf->relname, "ax_due") == 0)
            fn(AX_SCHED_NOTIFY_DUE, nf->extra, arg);
        else if (strcmp(nf->relname, "ax_job") == 0)
            fn(AX_SCHED_NOTIFY_JOB, nf->extra, arg);
        PQfreemem(nf);
        n++;
    }
    return n;
}
