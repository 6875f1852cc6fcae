/*
 * partitions.c — what the executor fetches: the lane topics of the groups
 * it serves, and the pause state of every partition.
 *
 * One place decides whether a partition is fetched: part_paused() — paused
 * while it fed a full pool, while its lane is not preferred (lanes_tick),
 * above a machine watermark, or while stopping. apply_pauses() hands only
 * the partitions whose state changes to rd_kafka_pause_partitions() /
 * rd_kafka_resume_partitions(), and resumes only what it paused: in
 * librdkafka 2.0.2 every pause/resume call bumps the partition's fetch
 * version, and a resume of a partition that is not paused restarts its
 * fetch from the offset it started at, delivering consumed messages again.
 * A pause keeps the consumed position (the offset after the last message
 * handed to us): messages fetched but not yet handed over are dropped and
 * fetched again on resume, so nothing is skipped, and offsets are committed
 * only for handled messages (commit_ready) as before. The application pause
 * flag survives a rebalance, so a partition's record is kept when it is
 * revoked, and applied again when it comes back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/log.h"
#include "executor.h"

struct part {
    char topic[300];
    int32_t partition;
    int lane;
    int assigned;      /* in the assignment last read */
    uint64_t for_pool; /* bit i: fed ex->pools[i] while it was full (for this lane) */
    int paused;        /* paused by us (what librdkafka was told) */
    int64_t start;     /* the group's committed offset when it was assigned (-1: none) */
};

int topic_index(const executor_t *ex, const char *topic) {
    for (size_t i = 0; i < ex->ln.ntopics; i++)
        if (strcmp(ex->ln.topics[i].name, topic) == 0)
            return (int)i;
    return -1;
}

int lane_of_topic(const executor_t *ex, const char *topic) {
    int i = topic_index(ex, topic);
    return i < 0 ? AX_PRIORITY_DEFAULT : ex->ln.topics[i].lane;
}

static part_t *part_get(executor_t *ex, const char *topic, int32_t partition) {
    lanes_t *ln = &ex->ln;
    for (size_t i = 0; i < ln->nparts; i++)
        if (ln->parts[i].partition == partition && strcmp(ln->parts[i].topic, topic) == 0)
            return &ln->parts[i];
    if (ln->nparts == ln->cap) {
        size_t cap = ln->cap ? ln->cap * 2 : 32;
        part_t *n = realloc(ln->parts, cap * sizeof *n);
        if (!n)
            return NULL;
        ln->parts = n;
        ln->cap = cap;
    }
    part_t *p = &ln->parts[ln->nparts++];
    memset(p, 0, sizeof *p);
    snprintf(p->topic, sizeof p->topic, "%s", topic);
    p->partition = partition;
    p->lane = lane_of_topic(ex, topic);
    return p;
}

static int part_paused(const executor_t *ex, const part_t *p) {
    return ex->svc.stopping || !ex->load.fetching || p->for_pool ||
           !(ex->ln.mask & (1u << p->lane));
}

/* Bring every assigned partition to the state part_paused() wants: one
 * pause call and one resume call for the partitions that change. */
void apply_pauses(executor_t *ex) {
    rd_kafka_topic_partition_list_t *l[2] = {NULL, NULL}; /* [0] resume, [1] pause */
    for (size_t i = 0; i < ex->ln.nparts; i++) {
        part_t *p = &ex->ln.parts[i];
        int want = part_paused(ex, p);
        if (!p->assigned || want == p->paused)
            continue;
        if (!l[want])
            l[want] = rd_kafka_topic_partition_list_new(8);
        rd_kafka_topic_partition_list_add(l[want], p->topic, p->partition);
    }
    for (int pause = 0; pause < 2; pause++) {
        if (!l[pause])
            continue;
        rd_kafka_resp_err_t e = pause ? rd_kafka_pause_partitions(ex->svc.consumer, l[pause])
                                      : rd_kafka_resume_partitions(ex->svc.consumer, l[pause]);
        if (e)
            ax_warn("kafka %s: %s", pause ? "pause" : "resume", rd_kafka_err2str(e));
        for (int k = 0; k < l[pause]->cnt; k++) {
            rd_kafka_topic_partition_t *t = &l[pause]->elems[k];
            part_t *p = part_get(ex, t->topic, t->partition);
            if (!e && !t->err && p)
                p->paused = pause; /* else tried again at the next change or tick */
            else if (t->err)
                ax_debug("kafka %s %s [%d]: %s", pause ? "pause" : "resume", t->topic,
                         (int)t->partition, rd_kafka_err2str(t->err));
        }
        rd_kafka_topic_partition_list_destroy(l[pause]);
    }
}

void pause_for_pool(executor_t *ex, pool_t *p, const rd_kafka_message_t *m) {
    part_t *pt = part_get(ex, rd_kafka_topic_name(m->rkt), m->partition);
    uint64_t bit = 1ull << (size_t)(p - ex->pools);
    if (!pt || (pt->for_pool & bit))
        return;
    if (!pt->for_pool)
        ex->ln.for_pool++;
    pt->for_pool |= bit;
    pt->assigned = 1; /* it delivered a message: assigned, even before the next tick reads it */
    apply_pauses(ex);
    if (!p->full)
        ax_info("pool %s full (%zu running, %zu waiting): pausing the partitions feeding it",
                p->name, p->core.running, p->core.waiting);
    p->full = 1;
}

/* Resume a partition a full pool paused once every pool it fed has room
 * for half its queue again (for the partition's lane: ax_pool_drained). */
void maybe_resume(executor_t *ex) {
    if (!ex->ln.for_pool)
        return;
    uint64_t still = 0;
    int changed = 0;
    for (size_t i = 0; i < ex->ln.nparts; i++) {
        part_t *pt = &ex->ln.parts[i];
        if (!pt->for_pool)
            continue;
        for (size_t k = 0; k < ex->npools; k++)
            if ((pt->for_pool & (1ull << k)) && ax_pool_drained(&ex->pools[k].core, pt->lane))
                pt->for_pool &= ~(1ull << k);
        if (!pt->for_pool) {
            ex->ln.for_pool--;
            changed = 1;
        }
        still |= pt->for_pool;
    }
    for (size_t k = 0; k < ex->npools; k++)
        ex->pools[k].full = (still >> k) & 1;
    if (changed) {
        apply_pauses(ex);
        event_active(ex->ev_kick, 0, 0);
    }
}

/* Read the assignment again (after a rebalance). Newly assigned
 * partitions: where the group left off, so a lane whose first message has
 * not been consumed yet (its position is not known) still shows its
 * backlog. One OffsetFetch per rebalance. */
static void read_assignment(executor_t *ex, rd_kafka_t *rk) {
    lanes_t *ln = &ex->ln;
    rd_kafka_topic_partition_list_t *a = NULL;
    if (rd_kafka_assignment(rk, &a) != 0 || !a)
        return;
    rd_kafka_topic_partition_list_t *fresh = rd_kafka_topic_partition_list_new(8);
    for (int i = 0; i < a->cnt; i++) {
        part_t *p = part_get(ex, a->elems[i].topic, a->elems[i].partition);
        if (!p)
            continue;
        if (!p->assigned) {
            p->start = -1; /* unknown until the OffsetFetch below answers */
            rd_kafka_topic_partition_list_add(fresh, p->topic, p->partition);
        }
        p->assigned = 2; /* in this assignment */
    }
    for (size_t i = 0; i < ln->nparts; i++) /* 1: still assigned; 0: revoked */
        ln->parts[i].assigned = ln->parts[i].assigned == 2;
    if (fresh->cnt && rd_kafka_committed(rk, fresh, 2000) == 0)
        for (int i = 0; i < fresh->cnt; i++) {
            part_t *p = part_get(ex, fresh->elems[i].topic, fresh->elems[i].partition);
            if (p && !fresh->elems[i].err)
                p->start = fresh->elems[i].offset;
        }
    rd_kafka_topic_partition_list_destroy(fresh);
    if (ln->assignment)
        rd_kafka_topic_partition_list_destroy(ln->assignment);
    ln->assignment = a;
}

/* backlog[lane]: what the assigned partitions hold past our position (the
 * high watermark librdkafka cached from its last fetch, no broker call)
 * plus what we consumed and have not started. */
static void sample_backlog(executor_t *ex, rd_kafka_t *rk, int64_t backlog[AX_PRIORITIES]) {
    rd_kafka_topic_partition_list_t *as = ex->ln.assignment;
    if (as && as->cnt) {
        rd_kafka_position(rk, as);
        for (int i = 0; i < as->cnt; i++) {
            rd_kafka_topic_partition_t *t = &as->elems[i];
            int64_t lo = 0, hi = 0, at = t->offset;
            if (rd_kafka_get_watermark_offsets(rk, t->topic, t->partition, &lo, &hi))
                continue; /* no fetch yet: not known */
            if (at < 0) { /* nothing consumed here yet: from where the group left off */
                const part_t *p = part_get(ex, t->topic, t->partition);
                /* no commit yet: auto.offset.reset=earliest reads from the start */
                at = !p                                  ? -1
                     : p->start >= 0                     ? p->start
                     : p->start == RD_KAFKA_OFFSET_INVALID ? lo
                                                           : -1;
            }
            if (at < 0 || hi <= at)
                continue;
            backlog[lane_of_topic(ex, t->topic)] += hi - at;
        }
    }
    for (size_t i = 0; i < ex->npools; i++)
        for (int l = 0; l < AX_PRIORITIES; l++)
            backlog[l] += (int64_t)ex->pools[i].core.lane_waiting[l];
}

/* Lane preference. ax_lane_serve() names the lanes to fetch from (the
 * backlog of a lane: sample_backlog): down to the most urgent one with a
 * backlog, and any other lane not fetched from for
 * executor.lane.starve.ms. A lane counts as fetched from when a message of
 * it was consumed, or when it shows no backlog after being in the mask for
 * a round (fetch.wait.max.ms + a tick: the time the fetch request in flight
 * may take before one with the resumed partitions goes out) — so a
 * starving lane stays resumed until a fetch actually delivered from it or
 * could have, and a paused lane's stale high watermark (no fetches while
 * paused) is refreshed every starve period. With `refresh` the assignment
 * is read again (rebalances). */
void lanes_tick(executor_t *ex, int refresh) {
    rd_kafka_t *rk = ex->svc.consumer;
    lanes_t *ln = &ex->ln;
    if (!rk)
        return;
    if (refresh || !ln->assignment)
        read_assignment(ex, rk);
    int64_t backlog[AX_PRIORITIES] = {0};
    sample_backlog(ex, rk, backlog);
    int64_t now = ax_mono_ms();
    unsigned mask = ax_lane_serve(backlog, ln->served, now, ex->svc.conf.executor_lane_starve_ms);
    for (int l = 0; l < AX_PRIORITIES; l++) {
        if ((mask & (1u << l)) && !(ln->mask & (1u << l)))
            ln->entered[l] = now;
        if ((mask & (1u << l)) && backlog[l] == 0 && now - ln->entered[l] >= ln->round_ms)
            ln->served[l] = now;
        ln->backlog[l] = backlog[l];
    }
    if (mask != ln->mask)
        ax_debug("lanes: fetching from %s%s%s%s%s (backlog %lld %lld %lld %lld %lld)",
                 mask & 1 ? "P0 " : "", mask & 2 ? "P1 " : "", mask & 4 ? "P2 " : "",
                 mask & 8 ? "P3 " : "", mask & 16 ? "P4 " : "", (long long)backlog[0],
                 (long long)backlog[1], (long long)backlog[2], (long long)backlog[3],
                 (long long)backlog[4]);
    ln->mask = mask;
    apply_pauses(ex);
}

void on_lane_tick(evutil_socket_t fd, short what, void *arg) { lanes_tick(arg, 1); }

/* A group name, or <0 with the reason: a group named p0..p9 would read
 * another group's lane topic; a name a job cannot carry
 * (job.executor_group: [A-Za-z0-9][A-Za-z0-9_-]{0,63}) could too. */
static int group_check(const char *g, char *err, size_t errlen) {
    size_t len = strlen(g), okchars = strspn(g, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                "abcdefghijklmnopqrstuvwxyz0123456789_-");
    if (ax_conf_group_reserved(g))
        return ax_seterr(err, errlen, AX_ERR_INVALID,
                         "executor.groups: '%s' is not a group name: p0..p9 name the "
                         "priority lanes (<prefix>dispatch.%s is lane %c of the default "
                         "group)",
                         g, g, g[1]);
    if (len > 64 || okchars != len || g[0] == '-' || g[0] == '_')
        return ax_seterr(err, errlen, AX_ERR_INVALID,
                         "executor.groups: '%s' is not a group name (letters, digits, '_' "
                         "and '-', at most 64, starting with a letter or digit)",
                         g);
    return 0;
}

/* executor.groups -> the lane topics to subscribe (ex->ln.topics): five
 * per group, <prefix>dispatch[.G][.pN] (ax_conf_dispatch_topic). */
int lane_topics(executor_t *ex, const ax_conf_t *c, char *err, size_t errlen) {
    lanes_t *ln = &ex->ln;
    char *gl = strdup(c->executor_groups ? c->executor_groups : "");
    int rc = 0;
    for (char *save = NULL, *g = strtok_r(gl, ", ", &save); g && rc == 0;
         g = strtok_r(NULL, ", ", &save)) {
        if ((rc = group_check(g, err, errlen)) < 0)
            break;
        char name[300];
        ax_conf_dispatch_topic(c, g, AX_PRIORITY_DEFAULT, name, sizeof name);
        int dup = 0;
        for (size_t i = 0; i < ln->ntopics && !dup; i++)
            dup = strcmp(ln->topics[i].name, name) == 0;
        if (dup)
            continue; /* listed twice */
        lane_topic_t *n = realloc(ln->topics, (ln->ntopics + AX_PRIORITIES) * sizeof *n);
        if (!n) {
            rc = ax_seterr(err, errlen, AX_ERR_INVALID, "out of memory");
            break;
        }
        ln->topics = n;
        for (int l = 0; l < AX_PRIORITIES; l++) {
            ax_conf_dispatch_topic(c, g, l, ln->topics[ln->ntopics].name,
                                   sizeof ln->topics[ln->ntopics].name);
            ln->topics[ln->ntopics++].lane = l;
        }
    }
    free(gl);
    if (rc == 0 && ln->ntopics == 0)
        rc = ax_seterr(err, errlen, AX_ERR_INVALID, "executor.groups is empty");
    return rc;
}

void lanes_fini(executor_t *ex) {
    if (ex->ln.ev_tick)
        event_free(ex->ln.ev_tick);
    if (ex->ln.assignment)
        rd_kafka_topic_partition_list_destroy(ex->ln.assignment);
    free(ex->ln.parts);
    free(ex->ln.topics);
}
