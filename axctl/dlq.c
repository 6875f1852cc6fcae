/*
 * dlq.c — axctl dlq list | replay: the dead-letter topic <prefix>dlq.
 *
 * Two kinds of records land there: messages a service could not process
 * (undecodable, unknown job, ...: the original bytes, headers ax.reason and
 * ax.source.topic/partition/offset), and final failures (ax.kind =
 * final_failure: the instance's Result record, after its retries).
 *
 * list shows the newest records first (ISO-8601 UTC times), with the job,
 * trace id and instance a record's headers name; it reads the topic
 * through libax's ax_dlq_list (ax/dlq.h), as ax-api does.
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
#include "ax/dlq.h"
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
    /* as every client of libax (kafka.c): no Nagle's delay unless kafka.* says so */
    rd_kafka_conf_set(kc, "socket.nagle.disable", "true", err, sizeof err);
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

/* One line per record: P:O, time (ISO-8601 UTC), kind, what (with the
 * job, trace id and instance its headers name, in parentheses), reason. */
static void print_record(const ax_dlq_rec_t *r) {
    char when[40], what[400], about[700] = "";
    iso_ms(r->ts_ms, when, sizeof when);
    if (r->final_failure)
        snprintf(what, sizeof what, "instance %lld", (long long)r->instance_id);
    else if (!r->source[0])
        snprintf(what, sizeof what, "from ? [?] @?");
    else if (r->source_partition < 0 || r->source_offset < 0)
        snprintf(what, sizeof what, "from %s [?] @?", r->source);
    else
        snprintf(what, sizeof what, "from %s [%lld] @%lld", r->source,
                 (long long)r->source_partition, (long long)r->source_offset);
    size_t n = 0;
    if (r->job[0])
        n += (size_t)snprintf(about + n, sizeof about - n, "%sjob %s", n ? ", " : "", r->job);
    if (r->trace_id[0] && n < sizeof about)
        n += (size_t)snprintf(about + n, sizeof about - n, "%strace %s", n ? ", " : "",
                              r->trace_id);
    if (!r->final_failure && r->instance_id > 0 && n < sizeof about)
        n += (size_t)snprintf(about + n, sizeof about - n, "%sinstance %lld", n ? ", " : "",
                              (long long)r->instance_id);
    printf("%d:%lld  %s  %s  %s%s%s%s  %s\n", (int)r->partition, (long long)r->offset, when,
           r->final_failure ? "final_failure" : "rejected", what, about[0] ? " (" : "", about,
           about[0] ? ")" : "", r->reason);
}

/* The dead-letter topic's reader, or NULL with *exit_rc set (2: the
 * configuration is wrong, 1: otherwise) and the reason printed. */
static ax_dlq_t *dlq_open(int *exit_rc) {
    char err[1024];
    int rc;
    ax_dlq_t *d = ax_dlq_open(&conf, &rc, err, sizeof err);
    if (!d) {
        fprintf(stderr, "axctl: %s%s\n", rc == AX_ERR_INVALID ? "configuration error: " : "",
                err);
        *exit_rc = rc == AX_ERR_INVALID ? 2 : 1;
    }
    return d;
}

/* dlq list through ax_dlq_list (libax, ax/dlq.h), which ax-api calls too. */
static int dlq_list(int argc, char **argv) {
    list_opts_t o;
    parse_list(argc, argv, &o);
    char err[1024];
    int rc;
    ax_dlq_t *d = dlq_open(&rc);
    if (!d)
        return rc;
    ax_dlq_rec_t *recs = NULL;
    size_t n = 0;
    rc = ax_dlq_list(d, o.limit, o.since, o.reason, &recs, &n, err, sizeof err);
    ax_dlq_close(d);
    if (rc < 0) {
        fprintf(stderr, "axctl: %s\n", err);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        print_record(&recs[i]);
    free(recs);
    return 0;
}

/* dlq replay P:O through ax_dlq_replay (libax, ax/dlq.h), which ax-api
 * calls too. */
static int replay_print(const char *rec, int64_t instance, const ax_dlq_replay_t *r) {
    switch (r->action) {
    case AX_DLQ_ALREADY:
        printf("record %s was already replayed: instance %lld (trace %s, %s); nothing produced\n",
               rec, (long long)r->instance_id, r->trace_id, r->state);
        break;
    case AX_DLQ_RESUBMITTED:
        printf("instance %lld resubmitted as trace %s (idempotency key %s)\n",
               (long long)instance, r->trace_id, r->idempotency_key);
        break;
    default:
        if (r->undecodable)
            printf("record %s produced again to %s (it does not decode: %s)\n", rec, r->topic,
                   r->decode_err);
        else if (r->idempotency_key[0])
            printf("record %s produced again to %s (idempotency key %s)\n", rec, r->topic,
                   r->idempotency_key);
        else
            printf("record %s produced again to %s\n", rec, r->topic);
    }
    return 0;
}

static int dlq_replay(int argc, char **argv) {
    const char *colon = argc == 1 ? strchr(argv[0], ':') : NULL;
    if (!colon)
        die_usage("dlq replay PARTITION:OFFSET (as dlq list shows them)");
    char pbuf[32], rec[64], err[1024];
    snprintf(pbuf, sizeof pbuf, "%.*s", (int)(colon - argv[0]), argv[0]);
    int64_t part = parse_int(pbuf, "dlq replay: PARTITION");
    int64_t off = parse_int(colon + 1, "dlq replay: OFFSET");
    int rc;
    ax_dlq_t *d = dlq_open(&rc);
    if (!d)
        return rc;
    snprintf(rec, sizeof rec, "%d:%lld", (int)part, (long long)off);
    rd_kafka_message_t *m = NULL;
    rc = part > INT32_MAX ? ax_seterr(err, sizeof err, AX_ERR_NOTFOUND, "no such record")
                          : ax_dlq_fetch(d, (int32_t)part, off, &m, err, sizeof err);
    if (rc == AX_ERR_NOTFOUND && strncmp(err, "no such record", 14) == 0) {
        /* exit() with a live handle races librdkafka's threads: close it first */
        ax_dlq_close(d);
        die_usagef("dlq replay %s: %s", argv[0], err);
    }
    ax_dlq_replay_t r;
    int64_t instance = 0;
    if (rc == 0) {
        ax_dlq_rec_t rr;
        ax_dlq_rec_of(m, &rr);
        instance = rr.instance_id;
        ax_pg_t *pg = pg_open();
        rd_kafka_t *rk = producer_open();
        rc = ax_dlq_replay(d, pg, rk, &conf, m, &r, err, sizeof err);
        rd_kafka_destroy(rk);
        ax_pg_destroy(pg);
        rd_kafka_message_destroy(m);
    }
    ax_dlq_close(d);
    if (rc < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    return replay_print(rec, instance, &r);
}

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
