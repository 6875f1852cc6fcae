/*
 * pool.c — worker pool policy of the executor: per-lane queues, the start
 * order with its starvation bound, admission counts and the claim verdict
 * (ax/pool.h). Pure: time is passed in, the store reached through ops.
 */
#include "ax/pool.h"

#include <stdio.h>

#include "ax/common.h"

void ax_pool_wait_add(ax_pool_t *p, int lane) {
    p->waiting++;
    p->lane_waiting[lane]++;
}

void ax_pool_wait_sub(ax_pool_t *p, int lane) {
    p->waiting--;
    p->lane_waiting[lane]--;
}

int64_t ax_pool_load(const ax_pool_t *p, int lane) {
    int64_t n = (int64_t)p->running;
    for (int l = 0; l <= lane && l < AX_PRIORITIES; l++)
        n += (int64_t)p->lane_waiting[l];
    return n;
}

int ax_pool_full(const ax_pool_t *p, int lane) {
    return ax_pool_load(p, lane) >= p->slots + p->queue;
}

int ax_pool_drained(const ax_pool_t *p, int lane) {
    return ax_pool_load(p, lane) <= p->slots + p->queue / 2;
}

void ax_pool_push(ax_pool_t *p, ax_pool_item_t *it, int64_t now) {
    it->next = NULL;
    it->prev = p->q[it->lane].tail;
    if (it->prev)
        it->prev->next = it;
    else
        p->q[it->lane].head = it;
    p->q[it->lane].tail = it;
    it->queued_ms = now;
}

void ax_pool_push_front(ax_pool_t *p, ax_pool_item_t *it) {
    it->prev = NULL;
    it->next = p->q[it->lane].head;
    if (it->next)
        it->next->prev = it;
    else
        p->q[it->lane].tail = it;
    p->q[it->lane].head = it;
}

int ax_pool_remove(ax_pool_t *p, ax_pool_item_t *it) {
    if (it->prev)
        it->prev->next = it->next;
    else if (p->q[it->lane].head == it)
        p->q[it->lane].head = it->next;
    else
        return 0; /* not queued */
    if (it->next)
        it->next->prev = it->prev;
    else
        p->q[it->lane].tail = it->prev;
    it->next = it->prev = NULL;
    return 1;
}

ax_pool_item_t *ax_pool_pop(ax_pool_t *p, int64_t now, int64_t starve_ms) {
    int top = -1, pick = -1;
    for (int l = 0; l < AX_PRIORITIES && top < 0; l++)
        if (p->q[l].head)
            top = l;
    if (top < 0)
        return NULL;
    for (int l = top + 1; l < AX_PRIORITIES; l++) {
        const ax_pool_item_t *h = p->q[l].head;
        if (h && now - h->queued_ms >= starve_ms && now - p->lane_started[l] >= starve_ms &&
            (pick < 0 || h->queued_ms < p->q[pick].head->queued_ms))
            pick = l;
    }
    if (pick < 0)
        pick = top;
    ax_pool_item_t *it = p->q[pick].head;
    ax_pool_remove(p, it);
    p->lane_started[pick] = now;
    return it;
}

int ax_claim_decide(const ax_claim_ops_t *ops, void *ctx, ax_claim_item_t *items, size_t n,
                    char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        items[i].verdict = AX_CLAIM_PENDING;
        items[i].lease_ms = -1;
        items[i].shard_index = 0;
        items[i].shard_total = 1;
        items[i].probe = 0;
    }
    int first = 0, away = 0;
    int rc = n ? ops->claim_batch(ctx, items, n, err, errlen) : 0;
    if (rc < 0) {
        for (size_t i = 0; i < n; i++)
            items[i].verdict = AX_CLAIM_RETRY;
        return rc;
    }
    char e[1024];
    for (size_t i = 0; i < n; i++) {
        ax_claim_item_t *it = &items[i];
        if (it->verdict == AX_CLAIM_CLAIMED)
            continue;
        it->verdict = AX_CLAIM_PENDING; /* the batch decides only CLAIMED */
        if (away) { /* the server is away: the rest waits */
            it->verdict = AX_CLAIM_RETRY;
            continue;
        }
        rc = ops->claim_one(ctx, it, e, sizeof e);
        if (rc < 0 || it->verdict == AX_CLAIM_PENDING || it->verdict == AX_CLAIM_RETRY) {
            it->verdict = AX_CLAIM_RETRY;
            away |= rc == AX_ERR_IO;
            if (rc >= 0)
                rc = ax_seterr(e, sizeof e, AX_ERR_INVALID, "instance %lld: no claim verdict",
                               (long long)it->instance_id);
            if (first == 0) {
                first = rc;
                if (err && errlen)
                    snprintf(err, errlen, "%s", e);
            }
        }
    }
    return first;
}

const char *ax_claim_name(ax_claim_t c) {
    switch (c) {
    case AX_CLAIM_PENDING:
        return "pending";
    case AX_CLAIM_CLAIMED:
        return "claimed";
    case AX_CLAIM_NO_SLOT:
        return "no_slot";
    case AX_CLAIM_NOT_CLAIMABLE:
        return "not_claimable";
    case AX_CLAIM_RETRY:
        return "retry";
    }
    return "?";
}
