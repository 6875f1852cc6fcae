/*
 * api.c — instances for ax-api and axctl by filter and page, one instance
 * in full, pause-all/resume-all (ax/store_api.h).
 */
#include <stdlib.h>
#include <string.h>

#include "ax/store_api.h"
#include "store_int.h"
#include "strlist.h"

#define MSDIFF(a, b) "floor(extract(epoch FROM (" a ") - (" b ")) * 1000)::bigint"
#define TS(p) "(timestamptz 'epoch' + " p "::bigint * interval '1 millisecond')"

#define INSTANCE_JSON                                                                            \
    "json_build_object('id', i.id, 'job', i.job_name, 'attempt', i.attempt, 'state', i.state,"  \
    " 'outcome', i.outcome, 'priority', i.priority, 'group', i.executor_group,"                  \
    " 'exit_code', i.exit_code, 'error_class', i.error_class, 'error', i.error,"                \
    " 'trace_id', i.trace_id, 'idempotency_key', i.idempotency_key, 'worker', i.worker,"        \
    " 'due_at', i.due_at, 'scheduled_at', i.scheduled_at, 'dispatched_at', i.dispatched_at,"     \
    " 'locked_at', i.locked_at, 'running_at', i.running_at, 'finished_at', i.finished_at,"       \
    " 'result_published_at', i.result_published_at,"                                            \
    " 'cancel_requested_at', i.cancel_requested_at,"                                            \
    " 'held_reason', (SELECT h.reason FROM instance_hold h WHERE h.instance_id = i.id))"

/* Every filter but the job; $2 is the job's name (api.instances_by_job) or unused. */
#define LIST_FILTERS                                                                             \
    " AND ($3::text IS NULL OR i.state::text = $3)"                                             \
    " AND ($4::text IS NULL OR i.outcome::text = $4)"                                           \
    " AND ($5::int IS NULL OR i.priority = $5::int)"                                            \
    " AND ($6::text IS NULL OR i.executor_group = $6)"                                          \
    " AND ($7::bigint IS NULL OR i.scheduled_at >= " TS("$7") ")"                               \
    " AND ($8::bigint IS NULL OR i.scheduled_at < " TS("$8") ")"                                \
    " AND ($9::text IS NULL OR i.id IN (SELECT t.instance_id FROM instance_trace t"            \
    "  WHERE t.trace_id = $9))"                                                                  \
    " AND ($10::text IS NULL OR i.idempotency_key = $10)"                                       \
    " AND ($11::bigint IS NULL OR i.id < $11::bigint)"                                         \
    " AND ($12::text IS NULL OR i.deployment = $12)"

AX_STMT(st_list, "api.instances",
        "SELECT i.id, " INSTANCE_JSON "::text FROM job_instance i"
        " WHERE $2::bigint IS NULL" LIST_FILTERS " ORDER BY i.id DESC LIMIT $1::int");
/* One job's (by name, looked up in the same statement: one round trip;
 * no such job, no rows): its ids from instance_def's (job_id, id) backward
 * (`= ANY (ARRAY(...))` and ORDER BY dj.job_id, dj.id keep the planner on
 * that index), each joined to its row of the view for the filters and the
 * JSON.
 * Through the view alone, job_id is instance_state's, which has no such
 * index: a sequential scan of every instance per page (353 ms over a
 * million, BENCHMARKS.md). */
AX_STMT(st_list_job, "api.instances_by_job",
        "SELECT i.id, " INSTANCE_JSON "::text FROM instance_def dj"
        " JOIN job_instance i ON i.id = dj.id"
        " WHERE dj.job_id = ANY (ARRAY(SELECT j.id FROM job j WHERE j.name = $2::text))"
        LIST_FILTERS
        " ORDER BY dj.job_id DESC, dj.id DESC LIMIT $1::int");

AX_STMT(st_one, "api.instance",
        "SELECT i.id, (" INSTANCE_JSON "::jsonb || jsonb_build_object("
        " 'output', i.output, 'payload_base64', encode(i.payload, 'base64'),"
        " 'command', to_json(i.command), 'handler', i.handler_kind, 'timeout_ms', i.timeout_ms,"
        " 'flow_run_id', i.flow_run_id, 'flow_stage', i.flow_stage, 'parent_id', i.parent_id,"
        " 'attempts', (SELECT coalesce(json_agg(json_build_object('attempt', a.attempt,"
        "   'worker', a.worker, 'outcome', a.outcome, 'exit_code', a.exit_code,"
        "   'error_class', a.error_class, 'error', a.error, 'started_at', a.started_at,"
        "   'finished_at', a.finished_at, 'duration_ms', " MSDIFF("a.finished_at", "a.started_at")
        "   ) ORDER BY a.attempt), '[]'::json) FROM job_attempt a WHERE a.instance_id = i.id),"
        " 'timeline', (SELECT coalesce(json_agg(json_build_object('state', w.s, 'at', w.t,"
        "   'duration_ms', w.d) ORDER BY w.o), '[]'::json) FROM (SELECT v.o, v.s, v.t,"
        "   " MSDIFF("lead(v.t) OVER (ORDER BY v.o)", "v.t") " AS d FROM (VALUES"
        "   (1, 'SCHEDULED', i.scheduled_at), (2, 'LOCKED', i.locked_at),"
        "   (3, 'RUNNING', i.running_at), (4, 'FINISHED', i.finished_at)) v(o, s, t)"
        "   WHERE v.t IS NOT NULL) w)))::text"
        " FROM job_instance i WHERE i.id = $1::bigint");

AX_STMT(st_pause, "api.pause_all",
        "WITH p AS (UPDATE job SET enabled = false WHERE enabled RETURNING id, name),"
        " r AS (INSERT INTO job_paused (job_id) SELECT id FROM p ON CONFLICT DO NOTHING)"
        " SELECT 0, name FROM p ORDER BY name");
AX_STMT(st_resume, "api.resume_all",
        "WITH f AS (DELETE FROM job_paused RETURNING job_id),"
        " e AS (UPDATE job j SET enabled = true FROM f WHERE j.id = f.job_id AND NOT j.enabled"
        "  RETURNING j.name) SELECT 0, name FROM e ORDER BY name");

void ax_json_rows_free(ax_json_row_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++)
        free(rows[i].json);
    free(rows);
}

/* Rows of (id, text) from r (cleared). */
static int json_rows(PGresult *r, ax_stmt_t *st, ax_json_row_t **ret_rows, size_t *ret_n,
                     char *errbuf, size_t errlen) {
    size_t n = (size_t)PQntuples(r);
    ax_json_row_t *rows = n ? calloc(n, sizeof *rows) : NULL;
    int bad = n && !rows;
    for (size_t i = 0; i < n && rows; i++) {
        rows[i].id = ax_pg_int(r, (int)i, 0);
        rows[i].json = ax_pg_strdup(r, (int)i, 1);
        bad |= !rows[i].json;
    }
    PQclear(r);
    if (bad) {
        ax_json_rows_free(rows, n);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st->name);
    }
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

int ax_store_api_instances(ax_pg_t *pg, const ax_instance_query_t *q, ax_json_row_t **ret_rows,
                           size_t *ret_n, char *errbuf, size_t errlen) {
    ax_num_t l, pr, since, until, before;
    PGresult *r;
    *ret_rows = NULL;
    *ret_n = 0;
    const char *p[] = {ax_num(&l, q->limit),
                       q->job,
                       q->state,
                       q->outcome,
                       q->priority >= 0 ? ax_num(&pr, q->priority) : NULL,
                       q->group,
                       q->has_since ? ax_num(&since, q->since_ms) : NULL,
                       q->has_until ? ax_num(&until, q->until_ms) : NULL,
                       q->trace_id,
                       q->idempotency_key,
                       q->before_id > 0 ? ax_num(&before, q->before_id) : NULL,
                       q->deployment};
    ax_stmt_t *st = q->job ? &st_list_job : &st_list;
    int rc = ax_stmt_run(pg, st, 12, p, NULL, NULL, &r, errbuf, errlen);
    return rc < 0 ? rc : json_rows(r, st, ret_rows, ret_n, errbuf, errlen);
}

int ax_store_api_instance(ax_pg_t *pg, int64_t id, char **ret_json, char *errbuf,
                          size_t errlen) {
    ax_num_t n;
    const char *p[] = {ax_num(&n, id)};
    PGresult *r;
    ax_json_row_t *rows;
    size_t k;
    int rc = ax_stmt_run(pg, &st_one, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc == 0)
        rc = json_rows(r, &st_one, &rows, &k, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (k == 0)
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no instance %lld", (long long)id);
    *ret_json = rows[0].json;
    rows[0].json = NULL;
    ax_json_rows_free(rows, k);
    return 0;
}

void ax_names_clear(ax_names_t *n) {
    if (!n)
        return;
    ax__strlist_free(n->v, n->n);
    n->v = NULL;
    n->n = 0;
}

static int names_run(ax_pg_t *pg, ax_stmt_t *st, ax_names_t *ret, char *errbuf, size_t errlen) {
    PGresult *r;
    ax_json_row_t *rows;
    size_t n;
    memset(ret, 0, sizeof *ret);
    int rc = ax_stmt_run(pg, st, 0, NULL, NULL, NULL, &r, errbuf, errlen);
    if (rc == 0)
        rc = json_rows(r, st, &rows, &n, errbuf, errlen);
    if (rc < 0)
        return rc;
    ret->v = n ? calloc(n, sizeof *ret->v) : NULL;
    if (n && !ret->v) {
        ax_json_rows_free(rows, n);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st->name);
    }
    for (size_t i = 0; i < n; i++) {
        ret->v[i] = rows[i].json;
        rows[i].json = NULL;
    }
    ret->n = n;
    ax_json_rows_free(rows, n);
    return 0;
}

int ax_store_api_pause_all(ax_pg_t *pg, ax_names_t *ret, char *errbuf, size_t errlen) {
    return names_run(pg, &st_pause, ret, errbuf, errlen);
}

int ax_store_api_resume_all(ax_pg_t *pg, ax_names_t *ret, char *errbuf, size_t errlen) {
    return names_run(pg, &st_resume, ret, errbuf, errlen);
}

/* The console's overview in one statement, bounded by $1 minutes (at most
 * 1440 rows of minutes): finished per minute by outcome, fire lateness
 * (dispatched - due) p50/p99 per minute, the backlog (SCHEDULED) count and
 * oldest. The window's rows are found through the BRIN index on
 * instance_state (finished_at, dispatched_at) (migration 019), each set
 * aggregated once (MATERIALIZED: not once per minute); the backlog through
 * the partial index of the instances not finished (active). */
#define WINDOW_LO "date_trunc('minute', now()) - ($1::int - 1) * interval '1 minute'"
AX_STMT(st_stats, "api.stats",
        "WITH b AS (SELECT generate_series(" WINDOW_LO ", date_trunc('minute', now()),"
        "   interval '1 minute') AS m),"
        " f AS MATERIALIZED (SELECT date_trunc('minute', s.finished_at) AS m,"
        "   coalesce(s.outcome::text, 'other') AS o, count(*) AS n FROM instance_state s"
        "   WHERE s.finished_at >= " WINDOW_LO " AND s.deployment = $2"
        "   AND s.state = 'FINISHED' GROUP BY 1, 2),"
        " l AS MATERIALIZED (SELECT date_trunc('minute', s.dispatched_at) AS m,"
        "   percentile_disc(0.5) WITHIN GROUP (ORDER BY " MSDIFF("s.dispatched_at", "s.due_at") ")"
        "   AS p50, percentile_disc(0.99) WITHIN GROUP (ORDER BY "
        MSDIFF("s.dispatched_at", "s.due_at") ") AS p99"
        "   FROM instance_state s WHERE s.dispatched_at >= " WINDOW_LO
        "   AND s.deployment = $2 GROUP BY 1),"
        " k AS (SELECT count(*) AS n, min(d.scheduled_at) AS oldest FROM instance_state s"
        "   JOIN instance_def d ON d.id = s.id"
        "   WHERE s.active AND s.state = 'SCHEDULED' AND s.deployment = $2)"
        " SELECT 0, json_build_object('now', now(), 'minutes', (SELECT json_agg(json_build_object("
        "   'minute', b.m, 'finished', (SELECT coalesce(json_object_agg(f.o, f.n), '{}'::json)"
        "   FROM f WHERE f.m = b.m), 'lateness_p50_ms', l.p50, 'lateness_p99_ms', l.p99)"
        "   ORDER BY b.m) FROM b LEFT JOIN l ON l.m = b.m),"
        " 'backlog', (SELECT json_build_object('count', k.n, 'oldest_scheduled_at', k.oldest,"
        "   'oldest_age_ms', " MSDIFF("now()", "k.oldest") ") FROM k))::text");

int ax_store_api_stats(ax_pg_t *pg, const char *deployment, int minutes, char **ret_json,
                       char *errbuf, size_t errlen) {
    ax_num_t n;
    const char *p[] = {ax_num(&n, minutes), deployment};
    PGresult *r;
    ax_json_row_t *rows;
    size_t k;
    *ret_json = NULL;
    int rc = ax_stmt_run(pg, &st_stats, 2, p, NULL, NULL, &r, errbuf, errlen);
    if (rc == 0)
        rc = json_rows(r, &st_stats, &rows, &k, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (k == 1) {
        *ret_json = rows[0].json;
        rows[0].json = NULL;
    }
    ax_json_rows_free(rows, k);
    return *ret_json ? 0 : ax_seterr(errbuf, errlen, AX_ERR_IO, "api.stats: no row");
}
