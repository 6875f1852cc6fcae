/*
 * finish.c — persisting a batch of results in one transaction: the finish
 * statement (CAS FINISHED fenced by instance and attempt, the attempts —
 * the final one on the state row, a retried one in job_attempt_log — the
 * results outbox), what the ended instances advance (flows.c),
 * then the job rows (slots, run statistics, the circuit breaker) as the
 * last statement before the commit.
 */
#include "ax/common.h"
#include "callback.h"

ax_outcome_in_t cb_outcome_in(const ax_attempt_t *a, int64_t retry_ms) {
    /* The statement knows the trigger's backlog cap by its error class and
     * worker (an instance it cut is finished from SCHEDULED, and is not a
     * run of its job): the kind says it. */
    int cut = a->kind == AX_ATTEMPT_BACKLOG_FULL;
    return (ax_outcome_in_t){
        .instance_id = a->instance_id,
        .attempt = a->attempt,
        .outcome = a->outcome,
        .exit_code_set = a->exit_code_set,
        .exit_code = a->exit_code,
        .error_class = cb_error_class(a),
        .error = a->error,
        .output = a->output,
        .worker = cut ? "ax-trigger" : a->worker,
        .started_ms = a->started_at_ms,
        .retry_ms = retry_ms,
    };
}

int cb_finish(callback_t *cb, const ax_outcome_in_t *in, size_t n, int64_t *retried, char *err,
              size_t errlen) {
    ax_pg_t *pg = cb->svc.pg;
    if (!n && !cb->probes.n)
        return 0;
    ax_outcome_finished_t f = {0};
    ax_outcome_opened_t *opened = NULL;
    size_t nopened = 0;
    /* One transaction: the batch, and the flows its instances advance.
     * The BEGIN goes with the finish, and the COMMIT with the job rows'
     * statement, in their round trips (one libpq pipeline each): two round
     * trips a batch instead of four, on the callback's loop, which is busy
     * from the first result to the last at full load (BENCHMARKS.md,
     * "Issue #13: the twenty-fifth session"). */
    int rc = n ? ax_store_outcome_finish_begin(pg, cb->svc.conf.topic_prefix, in, n,
                                               cb_pub_carrying(cb), &f, err, errlen)
               : ax_pg_begin(pg, err, errlen);
    if (rc == 0)
        rc = cb_advance(cb, &f, err, errlen);
    if (rc == 0 && f.njobs)
        rc = ax_store_outcome_jobs_commit(pg, f.jobs, f.njobs, &opened, &nopened, err, errlen);
    else if (rc == 0)
        rc = ax_pg_commit(pg, err, errlen);
    if (rc < 0) {
        ax_pg_rollback(pg);
        ax_outcome_finished_free(&f);
        ax_outcome_opened_free(opened, nopened);
        return rc;
    }
    cb->probes.n = 0; /* split for good */
    cb_pub_carry(cb, &f);
    cm_finished(cb, in, n, &f);
    for (size_t i = 0; i < f.nended; i++)
        if (f.ended[i].retried)
            (*retried)++;
    int ended = (int)f.nended;
    cb_alert_circuits(cb, opened, nopened);
    ax_outcome_finished_free(&f);
    ax_outcome_opened_free(opened, nopened);
    return ended;
}
