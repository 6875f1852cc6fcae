/*
 * h_jobs.c — /api/v1/jobs: list, create, one job, update, delete,
 * enable/disable, pause-all/resume-all, next fire times, the decision
 * history, the circuit breaker (docs/API.md "Jobs").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "ax/common.h"
#include "ax/cron.h"
#include "ax/job_json.h"
#include "ax/job_next.h"
#include "ax/ops.h"
#include "ax/schedule.h"
#include "ax/store_api.h"
#include "ax/store_job.h"

#define PG(rq) ((rq)->pg)

static json_t *jint_opt(int has, int64_t v) {
    return has ? json_integer(v) : json_null();
}

static json_t *circuit_json(const ax_job_t *j) {
    return json_pack("{s:o,s:I,s:I,s:I,s:o}", "state", js(j->circuit_state),
                     "consecutive_failures", (json_int_t)j->consecutive_failures, "threshold",
                     (json_int_t)j->circuit_threshold, "cooldown_ms",
                     (json_int_t)j->circuit_cooldown_ms, "opened_at",
                     jtime(j->has_circuit_opened, j->circuit_opened_ms));
}

static json_t *schedule_json(const ax_job_t *j) {
    int interval = j->interval_ms > 0;
    return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "kind", js(j->schedule_kind), "expr",
                     js(j->schedule_expr), "time_zone", js(j->time_zone), "dst_gap",
                     js(j->dst_gap), "dst_overlap", js(j->dst_overlap), "interval_ms",
                     interval ? json_integer(j->interval_ms) : json_null(), "start_at",
                     jtime(j->has_start, j->start_ms));
}

static json_t *last_fire_json(const ax_job_t *j) {
    if (!j->has_last_fire)
        return json_null();
    return json_pack("{s:o,s:o,s:o,s:o}", "nominal_time", jtime(1, j->last_fire_ms), "decision",
                     js(j->last_decision), "instance_id",
                     jint_opt(j->has_last_instance, j->last_instance_id), "instance_state",
                     js(j->last_instance_state));
}

static json_t *retry_json(const ax_job_t *j) {
    json_t *rules = j->retry_rules ? jparse(j->retry_rules) : NULL;
    return json_pack("{s:I,s:I,s:f,s:I,s:I,s:o}", "max", (json_int_t)j->retry_max,
                     "initial_ms", (json_int_t)j->retry_initial_ms, "multiplier",
                     j->retry_multiplier, "max_delay_ms", (json_int_t)j->retry_max_delay_ms,
                     "jitter_ms", (json_int_t)j->retry_jitter_ms, "rules",
                     rules ? rules : json_null());
}

static json_t *job_json(const ax_job_t *j) {
    json_t *o = json_pack(
        "{s:I,s:o,s:b,s:I,s:o,s:o,s:o,s:o,s:I,s:I,s:o,s:I,s:o,s:I,s:o,s:o,s:I,s:o}", "id",
        (json_int_t)j->id, "name", js(j->name), "enabled", j->enabled, "version",
        (json_int_t)j->version, "schedule", schedule_json(j), "handler", js(j->handler_kind),
        "command", j->command_json ? jparse(j->command_json) : json_array(), "group",
        js(j->executor_group), "priority", (json_int_t)j->priority, "timeout_ms",
        (json_int_t)j->timeout_ms, "concurrency",
        jint_opt(j->has_concurrency_limit, j->concurrency_limit), "running",
        (json_int_t)j->running_count, "backlog_max", jint_opt(j->has_backlog_max, j->backlog_max),
        "tolerance_ms", (json_int_t)j->tolerance_ms, "misfire", js(j->misfire_policy), "overlap",
        js(j->overlap_policy), "misfire_threshold_ms", (json_int_t)j->misfire_threshold_ms,
        "routing_key", js(j->routing_key));
    json_object_set_new(o, "catchup_max", json_integer(j->catchup_max));
    json_object_set_new(o, "retry", retry_json(j));
    json_object_set_new(o, "circuit", circuit_json(j));
    json_object_set_new(o, "last_fire", last_fire_json(j));
    json_object_set_new(o, "flow_id", j->flow_id ? json_integer(j->flow_id) : json_null());
    json_object_set_new(o, "created_at", jtime(1, j->created_ms));
    json_object_set_new(o, "updated_at", jtime(1, j->updated_ms));
    return o;
}

/* Up to n fires as [{"time","epoch_ms","dst"}], in the job's zone. */
static json_t *fires_json(const ax_job_t *j, int has_from, int64_t from, int n) {
    ax_fire_time_t f[100];
    int waiting;
    char err[512], t[64];
    json_t *a = json_array();
    int k = ax_job_next_fires(j, has_from, from, n > 100 ? 100 : n, f, &waiting, err, sizeof err);
    ax_tz_t *tz = NULL;
    if (k > 0 && ax_tz_new(j->time_zone, &tz, err, sizeof err) < 0)
        ax_tz_new("UTC", &tz, err, sizeof err);
    for (int i = 0; i < k; i++) {
        if (!tz || ax_tz_format(tz, f[i].t, t, sizeof t) < 0)
            snprintf(t, sizeof t, "%lld", (long long)f[i].t);
        const char *dst = f[i].flags & AX_CRON_SHIFTED    ? "shifted"
                          : f[i].flags & AX_CRON_REPEATED ? "repeated"
                                                          : NULL;
        json_array_append_new(a, json_pack("{s:s,s:I,s:o}", "time", t, "epoch_ms",
                                           (json_int_t)f[i].t, "dst", js(dst)));
    }
    ax_tz_destroy(tz);
    return a;
}

/* Job seg[1]; 0, or -1 after replying (404 / 503). */
static int job_load(req_t *rq, ax_job_t *j) {
    char err[1024];
    int rc = ax_store_job_get(PG(rq), rq->seg[1], 0, j, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, rc == AX_ERR_NOTFOUND ? "no such job" : err);
        return -1;
    }
    return 0;
}

void h_jobs_list(req_t *rq) {
    static const char *const allowed[] = {"limit", "cursor", "enabled", "prefix", NULL};
    int64_t limit;
    ax_job_page_t f = {0};
    if (q_only(rq, allowed) || q_limit(rq, &limit) || q_bool(rq, "enabled", &f.enabled))
        return;
    f.after_name = q_get(rq, "cursor");
    f.prefix = q_get(rq, "prefix");
    f.limit = limit + 1;
    ax_job_t *rows;
    size_t n;
    char err[1024];
    int rc = ax_store_job_page(PG(rq), &f, &rows, &n, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; i < n && (int64_t)i < limit; i++)
        json_array_append_new(items, job_json(&rows[i]));
    api_page(rq, items, (int64_t)n > limit ? rows[limit - 1].name : NULL);
    ax_jobs_free(rows, n);
}

void h_job_get(req_t *rq) {
    static const char *const allowed[] = {NULL};
    ax_job_t j;
    if (q_only(rq, allowed) || job_load(rq, &j) < 0)
        return;
    json_t *o = job_json(&j);
    json_object_set_new(o, "next_fires", fires_json(&j, 0, 0, 5));
    ax_job_clear(&j);
    api_reply(rq, 200, o);
}

/* Reply with job name as it is now (status 200 or 201). */
static void reply_job(req_t *rq, const char *name, int status) {
    ax_job_t j;
    char err[1024];
    int rc = ax_store_job_get(PG(rq), name, 0, &j, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *o = job_json(&j);
    json_object_set_new(o, "next_fires", fires_json(&j, 0, 0, 5));
    ax_job_clear(&j);
    api_reply(rq, status, o);
}

void h_jobs_create(req_t *rq) {
    ax_job_spec_buf_t b;
    const char *field = NULL;
    char err[1024];
    if (!rq->body) {
        api_error(rq, 400, "invalid_json", NULL, "a JobSpec object is needed");
        return;
    }
    int rc = ax_job_spec_from_json(rq->body, 1, &b, &field, err, sizeof err);
    if (rc == 0)
        rc = ax_job_spec_check(&b.spec, 1, &field, err, sizeof err);
    if (rc == 0)
        rc = ax_store_job_create(PG(rq), &b.spec, err, sizeof err);
    if (rc == AX_ERR_CONFLICT)
        api_error(rq, 409, "conflict", "name", "a job named %s already exists", b.spec.name);
    else if (rc < 0)
        api_fail(rq, rc, field, err);
    else
        reply_job(rq, b.spec.name, 201);
    ax_job_spec_buf_clear(&b);
}

/* The spec's checks with what it leaves unchanged taken from the stored job. */
static int update_check(const ax_job_spec_buf_t *b, const ax_job_t *j, const char **field,
                        char *err, size_t len) {
    ax_job_spec_t c = b->spec;
    char *cmd0[2] = {j->command0, NULL};
    if (!c.set_schedule && j->schedule_expr && strcmp(j->schedule_kind, "cron") == 0)
        c.schedule_expr = j->schedule_expr;
    if (!c.time_zone)
        c.time_zone = j->time_zone;
    if (!c.dst_gap)
        c.dst_gap = j->dst_gap;
    if (!c.dst_overlap)
        c.dst_overlap = j->dst_overlap;
    if (!c.handler_kind)
        c.handler_kind = j->handler_kind;
    if (!c.ncommand && b->spec.handler_kind && j->command0) {
        c.command = cmd0;
        c.ncommand = 1;
    }
    const char *kind = c.set_schedule ? c.schedule_kind : j->schedule_kind;
    if (c.has_start && !b->has_at && strcmp(kind, "fixed_rate") != 0 &&
        strcmp(kind, "fixed_delay") != 0) {
        *field = "schedule.start_at";
        return ax_seterr(err, len, AX_ERR_INVALID,
                         "schedule.start_at: goes with fixed_rate or fixed_delay; the job has %s",
                         kind);
    }
    return ax_job_spec_check(&c, 0, field, err, len);
}

void h_job_update(req_t *rq) {
    ax_job_spec_buf_t b;
    const char *field = NULL;
    char err[1024];
    if (!rq->body || json_object_size(rq->body) == 0) {
        api_error(rq, 400, "invalid_json", NULL, "a JobSpec object with a member to change is "
                                                 "needed");
        return;
    }
    int rc = ax_job_spec_from_json(rq->body, 0, &b, &field, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, field, err);
        return;
    }
    b.spec.name = rq->seg[1];
    ax_job_t j;
    ax_pg_t *pg = PG(rq);
    rc = ax_pg_begin(pg, err, sizeof err);
    if (rc == 0 && (rc = ax_store_job_get(pg, rq->seg[1], 1, &j, err, sizeof err)) == 0) {
        rc = update_check(&b, &j, &field, err, sizeof err);
        ax_job_clear(&j);
    }
    if (rc == 0)
        rc = ax_store_job_update(pg, &b.spec, err, sizeof err);
    if (rc == 0)
        rc = ax_pg_commit(pg, err, sizeof err);
    if (rc < 0) {
        ax_pg_rollback(pg);
        api_fail(rq, rc, field, rc == AX_ERR_NOTFOUND ? "no such job" : err);
    } else {
        reply_job(rq, rq->seg[1], 200);
    }
    ax_job_spec_buf_clear(&b);
}

static json_t *ids_json(const int64_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* The delete in a short transaction of its own, tried again if PostgreSQL
 * picks it to end a deadlock (as axctl job delete does). */
static int delete_retrying(req_t *rq, const char *name, int64_t id, char *err, size_t len) {
    for (int tries = 1;; tries++) {
        ax_job_pending_t fresh = {0};
        int rc = ax_store_job_delete(PG(rq), name, id, &fresh, err, len);
        if (rc == AX_ERR_CONFLICT)
            snprintf(err, len,
                     "job %s has %zu unfinished instance(s) nobody asked to cancel (made since): "
                     "not deleted; disable it first, then delete with cancel_pending=true",
                     name, fresh.n);
        ax_job_pending_clear(&fresh);
        if (rc != AX_ERR_IO || tries == 5 ||
            (!strstr(err, "deadlock detected") && !strstr(err, "could not serialize")))
            return rc;
        usleep((useconds_t)(100000 * tries));
    }
}

void h_job_delete(req_t *rq) {
    static const char *const allowed[] = {"cancel_pending", NULL};
    int cancel;
    ax_job_t j;
    if (q_only(rq, allowed) || q_bool(rq, "cancel_pending", &cancel) || job_load(rq, &j) < 0)
        return;
    int64_t id = j.id;
    ax_job_clear(&j);
    char err[1024];
    ax_job_pending_t p = {0};
    int rc = ax_store_job_pending(PG(rq), id, 1, &p, err, sizeof err);
    if (rc == 0 && p.n > 0 && cancel != 1) {
        api_error(rq, 409, "conflict", "cancel_pending",
                  "job %s has %zu unfinished instance(s) (first: %lld): not deleted; give "
                  "cancel_pending=true to cancel them", rq->seg[1], p.n, (long long)p.ids[0]);
        ax_job_pending_clear(&p);
        return;
    }
    ax_cancel_result_t cr = {0};
    if (rc == 0 && p.n > 0)
        rc = ax_ops_cancel(PG(rq), rq->api->svc.producer, &rq->api->svc.conf, p.ids, p.n,
                           "cancelled by an operator (ax-api job delete, cancel_pending)", &cr,
                           err, sizeof err);
    if (rc == 0)
        rc = delete_retrying(rq, rq->seg[1], id, err, sizeof err);
    if (rc < 0)
        api_fail(rq, rc, NULL, err);
    else
        api_reply(rq, 200, json_pack("{s:s,s:o}", "deleted", rq->seg[1], "cancelled",
                                     ids_json(p.ids, p.n)));
    ax_job_pending_clear(&p);
}

static void set_enabled(req_t *rq, int enabled) {
    char err[1024];
    int changed = 0;
    int rc = ax_store_job_set_enabled(PG(rq), rq->seg[1], enabled, &changed, err, sizeof err);
    if (rc < 0)
        api_fail(rq, rc, NULL, rc == AX_ERR_NOTFOUND ? "no such job" : err);
    else
        api_reply(rq, 200, json_pack("{s:s,s:b,s:b}", "name", rq->seg[1], "enabled", enabled,
                                     "changed", changed));
}

void h_job_enable(req_t *rq) { set_enabled(rq, 1); }
void h_job_disable(req_t *rq) { set_enabled(rq, 0); }

static void pause_resume(req_t *rq, int pause) {
    ax_names_t names;
    char err[1024];
    int rc = pause ? ax_store_api_pause_all(PG(rq), &names, err, sizeof err)
                   : ax_store_api_resume_all(PG(rq), &names, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *a = json_array();
    for (size_t i = 0; i < names.n; i++)
        json_array_append_new(a, js(names.v[i]));
    ax_names_clear(&names);
    api_reply(rq, 200, json_pack("{s:o}", pause ? "paused" : "resumed", a));
}

void h_jobs_pause_all(req_t *rq) { pause_resume(rq, 1); }
void h_jobs_resume_all(req_t *rq) { pause_resume(rq, 0); }

void h_job_next(req_t *rq) {
    static const char *const allowed[] = {"n", "from", NULL};
    int64_t n, from;
    int has_from;
    ax_job_t j;
    if (q_only(rq, allowed) || q_int(rq, "n", 1, 100, 10, &n) ||
        q_time(rq, "from", &has_from, &from) || job_load(rq, &j) < 0)
        return;
    api_reply(rq, 200, json_pack("{s:o,s:o,s:o}", "job", js(j.name), "time_zone",
                                 js(j.time_zone), "fires", fires_json(&j, has_from, from, (int)n)));
    ax_job_clear(&j);
}

void h_job_history(req_t *rq) {
    static const char *const allowed[] = {"limit", "cursor", "since", NULL};
    int64_t limit, since, before = 0;
    int has_since;
    ax_job_t j;
    if (q_only(rq, allowed) || q_limit(rq, &limit) || q_time(rq, "since", &has_since, &since))
        return;
    const char *cur = q_get(rq, "cursor");
    if (cur && ax_time_parse(cur, &before) < 0) {
        api_error(rq, 400, "bad_request", "cursor", "cursor: not a cursor of this list");
        return;
    }
    if (job_load(rq, &j) < 0)
        return;
    ax_job_clear(&j);
    ax_job_fire_t *rows;
    size_t n;
    char err[1024];
    int rc = ax_store_job_history_page(PG(rq), rq->seg[1], has_since, since, cur != NULL, before,
                                       limit + 1, &rows, &n, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; i < n && (int64_t)i < limit; i++) {
        const ax_job_fire_t *f = &rows[i];
        json_array_append_new(
            items, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "nominal_time", jtime(1, f->nominal_ms),
                             "decision", js(f->decision), "instance_id",
                             jint_opt(f->has_instance, f->instance_id), "instance_state",
                             js(f->instance_state), "instance_outcome", js(f->instance_outcome),
                             "detail", js(f->detail)));
    }
    int more = (int64_t)n > limit;
    api_page_int(rq, items, more, more ? rows[limit - 1].nominal_ms : 0);
    ax_job_fires_free(rows, n);
}

void h_job_circuit(req_t *rq) {
    static const char *const allowed[] = {NULL};
    ax_job_t j;
    if (q_only(rq, allowed) || job_load(rq, &j) < 0)
        return;
    api_reply(rq, 200, circuit_json(&j));
    ax_job_clear(&j);
}

void h_job_circuit_reset(req_t *rq) {
    ax_job_t before, after;
    char err[1024];
    int rc = ax_store_job_circuit_reset(PG(rq), rq->seg[1], &before, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, rc == AX_ERR_NOTFOUND ? "no such job" : err);
        return;
    }
    json_t *b = circuit_json(&before);
    ax_job_clear(&before);
    if (job_load(rq, &after) < 0) {
        json_decref(b);
        return;
    }
    api_reply(rq, 200, json_pack("{s:o,s:o}", "before", b, "after", circuit_json(&after)));
    ax_job_clear(&after);
}
