/*
 * retention.c — the leader's retention sweep: FINISHED instances (with
 * their state rows, attempts and submission keys) older than
 * retention.finished.ms and fire-ledger rows older than retention.ledger.ms
 * are deleted in batches of retention.batch rows, each one statement in
 * primary-key order from where the previous one stopped, for at most
 * retention.budget.ms per run (docs/OPERATIONS.md, "Retention"). Only the
 * leader sweeps, and every statement re-checks its lease.
 *
 * The sweep runs on a thread of its own with its own PostgreSQL
 * connection: on the loop, every run held up the ingest and the dispatch
 * for its whole budget (at the defaults, 100 ms of every second while
 * anything was old enough to go: submit-to-run p99 at 2,000 jobs/s 155.9
 * ms with it against 70.7 without, 66.5 on its own thread, medians;
 * BENCHMARKS.md, "Issue #13: the retention sweep off the loop"). The
 * deletes still share PostgreSQL's CPU with the loop's statements (and,
 * rarely, a row: a submission key, a watermark). The loop's timer still paces it: each
 * tick hands the thread the lease key and the settings (the loop owns
 * both, SIGHUP included) unless a run is still under way, and the thread
 * stops a run early once the lease is gone.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/log.h"
#include "ax/pg.h"
#include "ax/store_retention.h"
#include "trigger.h"

#define RETENTION_REWIND 60
#define RETENTION_STRIDE 64
/* and at most this many rows a statement, whatever retention.batch (at its
 * maximum of 100,000 the stride alone would walk 6.4 million) */
#define RETENTION_WALK_MAX 100000
/* a failing connection or statement is logged at most this often */
#define RETENTION_WARN_MS 10000

/* What one run needs, copied from the loop under mu. */
typedef struct ret_run {
    char role[300], holder[200];
    int64_t epoch;
    char prefix[256];
    int64_t finished_ms, ledger_ms, batch, budget_ms;
} ret_run_t;

struct retention {
    trigger_t *t;
    ax_pg_t *pg;
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int stop;   /* set under mu; a run under way stops at its next batch */
    int busy, go;       /* under mu */
    ret_run_t next;     /* under mu: the run `go` asks for */
    /* the thread's own: where each pass has got to */
    int64_t inst_after, inst_passes, inst_walk, fire_job, fire_ms;
    int64_t inst_deleted, fire_deleted;
    int64_t warned_mono;
};

static void ret_warn(struct retention *r, const char *what, const char *err) {
    if (r->stop) /* retention_stop cancelled it */
        return;
    int64_t now = ax_mono_ms();
    if (r->warned_mono && now - r->warned_mono < RETENTION_WARN_MS)
        return;
    r->warned_mono = now;
    ax_warn("retention (%s): %s", what, err);
}

/* One batch of instances: 1 go on, 0 the pass is over (cursor back to
 * the start), -1 error. */
static int instances_batch(struct retention *r, const ret_run_t *run, const ax_lease_key_t *k) {
    char err[512];
    ax_retention_batch_t b;
    if (r->inst_walk < 1)
        r->inst_walk = 1;
    int64_t walk = run->batch * r->inst_walk;
    if (walk > RETENTION_WALK_MAX)
        walk = run->batch > RETENTION_WALK_MAX ? run->batch : RETENTION_WALK_MAX;
    if (ax_store_retention_instances(r->pg, k, run->prefix, r->inst_after, run->finished_ms,
                                     run->batch, walk, &b, err, sizeof err) < 0) {
        ret_warn(r, "instances", err);
        return -1;
    }
    r->inst_deleted += b.deleted;
    /* Rows of other deployments (sharing the database, the ids one
     * sequence) are walked past in ever longer strides, up to
     * RETENTION_STRIDE batches a statement; a batch that held rows of this
     * deployment walks one batch again. */
    r->inst_walk = b.mine ? 1 : r->inst_walk * 2;
    if (r->inst_walk > RETENTION_STRIDE)
        r->inst_walk = RETENTION_STRIDE;
    if (b.end) { /* the end of the table */
        r->inst_after = 0;
        r->inst_walk = 1;
        return 0;
    }
    /* Ids grow with creation time: after an instance created inside the
     * retention, none can have finished before it began. The next pass
     * starts where this batch did (not at the dead index entries of what
     * was deleted before it); every RETENTION_REWIND passes from the start,
     * for the instances skipped there (unfinished, unpublished) since. */
    if (b.young) {
        if (++r->inst_passes % RETENTION_REWIND == 0)
            r->inst_after = 0;
        return 0;
    }
    r->inst_after = b.last_id;
    return 1;
}

static int ledger_batch(struct retention *r, const ret_run_t *run, const ax_lease_key_t *k) {
    char err[512];
    ax_retention_batch_t b;
    if (ax_store_retention_ledger(r->pg, k, run->prefix, r->fire_job, r->fire_ms,
                                  run->ledger_ms, run->batch, &b, err, sizeof err) < 0) {
        ret_warn(r, "ledger", err);
        return -1;
    }
    r->fire_deleted += b.deleted;
    if (b.end) {
        r->fire_job = r->fire_ms = 0;
        return 0;
    }
    r->fire_job = b.last_job;
    r->fire_ms = b.last_ms;
    return 1;
}

/* The lease the loop handed over is still held: its expiry (the loop and
 * the lease thread zero it when the lease is lost) is ahead. A stale run
 * deletes nothing anyway: every statement checks the lease itself. */
static int lease_held(const trigger_t *t) {
    return ax_mono_ms() < t->lease_until_mono;
}

/* One run: batches until the budget is spent or nothing is left. */
static void sweep(struct retention *r, const ret_run_t *run) {
    ax_lease_key_t k = {run->role, run->holder, run->epoch};
    int64_t until = ax_mono_ms() + run->budget_ms;
    int inst = run->finished_ms > 0, fire = run->ledger_ms > 0;
    int64_t before = r->inst_deleted + r->fire_deleted;
    while ((inst || fire) && ax_mono_ms() < until && lease_held(r->t) && !r->stop) {
        if (inst)
            inst = instances_batch(r, run, &k) > 0;
        if (fire && ax_mono_ms() < until)
            fire = ledger_batch(r, run, &k) > 0;
    }
    if (r->inst_deleted + r->fire_deleted > before)
        ax_debug("retention: %lld instance(s) and %lld ledger row(s) deleted so far",
                 (long long)r->inst_deleted, (long long)r->fire_deleted);
}

static void *ret_main(void *arg) {
    struct retention *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && !r->go)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop)
            break;
        ret_run_t run = r->next;
        r->go = 0;
        r->busy = 1;
        pthread_mutex_unlock(&r->mu);
        sweep(r, &run);
        pthread_mutex_lock(&r->mu);
        r->busy = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int retention_start(trigger_t *t) {
    char err[512];
    struct retention *r = calloc(1, sizeof *r);
    if (!r) {
        ax_error("retention: out of memory");
        return -1;
    }
    r->t = t;
    r->pg = ax_pg_new(&t->svc.conf, "ax-trigger-retention", err, sizeof err);
    if (!r->pg) {
        ax_error("retention connection: %s", err);
        free(r);
        return -1;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (pthread_create(&r->thr, NULL, ret_main, r) != 0) {
        ax_error("cannot start the retention thread");
        ax_pg_destroy(r->pg);
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return -1;
    }
    t->ret = r;
    return 0;
}

void retention_stop(trigger_t *t) {
    struct retention *r = t->ret;
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    /* a statement under way (waiting for a lock, say, for up to
     * db.statement.timeout.ms) is cancelled, not waited for; a connection
     * attempt is not (pg.connect_timeout bounds it) */
    if (r->busy)
        ax_pg_cancel(r->pg);
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thr, NULL);
    ax_pg_destroy(r->pg);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
    t->ret = NULL;
}

void retention_on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    trigger_t *t = arg;
    ax_svc_t *svc = &t->svc;
    struct retention *r = t->ret;
    const ax_conf_t *c = &svc->conf;
    if (!r || svc->stopping || !lead_active(t))
        return;
    if (c->retention_finished_ms <= 0 && c->retention_ledger_ms <= 0)
        return;
    pthread_mutex_lock(&r->mu);
    if (!r->busy && !r->go) { /* a run still under way: this tick is skipped */
        ret_run_t *n = &r->next;
        snprintf(n->role, sizeof n->role, "%s", t->role);
        snprintf(n->holder, sizeof n->holder, "%s", t->holder);
        n->epoch = t->epoch;
        snprintf(n->prefix, sizeof n->prefix, "%s", c->topic_prefix);
        n->finished_ms = c->retention_finished_ms;
        n->ledger_ms = c->retention_ledger_ms;
        n->batch = c->retention_batch;
        n->budget_ms = c->retention_budget_ms;
        r->go = 1;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}
