/*
 * sweep.c — the leader's lease sweep: dispatches nobody claimed are
 * produced again, and instances whose executor is gone (lease expired,
 * worker heartbeat stopped) end TIMEOUT through an attempt on the callback
 * topic (ax-callback applies the retry policy).
 */
#include <stdio.h>
#include <stdlib.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "trigger.h"

/* A dispatch nobody claimed (its message dead-lettered by an executor,
 * say) would leave the instance SCHEDULED forever: produce it again. */
static void redispatch_unclaimed(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    int64_t n = 0;
    if (ax_store_redispatch_unclaimed(svc->pg, svc->conf.topic_prefix,
                                      svc->conf.trigger_redispatch_after_ms,
                                      svc->conf.trigger_batch, &n, err, sizeof err) == 0 &&
        n > 0) {
        ax_warn("%lld instance(s) dispatched but never claimed: producing them again",
                (long long)n);
        arm_scan(t, 0);
    }
}

/* Report the lost leases as TIMEOUT in one Kafka transaction; their ids
 * reported go to ids[] (returns how many). */
static size_t report_lost(trigger_t *t, const ax_lost_leases_t *l, int64_t *ids) {
    char err[1024];
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++) {
        const ax_lost_lease_t *x = &l->v[i];
        char reason[300];
        snprintf(reason, sizeof reason, "worker %s lost: lease expired without a result",
                 x->worker);
        ax_attempt_t a = {
            .instance_id = x->id,
            .attempt = x->attempt,
            .worker = x->worker,
            .outcome = AX_OUTCOME_TIMEOUT,
            .error_class = "worker_lost",
            .error = reason,
            .output = "",
            .started_at_ms = x->started_ms,
            .finished_at_ms = ax_now_ms(),
            .trace_id = x->trace_id,
            .retryable = 1,
        };
        if (lead_produce_attempt(t, &a, err, sizeof err) == 0)
            ids[n++] = a.instance_id;
        else
            ax_warn("%s", err);
        ax_log_inst(AX_LOG_WARN, a.instance_id, NULL, a.trace_id, "instance %lld attempt %d: %s",
                    (long long)a.instance_id, (int)a.attempt, reason);
    }
    return n;
}

void sweep_on_timer(evutil_socket_t fd, short what, void *arg) {
    trigger_t *t = arg;
    ax_svc_t *svc = &t->svc;
    char err[1024];
    if (svc->stopping || !lead_active(t))
        return;
    lead_note_reconnect(t);
    recover_pending(t);
    if (ax_mono_ms() - t->pg_up_since < svc->conf.trigger_sweep_grace_ms)
        return; /* executors renew their leases first */
    redispatch_unclaimed(t);
    /* An expired lease means a lost worker only if the worker is gone too.
     * A live executor renews what it runs and stops what it cannot renew;
     * an expired lease of a live executor's instance means its result is
     * on its way through a lagging callback — reporting it lost would only
     * add work there. */
    ax_lost_leases_t lost = {0};
    if (ax_store_lost_leases(svc->pg, svc->conf.topic_prefix, 3 * svc->conf.executor_heartbeat_ms,
                             svc->conf.trigger_batch, &lost, err, sizeof err) < 0) {
        ax_warn("lease sweep: %s", err);
        return;
    }
    int64_t *ids = lost.n ? calloc(lost.n, sizeof *ids) : NULL;
    if (!ids || dispatch_win_flush(t) < 0 || lead_txn_begin(t) < 0) {
        free(ids);
        ax_lost_leases_free(&lost);
        return;
    }
    size_t n = report_lost(t, &lost, ids);
    if (lead_txn_commit(t) == 0) {
        /* Push the lease out so the next sweep does not report it again
         * while the callback service catches up. */
        if (n)
            ax_store_lease_push(svc->pg, ids, n, err, sizeof err);
        t->swept += (int64_t)lost.n;
    }
    free(ids);
    ax_lost_leases_free(&lost);
}
