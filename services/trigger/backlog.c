/*
 * backlog.c — backlog caps (job.backlog_max): the newest SCHEDULED
 * instances of a job beyond its cap are failed. The leader marks them
 * (error class AX_ERROR_CLASS_BACKLOG_FULL, so the due scan skips them and
 * the next tick does not report them again) and announces each with an
 * Attempt of kind AX_ATTEMPT_BACKLOG_FULL on the callback topic in a Kafka
 * transaction; ax-callback finishes them (FAILED, result, dead letter,
 * alert) like any other final failure. A mark whose announcement may have
 * been lost is announced again after 5 s (a duplicate is stale there).
 */
#include <stdio.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "ax/store_lane.h"
#include "trigger.h"

/* The worker name older ax-callbacks recognise a backlog cap by (before
 * Attempt.kind); written along with the kind. */
#define BACKLOG_WORKER "ax-trigger"

static void announce(trigger_t *t, const ax_capped_list_t *l) {
    char err[512];
    int64_t now = ax_now_ms();
    for (size_t i = 0; i < l->n; i++) {
        const ax_capped_t *c = &l->v[i];
        char reason[300];
        snprintf(reason, sizeof reason, "backlog full: job %s holds more than %lld waiting",
                 c->job, (long long)c->backlog_max);
        ax_attempt_t a = {
            .instance_id = c->id,
            .attempt = c->attempt,
            .kind = AX_ATTEMPT_BACKLOG_FULL,
            .worker = BACKLOG_WORKER,
            .outcome = AX_OUTCOME_FAILED,
            .error_class = AX_ERROR_CLASS_BACKLOG_FULL,
            .error = reason,
            .output = "",
            .started_at_ms = now,
            .finished_at_ms = now,
            .trace_id = c->trace_id,
            .retryable = 0,
        };
        if (lead_produce_attempt(t, &a, err, sizeof err) < 0)
            ax_warn("%s", err); /* announced again in 5 s (capped_at) */
    }
}

void backlog_enforce(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    ax_capped_list_t l = {0};
    int rc = ax_pg_begin(svc->pg, err, sizeof err);
    if (rc == 0)
        rc = lead_check_in_tx(t, err, sizeof err);
    if (rc == 0)
        rc = ax_store_backlog_cap(svc->pg, svc->conf.topic_prefix, &l, err, sizeof err);
    if (lead_tx_finish(t, rc, "backlog caps", err, sizeof err) < 0) {
        ax_capped_list_free(&l);
        return;
    }
    if (l.n && dispatch_win_flush(t) == 0 && lead_txn_begin(t) == 0) {
        announce(t, &l);
        if (lead_txn_commit(t) == 0)
            ax_warn("%zu instance(s) beyond their job's backlog cap failed (%s)", l.n,
                    AX_ERROR_CLASS_BACKLOG_FULL);
        /* else: announced again in 5 s (capped_at) */
    }
    ax_capped_list_free(&l);
}
