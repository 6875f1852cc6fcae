/*
 * dlq.c — reading and replaying the dead-letter topic (ax/dlq.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/dlq.h"
#include "ax/kafka.h"
#include "ax/log.h"
#include "ax/store_dlq.h"

struct ax_dlq {
    rd_kafka_t *rk;
    char topic[256];
    char submit[256];
};

/* librdkafka's own lines: to the debug log, never raw to stderr. */
static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    ax_debug("kafka %s: %s", fac, buf);
}

static void quiet_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    ax_debug("kafka: %s: %s", rd_kafka_err2name(err), reason);
}

ax_dlq_t *ax_dlq_open(const ax_conf_t *c, int *ret_rc, char *errbuf, size_t errlen) {
    char err[512];
    ax_dlq_t *d = calloc(1, sizeof *d);
    rd_kafka_conf_t *kc = rd_kafka_conf_new();
    *ret_rc = AX_ERR_NOMEM;
    if (!d || !kc) {
        free(d);
        if (kc)
            rd_kafka_conf_destroy(kc);
        ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
        return NULL;
    }
    rd_kafka_conf_set_log_cb(kc, quiet_log);
    rd_kafka_conf_set_error_cb(kc, quiet_error);
    /* as every client of libax (kafka.c): no Nagle's delay unless kafka.* says so */
    rd_kafka_conf_set(kc, "socket.nagle.disable", "true", err, sizeof err);
    for (size_t i = 0; i < c->n_kafka; i++)
        if (rd_kafka_conf_set(kc, c->kafka[i].key, c->kafka[i].value, err, sizeof err) !=
            RD_KAFKA_CONF_OK) {
            *ret_rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID, "kafka.%s: %s", c->kafka[i].key,
                                err);
            rd_kafka_conf_destroy(kc);
            free(d);
            return NULL;
        }
    rd_kafka_conf_set(kc, "group.id", "axctl-dlq", err, sizeof err);
    rd_kafka_conf_set(kc, "enable.auto.commit", "false", err, sizeof err);
    rd_kafka_conf_set(kc, "enable.partition.eof", "true", err, sizeof err);
    if (!(d->rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof err))) {
        *ret_rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "%s", err);
        free(d);
        return NULL;
    }
    rd_kafka_poll_set_consumer(d->rk);
    ax_conf_topic(c, "dlq", d->topic, sizeof d->topic);
    ax_conf_topic(c, "submit", d->submit, sizeof d->submit);
    *ret_rc = 0;
    return d;
}

void ax_dlq_close(ax_dlq_t *d) {
    if (!d)
        return;
    rd_kafka_consumer_close(d->rk);
    rd_kafka_destroy(d->rk);
    free(d);
}

const char *ax_dlq_topic(const ax_dlq_t *d) { return d->topic; }

int ax_dlq_partitions(ax_dlq_t *d, int *ret_n, char *errbuf, size_t errlen) {
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *t = rd_kafka_topic_new(d->rk, d->topic, NULL);
    int n = -1;
    if (t && rd_kafka_metadata(d->rk, 0, t, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (md->topic_cnt == 1 && !md->topics[0].err)
            n = md->topics[0].partition_cnt;
        rd_kafka_metadata_destroy(md);
    }
    if (t)
        rd_kafka_topic_destroy(t);
    if (n < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_IO,
                         "the dead-letter topic %s cannot be read (not created yet, or Kafka is "
                         "unreachable)", d->topic);
    *ret_n = n;
    return 0;
}

static const char *hdr(const rd_kafka_message_t *m, const char *name, char *buf, size_t len) {
    rd_kafka_headers_t *h = NULL;
    const void *v;
    size_t n;
    buf[0] = '\0';
    if (rd_kafka_message_headers(m, &h) || !h ||
        rd_kafka_header_get_last(h, name, &v, &n) != RD_KAFKA_RESP_ERR_NO_ERROR || !v)
        return NULL;
    snprintf(buf, len, "%.*s", (int)n, (const char *)v);
    return buf;
}

void ax_dlq_rec_of(const rd_kafka_message_t *m, ax_dlq_rec_t *r) {
    char kind[64], num[32];
    memset(r, 0, sizeof *r);
    r->partition = m->partition;
    r->offset = m->offset;
    r->ts_ms = rd_kafka_message_timestamp(m, NULL);
    r->final_failure = hdr(m, "ax.kind", kind, sizeof kind) && strcmp(kind, "final_failure") == 0;
    hdr(m, "ax.source.topic", r->source, sizeof r->source);
    hdr(m, "ax.reason", r->reason, sizeof r->reason);
    hdr(m, "ax.service", r->service, sizeof r->service);
    hdr(m, "ax.job", r->job, sizeof r->job);
    hdr(m, "ax.trace.id", r->trace_id, sizeof r->trace_id);
    char *text[] = {r->source, r->reason, r->service, r->job, r->trace_id};
    for (size_t i = 0; i < AX_ARRAY_SIZE(text); i++)
        ax_utf8_sanitize(text[i], strlen(text[i]));
    r->source_partition = hdr(m, "ax.source.partition", num, sizeof num) ? atoll(num) : -1;
    r->source_offset = hdr(m, "ax.source.offset", num, sizeof num) ? atoll(num) : -1;
    r->instance_id = hdr(m, "ax.instance.id", num, sizeof num) ? atoll(num) : 0;
}

/* ---- list ------------------------------------------------------------------------------- */

typedef struct plan {
    int np, pending; /* partitions, those not read to their end yet */
    int64_t *from, *to;
    rd_kafka_topic_partition_list_t *l;
} plan_t;

static void plan_free(plan_t *pl) {
    free(pl->from);
    free(pl->to);
    if (pl->l)
        rd_kafka_topic_partition_list_destroy(pl->l);
}

/* Per partition: from where to where. Without a reason filter, the
 * newest `limit` overall are among each partition's last `limit`. */
static int plan_list(ax_dlq_t *d, int64_t limit, int64_t since, const char *reason, plan_t *pl,
                     char *errbuf, size_t errlen) {
    int rc = ax_dlq_partitions(d, &pl->np, errbuf, errlen);
    if (rc < 0)
        return rc;
    int np = pl->np;
    pl->from = calloc((size_t)np + 1, sizeof *pl->from);
    pl->to = calloc((size_t)np + 1, sizeof *pl->to);
    pl->l = rd_kafka_topic_partition_list_new(np);
    if (!pl->from || !pl->to || !pl->l)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
    for (int p = 0; p < np; p++) {
        int64_t lo, hi;
        rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(d->rk, d->topic, p, &lo, &hi,
                                                                 10000);
        if (e)
            return ax_seterr(errbuf, errlen, AX_ERR_IO, "cannot read the offsets of %s [%d]: %s",
                             d->topic, p, rd_kafka_err2str(e));
        pl->from[p] = lo;
        pl->to[p] = hi;
        rd_kafka_topic_partition_list_add(pl->l, d->topic, p)->offset =
            since == INT64_MIN ? lo : since;
    }
    if (since != INT64_MIN) {
        rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(d->rk, pl->l, 10000);
        if (e)
            return ax_seterr(errbuf, errlen, AX_ERR_IO, "cannot find the offsets of since: %s",
                             rd_kafka_err2str(e));
        for (int p = 0; p < np; p++) {
            int64_t off = pl->l->elems[p].offset;
            pl->from[p] = off < 0 ? pl->to[p] : off; /* -1: nothing at or after since */
        }
    }
    pl->pending = 0;
    for (int p = 0; p < np; p++) {
        if (!reason && pl->to[p] - pl->from[p] > limit)
            pl->from[p] = pl->to[p] - limit;
        pl->l->elems[p].offset = pl->from[p];
        pl->pending += pl->from[p] < pl->to[p];
    }
    return 0;
}

typedef struct recs {
    ax_dlq_rec_t *v;
    size_t n, cap;
} recs_t;

static int keep(recs_t *rs, const rd_kafka_message_t *m, const char *reason) {
    ax_dlq_rec_t r;
    ax_dlq_rec_of(m, &r);
    if (reason && !strcasestr(r.reason, reason))
        return 0;
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 64;
        ax_dlq_rec_t *nv = realloc(rs->v, cap * sizeof *nv);
        if (!nv)
            return -1;
        rs->v = nv;
        rs->cap = cap;
    }
    rs->v[rs->n++] = r;
    return 0;
}

static int read_plan(ax_dlq_t *d, plan_t *pl, int64_t since, const char *reason, recs_t *rs) {
    int idle = 0;
    while (pl->pending > 0 && idle < 3) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(d->rk, 5000);
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
            rd_kafka_message_timestamp(m, NULL) >= since)
            rc = keep(rs, m, reason);
        else if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            ax_debug("dlq list: %s", rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
        if (rc < 0)
            return AX_ERR_NOMEM;
    }
    return 0;
}

static int rec_cmp(const void *a, const void *b) {
    const ax_dlq_rec_t *x = a, *y = b;
    if (x->ts_ms != y->ts_ms)
        return x->ts_ms < y->ts_ms ? 1 : -1;
    if (x->partition != y->partition)
        return x->partition < y->partition ? -1 : 1;
    return x->offset < y->offset ? 1 : x->offset > y->offset ? -1 : 0;
}

int ax_dlq_list(ax_dlq_t *d, int64_t limit, int64_t since_ms, const char *reason,
                ax_dlq_rec_t **ret, size_t *ret_n, char *errbuf, size_t errlen) {
    plan_t pl = {0};
    recs_t rs = {0};
    *ret = NULL;
    *ret_n = 0;
    int rc = plan_list(d, limit, since_ms, reason, &pl, errbuf, errlen);
    if (rc == 0) {
        rd_kafka_assign(d->rk, pl.l);
        rc = read_plan(d, &pl, since_ms, reason, &rs);
        rd_kafka_assign(d->rk, NULL);
        if (rc == AX_ERR_NOMEM)
            ax_seterr(errbuf, errlen, rc, "out of memory");
    }
    if (rc == 0 && pl.pending > 0)
        ax_warn("dlq list: %d partition(s) of %s not read to the end", pl.pending, d->topic);
    plan_free(&pl);
    if (rc < 0) {
        free(rs.v);
        return rc;
    }
    if (rs.n)
        qsort(rs.v, rs.n, sizeof *rs.v, rec_cmp);
    *ret = rs.v;
    *ret_n = rs.n < (size_t)limit ? rs.n : (size_t)limit;
    return 0;
}

/* ---- one record ------------------------------------------------------------------------- */

int ax_dlq_fetch(ax_dlq_t *d, int32_t part, int64_t off, rd_kafka_message_t **ret, char *errbuf,
                 size_t errlen) {
    int np = 0;
    int rc = ax_dlq_partitions(d, &np, errbuf, errlen);
    *ret = NULL;
    if (rc < 0)
        return rc;
    if (part < 0 || part >= np || off < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND,
                         "no such record (%s has partitions 0..%d; offsets are >= 0)", d->topic,
                         np - 1);
    int64_t lo, hi;
    rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(d->rk, d->topic, part, &lo, &hi,
                                                             10000);
    if (e)
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "cannot read the offsets of %s [%d]: %s",
                         d->topic, (int)part, rd_kafka_err2str(e));
    if (off < lo || off >= hi)
        return lo >= hi ? ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND,
                                    "no record at %s %d:%lld (partition %d is empty)", d->topic,
                                    (int)part, (long long)off, (int)part)
                        : ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND,
                                    "no record at %s %d:%lld (partition %d holds offsets "
                                    "%lld..%lld)", d->topic, (int)part, (long long)off,
                                    (int)part, (long long)lo, (long long)hi - 1);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, d->topic, part)->offset = off;
    rd_kafka_assign(d->rk, l);
    rd_kafka_message_t *m = NULL;
    for (int tries = 0; tries < 3 && !m; tries++) {
        m = rd_kafka_consumer_poll(d->rk, 5000);
        if (m && (m->err || m->offset != off)) {
            if (m->err)
                ax_debug("dlq fetch: %s", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            m = NULL;
            break;
        }
    }
    rd_kafka_assign(d->rk, NULL);
    rd_kafka_topic_partition_list_destroy(l);
    if (!m)
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no record at %s %d:%lld", d->topic,
                         (int)part, (long long)off);
    *ret = m;
    return 0;
}

/* ---- replay ----------------------------------------------------------------------------- */

/* Hand one record to rk. dv NULL: wait for its acknowledgement here;
 * else tracked by dv, whose on_report tells the outcome (no wait). */
static int produce_one(rd_kafka_t *rk, ax_delivery_t *dv, const char *topic, const void *key,
                       size_t klen, const void *buf, size_t len, char *errbuf, size_t errlen) {
    ax_delivery_t own = {0};
    int rc = ax_kafka_produce(rk, topic, key, klen, buf, len, NULL, dv ? dv : &own, errbuf,
                              errlen);
    if (dv)
        return rc < 0 ? AX_ERR_IO : 0;
    if ((rc == 0 || own.pending) && ax_kafka_wait(rk, &own, 35000) < 0)
        rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "replay not acknowledged by Kafka: %s",
                       own.err ? rd_kafka_err2str(own.err) : "timed out");
    return rc < 0 ? AX_ERR_IO : 0;
}

/* 1 if key idem made an instance already (ret filled), 0 if not, < 0 error. */
static int already(ax_pg_t *pg, const char *idem, ax_dlq_replay_t *ret, char *errbuf,
                   size_t errlen) {
    ax_dlq_replayed_t r = {0};
    int rc = ax_store_dlq_replayed(pg, idem, &r, errbuf, errlen);
    if (rc == AX_ERR_NOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    ret->action = AX_DLQ_ALREADY;
    ret->instance_id = r.instance_id;
    snprintf(ret->trace_id, sizeof ret->trace_id, "%s", r.trace_id ? r.trace_id : "?");
    snprintf(ret->state, sizeof ret->state, "%s", r.state ? r.state : "?");
    ax_dlq_replayed_clear(&r);
    return 1;
}

/* A final failure: its instance's job submitted again under idem. */
static int resubmit(ax_pg_t *pg, rd_kafka_t *rk, ax_delivery_t *dv, const ax_dlq_t *d, int64_t id,
                    ax_dlq_replay_t *ret, char *errbuf, size_t errlen) {
    ax_dlq_instance_t in = {0};
    int rc = ax_store_dlq_instance(pg, id, &in, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (!in.job) {
        ax_dlq_instance_clear(&in);
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "instance %lld is an inline command; resubmit it with axctl submit",
                         (long long)id);
    }
    if ((rc = already(pg, ret->idempotency_key, ret, errbuf, errlen)) != 0) {
        ax_dlq_instance_clear(&in);
        return rc < 0 ? rc : 0;
    }
    ax_submit_t s;
    ax_submit_init(&s);
    snprintf(ret->trace_id, sizeof ret->trace_id, "%.150s-replay", in.trace_id ? in.trace_id : "");
    s.trace_id = ret->trace_id;
    s.idempotency_key = ret->idempotency_key;
    s.timeout_ms = in.timeout_ms;
    s.priority = in.priority;
    s.payload = in.payload;
    s.payload_len = in.payload_len;
    s.job = in.job;
    void *buf;
    size_t len;
    if (ax_submit_encode(&s, &buf, &len) < 0) {
        ax_dlq_instance_clear(&in);
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "instance %lld cannot be resubmitted (cannot encode it)", (long long)id);
    }
    const char *idem = ret->idempotency_key;
    rc = produce_one(rk, dv, d->submit, idem, strlen(idem), buf, len, errbuf, errlen);
    free(buf);
    ax_dlq_instance_clear(&in);
    ret->action = AX_DLQ_RESUBMITTED;
    snprintf(ret->topic, sizeof ret->topic, "%s", d->submit);
    return rc;
}

/* A rejected submission: produced again with an idempotency key (its own,
 * else the record's), so a second replay makes no second instance. */
static int replay_submission(ax_pg_t *pg, rd_kafka_t *rk, ax_delivery_t *dv,
                             const rd_kafka_message_t *m,
                             const char *src, ax_dlq_replay_t *ret, char *errbuf, size_t errlen) {
    ax_submit_t s;
    char err[256];
    ret->action = AX_DLQ_PRODUCED;
    snprintf(ret->topic, sizeof ret->topic, "%s", src);
    if (ax_submit_decode(m->payload, m->len, &s, err, sizeof err) < 0) {
        /* undecodable: as it was (it will be rejected again, with its reason) */
        ret->undecodable = 1;
        snprintf(ret->decode_err, sizeof ret->decode_err, "%s", err);
        ret->idempotency_key[0] = '\0';
        return produce_one(rk, dv, src, m->key, m->key_len, m->payload, m->len, errbuf, errlen);
    }
    if (s.idempotency_key)
        snprintf(ret->idempotency_key, sizeof ret->idempotency_key, "%s", s.idempotency_key);
    else if (!(s.idempotency_key = strdup(ret->idempotency_key))) {
        ax_submit_clear(&s);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
    }
    int rc = already(pg, s.idempotency_key, ret, errbuf, errlen);
    void *buf = NULL;
    size_t len;
    if (rc == 0 && ax_submit_encode(&s, &buf, &len) < 0)
        rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID, "the record cannot be replayed (cannot "
                                                       "encode it)");
    else if (rc == 0)
        rc = produce_one(rk, dv, src, s.idempotency_key, strlen(s.idempotency_key), buf, len, errbuf,
                         errlen);
    free(buf);
    ax_submit_clear(&s);
    return rc < 0 ? rc : 0;
}

static int replay(ax_dlq_t *d, ax_pg_t *pg, rd_kafka_t *rk, ax_delivery_t *dv,
                  const rd_kafka_message_t *m, ax_dlq_replay_t *ret, char *errbuf,
                  size_t errlen) {
    ax_dlq_rec_t r;
    memset(ret, 0, sizeof *ret);
    ax_dlq_rec_of(m, &r);
    snprintf(ret->idempotency_key, sizeof ret->idempotency_key, "dlq-replay:%s:%d:%lld",
             d->topic, (int)r.partition, (long long)r.offset);
    if (r.final_failure) {
        if (r.instance_id <= 0)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "the record names no instance");
        return resubmit(pg, rk, dv, d, r.instance_id, ret, errbuf, errlen);
    }
    if (!r.source[0])
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "the record has no source to replay to");
    if (strcmp(r.source, d->submit) == 0)
        return replay_submission(pg, rk, dv, m, r.source, ret, errbuf, errlen);
    /* attempts and dispatches: their processing is idempotent */
    ret->action = AX_DLQ_PRODUCED;
    ret->idempotency_key[0] = '\0';
    snprintf(ret->topic, sizeof ret->topic, "%s", r.source);
    return produce_one(rk, dv, r.source, m->key, m->key_len, m->payload, m->len, errbuf, errlen);
}

int ax_dlq_replay(ax_dlq_t *d, ax_pg_t *pg, rd_kafka_t *rk, const ax_conf_t *c,
                  const rd_kafka_message_t *m, ax_dlq_replay_t *ret, char *errbuf,
                  size_t errlen) {
    return replay(d, pg, rk, NULL, m, ret, errbuf, errlen);
}

int ax_dlq_replay_start(const ax_dlq_t *d, ax_pg_t *pg, rd_kafka_t *rk,
                        const rd_kafka_message_t *m, ax_dlq_replay_t *ret, ax_delivery_t *dv,
                        char *errbuf, size_t errlen) {
    return replay((ax_dlq_t *)d, pg, rk, dv, m, ret, errbuf, errlen);
}
