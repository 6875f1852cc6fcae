/*
 * ax-executor — a member of the executor consumer group.
 *
 * Each dispatched attempt is decoded and assigned to a pool (by job route,
 * else by handler kind); a batch of them is claimed in one statement (CAS
 * SCHEDULED->LOCKED with a lease sized from the job's observed run time),
 * waits in its pool's bounded queue, is marked RUNNING (one statement per
 * start wave) when a worker slot frees, and runs in its handler (command,
 * http, plugin). The attempt's result goes to the callback topic, and only
 * then may the dispatch offset be committed — per partition, up to the first
 * message whose work is not durable, so a crash re-delivers exactly the
 * unfinished messages. A dispatch whose claim loses (a duplicate, or an
 * instance someone else holds) is counted and dropped; one whose claim
 * fails in the store is kept and claimed again after a backoff.
 *
 * Priority lanes: the executor reads the five lane topics of each group it
 * serves (<prefix>dispatch[.G][.pN], ax/lane.h). It fetches from the most
 * urgent lanes that have a backlog and pauses the partitions of the others,
 * each for at most executor.lane.starve.ms at a time (lanes_tick); claimed
 * runs wait in their pool in one FIFO per lane and start most urgent lane
 * first, with the same starvation bound (ax_pool_pop).
 *
 * Back-pressure: when a pool is full the partitions that fed it are paused
 * (the consumer keeps polling), and resumed as it drains; above a CPU or
 * memory watermark every partition is paused. One function decides the
 * state of every partition from all of these reasons (apply_pauses). Leases
 * of held instances are renewed in one statement every executor.lease.min.ms
 * / 3; an instance whose lease could not be renewed has its handler stopped.
 * Jobs with a concurrency limit take a slot in job.running_count when
 * claimed; without a free slot the instance goes back to the trigger for a
 * short wait, and the partition moves on. SIGHUP reloads pool sizes,
 * watermarks and timeouts. The files and what crosses them: executor.h.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "ax/service.h"
#include "executor.h"

extern char **environ;

static const char usage[] =
    "Usage: ax-executor [--config FILE] [--set KEY=VALUE]...\n\n"
    "Runs dispatched instances. Start as many as the load needs; they share the\n"
    "dispatch topics' partitions as one consumer group. SIGHUP reloads pool sizes,\n"
    "watermarks and timeouts; SIGTERM drains.\n\n";

static const handler_ops_t *const handlers[] = {&handler_command, &handler_http, &handler_plugin};

#define LANE_TICK_MS 100
/* Dispatches claimed by one statement at most (on_dispatch_ready). */
#define CLAIM_BATCH 1024

static const handler_ops_t *handler_for(const char *kind) {
    for (size_t i = 0; i < AX_ARRAY_SIZE(handlers); i++)
        if (strcmp(handlers[i]->kind, kind) == 0)
            return handlers[i];
    return NULL;
}

static void track(executor_t *ex, run_t *r) {
    if (ex->tail)
        ex->tail->next = r;
    else
        ex->head = r;
    ex->tail = r;
    ex->tracked++;
    ex->nstate[r->state]++; /* from now on changed by run_set_state */
    if (r->state == RUN_NEW && !ex->first_new)
        ex->first_new = r;
}

/* ---- the consume loop ------------------------------------------------------------------- */

static void schedule_retry(executor_t *ex) {
    int64_t ms = ax_backoff_ms(ex->claim_failures++, ex->svc.conf.backoff_initial_ms,
                               ex->svc.conf.backoff_max_ms);
    event_add(ex->ev_retry, &(struct timeval)AX_TV_MS(ms));
}

static int has_new(executor_t *ex) { return ex->nstate[RUN_NEW] > 0; }

static void on_retry(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    if (claim_new(ex) < 0)
        schedule_retry(ex);
    start_ready(ex);
    commit_soon(ex);
    event_active(ex->ev_kick, 0, 0);
}

/* One consumed message: tracked as a run admitted to its pool, or
 * dead-lettered (returns 1). */
static int take_message(executor_t *ex, rd_kafka_message_t *m) {
    ax_svc_t *svc = &ex->svc;
    run_t *r = calloc(1, sizeof *r);
    if (!r) {
        rd_kafka_message_destroy(m);
        return 0;
    }
    r->ex = ex;
    r->msg = m;
    r->topic_ix = topic_index(ex, rd_kafka_topic_name(m->rkt));
    r->qi.lane = r->topic_ix < 0 ? AX_PRIORITY_DEFAULT : ex->ln.topics[r->topic_ix].lane;
    if (ax_kafka_is_primer(m)) {
        /* a partition primer of the trigger's dispatch window: no
         * instance (nor work served from its lane); done at once, its
         * offset committed with the rest */
        r->state = RUN_DONE;
        ex->primers++;
        track(ex, r);
        return 0;
    }
    ex->ln.served[r->qi.lane] = ax_mono_ms(); /* the lane was fetched from */
    char reason[512];
    int dlq = 0;
    ax_dlq_about_t about = {0}; /* what it was, once it decoded */
    if (ax_svc_precheck(svc, m, AX_SCHEMA_DISPATCH, reason, sizeof reason) < 0 ||
        ax_dispatch_decode(m->payload, m->len, &r->d, reason, sizeof reason) < 0) {
        dlq = 1;
    } else if (!(r->ops = handler_for(r->d.handler_kind)) || !(r->pool = pool_for(ex, &r->d))) {
        snprintf(reason, sizeof reason,
                 "handler kind '%s' has no pool in this executor (executor.pools)",
                 r->d.handler_kind);
        dlq = 1;
        about = (ax_dlq_about_t){r->d.instance_id, r->d.job, r->d.trace_id};
    }
    if (dlq) {
        r->state = RUN_DONE;
        ax_svc_reject_about(svc, m, reason, &about);
        ex->dead_lettered++;
    } else {
        run_admit(ex, r);
    }
    track(ex, r);
    return dlq;
}

static void on_dispatch_ready(void *arg) {
    executor_t *ex = arg;
    ax_svc_t *svc = &ex->svc;
    if (svc->stopping || has_new(ex))
        return; /* a claim is waiting for PostgreSQL: take nothing more */
    /* A few claims per turn of the loop, then come back through a zero
     * timer: lease renewals and heartbeats must not wait behind a backlog
     * (a starved renewal lets the sweep declare our instances lost). Each
     * claim takes what the consumer's queue holds, up to CLAIM_BATCH: a
     * backlog is claimed in one statement per 1,024 dispatches, not one
     * per fetched batch of 256 (with two executors each batch was half
     * the size); at low load that is what one fetch brought, claimed at
     * once, nothing waited for. */
    for (int round = 0; !svc->stopping; round++) {
        if (round == 4) {
            event_add(ex->ev_more, &(struct timeval)AX_TV_MS(0));
            break;
        }
        size_t got = 0;
        int dlq = 0;
        while (got < CLAIM_BATCH) {
            rd_kafka_message_t *msgs[256];
            ssize_t n = rd_kafka_consume_batch_queue(svc->cqueue, 0, msgs, 256);
            if (n <= 0)
                break;
            got += (size_t)n;
            for (ssize_t i = 0; i < n; i++) {
                rd_kafka_message_t *m = msgs[i];
                if (m->err) {
                    if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                        ax_warn("kafka consume: %s", rd_kafka_message_errstr(m));
                    rd_kafka_message_destroy(m);
                    continue;
                }
                dlq |= take_message(ex, m);
            }
            lanes_tick(ex, 0); /* what this batch changed: pause less urgent lanes at once */
            if (n < 256)
                break; /* the queue is empty: claim what came */
        }
        if (got == 0)
            break;
        if (dlq)
            ax_svc_flush(svc, 35000); /* dead letters are durable before their commit */
        if (claim_new(ex) < 0) {
            schedule_retry(ex);
            break;
        }
        start_ready(ex);
        commit_soon(ex);
    }
    start_ready(ex);
}

static void on_more(evutil_socket_t fd, short what, void *arg) { on_dispatch_ready(arg); }
static void on_commit(evutil_socket_t fd, short what, void *arg) { commit_ready(arg); }

/* Slots freed by finishing handlers start their successors in one wave a
 * millisecond later, so completions arriving together share one RUNNING
 * statement instead of one each (fresh claims start at once, in
 * on_dispatch_ready). */
static void on_start(evutil_socket_t fd, short what, void *arg) { start_ready(arg); }

static void on_kick(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    if (!evtimer_pending(ex->ev_start, NULL))
        evtimer_add(ex->ev_start, &(struct timeval)AX_TV_MS(1));
    commit_soon(ex);
    on_dispatch_ready(ex);
}

/* ---- SIGHUP ---------------------------------------------------------------------------- */

/* Keys applied while running; any other change waits for a restart. */
static const char *const reloadable_keys[] = {
    "executor.slots", "executor.queue", "executor.pools", "executor.pool.routes",
    "executor.output.cap", "executor.kill.grace.ms", "executor.lease.min.ms",
    "executor.lease.max.ms", "executor.lease.factor", "executor.watermark.cpu",
    "executor.watermark.mem", "executor.shutdown.grace.ms", "executor.lane.starve.ms",
    "backoff.initial.ms", "backoff.max.ms", NULL};

/* The service's callbacks get the ax_svc_t that starts executor_t. */
static int reload_check(ax_svc_t *svc, ax_conf_t *n, char *err, size_t len) {
    return pools_configure((executor_t *)svc, n, err, len);
}

static void on_reload(ax_svc_t *svc, const ax_conf_t *old) {
    executor_t *ex = (executor_t *)svc;
    pools_log(ex);
    maybe_resume(ex);
    lanes_tick(ex, 1);
    event_active(ex->ev_kick, 0, 0);
}

/* ---- shutdown --------------------------------------------------------------------------- */

static void on_shutdown_deadline(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    ax_warn("shutdown grace over: stopping %zu running handler(s)", ex->running);
    for (run_t *r = ex->head; r; r = r->next)
        if (r->state == RUN_RUNNING)
            stop_run(ex, r, "shutdown");
}

/* SIGTERM: stop fetching, hand back what has not started (their messages
 * are not committed, so the group delivers them again), let running
 * handlers finish until the shutdown grace (then stop them), deliver their
 * results, commit, leave the group. */
static void on_stop(ax_svc_t *svc) {
    executor_t *ex = (executor_t *)svc;
    apply_pauses(ex); /* svc->stopping: every partition */
    release_waiting(ex);
    ax_info("draining: %zu running, %zu uncommitted", ex->running, ex->tracked);
    heartbeat(ex, "draining");
    event_add(ex->ev_deadline, &(struct timeval)AX_TV_MS(svc->conf.executor_shutdown_grace_ms));
    commit_ready(ex);
}

/* ---- main ----------------------------------------------------------------------------- */

/* Librdkafka settings the executor wants unless configured (kafka.*).
 * The lanes are five topics per group: the cooperative-sticky assignor
 * balances the number of partitions per member, not per topic, and can
 * leave a whole lane on one executor; roundrobin spreads every lane.
 * Dispatch records are produced in transactions once their instances are
 * durable; with dispatch.transaction.ms the leader commits one transaction
 * per window, and the executor reads uncommitted records (a record of a
 * transaction that does not commit is produced again, and the second loses
 * its claim); with 0, committed ones only. The broker may hold a fetch for
 * its whole fetch.wait.max.ms (librdkafka's default 500 ms) before it
 * returns a fresh message of an otherwise idle lane, so a P0 trickle
 * waited up to half a second. 25 ms bounds that for ~40 fetch requests a
 * second when idle. And a small prefetch: librdkafka keeps up to 64 MB of
 * fetched messages per consumer by default, and an urgent message fetched
 * behind thousands of a lower lane's waited for them (up to 1 s at the
 * start of bench_flood); 1 MB is still ~0.5 s of work at 6,000 jobs/s. */
static int kafka_defaults(ax_svc_t *svc, char *err, size_t errlen) {
    const char *const defaults[][2] = {
        {"partition.assignment.strategy", "roundrobin"},
        {"fetch.wait.max.ms", "25"},
        {"queued.max.messages.kbytes", "1024"},
        {"isolation.level",
         svc->conf.dispatch_transaction_ms > 0 ? "read_uncommitted" : "read_committed"},
    };
    for (size_t d = 0; d < AX_ARRAY_SIZE(defaults); d++) {
        int has = 0;
        for (size_t i = 0; i < svc->conf.n_kafka; i++)
            has |= strcmp(svc->conf.kafka[i].key, defaults[d][0]) == 0;
        char kv[128];
        snprintf(kv, sizeof kv, "kafka.%s", defaults[d][0]);
        if (!has && ax_conf_set(&svc->conf, kv, defaults[d][1], "ax-executor default", err,
                                errlen) < 0)
            return AX_ERR_INVALID;
    }
    return 0;
}

/* The environment of commands: ours minus AXCONF_* and AX_*. */
static void child_env_init(executor_t *ex) {
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "AXCONF_", 7) != 0 && strncmp(*e, "AX_", 3) != 0)
            ex->child_env_n++;
    ex->child_env_base = calloc(ex->child_env_n + 1, sizeof *ex->child_env_base);
    size_t k = 0;
    for (char **e = environ; ex->child_env_base && *e; e++)
        if (strncmp(*e, "AXCONF_", 7) != 0 && strncmp(*e, "AX_", 3) != 0)
            ex->child_env_base[k++] = *e;
    if (!ex->child_env_base)
        ex->child_env_n = 0;
}

static void events_new(executor_t *ex) {
    ax_svc_t *svc = &ex->svc;
    ex->ev_retry = evtimer_new(svc->base, on_retry, ex);
    ex->ev_deadline = evtimer_new(svc->base, on_shutdown_deadline, ex);
    ex->ev_kick = event_new(svc->base, -1, 0, on_kick, ex);
    ex->ev_start = evtimer_new(svc->base, on_start, ex);
    ex->ev_more = evtimer_new(svc->base, on_more, ex);
    ex->ev_commit = evtimer_new(svc->base, on_commit, ex);
    ex->ev_lease = ax_svc_every(svc, svc->conf.executor_lease_min_ms / 3, on_lease, ex);
    ex->ev_cancel_poll = ax_svc_every(svc, CANCEL_POLL_MS, on_cancel_poll, ex);
    ex->ev_heart = ax_svc_every(svc, svc->conf.executor_heartbeat_ms, on_heartbeat, ex);
}

static void events_free(executor_t *ex) {
    struct event *evs[] = {ex->ev_retry, ex->ev_deadline, ex->ev_kick,        ex->ev_start,
                           ex->ev_more,  ex->ev_commit,   ex->ev_lease,       ex->ev_cancel_poll,
                           ex->ev_heart};
    for (size_t i = 0; i < AX_ARRAY_SIZE(evs); i++)
        if (evs[i])
            event_free(evs[i]);
}

/* The consumer of the five lane topics of every executor group served;
 * <0: 2 = configuration error (printed), 1 = other. */
static int consumer_start(executor_t *ex) {
    ax_svc_t *svc = &ex->svc;
    char group[300], err[1024];
    ax_conf_topic(&svc->conf, "executor", group, sizeof group);
    if (kafka_defaults(svc, err, sizeof err) < 0) {
        fprintf(stderr, "ax-executor: %s\n", err);
        return 2;
    }
    svc->consumer = ax_kafka_consumer_new(&svc->conf, group, svc->name, err, sizeof err);
    if (!svc->consumer) {
        fprintf(stderr, "ax-executor: configuration error: %s\n", err);
        return 2;
    }
    const char **topics = calloc(ex->ln.ntopics, sizeof *topics);
    for (size_t i = 0; topics && i < ex->ln.ntopics; i++)
        topics[i] = ex->ln.topics[i].name;
    if (!topics ||
        ax_kafka_subscribe(svc->consumer, topics, ex->ln.ntopics, err, sizeof err) < 0) {
        ax_error("%s", topics ? err : "out of memory");
        free(topics);
        return 1;
    }
    free(topics);
    svc->cqueue = rd_kafka_queue_get_consumer(svc->consumer);
    svc->cwatch = ax_kafka_watch(svc->base, svc->cqueue, 100, on_dispatch_ready, ex);
    pools_log(ex);
    for (size_t i = 0; i < ex->ln.ntopics; i++)
        ax_info("executing %s (lane P%d)", ex->ln.topics[i].name, ex->ln.topics[i].lane);
    char fw[32] = "500";
    size_t fwlen = sizeof fw;
    rd_kafka_conf_get(rd_kafka_conf(svc->consumer), "fetch.wait.max.ms", fw, &fwlen);
    ex->ln.round_ms = atoll(fw) + LANE_TICK_MS;
    ex->ln.ev_tick = ax_svc_every(svc, LANE_TICK_MS, on_lane_tick, ex);
    return 0;
}

static void executor_fini(executor_t *ex) {
    ax_svc_t *svc = &ex->svc;
    fence_fini(ex); /* its thread signals through the base's commands */
    ax_kafka_watch_free(svc->cwatch);
    svc->cwatch = NULL;
    rd_kafka_queue_destroy(svc->cqueue);
    svc->cqueue = NULL;
    rd_kafka_consumer_close(svc->consumer);
    rd_kafka_flush(svc->producer, 10000);
    for (size_t i = 0; i < AX_ARRAY_SIZE(handlers); i++)
        if (handlers[i]->fini)
            handlers[i]->fini(ex);
    runs_free_all(ex); /* no message may outlive the consumer's handle */
    events_free(ex);
    lanes_fini(ex);
    xm_fini(ex);
    pools_fini(ex);
    free(ex->child_env_base);
    ax_svc_destroy(svc);
}

int main(int argc, char **argv) {
    static executor_t executor; /* lives as long as the process; zeroed */
    executor_t *ex = &executor;
    if (privilege_check(ex, argc, argv) < 0) /* root refusal, executor.run.user: exit 2 */
        return 2;
    if (ax_svc_init(&ex->svc, "ax-executor", &argc, argv, usage, "executor") < 0)
        return ax_svc_exit_status(&ex->svc);
    ax_svc_t *svc = &ex->svc;
    char err[1024];
    if (pools_configure(ex, &svc->conf, err, sizeof err) < 0 ||
        lane_topics(ex, &svc->conf, err, sizeof err) < 0) {
        fprintf(stderr, "ax-executor: configuration error: %s\n", err);
        /* no librdkafka thread may outlive main: exit() with one running
         * crashed now and then (150_lanes saw exit 139) */
        ax_svc_destroy(svc);
        return 2;
    }
    svc->on_stop = on_stop;
    xm_init(ex);
    child_env_init(ex);
    ex->load.fetching = 1;
    ex->load.lease_ok_mono = ax_mono_ms();
    ex->ln.mask = (1u << AX_PRIORITIES) - 1;
    /* executors start their Attempt chunks at different partitions */
    ex->part_seq = (int64_t)(getpid() % 64) * svc->conf.produce_partition_chunk;
    for (int l = 0; l < AX_PRIORITIES; l++)
        ex->ln.served[l] = ex->load.lease_ok_mono;
    for (size_t i = 0; i < AX_ARRAY_SIZE(handlers); i++)
        if (handlers[i]->init && handlers[i]->init(ex) < 0) {
            ax_error("handler %s could not start", handlers[i]->kind);
            return 1;
        }
    events_new(ex);
    if (fence_start(ex) < 0) {
        ax_error("cannot start the fence thread");
        return 1;
    }
    svc->reloadable = reloadable_keys;
    svc->reload_check = reload_check;
    svc->on_reload = on_reload;
    int rc = consumer_start(ex);
    if (rc) {
        ax_svc_destroy(svc);
        return rc;
    }
    heartbeat(ex, "running");
    event_base_dispatch(svc->base);
    ax_info("stopped: %lld attempts run, %lld duplicate dispatches dropped, %lld dead-lettered, "
            "%lld leases lost, %lld process groups fenced, %lld partition primers skipped",
            (long long)ex->ran, (long long)ex->duplicates, (long long)ex->dead_lettered,
            (long long)ex->lost_leases, (long long)fence_killed(ex), (long long)ex->primers);
    heartbeat(ex, "stopped");
    executor_fini(ex);
    return 0;
}
