/*
 * sched_wheel.c — the leader's schedules: every enabled job with a schedule
 * sits on the timing wheel at its next nominal fire time (the trigger's
 * clock, epoch ms). The wheel's libevent timer runs the wheel and flushes
 * the decisions (sched.c); job changes arrive by NOTIFY and are reloaded;
 * fixed-delay jobs wait for their instance to finish; leadership changes
 * load or drop everything.
 */
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/log.h"
#include "ax/store_schedule.h"
#include "sched_int.h"

/* Job ids reloaded per statement. */
#define RELOAD_BATCH 10000

/* ---- the wheel timer --------------------------------------------------------- */

static void arm_wheel(trigger_t *t) {
    uint64_t d = ax_wheel_next_deadline(t->wheel);
    int64_t now = lead_now(t);
    int64_t ms = d == UINT64_MAX ? 1000 : (int64_t)d - now;
    if (ms > 1000)
        ms = 1000;
    if (ms < 0)
        ms = 0;
    struct timeval tv = AX_TV_MS(ms);
    event_add(t->ev_wheel, &tv);
}

static void on_wheel(evutil_socket_t fd, short what, void *arg) {
    trigger_t *t = arg;
    (void)fd;
    (void)what;
    if (t->svc.stopping || !lead_active(t))
        return;
    if (t->nfires) { /* a failed flush being retried */
        sched_flush(t);
        if (t->nfires)
            return;
    }
    ax_wheel_run(t->wheel, (uint64_t)lead_now(t));
    sched_flush(t);
    if (t->leader && !t->nfires)
        arm_wheel(t);
}

/* ---- NOTIFY, fixed-delay waits --------------------------------------------- */

static void reload_push(trigger_t *t, int64_t id) {
    if (t->nreload == t->capreload) {
        size_t n = t->capreload ? t->capreload * 2 : 64;
        int64_t *p = realloc(t->reload_ids, n * sizeof *p);
        if (!p) {
            t->reload_all = 1;
            return;
        }
        t->reload_ids = p;
        t->capreload = n;
    }
    t->reload_ids[t->nreload++] = id;
}

static void on_notify(ax_sched_notify_t what, const char *payload, void *arg) {
    trigger_t *t = arg;
    if (what == AX_SCHED_NOTIFY_DUE) {
        /* retries rescheduled by the callback: look at the due scan */
        if (strcmp(payload, t->svc.conf.topic_prefix) == 0)
            arm_scan(t, 0);
        return;
    }
    char *end;
    long long id = strtoll(payload, &end, 10);
    if (*end == 0 && id > 0)
        reload_push(t, id);
}

/* Re-read the jobs named by NOTIFY, newest batch first; drop the deleted. */
static void reload_listed(trigger_t *t) {
    char err[512];
    while (t->nreload) {
        size_t n = t->nreload < RELOAD_BATCH ? t->nreload : RELOAD_BATCH;
        const int64_t *ids = t->reload_ids + t->nreload - n;
        int rows = sched_load_jobs(t, ids, n);
        if (rows < 0)
            break;
        if (rows < (int)n) { /* deleted jobs: drop what the database no longer has */
            int64_t *gone = NULL;
            size_t ngone = 0;
            if (ax_store_schedule_missing(t->svc.pg, ids, n, t->svc.conf.topic_prefix, &gone,
                                          &ngone, err, sizeof err) == 0) {
                for (size_t i = 0; i < ngone; i++) {
                    ax_info("job %lld deleted", (long long)gone[i]);
                    sched_job_remove(t, gone[i]);
                }
                free(gone);
            }
        }
        t->nreload -= n;
    }
}

void sched_poll_notify(trigger_t *t) {
    if (!t->leader)
        return;
    char err[512];
    if (!t->listening) {
        if (ax_store_schedule_listen(t->svc.pg, err, sizeof err) < 0)
            return;
        t->listening = 1;
    }
    ax_store_schedule_notifies(t->svc.pg, on_notify, t);
    if (t->reload_all) {
        t->reload_all = 0;
        t->nreload = 0;
        /* re-read every job: changed versions are re-armed */
        sched_jobs_clear(t);
        ax_wheel_init(t->wheel, (uint64_t)lead_now(t));
        if (sched_load_jobs(t, NULL, 0) < 0)
            t->reload_all = 1;
        arm_wheel(t);
        return;
    }
    reload_listed(t);
    arm_wheel(t);
}

/* Fixed-delay jobs waiting for their instance: arm them once it finished. */
static void poll_fixed_delay(trigger_t *t) {
    if (!t->nfixed_delay)
        return; /* no walk over 100,000 cron jobs five times a second */
    int64_t *ids = malloc(t->nfixed_delay * sizeof *ids);
    size_t n = 0;
    for (size_t b = 0; ids && b < t->nbuckets; b++)
        for (sjob_t *j = t->buckets[b]; j && n < t->nfixed_delay; j = j->hnext)
            if (j->wait_instance)
                ids[n++] = j->wait_instance;
    char err[512];
    ax_sched_finished_t *done = NULL;
    size_t ndone = 0;
    if (n && ax_store_schedule_finished(t->svc.pg, ids, n, &done, &ndone, err, sizeof err) == 0) {
        for (size_t i = 0; i < ndone; i++) {
            sjob_t *j = sched_job_find(t, done[i].job_id);
            if (j && j->wait_instance == done[i].instance_id) {
                j->wait_instance = 0;
                sched_arm(t, j, done[i].finished_ms + j->sched.interval_ms, 0);
            }
        }
        free(done);
        arm_wheel(t);
    }
    free(ids);
}

void sched_tick(trigger_t *t) {
    /* the fire rate over the last second: is the trigger loaded? */
    int64_t now = ax_mono_ms();
    if (now - t->rate_at_ms >= 1000) {
        int64_t d = now - t->rate_at_ms;
        t->fire_rate = t->rate_at_ms ? (t->fired - t->rate_fired) * 1000 / d : 0;
        t->rate_fired = t->fired;
        t->rate_at_ms = now;
    }
    if (!lead_active(t))
        return;
    sched_poll_notify(t);
    poll_fixed_delay(t);
}

/* ---- leadership changes --------------------------------------------------------- */

int sched_init(trigger_t *t) {
    sched_wheel_t *sw = calloc(1, sizeof *sw);
    if (sw) {
        sw->t = t;
        t->wheel = &sw->w;
    }
    t->nbuckets = 1024;
    t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
    t->ev_wheel = evtimer_new(t->svc.base, on_wheel, t);
    return t->wheel && t->buckets && t->ev_wheel ? 0 : AX_ERR_NOMEM;
}

void sched_on_leader(trigger_t *t) {
    sched_jobs_clear(t);
    ax_wheel_init(t->wheel, (uint64_t)lead_now(t));
    t->listening = 0;
    t->nreload = 0;
    t->reload_all = 0;
    sched_poll_notify(t); /* LISTEN before loading: no change slips between */
    if (sched_load_jobs(t, NULL, 0) < 0)
        t->reload_all = 1;
    arm_wheel(t);
}

void sched_on_follower(trigger_t *t) {
    if (t->ev_wheel)
        event_del(t->ev_wheel);
    for (size_t i = 0; i < t->nfires; i++)
        free(t->fires[i].detail);
    t->nfires = 0;
    if (t->buckets)
        sched_jobs_clear(t);
    if (t->listening) {
        char err[256];
        ax_store_schedule_unlisten(t->svc.pg, err, sizeof err);
        t->listening = 0;
    }
}

void sched_rebuild(trigger_t *t, const char *why) {
    if (!t->leader)
        return;
    ax_warn("%s: rebuilding the schedule from the ledger", why);
    sched_flush(t);
    t->reload_all = 1;
    sched_poll_notify(t);
}

void sched_destroy(trigger_t *t) {
    sched_on_follower(t);
    free(t->buckets);
    free(t->wheel); /* the sched_wheel_t: its first member */
    free(t->fires);
    free(t->reload_ids);
    if (t->ev_wheel)
        event_free(t->ev_wheel);
}
