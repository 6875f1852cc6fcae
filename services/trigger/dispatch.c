/*
 * dispatch.c — the leader produces instances marked dispatched (by the
 * ingest statement, the due scan or the fire statement, each with a
 * dispatch_batch row) in a Kafka transaction once PostgreSQL committed the
 * marks, then settles the marks (commit) or undoes them (failure: the due
 * scan retries them). The ingest's batches share one transaction for
 * dispatch.transaction.ms (the window: executors read uncommitted records,
 * so a batch waits for no commit; the commit's requests are paid once per
 * window); the due scan and the fires commit theirs at once. Instances
 * that cannot be produced (reserved group, missing topic, too large) are
 * held (hold.c).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "trigger.h"

/* The argv of a row's command_json, parsed once for a run of rows with the
 * same text (a batch is mostly one job's instances: a JSON parse and its
 * copies per row were a tenth of the trigger's CPU). */
typedef struct argv_cache {
    char *json;   /* the text last parsed (NULL: none) */
    char **argv;  /* its argv, NULL-terminated */
    size_t argc;  /* 0: it was not a non-empty array */
} argv_cache_t;

static void argv_cache_free(argv_cache_t *c) {
    for (size_t i = 0; c->argv && i < c->argc; i++)
        free(c->argv[i]);
    free(c->argv);
    free(c->json);
    memset(c, 0, sizeof *c);
}

/* d->command: the cache's argv for text (borrowed), or <0. */
static int json_argv(argv_cache_t *c, const char *text, ax_dispatch_t *d) {
    if (!text)
        return -1;
    if (!c->json || strcmp(c->json, text) != 0) {
        argv_cache_free(c);
        json_error_t je;
        json_t *a = json_loads(text, 0, &je);
        size_t n = json_is_array(a) ? json_array_size(a) : 0;
        c->argv = n ? calloc(n + 1, sizeof *c->argv) : NULL;
        c->json = c->argv ? strdup(text) : NULL;
        for (size_t i = 0; c->json && i < n; i++, c->argc++)
            if (!(c->argv[i] = strdup(json_string_value(json_array_get(a, i)) ?: "")))
                break;
        json_decref(a);
        if (!c->json || c->argc < n) {
            argv_cache_free(c);
            return -1;
        }
    }
    d->command = c->argv;
    d->command_len = c->argc;
    return 0;
}

/* The message key: the value of the payload's routing field when the job
 * names one and the payload is a JSON object holding it as a string or an
 * integer, so one key always lands on one partition (murmur2, as Java
 * clients hash); else the instance id, which spreads evenly. */
static int routing_key(const char *field, const ax_dispatch_t *d, char *key, size_t len) {
    if (field && d->payload_len) {
        json_error_t je;
        json_t *o = json_loadb((const char *)d->payload, d->payload_len, 0, &je);
        json_t *v = json_is_object(o) ? json_object_get(o, field) : NULL;
        int n = -1;
        if (json_is_string(v) && json_string_length(v) < len)
            n = snprintf(key, len, "%s", json_string_value(v));
        else if (json_is_integer(v))
            n = snprintf(key, len, "%lld", (long long)json_integer_value(v));
        json_decref(o);
        if (n > 0)
            return n;
    }
    return snprintf(key, len, "%lld", (long long)d->instance_id);
}

/* Why the instance of row x must not be produced to `topic` now (into l),
 * or 0 to produce it: its group is a reserved name, or the topic does not
 * exist (never produced to: that would hold the transaction). */
static int hold_reason(trigger_t *t, const ax_dispatch_row_t *x, const char *topic,
                       hold_list_t *l) {
    const char *group = x->executor_group;
    if (ax_conf_group_reserved(group)) {
        hold_add(l, x->id, x->job, NULL, 1,
                 "executor group '%s' is reserved: p0-p9 name the priority lanes; change the "
                 "job's group (axctl job update --group) and cancel this instance",
                 group);
        return 1;
    }
    int known = hold_topic_known(t, topic);
    if (known == 0)
        hold_add(l, x->id, x->job, topic, 1,
                 "executor group '%s' has no topic %s (create it: axctl topics create "
                 "--group %s); produced once it exists",
                 group, topic, group);
    else if (known < 0)
        hold_add(l, x->id, x->job, topic, 0, "waiting for the first list of topics");
    return known != 1;
}

/* One dispatch record's delivery report: a record Kafka refused for
 * itself (too large for the topic, say: a topic not made by axctl topics
 * create) is noted, so the batch is not retried with it forever; any other
 * error (authorization, say) is not the record's: it is counted, and the
 * failed transaction counts towards giving up leadership. Freed by its
 * report, whenever that is served (the commit's flush, or the next). */
typedef struct row_dlv {
    ax_delivery_t d;
    trigger_t *t;
    int64_t id;
    size_t len;
} row_dlv_t;

static void on_row_report(ax_delivery_t *d, rd_kafka_resp_err_t err) {
    row_dlv_t *rd = (row_dlv_t *)d;
    trigger_t *t = rd->t;
    if (err && !ax_kafka_err_record_refused(err))
        t->nfailed_other++;
    if (ax_kafka_err_record_refused(err)) {
        if (t->nrefused == t->caprefused) {
            size_t cap = t->caprefused ? t->caprefused * 2 : 16;
            struct refusal *v = realloc(t->refused, cap * sizeof *v);
            if (v) {
                t->refused = v;
                t->caprefused = cap;
            }
        }
        if (t->nrefused < t->caprefused)
            t->refused[t->nrefused++] = (struct refusal){rd->id, rd->len, err};
    }
    free(rd);
}

/* A dispatch record delivered: its partition is one the next window
 * primes (dispatch.prime). Bounded: beyond 4,096 partitions in one window
 * the rest register with their first record, as without primers. */
static void on_row_message(ax_delivery_t *d, const rd_kafka_message_t *m) {
    struct dispatch_win *w = &((row_dlv_t *)d)->t->win;
    if (m->err || m->partition < 0 || !m->rkt)
        return;
    const char *topic = rd_kafka_topic_name(m->rkt);
    for (size_t k = w->nparts; k-- > 0;)
        if (w->parts[k].partition == m->partition && strcmp(w->parts[k].topic, topic) == 0)
            return;
    if (w->nparts == w->capparts) {
        size_t cap = w->capparts ? w->capparts * 2 : 16;
        struct win_part *v = cap <= 4096 ? realloc(w->parts, cap * sizeof *v) : NULL;
        if (!v)
            return;
        w->parts = v;
        w->capparts = cap;
    }
    char *name = strdup(topic);
    if (!name)
        return;
    w->parts[w->nparts++] = (struct win_part){name, m->partition};
}

static void win_parts_clear(struct dispatch_win *w) {
    for (size_t k = 0; k < w->nparts; k++)
        free(w->parts[k].topic);
    w->nparts = 0;
}

/* After a failed commit: the largest record of this batch Kafka refused
 * for itself is held (one per failed transaction: a record set refused as
 * a whole names every record in it). Returns 1 if one was. */
static int hold_refused(trigger_t *t, const ax_dispatch_rows_t *rows, hold_list_t *holds) {
    struct refusal *best = NULL;
    const ax_dispatch_row_t *row = NULL;
    for (size_t k = 0; k < t->nrefused; k++)
        for (size_t i = 0; i < rows->n; i++)
            if (!rows->v[i].hold && rows->v[i].id == t->refused[k].id &&
                (!best || t->refused[k].len > best->len)) {
                best = &t->refused[k];
                row = &rows->v[i];
            }
    if (best)
        hold_add(holds, best->id, row->job, NULL, 1,
                 "Kafka refused its dispatch record of %zu bytes (%s): the topic "
                 "accepts less than message.max.bytes; create topics with axctl "
                 "topics create, or set max.message.bytes >= %lld",
                 best->len, rd_kafka_err2str(best->err),
                 (long long)ax_kafka_record_max(&t->svc.conf));
    t->nrefused = 0;
    return best != NULL;
}

/* The dispatch record of row x, or <0 (no command: logged). */
static int dispatch_of_row(const trigger_t *t, const ax_dispatch_row_t *x, argv_cache_t *c,
                           ax_dispatch_t *d) {
    *d = (ax_dispatch_t){
        .instance_id = x->id,
        .attempt = x->attempt,
        .priority = x->priority,
        .job = x->job,
        .handler_kind = x->handler_kind,
        .payload = x->payload,
        .payload_len = x->payload_len,
        .timeout_ms = x->timeout_ms,
        .nominal_time_ms = x->nominal_ms,
        .due_at_ms = x->due_ms,
        .trace_id = x->trace_id,
        .idempotency_key = x->idempotency_key,
        .epoch = t->epoch, /* the fencing token of the lease it went out under */
    };
    if (json_argv(c, x->command_json, d) < 0) {
        ax_error("instance %lld has no command; skipping", (long long)x->id);
        return -1;
    }
    return 0;
}

/* Produce one encoded record of row d onto `topic`: 0 produced, 1 held
 * (its topic is gone), AX_ERR_IO (err) the batch is aborted. */
static int produce_record(trigger_t *t, const ax_dispatch_t *d, const char *routing,
                          const char *topic, void *buf, size_t len, int window,
                          hold_list_t *holds, char *err, size_t errlen) {
    char key[256];
    int klen = routing_key(routing, d, key, sizeof key);
    row_dlv_t *rd = calloc(1, sizeof *rd);
    if (rd) {
        rd->d.on_report = on_row_report;
        if (window && t->svc.conf.dispatch_prime)
            rd->d.on_message = on_row_message; /* the next window's primers */
        /* no routing field: in chunks of dispatch.partition.chunk, so a
         * small transaction touches one or two partitions, not all */
        if (!routing)
            rd->d.part_hint = ax_kafka_chunk_hint(t->part_seq++,
                                                  t->svc.conf.dispatch_partition_chunk);
        rd->t = t;
        rd->id = d->instance_id;
        rd->len = len;
    }
    int rc = ax_kafka_produce(t->txp, topic, key, (size_t)klen, buf, len, NULL,
                              rd ? &rd->d : NULL, err, errlen);
    if (rc == 0)
        return 0;
    free(rd); /* not adopted: no report comes */
    if (strstr(err, "nknown topic")) {
        /* gone since the last topic list: held, not the batch aborted */
        hold_add(holds, d->instance_id, d->job, topic, 1, "%s", err);
        return 1;
    }
    return AX_ERR_IO;
}

/* Produce the rows not held through the leader's transactional producer;
 * the ids of rows that cannot be produced go to `holds` with their reason
 * (hold.c). Returns rows produced, or AX_ERR_IO (err) when a produce
 * failed: the caller aborts. */
static int produce_rows(trigger_t *t, const ax_dispatch_rows_t *rows, int window,
                        hold_list_t *holds, char *err, size_t errlen) {
    int produced = 0;
    size_t max = (size_t)t->svc.conf.message_max_bytes;
    argv_cache_t argv = {0};
    for (size_t i = 0; i < rows->n; i++) {
        const ax_dispatch_row_t *x = &rows->v[i];
        if (x->hold)
            continue;
        int lane = lane_of_prio(t, x->priority);
        char topic[300];
        ax_conf_dispatch_topic(&t->svc.conf, x->executor_group, lane, topic, sizeof topic);
        ax_dispatch_t d;
        if (hold_reason(t, x, topic, holds) || dispatch_of_row(t, x, &argv, &d) < 0)
            continue;
        void *buf;
        size_t len;
        int rc = ax_dispatch_encode(&d, &buf, &len);
        if (rc < 0) {
            snprintf(err, errlen, "instance %lld: cannot encode its dispatch",
                     (long long)d.instance_id);
        } else if (len > max) {
            /* a defined job's command made it too large: never produced */
            hold_add(holds, d.instance_id, d.job, NULL, 1,
                     "its dispatch record takes %zu bytes, over message.max.bytes %zu "
                     "(payload %zu bytes)",
                     len, max, d.payload_len);
            free(buf);
        } else {
            rc = produce_record(t, &d, x->routing_field, topic, buf, len, window, holds, err,
                                errlen);
            free(buf);
            if (rc == 0) {
                t->lane_sent[lane]++;
                produced++;
            }
            rc = rc > 0 ? 0 : rc;
        }
        if (rc < 0) {
            argv_cache_free(&argv);
            return AX_ERR_IO;
        }
    }
    argv_cache_free(&argv);
    return produced;
}

/* Hold the held rows, settling the pending rows of ids[]. */
static void record_holds(trigger_t *t, const int64_t *ids, size_t n, const hold_list_t *holds,
                         const char *what) {
    char err[512];
    if (hold_record(t, ids, n, holds, err, sizeof err) < 0)
        ax_warn("%s: %s", what, err);
}

/* The commit failed: if because of one record Kafka refused, hold it (the
 * rest is retried). */
static void after_failed_commit(trigger_t *t, const ax_dispatch_rows_t *rows) {
    hold_list_t holds = {0};
    if (t->leader && hold_refused(t, rows, &holds) && holds.n) {
        if (!t->nfailed_other)
            t->txn_failures = 0; /* the producer works; the record did not */
        record_holds(t, &holds.v[0].id, 1, &holds, "dispatch hold");
    }
    hold_list_free(&holds);
}

/* ---- the ingest's window ---------------------------------------------------------- */

static int win_flush(trigger_t *t, int prime);

static void win_on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    win_flush(arg, 1);
}

/* Settle what the window's transaction carried (committed), or make it
 * undispatched again (not: the due scan produces it again; executors
 * drop what they claimed already). */
static void win_settle(trigger_t *t, int committed) {
    struct dispatch_win *w = &t->win;
    char err[512];
    if (w->n && committed) {
        if (ax_store_pending_settle(t->svc.pg, t->svc.conf.topic_prefix, w->ids, w->n, err,
                                    sizeof err) < 0)
            ax_warn("dispatch settle: %s (recovered later: the instances may be produced "
                    "twice; executors drop the duplicates)", err);
    } else if (w->n) {
        ax_pending_undo_t u = {.ids = w->ids, .n = w->n,
                               .deployment = t->svc.conf.topic_prefix};
        if (ax_store_pending_undo(t->svc.pg, &u, NULL, err, sizeof err) < 0)
            ax_warn("dispatch undo: %s (recovered later)", err);
        arm_scan(t, t->svc.conf.backoff_initial_ms);
    }
    w->n = 0;
}

/* Note the ids of a batch produced into the window: 0, or <0 (no memory:
 * the caller commits the window now). */
static int win_add(trigger_t *t, const int64_t *ids, size_t n) {
    struct dispatch_win *w = &t->win;
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 1024;
        while (cap < w->n + n)
            cap *= 2;
        int64_t *v = realloc(w->ids, cap * sizeof *v);
        if (!v)
            return AX_ERR_NOMEM;
        w->ids = v;
        w->cap = cap;
    }
    memcpy(w->ids + w->n, ids, n * sizeof *ids);
    w->n += n;
    return 0;
}

/* Open the window's transaction (begun by the caller): commit it within
 * dispatch.transaction.ms, by the first batch after that or by its timer. */
static void win_open(trigger_t *t) {
    struct dispatch_win *w = &t->win;
    int64_t ms = t->svc.conf.dispatch_transaction_ms;
    if (!w->ev)
        w->ev = evtimer_new(t->svc.base, win_on_timer, t);
    w->open = 1;
    w->until_mono = ax_mono_ms() + ms;
    if (w->ev) {
        struct timeval tv = AX_TV_MS(ms);
        event_add(w->ev, &tv);
    }
}

static void win_close(trigger_t *t) {
    t->win.open = 0;
    if (t->win.ev)
        event_del(t->win.ev);
}

static int id_cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Leave out of the window's settle the ids a batch about to flush it
 * marked again (an instance handed back and due again within the
 * window): a settle takes ids out of every dispatch_batch row of its
 * deployment, so it would take them out of that batch's row too, and a
 * crash before that batch's commit would leave them marked with no row
 * to recover them by.
 * They stay in the window's row until that batch settles or undoes them. */
static void win_drop_ids(trigger_t *t, const int64_t *ids, size_t n) {
    struct dispatch_win *w = &t->win;
    int64_t *s = n && w->n ? malloc(n * sizeof *s) : NULL;
    if (!s)
        return; /* nothing to do, or no memory: the sweep's recovery covers it */
    memcpy(s, ids, n * sizeof *s);
    qsort(s, n, sizeof *s, id_cmp);
    size_t k = 0;
    for (size_t i = 0; i < w->n; i++)
        if (!bsearch(&w->ids[i], s, n, sizeof *s, id_cmp))
            w->ids[k++] = w->ids[i];
    w->n = k;
    free(s);
}

static void on_primer_report(ax_delivery_t *d, rd_kafka_resp_err_t err) {
    (void)err; /* a failed one fails the window's commit, like any record */
    free(d);
}

/* One primer (an empty record, key ax-primer, which executors skip) on
 * each of parts[0..n) into rk's open transaction, so that those partitions
 * are registered with it (AddPartitionsToTxn, and the broker's
 * verification of each partition's first record) before a batch's records
 * wait for that (BENCHMARKS.md, "Issue #13: the twenty-first session" and
 * "the thirtieth session"). */
static size_t prime_parts(trigger_t *t, rd_kafka_t *rk, const struct win_part *parts,
                          size_t n) {
    char err[512];
    size_t primed = 0;
    for (size_t k = 0; k < n; k++) {
        /* a topic gone since (deleted with its group) would hold the
         * transaction: the next dispatch to it is held instead (hold.c) */
        if (hold_topic_known(t, parts[k].topic) != 1)
            continue;
        ax_delivery_t *d = calloc(1, sizeof *d);
        if (!d)
            break;
        d->on_report = on_primer_report;
        d->part_hint = (int64_t)parts[k].partition + 1;
        if (ax_kafka_produce(rk, parts[k].topic, AX_KAFKA_PRIMER_KEY,
                             sizeof AX_KAFKA_PRIMER_KEY - 1, NULL, 0, NULL, d, err,
                             sizeof err) < 0) {
            free(d); /* not adopted; the rest register with their first record */
            ax_debug("dispatch primer: %s", err);
            break;
        }
        primed++;
    }
    return primed;
}

/* Commit the window, settle it, and — when it ended by its length or size
 * (not because another transaction comes next) and carried dispatches,
 * with dispatch.prime — begin the next with one primer on each partition
 * the window's records went to (from their delivery reports). The
 * primers' window is committed like any other, by its timer if no batch
 * comes, and primes none after it: an idle leader makes no transactions.
 *
 * With two producers the next window is begun on the other one, and
 * primed, before this one's commit (lead_txn_begin_next), with the
 * partitions of the reports served so far (a poll just before: all but
 * those of the records still in flight): its partitions are registered
 * and verified while this commit and the settle run, instead of after
 * them, when the first batch of the next window is often already produced
 * (at 1,000 jobs/s that batch waited 3-8 ms for its primers; BENCHMARKS.md,
 * "Issue #13: the thirtieth session"). With one producer, or no report
 * served yet, it is begun after the commit, whose flush serves every
 * report. */
static int win_flush(trigger_t *t, int prime) {
    struct dispatch_win *w = &t->win;
    if (!w->open)
        return 0;
    win_close(t);
    /* with kafka.partitioner set a primer would go to its key's partition,
     * not the one it is for; without the window's timer nothing would
     * commit a window of primers alone */
    prime = prime && w->n > 0 && t->svc.conf.dispatch_prime && w->ev &&
            !ax_kafka_partitioner_set(&t->svc.conf) && !t->svc.stopping;
    rd_kafka_t *next = NULL;
    if (prime && t->txp) {
        rd_kafka_poll(t->txp, 0); /* the window's delivery reports so far: its partitions */
        if (w->nparts && lead_txn_begin_next(t, &next) == 0) {
            size_t primed = prime_parts(t, next, w->parts, w->nparts);
            ax_debug("dispatch window: the next begun ahead of this one's commit, %zu of %zu "
                     "partition(s) primed",
                     primed, w->nparts);
        }
    }
    int rc = lead_txn_commit(t);
    win_settle(t, rc == 0);
    if (next && rc == 0 && t->leader && t->txn_next_open) {
        lead_txn_adopt_next(t);
        win_open(t);
    } else if (next) {
        lead_txn_drop_next(t);
    } else if (rc == 0 && prime && t->leader && w->nparts && lead_txn_begin(t) == 0) {
        win_open(t);
        prime_parts(t, t->txp, w->parts, w->nparts);
    }
    win_parts_clear(w);
    return rc;
}

int dispatch_win_flush(trigger_t *t) { return win_flush(t, 0); }

void dispatch_win_forget(trigger_t *t) {
    win_close(t);
    t->win.n = 0;
    win_parts_clear(&t->win);
}

/* ---- one batch --------------------------------------------------------------------- */

/* Begin the Kafka transaction of rows (or join the ingest's open window)
 * and produce them into it: x->produced = rows produced, or AX_ERR_IO
 * when a produce failed (the transaction is aborted then, the window's
 * with it). */
static void dispatch_open(trigger_t *t, const ax_dispatch_rows_t *rows, int window,
                          dispatch_txn_t *x) {
    char err[512] = "";
    *x = (dispatch_txn_t){0};
    x->window = window && t->svc.conf.dispatch_transaction_ms > 0;
    x->ids = calloc(rows->n + 1, sizeof *x->ids);
    if (!x->ids) {
        x->produced = AX_ERR_NOMEM; /* the marks are recovered later */
        return;
    }
    for (size_t i = 0; i < rows->n; i++)
        if (!rows->v[i].hold)
            x->ids[x->n++] = rows->v[i].id;
    t->nrefused = 0;
    t->nfailed_other = 0;
    if (!x->n)
        return;
    if (!(x->window && t->win.open)) {
        if (t->win.open)
            win_drop_ids(t, x->ids, x->n);
        dispatch_win_flush(t); /* one transaction at a time */
        win_parts_clear(&t->win); /* what another transaction's records used */
        if (lead_txn_begin(t) < 0) {
            x->produced = AX_ERR_IO;
            return;
        }
        if (x->window)
            win_open(t);
    }
    x->open = 1;
    x->produced = produce_rows(t, rows, x->window, &x->holds, err, sizeof err);
    if (x->produced < 0) {
        /* never left open: every later begin would fail */
        char why[700];
        snprintf(why, sizeof why, "dispatch of %zu instance(s): %s", x->n, err);
        x->open = 0;
        int carried = x->window;
        if (carried)
            win_close(t);
        lead_txn_abort(t, why);
        if (carried) {
            win_settle(t, 0); /* the earlier batches of the window went with it */
            win_parts_clear(&t->win);
        }
    }
}

/* The batch x is produced (its marks were durable before): commit its
 * Kafka transaction — or leave it in the open window, settled with it —
 * then settle the marks (committed) or undo them (failed: the due scan
 * retries). */
static int dispatch_close(trigger_t *t, const ax_dispatch_rows_t *rows, dispatch_txn_t *x) {
    ax_svc_t *svc = &t->svc;
    char err[512] = "";
    if (x->open) {
        x->open = 0;
        if (x->window && !x->holds.n && win_add(t, x->ids, x->n) == 0) {
            int produced = x->produced;
            t->dispatched += produced;
            free(x->ids);
            x->ids = NULL;
            if (ax_mono_ms() >= t->win.until_mono || t->win.n >= 100000)
                win_flush(t, 1);
            if (produced > 0)
                lag_note_sent(t);
            return produced;
        }
        /* held rows are recorded at once (the window ends here) */
        int rc = x->window ? dispatch_win_flush(t) : lead_txn_commit(t);
        if (rc < 0) {
            hold_list_free(&x->holds);
            after_failed_commit(t, rows);
            x->produced = AX_ERR_IO;
        }
    }
    int produced = x->produced;
    if (x->n && produced >= 0 && x->holds.n) {
        record_holds(t, x->ids, x->n, &x->holds,
                     "dispatch settle (recovered later: the instances may be produced twice; "
                     "executors drop the duplicates)");
        t->dispatched += produced;
    } else if (x->n && produced >= 0) {
        if (ax_store_pending_settle(svc->pg, svc->conf.topic_prefix, x->ids, x->n, err,
                                    sizeof err) < 0)
            ax_warn("dispatch settle: %s (recovered later: the instances may be produced "
                    "twice; executors drop the duplicates)", err);
        t->dispatched += produced;
    } else if (x->n && produced != AX_ERR_NOMEM) {
        /* Not committed: back to the due scan (an executor that read a record of
         * it already drops the second one: its claim finds the instance taken). */
        ax_pending_undo_t u = {.ids = x->ids, .n = x->n,
                               .deployment = svc->conf.topic_prefix};
        if (ax_store_pending_undo(svc->pg, &u, NULL, err, sizeof err) < 0)
            ax_warn("dispatch undo: %s (recovered later)", err);
        arm_scan(t, svc->conf.backoff_initial_ms);
    }
    hold_list_free(&x->holds);
    free(x->ids);
    x->ids = NULL;
    if (produced > 0)
        lag_note_sent(t);
    return produced;
}

int dispatch_produce(trigger_t *t, const ax_dispatch_rows_t *rows) {
    dispatch_txn_t x;
    dispatch_open(t, rows, 0, &x);
    return dispatch_close(t, rows, &x);
}

void dispatch_committed(trigger_t *t, const ax_dispatch_rows_t *rows, int window,
                        int *produced) {
    dispatch_txn_t x;
    dispatch_open(t, rows, window, &x);
    int p = dispatch_close(t, rows, &x);
    if (produced)
        *produced = p;
}

int dispatch_commit_with(trigger_t *t, const ax_dispatch_rows_t *rows, int *produced, char *err,
                         size_t errlen) {
    int rc = ax_pg_commit(t->svc.pg, err, errlen);
    if (rc < 0)
        return rc; /* the caller rolls back */
    dispatch_committed(t, rows, 0, produced);
    return 0;
}

void recover_pending(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    int64_t again = 0;
    ax_pending_undo_t u = {.deployment = svc->conf.topic_prefix, .epoch = t->epoch};
    if (ax_store_pending_undo(svc->pg, &u, &again, err, sizeof err) < 0) {
        ax_warn("dispatch recovery: %s", err);
        return;
    }
    if (again) {
        ax_warn("%lld instance(s) whose dispatch was not confirmed: producing them again",
                (long long)again);
        arm_scan(t, 0);
    }
}
