/*
 * sched_fire.c — one expiry of a job's timer: walk its due times up to now,
 * let the fire decision (ax/fire.h) decide them, queue the decisions in
 * t->fires for the flush, and arm the job's next time.
 */
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/log.h"
#include "sched_int.h"

/* Hard cap on schedule steps walked after an outage (a 1-second cron down
 * for 23 days); beyond it the walk jumps to the last hour before now. */
#define WALK_MAX 2000000

/* Mixed precision: a tolerant job's timer is rounded up to the coarse tick
 * (trigger.coalesce.ms) while the trigger is loaded, when that moves it by
 * at most its tolerance and less than half its misfire threshold; tolerant
 * fires then share wheel expiries and fire batches. next_ms stays the
 * nominal time, so the ledger records the schedule's own time. */
static int64_t coalesced(const trigger_t *t, const sjob_t *j, int64_t next) {
    int64_t tick = t->svc.conf.trigger_coalesce_ms;
    if (j->tolerance_ms <= 0 || tick <= 1 || next <= 0)
        return next;
    if (t->svc.conf.trigger_coalesce_load > 0 && t->fire_rate <= t->svc.conf.trigger_coalesce_load)
        return next;
    int64_t at = (next + tick - 1) / tick * tick;
    int64_t room = j->tolerance_ms;
    if (room > j->policy.threshold_ms / 2)
        room = j->policy.threshold_ms / 2;
    return at - next <= room ? at : next;
}

void sched_arm(trigger_t *t, sjob_t *j, int64_t next, int flags) {
    j->next_ms = next;
    j->next_flags = (uint8_t)flags;
    int64_t at = coalesced(t, j, next);
    if (at != next)
        t->coalesced++;
    ax_wheel_link(t->wheel, &j->e, at < 0 ? 0 : (uint64_t)at);
}

static int fires_push(trigger_t *t, int64_t job_id, int64_t nominal, const char *decision,
                      char *detail) {
    if (t->nfires == t->capfires) {
        size_t n = t->capfires ? t->capfires * 2 : 1024;
        fire_t *f = realloc(t->fires, n * sizeof *f);
        if (!f) {
            free(detail);
            return AX_ERR_NOMEM;
        }
        t->fires = f;
        t->capfires = n;
    }
    t->fires[t->nfires++] = (fire_t){job_id, nominal, decision, detail, 0};
    return 0;
}

/* Where a walk stopped: the next time to arm (more: there is one). */
typedef struct walk {
    int more, jumped, flags;
    int64_t next;
} walk_t;

/* The due times of j up to now into w. */
static walk_t walk_due(const sjob_t *j, int64_t now, ax_fire_window_t *w) {
    walk_t k = {1, 0, j->next_flags, j->next_ms};
    for (int64_t steps = 0; k.next <= now; steps++) {
        if (ax_fire_window_push(w, k.next, k.flags) < 0)
            break; /* out of memory: the rest is armed again */
        if (j->sched.kind == AX_SCHED_ONCE || j->sched.kind == AX_SCHED_FIXED_DELAY) {
            k.more = 0;
            break;
        }
        int64_t from = k.next, nx;
        if (steps == WALK_MAX && !k.jumped) {
            k.jumped = 1;
            from = now - 3600 * 1000 > k.next ? now - 3600 * 1000 : k.next;
        }
        if (ax_schedule_next(&j->sched, from, &nx, &k.flags) < 0) {
            k.more = 0;
            break;
        }
        k.next = nx;
    }
    return k;
}

/* Decide the due times of w and queue them, oldest first. Returns whether
 * the newest one fired. */
static int decide_due(trigger_t *t, const sjob_t *j, ax_fire_window_t *w, int jumped,
                      int64_t now) {
    ax_fire_window_linear(w);
    ax_fire_misfire(&j->policy, w->v, w->n, now);
    int last_fired = 0;
    for (size_t i = 0; i < w->n; i++) {
        const ax_fire_due_t *d = &w->v[i];
        char detail[1024];
        size_t len = ax_fire_detail(&j->policy, d, detail, sizeof detail);
        if (i == 0 && w->older)
            len = ax_fire_older_detail(w, jumped, detail, sizeof detail);
        last_fired = d->verdict.decision == AX_FIRE_FIRED;
        if (last_fired)
            t->fired++;
        else
            t->skipped++;
        fires_push(t, j->id, d->nominal_ms, ax_fire_decision_name(d->verdict.decision),
                   len ? strdup(detail) : NULL);
    }
    return last_fired;
}

void sched_on_fire(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now_u) {
    trigger_t *t = ((sched_wheel_t *)w)->t;
    sjob_t *j = (sjob_t *)e;
    int64_t now = (int64_t)now_u;
    size_t keep = (size_t)t->svc.conf.trigger_misfire_record_max;
    if ((size_t)j->policy.catchup_max > keep)
        keep = (size_t)j->policy.catchup_max;
    ax_fire_window_t win;
    ax_fire_window_init(&win, keep);
    walk_t k = walk_due(j, now, &win);
    int last_fired = decide_due(t, j, &win, k.jumped, now);
    ax_fire_window_clear(&win);
    /* Re-arm. */
    if (j->sched.kind == AX_SCHED_FIXED_DELAY) {
        if (last_fired)
            j->pending_fd = 1; /* armed again once that instance finished */
        else
            sched_arm(t, j, now + j->sched.interval_ms, 0);
    } else if (k.more && j->sched.kind != AX_SCHED_ONCE) {
        sched_arm(t, j, k.next, k.flags);
    }
}
