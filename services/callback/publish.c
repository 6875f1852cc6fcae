/*
 * publish.c — the results publisher: each final outcome exactly once on
 * the results topic.
 *
 * The finish statement writes every instance it ends for good into
 * ax_result_outbox (same PostgreSQL transaction). One callback process of a
 * deployment at a time publishes: the holder of a session advisory lock,
 * with a transactional producer of a stable transactional.id — its
 * init_transactions fences the previous holder's producer (whose open
 * transaction is aborted: read_committed consumers never see it). A batch of
 * outbox rows is produced in one Kafka transaction (results and the
 * dead-letter copies of final failures), and once committed one statement
 * deletes the rows from the outbox, sets result_published_at and advances,
 * per results-topic partition, the offset up to which the topic is
 * reconciled with the rows (ax_results_offset).
 *
 * A holder that starts, takes over, or does not know whether its last
 * transaction was committed and marked (a failed commit or mark: PostgreSQL
 * or Kafka down, a crash) first recovers from the topic itself (recover.c):
 * it reads it read_committed from the stored offsets to its end, marks every
 * instance it finds there published and advances the offsets, and only then
 * publishes anything new. So a result already on the topic is never produced
 * again. The lock lives on a connection of its own, kept alive by a thread
 * while the publisher's thread turns (Kafka waits never idle it out).
 *
 * Publishing runs on a thread of its own (pub_main) with its own
 * PostgreSQL connection, so the event loop goes on consuming and
 * persisting results while a Kafka transaction is produced, committed and
 * marked. The loop hands over what it finished (the carry's inbox, under
 * pb->mu) and wakes the thread when the window is over; the rest it shares
 * is atomic (publisher_t) or configuration no reload changes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ax/log.h"
#include "ax/store_outbox.h"
#include "callback.h"

#define PUB_IDLE_S "10s"
enum { PUB_BATCH = 5000, PUB_ROUNDS = 8, PUB_TICK_MS = 100, PUB_TRY_MS = 1000,
       PUB_PING_MS = 1000, PUB_HUNG_MS = 90000 };
/* Results carried at most (beyond it, the outbox is read back) */
enum { CARRY_MAX_ROWS = PUB_BATCH * PUB_ROUNDS, CARRY_MAX_BYTES = 64 << 20 };

static const char cut_both[] = "result output and error cut: the results topic refused the record";

static int is_size_refusal(rd_kafka_resp_err_t e) {
    return e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
           e == RD_KAFKA_RESP_ERR_INVALID_RECORD || e == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE;
}

/* Refused for its size: noted, so the batch produced again after the
 * failed commit carries a cut result for this instance. */
static void note_refusal(pub_dlv_t *pd, const rd_kafka_message_t *m) {
    char key[24];
    if (!is_size_refusal(m->err) || !m->key || m->key_len == 0 || m->key_len >= sizeof key)
        return;
    memcpy(key, m->key, m->key_len);
    key[m->key_len] = 0;
    long long id = strtoll(key, NULL, 10);
    if (id <= 0)
        return;
    if (pd->nrefused == pd->caprefused) {
        size_t cap = pd->caprefused ? pd->caprefused * 2 : 16;
        struct pub_refusal *v = realloc(pd->refused, cap * sizeof *v);
        if (!v)
            return;
        pd->refused = v;
        pd->caprefused = cap;
    }
    pd->refused[pd->nrefused++] = (struct pub_refusal){id, m->len};
}

static void pub_on_message(ax_delivery_t *d, const rd_kafka_message_t *m) {
    pub_dlv_t *pd = (pub_dlv_t *)d;
    if (m->err) {
        note_refusal(pd, m);
        return;
    }
    if (m->partition < 0 || strcmp(rd_kafka_topic_name(m->rkt), pd->topic) != 0)
        return;
    if (m->partition >= pd->nparts) {
        int64_t *n = realloc(pd->next, (size_t)(m->partition + 1) * sizeof *n);
        if (!n)
            return; /* the offset stays behind: recovery reads a little more */
        for (int32_t p = pd->nparts; p <= m->partition; p++)
            n[p] = -1;
        pd->next = n;
        pd->nparts = m->partition + 1;
    }
    if (pd->next[m->partition] < m->offset + 1)
        pd->next[m->partition] = m->offset + 1;
}

static void pub_dlv_reset(pub_dlv_t *pd) {
    pd->d.pending = pd->d.failed = 0;
    pd->d.err = 0;
    pd->nrefused = 0;
    for (int32_t p = 0; p < pd->nparts; p++)
        pd->next[p] = -1;
}

/* ---- results cut because Kafka refused them ----------------------------------------- */

static int pub_cut_level(publisher_t *pb, int64_t id) {
    for (size_t k = 0; k < pb->ncuts; k++)
        if (pb->cuts[k].id == id)
            return pb->cuts[k].level;
    return 0;
}

/* The result of `id` is produced cut one level more from now on. */
static int pub_cut_more(publisher_t *pb, int64_t id) {
    for (size_t k = 0; k < pb->ncuts; k++)
        if (pb->cuts[k].id == id)
            return pb->cuts[k].level < 3 ? ++pb->cuts[k].level : 3;
    if (pb->ncuts == pb->capcuts) {
        size_t cap = pb->capcuts ? pb->capcuts * 2 : 16;
        struct pub_cut *v = realloc(pb->cuts, cap * sizeof *v);
        if (!v)
            return 3; /* out of memory: given up */
        pb->cuts = v;
        pb->capcuts = cap;
    }
    pb->cuts[pb->ncuts++] = (struct pub_cut){id, 1};
    return 1;
}

static void pub_cut_forget(publisher_t *pb, int64_t id) {
    for (size_t k = 0; k < pb->ncuts; k++)
        if (pb->cuts[k].id == id) {
            pb->cuts[k] = pb->cuts[--pb->ncuts];
            return;
        }
}

/* ---- results carried from the finish ------------------------------------------------ */

/* The publisher reads each result it publishes from the outbox: the
 * instance's state and definition rows (outbox.pending), about 10 µs of
 * PostgreSQL's time per job. The finish statement of this very process
 * had those columns at hand, so while this process is the publisher it
 * asks for them (outcome.finish's 'r' rows) and keeps them after the
 * commit — whole ax_result_batch rows only — and the pending read returns
 * such a batch as its id alone. Results finished by another callback
 * process, or while this one was not ready, are read as before.
 * Memory is only a cache of what is durable in PostgreSQL: it is dropped
 * whenever the publisher stops or must recover from the topic (a recovery
 * may mark some of a batch's instances alone), and the outbox then says
 * what is left. */

static size_t row_bytes(const ax_outbox_row_t *o) {
    return sizeof *o + (o->res.output ? strlen(o->res.output) : 0) +
           (o->res.error ? strlen(o->res.error) : 0);
}

static size_t carry_bytes(const struct pub_carry *c) {
    size_t bytes = 0;
    for (size_t i = 0; i < c->n; i++)
        bytes += row_bytes(&c->rows[i]);
    return bytes;
}

/* A carried batch gone from the carry or the inbox: its rows freed, or
 * `moved` elsewhere (the array only freed). */
static void carry_gone(publisher_t *pb, struct pub_carry *c, int moved) {
    atomic_fetch_sub(&pb->carry_bytes, (long long)carry_bytes(c));
    atomic_fetch_sub(&pb->carry_rows, (long long)c->n);
    if (moved)
        free(c->rows);
    else
        ax_outbox_rows_free(c->rows, c->n);
}

/* Carried batch k leaves the carry: its rows freed, or `moved` elsewhere. */
static void pub_carry_drop(publisher_t *pb, size_t k, int moved) {
    struct pub_carry *c = &pb->carry[k];
    carry_gone(pb, c, moved);
    memmove(c, c + 1, (pb->ncarry - k - 1) * sizeof *c);
    pb->ncarry--;
}

/* The inbox taken out from under the loop (which starts a new one), so
 * that its rows are freed or moved without holding the loop up. */
static struct pub_carry *inbox_swap(publisher_t *pb, size_t *ret_n) {
    pthread_mutex_lock(&pb->mu);
    struct pub_carry *in = pb->inbox;
    *ret_n = pb->ninbox;
    pb->inbox = NULL;
    pb->ninbox = pb->capinbox = 0;
    pthread_mutex_unlock(&pb->mu);
    return in;
}

/* The carry dropped, the inbox too: the loop hands nothing more over until
 * the thread says so again (pub_carry_state), and what it hands over in
 * between carries an older generation and is dropped (pub_inbox_take). */
static void pub_carry_clear(publisher_t *pb) {
    atomic_store(&pb->carry_ok, 0);
    atomic_fetch_add(&pb->gen, 1);
    while (pb->ncarry)
        pub_carry_drop(pb, pb->ncarry - 1, 0);
    size_t n = 0;
    struct pub_carry *in = inbox_swap(pb, &n);
    for (size_t k = 0; k < n; k++)
        carry_gone(pb, &in[k], 0);
    free(in);
}

/* Whether the loop may carry from now on (the thread's view). */
static void pub_carry_state(publisher_t *pb) {
    atomic_store(&pb->carry_ok, pb->holder && pb->txp && !pb->need_recover &&
                                    !atomic_load(&pb->lock_lost));
}

int cb_pub_carrying(const callback_t *cb) {
    const publisher_t *pb = &cb->pub;
    /* not while the thread is hung: nothing would take the rows */
    return atomic_load(&pb->carry_ok) && atomic_load(&pb->carry_rows) < CARRY_MAX_ROWS &&
           atomic_load(&pb->carry_bytes) < CARRY_MAX_BYTES &&
           ax_mono_ms() - atomic_load(&pb->loop_ms) < PUB_HUNG_MS;
}

/* A batch row's results, moved out of f (in order of the statement) into
 * the inbox (the loop's side). */
static int pub_carry_batch(publisher_t *pb, ax_outcome_finished_t *f, int64_t batch,
                           int64_t gen) {
    size_t n = 0;
    for (size_t i = 0; i < f->nresults; i++)
        n += f->results[i].batch == batch;
    ax_outbox_row_t *rows = calloc(n, sizeof *rows);
    if (!rows)
        return AX_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < f->nresults; i++) {
        ax_outcome_result_t *o = &f->results[i];
        if (o->batch != batch)
            continue;
        rows[k].present = o->present;
        rows[k++].res = o->res;
        memset(&o->res, 0, sizeof o->res);
        o->batch = 0; /* taken */
    }
    struct pub_carry c = {batch, rows, n, gen};
    atomic_fetch_add(&pb->carry_bytes, (long long)carry_bytes(&c));
    atomic_fetch_add(&pb->carry_rows, (long long)n);
    pthread_mutex_lock(&pb->mu);
    if (pb->ninbox == pb->capinbox) {
        size_t cap = pb->capinbox ? pb->capinbox * 2 : 16;
        struct pub_carry *v = realloc(pb->inbox, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&pb->mu);
            carry_gone(pb, &c, 0);
            return AX_ERR_NOMEM;
        }
        pb->inbox = v;
        pb->capinbox = cap;
    }
    pb->inbox[pb->ninbox++] = c;
    pthread_mutex_unlock(&pb->mu);
    return 0;
}

void cb_pub_carry(callback_t *cb, ax_outcome_finished_t *f) {
    publisher_t *pb = &cb->pub;
    int64_t gen = atomic_load(&pb->gen);
    if (!f->nresults || !cb_pub_carrying(cb))
        return;
    for (size_t i = 0; i < f->nresults; i++)
        if (f->results[i].batch > 0 && pub_carry_batch(pb, f, f->results[i].batch, gen) < 0)
            return; /* out of memory: the rest is read from the outbox */
}

/* The thread's side: the inbox moved into the carry, in the order handed
 * over; a batch handed over before the carry was last dropped is dropped
 * too (the outbox says what is left). */
static int pub_inbox_take(publisher_t *pb) {
    int64_t gen = atomic_load(&pb->gen);
    size_t n = 0, k = 0;
    struct pub_carry *in = inbox_swap(pb, &n);
    int rc = 0;
    for (; k < n; k++) {
        struct pub_carry *c = &in[k];
        if (c->gen != gen) {
            carry_gone(pb, c, 0);
            continue;
        }
        if (pb->ncarry == pb->capcarry) {
            size_t cap = pb->capcarry ? pb->capcarry * 2 : 16;
            struct pub_carry *v = realloc(pb->carry, cap * sizeof *v);
            if (!v) {
                rc = AX_ERR_NOMEM;
                break;
            }
            pb->carry = v;
            pb->capcarry = cap;
        }
        pb->carry[pb->ncarry++] = *c;
    }
    for (; k < n; k++) /* out of memory: read from the outbox */
        carry_gone(pb, &in[k], 0);
    free(in);
    return rc;
}

static int id_cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The rows to publish: the outbox's, then the carried batches it named
 * (moved out of the carry); *ret_carried of them carried. A named batch
 * whose row holds a different number of ids than carried (a mark or a
 * recovery changed it: cannot be while this process publishes) is dropped
 * and read from the outbox next time; an outbox row of an instance a named
 * batch carries is left out (one result, one record). A carried batch the
 * outbox did not name although a later carried one was named is published
 * or gone: dropped. */
static ax_outbox_row_t *pub_rows(publisher_t *pb, ax_outbox_pending_t *pend, size_t *ret_n,
                                 size_t *ret_carried) {
    size_t n = pend->n;
    int64_t last = 0;
    for (size_t j = 0; j < pend->ncarried; j++)
        last = pend->carried[j] > last ? pend->carried[j] : last;
    for (size_t k = 0; k < pb->ncarry;) {
        struct pub_carry *c = &pb->carry[k];
        size_t j = 0;
        while (j < pend->ncarried && pend->carried[j] != c->batch)
            j++;
        if (j < pend->ncarried && pend->carried_n[j] == (int64_t)c->n) {
            n += c->n;
            k++;
            continue;
        }
        if (j < pend->ncarried || c->batch < last || (pend->ncarried == 0 && n < PUB_BATCH)) {
            /* no longer pending: the outbox read of a transaction before
             * this one found it committed but not yet handed over, and it
             * was published from there */
            if (j < pend->ncarried)
                ax_warn("results batch %lld carried but changed since; read from the outbox",
                        (long long)c->batch);
            else
                ax_debug("results batch %lld carried but no longer pending", (long long)c->batch);
            pub_carry_drop(pb, k, 0);
            continue;
        }
        k++;
    }
    /* the carried ids, sorted, to leave the outbox's copies out */
    int64_t *cids = malloc((n - pend->n + 1) * sizeof *cids);
    ax_outbox_row_t *rows = realloc(pend->rows, (n ? n : 1) * sizeof *rows);
    if (!cids || !rows) {
        free(cids);
        if (rows)
            pend->rows = rows;
        return NULL;
    }
    pend->rows = NULL;
    size_t at = pend->n, nc = 0;
    pend->n = 0;
    for (size_t k = 0; k < pb->ncarry;) {
        struct pub_carry *c = &pb->carry[k];
        int named = 0;
        for (size_t j = 0; j < pend->ncarried && !named; j++)
            named = pend->carried[j] == c->batch;
        if (!named) {
            k++;
            continue;
        }
        for (size_t i = 0; i < c->n; i++)
            cids[nc++] = c->rows[i].res.instance_id;
        memcpy(rows + at, c->rows, c->n * sizeof *rows);
        at += c->n;
        pub_carry_drop(pb, k, 1);
    }
    qsort(cids, nc, sizeof *cids, id_cmp);
    size_t db = at - nc, keep = 0;
    for (size_t i = 0; i < at; i++) {
        if (i < db && nc &&
            bsearch(&rows[i].res.instance_id, cids, nc, sizeof *cids, id_cmp)) {
            ax_result_clear(&rows[i].res);
            continue;
        }
        rows[keep++] = rows[i];
    }
    free(cids);
    *ret_n = keep;
    *ret_carried = nc;
    return rows;
}

/* ---- the lock ------------------------------------------------------------------------ */

/* The lock connection's keeper (see publisher_t). */
static void *pub_ping_main(void *arg) {
    publisher_t *pb = arg;
    while (!atomic_load(&pb->ping_stop)) {
        usleep(PUB_PING_MS * 1000);
        if (!atomic_load(&pb->ping_holder) || atomic_load(&pb->lock_lost))
            continue;
        if (ax_mono_ms() - atomic_load(&pb->loop_ms) > PUB_HUNG_MS)
            continue; /* hung: the session times out, the lock goes to another */
        pthread_mutex_lock(&pb->lock_mu);
        char err[256];
        if (atomic_load(&pb->ping_holder) &&
            (ax_store_session_pid(pb->lockpg) != pb->pg_pid ||
             ax_store_outbox_lock_ping(pb->lockpg, err, sizeof err) < 0))
            atomic_store(&pb->lock_lost, 1);
        pthread_mutex_unlock(&pb->lock_mu);
    }
    return NULL;
}

/* Give up publishing: the producer goes (a fenced or failed one is of no
 * use), and the lock too when this session still holds it. */
static void pub_drop(callback_t *cb, const char *why) {
    publisher_t *pb = &cb->pub;
    if (pb->txp) {
        rd_kafka_destroy(pb->txp);
        pb->txp = NULL;
    }
    cb_recover_end(pb);
    pub_carry_clear(pb);
    if (!pb->holder)
        return;
    ax_warn("results publisher: %s; no longer publishing", why);
    atomic_store(&pb->ping_holder, 0);
    pthread_mutex_lock(&pb->lock_mu);
    char err[256];
    if (ax_store_session_pid(pb->lockpg) == pb->pg_pid)
        ax_store_outbox_lock_release(pb->lockpg, pb->lock_name, err, sizeof err);
    pthread_mutex_unlock(&pb->lock_mu);
    pb->holder = 0;
    pb->next_try_ms = ax_mono_ms() + PUB_TRY_MS;
}

/* Take the lock if it is free (in the lock connection's session — a new
 * session after a PostgreSQL restart holds nothing). 1 when taken. */
static int pub_take_lock(callback_t *cb) {
    publisher_t *pb = &cb->pub;
    char err[1024];
    if (ax_mono_ms() < pb->next_try_ms)
        return 0;
    pb->next_try_ms = ax_mono_ms() + PUB_TRY_MS;
    /* The lock's session ends when it sits idle for PUB_IDLE_S (the keeper
     * thread runs a statement every PUB_PING_MS while the publisher's
     * thread turns): a stopped (SIGSTOP) or hung holder loses the lock, and the
     * next one fences it. */
    pthread_mutex_lock(&pb->lock_mu);
    int got = 0;
    if (ax_pg_ensure(pb->lockpg, err, sizeof err) == 0 &&
        ax_store_outbox_lock_try(pb->lockpg, pb->lock_name, PUB_IDLE_S, &got, err,
                                 sizeof err) < 0)
        got = 0;
    if (got) {
        pb->pg_pid = ax_store_session_pid(pb->lockpg);
        atomic_store(&pb->lock_lost, 0);
        atomic_store(&pb->ping_holder, 1);
    }
    pthread_mutex_unlock(&pb->lock_mu);
    if (!got)
        return 0;
    pb->holder = 1;
    pb->need_recover = 1;
    ax_info("results publisher: this process publishes (lock %s)", pb->lock_name);
    return 1;
}

/* A producer whose init fenced every earlier one of the id. 1 when there. */
static int pub_producer(callback_t *cb) {
    publisher_t *pb = &cb->pub;
    char err[1024], cid[300];
    /* Recovery reads only after a fresh init_transactions: it returns once
     * every earlier transaction of the id — ours too — is decided and its
     * markers written, so the topic's last stable offset is past all of it. */
    if (pb->need_recover && pb->txp && !pb->rrk) {
        rd_kafka_destroy(pb->txp);
        pb->txp = NULL;
    }
    if (pb->txp)
        return 1;
    if (ax_mono_ms() < pb->next_init_ms)
        return 0;
    snprintf(cid, sizeof cid, "%s-results", cb->svc.worker_id);
    /* fences every older producer of this id: its open transaction is
     * aborted, its commit fails */
    /* linger 5 ms: results are produced one consumed batch at a time
     * over the publish window */
    pb->txp = ax_kafka_txn_producer_new(&cb->svc.conf, cid, pb->txn_id, 5, 10000, err,
                                        sizeof err);
    if (!pb->txp) {
        ax_warn("results publisher: %s", err);
        pb->next_init_ms = ax_mono_ms() + 5 * PUB_TRY_MS;
        return 0;
    }
    return 1;
}

/* Be the publisher if we can: hold the lock, have a fencing producer, and
 * have recovered. 1 when ready. */
static int pub_ready(callback_t *cb) {
    publisher_t *pb = &cb->pub;
    if (pb->holder && atomic_load(&pb->lock_lost))
        pub_drop(cb, "the PostgreSQL session holding the lock is gone");
    if (pb->need_recover || !pb->holder)
        pub_carry_clear(pb); /* the outbox (after the recovery) says what is left */
    if (!pb->holder && !pub_take_lock(cb))
        return 0;
    if (!pub_producer(cb))
        return 0;
    if (pb->need_recover) {
        int rc = cb_recover_step(cb);
        if (rc < 0) {
            /* tried again after a new init, from the positions saved */
            rd_kafka_destroy(pb->txp);
            pb->txp = NULL;
            pb->next_init_ms = ax_mono_ms() + PUB_TRY_MS;
        }
        if (rc <= 0)
            return 0;
    }
    rd_kafka_poll(pb->txp, 0);
    return 1;
}

/* ---- one Kafka transaction ------------------------------------------------------------- */

/* res's Result record (buf, len) to the dead-letter topic, with its
 * instance (the key), job and trace id in headers. */
static void dead_letter(callback_t *cb, const char *key, int klen, const void *buf, size_t len,
                        const char *reason, const char *kind, const ax_result_t *res) {
    char err[1024];
    int64_t id = res->instance_id;
    rd_kafka_headers_t *h = rd_kafka_headers_new(6);
    rd_kafka_header_add(h, "ax.reason", -1, reason, -1);
    rd_kafka_header_add(h, "ax.kind", -1, kind, -1);
    rd_kafka_header_add(h, "ax.instance.id", -1, key, klen);
    rd_kafka_header_add(h, "ax.service", -1, cb->svc.name, -1);
    ax_kafka_dlq_about(h, &(ax_dlq_about_t){0, res->job, res->trace_id});
    if (ax_kafka_produce(cb->pub.txp, cb->svc.topic_dlq, key, (size_t)klen, buf, len, h,
                         &cb->pub.dlv.d, err, sizeof err) < 0) {
        rd_kafka_headers_destroy(h);
        ax_error("instance %lld: %s not dead-lettered: %s", (long long)id,
                 strcmp(kind, "final_failure") == 0 ? "final failure" : "result", err);
    }
}

/* Produce `res` (a copy the cuts may change), cut as far as Kafka made us.
 * 1 produced (*ret_buf / *ret_len the record, *ret_level its cut), 0 not. */
static int produce_cut(callback_t *cb, ax_result_t *res, const char *key, int klen,
                       char **cut_err, void **ret_buf, size_t *ret_len, int *ret_level) {
    char err[1024];
    int level = pub_cut_level(&cb->pub, res->instance_id);
    for (; level < 3; level = pub_cut_more(&cb->pub, res->instance_id)) {
        free(*cut_err);
        *cut_err = NULL;
        if (level == 1) {
            res->output = "";
            if (asprintf(cut_err, "%s%sresult output cut: the results topic refused the record",
                         res->error ? res->error : "", res->error ? "; " : "") < 0)
                *cut_err = NULL;
            res->error = *cut_err ? *cut_err : "result output cut";
        } else if (level == 2) {
            res->output = "";
            res->error = (char *)cut_both;
        }
        if (ax_result_encode(res, ret_buf, ret_len) < 0) {
            ax_error("instance %lld: cannot encode result; not published",
                     (long long)res->instance_id);
            break;
        }
        /* a failed delivery fails the commit (and the batch is produced
         * again, the refused record cut); in chunks of
         * produce.partition.chunk per partition, so a small transaction
         * touches one or two partitions, not all (the key stays the
         * instance id; the hint is read as the record is produced) */
        cb->pub.dlv.d.part_hint =
            ax_kafka_chunk_hint(cb->pub.part_seq++, cb->svc.conf.produce_partition_chunk);
        if (ax_kafka_produce(cb->pub.txp, cb->svc.topic_results, key, (size_t)klen, *ret_buf,
                             *ret_len, NULL, &cb->pub.dlv.d, err, sizeof err) == 0) {
            *ret_level = level;
            return 1;
        }
        ax_error("instance %lld: result refused: %s", (long long)res->instance_id, err);
        free(*ret_buf);
        *ret_buf = NULL;
    }
    *ret_level = level;
    return 0;
}

/* One outbox row's result into the transaction. A result Kafka refused (a
 * results topic accepting less than this one's size) goes out cut: without
 * its output, then without its error too, the cut noted in the error; one
 * refused at once by the producer is cut at once. Given up (dead-lettered,
 * only leaves the outbox) when even that is refused. 1 if produced. */
static int pub_one(callback_t *cb, const ax_result_t *row) {
    ax_result_t res = *row; /* the cuts point its strings elsewhere */
    void *buf = NULL;
    size_t len;
    char key[32], *cut_err = NULL;
    int klen = snprintf(key, sizeof key, "%lld", (long long)res.instance_id), level;
    int sent = produce_cut(cb, &res, key, klen, &cut_err, &buf, &len, &level);
    if (!sent) {
        if (level >= 3) {
            ax_error("instance %lld: result not published: the results topic refused it "
                     "even cut; dead-lettered",
                     (long long)res.instance_id);
            res.output = "";
            res.error = (char *)cut_both;
            if (ax_result_encode(&res, &buf, &len) == 0)
                dead_letter(cb, key, klen, buf, len,
                            "the results topic refused this result, even cut", "result_refused",
                            &res);
        }
        free(cut_err);
        free(buf);
        return 0;
    }
    if (level > 0)
        ax_warn("instance %lld: result published cut (%s)", (long long)res.instance_id,
                level == 1 ? "without its output" : "without output and error");
    /* A final failure is also recorded on the dead-letter topic (the same
     * Result record, the reason in headers) for `axctl dlq`, in the same
     * transaction. */
    if (res.outcome != AX_OUTCOME_SUCCESS && res.outcome != AX_OUTCOME_CANCELLED)
        dead_letter(cb, key, klen, buf, len, res.error ? res.error : ax_outcome_name(res.outcome),
                    "final_failure", &res);
    free(buf);
    free(cut_err);
    return 1;
}

/* The transaction failed: aborted — or not known, the commit may have
 * gone through. A new producer (fencing this one) and a recovery from the
 * topic decide. */
static void pub_failed(callback_t *cb, int rc, int produced, const char *err) {
    pub_dlv_t *pd = &cb->pub.dlv;
    ax_warn("results: %d not published (%s); recovering from the topic first", produced, err);
    /* The largest record Kafka refused for its size is cut from now on
     * (one per failed transaction: a record set refused as a whole names
     * every record in it). */
    struct pub_refusal *big = NULL;
    for (size_t k = 0; k < pd->nrefused; k++)
        if (!big || pd->refused[k].len > big->len)
            big = &pd->refused[k];
    if (big) {
        int lv = pub_cut_more(&cb->pub, big->id);
        ax_warn("instance %lld: Kafka refused its result of %zu bytes; produced again %s",
                (long long)big->id, big->len,
                lv == 1 ? "without its output" : lv == 2 ? "without output and error"
                                                       : "not at all (given up)");
    }
    cb->pub.need_recover = 1;
    if (rc == AX_ERR_CONFLICT)
        pub_drop(cb, "the producer was fenced");
}

/* Committed on Kafka: the rows leave the outbox, marked published. */
static int pub_mark(callback_t *cb, const ax_outbox_row_t *rows, size_t nrows, int64_t *ids) {
    char err[1024];
    pub_dlv_t *pd = &cb->pub.dlv;
    int n = ax_store_outbox_mark(cb->pub.pg, AX_OUTBOX_PUBLISHED, cb->svc.conf.topic_prefix, ids,
                                 nrows, cb->svc.topic_results, pd->next, (int)pd->nparts, err,
                                 sizeof err);
    if (n < 0) {
        /* nothing more is produced before the topic itself says what is
         * published */
        ax_warn("mark published: %s; recovering from the topic first", err);
        cb->pub.need_recover = 1;
        return n;
    }
    for (size_t i = 0; i < nrows; i++)
        pub_cut_forget(&cb->pub, rows[i].res.instance_id);
    atomic_fetch_add(&cb->published, n);
    return 0;
}

/* One Kafka transaction: up to PUB_BATCH outbox rows. Returns the number of
 * outbox rows handled (0: the outbox is empty), or < 0. */
static int pub_batch(callback_t *cb) {
    char err[1024];
    publisher_t *pb = &cb->pub;
    ax_outbox_pending_t pend;
    atomic_store(&pb->loop_ms, ax_mono_ms()); /* alive: each round may wait on Kafka */
    if (pub_inbox_take(pb) < 0)
        ax_warn("results: out of memory; carried results read from the outbox");
    int64_t *cids = malloc((pb->ncarry ? pb->ncarry : 1) * sizeof *cids);
    if (!cids)
        return AX_ERR_NOMEM;
    for (size_t k = 0; k < pb->ncarry; k++)
        cids[k] = pb->carry[k].batch;
    int rc = ax_store_outbox_pending(pb->pg, cb->svc.conf.topic_prefix, PUB_BATCH, cids,
                                     pb->ncarry, &pend, err, sizeof err);
    free(cids);
    if (rc < 0) {
        ax_warn("results: %s", err);
        return rc;
    }
    size_t nrows = 0, ncarried = 0;
    ax_outbox_row_t *rows = pub_rows(pb, &pend, &nrows, &ncarried);
    ax_outbox_pending_free(&pend);
    if (!rows)
        return AX_ERR_NOMEM;
    if (nrows == 0) {
        free(rows);
        return 0;
    }
    int64_t *ids = malloc(nrows * sizeof *ids);
    if (!ids) {
        ax_outbox_rows_free(rows, nrows);
        return AX_ERR_NOMEM;
    }
    int produced = 0;
    pub_dlv_reset(&cb->pub.dlv);
    rc = ax_kafka_txn_begin(cb->pub.txp, err, sizeof err);
    for (size_t i = 0; rc == 0 && i < nrows; i++) {
        ids[i] = rows[i].res.instance_id;
        /* deleted, or published already: only leaves the outbox */
        if (rows[i].present)
            produced += pub_one(cb, &rows[i].res);
    }
    if (rc == 0)
        rc = ax_kafka_txn_commit(cb->pub.txp, 35000, err, sizeof err);
    else
        ax_kafka_txn_abort(cb->pub.txp, 10000);
    if (rc == 0 && cb->pub.dlv.d.failed) /* cannot be: a failed delivery fails the commit */
        rc = ax_seterr(err, sizeof err, AX_ERR_IO, "%d result(s) not delivered",
                       cb->pub.dlv.d.failed);
    if (rc < 0)
        pub_failed(cb, rc, produced, err);
    else
        rc = pub_mark(cb, rows, nrows, ids);
    if (rc == 0) { /* published: where each came from */
        atomic_fetch_add(&pb->carried, (long long)ncarried);
        atomic_fetch_add(&pb->read, (long long)(nrows - ncarried));
    }
    free(ids);
    ax_outbox_rows_free(rows, nrows);
    return rc < 0 ? AX_ERR_IO : (int)nrows;
}

/* Publish what the outbox holds, if this process is (or can become) the
 * publisher. */
static void pub_tick(callback_t *cb, int64_t now) {
    publisher_t *pb = &cb->pub;
    if (atomic_load(&pb->stop) || !pub_ready(cb))
        return;
    atomic_store(&pb->last_pub_ms, now);
    atomic_store(&pb->unpublished, 0);
    for (int round = 0; round < PUB_ROUNDS && !atomic_load(&pb->stop); round++) {
        int n = pub_batch(cb);
        if (n < PUB_BATCH)
            return;
    }
}

/* Publish when the window is over, or when a full transaction waits. */
static int pub_window_over(const callback_t *cb, int64_t now) {
    const publisher_t *pb = &cb->pub;
    return atomic_load(&pb->unpublished) >= PUB_BATCH ||
           now - atomic_load(&pb->last_pub_ms) >= cb->svc.conf.callback_publish_interval_ms;
}

void cb_pub_after_batch(callback_t *cb, int64_t ended) {
    publisher_t *pb = &cb->pub;
    atomic_fetch_add(&pb->unpublished, ended);
    if (!pub_window_over(cb, ax_mono_ms()))
        return;
    pthread_mutex_lock(&pb->mu);
    pb->wake = 1;
    pthread_cond_signal(&pb->cv);
    pthread_mutex_unlock(&pb->mu);
}

/* The publisher's thread: wakes when the loop says a window is over, and
 * at least every PUB_TICK_MS (or the window if it is shorter) to find the
 * window's end itself or take the lock; a recovery under way goes on
 * without a wait (its slices only bound how long a stop waits). */
static void *pub_main(void *arg) {
    callback_t *cb = arg;
    publisher_t *pb = &cb->pub;
    /* read once: callback.publish.interval.ms is not reloadable (nor is any
     * key the thread reads: topic.prefix, produce.partition.chunk, the
     * kafka.* keys its producer and reader are made with) */
    int64_t tick = cb->svc.conf.callback_publish_interval_ms;
    tick = tick < 1 || tick > PUB_TICK_MS ? PUB_TICK_MS : tick;
    while (!atomic_load(&pb->stop)) {
        int64_t now = ax_mono_ms();
        atomic_store(&pb->loop_ms, now);
        if (pub_window_over(cb, now))
            pub_tick(cb, now);
        pub_carry_state(pb);
        pthread_mutex_lock(&pb->mu);
        if (!pb->wake && !atomic_load(&pb->stop) && !pb->rrk) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += (long)(tick % 1000) * 1000000L;
            ts.tv_sec += (time_t)(tick / 1000) + ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&pb->cv, &pb->mu, &ts);
        }
        pb->wake = 0;
        pthread_mutex_unlock(&pb->mu);
    }
    return NULL;
}

int cb_pub_init(callback_t *cb, char *err, size_t errlen) {
    ax_svc_t *svc = &cb->svc;
    publisher_t *pb = &cb->pub;
    char buf[256];
    /* one publisher per deployment: the lock's name and the producer's
     * transactional.id are the deployment's */
    snprintf(pb->lock_name, sizeof pb->lock_name, "ax-callback results publisher %s",
             svc->conf.topic_prefix);
    snprintf(pb->txn_id, sizeof pb->txn_id, "%s",
             ax_conf_topic(&svc->conf, "callback-results", buf, sizeof buf));
    pb->lockpg = ax_pg_new(&svc->conf, "ax-callback results lock", err, errlen);
    if (!pb->lockpg)
        return AX_ERR_INVALID;
    pb->pg = ax_pg_new(&svc->conf, "ax-callback results publisher", err, errlen);
    if (!pb->pg)
        return AX_ERR_INVALID;
    atomic_store(&pb->loop_ms, ax_mono_ms());
    pb->dlv.topic = svc->topic_results;
    pb->dlv.d.on_message = pub_on_message;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "cannot make the publisher's condition");
    int ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
             pthread_cond_init(&pb->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!ok || pthread_mutex_init(&pb->mu, NULL) != 0) {
        if (ok)
            pthread_cond_destroy(&pb->cv);
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "cannot make the publisher's condition");
    }
    pb->mu_inited = 1;
    if (pthread_mutex_init(&pb->lock_mu, NULL) != 0)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "cannot make the lock keeper's mutex");
    if (pthread_create(&pb->ping_thr, NULL, pub_ping_main, pb) != 0) {
        pthread_mutex_destroy(&pb->lock_mu);
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "cannot start the lock keeper thread");
    }
    pb->ping_started = 1;
    return 0;
}

int cb_pub_start(callback_t *cb, char *err, size_t errlen) {
    publisher_t *pb = &cb->pub;
    atomic_store(&pb->loop_ms, ax_mono_ms());
    if (pthread_create(&pb->thr, NULL, pub_main, cb) != 0)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "cannot start the publisher's thread");
    pb->thr_started = 1;
    return 0;
}

void cb_pub_stop(callback_t *cb) {
    publisher_t *pb = &cb->pub;
    if (!pb->mu_inited)
        return;
    pthread_mutex_lock(&pb->mu);
    atomic_store(&pb->stop, 1);
    pthread_cond_signal(&pb->cv);
    pthread_mutex_unlock(&pb->mu);
}

/* A second SIGTERM, SIGINT or SIGQUIT while the publisher's thread ends:
 * the event loop no longer runs to see it. */
static void exit_now(int sig) {
    (void)sig;
    static const char m[] = "ax-callback: second signal: exiting now\n";
    ssize_t w = write(2, m, sizeof m - 1);
    (void)w;
    _exit(1);
}

void cb_pub_fini(callback_t *cb) {
    publisher_t *pb = &cb->pub;
    if (pb->thr_started) {
        /* a Kafka transaction under way ends first (its commit's bound); a
         * statement under way (a mark waiting for a lock, say) is
         * cancelled: a mark not made only means a recovery for the next
         * holder */
        cb_pub_stop(cb);
        struct sigaction sa = {.sa_handler = exit_now};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGQUIT, &sa, NULL);
        ax_pg_cancel(pb->pg);
        pthread_join(pb->thr, NULL);
        pb->thr_started = 0;
    }
    if (pb->ping_started) {
        atomic_store(&pb->ping_stop, 1);
        pthread_join(pb->ping_thr, NULL);
        pthread_mutex_destroy(&pb->lock_mu);
    }
    cb_recover_end(pb);
    if (pb->mu_inited) {
        pub_carry_clear(pb);
        pthread_cond_destroy(&pb->cv);
        pthread_mutex_destroy(&pb->mu);
        pb->mu_inited = 0;
    }
    free(pb->carry);
    free(pb->inbox);
    if (pb->txp)
        rd_kafka_destroy(pb->txp);
    ax_pg_destroy(pb->pg);
    ax_pg_destroy(pb->lockpg);
    free(pb->dlv.next);
    free(pb->dlv.refused);
    free(pb->cuts);
}
