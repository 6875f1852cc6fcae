/*
 * leader.c — one ax-trigger leads at a time.
 *
 * The lease is a row of ax_leader (role = <topic.prefix>trigger) holding the
 * holder, an epoch and an expiry in PostgreSQL's clock. A standby takes the
 * row only once it has expired, and taking it increments the epoch. The
 * leader renews every lease/3 from a thread of its own with its own
 * PostgreSQL connection (lease_main), so no work of the event loop can let
 * the lease lapse; it stops dispatching at once when a renewal fails and,
 * at the latest, when its lease would have run out as measured on
 * CLOCK_MONOTONIC from before the renewal was sent (lease_until_mono, read
 * by the loop before every Kafka commit and dispatch transaction). The
 * thread renews only while the loop comes round: a loop whose 100 ms
 * heartbeat (on_beat) has not run for trigger.starve.ms (a statement or a
 * batch held it) is starved, and the leader steps down — the thread gives the lease
 * back (a standby takes over within a second) and the loop, once it runs,
 * drops leadership and waits a lease before it competes again. Every dispatch
 * transaction re-reads the row FOR SHARE with the leader's epoch (a standby's
 * takeover waits for it), and Kafka output goes through one transactional.id
 * shared by all triggers, so the new leader's init_transactions fences a
 * stale leader's producer.
 *
 * Time: the trigger's clock is PostgreSQL's now() (read at every renewal)
 * carried forward with CLOCK_MONOTONIC. A local wall-clock jump changes
 * nothing; a jump of PostgreSQL's clock beyond trigger.clock.jump.ms (or of
 * the local wall clock, which is logged) rebuilds the schedule from the
 * ledger.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ax/common.h"
#include "ax/log.h"
#include "ax/store.h"
#include "ax/store_leader.h"
#include "trigger.h"

/* The loop stops using a lease renewed (or taken) at mono0 at this
 * CLOCK_MONOTONIC ms: 5% margin for the two clocks' rates, counted from
 * before the statement was sent. */
static int64_t lease_until(int64_t mono0, int64_t lease_ms) { return mono0 + lease_ms * 95 / 100; }

/* What is left of the lease, less reserve_ms, as a Kafka call's timeout:
 * at least a second (a call needs one round trip), at most max_ms. */
static int lease_budget(const trigger_t *t, int64_t reserve_ms, int max_ms) {
    int64_t left = t->lease_until_mono - ax_mono_ms() - reserve_ms;
    return left < 1000 ? 1000 : left > max_ms ? max_ms : (int)left;
}

int64_t lead_now(const trigger_t *t) { return ax_mono_ms() + t->clock_base; }

int lead_active(trigger_t *t) {
    if (!t->leader)
        return 0;
    if (ax_mono_ms() >= t->lease_until_mono) {
        char why[256];
        pthread_mutex_lock(&t->lease_mu);
        snprintf(why, sizeof why, "%s",
                 *t->lease_lost ? t->lease_lost : "lease ran out before it could be renewed");
        pthread_mutex_unlock(&t->lease_mu);
        lead_lost(t, why);
        return 0;
    }
    return 1;
}

/* The lease thread renews nothing from now on. */
static void lease_forget(trigger_t *t) {
    pthread_mutex_lock(&t->lease_mu);
    t->lease_epoch = 0;
    pthread_mutex_unlock(&t->lease_mu);
}

void lead_lost(trigger_t *t, const char *why) {
    if (!t->leader)
        return;
    ax_warn("leadership lost (epoch %lld): %s; dispatching stopped", (long long)t->epoch, why);
    pthread_mutex_lock(&t->lease_mu);
    t->lease_epoch = 0; /* the thread renews nothing from now on */
    /* the thread stepped down for a starved loop: a standby goes first */
    if (strncmp(t->lease_lost, "starved", 7) == 0 || strncmp(why, "starved", 7) == 0)
        t->acquire_after_mono = ax_mono_ms() + t->svc.conf.trigger_lease_ms;
    pthread_mutex_unlock(&t->lease_mu);
    t->lease_until_mono = 0;
    t->leader = 0;
    tm_leadership(t);
    lead_producers_destroy(t);
    if (t->hooks.on_follower)
        t->hooks.on_follower(t);
}

/* Adopt PostgreSQL's clock; `pg_ms` was read between mono0 and mono1. */
static void clock_sync(trigger_t *t, int64_t pg_ms, int64_t mono0, int64_t mono1) {
    int64_t mid = mono0 + (mono1 - mono0) / 2;
    int64_t base = pg_ms - mid;
    int64_t drift = base - t->clock_base;
    int64_t wmm = ax_now_ms() - ax_mono_ms();
    int64_t wall_jump = wmm - t->wall_minus_mono;
    t->wall_minus_mono = wmm;
    int first = t->clock_base == 0;
    if (!first && llabs(wall_jump) > t->svc.conf.trigger_clock_jump_ms)
        ax_warn("local wall clock jumped by %+lld ms; the schedule keeps PostgreSQL's clock",
                (long long)wall_jump);
    if (first || llabs(drift) > 100 || (mono1 - mono0) < 20)
        t->clock_base = base;
    if (!first && llabs(drift) > t->svc.conf.trigger_clock_jump_ms) {
        char why[160];
        snprintf(why, sizeof why, "PostgreSQL's clock jumped by %+lld ms", (long long)drift);
        if (t->hooks.on_clock_jump)
            t->hooks.on_clock_jump(t, why);
    }
}

void lead_init(trigger_t *t) {
    char rnd[17];
    ax_random_hex(rnd, 8);
    snprintf(t->holder, sizeof t->holder, "%s/%s", t->svc.worker_id, rnd);
    char buf[256];
    snprintf(t->role, sizeof t->role, "%s", ax_conf_topic(&t->svc.conf, "trigger", buf, sizeof buf));
    t->wall_minus_mono = ax_now_ms() - ax_mono_ms();
    pthread_mutex_init(&t->lease_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->lease_cv, &ca);
    pthread_condattr_destroy(&ca);
    t->loop_beat_mono = ax_mono_ms();
}

/* ---- the lease thread ------------------------------------------------------ */

static void release_on(trigger_t *t, ax_pg_t *pg, int64_t epoch) {
    char err[256];
    ax_lease_key_t k = {t->role, t->holder, epoch};
    if (ax_store_leader_release(pg, &k, err, sizeof err) == 0)
        ax_info("lease released");
    else
        ax_warn("lease release: %s (it runs out by itself)", err);
}

/* The loop did not come round for `idle` ms (the thread, without the
 * mutex). */
static void lease_starved(trigger_t *t, int64_t e, int64_t idle) {
    ax_svc_t *svc = &t->svc;
    /* The loop has not come round: it cannot use the lease, so it must not
     * keep it. Nothing more of it may be committed from now on. */
    pthread_mutex_lock(&t->lease_mu);
    int ours = t->lease_epoch == e;
    if (ours) {
        t->lease_until_mono = 0;
        t->lease_epoch = 0;
        snprintf(t->lease_lost, sizeof t->lease_lost,
                 "starved: the event loop did not come round for %lld ms "
                 "(trigger.starve.ms %lld); stepped down",
                 (long long)idle, (long long)svc->conf.trigger_starve_ms);
    }
    pthread_mutex_unlock(&t->lease_mu);
    if (!ours)
        return;
    ax_warn("leader (epoch %lld) starved: the event loop did not come round for %lld ms "
            "(trigger.starve.ms %lld); giving the lease back", (long long)e, (long long)idle,
            (long long)svc->conf.trigger_starve_ms);
    release_on(t, t->lease_pg, e);
}

/* One renewal of epoch e (the thread, without the mutex). */
static void lease_renew(trigger_t *t, int64_t e) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    /* (re)connect first: m0..m1 must time the statement alone, it dates
     * PostgreSQL's clock for clock_sync */
    int rc = ax_pg_ensure(t->lease_pg, err, sizeof err);
    int64_t m0 = ax_mono_ms(), pg_ms = 0;
    ax_lease_key_t k = {t->role, t->holder, e};
    if (rc == 0)
        rc = ax_store_leader_renew(t->lease_pg, &k, svc->conf.trigger_lease_ms, &pg_ms, err,
                                   sizeof err);
    int64_t m1 = ax_mono_ms(), x0 = m0, x1 = m1;
    if (rc == 0) /* PostgreSQL's clock is dated by the execution alone */
        ax_store_last_exec(&x0, &x1);
    pthread_mutex_lock(&t->lease_mu);
    if (rc == AX_ERR_NOTFOUND) {
        if (t->lease_epoch == e) {
            t->lease_until_mono = 0;
            t->lease_epoch = 0;
            snprintf(t->lease_lost, sizeof t->lease_lost, "the lease expired or was taken over");
        }
    } else if (rc < 0) {
        ax_warn("lease renewal: %s", err);
        /* again soon; lease_until_mono stays, the loop stops at it */
        t->lease_renewed_mono = m1 - svc->conf.trigger_lease_ms / 3 + 500;
    } else if (t->lease_epoch == e) {
        t->lease_until_mono = lease_until(m0, svc->conf.trigger_lease_ms);
        t->lease_renewed_mono = m0;
        t->clk_pg = pg_ms;
        t->clk_m0 = x0;
        t->clk_m1 = x1;
    }
    pthread_mutex_unlock(&t->lease_mu);
}

static void *lease_main(void *arg) {
    trigger_t *t = arg;
    int64_t period = t->svc.conf.trigger_lease_ms / 3;
    pthread_mutex_lock(&t->lease_mu);
    while (!t->lease_stop) {
        int64_t now = ax_mono_ms(), due = t->lease_renewed_mono + period;
        int64_t e = t->lease_epoch, idle = now - t->loop_beat_mono;
        if (e && (idle > t->svc.conf.trigger_starve_ms || now >= due)) {
            pthread_mutex_unlock(&t->lease_mu);
            if (idle > t->svc.conf.trigger_starve_ms)
                lease_starved(t, e, idle);
            else
                lease_renew(t, e);
            pthread_mutex_lock(&t->lease_mu);
            continue;
        }
        /* look at the loop's heartbeat every 100 ms */
        int64_t until = e ? (due < now + 100 ? due : now + 100) : now + 1000;
        struct timespec ts = {until / 1000, (until % 1000) * 1000000L};
        pthread_cond_timedwait(&t->lease_cv, &t->lease_mu, &ts);
    }
    pthread_mutex_unlock(&t->lease_mu);
    return NULL;
}

/* The loop's heartbeat for the lease thread: every 100 ms, no I/O. */
static void on_beat(evutil_socket_t fd, short what, void *arg) {
    trigger_t *t = arg;
    t->loop_beat_mono = ax_mono_ms();
}

int lead_start(trigger_t *t) {
    char err[512];
    t->ev_beat = event_new(t->svc.base, -1, EV_PERSIST, on_beat, t);
    struct timeval tv = AX_TV_MS(100);
    if (!t->ev_beat || event_add(t->ev_beat, &tv) < 0) {
        ax_error("cannot arm the loop's heartbeat");
        return -1;
    }
    t->lease_pg = ax_pg_new(&t->svc.conf, "ax-trigger-lease", err, sizeof err);
    if (!t->lease_pg) {
        ax_error("lease connection: %s", err);
        return -1;
    }
    if (pthread_create(&t->lease_thr, NULL, lease_main, t) != 0) {
        ax_error("cannot start the lease thread");
        return -1;
    }
    t->lease_thr_started = 1;
    return 0;
}

void lead_fini(trigger_t *t) {
    if (t->lease_thr_started) {
        pthread_mutex_lock(&t->lease_mu);
        t->lease_stop = 1;
        pthread_cond_signal(&t->lease_cv);
        pthread_mutex_unlock(&t->lease_mu);
        pthread_join(t->lease_thr, NULL);
        t->lease_thr_started = 0;
    }
    ax_pg_destroy(t->lease_pg);
    t->lease_pg = NULL;
    char err[512];
    if (t->svc.pg && t->role[0] && ax_store_leader_leave(t->svc.pg, t->role, t->holder, err,
                                                         sizeof err) < 0)
        ax_debug("member row not deleted: %s (deleted after an hour of silence)", err);
    if (t->ev_beat)
        event_free(t->ev_beat);
    t->ev_beat = NULL;
}

void lead_producers_destroy(trigger_t *t) {
    /* what is still open ends with its producer (the broker aborts it when
     * a new producer of the id initialises, or at transaction.timeout.ms) */
    t->txns_aborted += t->txn_open + t->txn_next_open;
    for (int k = 0; k < 2; k++)
        if (t->txps[k])
            rd_kafka_destroy(t->txps[k]);
    t->txps[0] = t->txps[1] = t->txp = NULL;
    t->txn_turn = 0;
    t->txn_open = 0;
    t->txn_next_open = 0;
}

/* The leader's transactional producers: <role>, and with
 * dispatch.producers 2 and a dispatch window (dispatch.transaction.ms > 0)
 * also <role>.1, each initialised (so an older leader's of that id
 * fenced) before anything is produced; 0 or <0 (err: none is kept). The
 * second is initialised within what is left of the lease (the lease
 * thread renews nothing until this returns), and one that cannot be (an
 * ACL that names the first id only, say) leaves the leader with the first
 * alone, warned, rather than without a leader. No linger: a dispatch batch
 * is produced in one go, once its marks are committed, and executors read
 * it uncommitted (dispatch.transaction.ms): every millisecond here is on
 * the fire-to-start path. */
static int producers_new(trigger_t *t, char *err, size_t errlen) {
    ax_svc_t *svc = &t->svc;
    char txn_id[320], cid[320];
    snprintf(cid, sizeof cid, "%s-leader", svc->worker_id);
    t->txps[0] = ax_kafka_txn_producer_new(&svc->conf, cid, t->role, 0, 30000, err, errlen);
    if (!t->txps[0])
        return AX_ERR_IO;
    t->txn_turn = 0;
    t->txn_open = 0;
    t->txn_next_open = 0;
    t->txp = t->txps[0];
    if (svc->conf.dispatch_producers < 2 || svc->conf.dispatch_transaction_ms <= 0)
        return 0;
    char err1[512];
    snprintf(txn_id, sizeof txn_id, "%s.1", t->role);
    snprintf(cid, sizeof cid, "%s-leader.1", svc->worker_id);
    t->txps[1] = ax_kafka_txn_producer_new(&svc->conf, cid, txn_id, 0,
                                           lease_budget(t, svc->conf.trigger_lease_ms / 4, 30000),
                                           err1, sizeof err1);
    if (!t->txps[1])
        ax_warn("leader: the second transactional producer (%s): %s; dispatching through "
                "%s alone (dispatch.producers)", txn_id, err1, t->role);
    return 0;
}

static int become_leader(trigger_t *t, int64_t epoch) {
    char err[512];
    t->epoch = epoch;
    t->leader = 1;
    if (producers_new(t, err, sizeof err) < 0) {
        ax_warn("leader: %s; giving the lease back", err);
        t->leader = 0;
        lead_release(t);
        return -1;
    }
    pthread_mutex_lock(&t->lease_mu);
    /* The loop is here: the producers' init_transactions (seconds, over a
     * slow link) is not starvation. Without this the thread stepped down at
     * once after a slow init (216_fence_trigger saw it). */
    t->loop_beat_mono = ax_mono_ms();
    t->lease_epoch = epoch;
    /* renewed a third of a lease after it was taken (try_take's m0), not
     * after the init: a slow init must not let the lease run out first */
    t->lease_renewed_mono = t->lease_until_mono - t->svc.conf.trigger_lease_ms * 95 / 100;
    t->lease_lost[0] = '\0';
    t->clk_m0 = 0;
    pthread_cond_signal(&t->lease_cv);
    pthread_mutex_unlock(&t->lease_mu);
    t->last_tick_mono = ax_mono_ms(); /* nor for the loop's own measure (lead_tick) */
    ax_info("leader (epoch %lld): scheduling, dispatching and sweeping", (long long)epoch);
    tm_leadership(t);
    if (t->hooks.on_leader)
        t->hooks.on_leader(t);
    return 0;
}

void lead_note_reconnect(trigger_t *t) {
    if (!ax_pg_reconnected(t->svc.pg))
        return;
    t->pg_up_since = ax_mono_ms();
    if (t->leader) {
        t->listening = 0; /* LISTEN died with the old session */
        t->reload_all = 1;
    }
}

/* Take the lease if it has expired: 1 taken (or failed: try again at the
 * next tick), 0 still a standby. */
static int try_take(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    int64_t m0 = ax_mono_ms(), e = 0, pg_ms = 0;
    int rc = ax_store_leader_take(svc->pg, t->role, t->holder, svc->conf.trigger_lease_ms, &e,
                                  &pg_ms, err, sizeof err);
    int64_t m1 = ax_mono_ms(), x0 = m0, x1 = m1;
    if (rc == 0) /* PostgreSQL's clock is dated by the execution alone */
        ax_store_last_exec(&x0, &x1);
    if (rc == AX_ERR_NOTFOUND)
        return 0;
    if (rc < 0) {
        ax_debug("lease: %s", err);
        return 1;
    }
    t->lease_until_mono = lease_until(m0, svc->conf.trigger_lease_ms);
    t->clock_base = 0;
    clock_sync(t, pg_ms, x0, x1);
    become_leader(t, e);
    return 1;
}

/* Step down: drop leadership and give the lease back, so a standby takes
 * over at once; do not compete for it again for a lease. */
static void step_down(trigger_t *t, const char *why) {
    int64_t e = t->epoch;
    lead_lost(t, why);
    release_on(t, t->svc.pg, e);
    t->acquire_after_mono = ax_mono_ms() + t->svc.conf.trigger_lease_ms;
}

/* This trigger's heartbeat row (trigger_member), leader or standby: how
 * standbys are seen (GET /api/v1/leader, axctl status). A failure only
 * hides it for a while. */
static void member_beat(trigger_t *t) {
    char err[512];
    if (ax_store_leader_beat(t->svc.pg, t->role, t->holder, err, sizeof err) < 0)
        ax_debug("member heartbeat: %s", err);
}

/* The lease timer of the loop: notice starvation, follow the lease thread
 * (leader), or try to take over (standby); either way, the heartbeat. */
void lead_tick(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    if (svc->stopping)
        return;
    /* how much later than its period (main.c: lease/3, at most 1 s) */
    int64_t period = svc->conf.trigger_lease_ms / 3 < 1000 ? svc->conf.trigger_lease_ms / 3 : 1000;
    int64_t now = ax_mono_ms(), late = t->last_tick_mono ? now - t->last_tick_mono - period : 0;
    t->last_tick_mono = now;
    t->loop_beat_mono = now;
    if (t->leader && late > svc->conf.trigger_starve_ms) {
        char why[200];
        snprintf(why, sizeof why,
                 "starved: the lease timer ran %lld ms late (trigger.starve.ms %lld); "
                 "stepping down", (long long)late, (long long)svc->conf.trigger_starve_ms);
        step_down(t, why);
    }
    if (t->leader) {
        if (!lead_active(t))
            return;
        int64_t pg_ms = 0, m0 = 0, m1 = 0;
        pthread_mutex_lock(&t->lease_mu);
        if (t->clk_m0) {
            pg_ms = t->clk_pg;
            m0 = t->clk_m0;
            m1 = t->clk_m1;
            t->clk_m0 = 0;
        }
        pthread_mutex_unlock(&t->lease_mu);
        if (m0)
            clock_sync(t, pg_ms, m0, m1);
        if (ax_pg_ensure(svc->pg, err, sizeof err) == 0) {
            lead_note_reconnect(t);
            member_beat(t);
        }
        return;
    }
    if (ax_pg_ensure(svc->pg, err, sizeof err) < 0)
        return;
    lead_note_reconnect(t);
    member_beat(t);
    /* after stepping down a standby goes first */
    if (now >= t->acquire_after_mono && try_take(t))
        return;
    /* Still a standby: keep the clock in step anyway. */
    int64_t pg_ms, x0, x1;
    if (ax_store_clock_ms(svc->pg, &pg_ms, err, sizeof err) == 0) {
        ax_store_last_exec(&x0, &x1); /* the execution alone dates the clock */
        clock_sync(t, pg_ms, x0, x1);
    }
}

static void fenced_why(const trigger_t *t, char *err, size_t errlen) {
    snprintf(err, errlen, "fenced: epoch %lld is no longer the leader", (long long)t->epoch);
}

int lead_check_in_tx(trigger_t *t, char *err, size_t errlen) {
    ax_lease_key_t k = {t->role, t->holder, t->epoch};
    int rc = ax_store_leader_check(t->svc.pg, &k, err, errlen);
    if (rc == AX_ERR_NOTFOUND) {
        fenced_why(t, err, errlen);
        return AX_ERR_CONFLICT;
    }
    return rc;
}

void lead_fenced(trigger_t *t) {
    char why[128];
    fenced_why(t, why, sizeof why);
    lead_lost(t, why);
}

/* A transaction the leader could not complete: count it; after
 * LEAD_TXN_FAILURES in a row the producer (or its path to Kafka) is taken
 * to be unusable and leadership is given up. */
static void txn_failed(trigger_t *t, const char *what, const char *err) {
    t->txn_failures++;
    ax_warn("%s: %s (%d failed Kafka transaction(s) in a row)", what, err, t->txn_failures);
    if (t->txn_failures >= LEAD_TXN_FAILURES) {
        char why[700];
        snprintf(why, sizeof why, "%d Kafka transactions in a row could not be committed",
                 t->txn_failures);
        lead_give_up(t, why);
    }
}

int lead_tx_finish(trigger_t *t, int rc, const char *what, char *err, size_t errlen) {
    if (rc == 0)
        rc = ax_pg_commit(t->svc.pg, err, errlen);
    if (rc < 0) {
        ax_pg_rollback(t->svc.pg);
        if (rc == AX_ERR_CONFLICT)
            lead_lost(t, err);
        else
            ax_warn("%s: %s", what, err);
    }
    return rc;
}

int lead_produce_attempt(trigger_t *t, const ax_attempt_t *a, char *err, size_t errlen) {
    void *buf;
    size_t len;
    char key[32];
    int klen = snprintf(key, sizeof key, "%lld", (long long)a->instance_id);
    int rc = ax_attempt_encode(a, &buf, &len);
    if (rc < 0)
        return ax_seterr(err, errlen, rc, "instance %lld: cannot encode its attempt",
                         (long long)a->instance_id);
    rc = ax_kafka_produce(t->txp, t->svc.topic_callback, key, (size_t)klen, buf, len, NULL, NULL,
                          err, errlen);
    free(buf);
    return rc;
}

int lead_txn_begin(trigger_t *t) {
    char err[512], aerr[512];
    if (!lead_active(t) || !t->txp)
        return AX_ERR_CONFLICT;
    /* the other producer's turn (dispatch.producers): the one whose
     * last transaction ended earlier. After a window's commit that is a
     * window ago, so the primers' partitions register at once instead of
     * meeting that commit's markers still being written */
    if (t->svc.conf.dispatch_producers > 1 && t->txps[1] && !t->txn_open) {
        t->txn_turn ^= 1;
        t->txp = t->txps[t->txn_turn];
    }
    int rc = ax_kafka_txn_begin(t->txp, err, sizeof err);
    t->txn_open = rc == 0;
    if (rc == 0)
        ax_debug("Kafka transaction begun on %s%s", t->role, t->txn_turn ? ".1" : "");
    if (rc == AX_ERR_CONFLICT) {
        lead_give_up(t, err);
    } else if (rc < 0) {
        /* e.g. a transaction is still open: end it, so the next begin can work */
        ax_warn("%s; aborting what is open", err);
        if (ax_kafka_txn_end_abort(t->txp, 10000, aerr, sizeof aerr) < 0) {
            char why[1100];
            snprintf(why, sizeof why, "%s; %s", err, aerr);
            lead_give_up(t, why);
        } else {
            txn_failed(t, "Kafka transaction not begun", err);
        }
    }
    return rc;
}

int lead_txn_begin_next(trigger_t *t, rd_kafka_t **rk) {
    char err[512];
    rd_kafka_t *next = t->txps[t->txn_turn ^ 1];
    *rk = NULL;
    if (t->svc.conf.dispatch_producers < 2 || !t->txps[1] || !t->txp || !t->txn_open ||
        t->txn_next_open || !lead_active(t))
        return 1;
    int rc = ax_kafka_txn_begin(next, err, sizeof err);
    if (rc == AX_ERR_CONFLICT) {
        lead_give_up(t, err); /* fenced or fatal, as lead_txn_begin would find */
        return rc;
    }
    if (rc < 0) {
        /* the ordinary lead_txn_begin after the commit tries this producer
         * again, and ends what is open on it if it must */
        ax_debug("the next window's transaction not begun ahead: %s", err);
        return rc;
    }
    t->txn_next_open = 1;
    *rk = next;
    return 0;
}

void lead_txn_adopt_next(trigger_t *t) {
    if (!t->txn_next_open)
        return;
    t->txn_next_open = 0;
    t->txn_turn ^= 1;
    t->txp = t->txps[t->txn_turn];
    t->txn_open = 1;
}

void lead_txn_drop_next(trigger_t *t) {
    char err[512];
    if (!t->txn_next_open)
        return; /* none, or gone with the producers (lead_producers_destroy) */
    t->txn_next_open = 0;
    t->txns_aborted++;
    /* within what is left of the lease, like a commit */
    if (ax_kafka_txn_end_abort(t->txps[t->txn_turn ^ 1], lease_budget(t, 0, 10000), err,
                               sizeof err) < 0) {
        char why[700];
        snprintf(why, sizeof why, "the next window's transaction (its primers) not aborted: %s",
                 err);
        lead_give_up(t, why);
        return;
    }
    ax_info("the next window's transaction, begun ahead on %s%s, aborted: this window's "
            "commit on %s%s failed; the next begins on %s%s", t->role, t->txn_turn ? "" : ".1",
            t->role, t->txn_turn ? ".1" : "", t->role, t->txn_turn ? ".1" : "");
    /* the next transaction begins on the producer whose transaction ended
     * earlier (lead_txn_begin switches): the one that failed to commit,
     * not the one just aborted */
    t->txn_turn ^= 1;
    t->txp = t->txps[t->txn_turn];
}

int lead_txn_abort(trigger_t *t, const char *why) {
    char err[512];
    if (!t->txp)
        return AX_ERR_CONFLICT;
    ax_warn("%s: aborting the Kafka transaction", why);
    t->txn_open = 0;
    t->txns_aborted++;
    if (ax_kafka_txn_end_abort(t->txp, 10000, err, sizeof err) < 0) {
        char msg[1100];
        snprintf(msg, sizeof msg, "%s; the abort failed too: %s", why, err);
        lead_give_up(t, msg);
        return AX_ERR_CONFLICT;
    }
    ax_info("Kafka transaction aborted: nothing of it is visible");
    txn_failed(t, "Kafka transaction aborted", why);
    return AX_ERR_IO;
}

int lead_txn_commit(trigger_t *t) {
    char err[1100];
    if (!t->txp)
        return AX_ERR_CONFLICT;
    if (!lead_active(t)) {
        /* Our lease may be someone else's now: nothing of this may appear
         * (counted as aborted when the producers go: lead_producers_destroy) */
        return AX_ERR_CONFLICT;
    }
    /* The outcome must be known while the lease is ours: a commit that
     * cannot finish within it is aborted (and counts as failed). */
    int rc = ax_kafka_txn_commit(t->txp, lease_budget(t, 0, 35000), err, sizeof err);
    t->txn_open = 0; /* committed, aborted, or (a conflict) the producers go */
    if (rc == 0) {
        t->txns_committed++;
        t->txn_failures = 0;
    } else {
        t->txns_aborted++;
        if (rc == AX_ERR_CONFLICT)
            lead_give_up(t, err);
        else
            txn_failed(t, "Kafka transaction not committed", err);
    }
    return rc;
}

void lead_give_up(trigger_t *t, const char *why) {
    if (!t->leader)
        return;
    ax_error("giving up leadership (epoch %lld): %s; the Kafka producer is recreated, the "
             "lease released for a standby", (long long)t->epoch, why);
    lead_lost(t, why); /* destroys the transactional producer */
    t->txn_failures = 0;
    lead_release(t);
    /* let a standby take it first; this trigger may lead again later with a
     * new producer (whose init_transactions ends whatever was left open) */
    t->acquire_after_mono = ax_mono_ms() + t->svc.conf.trigger_lease_ms / 2;
}

void lead_release(trigger_t *t) {
    lease_forget(t); /* first: no renewal may follow the release */
    t->lease_until_mono = 0;
    release_on(t, t->svc.pg, t->epoch);
}
