/*
 * ax-trigger internals shared by its files, each calling only the ones
 * listed below it (no cycles):
 *   main.c     wiring: configuration, timers, the leader's hooks
 *   ingest.c   submissions (ax.submit) -> SCHEDULED instances
 *   scan.c     the due scan: due SCHEDULED instances -> dispatch
 *   sweep.c    the lease sweep: lost executors' instances -> TIMEOUT
 *   retention.c  the retention sweep: old finished instances and ledger rows deleted
 *   lag.c      consumer lag per lane, the release plan (backpressure)
 *   backlog.c  backlog caps: instances beyond a job's cap -> FAILED
 *   sched*.c   schedules in memory on the timing wheel, fire decisions and
 *              the ledger, job reloads on NOTIFY (sched_int.h says which
 *              file holds what)
 *   dispatch.c producing dispatch records, settling or undoing their marks
 *   hold.c     instances not produced, with their reason
 *   leader.c   leader lease with epoch, transactional producer, the clock;
 *              calls the files above only through t->hooks
 */
#ifndef AX_TRIGGER_H
#define AX_TRIGGER_H

#include <pthread.h>
#include <stdint.h>

#include "ax/codec.h"
#include "ax/lane.h"
#include "ax/schedule.h"
#include "ax/service.h"
#include "ax/store_dispatch.h"
#include "ax/wheel.h"

typedef struct sjob sjob_t;

typedef struct fire {
    int64_t job_id;
    int64_t nominal_ms;
    const char *decision; /* ax_fire_decision */
    char *detail;         /* malloc'd or NULL */
    int64_t wait_for;     /* overlap=queue: the instance it waits for, else 0 */
} fire_t;

typedef struct trigger {
    /* the ingest's own PostgreSQL connection (ingest.c): its one statement
     * commits on its own and stays on its cached generic plan, so the
     * loop's connection never switches plan_cache_mode for it */
    ax_pg_t *ingest_pg;
    int64_t ingest_held; /* rows of the batch the ingest left to the due scan */
    ax_svc_t svc;
    struct event *ev_scan, *ev_sweep, *ev_lead, *ev_wheel, *ev_reload;
    unsigned scan_failures;
    int64_t submitted, duplicates, dispatched, swept, fired, skipped;
    /* the leader's Kafka transactions: committed, and ended without their
     * records (a failed or fenced commit, an abort after a failed produce,
     * the next window's begun ahead aborted with a failed commit, one open
     * when the producers are destroyed: leadership lost or given up) */
    int64_t txns_committed, txns_aborted;

    /* the retention sweep (retention.c): the loop's timer hands the lease
     * key to a thread of its own, which deletes on its own connection */
    struct event *ev_retention;
    struct retention *ret;

    /* leadership (leader.c) */
    int leader;
    int64_t epoch;
    char holder[200];
    char role[300];
    _Atomic int64_t lease_until_mono; /* stop dispatching at this CLOCK_MONOTONIC ms */
    /* the lease thread (leader.c): renews on its own connection while the
     * loop comes round; mu guards the fields below it */
    pthread_t lease_thr;
    int lease_thr_started;
    ax_pg_t *lease_pg;
    pthread_mutex_t lease_mu;
    pthread_cond_t lease_cv;
    int lease_stop;
    int64_t lease_epoch;      /* the epoch the thread renews; 0: none */
    int64_t lease_renewed_mono;
    char lease_lost[256];     /* why the thread gave the lease up ("" none) */
    int64_t clk_pg, clk_m0, clk_m1; /* PostgreSQL's clock read by the last renewal */
    _Atomic int64_t loop_beat_mono;  /* the loop's heartbeat (every 100 ms) last ran */
    struct event *ev_beat;
    int64_t last_tick_mono;
    int64_t acquire_after_mono; /* after stepping down: let a standby take over */
    rd_kafka_t *txp;          /* the transactional producer of the open (or next)
                               * transaction, while leader: one of txps */
    rd_kafka_t *txps[2];      /* transactional ids <role> and <role>.1 (dispatch.producers;
                               * txps[1] NULL: one producer) */
    int txn_turn;             /* txps[txn_turn] is txp */
    int txn_open;             /* txp's transaction begun and not yet ended */
    int txn_next_open;        /* the other producer's transaction begun ahead
                               * (lead_txn_begin_next), within a window's flush */
    int txn_failures;         /* Kafka transactions not committed in a row */
    /* clock: now = mono + clock_base, synchronised with PostgreSQL */
    int64_t clock_base;
    int64_t wall_minus_mono;  /* to notice local wall-clock jumps */
    int64_t pg_up_since;      /* CLOCK_MONOTONIC ms of the last (re)connection */

    /* schedules (sched.c) */
    ax_wheel_t *wheel;
    sjob_t **buckets;
    size_t nbuckets, njobs, nfixed_delay;
    fire_t *fires;
    size_t nfires, capfires;
    int64_t *reload_ids;      /* from NOTIFY ax_job */
    size_t nreload, capreload;
    int reload_all;
    int listening;
    unsigned flush_failures;

    /* priority lanes (lag.c): the executor group's lag per lane, the
     * hysteresis state and the release plan derived from it */
    ax_lane_t lanes[AX_PRIORITIES];
    int64_t lane_min_age_ms[AX_PRIORITIES];
    int lane_target[AX_PRIORITIES];
    int64_t deferred[AX_PRIORITIES]; /* deferred instances, last count */
    int64_t mark_since_ms[AX_PRIORITIES]; /* scan.c mark_deferred */
    int64_t deferred_fires;   /* scheduled fires recorded as deferred */
    int64_t lane_sent[AX_PRIORITIES]; /* produced per lane since the last lag sample */
    int64_t lag_samples[2];   /* lag samples taken up: at their interval, on demand */
    int64_t part_seq; /* dispatch records produced without a routing field (their chunks) */
    int lag_ok;               /* the lag monitor's samples are current */
    int room_starved;         /* the last due scan left due instances for want of lane room */
    int64_t coalesced;        /* timers moved onto the coarse tick */
    int64_t fire_rate;        /* fires per second over the last second */
    int64_t rate_fired, rate_at_ms;
    struct lagmon *lag;
    struct holds *holds;      /* hold.c */
    /* dispatch records Kafka refused (delivery reports of the last batch) */
    struct refusal { int64_t id; size_t len; rd_kafka_resp_err_t err; } *refused;
    size_t nrefused, caprefused;
    size_t nfailed_other; /* the last batch's reports of other errors */
    /* dispatch.c: the leader's Kafka transaction kept open across ingest
     * batches for dispatch.transaction.ms */
    struct dispatch_win {
        int open;           /* begun by an ingest batch, not committed */
        int64_t until_mono; /* committed by the first batch after this, or ev */
        int64_t *ids;       /* what it carries: settled (or undone) at its commit */
        size_t n, cap;
        struct event *ev;   /* commits it when no batch comes */
        /* the partitions its records went to (from their delivery reports,
         * served in the commit's flush): the next window's primers go
         * there (dispatch.prime) */
        struct win_part {
            char *topic;
            int32_t partition;
        } *parts;
        size_t nparts, capparts;
    } win;

    /* tlead (leader side): what leader.c calls above itself, set by main.c,
     * so leader.c depends on no file of the trigger */
    struct lead_hooks {
        void (*on_leader)(struct trigger *t);   /* became leader (recover, schedules, scan) */
        void (*on_follower)(struct trigger *t); /* leadership lost: drop the schedules */
        void (*on_clock_jump)(struct trigger *t, const char *why); /* rebuild the schedule */
    } hooks;
    struct event *ev_lag, *ev_hold;
    struct tmetrics *metrics; /* metrics.c; NULL when metrics are off */
} trigger_t;

/* The lane an instance of priority prio is produced on now. */
static inline int lane_of_prio(const trigger_t *t, int prio) {
    if (prio < 0 || prio >= AX_PRIORITIES)
        prio = AX_PRIORITY_DEFAULT;
    return t->lane_target[prio];
}
#define lane_of(t, d) lane_of_prio((t), (int)(d)->priority)

/* leader.c */
void lead_init(trigger_t *t);
void lead_tick(trigger_t *t);                       /* renew, or try to take over */
int64_t lead_now(const trigger_t *t);               /* the trigger's clock, epoch ms */
int lead_active(trigger_t *t);                      /* leader and lease not run out */
void lead_lost(trigger_t *t, const char *why);
/* Re-read the lease row FOR SHARE inside the caller's transaction:
 * 0 still leader, AX_ERR_CONFLICT fenced (leadership dropped), <0 error. */
int lead_check_in_tx(trigger_t *t, char *err, size_t errlen);
/* A statement found the lease no longer ours (its epoch taken over):
 * leadership lost, as lead_check_in_tx's caller does on AX_ERR_CONFLICT. */
void lead_fenced(trigger_t *t);
/* Produce in one Kafka transaction: begin, then the caller produces with
 * t->txp, then lead_txn_commit — or, when a produce failed, lead_txn_abort.
 * Every transaction begun ends committed or aborted: a failed commit
 * aborts it. A transaction that can be neither committed nor aborted (or a
 * fatal/fenced producer, or LEAD_TXN_FAILURES failed transactions in a
 * row) makes the leader give up leadership (lead_give_up). */
#define LEAD_TXN_FAILURES 5
int lead_txn_begin(trigger_t *t);
int lead_txn_commit(trigger_t *t);
int lead_txn_abort(trigger_t *t, const char *why); /* AX_ERR_IO aborted, <0 gave up */
/* With two producers (dispatch.producers) and txp's transaction open:
 * begin the next transaction on the other one now, before txp's commit
 * (*rk: its producer, for the next window's primers); 0; 1 when it does
 * not apply (one producer, no open transaction, one begun ahead already,
 * not leading); or <0, not begun: AX_ERR_CONFLICT from the broker (fenced
 * or fatal: leadership given up), another error (the ordinary
 * lead_txn_begin after the commit tries that producer again).
 * Within one window's flush, ended by lead_txn_adopt_next (after txp's
 * commit: the other producer's transaction becomes txp's) or
 * lead_txn_drop_next (aborted, within the lease: the commit failed; the
 * next lead_txn_begin is on the producer that failed to commit, whose
 * transaction ended first). */
int lead_txn_begin_next(trigger_t *t, rd_kafka_t **rk);
void lead_txn_adopt_next(trigger_t *t);
void lead_txn_drop_next(trigger_t *t);
/* Stop leading because the leader cannot use its Kafka producer: drop
 * leadership, destroy the producer, release the lease so a standby takes
 * over (this trigger does not try to take it for trigger.lease.ms / 2). */
void lead_give_up(trigger_t *t, const char *why);
/* Destroy the leader's transactional producers (txps, txp). */
void lead_producers_destroy(trigger_t *t);
void lead_release(trigger_t *t);
/* Start / stop the lease thread. */
int lead_start(trigger_t *t);
void lead_fini(trigger_t *t);
/* Notice a new PostgreSQL session (LISTEN again, reload jobs, hold off the
 * lease sweep for trigger.sweep.grace.ms). */
void lead_note_reconnect(trigger_t *t);
/* End a leader's PostgreSQL transaction (begun with lead_check_in_tx):
 * commit if rc == 0, else roll back and drop leadership when fenced or log
 * "what: err". Returns rc, or the commit's error. */
int lead_tx_finish(trigger_t *t, int rc, const char *what, char *err, size_t errlen);
/* Produce an attempt, keyed by its instance, to the callback topic through
 * the leader's open Kafka transaction. */
int lead_produce_attempt(trigger_t *t, const ax_attempt_t *a, char *err, size_t errlen);

/* sched.c */
int sched_init(trigger_t *t);
void sched_destroy(trigger_t *t);
void sched_on_leader(trigger_t *t);     /* load every job, arm the wheel */
void sched_on_follower(trigger_t *t);   /* drop everything */
void sched_rebuild(trigger_t *t, const char *why);
void sched_poll_notify(trigger_t *t);
void sched_tick(trigger_t *t);          /* fixed-delay waits, flush retries */

/* The due scan runs in ms (timer ev_scan; scan.c). */
static inline void arm_scan(trigger_t *t, int64_t ms) {
    struct timeval tv = AX_TV_MS(ms < 0 ? 0 : ms);
    event_add(t->ev_scan, &tv);
}

/* dispatch.c: produce rows marked dispatched (with a dispatch_batch row,
 * by the statement that returned them; rows with .hold are skipped)
 * in one Kafka transaction: on commit the pending rows are settled; on
 * failure the instances are made undispatched again (the due scan retries
 * them). Returns rows produced, or <0. */
int dispatch_produce(trigger_t *t, const ax_dispatch_rows_t *rows);
/* Dispatch rows whose dispatched marks are committed, as dispatch_produce
 * — with `window` (the ingest) into the transaction kept open for
 * dispatch.transaction.ms (dispatch_win_flush commits it), when that is
 * not 0. *produced (may be NULL): dispatch_produce's result. */
void dispatch_committed(trigger_t *t, const ax_dispatch_rows_t *rows, int window,
                        int *produced);
/* Commit the open PostgreSQL transaction whose statement marked rows
 * dispatched (the due scan's), then dispatch_committed outside the window.
 * 0, or the commit's error (err): the caller rolls back; nothing was
 * dispatched. */
int dispatch_commit_with(trigger_t *t, const ax_dispatch_rows_t *rows, int *produced, char *err,
                         size_t errlen);
/* Commit the ingest's open Kafka transaction, if any, and settle what it
 * carried (undo it if the commit failed): before another transaction is
 * begun, when its window is over, when the leader stops. <0: not
 * committed. */
int dispatch_win_flush(trigger_t *t);
/* Leadership lost: the producer is gone with the transaction; what it
 * carried is recovered by the next leader (recover_pending). */
void dispatch_win_forget(trigger_t *t);
/* Make undispatched again what a failed or abandoned Kafka transaction
 * left pending (dispatch_batch): of older epochs, or older than a minute. */
void recover_pending(trigger_t *t);

/* ingest.c */
int ingest_batch(ax_svc_t *svc, rd_kafka_message_t **msgs, size_t n, void *arg);

/* scan.c */
void scan_on_timer(evutil_socket_t fd, short what, void *arg);

/* sweep.c */
void sweep_on_timer(evutil_socket_t fd, short what, void *arg);

/* retention.c: retention_start before the loop runs (-1: not started, the
 * reason logged), retention_stop after it (cancels a statement under way,
 * then joins the thread) */
int retention_start(trigger_t *t);
void retention_stop(trigger_t *t);
void retention_on_timer(evutil_socket_t fd, short what, void *arg);

/* backlog.c: fail the newest SCHEDULED instances beyond their job's cap */
void backlog_enforce(trigger_t *t);

/* hold.c: instances not produced, with their reason (instance_hold) */
typedef struct hold {
    int64_t id;
    int alert;        /* raise the alert `held` (0: a short wait, logged only) */
    char job[200];
    char topic[300];  /* "" = not released by a topic appearing */
    char reason[600];
} hold_t;
typedef struct hold_list {
    hold_t *v;
    size_t n, cap;
} hold_list_t;
/* dispatch.c: one dispatch batch's Kafka transaction */
typedef struct dispatch_txn {
    int64_t *ids;      /* the rows not held */
    size_t n;
    int open;          /* begun and produced, not committed */
    int window;        /* into the ingest's transaction (dispatch.transaction.ms) */
    int produced;      /* rows produced, or <0 */
    hold_list_t holds; /* rows that could not be produced */
} dispatch_txn_t;
int hold_start(trigger_t *t);
void hold_stop(trigger_t *t);
/* Whether the topic exists as the last listing saw it: 1 yes, 0 no, -1 no
 * listing yet. Never blocks on Kafka. */
int hold_topic_known(trigger_t *t, const char *topic);
void hold_add(hold_list_t *l, int64_t id, const char *job, const char *topic, int alert,
              const char *fmt, ...) __attribute__((format(printf, 6, 7)));
void hold_list_free(hold_list_t *l);
/* Take the npending instances pending[] out of their pending batches and
 * record the holds of l (their instances keep dispatched_at); log and alert. */
int hold_record(trigger_t *t, const int64_t *pending, size_t npending, const hold_list_t *l,
                char *err, size_t errlen);
void hold_tick(trigger_t *t); /* release holds whose topic exists now */

/* lag.c */
int lag_start(trigger_t *t);
void lag_stop(trigger_t *t);
/* Take up the monitor's last sample; about once a second store the lane
 * status and enforce backlog caps. Returns 1 when the due scan should run
 * now (the plan changed, or aged instances became releasable). */
int lag_tick(trigger_t *t);
/* The room of a lane: how many more it may be sent before the next lag
 * sample; unlimited for P0 and while the lag monitor is not working. */
int64_t lane_room(const trigger_t *t, int lane);
/* Per priority: 1 if an instance due now may be produced by the ingest
 * statement itself (its lane flows, nothing of it deferred, room for a
 * batch). */
void lane_direct(const trigger_t *t, int direct[AX_PRIORITIES]);
/* After a dispatch: a lane whose room, counted from the last sample, is
 * about to close for what was sent since asks the monitor for a sample
 * now (at most one per LAG_NUDGE_MS), instead of at its next interval. */
void lag_note_sent(trigger_t *t);

/* metrics.c (docs/METRICS.md): register on the service's registry (no-op
 * when metrics are off); the decisions f[0..n) just recorded (`created`
 * instances written for them); a change of leadership. */
void tm_init(trigger_t *t);
void tm_fini(trigger_t *t);
void tm_fires(trigger_t *t, const fire_t *f, size_t n, size_t created);
void tm_leadership(trigger_t *t);

#endif
