/*
 * service.c — the scaffolding every ax service runs in (see ax/service.h).
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "ax/service.h"
#include "ax/store_migrate.h"
#include "ax/tzfile.h"

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    ax_svc_t *svc = arg;
    if (svc->stopping) {
        ax_warn("second signal: exiting now");
        _exit(1);
    }
    ax_info("signal %d (%s): stopping", (int)sig,
            sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGQUIT");
    svc->stopping = 1;
    if (svc->on_stop)
        svc->on_stop(svc);
    else
        event_base_loopbreak(svc->base);
}

/* ---- SIGHUP ------------------------------------------------------------------------------- */

static int reloadable(const ax_svc_t *svc, const char *key) {
    if (strcmp(key, "log.level") == 0)
        return 1;
    for (const char *const *k = svc->reloadable; k && *k; k++)
        if (strcmp(*k, key) == 0)
            return 1;
    return 0;
}

typedef struct {
    ax_svc_t *svc;
    int applied, restart;
} reload_tally_t;

static void log_change(const char *key, const char *old, const char *now, void *arg) {
    reload_tally_t *t = arg;
    const char *o = *old ? old : "(unset)", *n = *now ? now : "(unset)";
    /* the same shown twice: a URL whose path or query changed (not shown) */
    int secret = strcmp(o, "<redacted>") == 0 || strcmp(n, "<redacted>") == 0 ||
                 strcmp(o, n) == 0;
    if (reloadable(t->svc, key)) {
        t->applied++;
        if (secret)
            ax_info("SIGHUP: %s changed (value not shown)", key);
        else
            ax_info("SIGHUP: %s: %s → %s", key, o, n);
    } else {
        t->restart++;
        if (secret)
            ax_warn("SIGHUP: %s changed (value not shown): needs a restart, not applied", key);
        else
            ax_warn("SIGHUP: %s: %s → %s needs a restart, not applied", key, o, n);
    }
}

int ax_svc_reload(ax_svc_t *svc) {
    ax_conf_t n;
    char err[1024] = "";
    ax_conf_init(&n);
    if (ax_conf_reload(&n, svc->argc0, svc->argv0, err, sizeof err) < 0 ||
        (svc->reload_check && svc->reload_check(svc, &n, err, sizeof err) < 0)) {
        ax_error("SIGHUP: configuration not reloaded: %s", err);
        ax_conf_free(&n);
        return AX_ERR_INVALID;
    }
    reload_tally_t t = {svc, 0, 0};
    ax_conf_diff(&svc->conf, &n, log_change, &t);
    ax_info("SIGHUP: configuration reloaded (%d change(s) applied, %d needing a restart)",
            t.applied, t.restart);
    /* Swap the reloadable keys in: n then holds their old values. */
    ax_conf_swap_key(&svc->conf, &n, "log.level");
    for (const char *const *k = svc->reloadable; k && *k; k++)
        ax_conf_swap_key(&svc->conf, &n, *k);
    ax_log_level_t lvl = AX_LOG_INFO;
    ax_log_level_parse(svc->conf.log_level, &lvl);
    ax_log_init(svc->name, lvl);
    ax_debug("SIGHUP: logging at level %s", svc->conf.log_level);
    if (svc->on_reload)
        svc->on_reload(svc, &n);
    ax_conf_free(&n);
    return 0;
}

static void on_hup(evutil_socket_t sig, short what, void *arg) {
    ax_info("signal %d (SIGHUP): reloading the configuration", (int)sig);
    ax_svc_reload(arg);
}

static void on_usr(evutil_socket_t sig, short what, void *arg) {
    ax_warn("signal %d (%s): ignored (SIGHUP reloads the configuration, SIGTERM stops)",
            (int)sig, sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
}

static void producer_poll(void *arg) {
    ax_svc_t *svc = arg;
    rd_kafka_poll(svc->producer, 0);
}

/* Record why the program is to end (svc->end_msg, shown by
 * ax_svc_exit_status) and with which status; returns rc. */
__attribute__((format(printf, 4, 5))) static int svc_fail(ax_svc_t *svc, int status, int rc,
                                                          const char *fmt, ...) {
    svc->ended = 1;
    svc->exit_status = status;
    svc->end_msg[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(svc->end_msg, sizeof svc->end_msg, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* Before ax_svc_init returns an error after starting the producer: the
 * program exits next, and no librdkafka thread may outlive it (exit()
 * racing one crashed in OpenSSL's cleanup). */
static void producer_drop(ax_svc_t *svc) {
    ax_kafka_watch_free(svc->pwatch);
    svc->pwatch = NULL;
    rd_kafka_queue_destroy(svc->pqueue);
    svc->pqueue = NULL;
    rd_kafka_destroy(svc->producer);
    svc->producer = NULL;
}

/* ax_dlq_messages_total's reason label: a bounded class of the free-text
 * reason (docs/METRICS.md). */
static const char *const dlq_reasons[] = {"too_large", "schema", "no_pool", "persist", "invalid",
                                          NULL};

static size_t dlq_class(const char *reason) {
    if (strstr(reason, "exceeds message.max.bytes"))
        return 0;
    if (strstr(reason, "schema id") || strstr(reason, "magic byte") || strstr(reason, "framing"))
        return 1;
    if (strstr(reason, "has no pool"))
        return 2;
    if (strstr(reason, "cannot persist"))
        return 3;
    return 4;
}

static void svc_metrics(ax_svc_t *svc) {
    char host[256];
    int port;
    if (svc->metrics.srv && ax_metrics_listen_parse(svc->conf.metrics_listen, host, sizeof host,
                                                    &port, NULL, 0) == 0)
        ax_info("metrics on http://%s%s%s:%d/metrics", strchr(host, ':') ? "[" : "", host,
                strchr(host, ':') ? "]" : "", ax_metrics_server_port(svc->metrics.srv));
    svc->m_dlq = ax_metrics_counter(svc->metrics.reg, "ax_dlq_messages_total",
                                    "Messages dead-lettered by this process, by reason class.",
                                    "reason", dlq_reasons);
}

int ax_svc_init(ax_svc_t *svc, const char *name, int *argc, char **argv, const char *usage,
                const char *used_by) {
    char err[1024];
    memset(svc, 0, sizeof *svc);
    svc->name = name;
    svc->argv0 = calloc((size_t)*argc + 1, sizeof *svc->argv0);
    if (!svc->argv0)
        return AX_ERR_NOMEM;
    for (int i = 0; i < *argc; i++)
        if (!(svc->argv0[i] = strdup(argv[i])))
            return AX_ERR_NOMEM;
    svc->argc0 = *argc;
    svc->usage = usage;
    svc->used_by = used_by;
    int rc = ax_conf_args(&svc->conf, argc, argv, &svc->conf_action, err, sizeof err);
    if (rc < 0)
        return svc_fail(svc, 2, rc, "configuration error: %s", err);
    if (svc->conf_action != AX_CONF_RUN)
        return svc_fail(svc, 0, AX_SVC_END, NULL);
    ax_log_level_t lvl = AX_LOG_INFO;
    ax_log_level_parse(svc->conf.log_level, &lvl);
    ax_log_init(name, lvl);
    ax_log_set_json(svc->conf.log_format && strcmp(svc->conf.log_format, "json") == 0);
    ax_tz_set_loader(ax_tzfile_load);
    if (*argc > 1)
        return svc_fail(svc, 2, AX_ERR_INVALID, "unexpected argument '%s' (see --help)", argv[1]);
    if (svc->conf.worker_id && *svc->conf.worker_id) {
        snprintf(svc->worker_id, sizeof svc->worker_id, "%s", svc->conf.worker_id);
    } else {
        char host[64] = "localhost";
        gethostname(host, sizeof host - 1);
        snprintf(svc->worker_id, sizeof svc->worker_id, "%s:%d", host, (int)getpid());
    }
    ax_conf_topic(&svc->conf, "submit", svc->topic_submit, sizeof svc->topic_submit);
    ax_conf_topic(&svc->conf, "dispatch", svc->topic_dispatch, sizeof svc->topic_dispatch);
    ax_conf_topic(&svc->conf, "callback", svc->topic_callback, sizeof svc->topic_callback);
    ax_conf_topic(&svc->conf, "results", svc->topic_results, sizeof svc->topic_results);
    ax_conf_topic(&svc->conf, "dlq", svc->topic_dlq, sizeof svc->topic_dlq);

    if (ax_codec_init(err, sizeof err) < 0)
        return svc_fail(svc, 1, AX_ERR_INVALID, "codec: %s", err);
    /* before any Kafka handle, so the service's own report statistics */
    if (ax_metrics_endpoint_start(&svc->metrics, &svc->conf, name, err, sizeof err) < 0)
        return svc_fail(svc, 1, AX_ERR_IO, "%s", err);
    svc_metrics(svc);
    svc->pg = ax_pg_new(&svc->conf, name, err, sizeof err);
    if (!svc->pg)
        return svc_fail(svc, 2, AX_ERR_INVALID, "configuration error: %s", err);
    /* Validate kafka.* before waiting on any server, so a typo exits 2 now. */
    svc->producer = ax_kafka_producer_new(&svc->conf, name, err, sizeof err);
    if (!svc->producer)
        return svc_fail(svc, 2, AX_ERR_INVALID, "configuration error: %s", err);
    signal(SIGPIPE, SIG_IGN);
    svc->base = event_base_new();
    if (!svc->base)
        return AX_ERR_NOMEM;
    svc->ev_sigterm = evsignal_new(svc->base, SIGTERM, on_signal, svc);
    svc->ev_sigint = evsignal_new(svc->base, SIGINT, on_signal, svc);
    event_add(svc->ev_sigterm, NULL);
    event_add(svc->ev_sigint, NULL);
    /* No signal an operator commonly sends ends a service without a word. */
    svc->ev_other[0] = evsignal_new(svc->base, SIGHUP, on_hup, svc);
    svc->ev_other[1] = evsignal_new(svc->base, SIGQUIT, on_signal, svc);
    svc->ev_other[2] = evsignal_new(svc->base, SIGUSR1, on_usr, svc);
    svc->ev_other[3] = evsignal_new(svc->base, SIGUSR2, on_usr, svc);
    for (size_t i = 0; i < AX_ARRAY_SIZE(svc->ev_other); i++)
        if (svc->ev_other[i])
            event_add(svc->ev_other[i], NULL);
    svc->pqueue = rd_kafka_queue_get_main(svc->producer);
    svc->pwatch = ax_kafka_watch(svc->base, svc->pqueue, 100, producer_poll, svc);
    ax_info("starting as %s (topics %s*)", svc->worker_id, svc->conf.topic_prefix);
    /* Wait for PostgreSQL with the loop running between tries, so SIGTERM
     * (and SIGHUP) are handled while it is unreachable. */
    for (unsigned attempt = 0;; attempt++) {
        if (svc->stopping) {
            ax_info("stopped before PostgreSQL was reachable");
            producer_drop(svc);
            return svc_fail(svc, 0, AX_SVC_END, NULL);
        }
        if (ax_pg_ensure(svc->pg, err, sizeof err) == 0)
            break;
        int64_t wait = ax_backoff_ms(attempt, svc->conf.backoff_initial_ms,
                                     svc->conf.backoff_max_ms);
        ax_warn("%s; retrying in %lld ms", err, (long long)wait);
        struct timeval tv = AX_TV_MS(wait);
        event_base_loopexit(svc->base, &tv);
        event_base_dispatch(svc->base);
    }
    ax_info("connected to PostgreSQL");
    /* Before anything is written: the schema must be the one this build
     * knows (an older or newer one is an operator error, exit 2). */
    int src = ax_store_schema_check(svc->pg, err, sizeof err);
    if (src < 0)
        producer_drop(svc);
    if (src == AX_ERR_INVALID)
        return svc_fail(svc, 2, src, "schema version: %s", err);
    if (src < 0)
        return svc_fail(svc, 1, src, "schema version: cannot read it: %s", err);
    return 0;
}

int ax_svc_precheck(ax_svc_t *svc, const rd_kafka_message_t *msg, int32_t want_schema,
                    char *reason, size_t len) {
    if ((int64_t)msg->len > svc->conf.message_max_bytes) {
        snprintf(reason, len, "message of %zu bytes exceeds message.max.bytes %lld", msg->len,
                 (long long)svc->conf.message_max_bytes);
        return -1;
    }
    int32_t id;
    if (ax_codec_peek_schema(msg->payload, msg->len, &id, reason, len) < 0)
        return -1;
    if (id != want_schema) {
        snprintf(reason, len, "unknown schema id %d on %s (expected %d)", (int)id,
                 rd_kafka_topic_name(msg->rkt), (int)want_schema);
        return -1;
    }
    return 0;
}

int ax_svc_reject(ax_svc_t *svc, const rd_kafka_message_t *msg, const char *reason) {
    return ax_svc_reject_about(svc, msg, reason, NULL);
}

int ax_svc_reject_about(ax_svc_t *svc, const rd_kafka_message_t *msg, const char *reason,
                        const ax_dlq_about_t *about) {
    char err[512];
    ax_warn("dead-lettering %s [%d] @%lld: %s", rd_kafka_topic_name(msg->rkt),
            (int)msg->partition, (long long)msg->offset, reason);
    svc->dlq_count++;
    ax_metric_inc(svc->m_dlq, dlq_class(reason));
    return ax_kafka_dlq(svc->producer, svc->topic_dlq, msg, reason, svc->name, about,
                        (size_t)svc->conf.message_max_bytes, &svc->dlv, err, sizeof err);
}

int ax_svc_flush(ax_svc_t *svc, int timeout_ms) {
    int rc = ax_kafka_wait(svc->producer, &svc->dlv, timeout_ms);
    if (rc < 0)
        ax_warn("kafka: %d message(s) not delivered: %s", svc->dlv.failed + svc->dlv.pending,
                rd_kafka_err2str(svc->dlv.err));
    svc->dlv.failed = 0;
    svc->dlv.err = 0;
    return rc;
}

static void release(rd_kafka_message_t **msgs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (msgs[i])
            rd_kafka_message_destroy(msgs[i]);
}

/* Whether partition (rkt, part) is in the assignment a. */
static int assigned(const rd_kafka_topic_partition_list_t *a, rd_kafka_topic_t *rkt,
                    int32_t part) {
    const char *topic = rd_kafka_topic_name(rkt);
    for (int i = 0; i < a->cnt; i++)
        if (a->elems[i].partition == part && strcmp(a->elems[i].topic, topic) == 0)
            return 1;
    return 0;
}

/* Drop the held records of partitions no longer assigned to this consumer:
 * revoked by a rebalance served while they waited (consume.linger.ms), or
 * lost with the group session (once the rebalance callback has unassigned
 * them: librdkafka's lost flag is not read, lest it outlive the loss).
 * Their offsets were never stored, so the
 * partition's new owner reads them again from its committed offset; taken
 * here as well, the two would race over them (the trigger's dedupe of
 * Kafka positions judged a late batch by an end offset that stopped moving
 * when the partition went: see WM_STALE in store/dispatch.c), and storing
 * their offsets fails ("Local: Erroneous state"). A batch waiting for the
 * retry of a failed offer does not poll the consumer, so a revocation is
 * served only after it: there the ingest's watermark rule is the guard. */
size_t ax_svc_drop_unassigned(ax_svc_t *svc) {
    if (!svc->consumer || svc->held_n == 0)
        return 0;
    /* Every batch is checked against a copy of the assignment, read again
     * after each rebalance (rd_kafka_assignment() is a round trip to
     * librdkafka's main thread): a revocation served while the batch
     * filled leaves records of a partition gone in it, and librdkafka 2.0's
     * changelog warns that its batch consume can hand over records of a
     * partition revoked during the call unless a rebalance callback makes
     * rebalancing sequential (ours does; "Poor Consumer batch API
     * messaging guarantees"). */
    unsigned long gen = ax_kafka_rebalances();
    if (!svc->assigned || gen != svc->assigned_gen) {
        rd_kafka_topic_partition_list_t *a = NULL;
        if (rd_kafka_assignment(svc->consumer, &a) != RD_KAFKA_RESP_ERR_NO_ERROR || !a)
            return 0; /* read again before the next offer */
        /* kept as names and numbers only: the list librdkafka returns
         * holds references to its partitions, and one kept past the
         * consumer's close made rd_kafka_destroy() wait for it forever (a
         * service hung at exit) */
        rd_kafka_topic_partition_list_t *copy = rd_kafka_topic_partition_list_new(a->cnt);
        for (int i = 0; i < a->cnt; i++)
            rd_kafka_topic_partition_list_add(copy, a->elems[i].topic, a->elems[i].partition);
        rd_kafka_topic_partition_list_destroy(a);
        if (svc->assigned)
            rd_kafka_topic_partition_list_destroy(svc->assigned);
        svc->assigned = copy;
        svc->assigned_gen = gen;
    }
    size_t k = 0, dropped = 0;
    rd_kafka_topic_t *last_rkt = NULL;
    int32_t last_part = -1;
    int keep = 0;
    for (size_t i = 0; i < svc->held_n; i++) {
        rd_kafka_message_t *m = svc->held[i];
        if (m->rkt != last_rkt || m->partition != last_part) { /* records come in runs */
            last_rkt = m->rkt;
            last_part = m->partition;
            keep = assigned(svc->assigned, m->rkt, m->partition);
        }
        if (keep) {
            svc->held[k++] = m;
        } else {
            rd_kafka_message_destroy(m);
            dropped++;
        }
    }
    if (!dropped)
        return 0;
    ax_info("dropped %zu held record(s) of partitions no longer assigned to this consumer "
            "(their new owner reads them again)",
            dropped);
    for (size_t i = k; i < svc->held_n; i++)
        svc->held[i] = NULL;
    svc->held_n = k;
    return dropped;
}

int64_t ax_svc_held_age_ms(const ax_svc_t *svc) {
    return svc->held_n ? ax_boot_ms() - svc->held_since : 0;
}

/* Offer the held batch to the service; when durable, store its offsets for
 * the periodic commit (consume.commit.interval.ms; 0: commit them now) and
 * release it. */
static void run_held(ax_svc_t *svc) {
    char err[512];
    ax_svc_drop_unassigned(svc);
    if (svc->held_n == 0) {
        svc->held_offered = 0;
        svc->held_failures = 0;
        return;
    }
    svc->dlv.failed = 0;
    svc->dlv.err = 0;
    int rc = svc->batch_fn(svc, svc->held, svc->held_n, svc->batch_arg);
    if (rc == 0 && svc->dlv.pending > 0)
        rc = ax_svc_flush(svc, 35000);
    if (rc == 0 && svc->dlv.failed)
        rc = AX_ERR_IO;
    if (rc == AX_ERR_IO) {
        int64_t wait = ax_backoff_ms(svc->held_failures++, svc->conf.backoff_initial_ms,
                                     svc->conf.backoff_max_ms);
        ax_warn("batch of %zu not durable yet; retrying in %lld ms", svc->held_n,
                (long long)wait);
        svc->held_retry_at = ax_mono_ms() + wait;
        return;
    }
    if (rc < 0)
        ax_error("batch of %zu failed permanently (rc %d); skipping it", svc->held_n, rc);
    int stored = svc->conf.consume_commit_interval_ms > 0;
    if ((stored ? ax_kafka_store_msgs : ax_kafka_commit_msgs)(svc->consumer, svc->held,
                                                              svc->held_n, err, sizeof err) < 0)
        ax_warn("%s (the batch will be seen again; its processing is idempotent)", err);
    else
        ax_debug("batch of %zu message(s) done and %s", svc->held_n,
                 stored ? "its offsets stored" : "committed");
    release(svc->held, svc->held_n);
    svc->held_n = 0;
    svc->held_offered = 0;
    svc->held_failures = 0;
}

/* Take what the queue has into held, up to batch_max; the number taken, or
 * -1 when the queue had nothing. */
static ssize_t fill_held(ax_svc_t *svc) {
    if (svc->held_n >= svc->batch_max)
        return 0;
    ssize_t n = rd_kafka_consume_batch_queue(svc->cqueue, 0, svc->held + svc->held_n,
                                             svc->batch_max - svc->held_n);
    if (n <= 0)
        return -1;
    size_t k = svc->held_n;
    for (ssize_t i = 0; i < n; i++) {
        rd_kafka_message_t *m = svc->held[svc->held_n + (size_t)i];
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                ax_warn("kafka consume: %s", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        svc->held[k++] = m;
    }
    if (svc->held_n == 0 && k > 0)
        svc->held_since = ax_boot_ms();
    ssize_t taken = (ssize_t)(k - svc->held_n);
    svc->held_n = k;
    return taken;
}

/* A batch not full whose first record has not waited consume.linger.ms yet
 * waits (the linger timer comes back for it): 1, else 0. now: ax_boot_ms(). */
static int held_lingers(ax_svc_t *svc, int64_t now) {
    int64_t left = svc->held_since + svc->linger_ms - now;
    if (svc->held_n >= svc->batch_max || left <= 0 || !svc->ev_linger)
        return 0;
    struct timeval tv = AX_TV_MS(left);
    event_add(svc->ev_linger, &tv);
    return 1;
}

/* Up to 64 batches, but not longer than CONSUME_BUDGET_MS: a backlog of
 * submissions (a burst) must not keep the service's other events (the
 * trigger's lease checks, due scan, lag samples, schedules; the callback's
 * results publisher) waiting; the rest is taken up again as soon as the loop
 * has run them. Under load one batch of trigger.batch rows takes longer than
 * the budget, so the loop turns after every batch: at 250 ms the trigger
 * ingested a burst for a quarter of a second at a time while a lag sample
 * that would have reopened the lanes, and the due scan, waited, and the
 * executors ran dry (BENCHMARKS.md, "Issue #13: the lag sample on demand").
 * Small batches (low load) still go several to a turn. */
#define CONSUME_BUDGET_MS 10
static void consumer_ready(void *arg) {
    ax_svc_t *svc = arg;
    int64_t start = ax_mono_ms();
    for (int rounds = 0; rounds < 64 && !svc->stopping; rounds++) {
        if (rounds && ax_mono_ms() - start >= CONSUME_BUDGET_MS) {
            ax_kafka_watch_kick(svc->cwatch);
            return;
        }
        if (svc->held_offered) {
            if (ax_mono_ms() < svc->held_retry_at)
                return;
            run_held(svc);
            if (svc->held_n)
                return;
        }
        ssize_t taken = fill_held(svc);
        if (svc->held_n == 0 || held_lingers(svc, ax_boot_ms()))
            return;
        svc->held_offered = 1;
        run_held(svc);
        if (taken < 0)
            return; /* the queue is empty */
    }
}

static void linger_done(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    consumer_ready(arg);
}

void ax_svc_consume_linger(ax_svc_t *svc, int64_t ms) {
    svc->linger_ms = ms < 0 ? 0 : ms;
    svc->linger_set = 1;
}

int ax_svc_consume(ax_svc_t *svc, const char *topic, const char *group, size_t batch_max,
                   ax_svc_batch_fn fn, void *arg) {
    char err[512];
    const ax_conf_t *c = &svc->conf;
    if (!svc->linger_set)
        svc->linger_ms = c->consume_linger_ms;
    ax_kafka_batching_t b = {.fetch_wait_ms = (int)c->consume_fetch_wait_max_ms,
                             .fetch_min_bytes = (int)c->consume_fetch_min_bytes,
                             .commit_interval_ms = (int)c->consume_commit_interval_ms};
    svc->consumer = ax_kafka_batch_consumer_new(c, group, svc->name, &b, err, sizeof err);
    if (!svc->consumer)
        return svc_fail(svc, 2, AX_ERR_INVALID, "configuration error: %s", err);
    const char *topics[] = {topic};
    if (ax_kafka_subscribe(svc->consumer, topics, 1, err, sizeof err) < 0)
        return svc_fail(svc, 1, AX_ERR_IO, "%s", err);
    svc->batch_fn = fn;
    svc->batch_arg = arg;
    svc->batch_max = batch_max;
    svc->held = calloc(batch_max, sizeof *svc->held);
    if (!svc->held)
        return AX_ERR_NOMEM;
    svc->held_cap = batch_max;
    svc->cqueue = rd_kafka_queue_get_consumer(svc->consumer);
    svc->cwatch = ax_kafka_watch(svc->base, svc->cqueue, 100, consumer_ready, svc);
    if (svc->linger_ms > 0 && !(svc->ev_linger = evtimer_new(svc->base, linger_done, svc)))
        return AX_ERR_NOMEM;
    ax_info("consuming %s as group %s", topic, group);
    return 0;
}

int ax_svc_set_batch_max(ax_svc_t *svc, size_t batch_max) {
    if (batch_max < 1)
        return AX_ERR_INVALID;
    if (batch_max > svc->held_cap) {
        rd_kafka_message_t **h = realloc(svc->held, batch_max * sizeof *h);
        if (!h)
            return AX_ERR_NOMEM;
        memset(h + svc->held_cap, 0, (batch_max - svc->held_cap) * sizeof *h);
        svc->held = h;
        svc->held_cap = batch_max;
    }
    svc->batch_max = batch_max;
    return 0;
}

int ax_svc_run(ax_svc_t *svc) {
    event_base_dispatch(svc->base);
    ax_info("shutting down");
    if (svc->consumer) {
        /* Uncommitted work is redelivered to the group: nothing is lost. */
        release(svc->held, svc->held_n);
        svc->held_n = 0;
        svc->held_offered = 0;
        if (svc->ev_linger)
            event_del(svc->ev_linger);
        ax_kafka_watch_free(svc->cwatch);
        svc->cwatch = NULL;
        rd_kafka_queue_destroy(svc->cqueue);
        svc->cqueue = NULL;
        rd_kafka_consumer_close(svc->consumer);
    }
    rd_kafka_flush(svc->producer, 10000);
    return 0;
}

void ax_svc_destroy(ax_svc_t *svc) {
    ax_kafka_watch_free(svc->cwatch);
    ax_kafka_watch_free(svc->pwatch);
    if (svc->cqueue)
        rd_kafka_queue_destroy(svc->cqueue);
    if (svc->pqueue)
        rd_kafka_queue_destroy(svc->pqueue);
    if (svc->consumer)
        rd_kafka_destroy(svc->consumer);
    if (svc->producer)
        rd_kafka_destroy(svc->producer);
    if (svc->ev_linger)
        event_free(svc->ev_linger);
    if (svc->ev_sigterm)
        event_free(svc->ev_sigterm);
    if (svc->ev_sigint)
        event_free(svc->ev_sigint);
    for (size_t i = 0; i < AX_ARRAY_SIZE(svc->ev_other); i++)
        if (svc->ev_other[i])
            event_free(svc->ev_other[i]);
    for (int i = 0; svc->argv0 && i < svc->argc0; i++)
        free(svc->argv0[i]);
    free(svc->argv0);
    if (svc->base)
        event_base_free(svc->base);
    ax_pg_destroy(svc->pg);
    ax_metrics_endpoint_stop(&svc->metrics);
    free(svc->held);
    if (svc->assigned)
        rd_kafka_topic_partition_list_destroy(svc->assigned);
    ax_codec_shutdown();
    ax_conf_free(&svc->conf);
}

struct event *ax_svc_every(ax_svc_t *svc, int64_t ms, event_callback_fn fn, void *arg) {
    struct event *ev = event_new(svc->base, -1, EV_PERSIST, fn, arg);
    struct timeval tv = AX_TV_MS(ms);
    if (ev && event_add(ev, &tv) < 0) {
        event_free(ev);
        ev = NULL;
    }
    return ev;
}
