/*
 * job.c — the job table as operators see it (ax/store_job.h): one row
 * reader for every job query, a constant create and update statement whose
 * absent settings are NULL parameters, the fire ledger, circuit reset.
 */
#include <stdlib.h>
#include <string.h>

#include "ax/store_job.h"
#include "job_params.h"
#include "store_int.h"

/* A timestamptz as epoch milliseconds. */
#define MS(x) "floor(extract(epoch FROM " x ") * 1000)::bigint"
/* Epoch milliseconds parameter as a timestamptz: TS("$n"). */
#define TS(p) "(timestamptz 'epoch' + " p "::bigint * interval '1 millisecond')"

/* ---- the job row -------------------------------------------------------------- */

enum {
    J_ID, J_NAME, J_ENABLED, J_KIND, J_EXPR, J_TZ, J_GAP, J_OVERLAP, J_INTERVAL, J_START,
    J_FROM, J_LAST, J_DECISION, J_INST, J_INST_STATE, J_FINISHED, J_NOW, J_HANDLER, J_NCMD,
    J_CMD0, J_GROUP, J_CONC, J_RKEY, J_RUNNING, J_FLOW, J_CIRCUIT, J_FAILS, J_THRESHOLD,
    J_OPENED, J_VERSION, J_MISFIRE, J_THRESHOLD_MS, J_CATCHUP, J_OVERLAP_POLICY, J_TIMEOUT,
    J_PRIORITY, J_RETRY_MAX, J_RETRY_INITIAL, J_RETRY_MULT, J_RETRY_MAX_DELAY, J_RETRY_JITTER,
    J_RULES, J_COOLDOWN, J_BACKLOG, J_TOLERANCE, J_COMMAND_JSON, J_CREATED, J_UPDATED, J_NCOLS
};

#define JOB_ROW_SQL                                                                              \
    "SELECT j.id, j.name, j.enabled, j.schedule_kind, j.schedule_expr, j.time_zone, j.dst_gap,"  \
    " j.dst_overlap, j.interval_ms, " MS("j.start_at") ", " MS("j.schedule_from") ","           \
    " " MS("lf.nominal_time") ", lf.decision, lf.instance_id, li.state,"                        \
    " " MS("li.finished_at") ", " MS("now()") ", j.handler_kind,"                               \
    " coalesce(cardinality(j.command), 0), j.command[1], j.executor_group,"                     \
    " j.concurrency_limit, j.routing_key, j.running_count, j.flow_id, j.circuit_state,"          \
    " j.consecutive_failures, j.circuit_threshold, " MS("j.circuit_opened_at") ", j.version,"   \
    " j.misfire_policy, j.misfire_threshold_ms, j.catchup_max, j.overlap_policy, j.timeout_ms,"  \
    " j.priority, j.retry_max, j.retry_initial_ms, j.retry_multiplier, j.retry_max_ms,"          \
    " j.retry_jitter_ms, j.retry_rules::text, j.circuit_cooldown_ms, j.backlog_max,"             \
    " j.tolerance_ms, array_to_json(j.command)::text, " MS("j.created_at") ","                  \
    " " MS("j.updated_at") " FROM job j"                                                         \
    " LEFT JOIN LATERAL (SELECT f.nominal_time, f.decision, f.instance_id FROM job_fire f"      \
    "  WHERE f.job_id = j.id ORDER BY f.nominal_time DESC LIMIT 1) lf ON true"                   \
    " LEFT JOIN job_instance li ON li.id = lf.instance_id"

AX_STMT(st_get, "job.get", JOB_ROW_SQL " WHERE j.name = $1");
AX_STMT(st_get_lock, "job.get_for_update", JOB_ROW_SQL " WHERE j.name = $1 FOR UPDATE OF j");
AX_STMT(st_get_flow, "job.get_by_flow", JOB_ROW_SQL " WHERE j.flow_id = $1::bigint");
AX_STMT(st_get_flow_lock, "job.get_by_flow_for_update",
        JOB_ROW_SQL " WHERE j.flow_id = $1::bigint FOR UPDATE OF j");
AX_STMT(st_list, "job.list", JOB_ROW_SQL " ORDER BY j.name");
AX_STMT(st_page, "job.page",
        JOB_ROW_SQL " WHERE ($2::text IS NULL OR j.name > $2) AND ($3::text IS NULL OR"
                    " starts_with(j.name, $3)) AND ($4::boolean IS NULL OR j.enabled = $4)"
                    " ORDER BY j.name LIMIT $1::int");

static const char *p_bool(int v);

void ax_job_clear(ax_job_t *j) {
    if (!j)
        return;
    char *s[] = {j->name, j->schedule_kind, j->schedule_expr, j->time_zone, j->dst_gap,
                 j->dst_overlap, j->last_decision, j->last_instance_state, j->handler_kind,
                 j->command0, j->executor_group, j->routing_key, j->circuit_state,
                 j->misfire_policy, j->overlap_policy, j->retry_rules, j->command_json};
    for (size_t i = 0; i < AX_ARRAY_SIZE(s); i++)
        free(s[i]);
    memset(j, 0, sizeof *j);
}

void ax_jobs_free(ax_job_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++)
        ax_job_clear(&rows[i]);
    free(rows);
}

/* A NOT NULL text column: "" rather than NULL if it ever is. */
static char *text_col(const PGresult *r, int i, int c) {
    return strdup(PQgetisnull(r, i, c) ? "" : PQgetvalue(r, i, c));
}

static void opt_int(const PGresult *r, int i, int c, int *has, int64_t *v) {
    *has = !PQgetisnull(r, i, c);
    *v = ax_pg_int(r, i, c);
}

/* The numeric settings of row i. */
static void job_read_settings(const PGresult *r, int i, ax_job_t *j) {
    j->version = ax_pg_int(r, i, J_VERSION);
    j->misfire_threshold_ms = ax_pg_int(r, i, J_THRESHOLD_MS);
    j->catchup_max = ax_pg_int(r, i, J_CATCHUP);
    j->timeout_ms = ax_pg_int(r, i, J_TIMEOUT);
    j->priority = ax_pg_int(r, i, J_PRIORITY);
    j->retry_max = ax_pg_int(r, i, J_RETRY_MAX);
    j->retry_initial_ms = ax_pg_int(r, i, J_RETRY_INITIAL);
    j->retry_multiplier = strtod(PQgetvalue(r, i, J_RETRY_MULT), NULL);
    j->retry_max_delay_ms = ax_pg_int(r, i, J_RETRY_MAX_DELAY);
    j->retry_jitter_ms = ax_pg_int(r, i, J_RETRY_JITTER);
    j->circuit_cooldown_ms = ax_pg_int(r, i, J_COOLDOWN);
    opt_int(r, i, J_BACKLOG, &j->has_backlog_max, &j->backlog_max);
    j->tolerance_ms = ax_pg_int(r, i, J_TOLERANCE);
    j->created_ms = ax_pg_int(r, i, J_CREATED);
    j->updated_ms = ax_pg_int(r, i, J_UPDATED);
}

/* Row i of a JOB_ROW_SQL result; AX_ERR_NOMEM (row cleared) if a copy failed. */
static int job_read(const PGresult *r, int i, ax_job_t *j) {
    memset(j, 0, sizeof *j);
    j->id = ax_pg_int(r, i, J_ID);
    j->enabled = ax_pg_bool(r, i, J_ENABLED);
    j->interval_ms = ax_pg_int(r, i, J_INTERVAL);
    opt_int(r, i, J_START, &j->has_start, &j->start_ms);
    j->schedule_from_ms = ax_pg_int(r, i, J_FROM);
    opt_int(r, i, J_LAST, &j->has_last_fire, &j->last_fire_ms);
    opt_int(r, i, J_INST, &j->has_last_instance, &j->last_instance_id);
    opt_int(r, i, J_FINISHED, &j->has_last_finished, &j->last_finished_ms);
    j->now_ms = ax_pg_int(r, i, J_NOW);
    j->ncommand = (int)ax_pg_int(r, i, J_NCMD);
    int has;
    opt_int(r, i, J_CONC, &j->has_concurrency_limit, &j->concurrency_limit);
    j->running_count = ax_pg_int(r, i, J_RUNNING);
    opt_int(r, i, J_FLOW, &has, &j->flow_id);
    j->consecutive_failures = ax_pg_int(r, i, J_FAILS);
    j->circuit_threshold = ax_pg_int(r, i, J_THRESHOLD);
    opt_int(r, i, J_OPENED, &j->has_circuit_opened, &j->circuit_opened_ms);
    job_read_settings(r, i, j);
    j->name = text_col(r, i, J_NAME);
    j->schedule_kind = text_col(r, i, J_KIND);
    j->time_zone = text_col(r, i, J_TZ);
    j->dst_gap = text_col(r, i, J_GAP);
    j->dst_overlap = text_col(r, i, J_OVERLAP);
    j->handler_kind = text_col(r, i, J_HANDLER);
    j->executor_group = text_col(r, i, J_GROUP);
    j->circuit_state = text_col(r, i, J_CIRCUIT);
    j->schedule_expr = ax_pg_strdup(r, i, J_EXPR);
    j->last_decision = ax_pg_strdup(r, i, J_DECISION);
    j->last_instance_state = ax_pg_strdup(r, i, J_INST_STATE);
    j->command0 = ax_pg_strdup(r, i, J_CMD0);
    j->routing_key = ax_pg_strdup(r, i, J_RKEY);
    j->misfire_policy = text_col(r, i, J_MISFIRE);
    j->overlap_policy = text_col(r, i, J_OVERLAP_POLICY);
    j->retry_rules = ax_pg_strdup(r, i, J_RULES);
    j->command_json = ax_pg_strdup(r, i, J_COMMAND_JSON);
    int lost = !j->name || !j->schedule_kind || !j->time_zone || !j->dst_gap ||
               !j->dst_overlap || !j->handler_kind || !j->executor_group || !j->circuit_state ||
               (!j->schedule_expr && !PQgetisnull(r, i, J_EXPR)) ||
               (!j->last_decision && !PQgetisnull(r, i, J_DECISION)) ||
               (!j->last_instance_state && !PQgetisnull(r, i, J_INST_STATE)) ||
               (!j->command0 && !PQgetisnull(r, i, J_CMD0)) ||
               (!j->routing_key && !PQgetisnull(r, i, J_RKEY)) || !j->misfire_policy ||
               !j->overlap_policy || (!j->retry_rules && !PQgetisnull(r, i, J_RULES)) ||
               (!j->command_json && !PQgetisnull(r, i, J_COMMAND_JSON));
    if (lost) {
        ax_job_clear(j);
        return AX_ERR_NOMEM;
    }
    return 0;
}

/* The job of key by st; AX_ERR_NOTFOUND saying "<what> <key>" if none. */
static int get_one(ax_pg_t *pg, ax_stmt_t *st, const char *key, const char *what, ax_job_t *ret,
                   char *errbuf, size_t errlen) {
    PGresult *r;
    const char *p[] = {key};
    memset(ret, 0, sizeof *ret);
    int rc = ax_stmt_run(pg, st, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (PQntuples(r) != 1)
        rc = ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "%s %s", what, key);
    else if (job_read(r, 0, ret) < 0)
        rc = ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st->name);
    PQclear(r);
    return rc;
}

int ax_store_job_get(ax_pg_t *pg, const char *name, int for_update, ax_job_t *ret_job,
                     char *errbuf, size_t errlen) {
    return get_one(pg, for_update ? &st_get_lock : &st_get, name, "no job named", ret_job, errbuf,
                   errlen);
}

int ax_store_job_get_by_flow(ax_pg_t *pg, int64_t flow_id, int for_update, ax_job_t *ret_job,
                             char *errbuf, size_t errlen) {
    ax_num_t f;
    return get_one(pg, for_update ? &st_get_flow_lock : &st_get_flow, ax_num(&f, flow_id),
                   "no schedule job for flow id", ret_job, errbuf, errlen);
}

static int jobs_read(PGresult *r, ax_job_t **ret_rows, size_t *ret_n, char *errbuf,
                     size_t errlen);

int ax_store_job_list(ax_pg_t *pg, ax_job_t **ret_rows, size_t *ret_n, char *errbuf,
                      size_t errlen) {
    PGresult *r;
    *ret_rows = NULL;
    *ret_n = 0;
    int rc = ax_stmt_run(pg, &st_list, 0, NULL, NULL, NULL, &r, errbuf, errlen);
    return rc < 0 ? rc : jobs_read(r, ret_rows, ret_n, errbuf, errlen);
}

int ax_store_job_page(ax_pg_t *pg, const ax_job_page_t *f, ax_job_t **ret_rows, size_t *ret_n,
                      char *errbuf, size_t errlen) {
    PGresult *r;
    ax_num_t l;
    const char *p[] = {ax_num(&l, f->limit), f->after_name, f->prefix,
                       f->enabled < 0 ? NULL : p_bool(f->enabled)};
    *ret_rows = NULL;
    *ret_n = 0;
    int rc = ax_stmt_run(pg, &st_page, 4, p, NULL, NULL, &r, errbuf, errlen);
    return rc < 0 ? rc : jobs_read(r, ret_rows, ret_n, errbuf, errlen);
}

static int jobs_read(PGresult *r, ax_job_t **ret_rows, size_t *ret_n, char *errbuf,
                     size_t errlen) {
    size_t n = (size_t)PQntuples(r);
    ax_job_t *rows = n ? calloc(n, sizeof *rows) : NULL;
    for (size_t i = 0; i < n && rows; i++)
        if (job_read(r, (int)i, &rows[i]) < 0) {
            ax_jobs_free(rows, n);
            rows = NULL;
        }
    PQclear(r);
    if (n && !rows)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "job.list: out of memory");
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

/* ---- create and update ------------------------------------------------------------- */

/* start_at of a schedule: an absolute start ($7 NULL) or now + $7 ms. */
#define START_AT "coalesce(" TS("$6") ", date_trunc('milliseconds', now()) + $7::bigint"         \
                 " * interval '1 millisecond')"

/* Absent settings take the table's defaults (infra/migrations), repeated
 * here: keep them equal. */
AX_STMT(st_create, "job.create",
        "INSERT INTO job (name, schedule_kind, schedule_expr, interval_ms, start_at, time_zone,"
        " dst_gap, dst_overlap, misfire_policy, misfire_threshold_ms, catchup_max,"
        " overlap_policy, timeout_ms, priority, payload, handler_kind, executor_group,"
        " routing_key, backlog_max, tolerance_ms, concurrency_limit, retry_max,"
        " retry_initial_ms, retry_multiplier, retry_max_ms, retry_jitter_ms, retry_rules,"
        " circuit_threshold, circuit_cooldown_ms, command, enabled, flow_id)"
        " VALUES ($1, CASE WHEN $2::boolean THEN $3::text ELSE 'none' END, $4::text,"
        " $5::bigint, " START_AT ", coalesce($8::text, 'UTC'), coalesce($9::text, 'shift'),"
        " coalesce($10::text, 'once'), coalesce($11::text, 'fire_once'),"
        " coalesce($12::bigint, 60000), coalesce($13::int, 10), coalesce($14::text, 'allow'),"
        " coalesce($15::bigint, 3600000), coalesce($16::smallint, 2),"
        " coalesce($17::bytea, ''::bytea), coalesce($18::text, 'command'),"
        " coalesce($19::text, 'default'), CASE WHEN $20::boolean THEN $21::text END,"
        " CASE WHEN $22::boolean THEN $23::int END, coalesce($24::int, 0),"
        " CASE WHEN $25::boolean THEN $26::int END, coalesce($27::int, 3),"
        " coalesce($28::bigint, 2000), coalesce($29::double precision, 2),"
        " coalesce($30::bigint, 30000), coalesce($31::bigint, 2000),"
        " CASE WHEN $32::boolean THEN $33::jsonb END, coalesce($34::int, 5),"
        " coalesce($35::bigint, 60000), $36::text[], coalesce($37::boolean, true),"
        " $38::bigint)");

AX_STMT(st_update, "job.update",
        "UPDATE job SET"
        " schedule_kind = CASE WHEN $2::boolean THEN $3::text ELSE schedule_kind END,"
        " schedule_expr = CASE WHEN $2 THEN $4::text ELSE schedule_expr END,"
        " interval_ms = CASE WHEN $2 THEN $5::bigint ELSE interval_ms END,"
        " start_at = CASE WHEN $2 OR $6::bigint IS NOT NULL THEN " START_AT " ELSE start_at END,"
        " time_zone = coalesce($8::text, time_zone),"
        " dst_gap = coalesce($9::text, dst_gap),"
        " dst_overlap = coalesce($10::text, dst_overlap),"
        " misfire_policy = coalesce($11::text, misfire_policy),"
        " misfire_threshold_ms = coalesce($12::bigint, misfire_threshold_ms),"
        " catchup_max = coalesce($13::int, catchup_max),"
        " overlap_policy = coalesce($14::text, overlap_policy),"
        " timeout_ms = coalesce($15::bigint, timeout_ms),"
        " priority = coalesce($16::smallint, priority),"
        " payload = coalesce($17::bytea, payload),"
        " handler_kind = coalesce($18::text, handler_kind),"
        " executor_group = coalesce($19::text, executor_group),"
        " routing_key = CASE WHEN $20::boolean THEN $21::text ELSE routing_key END,"
        " backlog_max = CASE WHEN $22::boolean THEN $23::int ELSE backlog_max END,"
        " tolerance_ms = coalesce($24::int, tolerance_ms),"
        " concurrency_limit = CASE WHEN $25::boolean THEN $26::int ELSE concurrency_limit END,"
        " retry_max = coalesce($27::int, retry_max),"
        " retry_initial_ms = coalesce($28::bigint, retry_initial_ms),"
        " retry_multiplier = coalesce($29::double precision, retry_multiplier),"
        " retry_max_ms = coalesce($30::bigint, retry_max_ms),"
        " retry_jitter_ms = coalesce($31::bigint, retry_jitter_ms),"
        " retry_rules = CASE WHEN $32::boolean THEN $33::jsonb ELSE retry_rules END,"
        " circuit_threshold = coalesce($34::int, circuit_threshold),"
        " circuit_cooldown_ms = coalesce($35::bigint, circuit_cooldown_ms),"
        " command = coalesce($36::text[], command)"
        " WHERE name = $1 RETURNING id");

static void p_int(ax__job_params_t *sp, int i, int has, int64_t v) {
    sp->p[i] = has ? ax_num(&sp->num[i], v) : NULL;
}

static const char *p_bool(int v) { return v ? "true" : "false"; }

static void spec_sched(ax__job_params_t *sp, const ax_job_spec_t *s) {
    sp->p[P_SCHED] = p_bool(s->set_schedule);
    sp->p[P_KIND] = s->set_schedule ? s->schedule_kind : NULL;
    sp->p[P_EXPR] = s->set_schedule ? s->schedule_expr : NULL;
    p_int(sp, P_INTERVAL, s->set_schedule && s->interval_ms > 0, s->interval_ms);
    p_int(sp, P_START, s->has_start, s->start_ms);
    p_int(sp, P_AFTER, s->set_schedule && !s->has_start && s->has_after, s->after_ms);
    sp->p[P_TZ] = s->time_zone;
    sp->p[P_GAP] = s->dst_gap;
    sp->p[P_OVERLAP] = s->dst_overlap;
    sp->p[P_MISFIRE] = s->misfire_policy;
    p_int(sp, P_THRESHOLD, s->has_misfire_threshold, s->misfire_threshold_ms);
    p_int(sp, P_CATCHUP, s->has_catchup_max, s->catchup_max);
    sp->p[P_OVERLAP_POLICY] = s->overlap_policy;
}

int ax__job_spec_params(ax__job_params_t *sp, const ax_job_spec_t *s) {
    memset(sp, 0, sizeof *sp);
    sp->p[P_NAME] = s->name;
    spec_sched(sp, s);
    p_int(sp, P_TIMEOUT, s->has_timeout, s->timeout_ms);
    p_int(sp, P_PRIORITY, s->has_priority, s->priority);
    if (s->has_payload) {
        sp->p[P_PAYLOAD] = s->payload ? s->payload : "";
        sp->len[P_PAYLOAD] = (int)s->payload_len;
        sp->fmt[P_PAYLOAD] = 1;
    }
    sp->p[P_HANDLER] = s->handler_kind;
    sp->p[P_GROUP] = s->executor_group;
    sp->p[P_RKEY_SET] = p_bool(s->has_routing_key);
    sp->p[P_RKEY] = s->has_routing_key ? s->routing_key : NULL;
    sp->p[P_BACKLOG_SET] = p_bool(s->has_backlog_max);
    p_int(sp, P_BACKLOG, s->has_backlog_max && s->backlog_max >= 0, s->backlog_max);
    p_int(sp, P_TOLERANCE, s->has_tolerance, s->tolerance_ms);
    sp->p[P_CONC_SET] = p_bool(s->has_concurrency);
    p_int(sp, P_CONC, s->has_concurrency && s->concurrency_limit > 0, s->concurrency_limit);
    p_int(sp, P_RETRY_MAX, s->has_retry_max, s->retry_max);
    p_int(sp, P_RETRY_INITIAL, s->has_retry_initial, s->retry_initial_ms);
    sp->p[P_RETRY_MULT] = s->retry_multiplier;
    p_int(sp, P_RETRY_MAX_DELAY, s->has_retry_max_delay, s->retry_max_delay_ms);
    p_int(sp, P_RETRY_JITTER, s->has_retry_jitter, s->retry_jitter_ms);
    sp->p[P_RULES_SET] = p_bool(s->has_retry_rules);
    sp->p[P_RULES] = s->has_retry_rules ? s->retry_rules : NULL;
    p_int(sp, P_CIRCUIT_THRESHOLD, s->has_circuit_threshold, s->circuit_threshold);
    p_int(sp, P_CIRCUIT_COOLDOWN, s->has_circuit_cooldown, s->circuit_cooldown_ms);
    sp->p[P_ENABLED] = s->disabled ? "false" : NULL;
    p_int(sp, P_FLOW, s->flow_id > 0, s->flow_id);
    if (s->ncommand > 0) {
        int rc = ax_pgarr_begin(&sp->cmd);
        for (int i = 0; i < s->ncommand && rc == 0; i++)
            rc = ax_pgarr_text(&sp->cmd, s->command[i]);
        if (rc == 0)
            rc = ax_pgarr_end(&sp->cmd);
        if (rc < 0)
            return AX_ERR_NOMEM;
        sp->p[P_COMMAND] = sp->cmd.s;
    }
    return 0;
}

void ax__job_params_clear(ax__job_params_t *sp) { ax_strbuf_free(&sp->cmd); }

static int spec_run(ax_pg_t *pg, ax_stmt_t *st, int n, const ax_job_spec_t *s, int *ret_rows,
                    char *errbuf, size_t errlen) {
    ax__job_params_t sp;
    PGresult *r = NULL;
    int rc = ax__job_spec_params(&sp, s);
    if (rc < 0)
        rc = ax_seterr(errbuf, errlen, rc, "%s: out of memory", st->name);
    else
        rc = ax_stmt_run(pg, st, n, sp.p, sp.len, sp.fmt, &r, errbuf, errlen);
    ax__job_params_clear(&sp);
    if (rc == 0) {
        *ret_rows = PQresultStatus(r) == PGRES_TUPLES_OK ? PQntuples(r) : 1;
        PQclear(r);
    }
    return rc;
}

int ax_store_job_create(ax_pg_t *pg, const ax_job_spec_t *spec, char *errbuf, size_t errlen) {
    int rows;
    return spec_run(pg, &st_create, P_CREATE_N, spec, &rows, errbuf, errlen);
}

int ax_store_job_update(ax_pg_t *pg, const ax_job_spec_t *spec, char *errbuf, size_t errlen) {
    int rows = 0;
    int rc = spec_run(pg, &st_update, P_UPDATE_N, spec, &rows, errbuf, errlen);
    if (rc == 0 && rows == 0)
        rc = ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no job named %s", spec->name);
    return rc;
}

/* ---- enable, disable ------------------------------------------------------------------ */

AX_STMT(st_set_enabled, "job.set_enabled",
        "UPDATE job SET enabled = $2::boolean WHERE name = $1 AND enabled <> $2::boolean"
        " RETURNING id");
AX_STMT(st_exists, "job.exists", "SELECT id FROM job WHERE name = $1");

int ax_store_job_set_enabled(ax_pg_t *pg, const char *name, int enabled, int *ret_changed,
                             char *errbuf, size_t errlen) {
    PGresult *r;
    const char *p[] = {name, p_bool(enabled)};
    int rc = ax_stmt_run(pg, &st_set_enabled, 2, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    *ret_changed = PQntuples(r) == 1;
    PQclear(r);
    if (*ret_changed)
        return 0;
    rc = ax_stmt_run(pg, &st_exists, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (PQntuples(r) == 0)
        rc = ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no job named %s", name);
    PQclear(r);
    return rc;
}

/* ---- unfinished instances and delete -------------------------------------------------- */

AX_STMT(st_pending, "job.pending",
        "SELECT id FROM job_instance WHERE job_id = $1::bigint AND state <> 'FINISHED'"
        " AND ($2::boolean OR cancel_requested_at IS NULL) ORDER BY id");
AX_STMT(st_lock_instances, "job.delete_lock_instances",
        "SELECT id FROM job_instance WHERE job_id = $1::bigint AND state <> 'FINISHED'"
        " ORDER BY id FOR UPDATE");
AX_STMT(st_lock_job, "job.delete_lock",
        "SELECT id FROM job WHERE name = $1 AND id = $2::bigint FOR UPDATE");
AX_STMT(st_delete, "job.delete", "DELETE FROM job WHERE id = $1::bigint");

void ax_job_pending_clear(ax_job_pending_t *p) {
    if (!p)
        return;
    free(p->ids);
    p->ids = NULL;
    p->n = 0;
}

int ax_store_job_pending(ax_pg_t *pg, int64_t job_id, int with_cancel_requested,
                         ax_job_pending_t *ret, char *errbuf, size_t errlen) {
    PGresult *r;
    ax_num_t j;
    const char *p[] = {ax_num(&j, job_id), p_bool(with_cancel_requested)};
    ret->ids = NULL;
    ret->n = 0;
    int rc = ax_stmt_run(pg, &st_pending, 2, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t n = (size_t)PQntuples(r);
    if (n && !(ret->ids = malloc(n * sizeof *ret->ids))) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "job.pending: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        ret->ids[i] = ax_pg_int(r, (int)i, 0);
    ret->n = n;
    PQclear(r);
    return 0;
}

/* The delete's statements, in its open transaction. */
static int delete_in_tx(ax_pg_t *pg, const char *name, int64_t job_id, ax_job_pending_t *fresh,
                        char *errbuf, size_t errlen) {
    ax_num_t j;
    const char *jp[] = {ax_num(&j, job_id)}, *np[] = {name, j.s};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_lock_instances, 1, jp, NULL, NULL, NULL, errbuf, errlen);
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_lock_job, 2, np, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    int gone = PQntuples(r) == 0;
    PQclear(r);
    if (gone)
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND,
                         "job %s was deleted or replaced meanwhile", name);
    rc = ax_store_job_pending(pg, job_id, 0, fresh, errbuf, errlen);
    if (rc == 0 && fresh->n > 0)
        return ax_seterr(errbuf, errlen, AX_ERR_CONFLICT,
                         "job %s has unfinished instances nobody asked to cancel", name);
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_delete, 1, jp, NULL, NULL, NULL, errbuf, errlen);
    return rc;
}

int ax_store_job_delete(ax_pg_t *pg, const char *name, int64_t job_id,
                        ax_job_pending_t *ret_fresh, char *errbuf, size_t errlen) {
    ret_fresh->ids = NULL;
    ret_fresh->n = 0;
    int rc = ax_pg_begin(pg, errbuf, errlen);
    if (rc < 0)
        return rc;
    rc = delete_in_tx(pg, name, job_id, ret_fresh, errbuf, errlen);
    if (rc == 0)
        rc = ax_pg_commit(pg, errbuf, errlen);
    if (rc < 0)
        ax_pg_rollback(pg);
    return rc;
}

/* ---- the fire ledger ----------------------------------------------------------------- */

enum { H_NOMINAL, H_DECISION, H_INSTANCE, H_STATE, H_OUTCOME, H_DETAIL, H_EXISTS };
AX_STMT(st_history, "job.history",
        "SELECT " MS("f.nominal_time") ", f.decision, f.instance_id, i.state, i.outcome,"
        " f.detail, i.id IS NOT NULL"
        " FROM job_fire f JOIN job j ON j.id = f.job_id"
        " LEFT JOIN job_instance i ON i.id = f.instance_id"
        " WHERE j.name = $1 AND ($2::bigint IS NULL OR f.nominal_time >= " TS("$2") ")"
        " ORDER BY f.nominal_time DESC LIMIT $3::int");
AX_STMT(st_history_page, "job.history_page",
        "SELECT " MS("f.nominal_time") ", f.decision, f.instance_id, i.state, i.outcome,"
        " f.detail, i.id IS NOT NULL"
        " FROM job_fire f JOIN job j ON j.id = f.job_id"
        " LEFT JOIN job_instance i ON i.id = f.instance_id"
        " WHERE j.name = $1 AND ($2::bigint IS NULL OR f.nominal_time >= " TS("$2") ")"
        " AND ($4::bigint IS NULL OR f.nominal_time < " TS("$4") ")"
        " ORDER BY f.nominal_time DESC LIMIT $3::int");

void ax_job_fires_free(ax_job_fire_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++) {
        free(rows[i].decision);
        free(rows[i].instance_state);
        free(rows[i].instance_outcome);
        free(rows[i].detail);
    }
    free(rows);
}

static int fire_read(const PGresult *r, int i, ax_job_fire_t *f) {
    f->nominal_ms = ax_pg_int(r, i, H_NOMINAL);
    opt_int(r, i, H_INSTANCE, &f->has_instance, &f->instance_id);
    f->instance_exists = ax_pg_bool(r, i, H_EXISTS);
    f->decision = text_col(r, i, H_DECISION);
    f->instance_state = ax_pg_strdup(r, i, H_STATE);
    f->instance_outcome = ax_pg_strdup(r, i, H_OUTCOME);
    f->detail = ax_pg_strdup(r, i, H_DETAIL);
    return !f->decision || (!f->instance_state && !PQgetisnull(r, i, H_STATE)) ||
                   (!f->instance_outcome && !PQgetisnull(r, i, H_OUTCOME)) ||
                   (!f->detail && !PQgetisnull(r, i, H_DETAIL))
               ? AX_ERR_NOMEM
               : 0;
}

static int history_run(ax_pg_t *pg, ax_stmt_t *st, int np, const char *const *p,
                       ax_job_fire_t **ret_rows, size_t *ret_n, char *errbuf, size_t errlen) {
    PGresult *r;
    *ret_rows = NULL;
    *ret_n = 0;
    int rc = ax_stmt_run(pg, st, np, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t n = (size_t)PQntuples(r);
    ax_job_fire_t *rows = n ? calloc(n, sizeof *rows) : NULL;
    for (size_t i = 0; i < n && rows; i++)
        if (fire_read(r, (int)i, &rows[i]) < 0) {
            ax_job_fires_free(rows, n);
            rows = NULL;
        }
    PQclear(r);
    if (n && !rows)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st->name);
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

int ax_store_job_history(ax_pg_t *pg, const char *name, int has_since, int64_t since_ms,
                         int64_t limit, ax_job_fire_t **ret_rows, size_t *ret_n, char *errbuf,
                         size_t errlen) {
    ax_num_t s, l;
    const char *p[] = {name, has_since ? ax_num(&s, since_ms) : NULL, ax_num(&l, limit)};
    return history_run(pg, &st_history, 3, p, ret_rows, ret_n, errbuf, errlen);
}

int ax_store_job_history_page(ax_pg_t *pg, const char *name, int has_since, int64_t since_ms,
                              int has_before, int64_t before_ms, int64_t limit,
                              ax_job_fire_t **ret_rows, size_t *ret_n, char *errbuf,
                              size_t errlen) {
    ax_num_t s, l, b;
    const char *p[] = {name, has_since ? ax_num(&s, since_ms) : NULL, ax_num(&l, limit),
                       has_before ? ax_num(&b, before_ms) : NULL};
    return history_run(pg, &st_history_page, 4, p, ret_rows, ret_n, errbuf, errlen);
}

/* ---- every column (job show) ---------------------------------------------------------- */

enum { C_KEY, C_VALUE, C_TYPE, C_TIME };
AX_STMT(st_columns, "job.columns",
        "SELECT e.key, e.value, t.typname,"
        " CASE WHEN a.atttypid = 'timestamptz'::regtype AND e.value IS NOT NULL"
        "  THEN " MS("e.value::timestamptz") " END"
        " FROM job j"
        " CROSS JOIN LATERAL json_each_text(row_to_json(j)) WITH ORDINALITY AS e(key, value, n)"
        " LEFT JOIN pg_attribute a ON a.attrelid = 'job'::regclass AND a.attname = e.key"
        " LEFT JOIN pg_type t ON t.oid = a.atttypid"
        " WHERE j.name = $1 ORDER BY e.n");

void ax_job_cols_free(ax_job_col_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++) {
        free(rows[i].key);
        free(rows[i].text);
    }
    free(rows);
}

static int col_read(const PGresult *r, int i, ax_job_col_t *c) {
    c->key = text_col(r, i, C_KEY);
    if (PQgetisnull(r, i, C_VALUE)) {
        c->kind = AX_JOB_COL_NULL;
    } else if (!PQgetisnull(r, i, C_TIME)) {
        c->kind = AX_JOB_COL_TIME;
        c->time_ms = ax_pg_int(r, i, C_TIME);
    } else {
        const char *type = ax_pg_str(r, i, C_TYPE);
        c->kind = type && strcmp(type, "bytea") == 0 ? AX_JOB_COL_BYTES : AX_JOB_COL_TEXT;
        if (!(c->text = ax_pg_strdup(r, i, C_VALUE)))
            return AX_ERR_NOMEM;
    }
    return c->key ? 0 : AX_ERR_NOMEM;
}

int ax_store_job_columns(ax_pg_t *pg, const char *name, ax_job_col_t **ret_rows, size_t *ret_n,
                         char *errbuf, size_t errlen) {
    const char *p[] = {name};
    PGresult *r;
    *ret_rows = NULL;
    *ret_n = 0;
    int rc = ax_stmt_run(pg, &st_columns, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t n = (size_t)PQntuples(r);
    ax_job_col_t *rows = n ? calloc(n, sizeof *rows) : NULL;
    for (size_t i = 0; i < n && rows; i++)
        if (col_read(r, (int)i, &rows[i]) < 0) {
            ax_job_cols_free(rows, n);
            rows = NULL;
        }
    PQclear(r);
    if (n && !rows)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "job.columns: out of memory");
    if (n == 0)
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no job named %s", name);
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

/* ---- circuit reset ------------------------------------------------------------------- */

AX_STMT(st_circuit_reset, "job.circuit_reset",
        "UPDATE job SET circuit_state = 'closed', consecutive_failures = 0,"
        " circuit_opened_at = NULL WHERE name = $1");

int ax_store_job_circuit_reset(ax_pg_t *pg, const char *name, ax_job_t *ret_before,
                               char *errbuf, size_t errlen) {
    const char *p[] = {name};
    memset(ret_before, 0, sizeof *ret_before);
    int rc = ax_pg_begin(pg, errbuf, errlen);
    if (rc < 0)
        return rc;
    rc = ax_store_job_get(pg, name, 1, ret_before, errbuf, errlen);
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_circuit_reset, 1, p, NULL, NULL, NULL, errbuf, errlen);
    if (rc == 0)
        rc = ax_pg_commit(pg, errbuf, errlen);
    if (rc < 0) {
        ax_pg_rollback(pg);
        ax_job_clear(ret_before);
    }
    return rc;
}
