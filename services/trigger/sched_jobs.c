/*
 * sched_jobs.c — the leader's table of scheduled jobs (a hash on the job
 * id) and loading them from the store (ax/store_schedule.h).
 *
 * Where the next fire comes from (the same rule `axctl job next` uses):
 * the first nominal time strictly after max(last ledger time of the job,
 * schedule_from - 1 ms). So a restart or a new leader resumes exactly after
 * what is in the ledger, and the ledger's primary key (job, nominal time)
 * makes a second decision about the same time a no-op.
 */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/log.h"
#include "ax/store_schedule.h"
#include "sched_int.h"

/* ---- the job table ---------------------------------------------------------- */

static size_t hslot(const trigger_t *t, int64_t id) {
    uint64_t h = (uint64_t)id * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & (t->nbuckets - 1);
}

sjob_t *sched_job_find(trigger_t *t, int64_t id) {
    for (sjob_t *j = t->buckets[hslot(t, id)]; j; j = j->hnext)
        if (j->id == id)
            return j;
    return NULL;
}

static int job_table_grow(trigger_t *t) {
    size_t n = t->nbuckets * 2;
    sjob_t **b = calloc(n, sizeof *b);
    if (!b)
        return AX_ERR_NOMEM;
    sjob_t **old = t->buckets;
    size_t oldn = t->nbuckets;
    t->buckets = b;
    t->nbuckets = n;
    for (size_t i = 0; i < oldn; i++)
        for (sjob_t *j = old[i], *nx; j; j = nx) {
            nx = j->hnext;
            size_t s = hslot(t, j->id);
            j->hnext = b[s];
            b[s] = j;
        }
    free(old);
    return 0;
}

static void job_free(trigger_t *t, sjob_t *j) {
    if (j->sched.kind == AX_SCHED_FIXED_DELAY)
        t->nfixed_delay--;
    ax_wheel_unlink(&j->e);
    ax_schedule_clear(&j->sched);
    free(j);
}

void sched_job_remove(trigger_t *t, int64_t id) {
    for (sjob_t **pp = &t->buckets[hslot(t, id)]; *pp; pp = &(*pp)->hnext)
        if ((*pp)->id == id) {
            sjob_t *j = *pp;
            *pp = j->hnext;
            job_free(t, j);
            t->njobs--;
            return;
        }
}

void sched_jobs_clear(trigger_t *t) {
    for (size_t i = 0; i < t->nbuckets; i++) {
        for (sjob_t *j = t->buckets[i], *nx; j; j = nx) {
            nx = j->hnext;
            job_free(t, j);
        }
        t->buckets[i] = NULL;
    }
    t->njobs = 0;
}

/* The job's entry with schedule s (adopted: cleared on failure): a new one,
 * or the old one unlinked with its old schedule cleared. */
static sjob_t *job_put(trigger_t *t, sjob_t *j, int64_t id, ax_schedule_t *s) {
    if (!j) {
        if ((t->njobs >= t->nbuckets && job_table_grow(t) < 0) || !(j = calloc(1, sizeof *j))) {
            ax_schedule_clear(s);
            return NULL;
        }
        ax_wheel_entry_init(&j->e, sched_on_fire);
        j->id = id;
        size_t b = hslot(t, id);
        j->hnext = t->buckets[b];
        t->buckets[b] = j;
        t->njobs++;
    } else {
        ax_wheel_unlink(&j->e);
        if (j->sched.kind == AX_SCHED_FIXED_DELAY)
            t->nfixed_delay--;
        ax_schedule_clear(&j->sched);
    }
    if (s->kind == AX_SCHED_FIXED_DELAY)
        t->nfixed_delay++;
    j->sched = *s;
    return j;
}

/* Arm a (re)loaded job after what its ledger holds. */
static void arm_loaded(trigger_t *t, sjob_t *j, const ax_sched_job_t *r) {
    const ax_schedule_t *s = &j->sched;
    switch (s->kind) {
    case AX_SCHED_ONCE:
        if (!r->has_last) /* else decided already */
            sched_arm(t, j, s->anchor_ms, 0);
        return;
    case AX_SCHED_FIXED_DELAY:
        if (!r->has_last || r->last_nominal_ms < r->from_ms)
            sched_arm(t, j, s->anchor_ms > r->from_ms ? s->anchor_ms : r->from_ms, 0);
        else if (!r->last_instance_id)
            sched_arm(t, j, r->last_nominal_ms + s->interval_ms, 0); /* last one was skipped */
        else if (r->last_finished)
            sched_arm(t, j, r->last_finished_ms + s->interval_ms, 0);
        else
            j->wait_instance = r->last_instance_id;
        return;
    default:
        break;
    }
    int64_t after = r->from_ms - 1, next;
    int flags = 0;
    if (r->has_last && r->last_nominal_ms > after)
        after = r->last_nominal_ms;
    if (ax_schedule_next(s, after, &next, &flags) == 0)
        sched_arm(t, j, next, flags);
    else
        ax_info("job %lld: the schedule has no further fire time", (long long)r->id);
}

/* (Re)build the job of row r. */
static void load_row(trigger_t *t, const ax_sched_job_t *r) {
    sjob_t *j = sched_job_find(t, r->id);
    if (!r->scheduled) {
        if (j)
            ax_info("job %lld: no longer scheduled", (long long)r->id);
        sched_job_remove(t, r->id);
        return;
    }
    if (j && j->version == r->version)
        return;
    char err[512];
    ax_schedule_t s;
    if (ax_schedule_init(&s, r->kind < 0 ? AX_SCHED_NONE : (ax_sched_kind_t)r->kind, r->expr,
                         r->time_zone, r->dst, r->interval_ms, r->anchor_ms, err, sizeof err) < 0) {
        ax_error("job %lld: schedule not usable, not armed: %s", (long long)r->id, err);
        sched_job_remove(t, r->id);
        return;
    }
    if (!(j = job_put(t, j, r->id, &s)))
        return;
    j->version = r->version;
    j->policy = r->policy;
    j->wait_instance = 0;
    j->pending_fd = 0;
    j->flow = r->flow != 0;
    int prio = r->priority >= 0 && r->priority < AX_PRIORITIES ? r->priority : AX_PRIORITY_DEFAULT;
    j->priority = (uint8_t)prio;
    j->tolerance_ms = r->tolerance_ms;
    arm_loaded(t, j, r);
}

int sched_load_jobs(trigger_t *t, const int64_t *ids, size_t n) {
    char err[1024];
    ax_sched_jobs_t jobs;
    int64_t t0 = ax_mono_ms();
    int rc = ax_store_schedule_load(t->svc.pg, ids, n, t->svc.conf.topic_prefix, &jobs, err,
                                    sizeof err);
    if (rc < 0) {
        ax_warn("loading jobs: %s", err);
        return rc;
    }
    for (size_t i = 0; i < jobs.n; i++)
        load_row(t, &jobs.v[i]);
    int rows = (int)jobs.n;
    ax_sched_jobs_free(&jobs);
    if (!ids) {
        /* the result of a 100,000-row load is freed but kept by malloc:
         * give it back (RSS 80 MB -> 37 MB with 100,000 cron jobs) */
        malloc_trim(0);
        ax_info("%zu scheduled job(s) armed in %lld ms", t->njobs, (long long)(ax_mono_ms() - t0));
    }
    return rows;
}
