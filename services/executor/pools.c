/*
 * pools.c — the executor's worker pools: executor.slots/queue/pools and
 * executor.pool.routes, admission of consumed runs, and start waves. Which
 * run starts next, and when a pool is full, is decided by ax/pool.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/log.h"
#include "ax/store_run.h"
#include "executor.h"

#define MAX_POOLS 64

typedef struct spec {
    char name[64];
    int64_t slots, queue;
} spec_t;

static pool_t *pool_find(executor_t *ex, const char *name) {
    for (size_t i = 0; i < ex->npools; i++)
        if (strcmp(ex->pools[i].name, name) == 0)
            return &ex->pools[i];
    return NULL;
}

/* executor.slots/queue (the "command" pool) and executor.pools ->
 * specs[0..*ret_n). */
static int parse_pools(const ax_conf_t *c, spec_t *specs, size_t *ret_n, char *err,
                       size_t errlen) {
    size_t n = 0;
    snprintf(specs[n].name, sizeof specs[n].name, "command");
    specs[n].slots = c->executor_slots;
    specs[n++].queue = c->executor_queue;
    char *list = strdup(c->executor_pools ? c->executor_pools : "");
    int rc = 0;
    for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok && rc == 0;
         tok = strtok_r(NULL, ", ", &save)) {
        char name[64];
        long long slots = 0, queue = c->executor_queue;
        int got = sscanf(tok, "%63[A-Za-z0-9_-]:%lld:%lld", name, &slots, &queue);
        if (got < 2 || slots < 1 || slots > 100000 || queue < 0 || queue > 10000000) {
            rc = ax_seterr(err, errlen, AX_ERR_INVALID,
                           "executor.pools: '%s' is not NAME:SLOTS[:QUEUE] "
                           "(slots 1-100000, queue 0-10000000)",
                           tok);
            break;
        }
        size_t k = 0;
        while (k < n && strcmp(specs[k].name, name) != 0)
            k++;
        if (k == n && n == MAX_POOLS) {
            rc = ax_seterr(err, errlen, AX_ERR_INVALID, "executor.pools: more than %d",
                           MAX_POOLS);
            break;
        }
        if (k == n)
            n++;
        snprintf(specs[k].name, sizeof specs[k].name, "%.63s", name);
        specs[k].slots = slots;
        specs[k].queue = queue;
    }
    free(list);
    *ret_n = n;
    return rc;
}

/* executor.pool.routes -> routes whose pool is the index+1 of its spec. */
static int parse_routes(const ax_conf_t *c, const spec_t *specs, size_t n, route_t **ret,
                        size_t *ret_n, char *err, size_t errlen) {
    route_t *nr = NULL;
    size_t nnr = 0;
    char *list = strdup(c->executor_pool_routes ? c->executor_pool_routes : "");
    for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok;
         tok = strtok_r(NULL, ", ", &save)) {
        char *eq = strchr(tok, '=');
        size_t k = 0;
        if (eq)
            while (k < n && strcmp(specs[k].name, eq + 1) != 0)
                k++;
        route_t *grown = eq && eq != tok && k < n ? realloc(nr, (nnr + 1) * sizeof *nr) : NULL;
        if (!grown) {
            ax_seterr(err, errlen, AX_ERR_INVALID,
                      "executor.pool.routes: '%s' is not JOB=POOL with a pool defined in "
                      "executor.pools",
                      tok);
            free(list);
            free(nr);
            return AX_ERR_INVALID;
        }
        nr = grown;
        snprintf(nr[nnr].job, sizeof nr[nnr].job, "%.*s", (int)(eq - tok), tok);
        nr[nnr].pool = (pool_t *)(uintptr_t)(k + 1); /* index+1, resolved by the caller */
        nnr++;
    }
    free(list);
    *ret = nr;
    *ret_n = nnr;
    return 0;
}

/* Pools are created, or resized in place: runs keep pointers to them, so
 * pools are never freed or moved while the process lives (at most 64). */
int pools_configure(executor_t *ex, const ax_conf_t *c, char *err, size_t errlen) {
    spec_t specs[MAX_POOLS];
    size_t n = 0, nnr = 0;
    route_t *nr = NULL;
    int rc = parse_pools(c, specs, &n, err, errlen);
    if (rc == 0)
        rc = parse_routes(c, specs, n, &nr, &nnr, err, errlen);
    if (rc < 0)
        return rc;
    if (!ex->pools)
        ex->pools = calloc(MAX_POOLS, sizeof *ex->pools);
    if (!ex->pools) {
        free(nr);
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "out of memory");
    }
    for (size_t k = 0; k < n; k++) {
        pool_t *p = pool_find(ex, specs[k].name);
        if (!p) {
            p = &ex->pools[ex->npools++];
            snprintf(p->name, sizeof p->name, "%.63s", specs[k].name);
        }
        p->core.slots = specs[k].slots;
        p->core.queue = specs[k].queue;
    }
    for (size_t i = 0; i < nnr; i++)
        nr[i].pool = pool_find(ex, specs[(uintptr_t)nr[i].pool - 1].name);
    free(ex->routes);
    ex->routes = nr;
    ex->nroutes = nnr;
    return 0;
}

pool_t *pool_for(executor_t *ex, const ax_dispatch_t *d) {
    if (d->job)
        for (size_t i = 0; i < ex->nroutes; i++)
            if (strcmp(ex->routes[i].job, d->job) == 0)
                return ex->routes[i].pool;
    return pool_find(ex, d->handler_kind);
}

void pools_log(const executor_t *ex) {
    for (size_t i = 0; i < ex->npools; i++)
        ax_info("pool %s: %lld slots, queue %lld", ex->pools[i].name,
                (long long)ex->pools[i].core.slots, (long long)ex->pools[i].core.queue);
}

void pools_fini(executor_t *ex) {
    free(ex->routes);
    free(ex->pools);
    ex->routes = NULL;
    ex->pools = NULL;
}

/* ---- runs in pools ---- */

void run_set_state(run_t *r, run_state_t state) {
    executor_t *ex = r->ex;
    ex->nstate[r->state]--;
    ex->nstate[state]++;
    r->state = state;
}

/* Before track(): r is not counted yet. */
void run_admit(executor_t *ex, run_t *r) {
    r->state = RUN_NEW;
    ax_pool_wait_add(&r->pool->core, r->qi.lane);
    if (ax_pool_full(&r->pool->core, r->qi.lane))
        pause_for_pool(ex, r->pool, r->msg);
}

void run_queue(run_t *r, int64_t lease_ms) {
    r->lease_ms = lease_ms;
    run_set_state(r, RUN_CLAIMED);
    ax_pool_push(&r->pool->core, &r->qi, ax_mono_ms());
}

void run_unqueue(run_t *r, run_state_t state) {
    if (r->state == RUN_CLAIMED)
        ax_pool_remove(&r->pool->core, &r->qi);
    ax_pool_wait_sub(&r->pool->core, r->qi.lane);
    run_set_state(r, state);
}

/* A full pool may have drained this way without any run ending (claims
 * lost, leases swept before the start): resume what it paused, or nothing
 * else would. */
void run_drop(run_t *r) {
    if (r->pool && (r->state == RUN_NEW || r->state == RUN_CLAIMED)) {
        run_unqueue(r, RUN_DONE);
        maybe_resume(r->ex);
        return;
    }
    run_set_state(r, RUN_DONE);
}

void run_begin(executor_t *ex, run_t *r) {
    r->started_at_ms = ax_now_ms();
    r->started_mono = ax_mono_ms();
    ax_pool_wait_sub(&r->pool->core, r->qi.lane);
    run_set_state(r, RUN_RUNNING);
    r->pool->core.running++;
    ex->running++;
    xm_started(ex, r);
}

/* ---- start waves ---- */

/* mono0: before the statement that wrote its lease (fence.c). */
static void start_run(executor_t *ex, run_t *r, int64_t mono0) {
    handler_result_t res = {0};
    run_begin(ex, r);
    if (r->ops->start(ex, r, &res) < 0)
        run_done(r, &res);
    else
        fence_set(ex, r, mono0, ex->svc.conf.executor_lease_min_ms);
}

/* As many waiting runs as the pools have free slots, each pool's in lane
 * order (ax_pool_pop), taken out of their queues into *ret_wave. */
static size_t take_wave(executor_t *ex, run_t ***ret_wave) {
    int64_t now = ax_mono_ms(), starve = ex->svc.conf.executor_lane_starve_ms;
    run_t **wave = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < ex->npools; i++) {
        ax_pool_t *pl = &ex->pools[i].core;
        for (size_t k = 0; (int64_t)(pl->running + k) < pl->slots; k++) {
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 64;
                run_t **w = realloc(wave, nc * sizeof *w);
                if (!w)
                    break;
                wave = w;
                cap = nc;
            }
            ax_pool_item_t *it = ax_pool_pop(pl, now, starve);
            if (!it)
                break;
            wave[n++] = RUN_OF_ITEM(it);
        }
    }
    *ret_wave = wave;
    return n;
}

/* Mark RUNNING (one statement) and start as many waiting runs as the pools
 * have free slots. */
void start_ready(executor_t *ex) {
    ax_svc_t *svc = &ex->svc;
    if (svc->stopping)
        return;
    run_t **wave = NULL;
    size_t n = take_wave(ex, &wave);
    int64_t *ids = n ? calloc(n, sizeof *ids) : NULL;
    if (!ids) {
        for (size_t i = n; i-- > 0;) /* back where they were, in order */
            ax_pool_push_front(&wave[i]->pool->core, &wave[i]->qi);
        free(wave);
        return;
    }
    for (size_t i = 0; i < n; i++)
        ids[i] = wave[i]->d.instance_id;
    char err[1024];
    ax_run_held_t *mine = NULL;
    size_t rows = 0;
    /* A queued claim's lease is renewed rarely (on_lease): starting gives
     * it a fresh one, the shortest lease (the next renewal sets each
     * run's own). */
    int64_t mono0 = ax_mono_ms();
    int rc = ax_run_start(svc->pg, svc->worker_id, ids, n, svc->conf.executor_lease_min_ms,
                          &mine, &rows, err, sizeof err);
    free(ids);
    if (rc < 0) {
        ax_warn("mark running: %s", err);
        for (size_t i = n; i-- > 0;) /* back where they were, in order */
            ax_pool_push_front(&wave[i]->pool->core, &wave[i]->qi);
        free(wave);
        event_add(ex->ev_retry, &(struct timeval)AX_TV_MS(200));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        run_t *r = wave[i];
        const ax_run_held_t *f = ax_run_find(mine, rows, sizeof *mine, r->d.instance_id);
        if (!f) { /* lost meanwhile (lease swept, cancelled) */
            ax_log_inst(AX_LOG_INFO, r->d.instance_id, r->d.job, r->d.trace_id,
                        "instance %lld: no longer ours before it started; dropped",
                        (long long)r->d.instance_id);
            ax_pool_wait_sub(&r->pool->core, r->qi.lane);
            run_set_state(r, RUN_DONE);
            maybe_resume(ex);
        } else if (f->cancel_requested) {
            handler_result_t none = {.outcome = AX_OUTCOME_CANCELLED};
            r->stop_why = "cancelled";
            run_begin(ex, r);
            run_done(r, &none);
        } else {
            start_run(ex, r, mono0);
        }
    }
    const handler_ops_t *const kinds[] = {&handler_command, &handler_http, &handler_plugin};
    for (size_t i = 0; n && i < AX_ARRAY_SIZE(kinds); i++)
        if (kinds[i]->flush)
            kinds[i]->flush(ex);
    free(wave);
    free(mine);
}
