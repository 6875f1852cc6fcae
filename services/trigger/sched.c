/*
 * sched.c — flushing the leader's fire decisions. The decisions of a whole
 * wheel run (sched_fire.c) are flushed in batches: one PostgreSQL
 * transaction (epoch check, circuit breaker, overlap, lane deferral, ledger
 * rows + instances in one statement: ax/store_ledger.h) and one Kafka
 * transaction, then the instances are marked dispatched. A flow job's fire
 * (job.flow_id) starts a flow run in that statement instead of an instance.
 * The schedules themselves are in sched_jobs.c, the wheel in sched_wheel.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/log.h"
#include "ax/store_circuit.h"
#include "ax/store_ledger.h"
#include "sched_int.h"

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

/* Circuit breaker: a job whose circuit is open has its fires recorded as
 * skipped_circuit; once the cool-down passed, one fire runs as the probe
 * (the circuit goes half-open; ax-callback closes it on success or opens it
 * again on failure), and fires meanwhile are skipped. ax_circuit_on_fire()
 * (ax/circuit.h) decides; the store reads and writes the circuit. */
static int apply_circuit(trigger_t *t, fire_t *f, size_t n, char *err, size_t errlen) {
    int64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "circuit: out of memory");
    for (size_t i = 0; i < n; i++)
        ids[i] = f[i].job_id;
    ax_circuit_row_t *rows = NULL;
    size_t nrows = 0;
    int rc = ax_store_circuit_load(t->svc.pg, ids, n, &rows, &nrows, err, errlen);
    free(ids);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n && nrows; i++) {
        if (strcmp(f[i].decision, "fired") != 0)
            continue;
        ax_circuit_row_t *c = NULL;
        for (size_t k = 0; k < nrows && !c; k++)
            if (rows[k].job_id == f[i].job_id)
                c = &rows[k];
        if (!c)
            continue;
        char *old = f[i].detail;
        if (ax_circuit_on_fire(&c->circuit, c->now_ms) == AX_CIRCUIT_FIRE_PROBE) {
            rc = ax_store_circuit_half_open(t->svc.pg, f[i].job_id, err, errlen);
            if (rc < 0)
                break;
            f[i].detail = fmt("circuit half-open: this run is the probe%s%s", old ? "; " : "",
                              old ? old : "");
            ax_info("job %lld: circuit cool-down over; probing", (long long)f[i].job_id);
            /* the rest of the batch is skipped: the circuit is half-open now */
        } else {
            f[i].decision = "skipped_circuit";
            f[i].detail = fmt("circuit %s since %s after %lld consecutive failures%s%s",
                              ax_circuit_state_name(c->stored), c->opened_at,
                              (long long)c->circuit.consecutive_failures, old ? "; " : "",
                              old ? old : "");
            t->fired--;
            t->skipped++;
        }
        free(old);
    }
    free(rows);
    return rc;
}

/* Overlap: a fired time of a job that does not allow parallel runs, as
 * ax_fire_overlap decides it; the job ids of cancel-previous decisions go
 * to cancel[]. */
static void overlap_one(trigger_t *t, fire_t *f, size_t i, const ax_ledger_busy_t *busy,
                        size_t nbusy, int64_t *cancel, size_t *ncancel) {
    sjob_t *j = sched_job_find(t, f[i].job_id);
    if (!j || j->policy.overlap == AX_OVERLAP_ALLOW || strcmp(f[i].decision, "fired") != 0)
        return;
    const ax_ledger_busy_t *row = NULL;
    for (size_t k = 0; k < nbusy; k++)
        if (busy[k].job_id == f[i].job_id)
            row = &busy[k];
    ax_fire_busy_t b = {row != NULL, row ? row->last_id : 0, row && row->queued, 0};
    for (size_t k = 0; k < i; k++) /* an earlier fire of this batch already runs */
        if (f[k].job_id == f[i].job_id &&
            (strcmp(f[k].decision, "fired") == 0 || strcmp(f[k].decision, "queued") == 0))
            b.earlier = 1;
    ax_fire_overlap_t d = ax_fire_overlap(j->policy.overlap, &b);
    if (d.action == AX_OVERLAP_RUNS)
        return;
    const char *what = row ? row->what : NULL;
    size_t len = ax_fire_overlap_detail(j->policy.overlap, &d, what, f[i].detail, NULL, 0) + 1;
    char *detail = malloc(len);
    if (detail)
        ax_fire_overlap_detail(j->policy.overlap, &d, what, f[i].detail, detail, len);
    free(f[i].detail);
    f[i].detail = detail;
    f[i].decision = ax_fire_decision_name(d.decision);
    if (d.action == AX_OVERLAP_SKIPS) {
        t->fired--;
        t->skipped++;
    } else if (d.action == AX_OVERLAP_QUEUES) {
        f[i].wait_for = d.wait_for;
    } else if (d.cancel_unfinished) {
        cancel[(*ncancel)++] = f[i].job_id;
    }
}

/* Overlap: for jobs that do not allow parallel runs, look at their
 * unfinished instances and turn "fired" into skipped/queued/cancel. */
static int apply_overlap(trigger_t *t, fire_t *f, size_t n, char *err, size_t errlen) {
    int64_t *ids = malloc((n + 1) * sizeof *ids), *cancel = malloc((n + 1) * sizeof *cancel);
    size_t nids = 0, ncancel = 0, nbusy = 0;
    ax_ledger_busy_t *busy = NULL;
    int rc = ids && cancel ? 0 : ax_seterr(err, errlen, AX_ERR_NOMEM, "overlap: out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        sjob_t *j = sched_job_find(t, f[i].job_id);
        if (j && j->policy.overlap != AX_OVERLAP_ALLOW && strcmp(f[i].decision, "fired") == 0)
            ids[nids++] = f[i].job_id;
    }
    if (rc == 0 && nids)
        rc = ax_store_ledger_busy(t->svc.pg, ids, nids, &busy, &nbusy, err, errlen);
    if (rc == 0 && nids) {
        for (size_t i = 0; i < n; i++)
            overlap_one(t, f, i, busy, nbusy, cancel, &ncancel);
        ax_ledger_busy_free(busy, nbusy);
    }
    if (rc == 0 && ncancel)
        rc = ax_store_ledger_cancel_unfinished(t->svc.pg, cancel, ncancel, err, errlen);
    free(ids);
    free(cancel);
    return rc;
}

static void fires_drop(trigger_t *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(t->fires[i].detail);
    memmove(t->fires, t->fires + n, (t->nfires - n) * sizeof *t->fires);
    t->nfires -= n;
}

/* Backpressure: a fired time of a job whose lane defers is recorded
 * deferred (docs/PRIORITIES.md); the due scan releases it. */
static void defer_lanes(trigger_t *t, fire_t *f, size_t n) {
    for (size_t i = 0; i < n; i++) {
        sjob_t *dj = sched_job_find(t, f[i].job_id);
        if (!dj || dj->flow || strcmp(f[i].decision, "fired") != 0 ||
            t->lane_min_age_ms[dj->priority] == 0)
            continue;
        char *old = f[i].detail;
        f[i].decision = ax_fire_decision_name(AX_FIRE_DEFERRED);
        f[i].detail = fmt("lane P%d deferring: lag %lld%s%s", dj->priority,
                          (long long)t->lanes[dj->priority].lag, old ? "; " : "", old ? old : "");
        free(old);
        t->deferred_fires++;
    }
}

/* The ledger record of f[0..n) (in the leader's transaction). */
static int record(trigger_t *t, const fire_t *f, size_t n, ax_ledger_result_t *res, char *err,
                  size_t errlen) {
    ax_ledger_fire_t *v = malloc((n + 1) * sizeof *v);
    if (!v)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "recording fires: out of memory");
    for (size_t i = 0; i < n; i++) {
        sjob_t *dj = sched_job_find(t, f[i].job_id);
        int d = ax_fire_decision_parse(f[i].decision);
        if (d < 0) {
            free(v);
            return ax_seterr(err, errlen, AX_ERR_INVALID, "job %lld: no such fire decision '%s'",
                             (long long)f[i].job_id, f[i].decision);
        }
        v[i] = (ax_ledger_fire_t){f[i].job_id, f[i].nominal_ms, (ax_fire_decision_t)d,
                                  f[i].detail, f[i].wait_for, dj && dj->flow};
    }
    int rc = ax_store_ledger_record(t->svc.pg, v, n, t->epoch, t->svc.conf.topic_prefix, res, err,
                                    errlen);
    free(v);
    return rc;
}

/* Durable: the ledger decided. Fixed-delay jobs now wait for their
 * instance (or, skipped, are armed again); the rest is dispatch. */
static void settle(trigger_t *t, size_t n, ax_ledger_result_t *res) {
    tm_fires(t, t->fires, n, res->n);
    for (size_t i = 0; i < res->n; i++) {
        sjob_t *j = sched_job_find(t, res->v[i].job_id);
        if (j && j->sched.kind == AX_SCHED_FIXED_DELAY && j->pending_fd) {
            j->pending_fd = 0;
            j->wait_instance = res->v[i].instance_id;
        }
    }
    for (size_t i = 0; i < n; i++) { /* fixed-delay fires that were skipped */
        sjob_t *j = sched_job_find(t, t->fires[i].job_id);
        if (j && j->pending_fd && !j->wait_instance) {
            j->pending_fd = 0;
            sched_arm(t, j, lead_now(t) + j->sched.interval_ms, 0);
        }
    }
    fires_drop(t, n);
    if (res->n == 0)
        return;
    dispatch_produce(t, &res->rows);
    for (size_t i = 0; i < res->n; i++)
        if (res->v[i].held && !res->v[i].wait_for) {
            arm_scan(t, 0); /* a static shard parent: split it now */
            break;
        }
}

/* Record and dispatch up to one batch. Returns fires handled, 0 if none,
 * <0 on error (the fires stay for a retry unless leadership is gone). */
static int flush_batch(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    size_t batch = (size_t)svc->conf.trigger_fire_batch;
    size_t n = t->nfires < batch ? t->nfires : batch;
    if (!n)
        return 0;
    if (!lead_active(t))
        return AX_ERR_CONFLICT;
    char err[1024];
    ax_ledger_result_t res = {0};
    int rc = ax_pg_begin(svc->pg, err, sizeof err);
    if (rc == 0)
        rc = lead_check_in_tx(t, err, sizeof err);
    if (rc == 0)
        rc = apply_circuit(t, t->fires, n, err, sizeof err);
    if (rc == 0)
        rc = apply_overlap(t, t->fires, n, err, sizeof err);
    if (rc == 0) {
        defer_lanes(t, t->fires, n);
        rc = record(t, t->fires, n, &res, err, sizeof err);
    }
    if (rc == 0)
        rc = ax_pg_commit(svc->pg, err, sizeof err);
    if (rc < 0) {
        ax_pg_rollback(svc->pg);
        ax_ledger_result_free(&res);
        if (rc == AX_ERR_CONFLICT) {
            lead_lost(t, err);
            return rc;
        }
        ax_warn("recording %zu fire(s): %s; will retry", n, err);
        return rc;
    }
    settle(t, n, &res);
    ax_ledger_result_free(&res);
    return (int)n;
}

/* Flush at most a few batches per turn of the loop, so lease renewal and
 * everything else keep running under a backlog (a drain longer than the
 * lease would lose leadership); the wheel timer continues at once. */
#define FLUSH_BATCHES_PER_TURN 4
void sched_flush(trigger_t *t) {
    for (int turn = 0; t->nfires; turn++) {
        if (turn == FLUSH_BATCHES_PER_TURN) {
            /* a zero timeout, not event_active: due timers run first */
            struct timeval now = AX_TV_MS(0);
            event_add(t->ev_wheel, &now);
            return;
        }
        int rc = flush_batch(t);
        if (rc == AX_ERR_CONFLICT || !t->leader) {
            fires_drop(t, t->nfires); /* the next leader decides these again */
            return;
        }
        if (rc < 0) {
            int64_t ms = ax_backoff_ms(t->flush_failures++, t->svc.conf.backoff_initial_ms,
                                       t->svc.conf.backoff_max_ms);
            struct timeval tv = AX_TV_MS(ms);
            event_add(t->ev_wheel, &tv);
            return;
        }
        t->flush_failures = 0;
    }
}
