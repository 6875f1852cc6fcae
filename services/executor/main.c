/*
 * ax-executor — a member of the executor consumer group. For each dispatched
 * attempt it claims the instance (CAS SCHEDULED->LOCKED, batched), marks it
 * RUNNING, runs its command (posix_spawn, own process group, timeout, capped
 * output), produces the attempt's result to the callback topic and only then
 * lets the dispatch offset be committed. A dispatch whose claim loses (a
 * duplicate, or an instance someone else holds) is counted and dropped.
 *
 * Offsets are committed per partition up to the first message whose work is
 * not yet durable, so a crash re-delivers exactly the unfinished messages.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "ax/service.h"
#include "ax/spawn.h"

extern char **environ;

static const char usage[] =
    "Usage: ax-executor [--config FILE] [--set KEY=VALUE]...\n\n"
    "Runs dispatched instances. Start as many as the load needs; they share the\n"
    "dispatch topic's partitions as one consumer group.\n\n";

typedef enum { RUN_NEW, RUN_CLAIMED, RUN_RUNNING, RUN_REPORTING, RUN_DONE } run_state_t;

typedef struct run {
    struct run *next;             /* arrival order (the commit order) */
    struct executor *ex;
    rd_kafka_message_t *msg;
    ax_dispatch_t d;
    run_state_t state;
    ax_delivery_t dlv;            /* delivery of the result message */
    void *result_buf;
    size_t result_len;
    int64_t started_at_ms;
    ax_cmd_t *cmd;
    int cancelled;                /* cancel requested (job overlap=cancel) */
} run_t;

typedef struct executor {
    ax_svc_t svc;
    run_t *head, *tail;           /* every message not yet committed */
    size_t tracked, running;
    struct event *ev_retry, *ev_deadline, *ev_kick, *ev_cancel;
    unsigned claim_failures;
    char **child_env_base;        /* environ minus AXCONF_* (secrets) */
    size_t child_env_n;
    int64_t ran, duplicates, dead_lettered;
} executor_t;

static void track(executor_t *ex, run_t *r) {
    if (ex->tail)
        ex->tail->next = r;
    else
        ex->head = r;
    ex->tail = r;
    ex->tracked++;
}

/* Commit every partition up to its first unfinished message. */
static void commit_ready(executor_t *ex) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
    rd_kafka_topic_partition_list_t *blocked = rd_kafka_topic_partition_list_new(8);
    run_t **pp = &ex->head, *prev = NULL;
    while (*pp) {
        run_t *r = *pp;
        const char *topic = rd_kafka_topic_name(r->msg->rkt);
        int blk = rd_kafka_topic_partition_list_find(blocked, topic, r->msg->partition) != NULL;
        if (r->state != RUN_DONE || blk) {
            if (!blk)
                rd_kafka_topic_partition_list_add(blocked, topic, r->msg->partition);
            prev = r;
            pp = &r->next;
            continue;
        }
        rd_kafka_topic_partition_t *p =
            rd_kafka_topic_partition_list_find(l, topic, r->msg->partition);
        if (!p)
            p = rd_kafka_topic_partition_list_add(l, topic, r->msg->partition);
        p->offset = r->msg->offset + 1;
        *pp = r->next;
        if (ex->tail == r)
            ex->tail = prev;
        ex->tracked--;
        rd_kafka_message_destroy(r->msg);
        ax_dispatch_clear(&r->d);
        free(r->result_buf);
        free(r);
    }
    if (l->cnt) {
        rd_kafka_resp_err_t err = rd_kafka_commit(ex->svc.consumer, l, 1);
        if (err)
            ax_warn("commit: %s (those messages will be seen again)", rd_kafka_err2str(err));
    }
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_topic_partition_list_destroy(blocked);
    if (ex->svc.stopping && ex->running == 0) {
        int reporting = 0;
        for (run_t *r = ex->head; r && !reporting; r = r->next)
            reporting = r->state == RUN_REPORTING;
        if (!reporting)
            event_base_loopbreak(ex->svc.base);
    }
}

/* ---- results ---------------------------------------------------------------- */

static void produce_result(run_t *r);

static void on_result_report(ax_delivery_t *d, rd_kafka_resp_err_t err) {
    run_t *r = (run_t *)((char *)d - offsetof(run_t, dlv));
    if (err) {
        ax_warn("instance %lld: result not delivered (%s); producing again",
                (long long)r->d.instance_id, rd_kafka_err2str(err));
        d->failed = 0;
        d->err = 0;
        produce_result(r);
        return;
    }
    r->state = RUN_DONE;
    commit_ready(r->ex);
}

static void produce_result(run_t *r) {
    ax_svc_t *svc = &r->ex->svc;
    char err[512], key[32];
    int klen = snprintf(key, sizeof key, "%lld", (long long)r->d.instance_id);
    r->dlv.on_report = on_result_report;
    while (ax_kafka_produce(svc->producer, svc->topic_callback, key, (size_t)klen, r->result_buf,
                            r->result_len, NULL, &r->dlv, err, sizeof err) < 0) {
        /* Only a full local queue gets here; it drains as the broker acks. */
        ax_warn("%s", err);
        rd_kafka_poll(svc->producer, 100);
    }
}

static void on_cmd_done(const ax_cmd_result_t *res, void *arg) {
    run_t *r = arg;
    executor_t *ex = r->ex;
    char errtext[512];
    ax_attempt_t a = {
        .instance_id = r->d.instance_id,
        .attempt = r->d.attempt,
        .worker = ex->svc.worker_id,
        .output = res->output ? res->output : "",
        .started_at_ms = r->started_at_ms,
        .finished_at_ms = ax_now_ms(),
        .trace_id = r->d.trace_id,
    };
    if (res->output)
        ax_utf8_sanitize(res->output, res->output_len);
    if (r->cancelled) {
        a.outcome = AX_OUTCOME_CANCELLED;
        a.error_class = "cancelled";
        snprintf(errtext, sizeof errtext, "cancelled: a newer run of the job started "
                                          "(overlap=cancel)%s",
                 r->cmd ? "; process group killed" : "; not started");
        a.retryable = 0;
    } else if (res->spawn_errno) {
        a.outcome = AX_OUTCOME_FAILED;
        a.error_class = "spawn";
        snprintf(errtext, sizeof errtext, "cannot execute '%s': %s", r->d.command[0],
                 strerror(res->spawn_errno));
        a.retryable = 0;
    } else if (res->timed_out) {
        a.outcome = AX_OUTCOME_TIMEOUT;
        a.error_class = "timeout";
        snprintf(errtext, sizeof errtext, "timed out after %lld ms; process group killed",
                 (long long)r->d.timeout_ms);
        a.retryable = 1;
    } else if (res->exited && res->exit_code == 0) {
        a.outcome = AX_OUTCOME_SUCCESS;
    } else if (res->exited) {
        a.outcome = AX_OUTCOME_FAILED;
        a.error_class = "exit";
        a.exit_code = res->exit_code;
        a.exit_code_set = 1;
        snprintf(errtext, sizeof errtext, "exited with status %d", res->exit_code);
        a.retryable = 1;
    } else {
        a.outcome = ex->svc.stopping ? AX_OUTCOME_CANCELLED : AX_OUTCOME_FAILED;
        a.error_class = ex->svc.stopping ? "shutdown" : "signal";
        snprintf(errtext, sizeof errtext, "killed by signal %d (%s)", res->term_signal,
                 strsignal(res->term_signal));
        a.retryable = 1;
    }
    if (a.outcome == AX_OUTCOME_SUCCESS && res->exited) {
        a.exit_code = 0;
        a.exit_code_set = 1;
    }
    if (a.outcome != AX_OUTCOME_SUCCESS)
        a.error = errtext;
    r->cmd = NULL;
    ex->running--;
    /* A slot is free: fetch more now. The queue's wake-up pipe only fires
     * when the queue goes from empty to non-empty, and it is not empty. */
    event_active(ex->ev_kick, 0, 0);
    ax_info("instance %lld attempt %d: %s%s%s (%lld ms)", (long long)a.instance_id,
            (int)a.attempt, ax_outcome_name(a.outcome), a.error ? ": " : "",
            a.error ? a.error : "", (long long)res->duration_ms);
    if (ax_attempt_encode(&a, &r->result_buf, &r->result_len) < 0) {
        ax_error("instance %lld: cannot encode result", (long long)a.instance_id);
        r->state = RUN_DONE;
        commit_ready(ex);
        return;
    }
    r->state = RUN_REPORTING;
    ex->ran++;
    produce_result(r);
}

/* ---- claim and start -------------------------------------------------------- */

static char **child_env(executor_t *ex, const run_t *r) {
    char **env = calloc(ex->child_env_n + 8, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < ex->child_env_n; i++)
        env[k++] = ex->child_env_base[i];
    asprintf(&env[k++], "AX_INSTANCE_ID=%lld", (long long)r->d.instance_id);
    asprintf(&env[k++], "AX_JOB=%s", r->d.job ? r->d.job : "");
    asprintf(&env[k++], "AX_ATTEMPT=%d", (int)r->d.attempt);
    asprintf(&env[k++], "AX_IDEMPOTENCY_KEY=%s", r->d.idempotency_key);
    asprintf(&env[k++], "AX_TRACE_ID=%s", r->d.trace_id);
    asprintf(&env[k++], "AX_SHARD_INDEX=0");
    asprintf(&env[k++], "AX_SHARD_TOTAL=1");
    return env;
}

static void start_run(executor_t *ex, run_t *r) {
    char err[256];
    char **env = child_env(ex, r);
    ax_cmd_spec_t spec = {
        .argv = r->d.command,
        .env = env,
        .stdin_data = r->d.payload,
        .stdin_len = r->d.payload_len,
        .timeout_ms = r->d.timeout_ms,
        .kill_grace_ms = ex->svc.conf.executor_kill_grace_ms,
        .output_cap = (size_t)ex->svc.conf.executor_output_cap,
    };
    r->started_at_ms = ax_now_ms();
    r->state = RUN_RUNNING;
    ex->running++;
    r->cmd = ax_cmd_start(ex->svc.base, &spec, on_cmd_done, r, err, sizeof err);
    for (size_t i = ex->child_env_n; env && env[i]; i++)
        free(env[i]);
    free(env);
    if (!r->cmd) {
        ax_cmd_result_t res = {.spawn_errno = ENOMEM};
        ax_error("instance %lld: %s", (long long)r->d.instance_id, err);
        on_cmd_done(&res, r);
    }
}

/* Claim every RUN_NEW run (CAS), mark the winners RUNNING, start them. A
 * run already LOCKED by this worker (a retried claim) counts as won. */
static int claim_new(executor_t *ex) {
    ax_svc_t *svc = &ex->svc;
    ax_strbuf_t ids = {0}, att = {0}, lease = {0};
    ax_pgarr_begin(&ids);
    ax_pgarr_begin(&att);
    ax_pgarr_begin(&lease);
    size_t n = 0;
    for (run_t *r = ex->head; r; r = r->next)
        if (r->state == RUN_NEW) {
            ax_pgarr_int(&ids, r->d.instance_id);
            ax_pgarr_int(&att, r->d.attempt);
            ax_pgarr_int(&lease, r->d.timeout_ms + svc->conf.executor_lease_grace_ms);
            n++;
        }
    ax_pgarr_end(&ids);
    ax_pgarr_end(&att);
    ax_pgarr_end(&lease);
    int rc = 0;
    if (n == 0)
        goto out;
    char err[1024];
    const char *p[] = {svc->worker_id, ids.s, att.s, lease.s};
    PGresult *res;
    /* One statement claims the batch and marks the winners RUNNING: two
     * transitions, each timestamped, in one commit. */
    rc = ax_pg_exec(svc->pg,
                    "WITH claimed AS ("
                    "  UPDATE job_instance j SET state = 'LOCKED', worker = $1, locked_at = clock_timestamp(),"
                    "    lease_expires_at = now() + u.lease * interval '1 millisecond'"
                    "  FROM unnest($2::bigint[], $3::int[], $4::bigint[]) AS u(id, attempt, lease)"
                    "  WHERE j.id = u.id AND j.attempt = u.attempt AND j.state = 'SCHEDULED'"
                    "  RETURNING j.id)"
                    " SELECT id FROM claimed",
                    4, p, NULL, NULL, &res, err, sizeof err);
    if (rc < 0) {
        ax_warn("claim: %s", err);
        goto out;
    }
    int won = PQntuples(res);
    ax_strbuf_t wids = {0};
    ax_pgarr_begin(&wids);
    for (int i = 0; i < won; i++)
        ax_pgarr_int(&wids, ax_pg_int(res, i, 0));
    ax_pgarr_end(&wids);
    PQclear(res);
    /* LOCKED -> RUNNING for every instance this worker holds in this batch
     * (also ones locked by an earlier try whose RUNNING step failed). */
    const char *q[] = {svc->worker_id, ids.s};
    rc = ax_pg_exec(svc->pg,
                    "UPDATE job_instance SET state = 'RUNNING', running_at = clock_timestamp()"
                    " WHERE id = ANY($2::bigint[]) AND state = 'LOCKED' AND worker = $1"
                    " RETURNING id, cancel_requested_at IS NOT NULL",
                    2, q, NULL, NULL, &res, err, sizeof err);
    ax_strbuf_free(&wids);
    if (rc < 0) {
        ax_warn("mark running: %s", err);
        goto out;
    }
    int nrun = PQntuples(res);
    for (run_t *r = ex->head; r; r = r->next) {
        if (r->state != RUN_NEW)
            continue;
        int mine = 0, cancel = 0;
        for (int i = 0; i < nrun && !mine; i++)
            if (ax_pg_int(res, i, 0) == r->d.instance_id) {
                mine = 1;
                cancel = strcmp(PQgetvalue(res, i, 1), "t") == 0;
            }
        if (mine && cancel) {
            ax_cmd_result_t none = {0};
            r->cancelled = 1;
            r->state = RUN_RUNNING;
            r->started_at_ms = ax_now_ms();
            ex->running++;
            on_cmd_done(&none, r);
        } else if (mine) {
            start_run(ex, r);
        } else {
            ex->duplicates++;
            ax_info("instance %lld attempt %d: claim lost (duplicate or stale dispatch); dropped",
                    (long long)r->d.instance_id, (int)r->d.attempt);
            r->state = RUN_DONE;
        }
    }
    PQclear(res);
    if ((int)n > nrun)
        ax_pg_count(svc->pg, "executor.claims_lost", (int64_t)n - nrun);
    ex->claim_failures = 0;
out:
    ax_strbuf_free(&ids);
    ax_strbuf_free(&att);
    ax_strbuf_free(&lease);
    return rc;
}

/* Cancel requests (a newer run of a job with overlap=cancel started): look
 * at the running instances once a second and kill the cancelled ones. */
static void on_cancel_poll(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    if (ex->running == 0)
        return;
    ax_strbuf_t ids = {0};
    ax_pgarr_begin(&ids);
    for (run_t *r = ex->head; r; r = r->next)
        if (r->state == RUN_RUNNING && r->cmd && !r->cancelled)
            ax_pgarr_int(&ids, r->d.instance_id);
    ax_pgarr_end(&ids);
    char err[512];
    const char *p[] = {ids.s};
    PGresult *res;
    if (ax_pg_exec(ex->svc.pg,
                   "SELECT id FROM job_instance WHERE id = ANY($1::bigint[])"
                   " AND cancel_requested_at IS NOT NULL",
                   1, p, NULL, NULL, &res, err, sizeof err) == 0) {
        for (int i = 0; i < PQntuples(res); i++)
            for (run_t *r = ex->head; r; r = r->next)
                if (r->state == RUN_RUNNING && r->cmd && !r->cancelled &&
                    r->d.instance_id == ax_pg_int(res, i, 0)) {
                    ax_info("instance %lld: cancel requested; killing its process group",
                            (long long)r->d.instance_id);
                    r->cancelled = 1;
                    ax_cmd_cancel(r->cmd);
                }
        PQclear(res);
    }
    ax_strbuf_free(&ids);
}

static void schedule_retry(executor_t *ex) {
    int64_t ms = ax_backoff_ms(ex->claim_failures++, ex->svc.conf.backoff_initial_ms,
                               ex->svc.conf.backoff_max_ms);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(ex->ev_retry, &tv);
}

static int has_new(executor_t *ex) {
    for (run_t *r = ex->head; r; r = r->next)
        if (r->state == RUN_NEW)
            return 1;
    return 0;
}

static void on_retry(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    if (claim_new(ex) < 0)
        schedule_retry(ex);
    commit_ready(ex);
}

static void on_dispatch_ready(void *arg) {
    executor_t *ex = arg;
    ax_svc_t *svc = &ex->svc;
    if (svc->stopping || has_new(ex))
        return; /* a claim is waiting for PostgreSQL: consume nothing more */
    size_t slots = (size_t)svc->conf.executor_slots;
    while (!svc->stopping && ex->running < slots) {
        size_t want = slots - ex->running;
        if (want > 256)
            want = 256;
        rd_kafka_message_t *msgs[256];
        ssize_t n = rd_kafka_consume_batch_queue(svc->cqueue, 0, msgs, want);
        if (n <= 0)
            break;
        int dlq = 0;
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_t *m = msgs[i];
            if (m->err) {
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                    ax_warn("kafka consume: %s", rd_kafka_message_errstr(m));
                rd_kafka_message_destroy(m);
                continue;
            }
            run_t *r = calloc(1, sizeof *r);
            r->ex = ex;
            r->msg = m;
            char reason[512];
            if (ax_svc_precheck(svc, m, AX_SCHEMA_DISPATCH, reason, sizeof reason) < 0 ||
                ax_dispatch_decode(m->payload, m->len, &r->d, reason, sizeof reason) < 0) {
                r->state = RUN_DONE;
                ax_svc_reject(svc, m, reason);
                ex->dead_lettered++;
                dlq = 1;
            } else if (strcmp(r->d.handler_kind, "command") != 0) {
                snprintf(reason, sizeof reason, "handler kind '%s' is not supported by this executor",
                         r->d.handler_kind);
                r->state = RUN_DONE;
                ax_svc_reject(svc, m, reason);
                dlq = 1;
            } else {
                r->state = RUN_NEW;
            }
            track(ex, r);
        }
        if (dlq)
            ax_svc_flush(svc, 35000); /* dead letters are durable before their commit */
        if (claim_new(ex) < 0) {
            schedule_retry(ex);
            break;
        }
        commit_ready(ex);
    }
}

static void on_kick(evutil_socket_t fd, short what, void *arg) { on_dispatch_ready(arg); }

static void on_shutdown_deadline(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    ax_warn("shutdown grace over: cancelling %zu running command(s)", ex->running);
    for (run_t *r = ex->head; r; r = r->next)
        if (r->cmd)
            ax_cmd_cancel(r->cmd);
}

/* SIGTERM: stop fetching, let running commands finish until the shutdown
 * grace (then cancel them), deliver their results, commit, leave the group.
 * Messages not yet claimed are not committed: the group gets them again. */
static void on_stop(ax_svc_t *svc) {
    executor_t *ex = (executor_t *)svc;
    ax_info("draining: %zu running, %zu uncommitted", ex->running, ex->tracked);
    int64_t ms = svc->conf.executor_shutdown_grace_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(ex->ev_deadline, &tv);
    commit_ready(ex);
}

int main(int argc, char **argv) {
    static executor_t ex;
    if (ax_svc_init(&ex.svc, "ax-executor", &argc, argv, usage, "executor") < 0)
        return 1;
    ax_svc_t *svc = &ex.svc;
    svc->on_stop = on_stop;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "AXCONF_", 7) != 0 && strncmp(*e, "AX_", 3) != 0)
            ex.child_env_n++;
    ex.child_env_base = calloc(ex.child_env_n + 1, sizeof *ex.child_env_base);
    size_t k = 0;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "AXCONF_", 7) != 0 && strncmp(*e, "AX_", 3) != 0)
            ex.child_env_base[k++] = *e;
    ex.ev_retry = evtimer_new(svc->base, on_retry, &ex);
    ex.ev_deadline = evtimer_new(svc->base, on_shutdown_deadline, &ex);
    ex.ev_kick = event_new(svc->base, -1, 0, on_kick, &ex);
    ex.ev_cancel = event_new(svc->base, -1, EV_PERSIST, on_cancel_poll, &ex);
    struct timeval one_s = {1, 0};
    event_add(ex.ev_cancel, &one_s);
    char group[300];
    ax_conf_topic(&svc->conf, "executor", group, sizeof group);
    svc->consumer = ax_kafka_consumer_new(&svc->conf, group, svc->name, NULL, 0);
    if (!svc->consumer) {
        fprintf(stderr, "ax-executor: configuration error in kafka.* keys\n");
        return 2;
    }
    char err[512];
    const char *topics[] = {svc->topic_dispatch};
    if (ax_kafka_subscribe(svc->consumer, topics, 1, err, sizeof err) < 0) {
        ax_error("%s", err);
        return 1;
    }
    svc->cqueue = rd_kafka_queue_get_consumer(svc->consumer);
    svc->cwatch = ax_kafka_watch(svc->base, svc->cqueue, 100, on_dispatch_ready, &ex);
    ax_info("executing %s with %lld slots", svc->topic_dispatch, (long long)svc->conf.executor_slots);
    event_base_dispatch(svc->base);
    ax_info("stopped: %lld attempts run, %lld duplicate dispatches dropped, %lld dead-lettered",
            (long long)ex.ran, (long long)ex.duplicates, (long long)ex.dead_lettered);
    ax_kafka_watch_free(svc->cwatch);
    svc->cwatch = NULL;
    rd_kafka_queue_destroy(svc->cqueue);
    svc->cqueue = NULL;
    rd_kafka_consumer_close(svc->consumer);
    rd_kafka_flush(svc->producer, 10000);
    event_free(ex.ev_retry);
    event_free(ex.ev_deadline);
    event_free(ex.ev_kick);
    event_free(ex.ev_cancel);
    free(ex.child_env_base);
    ax_svc_destroy(svc);
    return 0;
}
