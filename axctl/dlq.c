/*
 * dlq.c — axctl dlq list | replay: the dead-letter topic <prefix>dlq.
 *
 * Two kinds of records land there: messages a service could not process
 * (undecodable, unknown job, ...: the original bytes, headers ax.reason and
 * ax.source.topic/partition/offset), and final failures (ax.kind =
 * final_failure: the instance's Result record, after its retries).
 *
 * list shows the newest records first (ISO-8601 UTC times).
 *
 * replay P:O re-offers a record: a rejected message is produced again to its
 * source topic (after the cause was fixed); a final failure becomes a new
 * submission of the same job with the same payload — a new instance with
 * its own attempts and outcome, its trace id the old one + "-replay". A
 * submission replayed carries an idempotency key (its own, else
 * "dlq-replay:<dlq topic>:P:O"), so replaying a record twice makes one
 * instance, and the second replay says so.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/kafka.h"
#include "ax/log.h"
#include "ax/store_dlq.h"
#include "axctl.h"

static const char *hdr(rd_kafka_message_t *m, const char *name, char *buf, size_t len) {
    rd_kafka_headers_t *h = NULL;
    const void *v;
    size_t n;
    if (rd_kafka_message_headers(m, &h) || !h ||
        rd_kafka_header_get_last(h, name, &v, &n) != RD_KAFKA_RESP_ERR_NO_ERROR || !v)
        return NULL;
    snprintf(buf, len, "%.*s", (int)n, (const char *)v);
    return buf;
}

/* librdkafka's own lines: to the debug log, never raw to stderr. */
static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    ax_debug("kafka %s: %s", fac, buf);
}

static void quiet_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    ax_debug("kafka: %s: %s", rd_kafka_err2name(err), reason);
}

/* A consumer without a group, assigned to `parts` (offsets set). */
static rd_kafka_t *reader(rd_kafka_topic_partition_list_t *parts) {
    char err[512];
    rd_kafka_conf_t *kc = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(kc, quiet_log);
    rd_kafka_conf_set_error_cb(kc, quiet_error);
    for (size_t i = 0; i < conf.n_kafka; i++)
        if (rd_kafka_conf_set(kc, conf.kafka[i].key, conf.kafka[i].value, err, sizeof err) !=
            RD_KAFKA_CONF_OK) {
            fprintf(stderr, "axctl: kafka.%s: %s\n", conf.kafka[i].key, err);
            exit(2);
        }
    rd_kafka_conf_set(kc, "group.id", "axctl-dlq", err, sizeof err);
    rd_kafka_conf_set(kc, "enable.auto.commit", "false", err, sizeof err);
    rd_kafka_conf_set(kc, "enable.partition.eof", "true", err, sizeof err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "axctl: %s\n", err);
        exit(1);
    }
    rd_kafka_poll_set_consumer(rk);
    if (parts)
        rd_kafka_assign(rk, parts);
    return rk;
}

static void reader_close(rd_kafka_t *rk) {
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

/* The topic's partition count; -1 if it cannot be read (quiet: 1). */
static int partitions_of(rd_kafka_t *rk, const char *topic) {
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
    int n = -1;
    if (rd_kafka_metadata(rk, 0, t, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (md->topic_cnt == 1 && !md->topics[0].err)
            n = md->topics[0].partition_cnt;
        rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(t);
    return n;
}

static int partitions(rd_kafka_t *rk, const char *topic) {
    int n = partitions_of(rk, topic);
    if (n < 0) {
        fprintf(stderr, "axctl: the dead-letter topic %s cannot be read (not created yet, or "
                        "Kafka is unreachable)\n", topic);
        reader_close(rk); /* never exit() with live librdkafka threads */
        exit(1);
    }
    return n;
}

static void watermarks(rd_kafka_t *rk, const char *topic, int p, int64_t *lo, int64_t *hi) {
    rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk, topic, p, lo, hi, 10000);
    if (e) {
        fprintf(stderr, "axctl: cannot read the offsets of %s [%d]: %s\n", topic, p,
                rd_kafka_err2str(e));
        reader_close(rk);
        exit(1);
    }
}

static void iso_ms(int64_t ms, char *buf, size_t len) {
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    if (ms < 0 || !gmtime_r(&sec, &tm)) {
        snprintf(buf, len, "?");
        return;
    }
    char t[32];
    strftime(t, sizeof t, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03dZ", t, (int)(ms % 1000));
}

typedef struct {
    int64_t ts, off;
    int part;
    char *line;
} entry_t;

static int entry_cmp(const void *a, const void *b) {
    const entry_t *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? 1 : -1;
    if (x->part != y->part)
        return x->part < y->part ? -1 : 1;
    return x->off < y->off ? 1 : x->off > y->off ? -1 : 0;
}

/* One line per record: P:O, time (ISO-8601 UTC), kind, what, reason. */
static char *format_record(rd_kafka_message_t *m, const char **ret_reason) {
    char kind[64], st[256], sp[32], so[32], inst[32], when[40], what[400];
    static char reason[600];
    int64_t ts = rd_kafka_message_timestamp(m, NULL);
    const char *k = hdr(m, "ax.kind", kind, sizeof kind);
    const char *why = hdr(m, "ax.reason", reason, sizeof reason);
    iso_ms(ts, when, sizeof when);
    if (k && strcmp(k, "final_failure") == 0)
        snprintf(what, sizeof what, "instance %s", hdr(m, "ax.instance.id", inst, sizeof inst) ?: "?");
    else
        snprintf(what, sizeof what, "from %s [%s] @%s",
                 hdr(m, "ax.source.topic", st, sizeof st) ?: "?",
                 hdr(m, "ax.source.partition", sp, sizeof sp) ?: "?",
                 hdr(m, "ax.source.offset", so, sizeof so) ?: "?");
    *ret_reason = why ? why : "";
    char *line = NULL;
    if (asprintf(&line, "%d:%lld  %s  %s  %s  %s", (int)m->partition, (long long)m->offset, when,
                 k ? k : "rejected", what, why ? why : "") < 0)
        return NULL;
    return line;
}

typedef struct list_opts {
    int64_t limit, since; /* since: INT64_MIN for all */
    const char *reason;   /* NULL: any */
} list_opts_t;

static void parse_list(int argc, char **argv, list_opts_t *o) {
    *o = (list_opts_t){.limit = 100, .since = INT64_MIN};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--limit") != 0 && strcmp(a, "--since") != 0 && strcmp(a, "--reason") != 0)
            die_usagef("dlq list: unknown option '%s' (see axctl --help)", a);
        if (i + 1 >= argc)
            die_usagef("%s needs a value", a);
        const char *v = argv[++i];
        if (strcmp(a, "--limit") == 0) {
            o->limit = parse_int(v, a);
            if (o->limit < 1 || o->limit > 1000000)
                die_usagef("--limit must be 1..1000000, not %s", v);
        } else if (strcmp(a, "--since") == 0) {
            o->since = parse_time(v, a);
        } else {
            need_utf8(v, "--reason");
            o->reason = v;
        }
    }
}

/* What dlq list reads: per partition from[p]..to[p] (assigned in l). */
typedef struct list_plan {
    int np, pending; /* partitions, those not read to their end yet */
    int64_t *from, *to;
    rd_kafka_topic_partition_list_t *l;
} list_plan_t;

static void plan_free(list_plan_t *pl) {
    free(pl->from);
    free(pl->to);
    if (pl->l)
        rd_kafka_topic_partition_list_destroy(pl->l);
}

/* Per partition: from where to where. Without --reason, the newest
 * `limit` overall are among each partition's last `limit`. 0, or 1 (said
 * why). */
static int plan_list(rd_kafka_t *rk, const char *topic, const list_opts_t *o, list_plan_t *pl) {
    int np = pl->np = partitions(rk, topic);
    pl->from = calloc((size_t)np, sizeof *pl->from);
    pl->to = calloc((size_t)np, sizeof *pl->to);
    pl->l = rd_kafka_topic_partition_list_new(np);
    if (!pl->from || !pl->to || !pl->l) {
        fprintf(stderr, "axctl: out of memory\n");
        return 1;
    }
    for (int p = 0; p < np; p++) {
        int64_t lo, hi;
        watermarks(rk, topic, p, &lo, &hi);
        pl->from[p] = lo;
        pl->to[p] = hi;
        rd_kafka_topic_partition_list_add(pl->l, topic, p)->offset =
            o->since == INT64_MIN ? lo : o->since;
    }
    if (o->since != INT64_MIN) {
        rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(rk, pl->l, 10000);
        if (e) {
            fprintf(stderr, "axctl: cannot find the offsets of --since: %s\n", rd_kafka_err2str(e));
            return 1;
        }
        for (int p = 0; p < np; p++) {
            int64_t off = pl->l->elems[p].offset;
            pl->from[p] = off < 0 ? pl->to[p] : off; /* -1: nothing at or after since */
        }
    }
    pl->pending = 0;
    for (int p = 0; p < np; p++) {
        if (!o->reason && pl->to[p] - pl->from[p] > o->limit)
            pl->from[p] = pl->to[p] - o->limit;
        pl->l->elems[p].offset = pl->from[p];
        pl->pending += pl->from[p] < pl->to[p];
    }
    return 0;
}

typedef struct entries {
    entry_t *e;
    size_t n, cap;
} entries_t;

/* Keep record m if it matches; 0, or -1 out of memory. */
static int collect(entries_t *es, rd_kafka_message_t *m, const list_opts_t *o) {
    const char *why;
    char *line = format_record(m, &why);
    if (line && (!o->reason || strcasestr(why, o->reason))) {
        if (es->n == es->cap) {
            size_t cap = es->cap ? es->cap * 2 : 256;
            entry_t *ne = realloc(es->e, cap * sizeof *ne);
            if (!ne) {
                free(line);
                return -1;
            }
            es->e = ne;
            es->cap = cap;
        }
        es->e[es->n++] = (entry_t){rd_kafka_message_timestamp(m, NULL), m->offset,
                                   (int)m->partition, line};
        line = NULL;
    }
    free(line);
    return 0;
}

/* Read the planned ranges into es; 0, or 1 (said why). */
static int read_list(rd_kafka_t *rk, list_plan_t *pl, const list_opts_t *o, entries_t *es) {
    int idle = 0;
    while (pl->pending > 0 && idle < 3) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 5000);
        if (!m) {
            idle++;
            continue;
        }
        idle = 0;
        int p = m->partition, in = p >= 0 && p < pl->np;
        if (in && (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF ||
                   (!m->err && m->offset + 1 >= pl->to[p]))) {
            if (pl->from[p] < pl->to[p])
                pl->pending--;
            pl->from[p] = pl->to[p]; /* done */
        }
        int rc = 0;
        if (!m->err && in && m->offset < pl->to[p] &&
            rd_kafka_message_timestamp(m, NULL) >= o->since)
            rc = collect(es, m, o);
        else if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            ax_debug("dlq list: %s", rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
        if (rc < 0) {
            fprintf(stderr, "axctl: out of memory\n");
            return 1;
        }
    }
    return 0;
}

static int dlq_list(int argc, char **argv) {
    list_opts_t o;
    parse_list(argc, argv, &o);
    char topic[256];
    ax_conf_topic(&conf, "dlq", topic, sizeof topic);
    rd_kafka_t *rk = reader(NULL);
    list_plan_t pl = {0};
    entries_t es = {0};
    int rc = plan_list(rk, topic, &o, &pl);
    if (rc == 0) {
        rd_kafka_assign(rk, pl.l);
        rc = read_list(rk, &pl, &o, &es);
    }
    if (rc == 0 && pl.pending > 0)
        fprintf(stderr, "axctl: warning: %d partition(s) of %s not read to the end\n", pl.pending,
                topic);
    if (rc == 0 && es.n)
        qsort(es.e, es.n, sizeof *es.e, entry_cmp);
    for (size_t i = 0; i < es.n; i++) {
        if (rc == 0 && (int64_t)i < o.limit)
            puts(es.e[i].line);
        free(es.e[i].line);
    }
    free(es.e);
    plan_free(&pl);
    reader_close(rk);
    return rc;
}

/* Replays are idempotent: each carries the idempotency key of its DLQ
 * record, so replaying a record twice makes one instance (the trigger's
 * submission table dedups), and a replay whose instance already exists
 * says so. Returns 1 (and prints) if the key made an instance already, 0
 * if not, -1 if PostgreSQL cannot say (printed). */
static int already_replayed(ax_pg_t *pg, const char *rec, const char *idem) {
    char err[1024];
    ax_dlq_replayed_t r = {0};
    int rc = ax_store_dlq_replayed(pg, idem, &r, err, sizeof err);
    if (rc == AX_ERR_NOTFOUND)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return -1;
    }
    printf("record %s was already replayed: instance %lld (trace %s, %s); nothing produced\n",
           rec, (long long)r.instance_id, r.trace_id ? r.trace_id : "?", r.state ? r.state : "?");
    ax_dlq_replayed_clear(&r);
    return 1;
}

static int produce_one(const char *topic, const void *key, size_t klen, const void *buf,
                       size_t len, char *err, size_t errlen) {
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "axctl", err, errlen);
    if (!rk)
        return -1;
    ax_delivery_t d = {0};
    int rc = ax_kafka_produce(rk, topic, key, klen, buf, len, NULL, &d, err, errlen);
    if (rc == 0 && ax_kafka_wait(rk, &d, 35000) < 0) {
        snprintf(err, errlen, "%s", d.err ? rd_kafka_err2str(d.err) : "not acknowledged");
        rc = -1;
    }
    rd_kafka_destroy(rk);
    return rc < 0 ? -1 : 0;
}

/* Resubmit instance `id` (read from PostgreSQL) under idempotency key
 * idem. Returns the exit status. */
static int resubmit(ax_pg_t *pg, const char *rec, int64_t id, const char *idem) {
    char err[1024], topic[256], trace[200];
    ax_dlq_instance_t in = {0};
    int rc = ax_store_dlq_instance(pg, id, &in, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    if (!in.job) {
        fprintf(stderr,
                "axctl: instance %lld is an inline command; resubmit it with axctl submit\n",
                (long long)id);
        ax_dlq_instance_clear(&in);
        return 1;
    }
    int done = already_replayed(pg, rec, idem);
    if (done != 0) {
        ax_dlq_instance_clear(&in);
        return done < 0 ? 1 : 0;
    }
    ax_submit_t s;
    ax_submit_init(&s);
    snprintf(trace, sizeof trace, "%.150s-replay", in.trace_id ? in.trace_id : "");
    s.trace_id = trace;
    s.idempotency_key = (char *)idem;
    s.timeout_ms = in.timeout_ms;
    s.priority = in.priority;
    s.payload = in.payload;
    s.payload_len = in.payload_len;
    s.job = in.job;
    void *buf;
    size_t len;
    if (ax_submit_encode(&s, &buf, &len) < 0) {
        fprintf(stderr, "axctl: instance %lld cannot be resubmitted (cannot encode it)\n",
                (long long)id);
        ax_dlq_instance_clear(&in);
        return 1;
    }
    rc = produce_one(ax_conf_topic(&conf, "submit", topic, sizeof topic), idem, strlen(idem), buf,
                     len, err, sizeof err);
    free(buf);
    ax_dlq_instance_clear(&in);
    if (rc < 0) {
        fprintf(stderr, "axctl: replay not acknowledged by Kafka: %s\n", err);
        return 1;
    }
    printf("instance %lld resubmitted as trace %s (idempotency key %s)\n", (long long)id, trace,
           idem);
    return 0;
}

/* Resubmit the instance of a final-failure record. */
static int replay_instance(const char *rec, const char *id, const char *idem) {
    char *end;
    long long iid = strtoll(id, &end, 10);
    if (*end || end == id) {
        fprintf(stderr, "axctl: record %s names no instance ('%s')\n", rec, id);
        return 1;
    }
    ax_pg_t *pg = pg_open();
    int rc = resubmit(pg, rec, iid, idem);
    ax_pg_destroy(pg);
    return rc;
}

/* A rejected submission: produced again with an idempotency key (its own,
 * else the record's), so a second replay makes no second instance. */
static int replay_submission(const char *rec, rd_kafka_message_t *m, const char *src,
                             const char *idem) {
    ax_submit_t s;
    char err[512];
    if (ax_submit_decode(m->payload, m->len, &s, err, sizeof err) < 0) {
        /* undecodable: as it was (it will be rejected again, with its reason) */
        if (produce_one(src, m->key, m->key_len, m->payload, m->len, err, sizeof err) < 0) {
            fprintf(stderr, "axctl: replay not acknowledged by Kafka: %s\n", err);
            return 1;
        }
        printf("record %s produced again to %s (it does not decode: %s)\n", rec, src, err);
        return 0;
    }
    if (!s.idempotency_key && !(s.idempotency_key = strdup(idem))) {
        ax_submit_clear(&s);
        return 1;
    }
    int rc = 1;
    void *buf = NULL;
    size_t len;
    ax_pg_t *pg = pg_open();
    int done = already_replayed(pg, rec, s.idempotency_key);
    ax_pg_destroy(pg);
    if (done != 0) {
        rc = done < 0 ? 1 : 0;
    } else if (ax_submit_encode(&s, &buf, &len) < 0) {
        fprintf(stderr, "axctl: record %s cannot be replayed (cannot encode it)\n", rec);
    } else if (produce_one(src, s.idempotency_key, strlen(s.idempotency_key), buf, len, err,
                           sizeof err) < 0) {
        fprintf(stderr, "axctl: replay not acknowledged by Kafka: %s\n", err);
    } else {
        printf("record %s produced again to %s (idempotency key %s)\n", rec, src,
               s.idempotency_key);
        rc = 0;
    }
    free(buf);
    ax_submit_clear(&s);
    return rc;
}

static int dlq_replay(int argc, char **argv) {
    const char *colon = argc == 1 ? strchr(argv[0], ':') : NULL;
    if (!colon)
        die_usage("dlq replay PARTITION:OFFSET (as dlq list shows them)");
    char pbuf[32], rec[64];
    snprintf(pbuf, sizeof pbuf, "%.*s", (int)(colon - argv[0]), argv[0]);
    int64_t part = parse_int(pbuf, "dlq replay: PARTITION");
    int64_t off = parse_int(colon + 1, "dlq replay: OFFSET");
    char topic[256];
    ax_conf_topic(&conf, "dlq", topic, sizeof topic);
    rd_kafka_t *rk = reader(NULL);
    int np = partitions(rk, topic);
    if (part < 0 || part >= np || off < 0) {
        /* exit() with a live handle races librdkafka's threads (seen: SIGSEGV
         * at exit with SASL): close it first */
        reader_close(rk);
        die_usagef("dlq replay %s: no such record (%s has partitions 0..%d; offsets are >= 0)",
                   argv[0], topic, np - 1);
    }
    snprintf(rec, sizeof rec, "%d:%lld", (int)part, (long long)off);
    int64_t lo, hi;
    watermarks(rk, topic, (int)part, &lo, &hi);
    if (off < lo || off >= hi) {
        if (lo >= hi)
            fprintf(stderr, "axctl: no record at %s %s (partition %d is empty)\n", topic, rec,
                    (int)part);
        else
            fprintf(stderr, "axctl: no record at %s %s (partition %d holds offsets %lld..%lld)\n",
                    topic, rec, (int)part, (long long)lo, (long long)hi - 1);
        reader_close(rk);
        return 1;
    }
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, (int)part)->offset = off;
    rd_kafka_assign(rk, l);
    rd_kafka_message_t *m = NULL;
    for (int tries = 0; tries < 3 && !m; tries++) {
        m = rd_kafka_consumer_poll(rk, 5000);
        if (m && (m->err || m->offset != off)) {
            if (m->err)
                ax_debug("dlq replay: %s", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            m = NULL;
            break;
        }
    }
    int rc = 1;
    if (!m) {
        fprintf(stderr, "axctl: no record at %s %s\n", topic, rec);
    } else {
        char kind[64], st[256], inst[32], idem[400], submit[256];
        snprintf(idem, sizeof idem, "dlq-replay:%s:%s", topic, rec);
        ax_conf_topic(&conf, "submit", submit, sizeof submit);
        const char *k = hdr(m, "ax.kind", kind, sizeof kind);
        if (k && strcmp(k, "final_failure") == 0) {
            rc = hdr(m, "ax.instance.id", inst, sizeof inst) ? replay_instance(rec, inst, idem) : 1;
        } else if (hdr(m, "ax.source.topic", st, sizeof st) && strcmp(st, submit) == 0) {
            rc = replay_submission(rec, m, st, idem);
        } else if (hdr(m, "ax.source.topic", st, sizeof st)) {
            /* attempts and dispatches: their processing is idempotent */
            char err[512];
            if (produce_one(st, m->key, m->key_len, m->payload, m->len, err, sizeof err) == 0) {
                printf("record %s produced again to %s\n", rec, st);
                rc = 0;
            } else {
                fprintf(stderr, "axctl: replay not acknowledged by Kafka: %s\n", err);
            }
        } else {
            fprintf(stderr, "axctl: record %s has no source to replay to\n", rec);
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_topic_partition_list_destroy(l);
    reader_close(rk);
    return rc;
}

/* ---- the DLQ's tail, for submit --wait ------------------------------------------------- */

struct dlq_tail {
    rd_kafka_t *rk;
    char submit[256];
};

dlq_tail_t *dlq_tail_open(void) {
    char topic[256];
    ax_conf_topic(&conf, "dlq", topic, sizeof topic);
    dlq_tail_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    ax_conf_topic(&conf, "submit", t->submit, sizeof t->submit);
    t->rk = reader(NULL);
    int np = partitions_of(t->rk, topic);
    rd_kafka_topic_partition_list_t *l = np > 0 ? rd_kafka_topic_partition_list_new(np) : NULL;
    for (int p = 0; l && p < np; p++) {
        int64_t lo, hi;
        if (rd_kafka_query_watermark_offsets(t->rk, topic, p, &lo, &hi, 5000)) {
            rd_kafka_topic_partition_list_destroy(l);
            l = NULL;
            break;
        }
        rd_kafka_topic_partition_list_add(l, topic, p)->offset = hi;
    }
    if (!l) {
        ax_debug("submit --wait: the dead-letter topic %s cannot be read: not watched", topic);
        reader_close(t->rk);
        free(t);
        return NULL;
    }
    rd_kafka_assign(t->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    return t;
}

int dlq_tail_find(dlq_tail_t *t, const char *key, const char *trace, int wait_ms, char *reason,
                  size_t len) {
    int64_t until = ax_mono_ms() + wait_ms;
    int found = 0;
    for (int64_t left = wait_ms; !found && left >= 0; left = until - ax_mono_ms()) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(t->rk, (int)left);
        if (!m)
            break;
        char st[256], why[600];
        if (!m->err && m->key_len == strlen(key) && memcmp(m->key, key, m->key_len) == 0 &&
            hdr(m, "ax.source.topic", st, sizeof st) && strcmp(st, t->submit) == 0) {
            ax_submit_t s;
            char err[256];
            /* the same key from another submission (an idempotency key
             * reused) is not this one: compare the trace id when it decodes */
            int same = 1;
            if (ax_submit_decode(m->payload, m->len, &s, err, sizeof err) == 0) {
                same = s.trace_id && strcmp(s.trace_id, trace) == 0;
                ax_submit_clear(&s);
            }
            if (same) {
                snprintf(reason, len, "%s", hdr(m, "ax.reason", why, sizeof why) ?: "(no reason)");
                found = 1;
            }
        }
        rd_kafka_message_destroy(m);
    }
    return found;
}

void dlq_tail_close(dlq_tail_t *t) {
    if (!t)
        return;
    reader_close(t->rk);
    free(t);
}

int cmd_dlq(int argc, char **argv) {
    if (argc >= 1 && strcmp(argv[0], "list") == 0)
        return dlq_list(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "replay") == 0)
        return dlq_replay(argc - 1, argv + 1);
    die_usage("dlq list [--limit N] [--since TIME] [--reason TEXT] | dlq replay PARTITION:OFFSET");
}
