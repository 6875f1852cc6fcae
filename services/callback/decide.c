/*
 * decide.c — the policies a batch of results goes through before it is
 * persisted, with what they need of each instance's job: which failures
 * are retried and when (the job's retry policy, ax/retry.h, and the global
 * retry budget), and how many shards a successful size probe asks for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/log.h"
#include "ax/retry.h"
#include "callback.h"

/* Instances of the failed results among as[0..n) (malloc'd; *ret_n). */
static int64_t *failed_ids(const ax_attempt_t *as, const char *skip, size_t n,
                           int64_t *retry_ms, size_t *ret_n) {
    int64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    *ret_n = 0;
    for (size_t i = 0; i < n; i++) {
        retry_ms[i] = -1;
        if (ids && !skip[i] && as[i].outcome != AX_OUTCOME_SUCCESS)
            ids[(*ret_n)++] = as[i].instance_id;
    }
    return ids;
}

static const ax_outcome_retry_job_t *job_of(const ax_outcome_retry_jobs_t *jobs,
                                            const ax_attempt_t *a) {
    for (size_t k = 0; k < jobs->n; k++)
        if (jobs->rows[k].instance_id == a->instance_id && jobs->rows[k].attempt == a->attempt)
            return &jobs->rows[k];
    return NULL; /* inline, stale or duplicate: the CAS decides */
}

static void policy_of(const ax_outcome_retry_job_t *j, ax_retry_policy_t *pol) {
    ax_retry_policy_default(pol);
    pol->max_retries = j->retry_max;
    pol->initial_ms = j->initial_ms;
    pol->multiplier = j->multiplier;
    pol->max_ms = j->max_ms;
    pol->jitter_ms = j->jitter_ms;
    char perr[256];
    if (j->rules && ax_retry_rules_parse(pol, j->rules, perr, sizeof perr) < 0)
        ax_warn("job %s: retry_rules ignored (%s); default chain used", j->job, perr);
}

/* One failed result: retried (*retry_ms >= 0, *budget spent) or final (its
 * error says why; alerted when the rule says so). 1 if the budget refused
 * a retry. */
static int decide_one(callback_t *cb, ax_attempt_t *a, const ax_outcome_retry_job_t *j,
                      int64_t *budget, int64_t *retry_ms) {
    ax_retry_policy_t pol;
    policy_of(j, &pol);
    /* the trigger's backlog cap (by the attempt's kind): never retried, a
     * retry would rejoin the backlog it was cut from, whatever the job's
     * rules say (retry.c refuses its error class too) */
    ax_retry_decision_t d =
        a->kind == AX_ATTEMPT_BACKLOG_FULL
            ? (ax_retry_decision_t){.alert = 1, .reason = AX_RETRY_REASON_FATAL}
            : ax_retry_decide(&pol, cb_error_class(a), a->retryable, a->attempt, drand48());
    const char *why = d.reason;
    int over = 0;
    if (d.retry && *budget <= 0) {
        d.retry = 0;
        why = "retry budget exhausted";
        over = 1;
    }
    if (d.retry) {
        /* a day at most, whatever the job's numbers say */
        *retry_ms = d.delay_ms < AX_RETRY_MAX_DELAY_MS ? d.delay_ms : AX_RETRY_MAX_DELAY_MS;
        (*budget)--;
        ax_log_inst(AX_LOG_INFO, a->instance_id, NULL, a->trace_id,
                    "instance %lld attempt %d %s (%s): retry in %lld ms",
                    (long long)a->instance_id, (int)a->attempt, ax_outcome_name(a->outcome),
                    a->error_class ? a->error_class : "", (long long)d.delay_ms);
        return 0;
    }
    char *e = NULL;
    if (asprintf(&e, "%s; not retried: %s (attempt %d of %d)", a->error ? a->error : "", why,
                 (int)a->attempt, pol.max_retries + 1) >= 0) {
        free(a->error);
        a->error = e;
    }
    if (d.alert) {
        char text[700];
        snprintf(text, sizeof text, "instance %lld failed for good: %s",
                 (long long)a->instance_id, a->error);
        cb_alert(cb, "final_failure", j->job, text);
    }
    return over;
}

int cb_decide_retries(callback_t *cb, ax_attempt_t *as, const char *skip, size_t n,
                      int64_t *retry_ms, char *err, size_t errlen) {
    ax_svc_t *svc = &cb->svc;
    size_t nfailed;
    int64_t *ids = failed_ids(as, skip, n, retry_ms, &nfailed);
    if (!ids)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "retries: out of memory");
    ax_outcome_retry_jobs_t jobs = {0};
    int rc = nfailed ? ax_store_outcome_retry_jobs(svc->pg, ids, nfailed, svc->conf.topic_prefix,
                                                   svc->conf.callback_retry_budget, &jobs, err,
                                                   errlen)
                     : 0;
    free(ids);
    if (rc < 0 || !nfailed)
        return rc;
    int64_t budget = svc->conf.callback_retry_budget - jobs.pending, over = 0;
    cm_budget_in_use(cb, jobs.pending);
    for (size_t i = 0; i < n; i++) {
        if (skip[i] || as[i].outcome == AX_OUTCOME_SUCCESS)
            continue;
        const ax_outcome_retry_job_t *j = job_of(&jobs, &as[i]);
        if (j)
            over += decide_one(cb, &as[i], j, &budget, &retry_ms[i]);
    }
    if (over) {
        char text[256];
        snprintf(text, sizeof text, "%lld retries refused: %lld retries already pending (budget "
                                    "%lld); those instances ended FAILED",
                 (long long)over, (long long)jobs.pending,
                 (long long)svc->conf.callback_retry_budget);
        cb_alert(cb, "retry_budget", NULL, text);
    }
    ax_outcome_retry_jobs_free(&jobs);
    return 0;
}

/* ---- size probes (dynamic sharding) ---------------------------------------------------
 * A successful probe's output is the data volume; the parent splits into
 * ceil(volume / shard_base) shards, at most max_shards (cb_finish does it
 * in the batch's transaction). A probe that printed no number fails (not
 * retried). */

static int probe_add(probes_t *p, const ax_outcome_probe_t *v, size_t msg) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        ax_outcome_probe_t *nv = realloc(p->v, cap * sizeof *nv);
        if (!nv)
            return AX_ERR_NOMEM;
        p->v = nv;
        size_t *nm = realloc(p->msg, cap * sizeof *nm);
        if (!nm)
            return AX_ERR_NOMEM;
        p->msg = nm;
        p->cap = cap;
    }
    p->v[p->n] = *v;
    p->msg[p->n++] = msg;
    return 0;
}

/* The probe's output, a non-negative integer (surrounding blanks
 * allowed), or -1. */
static long long probe_volume(const char *out) {
    char *end = NULL;
    out = out ? out : "";
    long long vol = strtoll(out, &end, 10);
    while (end && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
        end++;
    return !end || end == out || *end || vol < 0 ? -1 : vol;
}

static int probe_one(callback_t *cb, ax_attempt_t *a, size_t i, const ax_outcome_probe_job_t *j,
                     char *is_probe) {
    long long vol = probe_volume(a->output);
    if (vol < 0) {
        a->outcome = AX_OUTCOME_FAILED;
        free(a->error_class);
        free(a->error);
        a->error_class = strdup("probe");
        a->error = strdup("size probe (AX_SHARD_PROBE=1) did not print a data volume "
                          "(a non-negative integer)");
        a->retryable = 0;
        return 0;
    }
    int64_t shards = j->shard_base > 0 ? (vol + j->shard_base - 1) / j->shard_base : 1;
    if (shards > j->max_shards)
        shards = j->max_shards;
    ax_outcome_probe_t p = {a->instance_id, shards, a->worker, a->started_at_ms};
    if (probe_add(&cb->probes, &p, i) < 0)
        return AX_ERR_NOMEM;
    is_probe[i] = 1;
    ax_log_inst(AX_LOG_INFO, a->instance_id, NULL, a->trace_id,
                "instance %lld: size probe says %lld -> %lld shard(s)", (long long)a->instance_id,
                vol, (long long)shards);
    return 0;
}

static int is_probe_result(const ax_attempt_t *a) {
    return a->kind == AX_ATTEMPT_PROBE && a->outcome == AX_OUTCOME_SUCCESS;
}

int cb_find_probes(callback_t *cb, ax_attempt_t *as, const char *skip, char *is_probe, size_t n,
                   char *err, size_t errlen) {
    int64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    size_t nprobe = 0;
    if (!ids)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "size probes: out of memory");
    for (size_t i = 0; i < n; i++)
        if (!skip[i] && is_probe_result(&as[i]))
            ids[nprobe++] = as[i].instance_id;
    ax_outcome_probe_job_t *jobs = NULL;
    size_t njobs = 0;
    /* the executor marks size probes: no query otherwise */
    int rc = nprobe ? ax_store_outcome_probe_jobs(cb->svc.pg, ids, nprobe, &jobs, &njobs, err,
                                                  errlen)
                    : 0;
    free(ids);
    for (size_t k = 0; rc == 0 && k < njobs; k++)
        for (size_t i = 0; rc == 0 && i < n; i++)
            if (!skip[i] && is_probe_result(&as[i]) && as[i].instance_id == jobs[k].instance_id &&
                as[i].attempt == jobs[k].attempt)
                rc = probe_one(cb, &as[i], i, &jobs[k], is_probe);
    free(jobs);
    if (rc == AX_ERR_NOMEM)
        ax_seterr(err, errlen, rc, "size probes: out of memory");
    return rc;
}
