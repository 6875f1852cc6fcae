/*
 * scan.c — the leader's due scan: due SCHEDULED instances go out in
 * batches, each in one PostgreSQL transaction fenced by the lease (the
 * candidates read, picked in release order by ax_lane_pick, marked
 * dispatched if still queued) followed by one Kafka transaction (dispatch_produce). The
 * release plan (lag.c) decides which lanes wait; instances of deferring
 * lanes are recorded as deferred as they fall due.
 */
#include <stdlib.h>

#include "ax/common.h"
#include "ax/log.h"
#include "ax/store_lane.h"
#include "trigger.h"

/* Instances of deferring lanes that fell due since the last mark are
 * recorded as deferred, lane by lane from a per-lane mark (mark_since_ms)
 * so each is looked at about once. */
static void mark_deferred(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    int lanes[AX_PRIORITIES];
    int64_t since[AX_PRIORITIES];
    size_t n = 0;
    int64_t now = ax_now_ms();
    for (int p = 1; p < AX_PRIORITIES; p++) {
        if (t->lane_min_age_ms[p] == 0) {
            t->mark_since_ms[p] = 0;
            continue;
        }
        if (!t->mark_since_ms[p]) /* starts deferring: look back a little */
            t->mark_since_ms[p] = now - 60000;
        lanes[n] = p;
        since[n++] = t->mark_since_ms[p];
    }
    if (!n)
        return;
    ax_deferred_mark_t marks[AX_PRIORITIES];
    size_t nm = 0;
    if (ax_store_mark_deferred(svc->pg, lanes, since, n, svc->conf.topic_prefix,
                               svc->conf.trigger_batch, marks, &nm, err, sizeof err) < 0) {
        ax_warn("mark deferred: %s", err);
        return;
    }
    int full[AX_PRIORITIES] = {0};
    for (size_t i = 0; i < nm; i++) {
        int p = marks[i].lane;
        if (p <= 0 || p >= AX_PRIORITIES || marks[i].marked < svc->conf.trigger_batch)
            continue;
        /* a full batch: go on from the last one marked at the next scan */
        full[p] = 1;
        t->mark_since_ms[p] = marks[i].last_due_ms;
    }
    /* a small overlap: rows inserted late with an earlier due_at */
    for (int p = 1; p < AX_PRIORITIES; p++)
        if (t->lane_min_age_ms[p] != 0 && !full[p])
            t->mark_since_ms[p] = now - 2000;
}

/* In the leader's transaction: shard parents expanded, the candidates
 * read (unlocked), the batch picked in release order (ax_lane_pick:
 * effective priority, at most the room of each lane) and marked
 * dispatched, those still queued (dispatch.due_mark). */
static int due_pick(trigger_t *t, ax_dispatch_rows_t *out, char *err, size_t errlen) {
    ax_svc_t *svc = &t->svc;
    int64_t room[AX_PRIORITIES];
    for (int k = 0; k < AX_PRIORITIES; k++)
        room[k] = lane_room(t, k);
    ax_due_plan_t plan = {
        .deployment = svc->conf.topic_prefix,
        .limit = svc->conf.trigger_batch,
        .wait_ms = t->lane_min_age_ms,
        .target = t->lane_target,
        .room = room,
    };
    /* statically sharded parents due now become their shards */
    int rc = ax_store_due_expand_shards(svc->pg, plan.deployment, plan.limit, err, errlen);
    ax_lane_cand_t *c = NULL;
    size_t n = 0;
    if (rc == 0)
        rc = ax_store_due_candidates(svc->pg, &plan, &c, &n, err, errlen);
    if (rc == 0 && n) {
        size_t k = ax_lane_pick(c, n, svc->conf.trigger_aging_ms, room,
                                (size_t)svc->conf.trigger_batch);
        /* candidates left behind short of a full batch: their lanes' room */
        t->room_starved = k < n && k < (size_t)svc->conf.trigger_batch;
        int64_t *ids = malloc((k + 1) * sizeof *ids);
        for (size_t i = 0; ids && i < k; i++)
            ids[i] = c[i].id;
        rc = !ids ? ax_seterr(err, errlen, AX_ERR_NOMEM, "due scan: out of memory")
             : k  ? ax_store_due_mark(svc->pg, ids, k, t->epoch, plan.deployment, out, err,
                                      errlen)
                  : 0;
        free(ids);
    }
    free(c);
    return rc;
}

/* Produce up to one batch of due instances in one Kafka transaction;
 * returns rows handled or <0. */
static int dispatch_batch(trigger_t *t) {
    char err[1024];
    ax_dispatch_rows_t rows = {0};
    /* Like every dispatch batch: in a transaction that re-reads the lease
     * row with our epoch, so a stale leader marks nothing. */
    int rc = ax_pg_begin(t->svc.pg, err, sizeof err);
    if (rc == 0)
        rc = lead_check_in_tx(t, err, sizeof err);
    if (rc == 0)
        rc = due_pick(t, &rows, err, sizeof err);
    int produced = 0;
    if (rc == 0 && rows.n) {
        /* commits, dispatching; on failure rolled back below */
        rc = dispatch_commit_with(t, &rows, &produced, err, sizeof err);
        if (rc < 0)
            rc = lead_tx_finish(t, rc, "due scan", err, sizeof err);
    } else {
        rc = lead_tx_finish(t, rc, "due scan", err, sizeof err);
    }
    if (rc < 0) {
        ax_dispatch_rows_free(&rows);
        return rc;
    }
    int n = (int)rows.n;
    rc = produced;
    ax_dispatch_rows_free(&rows);
    return rc < 0 ? rc : n;
}

/* When to scan next: the next instance the release plan lets go, at most
 * the scan interval. */
static int64_t next_scan_ms(trigger_t *t, int last_batch) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    int64_t next = svc->conf.trigger_scan_interval_ms, due;
    if (ax_store_due_next(svc->pg, svc->conf.topic_prefix, t->lane_min_age_ms, &due, err,
                          sizeof err) == 0 &&
        due < next)
        next = due;
    /* Due work the last batch could not take (its lane has no room until
     * the next lag sample, or rows locked elsewhere): not before then. */
    if (last_batch == 0 && next <= 0) {
        next = svc->conf.trigger_lag_interval_ms; /* the next lag sample rescans sooner */
        t->room_starved = 1;
    }
    return next;
}

void scan_on_timer(evutil_socket_t fd, short what, void *arg) {
    trigger_t *t = arg;
    ax_svc_t *svc = &t->svc;
    if (svc->stopping)
        return;
    if (!lead_active(t)) {
        arm_scan(t, svc->conf.trigger_scan_interval_ms);
        return;
    }
    int n = 0;
    int64_t start = ax_mono_ms();
    for (int round = 0; round < 16; round++) {
        n = dispatch_batch(t);
        if (n < 0) {
            arm_scan(t, ax_backoff_ms(t->scan_failures++, svc->conf.backoff_initial_ms,
                                      svc->conf.backoff_max_ms));
            return;
        }
        t->scan_failures = 0;
        if (n < svc->conf.trigger_batch)
            break;
        /* more due: yield to the loop (its lease timer, ingest, schedules)
         * after 16 batches or a second, then go on */
        if (round == 15 || ax_mono_ms() - start >= 1000) {
            arm_scan(t, 0);
            return;
        }
    }
    mark_deferred(t);
    arm_scan(t, next_scan_ms(t, n));
}
