/*
 * retention.c — the leader's retention sweep: FINISHED instances (with
 * their state rows, attempts and submission keys) older than
 * retention.finished.ms and fire-ledger rows older than retention.ledger.ms
 * are deleted in batches of retention.batch rows, each one statement in
 * primary-key order from where the previous one stopped, for at most
 * retention.budget.ms per run (docs/OPERATIONS.md, "Retention"). Only the
 * leader sweeps, and every statement re-checks its lease.
 */
#include "ax/common.h"
#include "ax/log.h"
#include "ax/store_retention.h"
#include "trigger.h"

#define RETENTION_REWIND 60
#define RETENTION_STRIDE 64
/* and at most this many rows a statement, whatever retention.batch (at its
 * maximum of 100,000 the stride alone would walk 6.4 million) */
#define RETENTION_WALK_MAX 100000

/* One batch of instances: 1 go on, 0 the pass is over (cursor back to
 * the start), -1 error. */
static int instances_batch(trigger_t *t, const ax_lease_key_t *k) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    ax_retention_batch_t b;
    int64_t batch = svc->conf.retention_batch;
    if (t->ret_inst_walk < 1)
        t->ret_inst_walk = 1;
    int64_t walk = batch * t->ret_inst_walk;
    if (walk > RETENTION_WALK_MAX)
        walk = batch > RETENTION_WALK_MAX ? batch : RETENTION_WALK_MAX;
    if (ax_store_retention_instances(svc->pg, k, svc->conf.topic_prefix, t->ret_inst_after,
                                     svc->conf.retention_finished_ms, batch, walk, &b, err,
                                     sizeof err) < 0) {
        ax_warn("retention (instances): %s", err);
        return -1;
    }
    t->ret_inst_deleted += b.deleted;
    /* Rows of other deployments (sharing the database, the ids one
     * sequence) are walked past in ever longer strides, up to
     * RETENTION_STRIDE batches a statement; a batch that held rows of this
     * deployment walks one batch again. */
    t->ret_inst_walk = b.mine ? 1 : t->ret_inst_walk * 2;
    if (t->ret_inst_walk > RETENTION_STRIDE)
        t->ret_inst_walk = RETENTION_STRIDE;
    if (b.end) { /* the end of the table */
        t->ret_inst_after = 0;
        t->ret_inst_walk = 1;
        return 0;
    }
    /* Ids grow with creation time: after an instance created inside the
     * retention, none can have finished before it began. The next pass
     * starts where this batch did (not at the dead index entries of what
     * was deleted before it); every RETENTION_REWIND passes from the start,
     * for the instances skipped there (unfinished, unpublished) since. */
    if (b.young) {
        if (++t->ret_inst_passes % RETENTION_REWIND == 0)
            t->ret_inst_after = 0;
        return 0;
    }
    t->ret_inst_after = b.last_id;
    return 1;
}

static int ledger_batch(trigger_t *t, const ax_lease_key_t *k) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    ax_retention_batch_t b;
    if (ax_store_retention_ledger(svc->pg, k, svc->conf.topic_prefix, t->ret_fire_job,
                                  t->ret_fire_ms, svc->conf.retention_ledger_ms,
                                  svc->conf.retention_batch, &b, err, sizeof err) < 0) {
        ax_warn("retention (ledger): %s", err);
        return -1;
    }
    t->ret_fire_deleted += b.deleted;
    if (b.end) {
        t->ret_fire_job = t->ret_fire_ms = 0;
        return 0;
    }
    t->ret_fire_job = b.last_job;
    t->ret_fire_ms = b.last_ms;
    return 1;
}

void retention_on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    trigger_t *t = arg;
    ax_svc_t *svc = &t->svc;
    if (svc->stopping || !lead_active(t))
        return;
    ax_lease_key_t k = {t->role, t->holder, t->epoch};
    int64_t until = ax_mono_ms() + svc->conf.retention_budget_ms;
    int inst = svc->conf.retention_finished_ms > 0, fire = svc->conf.retention_ledger_ms > 0;
    int64_t before = t->ret_inst_deleted + t->ret_fire_deleted;
    while ((inst || fire) && ax_mono_ms() < until && lead_active(t)) {
        if (inst)
            inst = instances_batch(t, &k) > 0;
        if (fire && ax_mono_ms() < until)
            fire = ledger_batch(t, &k) > 0;
    }
    if (t->ret_inst_deleted + t->ret_fire_deleted > before)
        ax_debug("retention: %lld instance(s) and %lld ledger row(s) deleted so far",
                 (long long)t->ret_inst_deleted, (long long)t->ret_fire_deleted);
}
