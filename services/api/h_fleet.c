/*
 * h_fleet.c — /api/v1/executors, lanes, leader, counters, whoami
 * (docs/API.md "Fleet", "DLQ and counters").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "ax/common.h"
#include "ax/store_api.h"
#include "ax/store_counter.h"
#include "ax/store_fleet.h"

#define PG(rq) ((rq)->pg)

static json_t *worker_json(const ax_worker_t *w) {
    json_t *groups = json_array(), *pools = json_array();
    for (size_t i = 0; i < w->ngroups; i++)
        json_array_append_new(groups, js(w->groups[i]));
    for (size_t i = 0; i < w->npools; i++) {
        const ax_worker_pool_t *p = &w->pools[i];
        json_array_append_new(pools, json_pack("{s:o,s:I,s:I,s:I,s:I}", "name", js(p->name),
                                               "running", (json_int_t)p->running, "slots",
                                               (json_int_t)p->slots, "waiting",
                                               (json_int_t)p->waiting, "queue",
                                               (json_int_t)p->queue));
    }
    return json_pack("{s:o,s:o,s:o,s:I,s:b,s:o,s:o,s:o,s:o,s:I,s:I,s:b,s:o}", "id", js(w->id),
                     "state", js(w->state), "heartbeat_at", jtime(1, w->heartbeat_ms),
                     "heartbeat_age_ms", (json_int_t)w->age_ms, "lost",
                     strcmp(w->state, "lost") == 0, "groups", groups, "cpu_pct",
                     w->cpu_pct < 0 ? json_null() : json_real(w->cpu_pct), "mem_pct",
                     w->mem_pct < 0 ? json_null() : json_real(w->mem_pct), "rss_bytes",
                     w->rss_bytes < 0 ? json_null() : json_integer(w->rss_bytes), "running",
                     (json_int_t)w->running, "waiting", (json_int_t)w->waiting, "fetching",
                     w->fetching, "pools", pools);
}

void h_executors(req_t *rq) {
    static const char *const allowed[] = {"limit", "all", NULL};
    int64_t limit;
    int all;
    if (q_only(rq, allowed) || q_limit(rq, &limit) || q_bool(rq, "all", &all))
        return;
    ax_worker_filter_t f = {.include_silent = all == 1,
                            .lost_after_ms = 3 * rq->api->svc.conf.executor_heartbeat_ms};
    ax_worker_t *rows;
    size_t n;
    char err[1024];
    int rc = ax_store_fleet_workers(PG(rq), &f, (size_t)limit, &rows, &n, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(items, worker_json(&rows[i]));
    ax_workers_free(rows, n);
    api_page(rq, items, NULL);
}

void h_lanes(req_t *rq) {
    static const char *const allowed[] = {NULL};
    if (q_only(rq, allowed))
        return;
    ax_lane_view_t v[16];
    size_t n;
    char err[1024];
    int rc = ax_store_fleet_lanes(PG(rq), rq->api->svc.conf.topic_prefix, v, AX_ARRAY_SIZE(v),
                                  &n, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; i < n; i++) {
        char p[8];
        snprintf(p, sizeof p, "P%d", v[i].lane);
        int m = v[i].measured;
        json_array_append_new(
            items,
            json_pack("{s:i,s:s,s:b,s:o,s:o,s:o,s:o,s:I,s:o}", "lane", v[i].lane, "priority", p,
                      "measured", m, "lag", m ? json_integer(v[i].lag) : json_null(),
                      "deferring", m ? json_boolean(v[i].over) : json_null(), "since",
                      jtime(m && v[i].changed_ms > 0, v[i].changed_ms), "measured_ago_ms",
                      m ? json_integer(v[i].measured_ago_ms) : json_null(), "deferred",
                      (json_int_t)v[i].deferred, "oldest_deferred_wait_ms",
                      v[i].oldest_deferred_ms >= 0 ? json_integer(v[i].oldest_deferred_ms)
                                                   : json_null()));
    }
    api_reply(rq, 200, json_pack("{s:o}", "items", items));
}

void h_leader(req_t *rq) {
    static const char *const allowed[] = {NULL};
    if (q_only(rq, allowed))
        return;
    char role[300], err[1024];
    snprintf(role, sizeof role, "%strigger", rq->api->svc.conf.topic_prefix);
    ax_leader_info_t l = {0};
    int rc = ax_store_fleet_leader(PG(rq), role, &l, err, sizeof err);
    if (rc < 0 && rc != AX_ERR_NOTFOUND) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *leader = rc == 0 ? json_pack("{s:o,s:I,s:I}", "holder", js(l.holder), "epoch",
                                         (json_int_t)l.epoch, "lease_left_ms",
                                         (json_int_t)l.lease_left_ms)
                             : json_null();
    ax_leader_info_clear(&l);
    ax_standby_t *sb;
    size_t n;
    rc = ax_store_fleet_standbys(PG(rq), role,
                                 ax_standby_lost_after_ms(rq->api->svc.conf.trigger_lease_ms),
                                 100, &sb, &n, err, sizeof err);
    if (rc < 0) {
        json_decref(leader);
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *standbys = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(standbys, json_pack("{s:o,s:o,s:o,s:I,s:b}", "holder",
                                                  js(sb[i].holder), "started_at",
                                                  jtime(1, sb[i].started_ms), "seen_at",
                                                  jtime(1, sb[i].heartbeat_ms), "age_ms",
                                                  (json_int_t)sb[i].age_ms, "lost", sb[i].lost));
    ax_standbys_free(sb, n);
    api_reply(rq, 200, json_pack("{s:s,s:o,s:o}", "role", role, "leader", leader, "standbys",
                                 standbys));
}

void h_counters(req_t *rq) {
    static const char *const allowed[] = {NULL};
    if (q_only(rq, allowed))
        return;
    ax_counter_t *rows;
    size_t n;
    char err[1024];
    int rc = ax_store_counter_list(PG(rq), &rows, &n, err, sizeof err);
    if (rc < 0) {
        api_fail(rq, rc, NULL, err);
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(items, json_pack("{s:o,s:I}", "name", js(rows[i].name), "value",
                                               (json_int_t)rows[i].value));
    ax_counters_free(rows, n);
    api_reply(rq, 200, json_pack("{s:o}", "items", items));
}

void h_whoami(req_t *rq) {
    api_reply(rq, 200, json_pack("{s:s,s:s}", "name", rq->token->name, "scope",
                                 ax_scope_name(rq->token->scope)));
}

void h_stats(req_t *rq) {
    static const char *const allowed[] = {"minutes", NULL};
    int64_t minutes;
    char err[1024], *text = NULL;
    if (q_only(rq, allowed) || q_int(rq, "minutes", 1, 1440, 30, &minutes))
        return;
    int rc = ax_store_api_stats(PG(rq), rq->api->svc.conf.topic_prefix, (int)minutes,
                                &text, err, sizeof err);
    api_reply_text(rq, rc, text, err, "api.stats");
}
