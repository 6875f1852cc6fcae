/*
 * h_flows.c — /api/v1/flows: list, define, one flow with its DAG, delete,
 * start a run, runs with their stages' states (docs/API.md "Flows").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "ax/common.h"
#include "ax/pg.h"
#include "ax/store_flow.h"

#define PG(rq) ((rq)->pg)
#define MAX_STAGES 256

static json_t *stages_json(req_t *rq, int64_t flow_id, int *ret_rc, char *err, size_t len) {
    json_t *a = json_array();
    const char *after = NULL;
    char last[128] = "";
    for (;;) {
        ax_flow_stage_t *rows;
        size_t n;
        int rc = ax_store_flow_stages(PG(rq), flow_id, after, 500, &rows, &n, err, len);
        if (rc < 0) {
            *ret_rc = rc;
            return a;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *deps = json_array();
            for (size_t d = 0; d < rows[i].ndeps; d++)
                json_array_append_new(deps, js(rows[i].deps[d]));
            json_array_append_new(a, json_pack("{s:o,s:o,s:o}", "name", js(rows[i].name), "job",
                                               js(rows[i].job), "after", deps));
        }
        if (n)
            snprintf(last, sizeof last, "%s", rows[n - 1].name);
        ax_flow_stages_free(rows, n);
        if (n < 500)
            break;
        after = last;
    }
    *ret_rc = 0;
    return a;
}

static json_t *flow_json(const ax_flow_t *f, json_t *stages) {
    json_t *last = f->last_run_id ? json_pack("{s:I,s:o}", "id", (json_int_t)f->last_run_id,
                                              "state", js(f->last_run_state))
                                  : json_null();
    return json_pack("{s:I,s:o,s:o,s:I,s:o,s:o,s:o}", "id", (json_int_t)f->id, "name",
                     js(f->name), "on_failure", js(f->on_failure), "nstages",
                     (json_int_t)f->nstages, "stages", stages ? stages : json_null(),
                     "schedule_job", js(f->sched_job), "last_run", last);
}

void h_flows_list(req_t *rq) {
    static const char *const allowed[] = {"limit", "cursor", NULL};
    int64_t limit;
    if (q_only(rq, allowed) || q_limit(rq, &limit))
        return;
    ax_flow_filter_t f = {.after_name = q_get(rq, "cursor")};
    ax_flow_t *rows;
    size_t n;
    char err[1024];
    int rc = ax_store_flow_list(PG(rq), &f, (size_t)limit + 1, &rows, &n, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; i < n && (int64_t)i < limit; i++)
        json_array_append_new(items, flow_json(&rows[i], NULL));
    api_page(rq, items, (int64_t)n > limit ? rows[limit - 1].name : NULL);
    ax_flows_free(rows, n);
}

static void reply_flow(req_t *rq, const char *name, int status) {
    ax_flow_t f = {0};
    char err[1024];
    int rc = ax_store_flow_get(PG(rq), name, &f, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, rc == AX_ERR_NOTFOUND ? "no such flow" : err);
        return;
    }
    json_t *st = stages_json(rq, f.id, &rc, err, sizeof err);
    if (rc < 0) {
        json_decref(st);
        api_fail(rq, rc, NULL, err);
    } else {
        api_reply(rq, status, flow_json(&f, st));
    }
    ax_flow_clear(&f);
}

void h_flow_get(req_t *rq) {
    static const char *const allowed[] = {NULL};
    if (!q_only(rq, allowed))
        reply_flow(rq, rq->seg[1], 200);
}

/* ---- define ------------------------------------------------------------------------------ */

typedef struct dag {
    ax_flow_stage_def_t d[MAX_STAGES];
    const char *deps[MAX_STAGES][MAX_STAGES / 8];
    int indeg[MAX_STAGES];
    size_t n;
} dag_t;

static long dag_find(const dag_t *g, const char *name) {
    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->d[i].name, name) == 0)
            return (long)i;
    return -1;
}

/* 1 if the stages hold a cycle (Kahn: what cannot be ordered). */
static int dag_cyclic(dag_t *g) {
    size_t done = 0, prev = (size_t)-1;
    int used[MAX_STAGES] = {0};
    while (done != prev) {
        prev = done;
        for (size_t i = 0; i < g->n; i++) {
            if (used[i])
                continue;
            size_t k = 0;
            while (k < g->d[i].ndeps && used[dag_find(g, g->d[i].deps[k])])
                k++;
            if (k == g->d[i].ndeps) {
                used[i] = 1;
                done++;
            }
        }
    }
    return done != g->n;
}

static int bad(req_t *rq, const char *field, const char *msg) {
    api_error(rq, 400, "bad_request", field, "%s: %s", field, msg);
    return -1;
}

/* One stage object i into g; -1 after replying 400. */
static int dag_stage(req_t *rq, dag_t *g, json_t *s, size_t i) {
    char f[48];
    const char *name = json_string_value(json_object_get(s, "name"));
    const char *job = json_string_value(json_object_get(s, "job"));
    json_t *after = json_object_get(s, "after");
    snprintf(f, sizeof f, "stages[%zu]", i);
    if (!json_is_object(s))
        return bad(rq, f, "must be an object");
    snprintf(f, sizeof f, "stages[%zu].name", i);
    if (!name || !*name || strlen(name) > 64)
        return bad(rq, f, "must be a stage name of 1..64 characters");
    if (dag_find(g, name) >= 0)
        return bad(rq, f, "stage defined twice");
    snprintf(f, sizeof f, "stages[%zu].job", i);
    if (!job || !*job)
        return bad(rq, f, "must name a job");
    snprintf(f, sizeof f, "stages[%zu].after", i);
    if (after && (!json_is_array(after) || json_array_size(after) > MAX_STAGES / 8))
        return bad(rq, f, "must be an array of at most 32 stage names");
    for (size_t k = 0; after && k < json_array_size(after); k++)
        if (!(g->deps[i][k] = json_string_value(json_array_get(after, k))))
            return bad(rq, f, "must hold stage names");
    g->d[i] = (ax_flow_stage_def_t){.name = name, .job = job, .deps = g->deps[i],
                                    .ndeps = after ? json_array_size(after) : 0};
    g->n = i + 1;
    return 0;
}

static int dag_of(req_t *rq, dag_t *g) {
    json_t *st = json_object_get(rq->body, "stages");
    if (!json_is_array(st) || json_array_size(st) < 1 || json_array_size(st) > MAX_STAGES)
        return bad(rq, "stages", "must be an array of 1..256 stages");
    for (size_t i = 0; i < json_array_size(st); i++)
        if (dag_stage(rq, g, json_array_get(st, i), i) < 0)
            return -1;
    for (size_t i = 0; i < g->n; i++)
        for (size_t k = 0; k < g->d[i].ndeps; k++)
            if (dag_find(g, g->d[i].deps[k]) < 0) {
                char f[48], m[160];
                snprintf(f, sizeof f, "stages[%zu].after", i);
                snprintf(m, sizeof m, "unknown stage '%.64s'", g->d[i].deps[k]);
                return bad(rq, f, m);
            }
    if (dag_cyclic(g))
        return bad(rq, "stages", "the stages hold a cycle");
    return 0;
}

static int flow_name_ok(const char *s) {
    static const char allowed[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
    size_t n = s ? strlen(s) : 0;
    return n >= 1 && n <= 123 && strspn(s, allowed) == n && !strchr("._-", s[0]);
}

void h_flows_create(req_t *rq) {
    static const char *const keys[] = {"name", "on_failure", "stages", NULL};
    if (!rq->body) {
        api_error(rq, 400, "invalid_json", NULL, "a flow object is needed");
        return;
    }
    if (body_only(rq, keys) < 0)
        return;
    const char *name = json_string_value(json_object_get(rq->body, "name"));
    json_t *pol = json_object_get(rq->body, "on_failure");
    const char *policy = pol ? json_string_value(pol) : "stop";
    if (!flow_name_ok(name)) {
        bad(rq, "name", "1-123 of A-Z a-z 0-9 . _ - starting with a letter or digit");
        return;
    }
    if (!policy || (strcmp(policy, "stop") != 0 && strcmp(policy, "continue") != 0)) {
        bad(rq, "on_failure", "must be stop or continue");
        return;
    }
    dag_t *g = calloc(1, sizeof *g);
    if (!g) {
        api_error(rq, 500, "internal", NULL, "out of memory");
        return;
    }
    if (dag_of(rq, g) == 0) {
        const char *jobs[MAX_STAGES];
        for (size_t i = 0; i < g->n; i++)
            jobs[i] = g->d[i].job;
        long missing;
        char err[1024], f[48];
        int64_t id;
        int rc = ax_store_flow_missing_job(PG(rq), jobs, g->n, &missing, err, sizeof err);
        ax_flow_def_t def = {.name = name, .on_failure = policy, .stages = g->d, .nstages = g->n};
        if (rc == 0 && missing >= 0) {
            snprintf(f, sizeof f, "stages[%ld].job", missing);
            bad(rq, f, "no such job");
        } else if (rc == 0 && (rc = ax_pg_begin(PG(rq), err, sizeof err)) == 0 &&
                   (rc = ax_store_flow_define(PG(rq), &def, &id, err, sizeof err)) == 0 &&
                   (rc = ax_pg_commit(PG(rq), err, sizeof err)) == 0) {
            reply_flow(rq, name, 201);
        }
        if (rc < 0) {
            ax_pg_rollback(PG(rq));
            api_fail(rq, rc, rc == AX_ERR_CONFLICT ? "name" : NULL,
                     rc == AX_ERR_CONFLICT ? "a flow of that name exists" : err);
        }
    }
    free(g);
}

void h_flow_delete(req_t *rq) {
    char err[1024];
    int rc = ax_store_flow_delete(PG(rq), rq->seg[1], err, sizeof err);
    if (rc < 0)
        api_fail(rq, rc, NULL, rc == AX_ERR_NOTFOUND ? "no such flow" : err);
    else
        api_reply(rq, 200, json_pack("{s:s}", "deleted", rq->seg[1]));
}

void h_flow_run(req_t *rq) {
    char err[1024];
    int64_t run;
    int rc = ax_store_flow_start(PG(rq), rq->seg[1], "manual", &run, err, sizeof err);
    if (rc < 0)
        api_fail(rq, rc, NULL, rc == AX_ERR_NOTFOUND ? "no such flow" : err);
    else
        api_reply(rq, 201, json_pack("{s:I}", "run_id", (json_int_t)run));
}

/* ---- runs -------------------------------------------------------------------------------- */

static json_t *run_json(const ax_flow_run_t *r) {
    json_t *st = json_array();
    for (size_t i = 0; i < r->nstages; i++)
        json_array_append_new(
            st, json_pack("{s:o,s:o,s:o}", "stage", js(r->stages[i].stage), "state",
                          js(r->stages[i].state), "instance_id",
                          r->stages[i].instance_id ? json_integer(r->stages[i].instance_id)
                                                   : json_null()));
    json_t *o = json_pack("{s:I,s:o,s:o,s:o,s:o,s:o,s:o}", "id", (json_int_t)r->id, "state",
                          js(r->state), "started_by", js(r->started_by), "started_at",
                          js(r->started_at), "finished_at", js(r->finished_at), "nominal_time",
                          js(r->nominal_time), "stages", st);
    return o;
}

/* Flow seg[1]'s id; -1 after replying. */
static int flow_id(req_t *rq, int64_t *id) {
    ax_flow_t f = {0};
    char err[1024];
    int rc = ax_store_flow_get(PG(rq), rq->seg[1], &f, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, rc == AX_ERR_NOTFOUND ? "no such flow" : err);
        return -1;
    }
    *id = f.id;
    ax_flow_clear(&f);
    return 0;
}

void h_flow_runs(req_t *rq) {
    static const char *const allowed[] = {"limit", "cursor", NULL};
    int64_t limit, before;
    ax_flow_run_filter_t f = {0};
    if (q_only(rq, allowed) || q_limit(rq, &limit) ||
        q_int(rq, "cursor", 1, INT64_MAX, 0, &before) || flow_id(rq, &f.flow_id) < 0)
        return;
    f.before_id = before;
    ax_flow_run_t *rows;
    size_t n;
    char err[1024];
    int rc = ax_store_flow_runs(PG(rq), &f, (size_t)limit + 1, &rows, &n, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; i < n && (int64_t)i < limit; i++)
        json_array_append_new(items, run_json(&rows[i]));
    int more = (int64_t)n > limit;
    api_page_int(rq, items, more, more ? rows[limit - 1].id : 0);
    ax_flow_runs_free(rows, n);
}

void h_flow_run_get(req_t *rq) {
    static const char *const allowed[] = {NULL};
    ax_flow_run_filter_t f = {0};
    if (q_only(rq, allowed) || seg_id(rq, 3, "run_id", &f.run_id) < 0 ||
        flow_id(rq, &f.flow_id) < 0)
        return;
    ax_flow_run_t *rows;
    size_t n;
    char err[1024];
    int rc = ax_store_flow_runs(PG(rq), &f, 1, &rows, &n, err, sizeof err);
    if (rc < 0)
        api_fail(rq, rc, NULL, err);
    else if (n == 0)
        api_error(rq, 404, "not_found", NULL, "no run %lld of flow %s", (long long)f.run_id,
                  rq->seg[1]);
    else
        api_reply(rq, 200, run_json(&rows[0]));
    ax_flow_runs_free(rows, n);
}
