/*
 * leader.c — one ax-trigger leads at a time.
 *
 * The lease is a row of ax_leader (role = <topic.prefix>trigger) holding the
 * holder, an epoch and an expiry in PostgreSQL's clock. A standby takes the
 * row only once it has expired, and taking it increments the epoch. The
 * leader renews every lease/3; it stops dispatching at once when a renewal
 * fails and, at the latest, when its lease would have run out as measured
 * on CLOCK_MONOTONIC from before the renewal was sent. Every dispatch
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

#include "ax/common.h"
#include "ax/log.h"
#include "trigger.h"

int64_t lead_now(const trigger_t *t) { return ax_mono_ms() + t->clock_base; }

int lead_active(trigger_t *t) {
    if (!t->leader)
        return 0;
    if (ax_mono_ms() >= t->lease_until_mono) {
        lead_lost(t, "lease ran out before it could be renewed");
        return 0;
    }
    return 1;
}

void lead_lost(trigger_t *t, const char *why) {
    if (!t->leader)
        return;
    ax_warn("leadership lost (epoch %lld): %s; dispatching stopped", (long long)t->epoch, why);
    t->leader = 0;
    if (t->txp) {
        rd_kafka_destroy(t->txp);
        t->txp = NULL;
    }
    sched_on_follower(t);
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
        sched_rebuild(t, why);
    }
}

void lead_init(trigger_t *t) {
    char rnd[17];
    ax_random_hex(rnd, 8);
    snprintf(t->holder, sizeof t->holder, "%s/%s", t->svc.worker_id, rnd);
    char buf[256];
    snprintf(t->role, sizeof t->role, "%s", ax_conf_topic(&t->svc.conf, "trigger", buf, sizeof buf));
    t->wall_minus_mono = ax_now_ms() - ax_mono_ms();
}

static int become_leader(trigger_t *t, int64_t epoch) {
    ax_svc_t *svc = &t->svc;
    char err[512], txn_id[300], cid[300];
    snprintf(txn_id, sizeof txn_id, "%s", t->role);
    snprintf(cid, sizeof cid, "%s-leader", svc->worker_id);
    t->epoch = epoch;
    t->leader = 1;
    /* Fence any older leader's producer before producing anything. */
    t->txp = ax_kafka_txn_producer_new(&svc->conf, cid, txn_id, 30000, err, sizeof err);
    if (!t->txp) {
        ax_warn("leader: %s; giving the lease back", err);
        t->leader = 0;
        lead_release(t);
        return -1;
    }
    ax_info("leader (epoch %lld): scheduling, dispatching and sweeping", (long long)epoch);
    recover_pending(t); /* what an older leader left unconfirmed */
    sched_on_leader(t);
    arm_scan(t, 0);
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

/* The lease timer: renew (leader) or try to take over (standby). */
void lead_tick(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512], lease[32], epoch[32];
    if (svc->stopping)
        return;
    if (ax_pg_ensure(svc->pg, err, sizeof err) < 0) {
        if (t->leader && ax_mono_ms() >= t->lease_until_mono)
            lead_lost(t, err);
        return;
    }
    lead_note_reconnect(t);
    snprintf(lease, sizeof lease, "%lld", (long long)svc->conf.trigger_lease_ms);
    snprintf(epoch, sizeof epoch, "%lld", (long long)t->epoch);
    PGresult *r;
    int64_t m0 = ax_mono_ms();
    if (t->leader) {
        const char *p[] = {t->role, t->holder, epoch, lease};
        int rc = ax_pg_exec(svc->pg,
                            "UPDATE ax_leader SET expires_at = now() + $4::bigint * interval '1 ms'"
                            " WHERE role = $1 AND holder = $2 AND epoch = $3::bigint"
                            " AND expires_at > now()"
                            " RETURNING (extract(epoch FROM now()) * 1000)::bigint",
                            4, p, NULL, NULL, &r, err, sizeof err);
        int64_t m1 = ax_mono_ms();
        if (rc < 0) {
            ax_warn("lease renewal: %s", err);
            if (m1 >= t->lease_until_mono)
                lead_lost(t, "could not renew the lease");
            return;
        }
        if (PQntuples(r) == 0) {
            PQclear(r);
            lead_lost(t, "the lease expired or was taken over");
            return;
        }
        /* 5% margin for the two clocks' rates; counted from before the
         * statement was sent. */
        t->lease_until_mono = m0 + svc->conf.trigger_lease_ms * 95 / 100;
        clock_sync(t, ax_pg_int(r, 0, 0), m0, m1);
        PQclear(r);
        return;
    }
    if (ax_mono_ms() < t->standby_until_mono)
        return; /* gave up leadership: a standby's turn first */
    const char *ins[] = {t->role};
    ax_pg_exec(svc->pg, "INSERT INTO ax_leader (role) VALUES ($1) ON CONFLICT DO NOTHING", 1, ins,
               NULL, NULL, NULL, err, sizeof err);
    const char *p[] = {t->role, t->holder, lease};
    int rc = ax_pg_exec(svc->pg,
                        "UPDATE ax_leader SET holder = $2, epoch = epoch + 1, acquired_at = clock_timestamp(),"
                        "  expires_at = now() + $3::bigint * interval '1 ms'"
                        " WHERE role = $1 AND expires_at <= now()"
                        " RETURNING epoch, (extract(epoch FROM now()) * 1000)::bigint",
                        3, p, NULL, NULL, &r, err, sizeof err);
    int64_t m1 = ax_mono_ms();
    if (rc < 0) {
        ax_debug("lease: %s", err);
        return;
    }
    if (PQntuples(r) == 1) {
        t->lease_until_mono = m0 + svc->conf.trigger_lease_ms * 95 / 100;
        t->clock_base = 0;
        clock_sync(t, ax_pg_int(r, 0, 1), m0, m1);
        int64_t e = ax_pg_int(r, 0, 0);
        PQclear(r);
        become_leader(t, e);
        return;
    }
    PQclear(r);
    /* Still a standby: keep the clock in step anyway. */
    if (ax_pg_exec(svc->pg, "SELECT (extract(epoch FROM now()) * 1000)::bigint", 0, NULL, NULL,
                   NULL, &r, err, sizeof err) == 0) {
        clock_sync(t, ax_pg_int(r, 0, 0), m1, ax_mono_ms());
        PQclear(r);
    }
}

int lead_check_in_tx(trigger_t *t, char *err, size_t errlen) {
    char epoch[32];
    snprintf(epoch, sizeof epoch, "%lld", (long long)t->epoch);
    const char *p[] = {t->role, t->holder, epoch};
    PGresult *r;
    int rc = ax_pg_exec(t->svc.pg,
                        "SELECT 1 FROM ax_leader WHERE role = $1 AND holder = $2"
                        " AND epoch = $3::bigint AND expires_at > now() FOR SHARE",
                        3, p, NULL, NULL, &r, err, errlen);
    if (rc < 0)
        return rc;
    int ok = PQntuples(r) == 1;
    PQclear(r);
    if (!ok) {
        snprintf(err, errlen, "fenced: epoch %lld is no longer the leader", (long long)t->epoch);
        return AX_ERR_CONFLICT;
    }
    return 0;
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

int lead_txn_begin(trigger_t *t) {
    char err[512], aerr[512];
    if (!lead_active(t) || !t->txp)
        return AX_ERR_CONFLICT;
    int rc = ax_kafka_txn_begin(t->txp, err, sizeof err);
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

int lead_txn_abort(trigger_t *t, const char *why) {
    char err[512];
    if (!t->txp)
        return AX_ERR_CONFLICT;
    ax_warn("%s: aborting the Kafka transaction", why);
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
        /* Our lease may be someone else's now: nothing of this may appear. */
        return AX_ERR_CONFLICT;
    }
    /* The outcome must be known while the lease is ours: a commit that
     * cannot finish within it is aborted (and counts as failed). */
    int64_t left = t->lease_until_mono - ax_mono_ms();
    int budget = left < 1000 ? 1000 : left > 35000 ? 35000 : (int)left;
    int rc = ax_kafka_txn_commit(t->txp, budget, err, sizeof err);
    if (rc == 0)
        t->txn_failures = 0;
    else if (rc == AX_ERR_CONFLICT)
        lead_give_up(t, err);
    else
        txn_failed(t, "Kafka transaction not committed", err);
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
    t->standby_until_mono = ax_mono_ms() + t->svc.conf.trigger_lease_ms / 2;
}

void lead_release(trigger_t *t) {
    char err[256], epoch[32];
    snprintf(epoch, sizeof epoch, "%lld", (long long)t->epoch);
    const char *p[] = {t->role, t->holder, epoch};
    if (ax_pg_exec(t->svc.pg,
                   "UPDATE ax_leader SET expires_at = now() WHERE role = $1 AND holder = $2"
                   " AND epoch = $3::bigint",
                   3, p, NULL, NULL, NULL, err, sizeof err) == 0)
        ax_info("lease released");
}
