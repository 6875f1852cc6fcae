/*
 * ax-trigger — owns time. Turns submissions (ax.submit) into SCHEDULED
 * instances in PostgreSQL (ingest.c), produces each instance to the
 * dispatch topic when it is due (scan.c, dispatch.c: marked dispatched
 * only after Kafka acknowledged it), and sweeps expired leases so
 * instances of a lost executor end TIMEOUT (sweep.c).
 *
 * Every trigger ingests submissions; only the leader (leader.c: a lease
 * row with an epoch, and a transactional producer) runs the schedules
 * (sched.c), dispatches and sweeps. This file wires them: configuration,
 * timers, the leader's hooks.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/alert.h"
#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "ax/service.h"
#include "trigger.h"

static const char usage[] =
    "Usage: ax-trigger [--config FILE] [--set KEY=VALUE]...\n\n"
    "Fires the jobs' schedules, persists submitted instances, dispatches them when\n"
    "due, and recovers the instances of lost executors. Run one or more; one leads\n"
    "at a time. SIGHUP reloads the configuration (the keys it can apply while running:\n"
    "see docs/OPERATIONS.md); SIGTERM stops (a leader releases its lease first).\n\n";

static void on_lead(evutil_socket_t fd, short what, void *arg) { lead_tick(arg); }
static void on_tick(evutil_socket_t fd, short what, void *arg) { sched_tick(arg); }
static void on_hold(evutil_socket_t fd, short what, void *arg) { hold_tick(arg); }
/* Each lag sample wakes the loop itself (lag.c); this timer is the
 * fallback that keeps lane_status and the backlog caps going while a
 * sample hangs on the broker (up to its 5 s timeouts). */
static void on_lag(evutil_socket_t fd, short what, void *arg) {
    if (lag_tick(arg))
        arm_scan(arg, 0);
}

/* The trigger a service callback belongs to (svc is its first member). */
static trigger_t *trigger_of(ax_svc_t *svc) {
    return (trigger_t *)((char *)svc - offsetof(trigger_t, svc));
}

/* The leader's hooks (leader.c calls them). */
static void hook_leader(trigger_t *t) {
    recover_pending(t); /* what an older leader left unconfirmed */
    sched_on_leader(t);
    arm_scan(t, 0);
}
static void hook_follower(trigger_t *t) {
    dispatch_win_forget(t);
    sched_on_follower(t);
}
static void hook_clock_jump(trigger_t *t, const char *why) { sched_rebuild(t, why); }

static void on_stop(ax_svc_t *svc) {
    trigger_t *t = trigger_of(svc);
    if (t->leader)
        dispatch_win_flush(t); /* what the ingest's window carries, committed and settled */
    if (t->leader) { /* (a failed flush may have given the lease up) */
        sched_on_follower(t);
        lead_producers_destroy(t);
        t->leader = 0;
        lead_release(t); /* a standby takes over without waiting for expiry */
    }
    event_base_loopbreak(svc->base);
}

/* ---- SIGHUP: keys applied while running; any other change waits for a restart ---------- */
static const char *const reloadable_keys[] = {
    "trigger.scan.interval.ms", "trigger.sweep.interval.ms", "trigger.sweep.grace.ms",
    "trigger.redispatch.after.ms", "trigger.fire.batch", "retention.finished.ms",
    "retention.ledger.ms", "retention.batch", "retention.budget.ms", "retention.interval.ms",
    "trigger.clock.jump.ms",
    "trigger.misfire.record.max", "trigger.lag.high", "trigger.lag.low", "trigger.aging.ms",
    "trigger.backlog.alert.depth", "trigger.backlog.alert.ms", "trigger.coalesce.ms",
    "trigger.coalesce.load", "submit.default.timeout.ms",
    "alert.webhook.url", "alert.webhook.secret", "alert.webhook.timeout.ms",
    "backoff.initial.ms", "backoff.max.ms", NULL};

static int reload_check(ax_svc_t *svc, ax_conf_t *n, char *err, size_t len) {
    if (n->trigger_lag_low >= n->trigger_lag_high)
        return ax_seterr(err, len, AX_ERR_INVALID,
                         "trigger.lag.low (%lld) must be below trigger.lag.high (%lld)",
                         (long long)n->trigger_lag_low, (long long)n->trigger_lag_high);
    return alert_check(n, err, len);
}

static int str_changed(const char *a, const char *b) {
    return strcmp(a ? a : "", b ? b : "") != 0;
}

static void on_reload(ax_svc_t *svc, const ax_conf_t *old) {
    trigger_t *t = trigger_of(svc);
    const ax_conf_t *c = &svc->conf;
    char err[512];
    if (c->trigger_sweep_interval_ms != old->trigger_sweep_interval_ms) {
        struct timeval tv = AX_TV_MS(c->trigger_sweep_interval_ms);
        event_add(t->ev_sweep, &tv);
    }
    if (t->ev_retention && c->retention_interval_ms != old->retention_interval_ms) {
        struct timeval tv = AX_TV_MS(c->retention_interval_ms);
        event_add(t->ev_retention, &tv);
    }
    if (c->trigger_aging_ms != old->trigger_aging_ms)
        ax_lane_plan(t->lanes, c->trigger_aging_ms, t->lane_min_age_ms, t->lane_target);
    if (str_changed(c->alert_webhook_url, old->alert_webhook_url) ||
        str_changed(c->alert_webhook_secret, old->alert_webhook_secret) ||
        c->alert_webhook_timeout_ms != old->alert_webhook_timeout_ms) {
        if (alert_init(svc, err, sizeof err) < 0)
            ax_error("SIGHUP: alert webhook off: %s", err); /* alert_check passed: unexpected */
    }
    arm_scan(t, 0);
}

/* The checks of keys that depend on each other: 0, or 2 (exit code) with
 * the reason printed. */
static int check_conf(ax_svc_t *svc) {
    char err[512];
    ax_conf_t *c = &svc->conf;
    if (c->trigger_lag_low >= c->trigger_lag_high) {
        fprintf(stderr, "ax-trigger: configuration error: trigger.lag.low (%lld) must be below "
                "trigger.lag.high (%lld)\n", (long long)c->trigger_lag_low,
                (long long)c->trigger_lag_high);
        return 2;
    }
    if (alert_init(svc, err, sizeof err) < 0) {
        fprintf(stderr, "ax-trigger: configuration error: alert.webhook.url: %s\n", err);
        return 2;
    }
    if (c->trigger_starve_ms == 0)
        c->trigger_starve_ms = c->trigger_lease_ms * 2 / 3;
    if (c->trigger_starve_ms >= c->trigger_lease_ms) {
        fprintf(stderr, "ax-trigger: configuration error: trigger.starve.ms (%lld) must be below "
                "trigger.lease.ms (%lld)\n", (long long)c->trigger_starve_ms,
                (long long)c->trigger_lease_ms);
        return 2;
    }
    if (c->pg_statement_timeout_ms == 0 || c->pg_statement_timeout_ms >= c->trigger_starve_ms)
        ax_warn("db.statement.timeout.ms (%lld) is not below trigger.starve.ms (%lld): one slow "
                "statement makes this trigger step down as leader",
                (long long)c->pg_statement_timeout_ms, (long long)c->trigger_starve_ms);
    return 0;
}

/* The timers of the loop. */
static void arm_timers(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    t->ev_scan = evtimer_new(svc->base, scan_on_timer, t);
    t->ev_sweep = ax_svc_every(svc, svc->conf.trigger_sweep_interval_ms, sweep_on_timer, t);
    if (retention_start(t) == 0)
        t->ev_retention =
            ax_svc_every(svc, svc->conf.retention_interval_ms, retention_on_timer, t);
    else
        ax_warn("retention sweep not running: finished instances and ledger rows are kept");
    int64_t renew = svc->conf.trigger_lease_ms / 3;
    t->ev_lead = ax_svc_every(svc, renew < 1000 ? renew : 1000, on_lead, t);
    t->ev_reload = ax_svc_every(svc, 200, on_tick, t);
    if (hold_start(t) == 0)
        t->ev_hold = ax_svc_every(svc, 1000, on_hold, t);
    else
        ax_warn("no list of topics: instances are produced without checking their topic");
    if (lag_start(t) == 0)
        t->ev_lag = ax_svc_every(svc, svc->conf.trigger_lag_interval_ms, on_lag, t);
    else
        ax_warn("lag monitor not running: lanes are never deferred");
}

static void trigger_fini(trigger_t *t) {
    struct event *evs[] = {t->ev_scan, t->ev_sweep, t->ev_lead, t->ev_reload, t->ev_lag,
                           t->ev_hold, t->ev_retention};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i])
            event_free(evs[i]);
    retention_stop(t);
    lag_stop(t);
    hold_stop(t);
    lead_fini(t);
    ax_pg_destroy(t->ingest_pg);
    t->ingest_pg = NULL;
    alert_fini();
    sched_destroy(t);
    free(t->refused);
    dispatch_win_forget(t); /* the partitions noted for primers */
    free(t->win.parts);
    if (t->win.ev)
        event_free(t->win.ev);
    free(t->win.ids);
    tm_fini(t);
    ax_svc_destroy(&t->svc);
}

int main(int argc, char **argv) {
    /* the one trigger of the process (static storage: what it holds stays
     * reachable when main returns early); callbacks reach it from their
     * svc (trigger_of), no file-level global */
    static trigger_t trigger;
    trigger_t *t = &trigger;
    if (ax_svc_init(&t->svc, "ax-trigger", &argc, argv, usage, "trigger") < 0)
        return ax_svc_exit_status(&t->svc);
    ax_svc_t *svc = &t->svc;
    svc->on_stop = on_stop;
    svc->reloadable = reloadable_keys;
    svc->reload_check = reload_check;
    svc->on_reload = on_reload;
    t->hooks = (struct lead_hooks){hook_leader, hook_follower, hook_clock_jump};
    int rc = check_conf(svc);
    if (rc)
        return rc;
    ax_lane_plan(t->lanes, svc->conf.trigger_aging_ms, t->lane_min_age_ms, t->lane_target);
    tm_init(t);
    char perr[512];
    if (!(t->ingest_pg = ax_pg_new(&svc->conf, "ax-trigger-ingest", perr, sizeof perr))) {
        ax_error("ingest connection: %s", perr);
        return 1;
    }
    lead_init(t);
    if (lead_start(t) < 0 || sched_init(t) < 0)
        return 1;
    arm_timers(t);
    lead_tick(t); /* take the lease now if it is free */
    arm_scan(t, 0);
    char group[300];
    if (ax_svc_consume(svc, svc->topic_submit,
                       ax_conf_topic(&svc->conf, "trigger", group, sizeof group),
                       (size_t)svc->conf.trigger_batch, ingest_batch, t) < 0)
        return ax_svc_exit_status(svc);
    ax_svc_run(svc);
    ax_info("stopped: %lld fired (%lld deferred, %lld coalesced timers), %lld skipped, "
            "%lld submitted, %lld duplicate submissions, %lld dispatched, %lld swept",
            (long long)t->fired, (long long)t->deferred_fires, (long long)t->coalesced,
            (long long)t->skipped, (long long)t->submitted, (long long)t->duplicates,
            (long long)t->dispatched, (long long)t->swept);
    trigger_fini(t);
    return 0;
}
