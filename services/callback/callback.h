/*
 * callback.h — the parts of ax-callback and the state they share.
 *
 * ax-callback closes the loop: it persists each attempt's result as
 * FINISHED + outcome with a CAS fenced by (instance, attempt) — a result
 * for an attempt that is not the current one, or for an instance already
 * finished, is stale and only counted. An instance ended for good goes into
 * the results outbox in the same transaction; the batch's offsets are
 * committed then. One callback process per deployment publishes the outbox:
 * one final-outcome event per instance on the results topic, exactly once
 * as read_committed consumers see it (publish.c).
 *
 * The files, and the one direction of their calls:
 *   main.c     configuration, SIGHUP, wiring                -> consume, publish
 *   consume.c  a batch from ax.callback: decode, decide, persist
 *                                                           -> decide, finish, publish
 *   decide.c   the retry and size-probe policies of a batch -> alerts
 *   finish.c   the batch's transaction (the finish CAS, the job rows)
 *                                                           -> flows, alerts
 *   flows.c    shards, size probes and flow runs an ended instance advances
 *   publish.c  the results publisher (lock, Kafka transactions, marks),
 *              on a thread of its own                       -> recover
 *   recover.c  reading the results topic back after a takeover or a doubt
 *   alerts.c   the alerts the callback raises
 * State lives in callback_t (one per process, owned by main()).
 */
#ifndef AX_CALLBACK_H
#define AX_CALLBACK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/service.h"
#include "ax/store_outbox.h"
#include "ax/store_outcome.h"

/* ---- the results publisher (publish.c, recover.c) ---------------------------------- */

/* Delivery reports of one Kafka transaction. */
typedef struct pub_dlv {
    ax_delivery_t d; /* first: the delivery report's opaque */
    const char *topic;
    int64_t *next;   /* per results partition: highest delivered offset + 1, or -1 */
    int32_t nparts;
    /* records Kafka refused for their size in this transaction (their
     * instance, the value's length) */
    struct pub_refusal {
        int64_t id;
        size_t len;
    } *refused;
    size_t nrefused, caprefused;
} pub_dlv_t;

/* An instance whose result Kafka refused: produced again cut (level 1:
 * without its output; 2: without output and error; 3: given up). */
struct pub_cut {
    int64_t id;
    int level;
};

typedef struct publisher {
    int holder; /* holds the advisory lock lock_name ... */
    int pg_pid; /* ... in this PostgreSQL session (of lockpg) */
    /* The lock's own connection, used for nothing else; a thread runs a
     * statement on it every PUB_PING_MS while the publisher's thread turns
     * (pub_main) at least every PUB_HUNG_MS, so its idle_session_timeout
     * ends it only when the process is stopped or hung, never during a
     * Kafka wait. The thread sets lock_lost when the session is gone. */
    ax_pg_t *lockpg;
    pthread_t ping_thr;
    int ping_started;
    pthread_mutex_t lock_mu;
    atomic_int lock_lost, ping_stop, ping_holder;
    atomic_llong loop_ms; /* the publisher thread's last turn (ax_mono_ms) */
    int need_recover;     /* read the topic to its end before producing */
    /* the recovery in progress (read in slices, one per thread turn):
     * its reader, per partition the position reached (saved with every
     * chunk marked) and whether its end was reached, the instances found
     * since the last save */
    rd_kafka_t *rrk;
    int rparts, rneof;
    int64_t *rpos;
    char *reof;
    int64_t *rids;
    size_t nrids, caprids;
    int64_t rfound, rmarked, rsaved_ms;
    struct pub_cut *cuts;
    size_t ncuts, capcuts;
    int64_t next_try_ms, next_init_ms;
    rd_kafka_t *txp; /* transactional producer (txn_id), while the holder */
    pub_dlv_t dlv;
    char lock_name[300], txn_id[300];
    int64_t part_seq; /* records produced (their chunks: produce.partition.chunk) */
    /* Results carried: the whole batch rows (ax_result_batch) this process
     * finished while it was the publisher, as the finish statement returned
     * them, so the next transaction need not read them back (publish.c). */
    struct pub_carry {
        int64_t batch;
        ax_outbox_row_t *rows;
        size_t n;
        int64_t gen; /* the carry's generation it was handed over in */
    } *carry;
    size_t ncarry, capcarry;
    /* The publisher's thread (pub_main) with its own PostgreSQL connection
     * ("ax-callback results publisher"): the lock, the producer, the
     * recovery, the cuts and the carry above are its alone. The event loop
     * only hands over (the inbox, under mu), signals, and reads the
     * atomics below. */
    ax_pg_t *pg;
    pthread_t thr;
    int thr_started, mu_inited;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int wake;                /* under mu: publish now */
    struct pub_carry *inbox; /* under mu: batches the loop finished, to carry */
    size_t ninbox, capinbox;
    atomic_int stop;
    atomic_int carry_ok; /* the loop may carry: holder, producer, recovered */
    atomic_llong gen;    /* bumped whenever the carry is dropped */
    atomic_llong carry_rows, carry_bytes; /* carried, and in the inbox */
    /* the publish window (callback.publish.interval.ms): when a transaction
     * was last begun, and the results ended since */
    atomic_llong last_pub_ms, unpublished;
    atomic_llong carried, read; /* results produced from memory / read from the outbox */
} publisher_t;

/* ---- the service ------------------------------------------------------------------- */

/* The successful size probes of the batch at hand (decide.c finds them,
 * flows.c splits their parents in the batch's transaction). */
typedef struct probes {
    ax_outcome_probe_t *v;
    size_t *msg; /* the message each came from (to dead-letter it) */
    size_t n, cap;
} probes_t;

typedef struct callback {
    ax_svc_t svc;
    int64_t finished, stale, retried;
    atomic_llong published; /* by the publisher's thread */
    probes_t probes;
    publisher_t pub;
    struct cmetrics *metrics; /* metrics.c; NULL when metrics are off */
} callback_t;

/* The error class the store's statements and the retry rules know an
 * attempt by: the kind on the wire, mapped to the class its earlier
 * string signal used. */
static inline const char *cb_error_class(const ax_attempt_t *a) {
    return a->kind == AX_ATTEMPT_BACKLOG_FULL ? "backlog_full" : a->error_class;
}

/* consume.c: the batch function of ax.callback (ax_svc_consume). */
int cb_on_attempt_batch(ax_svc_t *svc, rd_kafka_message_t **msgs, size_t n, void *arg);

/* decide.c. Successful size probes among as[0..n) (not skip[]): their
 * parent's shard count into cb->probes, is_probe[i] set; a probe that
 * printed no number becomes a failure. */
int cb_find_probes(callback_t *cb, ax_attempt_t *as, const char *skip, char *is_probe, size_t n,
                   char *err, size_t errlen);
/* Which failed results are retried, and after how long (retry_ms[i] >= 0;
 * -1 final); a final failure gets the reason appended to its error. */
int cb_decide_retries(callback_t *cb, ax_attempt_t *as, const char *skip, size_t n,
                      int64_t *retry_ms, char *err, size_t errlen);

/* finish.c. The store's form of result `a` (retry_ms < 0: final). */
ax_outcome_in_t cb_outcome_in(const ax_attempt_t *a, int64_t retry_ms);
/* Persist in[0..n) and the pending probes in one transaction. Returns the
 * number of results that ended an attempt (finished or rescheduled), or
 * < 0 (rolled back; AX_ERR_INVALID / AX_ERR_CONFLICT: bad data). Adds the
 * retries to *retried; alerts circuits that opened. */
int cb_finish(callback_t *cb, const ax_outcome_in_t *in, size_t n, int64_t *retried, char *err,
              size_t errlen);

/* flows.c: inside the batch's transaction, what its ended instances
 * advance (shards, the pending probes, flow runs). */
int cb_advance(callback_t *cb, const ax_outcome_finished_t *f, char *err, size_t errlen);

/* publish.c. cb_pub_init sets the publisher up (its connections, the lock
 * keeper), cb_pub_start starts its thread once the service consumes,
 * cb_pub_stop asks the thread to stop (SIGTERM), cb_pub_fini (after any
 * of them, or none) stops it, waits for it and frees everything. */
int cb_pub_init(callback_t *cb, char *err, size_t errlen);
int cb_pub_start(callback_t *cb, char *err, size_t errlen);
void cb_pub_stop(callback_t *cb);
void cb_pub_fini(callback_t *cb);
/* After a durable batch that ended `ended` instances: the publisher's
 * thread woken when the window (callback.publish.interval.ms) is over or a
 * full transaction is waiting, else it publishes at the window's end. */
void cb_pub_after_batch(callback_t *cb, int64_t ended);
/* 1 when the results of the next finish should be carried: this process
 * is the publisher, recovered, with room for them. */
int cb_pub_carrying(const callback_t *cb);
/* After the finish's commit: hand f's results (whole batch rows) over to
 * the publisher's memory. */
void cb_pub_carry(callback_t *cb, ax_outcome_finished_t *f);

/* recover.c. One slice of the recovery: 1 when the topic was read to its
 * end (need_recover cleared), 0 to go on at the next turn, < 0 on failure. */
int cb_recover_step(callback_t *cb);
void cb_recover_end(publisher_t *pb);

/* alerts.c */
void cb_alert(callback_t *cb, const char *kind, const char *job, const char *text);
void cb_alert_circuits(callback_t *cb, const ax_outcome_opened_t *v, size_t n);

/* metrics.c (docs/METRICS.md; each a no-op when metrics are off): the
 * results in[0..n) whose transaction committed with *f; the pending
 * retries the last retry decision read. */
void cm_init(callback_t *cb);
void cm_fini(callback_t *cb);
void cm_finished(callback_t *cb, const ax_outcome_in_t *in, size_t n,
                 const ax_outcome_finished_t *f);
void cm_budget_in_use(callback_t *cb, int64_t pending);

#endif
