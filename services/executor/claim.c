/*
 * claim.c — claims of consumed runs. Every RUN_NEW run is claimed in one
 * batch statement (CAS SCHEDULED -> LOCKED with a lease sized from the
 * job's observed run time); the ones it did not win — jobs with a
 * concurrency limit, duplicates, stale dispatches — one by one
 * (ax_run_claim_limited). ax_claim_decide() (ax/pool.h) gives each run its
 * verdict; this file carries it out: queue it, hand it back, drop it as a
 * duplicate, or keep it for a retry after a store error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/log.h"
#include "ax/store_run.h"
#include "ax/store_counter.h"
#include "executor.h"

typedef struct claim_ctx {
    executor_t *ex;
    ax_run_lease_t lease;
} claim_ctx_t;

static int op_claim_batch(void *arg, ax_claim_item_t *items, size_t n, char *err, size_t errlen) {
    claim_ctx_t *c = arg;
    ax_svc_t *svc = &c->ex->svc;
    int64_t *ids = calloc(n, sizeof *ids);
    int32_t *att = calloc(n, sizeof *att);
    /* which rows won went to an item: at most n rows; allocated before the
     * claim commits (claimed rows nobody runs would wait for their lease) */
    unsigned char *taken = calloc(n, 1);
    if (!ids || !att || !taken) {
        free(ids);
        free(att);
        free(taken);
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        ids[i] = items[i].instance_id;
        att[i] = items[i].attempt;
    }
    ax_run_claimed_t *rows = NULL;
    size_t nrows = 0;
    int rc = ax_run_claim(svc->pg, svc->worker_id, ids, att, n, &c->lease, &rows, &nrows, err,
                          errlen);
    free(ids);
    free(att);
    /* A row won is one item's: the first with its instance and attempt. A
     * second record of the instance in the same batch (a dispatch produced
     * again, an uncommitted one read beside its replacement) or of another
     * attempt stays unclaimed, and the claim one by one calls it lost. */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ax_run_claimed_t *w = ax_run_find(rows, nrows, sizeof *rows, items[i].instance_id);
        if (!w || w->attempt != items[i].attempt || (size_t)(w - rows) >= n || taken[w - rows])
            continue;
        taken[w - rows] = 1;
        items[i].verdict = AX_CLAIM_CLAIMED;
        items[i].lease_ms = w->lease_ms;
        items[i].shard_index = w->shard_index;
        items[i].shard_total = w->shard_total;
        items[i].probe = w->probe;
    }
    free(taken);
    free(rows);
    return rc;
}

static int op_claim_one(void *arg, ax_claim_item_t *it, char *err, size_t errlen) {
    claim_ctx_t *c = arg;
    ax_svc_t *svc = &c->ex->svc;
    ax_run_limited_t res = AX_RUN_LIMITED_GONE;
    int rc = ax_run_claim_limited(svc->pg, svc->worker_id, it->instance_id, it->attempt,
                                  &c->lease, &res, &it->lease_ms, err, errlen);
    if (rc < 0)
        return rc;
    it->verdict = res == AX_RUN_LIMITED_CLAIMED   ? AX_CLAIM_CLAIMED
                  : res == AX_RUN_LIMITED_NO_SLOT ? AX_CLAIM_NO_SLOT
                                                  : AX_CLAIM_NOT_CLAIMABLE;
    return 0;
}

static const ax_claim_ops_t store_ops = {op_claim_batch, op_claim_one};

/* Carry out r's verdict; returns 1 if it was a lost claim (a duplicate). */
static int claim_apply(executor_t *ex, run_t *r, const ax_claim_item_t *it) {
    xm_claim(ex, it->verdict);
    switch (it->verdict) {
    case AX_CLAIM_CLAIMED:
        r->shard_index = it->shard_index;
        r->shard_total = it->shard_total;
        r->probe = it->probe;
        run_queue(r, it->lease_ms);
        return 0;
    case AX_CLAIM_NO_SLOT:
        ax_log_inst(AX_LOG_DEBUG, r->d.instance_id, r->d.job, r->d.trace_id,
                    "instance %lld: job at its concurrency limit; back to the trigger",
                    (long long)r->d.instance_id);
        run_drop(r);
        return 0;
    case AX_CLAIM_NOT_CLAIMABLE:
        ex->duplicates++;
        ax_log_inst(AX_LOG_INFO, r->d.instance_id, r->d.job, r->d.trace_id,
                    "instance %lld attempt %d: claim lost (duplicate or stale dispatch); dropped",
                    (long long)r->d.instance_id, (int)r->d.attempt);
        run_drop(r);
        return 1;
    case AX_CLAIM_PENDING:
    case AX_CLAIM_RETRY:
        break; /* stays RUN_NEW: claimed again by the retry */
    }
    return 0;
}

int claim_new(executor_t *ex) {
    ax_svc_t *svc = &ex->svc;
    size_t n = ex->nstate[RUN_NEW];
    if (n == 0)
        return 0;
    run_t **runs = calloc(n, sizeof *runs);
    ax_claim_item_t *items = calloc(n, sizeof *items);
    if (!runs || !items) {
        free(runs);
        free(items);
        ax_warn("claim: out of memory");
        return AX_ERR_NOMEM;
    }
    size_t k = 0;
    for (int pass = 0; pass < 2 && k < n; pass++) { /* from the first new one; else all */
        k = 0;
        run_t *from = pass == 0 && ex->first_new ? ex->first_new : ex->head;
        for (run_t *r = from; r && k < n; r = r->next)
            if (r->state == RUN_NEW) {
                runs[k] = r;
                items[k++] = (ax_claim_item_t){.instance_id = r->d.instance_id,
                                               .attempt = r->d.attempt};
            }
    }
    n = k;
    if (n == 0) { /* cannot be: nstate counts them */
        free(runs);
        free(items);
        return 0;
    }
    const ax_conf_t *c = &svc->conf;
    claim_ctx_t ctx = {ex, {c->executor_lease_factor, c->executor_lease_min_ms,
                            c->executor_lease_max_ms}};
    char err[1024] = "";
    int rc = ax_claim_decide(&store_ops, &ctx, items, n, err, sizeof err);
    int64_t lost = 0;
    size_t kept = 0;
    ex->first_new = NULL;
    for (size_t i = 0; i < n; i++) {
        lost += claim_apply(ex, runs[i], &items[i]);
        kept += items[i].verdict == AX_CLAIM_RETRY;
        if (runs[i]->state == RUN_NEW && !ex->first_new) /* claimed again later */
            ex->first_new = runs[i];
    }
    if (rc < 0)
        ax_warn("claim: %s (%zu dispatch(es) kept: claimed again after a backoff)", err, kept);
    free(runs);
    free(items);
    if (lost)
        ax_store_counter_add(svc->pg, "executor.claims_lost", lost, NULL, 0);
    if (rc == 0)
        ex->claim_failures = 0;
    return rc;
}

void release_waiting(executor_t *ex) {
    size_t n = 0;
    for (run_t *r = ex->head; r; r = r->next)
        n += r->state == RUN_CLAIMED;
    if (n == 0)
        return;
    int64_t *ids = calloc(n, sizeof *ids);
    size_t k = 0;
    for (run_t *r = ex->head; r; r = r->next)
        if (r->state == RUN_CLAIMED) {
            if (ids)
                ids[k++] = r->d.instance_id;
            run_unqueue(r, RUN_NEW); /* not committed */
            ex->first_new = ex->head;
        }
    char err[512] = "out of memory";
    if (ids && ax_run_release(ex->svc.pg, ex->svc.worker_id, ids, k, NULL, err, sizeof err) == 0)
        ax_info("%zu claimed instance(s) that had not started handed back", n);
    else
        ax_warn("handing back claimed instances: %s (their leases expire instead)", err);
    free(ids);
}
