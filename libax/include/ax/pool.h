/*
 * ax/pool.h — an executor's worker pools as pure policy: how a dispatched
 * run gets into a pool (the claim verdict) and which waiting run starts
 * next (lane order with a starvation bound). No clock is read and no I/O
 * is done here: time is passed in, the store is reached through
 * ax_claim_ops_t, so every decision is unit-tested (tests/unit/test_pool.c,
 * tests/unit/test_claim.c).
 *
 * A pool's queue is one FIFO per priority lane (ax/lane.h). Queued items
 * are intrusive: the caller embeds an ax_pool_item_t in its own run and
 * gets back to it with offsetof. The pool owns no memory.
 */
#ifndef AX_POOL_H
#define AX_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "ax/lane.h"

typedef struct ax_pool_item {
    struct ax_pool_item *next, *prev; /* within its lane's queue */
    int lane;                         /* 0..AX_PRIORITIES-1, set by the caller */
    int64_t queued_ms;                /* when it joined the queue (ax_pool_push) */
} ax_pool_item_t;

typedef struct ax_pool {
    int64_t slots;   /* items running at once */
    int64_t queue;   /* items waiting beyond the slots */
    size_t running;  /* counted by the caller (ax_pool_run_add/_sub) */
    size_t waiting;  /* admitted, not started: queued or being claimed */
    size_t lane_waiting[AX_PRIORITIES]; /* `waiting` by lane */
    struct {
        ax_pool_item_t *head, *tail;    /* queued items of one lane, in arrival order */
    } q[AX_PRIORITIES];
    int64_t lane_started[AX_PRIORITIES]; /* when the lane last started an item here */
} ax_pool_t;

/* ---- counts ---- */

/* An item of `lane` admitted to the pool (waiting, queued or not) / no
 * longer waiting (started, or dropped). */
void ax_pool_wait_add(ax_pool_t *p, int lane);
void ax_pool_wait_sub(ax_pool_t *p, int lane);

/* What the pool holds as seen by an item of `lane`: everything running
 * plus what waits of that lane and the more urgent ones — waiting items of
 * less urgent lanes do not keep a more urgent one out (they would start
 * after it anyway). So a pool holds at most slots + queue items of any one
 * lane and, however the lanes mix, at most AX_PRIORITIES x that. */
int64_t ax_pool_load(const ax_pool_t *p, int lane);

/* 1 if the pool admits nothing more of `lane` (load >= slots + queue). */
int ax_pool_full(const ax_pool_t *p, int lane);

/* 1 if a pool that was full for `lane` has drained enough to take more
 * again: room for half its queue (load <= slots + queue / 2). */
int ax_pool_drained(const ax_pool_t *p, int lane);

/* ---- the queue ---- */

/* At the tail of its lane (it->lane), queued at `now`. */
void ax_pool_push(ax_pool_t *p, ax_pool_item_t *it, int64_t now);

/* Back at the head of its lane, keeping its queued_ms (a start that could
 * not be carried out). */
void ax_pool_push_front(ax_pool_t *p, ax_pool_item_t *it);

/* Out of the queue; 0 if it was not queued (then nothing changes). */
int ax_pool_remove(ax_pool_t *p, ax_pool_item_t *it);

/* The next item to start, removed from the queue (NULL if none): the head
 * of the most urgent lane that has one, unless a less urgent lane starves
 * — its head waited starve_ms and the lane has not started anything here
 * for starve_ms — then the head that waited longest among those (so a
 * steady stream of urgent work delays the other lanes by at most about
 * starve_ms per start, never for ever). */
ax_pool_item_t *ax_pool_pop(ax_pool_t *p, int64_t now, int64_t starve_ms);

/* ---- admission: the claim verdict ----
 *
 * A batch of dispatched runs is claimed in one store call; the runs it did
 * not win (jobs with a concurrency limit, duplicates, stale dispatches)
 * are tried one by one. Every run leaves with exactly one verdict; a store
 * error never becomes "not claimable" (which drops the dispatch): it is
 * AX_CLAIM_RETRY, and the caller claims again after a backoff. */
typedef enum ax_claim {
    AX_CLAIM_PENDING = 0,   /* not decided (the start value) */
    AX_CLAIM_CLAIMED,       /* ours (lease_ms set): queue it */
    AX_CLAIM_NO_SLOT,       /* its job is at its concurrency limit: handed back to the trigger */
    AX_CLAIM_NOT_CLAIMABLE, /* not SCHEDULED at that attempt: a duplicate or stale dispatch */
    AX_CLAIM_RETRY,         /* the store failed: keep it, claim again later */
} ax_claim_t;

typedef struct ax_claim_item {
    int64_t instance_id;
    int32_t attempt;
    ax_claim_t verdict;              /* out */
    int64_t lease_ms;                /* out, when CLAIMED */
    int shard_index, shard_total;    /* out, when CLAIMED (0, 1 otherwise) */
    int probe;                       /* out, when CLAIMED: run as the size probe */
} ax_claim_item_t;

/* The store calls a claim makes. Both return 0 or an ax/common.h error
 * (AX_ERR_IO: retry later; AX_ERR_INVALID: bad data; ...) with the reason
 * in err. */
typedef struct ax_claim_ops {
    /* Claim items[0..n) at once: set CLAIMED (with lease and shard) on the
     * items won, leave the others PENDING. */
    int (*claim_batch)(void *ctx, ax_claim_item_t *items, size_t n, char *err, size_t errlen);
    /* Claim one item the batch did not win: set CLAIMED, NO_SLOT or
     * NOT_CLAIMABLE. */
    int (*claim_one)(void *ctx, ax_claim_item_t *it, char *err, size_t errlen);
} ax_claim_ops_t;

/* Give every item of items[0..n) a verdict. Returns 0, or the first store
 * error (its reason in err): the items it left undecided are RETRY. After
 * an AX_ERR_IO of claim_one the rest is not tried (the server is away);
 * after another error only that item is RETRY and the others are tried. */
int ax_claim_decide(const ax_claim_ops_t *ops, void *ctx, ax_claim_item_t *items, size_t n,
                    char *err, size_t errlen);

const char *ax_claim_name(ax_claim_t c);

#endif
