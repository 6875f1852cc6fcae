/*
 * report.c — the end of a run: its Attempt record produced to the
 * callback topic, and only once Kafka acknowledged it, the dispatch
 * offset committed — per partition, up to the first message whose work is
 * not durable, so a crash re-delivers exactly the unfinished messages.
 * Also the environment handed to commands.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/log.h"
#include "executor.h"

static void produce_result(run_t *r);

static void on_result_report(ax_delivery_t *d, rd_kafka_resp_err_t err) {
    run_t *r = (run_t *)((char *)d - offsetof(run_t, dlv));
    if (err) {
        ax_log_inst(AX_LOG_WARN, r->d.instance_id, r->d.job, r->d.trace_id,
                    "instance %lld: result not delivered (%s); producing again",
                    (long long)r->d.instance_id, rd_kafka_err2str(err));
        d->failed = 0;
        d->err = 0;
        produce_result(r);
        return;
    }
    run_set_state(r, RUN_DONE);
    /* Commit once per executor.commit.interval.ms, not once per result: a
     * walk of the tracked list and an offset commit per job do not scale. */
    if (!evtimer_pending(r->ex->ev_commit, NULL))
        event_add(r->ex->ev_commit,
                  &(struct timeval)AX_TV_MS(r->ex->svc.conf.executor_commit_interval_ms));
}

static void produce_result(run_t *r) {
    ax_svc_t *svc = &r->ex->svc;
    char err[512], key[32];
    int klen = snprintf(key, sizeof key, "%lld", (long long)r->d.instance_id);
    r->dlv.on_report = on_result_report;
    /* in chunks of produce.partition.chunk: a producer batch touches one
     * or two partitions at low load, not every one */
    r->dlv.part_hint = ax_kafka_chunk_hint(r->ex->part_seq++, svc->conf.produce_partition_chunk);
    while (ax_kafka_produce(svc->producer, svc->topic_callback, key, (size_t)klen, r->result_buf,
                            r->result_len, NULL, &r->dlv, err, sizeof err) < 0) {
        /* Only a full local queue gets here; it drains as the broker acks. */
        ax_warn("%s", err);
        rd_kafka_poll(svc->producer, 100);
    }
}

/* Stopped by us (r->stop_why): say why, whatever the handler saw. */
static void stopped_attempt(const run_t *r, ax_attempt_t *a, char *text, size_t len) {
    a->error_class = (char *)r->stop_why;
    a->retryable = strcmp(r->stop_why, "cancelled") != 0;
    a->outcome =
        strcmp(r->stop_why, "lease_lost") == 0 ? AX_OUTCOME_TIMEOUT : AX_OUTCOME_CANCELLED;
    a->exit_code_set = 0;
    a->kind = AX_ATTEMPT_RUN;
    snprintf(text, len, "%s",
             strcmp(r->stop_why, "cancelled") == 0
                 ? "cancelled: its cancellation was requested (overlap=cancel: a newer "
                   "run started; or axctl instance cancel / job delete --cancel-pending)"
             : strcmp(r->stop_why, "shutdown") == 0
                 ? "cancelled: the executor's shutdown grace ran out"
                 : "the lease could not be renewed: stopped (the instance is recovered "
                   "elsewhere)");
}

/* Encode a into r->result_buf. The output is what can be large
 * (executor.output.cap may exceed message.max.bytes): keep what fits, with
 * room for the fields the final result adds, so the result is never
 * refused as too large. */
static int encode_result(executor_t *ex, run_t *r, ax_attempt_t *a, char *out) {
    int rc = ax_attempt_encode(a, &r->result_buf, &r->result_len);
    size_t max = (size_t)ex->svc.conf.message_max_bytes;
    if (rc == 0 && r->result_len > max && out) {
        size_t over = r->result_len - max + (max > 16384 ? 4096 : max / 4), len = strlen(out);
        size_t keep = len > over ? len - over : 0;
        out[keep] = '\0';
        ax_utf8_sanitize(out, keep);
        free(r->result_buf);
        r->result_buf = NULL;
        rc = ax_attempt_encode(a, &r->result_buf, &r->result_len);
        ax_log_inst(AX_LOG_WARN, a->instance_id, r->d.job, a->trace_id,
                    "instance %lld: output cut to %zu bytes to fit message.max.bytes %zu",
                    (long long)a->instance_id, keep, max);
    }
    return rc;
}

static char *output_copy(const handler_result_t *res) {
    if (!res->output || !res->output_len)
        return NULL;
    char *out = malloc(res->output_len + 1);
    if (out) {
        memcpy(out, res->output, res->output_len);
        out[res->output_len] = 0;
        ax_utf8_sanitize(out, res->output_len);
    }
    return out;
}

void run_done(run_t *r, const handler_result_t *res) {
    executor_t *ex = r->ex;
    char text[600];
    fence_clear(ex, r);
    ax_attempt_t a = {
        .instance_id = r->d.instance_id,
        .attempt = r->d.attempt,
        .worker = ex->svc.worker_id,
        .outcome = res->outcome,
        .exit_code = res->exit_code,
        .exit_code_set = res->exit_code_set,
        .error_class = (char *)res->error_class,
        .error = res->outcome == AX_OUTCOME_SUCCESS ? NULL : text,
        .retryable = res->retryable,
        .started_at_ms = r->started_at_ms,
        .finished_at_ms = ax_now_ms(),
        .trace_id = r->d.trace_id,
        .kind = AX_ATTEMPT_RUN,
    };
    snprintf(text, sizeof text, "%s", res->error);
    if (r->probe && a.outcome == AX_OUTCOME_SUCCESS) {
        /* the callback splits the parent; error_class "probe" stays until
         * every callback reads the kind */
        a.kind = AX_ATTEMPT_PROBE;
        a.error_class = "probe";
    }
    if (r->stop_why)
        stopped_attempt(r, &a, text, sizeof text);
    char *out = output_copy(res);
    a.output = out ? out : "";
    xm_done(ex, r, (int)a.outcome);
    if (r->state == RUN_RUNNING) {
        ex->running--;
        r->pool->core.running--;
    }
    ax_log_inst(AX_LOG_INFO, a.instance_id, r->d.job, r->d.trace_id,
                "instance %lld attempt %d: %s%s%s (%lld ms)", (long long)a.instance_id,
                (int)a.attempt, ax_outcome_name(a.outcome), a.error ? ": " : "",
                a.error ? a.error : "", (long long)(ax_mono_ms() - r->started_mono));
    int rc = encode_result(ex, r, &a, out);
    free(out);
    /* A slot is free: start what waits, fetch more. */
    maybe_resume(ex);
    event_active(ex->ev_kick, 0, 0);
    if (rc < 0) {
        ax_log_inst(AX_LOG_ERROR, a.instance_id, r->d.job, r->d.trace_id,
                    "instance %lld: cannot encode result", (long long)a.instance_id);
        run_set_state(r, RUN_DONE);
        commit_soon(ex);
        return;
    }
    run_set_state(r, RUN_REPORTING);
    ex->ran++;
    produce_result(r);
}

/* After the commit: stop the loop once draining is over. */
static void maybe_stopped(executor_t *ex) {
    if (!ex->svc.stopping || ex->running != 0 || ex->nstate[RUN_REPORTING] != 0)
        return;
    event_base_loopbreak(ex->svc.base);
}

/* A (topic, partition) of the walk below: its topic by index into
 * ex->ln.topics (or by name when a message came from a topic not
 * subscribed, topic_ix -1: never in practice). */
typedef struct tpart {
    int ix;
    int32_t partition;
    const char *name;
    int64_t offset; /* next offset to commit; -1: blocked */
} tpart_t;

static tpart_t *tpart_find(tpart_t *v, size_t n, const run_t *r) {
    for (size_t i = 0; i < n; i++)
        if (v[i].partition == r->msg->partition && v[i].ix == r->topic_ix &&
            (r->topic_ix >= 0 || strcmp(v[i].name, rd_kafka_topic_name(r->msg->rkt)) == 0))
            return &v[i];
    return NULL;
}

/* Takes every RUN_DONE run at the head of its partition's messages (in
 * arrival order) off the tracked list onto *ret_dead and notes in v the
 * offset to commit; returns how many partitions v holds (*ret_v, malloc'd;
 * its names point into the dead runs' messages). The walk ends once every
 * DONE run was seen: what follows cannot be committed. */
static size_t collect_done(executor_t *ex, tpart_t **ret_v, run_t **ret_dead) {
    tpart_t *v = NULL;
    size_t n = 0, cap = 0, left = ex->nstate[RUN_DONE];
    run_t **pp = &ex->head, *prev = NULL;
    while (*pp && left > 0) {
        run_t *r = *pp;
        tpart_t *p = tpart_find(v, n, r);
        if (!p) {
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                tpart_t *nv = realloc(v, nc * sizeof *nv);
                if (!nv)
                    break; /* committed later */
                v = nv;
                cap = nc;
            }
            p = &v[n++];
            *p = (tpart_t){r->topic_ix, r->msg->partition, rd_kafka_topic_name(r->msg->rkt), -2};
        }
        if (r->state == RUN_DONE)
            left--;
        if (r->state != RUN_DONE || p->offset == -1) {
            p->offset = -1; /* blocked from here on */
            prev = r;
            pp = &r->next;
            continue;
        }
        p->offset = r->msg->offset + 1;
        *pp = r->next;
        if (ex->tail == r)
            ex->tail = prev;
        ex->tracked--;
        ex->nstate[RUN_DONE]--;
        if (ex->first_new == r)
            ex->first_new = r->next;
        r->next = *ret_dead;
        *ret_dead = r;
    }
    *ret_v = v;
    return n;
}

void commit_soon(executor_t *ex) {
    if (ex->svc.stopping || ex->nstate[RUN_DONE] == 0) {
        commit_ready(ex);
        return;
    }
    if (!evtimer_pending(ex->ev_commit, NULL))
        event_add(ex->ev_commit,
                  &(struct timeval)AX_TV_MS(ex->svc.conf.executor_commit_interval_ms));
}

void commit_ready(executor_t *ex) {
    if (ex->nstate[RUN_DONE] == 0) { /* nothing to commit: no walk */
        maybe_stopped(ex);
        return;
    }
    tpart_t *v = NULL;
    run_t *dead = NULL;
    size_t n = collect_done(ex, &v, &dead);
    rd_kafka_topic_partition_list_t *l = NULL;
    for (size_t i = 0; i < n; i++) {
        if (v[i].offset < 0)
            continue;
        if (!l)
            l = rd_kafka_topic_partition_list_new((int)n);
        rd_kafka_topic_partition_list_add(l, v[i].name, v[i].partition)->offset = v[i].offset;
    }
    if (l) {
        rd_kafka_resp_err_t err = rd_kafka_commit(ex->svc.consumer, l, 1);
        if (err)
            ax_warn("commit: %s (those messages will be seen again)", rd_kafka_err2str(err));
        rd_kafka_topic_partition_list_destroy(l);
    }
    free(v);
    while (dead) {
        run_t *r = dead;
        dead = r->next;
        rd_kafka_message_destroy(r->msg);
        ax_dispatch_clear(&r->d);
        free(r->result_buf);
        free(r);
    }
    maybe_stopped(ex);
}

/* At exit, after the loop and the handlers stopped: free every run still
 * tracked (handed back or never claimed; their offsets are not committed,
 * so the group delivers them again). librdkafka's rd_kafka_destroy() waits
 * until every message it handed out is destroyed: one still held made the
 * executor hang at exit after a SIGTERM with a backlog (SIGKILLed by its
 * supervisor). */
void runs_free_all(executor_t *ex) {
    size_t n = 0;
    while (ex->head) {
        run_t *r = ex->head;
        ex->head = r->next;
        rd_kafka_message_destroy(r->msg);
        r->msg = NULL;
        n++;
        if (r->state == RUN_REPORTING)
            continue; /* a stop on an error: its delivery report may still come (left) */
        ax_dispatch_clear(&r->d);
        free(r->result_buf);
        free(r);
    }
    ex->tail = NULL;
    ex->tracked = 0;
    if (n)
        ax_info("%zu uncommitted dispatch(es) left for the group to deliver again", n);
}

/* ---- the environment of commands ---- */

char **child_env(executor_t *ex, const run_t *r) {
    char **env = calloc(ex->child_env_n + 9, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < ex->child_env_n; i++)
        env[k++] = ex->child_env_base[i];
    if (asprintf(&env[k++], "AX_INSTANCE_ID=%lld", (long long)r->d.instance_id) < 0 ||
        asprintf(&env[k++], "AX_JOB=%s", r->d.job ? r->d.job : "") < 0 ||
        asprintf(&env[k++], "AX_ATTEMPT=%d", (int)r->d.attempt) < 0 ||
        asprintf(&env[k++], "AX_IDEMPOTENCY_KEY=%s", r->d.idempotency_key) < 0 ||
        asprintf(&env[k++], "AX_TRACE_ID=%s", r->d.trace_id) < 0 ||
        asprintf(&env[k++], "AX_SHARD_INDEX=%d", r->shard_index) < 0 ||
        asprintf(&env[k++], "AX_SHARD_TOTAL=%d", r->shard_total) < 0 ||
        (r->probe && asprintf(&env[k++], "AX_SHARD_PROBE=1") < 0))
        env[--k] = NULL;
    return env;
}

void free_child_env(executor_t *ex, char **env) {
    for (size_t i = ex->child_env_n; env && env[i]; i++)
        free(env[i]);
    free(env);
}
