/*
 * recover.c — reading the results topic back (publish.c says when): from
 * the reconciled offsets to its end, read_committed, marking every instance
 * found there published. It reads in slices of 50 ms, one per turn of the
 * publisher's thread (which goes on at once while a recovery is under way,
 * and checks for a stop between them), and saves its positions with every
 * chunk it marks, so a recovery cut short is resumed, not restarted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/log.h"
#include "ax/store_outbox.h"
#include "callback.h"

enum { PUB_MARK_CHUNK = 10000, PUB_SLICE_MS = 50, PUB_SAVE_MS = 1000 };

void cb_recover_end(publisher_t *pb) {
    if (pb->rrk) {
        rd_kafka_assign(pb->rrk, NULL);
        rd_kafka_consumer_close(pb->rrk);
        rd_kafka_destroy(pb->rrk);
        pb->rrk = NULL;
    }
    free(pb->rpos);
    free(pb->reof);
    free(pb->rids);
    pb->rpos = NULL;
    pb->reof = NULL;
    pb->rids = NULL;
    pb->nrids = pb->caprids = 0;
    pb->rparts = pb->rneof = 0;
}

static int found(publisher_t *pb, int64_t id) {
    if (pb->nrids == pb->caprids) {
        size_t cap = pb->caprids ? pb->caprids * 2 : 1024;
        int64_t *v = realloc(pb->rids, cap * sizeof *v);
        if (!v)
            return AX_ERR_NOMEM;
        pb->rids = v;
        pb->caprids = cap;
    }
    pb->rids[pb->nrids++] = id;
    pb->rfound++;
    return 0;
}

/* Save what the recovery read so far: its instances marked published,
 * and each partition's position with them. */
static int save(callback_t *cb, char *err, size_t errlen) {
    publisher_t *pb = &cb->pub;
    int n = ax_store_outbox_mark(cb->pub.pg, AX_OUTBOX_RECOVERED, cb->svc.conf.topic_prefix,
                                 pb->rids, pb->nrids, cb->svc.topic_results, pb->rpos, pb->rparts,
                                 err, errlen);
    pb->nrids = 0;
    pb->rsaved_ms = ax_mono_ms();
    if (n < 0)
        return n;
    if (n > 0) /* per save: a recovery cut short later has still said what it marked */
        ax_info("results recovery: %d instance(s) found on %s marked published", n,
                cb->svc.topic_results);
    pb->rmarked += n;
    return 0;
}

/* The results topic's partition count, from a fresh reader of its own
 * (nothing fetched for an earlier recovery — an older end of a partition —
 * can be taken for this one's). */
static int partitions(callback_t *cb, int *ret_n) {
    ax_svc_t *svc = &cb->svc;
    publisher_t *pb = &cb->pub;
    char err[1024], cid[300];
    snprintf(cid, sizeof cid, "%s-results-recovery", svc->name);
    pb->rrk = ax_kafka_reader_new(&svc->conf, cid, err, sizeof err);
    if (!pb->rrk) {
        ax_warn("results recovery: %s", err);
        return AX_ERR_IO;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(pb->rrk, svc->topic_results, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t kerr = rkt ? rd_kafka_metadata(pb->rrk, 0, rkt, &md, 10000)
                                   : RD_KAFKA_RESP_ERR__INVALID_ARG;
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    if (kerr || !md || md->topic_cnt != 1 || md->topics[0].err ||
        md->topics[0].partition_cnt <= 0) {
        rd_kafka_resp_err_t why = kerr                          ? kerr
                                  : md && md->topic_cnt == 1 ? md->topics[0].err
                                                             : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
        ax_warn("results recovery: no metadata for %s: %s", svc->topic_results,
                rd_kafka_err2str(why));
        if (md)
            rd_kafka_metadata_destroy(md);
        return AX_ERR_IO;
    }
    *ret_n = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    return 0;
}

/* With no stored position for the topic at all (first start, or an
 * upgrade: what the code before migration 015 published has
 * result_published_at set, and no publisher of this code has produced yet
 * — it stores these rows before its first transaction) every partition
 * starts at its current end, stored now. */
static int store_ends(callback_t *cb, int nparts, char *err, size_t errlen) {
    ax_svc_t *svc = &cb->svc;
    int64_t *ends = calloc((size_t)nparts, sizeof *ends);
    if (!ends)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "out of memory");
    int rc = 0;
    for (int p = 0; p < nparts && rc == 0; p++) {
        int64_t lo = 0;
        rd_kafka_resp_err_t kerr = rd_kafka_query_watermark_offsets(
            cb->pub.rrk, svc->topic_results, p, &lo, &ends[p], 10000);
        if (kerr)
            rc = ax_seterr(err, errlen, AX_ERR_IO, "end of %s [%d]: %s", svc->topic_results, p,
                           rd_kafka_err2str(kerr));
    }
    if (rc == 0)
        rc = ax_store_outbox_mark(cb->pub.pg, AX_OUTBOX_RECOVERED, svc->conf.topic_prefix, NULL, 0,
                                  svc->topic_results, ends, nparts, err, errlen);
    free(ends);
    if (rc >= 0)
        ax_info("results recovery: no reconciled offsets for %s yet: its current end stored",
                svc->topic_results);
    return rc < 0 ? rc : 0;
}

/* Where each partition's reading starts: its stored position; a partition
 * without one while others have one (added since) from its beginning. */
static int positions(callback_t *cb, int nparts) {
    ax_svc_t *svc = &cb->svc;
    publisher_t *pb = &cb->pub;
    char err[1024];
    int64_t *next = NULL;
    int nnext = 0;
    int rc = ax_store_outbox_offsets(cb->pub.pg, svc->topic_results, &next, &nnext, err, sizeof err);
    if (rc == 0 && nnext == 0 && (rc = store_ends(cb, nparts, err, sizeof err)) == 0)
        rc = ax_store_outbox_offsets(cb->pub.pg, svc->topic_results, &next, &nnext, err,
                                     sizeof err);
    if (rc < 0) {
        ax_warn("results recovery: %s", err);
        return rc;
    }
    pb->rpos = malloc((size_t)nparts * sizeof *pb->rpos);
    pb->reof = calloc((size_t)nparts, 1);
    if (!pb->rpos || !pb->reof) {
        free(next);
        return AX_ERR_NOMEM;
    }
    pb->rparts = nparts;
    for (int p = 0; p < nparts; p++)
        pb->rpos[p] = p < nnext ? next[p] : -1;
    free(next);
    return 0;
}

/* Start a recovery: a reader assigned at the stored positions. */
static int start(callback_t *cb) {
    publisher_t *pb = &cb->pub;
    int nparts = 0;
    int rc = partitions(cb, &nparts);
    if (rc == 0)
        rc = positions(cb, nparts);
    if (rc < 0)
        return rc;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(nparts);
    for (int p = 0; p < nparts; p++)
        rd_kafka_topic_partition_list_add(l, cb->svc.topic_results, p)->offset =
            pb->rpos[p] >= 0 ? pb->rpos[p] : RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_resp_err_t kerr = rd_kafka_assign(pb->rrk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (kerr) {
        ax_warn("results recovery: assign: %s", rd_kafka_err2str(kerr));
        return AX_ERR_IO;
    }
    pb->nrids = 0;
    pb->rfound = pb->rmarked = 0;
    pb->rsaved_ms = ax_mono_ms();
    return 0;
}

/* One message of the topic: its position, and its instance (the key). */
static int take(publisher_t *pb, const rd_kafka_message_t *m) {
    int p = m->partition;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        if (p >= 0 && p < pb->rparts && !pb->reof[p]) {
            pb->reof[p] = 1;
            pb->rpos[p] = m->offset;
            pb->rneof++;
        }
        return 0;
    }
    if (m->err) {
        ax_warn("results recovery: %s", rd_kafka_message_errstr(m));
        return 0;
    }
    if (p >= 0 && p < pb->rparts && pb->rpos[p] < m->offset + 1)
        pb->rpos[p] = m->offset + 1;
    if (!m->key || m->key_len == 0 || m->key_len >= 24)
        return 0;
    char key[24], *e = NULL;
    memcpy(key, m->key, m->key_len);
    key[m->key_len] = 0;
    long long id = strtoll(key, &e, 10);
    return e && !*e && id > 0 ? found(pb, id) : 0;
}

static int fail(publisher_t *pb, const char *err) {
    ax_warn("results recovery: mark published: %s", err);
    cb_recover_end(pb);
    return AX_ERR_IO;
}

int cb_recover_step(callback_t *cb) {
    publisher_t *pb = &cb->pub;
    char err[1024];
    if (!pb->rrk && start(cb) < 0) {
        cb_recover_end(pb);
        return AX_ERR_IO;
    }
    int64_t until = ax_mono_ms() + PUB_SLICE_MS;
    atomic_store(&pb->loop_ms, until - PUB_SLICE_MS); /* alive */
    while (pb->rneof < pb->rparts) {
        int64_t left = until - ax_mono_ms();
        if (left <= 0)
            break;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(pb->rrk, (int)(left < 20 ? left : 20));
        if (!m)
            continue;
        int rc = take(pb, m);
        rd_kafka_message_destroy(m);
        if (rc < 0)
            return fail(pb, "out of memory");
        if (pb->nrids >= PUB_MARK_CHUNK && save(cb, err, sizeof err) < 0)
            return fail(pb, err);
    }
    int done = pb->rneof >= pb->rparts;
    /* the positions reached are saved with every chunk, and at least
     * every PUB_SAVE_MS: a recovery cut short resumes from them */
    if ((done || pb->nrids > 0 || ax_mono_ms() - pb->rsaved_ms >= PUB_SAVE_MS) &&
        save(cb, err, sizeof err) < 0)
        return fail(pb, err);
    if (!done)
        return 0;
    pb->need_recover = 0;
    atomic_fetch_add(&cb->published, pb->rmarked);
    ax_info("results recovery: %s read to its end (%lld result(s) since the reconciled "
            "offsets, %lld of them marked published only now)",
            cb->svc.topic_results, (long long)pb->rfound, (long long)pb->rmarked);
    cb_recover_end(pb);
    return 1;
}
