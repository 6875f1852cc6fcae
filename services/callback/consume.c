/*
 * consume.c — one batch from ax.callback: decode every record (the
 * undecodable go to the dead-letter topic), let the policies decide
 * (decide.c), persist the batch in one transaction (finish.c) — falling
 * back to one result at a time when the statement is refused, so only the
 * bad result is dead-lettered — and publish what it ended (publish.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/log.h"
#include "ax/store_counter.h"
#include "callback.h"

typedef struct batch {
    rd_kafka_message_t **msgs;
    size_t n;
    ax_attempt_t *as;
    char *skip;      /* not persisted: undecodable, or superseded in the batch */
    char *is_probe;  /* a successful size probe (persisted by its own statement) */
    int64_t *retry_ms;
    ax_outcome_in_t *in; /* what is persisted, and the message of each */
    size_t *src, nin;
} batch_t;

static int batch_alloc(batch_t *b, rd_kafka_message_t **msgs, size_t n) {
    memset(b, 0, sizeof *b);
    b->msgs = msgs;
    b->n = n;
    size_t m = n ? n : 1;
    b->as = calloc(m, sizeof *b->as);
    b->skip = calloc(m, 1);
    b->is_probe = calloc(m, 1);
    b->retry_ms = calloc(m, sizeof *b->retry_ms);
    b->in = calloc(m, sizeof *b->in);
    b->src = calloc(m, sizeof *b->src);
    return b->as && b->skip && b->is_probe && b->retry_ms && b->in && b->src ? 0 : AX_ERR_NOMEM;
}

static void batch_free(batch_t *b) {
    for (size_t i = 0; b->as && i < b->n; i++)
        ax_attempt_clear(&b->as[i]);
    free(b->as);
    free(b->skip);
    free(b->is_probe);
    free(b->retry_ms);
    free(b->in);
    free(b->src);
}

/* Framing and size; both Attempt schema ids are read (the one the
 * message carries is the one checked for). */
static int precheck(ax_svc_t *svc, const rd_kafka_message_t *m, char *reason, size_t len) {
    int32_t id = AX_SCHEMA_ATTEMPT;
    if (ax_codec_peek_schema(m->payload, m->len, &id, NULL, 0) < 0 ||
        !ax_attempt_schema_known(id))
        id = AX_SCHEMA_ATTEMPT;
    return ax_svc_precheck(svc, m, id, reason, len);
}

static int decode_all(callback_t *cb, batch_t *b) {
    char reason[512];
    for (size_t i = 0; i < b->n; i++) {
        ax_attempt_t *a = &b->as[i];
        rd_kafka_message_t *m = b->msgs[i];
        if (precheck(&cb->svc, m, reason, sizeof reason) < 0 ||
            ax_attempt_decode(m->payload, m->len, a, reason, sizeof reason) < 0) {
            b->skip[i] = 1;
            if (ax_svc_reject(&cb->svc, m, reason) < 0)
                return AX_ERR_IO;
            continue;
        }
        if (a->output)
            ax_utf8_sanitize(a->output, strlen(a->output));
    }
    return 0;
}

/* The trigger's backlog_full attempt and an executor's result for the
 * same instance in one batch: the executor claimed it after the cap marked
 * it, so its result is the one that counts (the statement checks one state
 * per instance). */
static void drop_superseded_cuts(batch_t *b) {
    for (size_t i = 0; i < b->n; i++) {
        if (b->skip[i] || b->as[i].kind != AX_ATTEMPT_BACKLOG_FULL)
            continue;
        for (size_t j = 0; j < b->n; j++)
            if (j != i && !b->skip[j] && b->as[j].instance_id == b->as[i].instance_id &&
                b->as[j].kind != AX_ATTEMPT_BACKLOG_FULL) {
                b->skip[i] = 1;
                break;
            }
    }
}

/* Give up on the results the statement refuses even one at a time. */
static int reject_refused(callback_t *cb, batch_t *b, size_t k, const char *err) {
    char reason[512];
    snprintf(reason, sizeof reason, "cannot persist result: %.400s", err);
    if (k < b->nin) {
        const ax_attempt_t *a = &b->as[b->src[k]];
        ax_dlq_about_t about = {a->instance_id, NULL, a->trace_id};
        return ax_svc_reject_about(&cb->svc, b->msgs[b->src[k]], reason, &about) < 0 ? AX_ERR_IO
                                                                                     : 0;
    }
    /* the size probes alone were refused: theirs are the bad data */
    for (size_t i = 0; i < cb->probes.n; i++)
        if (ax_svc_reject(&cb->svc, b->msgs[cb->probes.msg[i]], reason) < 0)
            return AX_ERR_IO;
    cb->probes.n = 0;
    return 0;
}

/* Persist the batch: in one statement, or one result at a time (the size
 * probes first and alone) after the statement refused it. *ret_done: the
 * results that ended an attempt; *ret_offered: those persisted. */
static int persist(callback_t *cb, batch_t *b, int64_t *ret_done, int64_t *ret_offered,
                   int64_t *retried) {
    char err[1024];
    int one_by_one = 0;
    size_t k = 0;
    while (k < b->nin || cb->probes.n) {
        size_t cnt = !one_by_one ? b->nin - k : cb->probes.n ? 0 : 1;
        int got = cb_finish(cb, b->in + k, cnt, retried, err, sizeof err);
        if (got == AX_ERR_INVALID || got == AX_ERR_CONFLICT) {
            if (!one_by_one) {
                ax_warn("persist results: %s; retrying one result at a time", err);
                one_by_one = 1;
                continue;
            }
            if (reject_refused(cb, b, cnt ? k : b->nin, err) < 0)
                return AX_ERR_IO;
            k += cnt;
            continue;
        }
        if (got < 0) {
            ax_warn("persist results: %s", err);
            return got;
        }
        *ret_done += got;
        *ret_offered += (int64_t)cnt;
        k += cnt;
    }
    return 0;
}

static void account(callback_t *cb, int64_t done, int64_t offered, int64_t retried) {
    ax_svc_t *svc = &cb->svc;
    char err[512];
    if (retried) {
        /* wake the trigger: the retries are due in its scan */
        ax_store_outcome_notify_due(svc->pg, svc->conf.topic_prefix, err, sizeof err);
        cb->retried += retried;
    }
    int64_t stale = offered - done;
    cb->finished += done;
    cb->stale += stale;
    if (stale) {
        ax_info("%lld stale or duplicate result(s) ignored", (long long)stale);
        ax_store_counter_add(svc->pg, "callback.stale_results", stale, NULL, 0);
    }
}

int cb_on_attempt_batch(ax_svc_t *svc, rd_kafka_message_t **msgs, size_t n, void *arg) {
    callback_t *cb = arg;
    char err[1024];
    batch_t b;
    int rc = batch_alloc(&b, msgs, n);
    cb->probes.n = 0;
    if (rc == 0)
        rc = decode_all(cb, &b);
    if (rc < 0)
        goto out;
    drop_superseded_cuts(&b);
    if ((rc = cb_find_probes(cb, b.as, b.skip, b.is_probe, n, err, sizeof err)) < 0 ||
        (rc = cb_decide_retries(cb, b.as, b.skip, n, b.retry_ms, err, sizeof err)) < 0) {
        ax_warn("result policies: %s", err);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (!b.skip[i] && !b.is_probe[i]) {
            b.in[b.nin] = cb_outcome_in(&b.as[i], b.retry_ms[i]);
            b.src[b.nin++] = i;
        }
    int64_t done = 0, offered = 0, retried = 0;
    if ((rc = persist(cb, &b, &done, &offered, &retried)) < 0)
        goto out;
    account(cb, done, offered, retried);
    /* What the batch ended for good is in the outbox, durable: the batch is
     * done. The publisher (this process or another) publishes it; here once
     * its window is over if this process is the publisher. */
    cb_pub_after_batch(cb, done);
out:
    cb->probes.n = 0;
    batch_free(&b);
    return rc;
}
