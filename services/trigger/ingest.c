/*
 * ingest.c — submissions (ax.submit) become SCHEDULED instances, one
 * statement per batch (ax_store_ingest: dedup by submit key, defined jobs
 * joined by name, inline commands). Every trigger ingests; on the leader
 * an instance due now whose lane flows is marked dispatched by the same
 * statement (on the ingest's own connection, committed on its own) and
 * produced right after it (dispatch_committed, into the open window), so
 * it skips the due scan. A submission that cannot be persisted or dispatched
 * goes to the DLQ with its reason.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "ax/service.h"
#include "ax/store_counter.h"
#include "trigger.h"

typedef struct ingest_row {
    ax_submit_t s;
    char submit_key[600];
    int64_t log_end; /* a Kafka position's partition end offset as last fetched, or -1 */
    char trace[40]; /* generated when the submission has none */
    char *argv_json; /* an inline command's argv (malloc'd) */
    int state; /* 0 pending, 1 poison (dead-letter with reason), 2 inserted, 3 duplicate */
    char reason[512];
} ingest_row_t;

static char *argv_json(const ax_submit_t *s) {
    json_t *arr = json_array();
    for (size_t k = 0; k < s->command_len; k++)
        json_array_append_new(arr, json_string(s->command[k]));
    char *js = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return js;
}

/* The store's input for the pending rows of [from, to) into in[]; returns
 * how many. */
static size_t ingest_inputs(ingest_row_t *rows, size_t from, size_t to, ax_ingest_in_t *in) {
    size_t used = 0;
    for (size_t i = from; i < to; i++) {
        ingest_row_t *w = &rows[i];
        if (w->state)
            continue;
        const ax_submit_t *s = &w->s;
        if (!s->job && !w->argv_json)
            w->argv_json = argv_json(s);
        if (!s->trace_id && !w->trace[0])
            ax_trace_id_new(w->trace);
        in[used++] = (ax_ingest_in_t){
            .job = s->job,
            .argv_json = w->argv_json,
            .payload = s->payload,
            .payload_len = s->payload_len,
            .timeout_ms = s->timeout_ms,
            .priority = s->priority,
            .run_at_ms = s->run_at_ms,
            .delay_ms = s->delay_ms,
            .trace_id = s->trace_id ? s->trace_id : w->trace,
            .idempotency_key = s->idempotency_key ? s->idempotency_key : w->submit_key,
            .submit_key = w->submit_key,
            .log_end = w->log_end,
        };
    }
    return used;
}

/* Run the ingest statement for in[0..n) on the ingest's own connection
 * (t->ingest_pg: never inside a transaction, always on the statement's
 * generic plan, so one round trip committed on its own; on the leader it
 * re-reads and locks the lease itself, fenced: ingested as a standby's)
 * and produce what it marked dispatched. */
static int ingest_run(trigger_t *t, const ax_ingest_in_t *in, size_t n, ax_ingest_out_t *out,
                      char *err, size_t errlen) {
    ax_svc_t *svc = &t->svc;
    int direct[AX_PRIORITIES];
    lane_direct(t, direct);
    int lead = lead_active(t);
    ax_ingest_ctx_t c = {
        .deployment = svc->conf.topic_prefix,
        .default_timeout_ms = svc->conf.executor_default_timeout_ms,
        /* only the leader knows the lanes: a standby never marks deferrals */
        .lane_wait_ms = lead ? t->lane_min_age_ms : NULL,
        .direct = direct,
        .epoch = lead ? t->epoch : 0,
        .role = t->role,
        .holder = t->holder,
    };
    int rc = ax_pg_ensure(t->ingest_pg, err, errlen);
    /* since the batch was taken, measured as late as can be (a batch held
     * across a lost partition must not take the new owner's watermark for
     * an older log's) */
    c.taken_ms_ago = ax_svc_held_age_ms(svc);
    if (rc == 0)
        rc = ax_store_ingest(t->ingest_pg, &c, in, n, out, err, errlen);
    if (rc == 0 && out->fenced) {
        lead_fenced(t); /* nothing was marked dispatched */
    } else if (rc == 0 && c.epoch) {
        dispatch_committed(t, &out->rows, 1, NULL);
    }
    return rc;
}

/* Rows the statement inserted nothing for: a known job (a duplicate), a
 * flow, a reserved group, or an unknown job. */
static int ingest_missing(trigger_t *t, ingest_row_t *rows, size_t from, size_t to, char *err,
                          size_t errlen) {
    const char **names = calloc(to - from + 1, sizeof *names);
    if (!names)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "ingest: out of memory");
    size_t nn = 0;
    for (size_t i = from; i < to; i++)
        if (!rows[i].state && rows[i].s.job)
            names[nn++] = rows[i].s.job;
    ax_ingest_jobs_t jobs = {0};
    int rc = nn ? ax_store_ingest_jobs(t->svc.pg, names, nn, &jobs, err, errlen) : 0;
    free(names);
    for (size_t i = from; rc == 0 && i < to; i++) {
        ingest_row_t *w = &rows[i];
        if (w->state)
            continue;
        if (!w->s.job) {
            w->state = 3;
            continue;
        }
        const ax_ingest_job_t *j = NULL;
        for (size_t k = 0; k < jobs.n && !j; k++)
            if (strcmp(jobs.v[k].name, w->s.job) == 0)
                j = &jobs.v[k];
        if (j && !j->flow && ax_conf_group_reserved(j->executor_group)) {
            w->state = 1;
            snprintf(w->reason, sizeof w->reason,
                     "job '%.300s' names executor group '%s', a reserved name (p0-p9 "
                     "are priority lanes)",
                     w->s.job, j->executor_group);
        } else if (j && j->flow) {
            w->state = 1;
            snprintf(w->reason, sizeof w->reason,
                     "job '%.400s' starts a flow: run it with axctl flow run", w->s.job);
        } else if (j) {
            w->state = 3;
        } else {
            w->state = 1;
            snprintf(w->reason, sizeof w->reason, "unknown job '%.400s'", w->s.job);
        }
    }
    ax_ingest_jobs_free(&jobs);
    return rc;
}

static int key_cmp(const void *a, const void *b) {
    return ax_keycmp(*(const char *const *)a, *(const char *const *)b);
}

/* Insert rows [from, to) that are pending; sets their state. Returns 0,
 * or <0 (AX_ERR_INVALID: the statement refused the data). */
static int ingest_rows(trigger_t *t, ingest_row_t *rows, size_t from, size_t to, char *err,
                       size_t errlen) {
    ax_ingest_in_t *in = calloc(to - from + 1, sizeof *in);
    if (!in)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "ingest: out of memory");
    size_t used = ingest_inputs(rows, from, to, in);
    ax_ingest_out_t out = {0};
    int rc = used ? ingest_run(t, in, used, &out, err, errlen) : 0;
    free(in);
    if (rc < 0 || !used)
        return rc;
    for (size_t k = 0; k < out.rows.n; k++)
        t->ingest_held += out.rows.v[k].hold != 0;
    /* Inserted, duplicate (same submit_key seen before), or unknown job:
     * a row is inserted when the statement returned its submit key. The
     * returned keys are sorted and each row's looked up (O(n log n)): the
     * statement's order is its plan's (a hash join's buckets), and a
     * search from the last match was O(n^2), a third of the trigger's CPU
     * under load (BENCHMARKS.md, "Issue #13: the ingest's key lookup"). */
    const char **keys = malloc((out.rows.n + 1) * sizeof *keys);
    if (!keys) {
        ax_ingest_out_free(&out);
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "ingest: out of memory");
    }
    size_t nkeys = 0;
    for (size_t k = 0; k < out.rows.n; k++)
        if (out.submit_key[k])
            keys[nkeys++] = out.submit_key[k];
    qsort(keys, nkeys, sizeof *keys, key_cmp);
    for (size_t i = from; i < to; i++) {
        const char *key = rows[i].submit_key;
        if (!rows[i].state && bsearch(&key, keys, nkeys, sizeof *keys, key_cmp))
            rows[i].state = 2;
    }
    free(keys);
    ax_ingest_out_free(&out);
    return ingest_missing(t, rows, from, to, err, errlen);
}

/* An instance is produced onward as one dispatch record, which must fit
 * message.max.bytes like every ax message: a submission whose dispatch
 * could not (payload + argv + the other fields at their longest) is
 * dead-lettered now instead of failing the leader's Kafka transaction
 * later. A defined job's own command is not known here; the dispatch path
 * holds an instance whose record turns out too large (produce_dispatch_rows). */
static void submit_size_check(ax_svc_t *svc, ingest_row_t *w) {
    const ax_submit_t *s = &w->s;
    size_t max = (size_t)svc->conf.message_max_bytes;
    size_t n = ax_dispatch_size_max(s->job, NULL, (const char *const *)s->command,
                                    s->command_len, s->payload_len, s->trace_id,
                                    s->idempotency_key ? s->idempotency_key : w->submit_key);
    if (n <= max)
        return;
    w->state = 1;
    snprintf(w->reason, sizeof w->reason,
             "too large: its dispatch record would take up to %zu bytes (payload %zu bytes), "
             "over message.max.bytes %zu",
             n, s->payload_len, max);
}

/* The end offset of m's partition as the consumer's last fetch gave it
 * (no request: librdkafka's cached value), or -1. The ingest starts a
 * partition's dedupe watermark over when it lies above this (a submit
 * topic deleted and created again). */
static int64_t log_end(ax_svc_t *svc, const rd_kafka_message_t *m) {
    int64_t lo = -1, hi = -1;
    if (!svc->consumer ||
        rd_kafka_get_watermark_offsets(svc->consumer, rd_kafka_topic_name(m->rkt), m->partition,
                                       &lo, &hi) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        hi <= m->offset)
        return -1; /* unknown, or not yet updated by the fetch that brought m */
    return hi;
}

int ingest_batch(ax_svc_t *svc, rd_kafka_message_t **msgs, size_t n, void *arg) {
    trigger_t *t = arg;
    char err[1024];
    ingest_row_t *rows = calloc(n, sizeof *rows);
    if (!rows)
        return AX_ERR_NOMEM;
    int rc = 0;
    t->ingest_held = 0;
    for (size_t i = 0; i < n; i++) {
        rd_kafka_message_t *m = msgs[i];
        ingest_row_t *w = &rows[i];
        if (ax_svc_precheck(svc, m, AX_SCHEMA_SUBMIT, w->reason, sizeof w->reason) < 0 ||
            ax_submit_decode(m->payload, m->len, &w->s, w->reason, sizeof w->reason) < 0) {
            w->state = 1;
            continue;
        }
        if (w->s.idempotency_key && strlen(w->s.idempotency_key) > 512) {
            /* a longer key would be cut to its first 512 bytes, and a
             * second key sharing them taken for a duplicate and dropped */
            w->state = 1;
            snprintf(w->reason, sizeof w->reason,
                     "idempotency_key is %zu bytes, over the limit of 512",
                     strlen(w->s.idempotency_key));
            continue;
        }
        if (w->s.idempotency_key)
            snprintf(w->submit_key, sizeof w->submit_key, "idem:%s", w->s.idempotency_key);
        else
            snprintf(w->submit_key, sizeof w->submit_key, "kafka:%s:%d:%lld",
                     rd_kafka_topic_name(m->rkt), (int)m->partition, (long long)m->offset);
        w->log_end = log_end(svc, m);
        submit_size_check(svc, w);
    }
    /* One statement for the batch; if it refuses the data, one row at a
     * time so only the bad submission is dead-lettered. */
    rc = ingest_rows(t, rows, 0, n, err, sizeof err);
    if (rc == AX_ERR_INVALID || rc == AX_ERR_CONFLICT) {
        ax_warn("ingest: %s; retrying one submission at a time", err);
        rc = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
            rc = ingest_rows(t, rows, i, i + 1, err, sizeof err);
            if (rc == AX_ERR_INVALID || rc == AX_ERR_CONFLICT) {
                rows[i].state = 1;
                snprintf(rows[i].reason, sizeof rows[i].reason, "cannot persist: %.450s", err);
                rc = 0;
            }
        }
    }
    if (rc < 0) {
        ax_warn("ingest: %s", err);
        goto out;
    }
    int64_t added = 0, dups = 0;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].state == 1) {
            ax_warn("submission %s [%d] @%lld rejected: %s", rd_kafka_topic_name(msgs[i]->rkt),
                    (int)msgs[i]->partition, (long long)msgs[i]->offset, rows[i].reason);
            /* decoded (unknown job, too large, refused by the statement):
             * the dead letter says which job and trace */
            ax_dlq_about_t about = {0, rows[i].s.job, rows[i].s.trace_id};
            if (ax_svc_reject_about(svc, msgs[i], rows[i].reason, &about) < 0) {
                rc = AX_ERR_IO;
                goto out;
            }
        }
        added += rows[i].state == 2;
        dups += rows[i].state == 3;
    }
    t->submitted += added;
    t->duplicates += dups;
    if (dups) {
        ax_info("%lld duplicate submission(s) ignored", (long long)dups);
        ax_store_counter_add(svc->pg, "trigger.duplicate_submissions", dups, NULL, 0);
    }
    if (added)
        ax_debug("%lld instance(s) scheduled", (long long)added);
    /* the due scan for what the statement left to it (not due yet, a
     * deferring lane, a lane not dispatched from the ingest, a static
     * shard parent); a batch dispatched whole needs none: three statements
     * a batch saved at low load */
    if (added && t->leader && t->ingest_held)
        arm_scan(t, 0);
out:
    for (size_t i = 0; i < n; i++) {
        ax_submit_clear(&rows[i].s);
        free(rows[i].argv_json);
    }
    free(rows);
    return rc;
}

