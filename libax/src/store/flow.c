/*
 * flow.c — the flow statements (ax/store_flow.h).
 */
#include <stdlib.h>
#include <string.h>

#include "ax/store_flow.h"
#include "store_int.h"
#include "strlist.h"

enum { MISSING_INDEX };
AX_STMT(st_missing_job, "flow.missing_job",
        "SELECT u.i - 1 FROM unnest($1::text[]) WITH ORDINALITY AS u(name, i)"
        " WHERE NOT EXISTS (SELECT 1 FROM job j WHERE j.name = u.name) ORDER BY u.i LIMIT 1");

enum { INSERT_ID };
AX_STMT(st_insert, "flow.insert",
        "INSERT INTO flow (name, failure_policy) VALUES ($1, $2) RETURNING id");

AX_STMT(st_insert_stage, "flow.insert_stage",
        "INSERT INTO flow_stage (flow_id, name, job_name, depends_on)"
        " VALUES ($1::bigint, $2, $3, $4::text[])");

enum { LOCK_ID };
AX_STMT(st_lock, "flow.lock", "SELECT id FROM flow WHERE name = $1 FOR UPDATE");

AX_STMT(st_delete, "flow.delete", "DELETE FROM flow WHERE name = $1");

enum { START_RUN };
AX_STMT(st_start, "flow.start", "SELECT ax_flow_start(id, $2) FROM flow WHERE name = $1");

enum {
    LIST_ID,
    LIST_NAME,
    LIST_POLICY,
    LIST_NSTAGES,
    LIST_JOB,
    LIST_ENABLED,
    LIST_MISFIRE,
    LIST_OVERLAP,
    LIST_RUN_ID,
    LIST_RUN_STATE
};
AX_STMT(st_list, "flow.list",
        "SELECT f.id, f.name, f.failure_policy,"
        "  (SELECT count(*) FROM flow_stage s WHERE s.flow_id = f.id),"
        "  j.name, j.enabled, j.misfire_policy::text, j.overlap_policy::text, lr.id, lr.state"
        " FROM flow f LEFT JOIN job j ON j.flow_id = f.id"
        " LEFT JOIN LATERAL (SELECT r.id, r.state FROM flow_run r WHERE r.flow_id = f.id"
        "                    ORDER BY r.id DESC LIMIT 1) lr ON true"
        " WHERE ($1::text IS NULL OR f.name = $1) AND ($2::text IS NULL OR f.name > $2)"
        " ORDER BY f.name LIMIT $3::bigint");

enum { STAGE_NAME, STAGE_JOB, STAGE_DEPS };
AX_STMT(st_stages, "flow.stages",
        "SELECT name, job_name, array_to_string(depends_on, ',') FROM flow_stage"
        " WHERE flow_id = $1::bigint AND ($2::text IS NULL OR name > $2)"
        " ORDER BY name LIMIT $3::bigint");

enum { RUN_ID, RUN_STATE, RUN_BY, RUN_STARTED, RUN_FINISHED, RUN_NOMINAL };
AX_STMT(st_runs, "flow.runs",
        "SELECT fr.id, fr.state, fr.started_by, fr.started_at::text, fr.finished_at::text,"
        "  (SELECT jf.nominal_time::text FROM job_fire jf WHERE jf.flow_run_id = fr.id LIMIT 1)"
        " FROM flow_run fr WHERE fr.flow_id = $1::bigint"
        " AND ($2::bigint IS NULL OR fr.id = $2::bigint)"
        " AND ($3::bigint IS NULL OR fr.id < $3::bigint)"
        " ORDER BY fr.id DESC LIMIT $4::bigint");

enum { SR_RUN, SR_STAGE, SR_STATE, SR_INSTANCE };
AX_STMT(st_stage_runs, "flow.stage_runs",
        "SELECT run_id, stage, state, instance_id FROM flow_stage_run"
        " WHERE run_id = ANY($1::bigint[]) ORDER BY run_id DESC, stage");

static int nomem(char *errbuf, size_t errlen, const char *what) {
    return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", what);
}

/* The text form of limit, at most INT64_MAX. */
static const char *limit_param(ax_num_t *n, size_t limit) {
    return ax_num(n, limit > (size_t)INT64_MAX ? INT64_MAX : (int64_t)limit);
}

/* ---- defining ---------------------------------------------------------------------- */

static int text_array(ax_strbuf_t *b, const char *const *v, size_t n) {
    int rc = ax_pgarr_begin(b);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = ax_pgarr_text(b, v[i]);
    return rc ? rc : ax_pgarr_end(b);
}

int ax_store_flow_missing_job(ax_pg_t *pg, const char *const *jobs, size_t n, long *ret_index,
                              char *errbuf, size_t errlen) {
    ax_strbuf_t arr = {0};
    if (text_array(&arr, jobs, n) < 0) {
        ax_strbuf_free(&arr);
        return nomem(errbuf, errlen, "flow.missing_job");
    }
    const char *p[] = {arr.s};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_missing_job, 1, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&arr);
    if (rc < 0)
        return rc;
    *ret_index = PQntuples(r) ? (long)ax_pg_int(r, 0, MISSING_INDEX) : -1;
    PQclear(r);
    return 0;
}

static int insert_stage(ax_pg_t *pg, const char *flow_id, const ax_flow_stage_def_t *s,
                        char *errbuf, size_t errlen) {
    ax_strbuf_t deps = {0};
    if (text_array(&deps, s->deps, s->ndeps) < 0) {
        ax_strbuf_free(&deps);
        return nomem(errbuf, errlen, "flow.insert_stage");
    }
    const char *p[] = {flow_id, s->name, s->job, deps.s};
    char why[768];
    int rc = ax_stmt_run(pg, &st_insert_stage, 4, p, NULL, NULL, NULL, why, sizeof why);
    ax_strbuf_free(&deps);
    return rc < 0 ? ax_seterr(errbuf, errlen, rc, "stage '%s': %s", s->name, why) : 0;
}

int ax_store_flow_define(ax_pg_t *pg, const ax_flow_def_t *def, int64_t *ret_id, char *errbuf,
                         size_t errlen) {
    const char *p[] = {def->name, def->on_failure};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_insert, 2, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    int64_t id = ax_pg_int(r, 0, INSERT_ID);
    PQclear(r);
    ax_num_t n_id;
    ax_num(&n_id, id);
    for (size_t i = 0; i < def->nstages; i++)
        if ((rc = insert_stage(pg, n_id.s, &def->stages[i], errbuf, errlen)) < 0)
            return rc;
    *ret_id = id;
    return 0;
}

int ax_store_flow_lock(ax_pg_t *pg, const char *name, int64_t *ret_id, char *errbuf,
                       size_t errlen) {
    const char *p[] = {name};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_lock, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (PQntuples(r) != 1)
        rc = ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no flow named %s", name);
    else
        *ret_id = ax_pg_int(r, 0, LOCK_ID);
    PQclear(r);
    return rc;
}

int ax_store_flow_delete(ax_pg_t *pg, const char *name, char *errbuf, size_t errlen) {
    const char *p[] = {name};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_delete, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (strcmp(PQcmdTuples(r), "0") == 0)
        rc = ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no flow named %s", name);
    PQclear(r);
    return rc;
}

int ax_store_flow_start(ax_pg_t *pg, const char *name, const char *started_by,
                        int64_t *ret_run_id, char *errbuf, size_t errlen) {
    const char *p[] = {name, started_by};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_start, 2, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (PQntuples(r) != 1)
        rc = ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no flow named %s", name);
    else
        *ret_run_id = ax_pg_int(r, 0, START_RUN);
    PQclear(r);
    return rc;
}

/* ---- flows ------------------------------------------------------------------------- */

void ax_flow_clear(ax_flow_t *f) {
    if (!f)
        return;
    free(f->name);
    free(f->on_failure);
    free(f->sched_job);
    free(f->sched_misfire);
    free(f->sched_overlap);
    free(f->last_run_state);
    memset(f, 0, sizeof *f);
}

void ax_flows_free(ax_flow_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++)
        ax_flow_clear(&rows[i]);
    free(rows);
}

/* Row i of flow.list; 0 or AX_ERR_NOMEM (*f cleared). */
static int flow_row(const PGresult *r, int i, ax_flow_t *f) {
    *f = (ax_flow_t){
        .id = ax_pg_int(r, i, LIST_ID),
        .name = ax_pg_strdup(r, i, LIST_NAME),
        .on_failure = ax_pg_strdup(r, i, LIST_POLICY),
        .nstages = ax_pg_int(r, i, LIST_NSTAGES),
        .sched_job = ax_pg_strdup(r, i, LIST_JOB),
        .sched_enabled = ax_pg_bool(r, i, LIST_ENABLED),
        .sched_misfire = ax_pg_strdup(r, i, LIST_MISFIRE),
        .sched_overlap = ax_pg_strdup(r, i, LIST_OVERLAP),
        .last_run_id = ax_pg_int(r, i, LIST_RUN_ID),
        .last_run_state = ax_pg_strdup(r, i, LIST_RUN_STATE),
    };
    int ok = f->name && f->on_failure && (f->sched_job || ax_pg_str(r, i, LIST_JOB) == NULL) &&
             (f->sched_misfire || ax_pg_str(r, i, LIST_MISFIRE) == NULL) &&
             (f->sched_overlap || ax_pg_str(r, i, LIST_OVERLAP) == NULL) &&
             (f->last_run_state || ax_pg_str(r, i, LIST_RUN_STATE) == NULL);
    if (ok)
        return 0;
    ax_flow_clear(f);
    return AX_ERR_NOMEM;
}

int ax_store_flow_list(ax_pg_t *pg, const ax_flow_filter_t *f, size_t limit, ax_flow_t **ret_rows,
                       size_t *ret_n, char *errbuf, size_t errlen) {
    ax_num_t n_limit;
    const char *p[] = {f ? f->name : NULL, f ? f->after_name : NULL, limit_param(&n_limit, limit)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_list, 3, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t n = (size_t)PQntuples(r);
    ax_flow_t *rows = n ? calloc(n, sizeof *rows) : NULL;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (!rows || flow_row(r, (int)i, &rows[i]) < 0) {
            ax_flows_free(rows, i);
            rc = nomem(errbuf, errlen, "flow.list");
        }
    PQclear(r);
    if (rc < 0)
        return rc;
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

int ax_store_flow_get(ax_pg_t *pg, const char *name, ax_flow_t *ret, char *errbuf, size_t errlen) {
    ax_flow_filter_t f = {.name = name};
    ax_flow_t *rows;
    size_t n;
    int rc = ax_store_flow_list(pg, &f, 1, &rows, &n, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (n == 0)
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no flow named %s", name);
    *ret = rows[0];
    free(rows);
    return 0;
}

/* ---- stages ------------------------------------------------------------------------ */

void ax_flow_stages_free(ax_flow_stage_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++) {
        free(rows[i].name);
        free(rows[i].job);
        ax__strlist_free(rows[i].deps, rows[i].ndeps);
    }
    free(rows);
}

int ax_store_flow_stages(ax_pg_t *pg, int64_t flow_id, const char *after_name, size_t limit,
                         ax_flow_stage_t **ret_rows, size_t *ret_n, char *errbuf, size_t errlen) {
    ax_num_t n_id, n_limit;
    const char *p[] = {ax_num(&n_id, flow_id), after_name, limit_param(&n_limit, limit)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_stages, 3, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t n = (size_t)PQntuples(r);
    ax_flow_stage_t *rows = n ? calloc(n, sizeof *rows) : NULL;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        ax_flow_stage_t *s = rows ? &rows[i] : NULL;
        if (s) {
            s->name = ax_pg_strdup(r, (int)i, STAGE_NAME);
            s->job = ax_pg_strdup(r, (int)i, STAGE_JOB);
        }
        if (!s || !s->name || !s->job ||
            ax__strlist_split(ax_pg_str(r, (int)i, STAGE_DEPS), ',', &s->deps, &s->ndeps) < 0) {
            ax_flow_stages_free(rows, rows ? i + 1 : 0);
            rc = nomem(errbuf, errlen, "flow.stages");
        }
    }
    PQclear(r);
    if (rc < 0)
        return rc;
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

/* ---- runs -------------------------------------------------------------------------- */

void ax_flow_runs_free(ax_flow_run_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++) {
        ax_flow_run_t *fr = &rows[i];
        free(fr->state);
        free(fr->started_by);
        free(fr->started_at);
        free(fr->finished_at);
        free(fr->nominal_time);
        for (size_t k = 0; k < fr->nstages; k++) {
            free(fr->stages[k].stage);
            free(fr->stages[k].state);
        }
        free(fr->stages);
    }
    free(rows);
}

static int run_row(const PGresult *r, int i, ax_flow_run_t *fr) {
    *fr = (ax_flow_run_t){
        .id = ax_pg_int(r, i, RUN_ID),
        .state = ax_pg_strdup(r, i, RUN_STATE),
        .started_by = ax_pg_strdup(r, i, RUN_BY),
        .started_at = ax_pg_strdup(r, i, RUN_STARTED),
        .finished_at = ax_pg_strdup(r, i, RUN_FINISHED),
        .nominal_time = ax_pg_strdup(r, i, RUN_NOMINAL),
    };
    return fr->state && fr->started_by && fr->started_at &&
                   (fr->finished_at || !ax_pg_str(r, i, RUN_FINISHED)) &&
                   (fr->nominal_time || !ax_pg_str(r, i, RUN_NOMINAL))
               ? 0
               : AX_ERR_NOMEM;
}

/* The stage runs of rows[0..n) (ids descending, as flow.stage_runs). */
static int attach_stage_runs(ax_pg_t *pg, ax_flow_run_t *rows, size_t n, char *errbuf,
                             size_t errlen) {
    ax_strbuf_t ids = {0};
    int rc = ax_pgarr_begin(&ids);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = ax_pgarr_int(&ids, rows[i].id);
    if (rc == 0)
        rc = ax_pgarr_end(&ids);
    PGresult *r = NULL;
    const char *p[] = {ids.s};
    if (rc < 0)
        rc = nomem(errbuf, errlen, "flow.stage_runs");
    else
        rc = ax_stmt_run(pg, &st_stage_runs, 1, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&ids);
    if (rc < 0)
        return rc;
    int nr = PQntuples(r);
    size_t k = 0;
    for (int i = 0; i < nr && rc == 0; i++) {
        int64_t run = ax_pg_int(r, i, SR_RUN);
        while (k < n && rows[k].id != run)
            k++;
        if (k == n)
            break;
        ax_flow_run_t *fr = &rows[k];
        ax_flow_stage_run_t *ns = realloc(fr->stages, (fr->nstages + 1) * sizeof *ns);
        if (!ns) {
            rc = nomem(errbuf, errlen, "flow.stage_runs");
            break;
        }
        fr->stages = ns;
        ns[fr->nstages++] = (ax_flow_stage_run_t){
            .stage = ax_pg_strdup(r, i, SR_STAGE),
            .state = ax_pg_strdup(r, i, SR_STATE),
            .instance_id = ax_pg_int(r, i, SR_INSTANCE),
        };
        if (!ns[fr->nstages - 1].stage || !ns[fr->nstages - 1].state)
            rc = nomem(errbuf, errlen, "flow.stage_runs");
    }
    PQclear(r);
    return rc;
}

int ax_store_flow_runs(ax_pg_t *pg, const ax_flow_run_filter_t *f, size_t limit,
                       ax_flow_run_t **ret_rows, size_t *ret_n, char *errbuf, size_t errlen) {
    ax_num_t n_flow, n_run, n_before, n_limit;
    const char *p[] = {ax_num(&n_flow, f->flow_id), f->run_id ? ax_num(&n_run, f->run_id) : NULL,
                       f->before_id ? ax_num(&n_before, f->before_id) : NULL,
                       limit_param(&n_limit, limit)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_runs, 4, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t n = (size_t)PQntuples(r);
    ax_flow_run_t *rows = n ? calloc(n, sizeof *rows) : NULL;
    if (n && !rows)
        rc = nomem(errbuf, errlen, "flow.runs");
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (run_row(r, (int)i, &rows[i]) < 0)
            rc = nomem(errbuf, errlen, "flow.runs");
    PQclear(r);
    if (rc == 0 && n)
        rc = attach_stage_runs(pg, rows, n, errbuf, errlen);
    if (rc < 0) {
        ax_flow_runs_free(rows, n);
        return rc;
    }
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}
