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
 * instance someone else holds) is counted and dropped.
 *
 * Priority lanes: the executor reads the five lane topics of each group it
 * serves (<prefix>dispatch[.G][.pN], ax/lane.h). It fetches from the most
 * urgent lanes that have a backlog and pauses the partitions of the others,
 * each for at most executor.lane.starve.ms at a time (lanes_tick); claimed
 * runs wait in their pool in one FIFO per lane and start most urgent lane
 * first, with the same starvation bound (pool_pop).
 *
 * Back-pressure: when a pool is full the partitions that fed it are paused
 * (the consumer keeps polling), and resumed as it drains; above a CPU or
 * memory watermark every partition is paused. One function decides the
 * state of every partition from all of these reasons (apply_pauses). Leases of held instances are
 * renewed in one statement every executor.lease.min.ms / 3; an instance
 * whose lease could not be renewed has its handler stopped. Jobs with a
 * concurrency limit take a slot in job.running_count when claimed; without a
 * free slot the instance goes back to the trigger for a short wait, and the
 * partition moves on. SIGHUP reloads pool sizes, watermarks and timeouts.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

static executor_t g_ex;

typedef struct route {
    char job[256];
    pool_t *pool;
} route_t;
static route_t *routes;
static size_t nroutes;

static struct {
    int fetching;          /* 0 while above a watermark */
    int64_t lease_ok_mono; /* last successful lease renewal */
    uint64_t cpu_busy, cpu_total;
    double cpu_pct, mem_pct;
} st = {.fetching = 1};

/* Sorted (id, flag) pairs from statement results, for O(log n) lookups. */
typedef struct idflag {
    int64_t id;
    int flag;
} idflag_t;

static int idflag_cmp(const void *a, const void *b) {
    int64_t x = ((const idflag_t *)a)->id, y = ((const idflag_t *)b)->id;
    return x < y ? -1 : x > y;
}

static const idflag_t *idflag_find(const idflag_t *v, size_t n, int64_t id) {
    idflag_t key = {id, 0};
    return bsearch(&key, v, n, sizeof *v, idflag_cmp);
}

/* ---- bookkeeping --------------------------------------------------------------- */

static void track(executor_t *ex, run_t *r) {
    if (ex->tail)
        ex->tail->next = r;
    else
        ex->head = r;
    ex->tail = r;
    ex->tracked++;
}

/* Waiting (RUN_NEW or RUN_CLAIMED) in its pool, counted by lane too. */
static void wait_add(run_t *r) {
    r->pool->waiting++;
    r->pool->lane_waiting[r->lane]++;
}

static void wait_sub(run_t *r) {
    r->pool->waiting--;
    r->pool->lane_waiting[r->lane]--;
}

/* A pool's queue is one FIFO per lane: claimed runs start most urgent lane
 * first, in arrival order within a lane (pool_pop). */
static void pool_push(pool_t *p, run_t *r) {
    r->qnext = NULL;
    r->qprev = p->q[r->lane].tail;
    if (r->qprev)
        r->qprev->qnext = r;
    else
        p->q[r->lane].head = r;
    p->q[r->lane].tail = r;
    r->queued_mono = ax_mono_ms();
}

/* Back at the head of its lane (a start wave that could not be marked). */
static void pool_push_front(pool_t *p, run_t *r) {
    r->qprev = NULL;
    r->qnext = p->q[r->lane].head;
    if (r->qnext)
        r->qnext->qprev = r;
    else
        p->q[r->lane].tail = r;
    p->q[r->lane].head = r;
}

static void pool_remove(pool_t *p, run_t *r) {
    if (r->qprev)
        r->qprev->qnext = r->qnext;
    else if (p->q[r->lane].head == r)
        p->q[r->lane].head = r->qnext;
    else
        return; /* not queued */
    if (r->qnext)
        r->qnext->qprev = r->qprev;
    else
        p->q[r->lane].tail = r->qprev;
    r->qnext = r->qprev = NULL;
}

/* The next run to start: the head of the most urgent lane that has one,
 * unless a less urgent lane starves — its head waited starve_ms and the
 * lane has not started anything here for starve_ms — then the head that
 * waited longest among those (so a steady stream of urgent work delays
 * the other lanes by at most about starve_ms per start, never for ever). */
static run_t *pool_pop(pool_t *p, int64_t now, int64_t starve_ms) {
    int top = -1, pick = -1;
    for (int l = 0; l < AX_PRIORITIES && top < 0; l++)
        if (p->q[l].head)
            top = l;
    if (top < 0)
        return NULL;
    for (int l = top + 1; l < AX_PRIORITIES; l++) {
        run_t *h = p->q[l].head;
        if (h && now - h->queued_mono >= starve_ms && now - p->lane_started[l] >= starve_ms &&
            (pick < 0 || h->queued_mono < p->q[pick].head->queued_mono))
            pick = l;
    }
    if (pick < 0)
        pick = top;
    run_t *r = p->q[pick].head;
    pool_remove(p, r);
    p->lane_started[pick] = now;
    return r;
}

static void maybe_resume(executor_t *ex);

/* A run that will not start: leaves its pool's count. A full pool may have
 * drained this way without any run ending (claims lost, leases swept before
 * the start): resume what it paused, or nothing else would. */
static void run_drop(run_t *r) {
    if (r->pool && (r->state == RUN_NEW || r->state == RUN_CLAIMED)) {
        if (r->state == RUN_CLAIMED)
            pool_remove(r->pool, r);
        wait_sub(r);
        r->state = RUN_DONE;
        maybe_resume(r->ex);
        return;
    }
    r->state = RUN_DONE;
}

/* What a pool holds as seen by a run of `lane`: everything running plus
 * what waits of that lane and the more urgent ones — waiting runs of less
 * urgent lanes do not keep a more urgent one out (they would start after
 * it anyway). So a pool holds at most slots + queue runs of any one lane
 * and, however the lanes mix, at most AX_PRIORITIES x that. */
static int64_t pool_load(const pool_t *p, int lane) {
    int64_t n = (int64_t)p->running;
    for (int l = 0; l <= lane; l++)
        n += (int64_t)p->lane_waiting[l];
    return n;
}

static int pool_full(const pool_t *p, int lane) {
    return pool_load(p, lane) >= p->slots + p->queue;
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
        int busy = 0;
        for (run_t *r = ex->head; r && !busy; r = r->next)
            busy = r->state == RUN_REPORTING;
        if (!busy)
            event_base_loopbreak(ex->svc.base);
    }
}

/* ---- pools and routes ------------------------------------------------------------ */

static pool_t *pool_find(executor_t *ex, const char *name) {
    for (size_t i = 0; i < ex->npools; i++)
        if (strcmp(ex->pools[i].name, name) == 0)
            return &ex->pools[i];
    return NULL;
}

/* Parse executor.slots/queue/pools/routes into pools (created, or resized in
 * place: runs keep pointers to them, so pools are never freed or moved
 * while the process lives; at most 64). */
#define MAX_POOLS 64
static int pools_configure(executor_t *ex, const ax_conf_t *c, char *err, size_t errlen) {
    typedef struct {
        char name[64];
        int64_t slots, queue;
    } spec_t;
    spec_t specs[MAX_POOLS];
    size_t n = 0;
    snprintf(specs[n].name, sizeof specs[n].name, "command");
    specs[n].slots = c->executor_slots;
    specs[n++].queue = c->executor_queue;
    char *list = strdup(c->executor_pools ? c->executor_pools : "");
    for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok;
         tok = strtok_r(NULL, ", ", &save)) {
        char name[64];
        long long slots = 0, queue = c->executor_queue;
        int got = sscanf(tok, "%63[A-Za-z0-9_-]:%lld:%lld", name, &slots, &queue);
        if (got < 2 || slots < 1 || slots > 100000 || queue < 0 || queue > 10000000) {
            free(list);
            return ax_seterr(err, errlen, AX_ERR_INVALID,
                             "executor.pools: '%s' is not NAME:SLOTS[:QUEUE] "
                             "(slots 1-100000, queue 0-10000000)",
                             tok);
        }
        size_t k = 0;
        while (k < n && strcmp(specs[k].name, name) != 0)
            k++;
        if (k == n) {
            if (n == MAX_POOLS) {
                free(list);
                return ax_seterr(err, errlen, AX_ERR_INVALID, "executor.pools: more than %d",
                                 MAX_POOLS);
            }
            n++;
        }
        snprintf(specs[k].name, sizeof specs[k].name, "%.63s", name);
        specs[k].slots = slots;
        specs[k].queue = queue;
    }
    free(list);
    route_t *nr = NULL;
    size_t nnr = 0;
    list = strdup(c->executor_pool_routes ? c->executor_pool_routes : "");
    for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok;
         tok = strtok_r(NULL, ", ", &save)) {
        char *eq = strchr(tok, '=');
        size_t k = 0;
        if (eq)
            while (k < n && strcmp(specs[k].name, eq + 1) != 0)
                k++;
        if (!eq || eq == tok || k == n) {
            ax_seterr(err, errlen, AX_ERR_INVALID,
                      "executor.pool.routes: '%s' is not JOB=POOL with a pool defined in "
                      "executor.pools",
                      tok);
            free(list);
            free(nr);
            return AX_ERR_INVALID;
        }
        nr = realloc(nr, (nnr + 1) * sizeof *nr);
        snprintf(nr[nnr].job, sizeof nr[nnr].job, "%.*s", (int)(eq - tok), tok);
        nr[nnr].pool = (pool_t *)(uintptr_t)(k + 1); /* index+1, resolved below */
        nnr++;
    }
    free(list);
    if (!ex->pools)
        ex->pools = calloc(MAX_POOLS, sizeof *ex->pools);
    for (size_t k = 0; k < n; k++) {
        pool_t *p = pool_find(ex, specs[k].name);
        if (!p) {
            p = &ex->pools[ex->npools++];
            snprintf(p->name, sizeof p->name, "%.63s", specs[k].name);
        }
        p->slots = specs[k].slots;
        p->queue = specs[k].queue;
    }
    for (size_t i = 0; i < nnr; i++)
        nr[i].pool = pool_find(ex, specs[(uintptr_t)nr[i].pool - 1].name);
    free(routes);
    routes = nr;
    nroutes = nnr;
    return 0;
}

static pool_t *pool_for(executor_t *ex, const ax_dispatch_t *d) {
    if (d->job)
        for (size_t i = 0; i < nroutes; i++)
            if (strcmp(routes[i].job, d->job) == 0)
                return routes[i].pool;
    return pool_find(ex, d->handler_kind);
}

static const handler_ops_t *handler_for(const char *kind) {
    for (size_t i = 0; i < AX_ARRAY_SIZE(handlers); i++)
        if (strcmp(handlers[i]->kind, kind) == 0)
            return handlers[i];
    return NULL;
}

/* ---- partitions: what is fetched -------------------------------------------------------
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
 * revoked, and applied again when it comes back. */

typedef struct part {
    char topic[300];
    int32_t partition;
    int lane;
    int assigned; /* in the assignment last read */
    uint64_t for_pool; /* bit i: fed ex->pools[i] while it was full (for this lane) */
    int paused;   /* paused by us (what librdkafka was told) */
    int64_t start; /* the group's committed offset when it was assigned (-1: none) */
} part_t;

typedef struct lane_topic {
    char name[300];
    int lane;
} lane_topic_t;

static struct {
    lane_topic_t *topics; /* every lane topic subscribed */
    size_t ntopics;
    part_t *parts;
    size_t nparts, cap;
    size_t for_pool; /* parts with for_pool set */
    rd_kafka_topic_partition_list_t *assignment; /* as last read */
    unsigned mask;                      /* lanes fetched from (ax_lane_serve) */
    int64_t backlog[AX_PRIORITIES];     /* last sample: broker + consumed, not started */
    int64_t served[AX_PRIORITIES];      /* mono ms a lane was last fetched from */
    int64_t entered[AX_PRIORITIES];     /* mono ms a lane last entered the mask */
    int64_t round_ms;                   /* fetch.wait.max.ms + a tick */
    struct event *ev_tick;
} ln = {.mask = (1u << AX_PRIORITIES) - 1};

#define LANE_TICK_MS 100

static int lane_of_topic(const char *topic) {
    for (size_t i = 0; i < ln.ntopics; i++)
        if (strcmp(ln.topics[i].name, topic) == 0)
            return ln.topics[i].lane;
    return AX_PRIORITY_DEFAULT;
}

static part_t *part_get(const char *topic, int32_t partition) {
    for (size_t i = 0; i < ln.nparts; i++)
        if (ln.parts[i].partition == partition && strcmp(ln.parts[i].topic, topic) == 0)
            return &ln.parts[i];
    if (ln.nparts == ln.cap) {
        size_t cap = ln.cap ? ln.cap * 2 : 32;
        part_t *n = realloc(ln.parts, cap * sizeof *n);
        if (!n)
            return NULL;
        ln.parts = n;
        ln.cap = cap;
    }
    part_t *p = &ln.parts[ln.nparts++];
    memset(p, 0, sizeof *p);
    snprintf(p->topic, sizeof p->topic, "%s", topic);
    p->partition = partition;
    p->lane = lane_of_topic(topic);
    return p;
}

static int part_paused(const executor_t *ex, const part_t *p) {
    return ex->svc.stopping || !st.fetching || p->for_pool || !(ln.mask & (1u << p->lane));
}

/* Bring every assigned partition to the state part_paused() wants: one
 * pause call and one resume call for the partitions that change. */
static void apply_pauses(executor_t *ex) {
    rd_kafka_topic_partition_list_t *l[2] = {NULL, NULL}; /* [0] resume, [1] pause */
    for (size_t i = 0; i < ln.nparts; i++) {
        part_t *p = &ln.parts[i];
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
            part_t *p = part_get(t->topic, t->partition);
            if (!e && !t->err && p)
                p->paused = pause; /* else tried again at the next change or tick */
            else if (t->err)
                ax_debug("kafka %s %s [%d]: %s", pause ? "pause" : "resume", t->topic,
                         (int)t->partition, rd_kafka_err2str(t->err));
        }
        rd_kafka_topic_partition_list_destroy(l[pause]);
    }
}

static void pause_for_pool(executor_t *ex, pool_t *p, const rd_kafka_message_t *m) {
    part_t *pt = part_get(rd_kafka_topic_name(m->rkt), m->partition);
    uint64_t bit = 1ull << (size_t)(p - ex->pools);
    if (!pt || (pt->for_pool & bit))
        return;
    if (!pt->for_pool)
        ln.for_pool++;
    pt->for_pool |= bit;
    pt->assigned = 1; /* it delivered a message: assigned, even before the next tick reads it */
    apply_pauses(ex);
    if (!p->full)
        ax_info("pool %s full (%zu running, %zu waiting): pausing the partitions feeding it",
                p->name, p->running, p->waiting);
    p->full = 1;
}

/* Resume a partition a full pool paused once every pool it fed has room
 * for half its queue again (for the partition's lane: pool_load). */
static void maybe_resume(executor_t *ex) {
    if (!ln.for_pool)
        return;
    uint64_t still = 0;
    int changed = 0;
    for (size_t i = 0; i < ln.nparts; i++) {
        part_t *pt = &ln.parts[i];
        if (!pt->for_pool)
            continue;
        for (size_t k = 0; k < ex->npools; k++) {
            const pool_t *p = &ex->pools[k];
            if ((pt->for_pool & (1ull << k)) && pool_load(p, pt->lane) <= p->slots + p->queue / 2)
                pt->for_pool &= ~(1ull << k);
        }
        if (!pt->for_pool) {
            ln.for_pool--;
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

/* Lane preference. The backlog of a lane is what its partitions assigned
 * to us hold past our position (the high watermark librdkafka cached from
 * its last fetch, no broker call) plus what we consumed of it and have not
 * started. ax_lane_serve() names the lanes to fetch from: down to the most
 * urgent one with a backlog, and any other lane not fetched from for
 * executor.lane.starve.ms. A lane counts as fetched from when a message of
 * it was consumed, or when it shows no backlog after being in the mask for
 * a round (fetch.wait.max.ms + a tick: the time the fetch request in flight
 * may take before one with the resumed partitions goes out) — so a
 * starving lane stays resumed until a fetch actually delivered from it or
 * could have, and a paused lane's stale high watermark (no fetches while
 * paused) is refreshed every starve period. With `refresh` the assignment
 * is read again (rebalances). */
static void lanes_tick(executor_t *ex, int refresh) {
    rd_kafka_t *rk = ex->svc.consumer;
    if (!rk)
        return;
    if (refresh || !ln.assignment) {
        rd_kafka_topic_partition_list_t *a = NULL;
        if (rd_kafka_assignment(rk, &a) == 0 && a) {
            /* Newly assigned partitions: where the group left off, so a lane
             * whose first message has not been consumed yet (its position
             * is not known) still shows its backlog. One OffsetFetch per
             * rebalance. */
            rd_kafka_topic_partition_list_t *fresh = rd_kafka_topic_partition_list_new(8);
            for (int i = 0; i < a->cnt; i++) {
                part_t *p = part_get(a->elems[i].topic, a->elems[i].partition);
                if (!p)
                    continue;
                if (!p->assigned) {
                    p->start = -1; /* unknown until the OffsetFetch below answers */
                    rd_kafka_topic_partition_list_add(fresh, p->topic, p->partition);
                }
                p->assigned = 2; /* in this assignment */
            }
            for (size_t i = 0; i < ln.nparts; i++) /* 1: still assigned; 0: revoked */
                ln.parts[i].assigned = ln.parts[i].assigned == 2;
            if (fresh->cnt && rd_kafka_committed(rk, fresh, 2000) == 0)
                for (int i = 0; i < fresh->cnt; i++) {
                    part_t *p = part_get(fresh->elems[i].topic, fresh->elems[i].partition);
                    if (p && !fresh->elems[i].err)
                        p->start = fresh->elems[i].offset;
                }
            rd_kafka_topic_partition_list_destroy(fresh);
            if (ln.assignment)
                rd_kafka_topic_partition_list_destroy(ln.assignment);
            ln.assignment = a;
        }
    }
    int64_t backlog[AX_PRIORITIES] = {0};
    if (ln.assignment && ln.assignment->cnt) {
        rd_kafka_position(rk, ln.assignment);
        for (int i = 0; i < ln.assignment->cnt; i++) {
            rd_kafka_topic_partition_t *t = &ln.assignment->elems[i];
            int64_t lo = 0, hi = 0, at = t->offset;
            if (rd_kafka_get_watermark_offsets(rk, t->topic, t->partition, &lo, &hi))
                continue; /* no fetch yet: not known */
            if (at < 0) { /* nothing consumed here yet: from where the group left off */
                const part_t *p = part_get(t->topic, t->partition);
                /* no commit yet: auto.offset.reset=earliest reads from the start */
                at = !p ? -1 : p->start >= 0 ? p->start : p->start == RD_KAFKA_OFFSET_INVALID ? lo : -1;
            }
            if (at < 0 || hi <= at)
                continue;
            backlog[lane_of_topic(t->topic)] += hi - at;
        }
    }
    for (size_t i = 0; i < ex->npools; i++)
        for (int l = 0; l < AX_PRIORITIES; l++)
            backlog[l] += (int64_t)ex->pools[i].lane_waiting[l];
    int64_t now = ax_mono_ms();
    unsigned mask = ax_lane_serve(backlog, ln.served, now, ex->svc.conf.executor_lane_starve_ms);
    for (int l = 0; l < AX_PRIORITIES; l++) {
        if ((mask & (1u << l)) && !(ln.mask & (1u << l)))
            ln.entered[l] = now;
        if ((mask & (1u << l)) && backlog[l] == 0 && now - ln.entered[l] >= ln.round_ms)
            ln.served[l] = now;
        ln.backlog[l] = backlog[l];
    }
    if (mask != ln.mask)
        ax_debug("lanes: fetching from %s%s%s%s%s (backlog %lld %lld %lld %lld %lld)",
                 mask & 1 ? "P0 " : "", mask & 2 ? "P1 " : "", mask & 4 ? "P2 " : "",
                 mask & 8 ? "P3 " : "", mask & 16 ? "P4 " : "", (long long)backlog[0],
                 (long long)backlog[1], (long long)backlog[2], (long long)backlog[3],
                 (long long)backlog[4]);
    ln.mask = mask;
    apply_pauses(ex);
}

static void on_lane_tick(evutil_socket_t fd, short what, void *arg) { lanes_tick(arg, 1); }

/* ---- results ------------------------------------------------------------------- */

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
    /* Commit once per 20 ms, not once per result: a walk of the tracked
     * list and an offset commit per job do not scale. */
    if (!evtimer_pending(r->ex->ev_commit, NULL))
        event_add(r->ex->ev_commit, &(struct timeval){0, 20000});
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

static void start_ready(executor_t *ex);

void run_done(run_t *r, const handler_result_t *res) {
    executor_t *ex = r->ex;
    char text[600];
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
    };
    snprintf(text, sizeof text, "%s", res->error);
    if (r->probe && a.outcome == AX_OUTCOME_SUCCESS)
        a.error_class = "probe"; /* the callback splits the parent */
    if (r->stop_why) { /* stopped by us: say why, whatever the handler saw */
        a.error_class = (char *)r->stop_why;
        a.retryable = strcmp(r->stop_why, "cancelled") != 0;
        a.outcome = strcmp(r->stop_why, "lease_lost") == 0 ? AX_OUTCOME_TIMEOUT
                                                            : AX_OUTCOME_CANCELLED;
        a.exit_code_set = 0;
        snprintf(text, sizeof text, "%s",
                 strcmp(r->stop_why, "cancelled") == 0
                     ? "cancelled: its cancellation was requested (overlap=cancel: a newer "
                       "run started; or axctl instance cancel / job delete --cancel-pending)"
                 : strcmp(r->stop_why, "shutdown") == 0
                     ? "cancelled: the executor's shutdown grace ran out"
                     : "the lease could not be renewed: stopped (the instance is recovered "
                       "elsewhere)");
    }
    char *out = NULL;
    if (res->output && res->output_len) {
        out = malloc(res->output_len + 1);
        if (out) {
            memcpy(out, res->output, res->output_len);
            out[res->output_len] = 0;
            ax_utf8_sanitize(out, res->output_len);
        }
    }
    a.output = out ? out : "";
    if (r->state == RUN_RUNNING) {
        ex->running--;
        r->pool->running--;
    }
    ax_info("instance %lld attempt %d: %s%s%s (%lld ms)", (long long)a.instance_id,
            (int)a.attempt, ax_outcome_name(a.outcome), a.error ? ": " : "", a.error ? a.error : "",
            (long long)(ax_mono_ms() - r->started_mono));
    int rc = ax_attempt_encode(&a, &r->result_buf, &r->result_len);
    size_t max = (size_t)ex->svc.conf.message_max_bytes;
    if (rc == 0 && r->result_len > max && out) {
        /* The output is what can be large (executor.output.cap may exceed
         * message.max.bytes): keep what fits, with room for the fields the
         * final result adds, so the result is never refused as too large. */
        size_t over = r->result_len - max + (max > 16384 ? 4096 : max / 4), len = strlen(out);
        size_t keep = len > over ? len - over : 0;
        out[keep] = '\0';
        ax_utf8_sanitize(out, keep);
        free(r->result_buf);
        r->result_buf = NULL;
        rc = ax_attempt_encode(&a, &r->result_buf, &r->result_len);
        ax_warn("instance %lld: output cut to %zu bytes to fit message.max.bytes %zu",
                (long long)a.instance_id, keep, max);
    }
    free(out);
    /* A slot is free: start what waits, fetch more. */
    maybe_resume(ex);
    event_active(ex->ev_kick, 0, 0);
    if (rc < 0) {
        ax_error("instance %lld: cannot encode result", (long long)a.instance_id);
        r->state = RUN_DONE;
        commit_ready(ex);
        return;
    }
    r->state = RUN_REPORTING;
    ex->ran++;
    produce_result(r);
}

/* ---- the environment of commands --------------------------------------------------- */

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

/* ---- claim ------------------------------------------------------------------------- */

static char lease_args[3][32];
static void lease_params(executor_t *ex) {
    const ax_conf_t *c = &ex->svc.conf;
    snprintf(lease_args[0], 32, "%lld", (long long)c->executor_lease_factor);
    snprintf(lease_args[1], 32, "%lld", (long long)c->executor_lease_min_ms);
    snprintf(lease_args[2], 32, "%lld", (long long)c->executor_lease_max_ms);
}

/* One statement claims every instance of jobs without a concurrency limit:
 * LOCKED, this worker, lease = factor x the job's average run time within
 * the bounds. */
static const char sql_claim[] =
    /* id = ANY($2): primary-key lookups, linear in the batch whatever the
     * planner believes about the partial indexes */
    "WITH c AS ("
    "  SELECT i.id, least(greatest($4::bigint * coalesce(j.avg_run_ms, 0), $5::bigint),"
    "    $6::bigint)::bigint AS lease"
    "  FROM job_instance i LEFT JOIN job j ON j.id = i.job_id"
    "  WHERE i.id = ANY($2::bigint[]) AND i.state = 'SCHEDULED'"
    "    AND i.attempt = ($3::int[])[array_position($2::bigint[], i.id)]"
    "    AND j.concurrency_limit IS NULL"
    "  ORDER BY i.id FOR UPDATE OF i"
    ")"
    " UPDATE job_instance i SET state = 'LOCKED', worker = $1, locked_at = clock_timestamp(),"
    "  lease_expires_at = now() + c.lease * interval '1 millisecond'"
    " FROM c WHERE i.id = c.id"
    " RETURNING i.id, c.lease, i.shard_index, i.shard_total, i.shard_mode = 'probe'";

/* Claim one instance of a job with a concurrency limit: lock it, take a
 * slot of job.running_count or hand it back to the trigger for a while.
 * Returns 1 claimed (*lease set), 0 handed back, -1 not claimable
 * (duplicate / stale), <0 error. */
static int claim_limited(executor_t *ex, run_t *r, int64_t *lease, char *err, size_t errlen) {
    ax_svc_t *svc = &ex->svc;
    char id[32], att[16];
    snprintf(id, sizeof id, "%lld", (long long)r->d.instance_id);
    snprintf(att, sizeof att, "%d", (int)r->d.attempt);
    int rc = ax_pg_begin(svc->pg, err, errlen);
    if (rc < 0)
        return rc;
    PGresult *res = NULL;
    const char *p[] = {id, att};
    rc = ax_pg_exec(svc->pg,
                    "SELECT job_id FROM job_instance WHERE id = $1::bigint AND attempt = $2::int"
                    " AND state = 'SCHEDULED' FOR UPDATE",
                    2, p, NULL, NULL, &res, err, errlen);
    if (rc < 0 || PQntuples(res) == 0 || PQgetisnull(res, 0, 0)) {
        PQclear(res);
        ax_pg_rollback(svc->pg);
        return rc < 0 ? rc : -1;
    }
    char job[32];
    snprintf(job, sizeof job, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    const char *q[] = {job, lease_args[0], lease_args[1], lease_args[2]};
    rc = ax_pg_exec(svc->pg,
                    "UPDATE job SET running_count = running_count + 1 WHERE id = $1::bigint"
                    " AND (concurrency_limit IS NULL OR running_count < concurrency_limit)"
                    " RETURNING least(greatest($2::bigint * coalesce(avg_run_ms, 0), $3::bigint),"
                    "   $4::bigint)::bigint",
                    4, q, NULL, NULL, &res, err, errlen);
    int won = rc == 0 && PQntuples(res) == 1;
    if (won)
        *lease = ax_pg_int(res, 0, 0);
    PQclear(res);
    if (rc == 0 && won) {
        char ls[32];
        snprintf(ls, sizeof ls, "%lld", (long long)*lease);
        const char *w[] = {id, svc->worker_id, ls};
        rc = ax_pg_exec(svc->pg,
                        "UPDATE job_instance SET state = 'LOCKED', worker = $2, holds_slot = true,"
                        "  locked_at = clock_timestamp(),"
                        "  lease_expires_at = now() + $3::bigint * interval '1 millisecond'"
                        " WHERE id = $1::bigint",
                        3, w, NULL, NULL, NULL, err, errlen);
    } else if (rc == 0) {
        /* No slot: back to the trigger, due again shortly. */
        rc = ax_pg_exec(svc->pg,
                        "UPDATE job_instance SET dispatched_at = NULL,"
                        "  due_at = now() + interval '500 milliseconds' WHERE id = $1::bigint",
                        1, p, NULL, NULL, NULL, err, errlen);
    }
    if (rc == 0)
        rc = ax_pg_commit(svc->pg, err, errlen);
    if (rc < 0) {
        ax_pg_rollback(svc->pg);
        return rc;
    }
    return won ? 1 : 0;
}

/* Claim every RUN_NEW run; the winners wait in their pools. */
static int claim_new(executor_t *ex) {
    ax_svc_t *svc = &ex->svc;
    ax_strbuf_t ids = {0}, att = {0};
    ax_pgarr_begin(&ids);
    ax_pgarr_begin(&att);
    size_t n = 0;
    for (run_t *r = ex->head; r; r = r->next)
        if (r->state == RUN_NEW) {
            ax_pgarr_int(&ids, r->d.instance_id);
            ax_pgarr_int(&att, r->d.attempt);
            n++;
        }
    ax_pgarr_end(&ids);
    ax_pgarr_end(&att);
    int rc = 0;
    PGresult *res = NULL;
    char err[1024];
    if (n == 0)
        goto out;
    lease_params(ex);
    const char *p[] = {svc->worker_id, ids.s, att.s, lease_args[0], lease_args[1], lease_args[2]};
    rc = ax_pg_exec(svc->pg, sql_claim, 6, p, NULL, NULL, &res, err, sizeof err);
    if (rc < 0) {
        ax_warn("claim: %s", err);
        goto out;
    }
    int won = PQntuples(res);
    int64_t lost = 0;
    idflag_t *rowof = calloc((size_t)won + 1, sizeof *rowof);
    for (int i = 0; rowof && i < won; i++)
        rowof[i] = (idflag_t){ax_pg_int(res, i, 0), i};
    if (rowof)
        qsort(rowof, (size_t)won, sizeof *rowof, idflag_cmp);
    for (run_t *r = ex->head; r; r = r->next) {
        if (r->state != RUN_NEW)
            continue;
        int64_t lease = -1;
        r->shard_total = 1;
        const idflag_t *f = rowof ? idflag_find(rowof, (size_t)won, r->d.instance_id) : NULL;
        if (f) {
            int i = f->flag;
            lease = ax_pg_int(res, i, 1);
            r->shard_index = (int)ax_pg_int(res, i, 2);
            r->shard_total = (int)ax_pg_int(res, i, 3);
            r->probe = strcmp(PQgetvalue(res, i, 4), "t") == 0;
        }
        if (lease < 0) { /* a job with a concurrency limit, or a lost claim */
            int c = claim_limited(ex, r, &lease, err, sizeof err);
            if (c < -1) {
                ax_warn("claim: %s", err);
                rc = c;
                break; /* the rest stays RUN_NEW for the retry */
            }
            if (c == 0) {
                ax_debug("instance %lld: job at its concurrency limit; back to the trigger",
                         (long long)r->d.instance_id);
                run_drop(r);
                continue;
            }
            if (c < 0) {
                ex->duplicates++;
                lost++;
                ax_info("instance %lld attempt %d: claim lost (duplicate or stale dispatch); "
                        "dropped",
                        (long long)r->d.instance_id, (int)r->d.attempt);
                run_drop(r);
                continue;
            }
        }
        r->lease_ms = lease;
        r->state = RUN_CLAIMED;
        pool_push(r->pool, r);
    }
    free(rowof);
    if (lost)
        ax_pg_count(svc->pg, "executor.claims_lost", lost);
    if (rc == 0)
        ex->claim_failures = 0;
out:
    PQclear(res);
    ax_strbuf_free(&ids);
    ax_strbuf_free(&att);
    return rc;
}

/* ---- start waves --------------------------------------------------------------------- */

static void start_run(executor_t *ex, run_t *r) {
    handler_result_t res = {0};
    r->started_at_ms = ax_now_ms();
    r->started_mono = ax_mono_ms();
    r->state = RUN_RUNNING;
    wait_sub(r);
    r->pool->running++;
    ex->running++;
    if (r->ops->start(ex, r, &res) < 0)
        run_done(r, &res);
}

/* Mark RUNNING (one statement) and start as many waiting runs as the pools
 * have free slots, each pool's in lane order (pool_pop). */
static void start_ready(executor_t *ex) {
    ax_svc_t *svc = &ex->svc;
    if (svc->stopping)
        return;
    int64_t now = ax_mono_ms(), starve = svc->conf.executor_lane_starve_ms;
    run_t **wave = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < ex->npools; i++) {
        pool_t *pl = &ex->pools[i];
        for (size_t k = 0; (int64_t)(pl->running + k) < pl->slots; k++) {
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 64;
                run_t **w = realloc(wave, nc * sizeof *w);
                if (!w)
                    break;
                wave = w;
                cap = nc;
            }
            run_t *r = pool_pop(pl, now, starve);
            if (!r)
                break;
            wave[n++] = r;
        }
    }
    if (n == 0) {
        free(wave);
        return;
    }
    ax_strbuf_t ids = {0};
    ax_pgarr_begin(&ids);
    for (size_t i = 0; i < n; i++)
        ax_pgarr_int(&ids, wave[i]->d.instance_id);
    ax_pgarr_end(&ids);
    char err[1024];
    /* A queued claim's lease is renewed rarely (on_lease): starting gives
     * it a fresh one, the shortest lease (the next renewal sets each
     * run's own). */
    char lease[32];
    snprintf(lease, sizeof lease, "%lld", (long long)svc->conf.executor_lease_min_ms);
    const char *p[] = {svc->worker_id, ids.s, lease};
    PGresult *res;
    int rc = ax_pg_exec(svc->pg,
                        "UPDATE job_instance SET state = 'RUNNING', running_at = clock_timestamp(),"
                        "  lease_expires_at = greatest(lease_expires_at,"
                        "    now() + $3::bigint * interval '1 millisecond')"
                        " WHERE id = ANY($2::bigint[]) AND state = 'LOCKED' AND worker = $1"
                        " RETURNING id, cancel_requested_at IS NOT NULL",
                        3, p, NULL, NULL, &res, err, sizeof err);
    ax_strbuf_free(&ids);
    if (rc < 0) {
        ax_warn("mark running: %s", err);
        for (size_t i = n; i-- > 0;) /* back where they were, in order */
            pool_push_front(wave[i]->pool, wave[i]);
        free(wave);
        event_add(ex->ev_retry, &(struct timeval){0, 200000});
        return;
    }
    int rows = PQntuples(res);
    idflag_t *mine = calloc((size_t)rows + 1, sizeof *mine);
    for (int i = 0; mine && i < rows; i++)
        mine[i] = (idflag_t){ax_pg_int(res, i, 0), strcmp(PQgetvalue(res, i, 1), "t") == 0};
    if (mine)
        qsort(mine, (size_t)rows, sizeof *mine, idflag_cmp);
    for (size_t i = 0; i < n; i++) {
        run_t *r = wave[i];
        const idflag_t *f = mine ? idflag_find(mine, (size_t)rows, r->d.instance_id) : NULL;
        if (!f) { /* lost meanwhile (lease swept, cancelled) */
            ax_info("instance %lld: no longer ours before it started; dropped",
                    (long long)r->d.instance_id);
            wait_sub(r);
            r->state = RUN_DONE;
            maybe_resume(ex);
            continue;
        }
        if (f->flag) {
            handler_result_t none = {.outcome = AX_OUTCOME_CANCELLED};
            r->stop_why = "cancelled";
            r->started_at_ms = ax_now_ms();
            r->started_mono = ax_mono_ms();
            r->state = RUN_RUNNING;
            wait_sub(r);
            r->pool->running++;
            ex->running++;
            run_done(r, &none);
            continue;
        }
        start_run(ex, r);
    }
    free(wave);
    free(mine);
    PQclear(res);
}

/* ---- the consume loop ------------------------------------------------------------------- */

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
    start_ready(ex);
    commit_ready(ex);
    event_active(ex->ev_kick, 0, 0);
}

static void on_dispatch_ready(void *arg) {
    executor_t *ex = arg;
    ax_svc_t *svc = &ex->svc;
    if (svc->stopping || has_new(ex))
        return; /* a claim is waiting for PostgreSQL: take nothing more */
    /* A few batches per turn of the loop, then come back through a zero
     * timer: lease renewals and heartbeats must not wait behind a backlog
     * (a starved renewal lets the sweep declare our instances lost). */
    for (int round = 0; !svc->stopping; round++) {
        if (round == 4) {
            event_add(ex->ev_more, &(struct timeval){0, 0});
            break;
        }
        rd_kafka_message_t *msgs[256];
        ssize_t n = rd_kafka_consume_batch_queue(svc->cqueue, 0, msgs, 256);
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
            if (!r) {
                rd_kafka_message_destroy(m);
                continue;
            }
            r->ex = ex;
            r->msg = m;
            r->lane = lane_of_topic(rd_kafka_topic_name(m->rkt));
            ln.served[r->lane] = ax_mono_ms(); /* the lane was fetched from */
            char reason[512];
            if (ax_svc_precheck(svc, m, AX_SCHEMA_DISPATCH, reason, sizeof reason) < 0 ||
                ax_dispatch_decode(m->payload, m->len, &r->d, reason, sizeof reason) < 0) {
                r->state = RUN_DONE;
                ax_svc_reject(svc, m, reason);
                ex->dead_lettered++;
                dlq = 1;
            } else if (!(r->ops = handler_for(r->d.handler_kind)) ||
                       !(r->pool = pool_for(ex, &r->d))) {
                snprintf(reason, sizeof reason,
                         "handler kind '%s' has no pool in this executor (executor.pools)",
                         r->d.handler_kind);
                r->state = RUN_DONE;
                ax_svc_reject(svc, m, reason);
                ex->dead_lettered++;
                dlq = 1;
            } else {
                r->state = RUN_NEW;
                wait_add(r);
                if (pool_full(r->pool, r->lane))
                    pause_for_pool(ex, r->pool, m);
            }
            track(ex, r);
        }
        lanes_tick(ex, 0); /* what this batch changed: pause less urgent lanes at once */
        if (dlq)
            ax_svc_flush(svc, 35000); /* dead letters are durable before their commit */
        if (claim_new(ex) < 0) {
            schedule_retry(ex);
            break;
        }
        start_ready(ex);
        commit_ready(ex);
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
    static const struct timeval one_ms = {0, 1000};
    if (!evtimer_pending(ex->ev_start, NULL))
        evtimer_add(ex->ev_start, &one_ms);
    commit_ready(ex);
    on_dispatch_ready(ex);
}

/* ---- leases, cancel requests, heartbeat, watermarks ------------------------------------ */

static void stop_run(executor_t *ex, run_t *r, const char *why) {
    if (r->stop_why)
        return;
    r->stop_why = why;
    if (r->state == RUN_RUNNING) {
        ax_info("instance %lld: stopping its handler (%s)", (long long)r->d.instance_id, why);
        r->ops->cancel(ex, r, why);
    } else if (r->state == RUN_CLAIMED && r->pool && strcmp(why, "cancelled") == 0) {
        /* cancelled while it waited in its pool: reported CANCELLED now (as
         * when a cancel is found at its start), not left to the sweep */
        handler_result_t none = {.outcome = AX_OUTCOME_CANCELLED};
        pool_remove(r->pool, r);
        wait_sub(r);
        r->started_at_ms = ax_now_ms();
        r->started_mono = ax_mono_ms();
        r->state = RUN_RUNNING;
        r->pool->running++;
        ex->running++;
        run_done(r, &none);
    } else if (r->state == RUN_CLAIMED) {
        run_drop(r);
    }
}

/* Renew the held leases — one statement per distinct lease length, each a
 * primary-key lookup of its ids — and learn about cancel requests.
 *
 * Running (and reporting) instances are renewed every tick. Claimed ones
 * waiting in a pool queue only every QUEUED_RENEW_MS: while this executor
 * heartbeats, the sweep leaves an expired lease alone unless it expired
 * ten minutes ago, and once the heartbeat stops, the queued instances are
 * recovered as soon as it is stale (their leases have long expired).
 * Renewing thousands of queued claims every lease/3 cost more PostgreSQL
 * time than running them (BENCHMARKS.md). */
#define QUEUED_RENEW_MS 60000
#define RENEWS(r, queued_too)                                                                \
    (((r)->state == RUN_RUNNING || (r)->state == RUN_REPORTING ||                           \
      ((queued_too) && (r)->state == RUN_CLAIMED)) &&                                        \
     !(r)->stop_why)
static void on_lease(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    ax_svc_t *svc = &ex->svc;
    int64_t lens[32];
    size_t nlens = 0, n = 0;
    int64_t now = ax_mono_ms();
    int queued = now - ex->queued_renewed_mono >= QUEUED_RENEW_MS;
    if (queued)
        ex->queued_renewed_mono = now;
    /* Also while a result waits for Kafka's ack: the instance is ours until
     * the callback records it. */
    for (run_t *r = ex->head; r; r = r->next)
        if (RENEWS(r, queued)) {
            size_t k = 0;
            while (k < nlens && lens[k] != r->lease_ms)
                k++;
            if (k == nlens && nlens < 32)
                lens[nlens++] = r->lease_ms;
            n++;
        }
    if (n == 0) {
        st.lease_ok_mono = ax_mono_ms();
        return;
    }
    idflag_t *got = calloc(n, sizeof *got);
    size_t ngot = 0;
    int failed = !got;
    int64_t m0 = ax_mono_ms();
    char err[1024];
    for (size_t k = 0; k < nlens && !failed; k++) {
        ax_strbuf_t ids = {0};
        ax_pgarr_begin(&ids);
        for (run_t *r = ex->head; r; r = r->next)
            if (RENEWS(r, queued) && (r->lease_ms == lens[k] || (k == nlens - 1 && nlens == 32)))
                ax_pgarr_int(&ids, r->d.instance_id);
        ax_pgarr_end(&ids);
        char len[32];
        snprintf(len, sizeof len, "%lld", (long long)lens[k]);
        const char *p[] = {svc->worker_id, ids.s, len};
        PGresult *res;
        if (ax_pg_exec(svc->pg,
                       "UPDATE job_instance SET lease_expires_at = now()"
                       "  + $3::bigint * interval '1 millisecond'"
                       " WHERE id = ANY($2::bigint[]) AND worker = $1"
                       "  AND state IN ('LOCKED', 'RUNNING')"
                       " RETURNING id, cancel_requested_at IS NOT NULL",
                       3, p, NULL, NULL, &res, err, sizeof err) < 0) {
            failed = 1;
        } else {
            for (int i = 0; i < PQntuples(res) && ngot < n; i++)
                got[ngot++] = (idflag_t){ax_pg_int(res, i, 0),
                                         strcmp(PQgetvalue(res, i, 1), "t") == 0};
            PQclear(res);
        }
        ax_strbuf_free(&ids);
    }
    if (failed) {
        ax_warn("lease renewal: %s", got ? err : "out of memory");
        if (ax_mono_ms() - st.lease_ok_mono > svc->conf.executor_lease_min_ms) {
            ax_error("leases not renewed for %lld ms: stopping every handler (their instances "
                     "are recovered elsewhere)",
                     (long long)(ax_mono_ms() - st.lease_ok_mono));
            for (run_t *r = ex->head; r; r = r->next)
                stop_run(ex, r, "lease_lost");
            commit_ready(ex);
        }
        free(got);
        return;
    }
    st.lease_ok_mono = m0;
    qsort(got, ngot, sizeof *got, idflag_cmp);
    for (run_t *r = ex->head; r; r = r->next) {
        if ((r->state != RUN_CLAIMED && r->state != RUN_RUNNING) || r->stop_why ||
            !RENEWS(r, queued))
            continue; /* a REPORTING run has nothing left to stop; a queued one not renewed now */
        const idflag_t *f = idflag_find(got, ngot, r->d.instance_id);
        if (!f) {
            ex->lost_leases++;
            stop_run(ex, r, "lease_lost");
        } else if (f->flag) {
            stop_run(ex, r, "cancelled");
        }
    }
    free(got);
    commit_ready(ex);
}

/* Cancel requests (overlap=cancel, axctl instance cancel) of running and
 * claimed instances are looked for every CANCEL_POLL_MS — one primary-key
 * lookup of their ids — not only at the lease renewal (every
 * executor.lease.min.ms/3, 1.7 s by default, and once a minute for claimed
 * ones), so a cancelled handler is stopped within a second and a cancelled
 * claim waiting in its pool is reported CANCELLED at once. */
#define CANCEL_POLL_MS 200
static void on_cancel_poll(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    ax_svc_t *svc = &ex->svc;
    ax_strbuf_t ids = {0};
    size_t n = 0;
    ax_pgarr_begin(&ids);
    for (run_t *r = ex->head; r; r = r->next)
        if ((r->state == RUN_RUNNING || r->state == RUN_CLAIMED) && !r->stop_why) {
            ax_pgarr_int(&ids, r->d.instance_id);
            n++;
        }
    ax_pgarr_end(&ids);
    if (n == 0) {
        ax_strbuf_free(&ids);
        return;
    }
    const char *p[] = {svc->worker_id, ids.s};
    PGresult *res;
    char err[512];
    int rc = ax_pg_exec(svc->pg,
                        "SELECT id FROM job_instance WHERE id = ANY($2::bigint[]) AND worker = $1"
                        " AND cancel_requested_at IS NOT NULL AND state IN ('LOCKED', 'RUNNING')",
                        2, p, NULL, NULL, &res, err, sizeof err);
    ax_strbuf_free(&ids);
    if (rc < 0) {
        ax_debug("cancel poll: %s", err); /* the lease renewal looks too */
        return;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        int64_t id = ax_pg_int(res, i, 0);
        for (run_t *r = ex->head; r; r = r->next)
            if (r->d.instance_id == id && (r->state == RUN_RUNNING || r->state == RUN_CLAIMED)) {
                stop_run(ex, r, "cancelled");
                break;
            }
    }
    PQclear(res);
    commit_ready(ex);
}

static void read_machine_load(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        unsigned long long v[8] = {0};
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) == 8) {
            uint64_t total = 0;
            for (int i = 0; i < 8; i++)
                total += v[i];
            uint64_t idle = v[3] + v[4];
            uint64_t busy = total - idle;
            if (st.cpu_total && total > st.cpu_total)
                st.cpu_pct = 100.0 * (double)(busy - st.cpu_busy) / (double)(total - st.cpu_total);
            st.cpu_busy = busy;
            st.cpu_total = total;
        }
        fclose(f);
    }
    f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long total = 0, avail = 0, v;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemTotal: %llu", &v) == 1)
                total = v;
            else if (sscanf(line, "MemAvailable: %llu", &v) == 1)
                avail = v;
        }
        if (total)
            st.mem_pct = 100.0 * (double)(total - avail) / (double)total;
        fclose(f);
    }
}

static long rss_bytes(void) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss * sysconf(_SC_PAGESIZE);
}

static void heartbeat(executor_t *ex, const char *state) {
    ax_svc_t *svc = &ex->svc;
    const ax_conf_t *c = &svc->conf;
    read_machine_load();
    int over = (c->executor_watermark_cpu > 0 && st.cpu_pct > (double)c->executor_watermark_cpu) ||
               (c->executor_watermark_mem > 0 && st.mem_pct > (double)c->executor_watermark_mem);
    int under = !((c->executor_watermark_cpu > 0 &&
                   st.cpu_pct > (double)c->executor_watermark_cpu - 5) ||
                  (c->executor_watermark_mem > 0 &&
                   st.mem_pct > (double)c->executor_watermark_mem - 5));
    if (st.fetching && over) {
        ax_warn("above a watermark (cpu %.0f%%, memory %.0f%%): fetching stopped", st.cpu_pct,
                st.mem_pct);
        st.fetching = 0;
    } else if (!st.fetching && under) {
        ax_info("below the watermarks again (cpu %.0f%%, memory %.0f%%): fetching",
                st.cpu_pct, st.mem_pct);
        st.fetching = 1;
        event_active(ex->ev_kick, 0, 0);
    }
    apply_pauses(ex); /* (partitions assigned since are brought in line by lanes_tick) */
    char pools[16384], *w = pools;
    size_t left = sizeof pools;
    int k = snprintf(w, left, "{");
    for (size_t i = 0; i < ex->npools && k > 0 && (size_t)k < left; i++) {
        w += k;
        left -= (size_t)k;
        pool_t *p = &ex->pools[i];
        k = snprintf(w, left, "%s\"%s\": {\"slots\": %lld, \"queue\": %lld, \"running\": %zu,"
                              " \"waiting\": %zu, \"full\": %s,"
                              " \"waiting_by_lane\": [%zu, %zu, %zu, %zu, %zu]}",
                     i ? ", " : "", p->name, (long long)p->slots, (long long)p->queue,
                     p->running, p->waiting, p->full ? "true" : "false", p->lane_waiting[0],
                     p->lane_waiting[1], p->lane_waiting[2], p->lane_waiting[3],
                     p->lane_waiting[4]);
    }
    if (k > 0 && (size_t)k < left)
        snprintf(w + k, left - (size_t)k, "}");
    size_t waiting = 0;
    for (size_t i = 0; i < ex->npools; i++)
        waiting += ex->pools[i].waiting;
    char host[256] = "", pid[16], cpu[32], mem[32], rss[32], run[16], wait[16];
    gethostname(host, sizeof host - 1);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    snprintf(cpu, sizeof cpu, "%.1f", st.cpu_pct);
    snprintf(mem, sizeof mem, "%.1f", st.mem_pct);
    snprintf(rss, sizeof rss, "%ld", rss_bytes());
    snprintf(run, sizeof run, "%zu", ex->running);
    snprintf(wait, sizeof wait, "%zu", waiting);
    ax_strbuf_t groups = {0};
    ax_pgarr_begin(&groups);
    char *gl = strdup(c->executor_groups);
    for (char *save = NULL, *g = strtok_r(gl, ", ", &save); g; g = strtok_r(NULL, ", ", &save))
        ax_pgarr_text(&groups, g);
    free(gl);
    ax_pgarr_end(&groups);
    const char *p[] = {svc->worker_id, host, pid, groups.s, cpu, mem, rss, run, wait, pools,
                       st.fetching && !svc->stopping ? "t" : "f", state};
    char err[512];
    if (ax_pg_exec(svc->pg,
                   "INSERT INTO worker (id, host, pid, groups, cpu_pct, mem_pct, rss_bytes,"
                   "  running, waiting, pools, fetching, state)"
                   " VALUES ($1, $2, $3::int, $4::text[], $5::real, $6::real, $7::bigint,"
                   "  $8::int, $9::int, $10::jsonb, $11::boolean, $12)"
                   " ON CONFLICT (id) DO UPDATE SET host = $2, pid = $3::int, groups = $4::text[],"
                   "  heartbeat_at = now(), cpu_pct = $5::real, mem_pct = $6::real,"
                   "  rss_bytes = $7::bigint, running = $8::int, waiting = $9::int,"
                   "  pools = $10::jsonb, fetching = $11::boolean, state = $12,"
                   "  started_at = CASE WHEN worker.pid = $3::int THEN worker.started_at"
                   "                    ELSE now() END",
                   12, p, NULL, NULL, NULL, err, sizeof err) < 0)
        ax_debug("worker heartbeat: %s", err);
    ax_strbuf_free(&groups);
}

static void on_heartbeat(evutil_socket_t fd, short what, void *arg) {
    heartbeat(arg, g_ex.svc.stopping ? "draining" : "running");
}

/* ---- SIGHUP ---------------------------------------------------------------------------- */

/* Keys applied while running; any other change waits for a restart. */
static const char *const reloadable_keys[] = {
    "executor.slots", "executor.queue", "executor.pools", "executor.pool.routes",
    "executor.output.cap", "executor.kill.grace.ms", "executor.lease.min.ms",
    "executor.lease.max.ms", "executor.lease.factor", "executor.watermark.cpu",
    "executor.watermark.mem", "executor.shutdown.grace.ms", "executor.lane.starve.ms",
    "backoff.initial.ms", "backoff.max.ms", NULL};

static int reload_check(ax_svc_t *svc, ax_conf_t *n, char *err, size_t len) {
    return pools_configure(&g_ex, n, err, len);
}

static void on_reload(ax_svc_t *svc, const ax_conf_t *old) {
    executor_t *ex = &g_ex;
    for (size_t i = 0; i < ex->npools; i++)
        ax_info("pool %s: %lld slots, queue %lld", ex->pools[i].name,
                (long long)ex->pools[i].slots, (long long)ex->pools[i].queue);
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

/* Instances we claimed but never started go back to SCHEDULED (their
 * concurrency slots too); their messages are not committed, so the group
 * delivers them again. */
static void release_waiting(executor_t *ex) {
    ax_strbuf_t ids = {0};
    ax_pgarr_begin(&ids);
    size_t n = 0;
    for (run_t *r = ex->head; r; r = r->next)
        if (r->state == RUN_CLAIMED) {
            ax_pgarr_int(&ids, r->d.instance_id);
            pool_remove(r->pool, r);
            wait_sub(r);
            r->state = RUN_NEW; /* not committed */
            n++;
        }
    ax_pgarr_end(&ids);
    if (n) {
        char err[512];
        const char *p[] = {ex->svc.worker_id, ids.s};
        if (ax_pg_begin(ex->svc.pg, err, sizeof err) == 0 &&
            ax_pg_exec(ex->svc.pg,
                       "UPDATE job SET running_count = running_count - c.n"
                       " FROM (SELECT job_id, count(*) AS n FROM job_instance"
                       "   WHERE id = ANY($2::bigint[]) AND state = 'LOCKED' AND worker = $1"
                       "   AND holds_slot GROUP BY job_id) c WHERE job.id = c.job_id",
                       2, p, NULL, NULL, NULL, err, sizeof err) == 0 &&
            ax_pg_exec(ex->svc.pg,
                       "UPDATE job_instance SET state = 'SCHEDULED', worker = NULL,"
                       "  locked_at = NULL, lease_expires_at = NULL, holds_slot = false"
                       " WHERE id = ANY($2::bigint[]) AND state = 'LOCKED' AND worker = $1",
                       2, p, NULL, NULL, NULL, err, sizeof err) == 0 &&
            ax_pg_commit(ex->svc.pg, err, sizeof err) == 0)
            ax_info("%zu claimed instance(s) that had not started handed back", n);
        else {
            ax_pg_rollback(ex->svc.pg);
            ax_warn("handing back claimed instances: %s (their leases expire instead)", err);
        }
    }
    ax_strbuf_free(&ids);
}

/* SIGTERM: stop fetching, hand back what has not started, let running
 * handlers finish until the shutdown grace (then stop them), deliver their
 * results, commit, leave the group. */
static void on_stop(ax_svc_t *svc) {
    executor_t *ex = (executor_t *)svc;
    apply_pauses(ex); /* svc->stopping: every partition */
    release_waiting(ex);
    ax_info("draining: %zu running, %zu uncommitted", ex->running, ex->tracked);
    heartbeat(ex, "draining");
    int64_t ms = svc->conf.executor_shutdown_grace_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(ex->ev_deadline, &tv);
    commit_ready(ex);
}

/* executor.groups -> the lane topics to subscribe (ln.topics): five per
 * group, <prefix>dispatch[.G][.pN] (ax_conf_dispatch_topic). A group named
 * p0..p9 would read another group's lane topic; a name a job cannot carry
 * (job.executor_group: [A-Za-z0-9][A-Za-z0-9_-]{0,63}) could too. */
static int lane_topics(const ax_conf_t *c, char *err, size_t errlen) {
    char *gl = strdup(c->executor_groups ? c->executor_groups : "");
    int rc = 0;
    for (char *save = NULL, *g = strtok_r(gl, ", ", &save); g && rc == 0;
         g = strtok_r(NULL, ", ", &save)) {
        size_t len = strlen(g), okchars = strspn(g, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                    "abcdefghijklmnopqrstuvwxyz0123456789_-");
        if (g[0] == 'p' && g[1] >= '0' && g[1] <= '9' && g[2] == 0) {
            rc = ax_seterr(err, errlen, AX_ERR_INVALID,
                           "executor.groups: '%s' is not a group name: p0..p9 name the "
                           "priority lanes (<prefix>dispatch.%s is lane %c of the default "
                           "group)",
                           g, g, g[1]);
            break;
        }
        if (len > 64 || okchars != len || g[0] == '-' || g[0] == '_') {
            rc = ax_seterr(err, errlen, AX_ERR_INVALID,
                           "executor.groups: '%s' is not a group name (letters, digits, '_' "
                           "and '-', at most 64, starting with a letter or digit)",
                           g);
            break;
        }
        char name[300];
        ax_conf_dispatch_topic(c, g, AX_PRIORITY_DEFAULT, name, sizeof name);
        int dup = 0;
        for (size_t i = 0; i < ln.ntopics && !dup; i++)
            dup = strcmp(ln.topics[i].name, name) == 0;
        if (dup)
            continue; /* listed twice */
        lane_topic_t *n = realloc(ln.topics, (ln.ntopics + AX_PRIORITIES) * sizeof *n);
        if (!n) {
            rc = ax_seterr(err, errlen, AX_ERR_INVALID, "out of memory");
            break;
        }
        ln.topics = n;
        for (int l = 0; l < AX_PRIORITIES; l++) {
            ax_conf_dispatch_topic(c, g, l, ln.topics[ln.ntopics].name,
                                   sizeof ln.topics[ln.ntopics].name);
            ln.topics[ln.ntopics++].lane = l;
        }
    }
    free(gl);
    if (rc == 0 && ln.ntopics == 0)
        rc = ax_seterr(err, errlen, AX_ERR_INVALID, "executor.groups is empty");
    return rc;
}

/* ---- main ----------------------------------------------------------------------------- */

static struct event *every(executor_t *ex, int64_t ms, event_callback_fn fn) {
    struct event *ev = event_new(ex->svc.base, -1, EV_PERSIST, fn, ex);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(ev, &tv);
    return ev;
}

int main(int argc, char **argv) {
    executor_t *ex = &g_ex;
    if (privilege_check(argc, argv) < 0) /* root refusal, executor.run.user: exit 2 */
        return 2;
    if (ax_svc_init(&ex->svc, "ax-executor", &argc, argv, usage, "executor") < 0)
        return ax_svc_exit_status(&ex->svc);
    ax_svc_t *svc = &ex->svc;
    char err[1024];
    if (pools_configure(ex, &svc->conf, err, sizeof err) < 0 ||
        lane_topics(&svc->conf, err, sizeof err) < 0) {
        fprintf(stderr, "ax-executor: configuration error: %s\n", err);
        return 2;
    }
    svc->on_stop = on_stop;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "AXCONF_", 7) != 0 && strncmp(*e, "AX_", 3) != 0)
            ex->child_env_n++;
    ex->child_env_base = calloc(ex->child_env_n + 1, sizeof *ex->child_env_base);
    size_t k = 0;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "AXCONF_", 7) != 0 && strncmp(*e, "AX_", 3) != 0)
            ex->child_env_base[k++] = *e;
    st.lease_ok_mono = ax_mono_ms();
    for (int l = 0; l < AX_PRIORITIES; l++)
        ln.served[l] = st.lease_ok_mono;
    for (size_t i = 0; i < AX_ARRAY_SIZE(handlers); i++)
        if (handlers[i]->init && handlers[i]->init(ex) < 0) {
            ax_error("handler %s could not start", handlers[i]->kind);
            return 1;
        }
    ex->ev_retry = evtimer_new(svc->base, on_retry, ex);
    ex->ev_deadline = evtimer_new(svc->base, on_shutdown_deadline, ex);
    ex->ev_kick = event_new(svc->base, -1, 0, on_kick, ex);
    ex->ev_start = evtimer_new(svc->base, on_start, ex);
    ex->ev_more = evtimer_new(svc->base, on_more, ex);
    ex->ev_commit = evtimer_new(svc->base, on_commit, ex);
    int64_t renew = svc->conf.executor_lease_min_ms / 3;
    ex->ev_lease = every(ex, renew, on_lease);
    struct event *ev_cancel_poll = every(ex, CANCEL_POLL_MS, on_cancel_poll);
    struct event *ev_heart = every(ex, svc->conf.executor_heartbeat_ms, on_heartbeat);
    svc->reloadable = reloadable_keys;
    svc->reload_check = reload_check;
    svc->on_reload = on_reload;

    char group[300];
    ax_conf_topic(&svc->conf, "executor", group, sizeof group);
    /* The lanes are five topics per group: the cooperative-sticky assignor
     * balances the number of partitions per member, not per topic, and can
     * leave a whole lane on one executor; roundrobin spreads every lane
     * (unless kafka.partition.assignment.strategy is set). */
    /* Dispatches are transactional and read read_committed: the broker
     * may hold a fetch for its whole fetch.wait.max.ms (librdkafka's
     * default 500 ms) before it returns a freshly committed message of an
     * otherwise idle lane, so a P0 trickle waited up to half a second.
     * 25 ms bounds that for ~40 fetch requests a second when idle. */
    /* And a small prefetch: librdkafka keeps up to 64 MB of fetched
     * messages per consumer by default, and an urgent message fetched
     * behind thousands of a lower lane's waited for them (up to 1 s at the
     * start of bench_flood); 1 MB is still ~0.5 s of work at 6,000 jobs/s. */
    static const char *const defaults[][2] = {
        {"partition.assignment.strategy", "roundrobin"},
        {"fetch.wait.max.ms", "25"},
        {"queued.max.messages.kbytes", "1024"},
    };
    for (size_t d = 0; d < AX_ARRAY_SIZE(defaults); d++) {
        int has = 0;
        for (size_t i = 0; i < svc->conf.n_kafka; i++)
            has |= strcmp(svc->conf.kafka[i].key, defaults[d][0]) == 0;
        char kv[128];
        snprintf(kv, sizeof kv, "kafka.%s", defaults[d][0]);
        if (!has && ax_conf_set(&svc->conf, kv, defaults[d][1], "ax-executor default", err,
                                sizeof err) < 0) {
            fprintf(stderr, "ax-executor: %s\n", err);
            return 2;
        }
    }
    svc->consumer = ax_kafka_consumer_new(&svc->conf, group, svc->name, err, sizeof err);
    if (!svc->consumer) {
        fprintf(stderr, "ax-executor: configuration error: %s\n", err);
        return 2;
    }
    /* The five lane topics of every executor group served. */
    const char **topics = calloc(ln.ntopics, sizeof *topics);
    for (size_t i = 0; topics && i < ln.ntopics; i++)
        topics[i] = ln.topics[i].name;
    if (!topics || ax_kafka_subscribe(svc->consumer, topics, ln.ntopics, err, sizeof err) < 0) {
        ax_error("%s", topics ? err : "out of memory");
        return 1;
    }
    free(topics);
    svc->cqueue = rd_kafka_queue_get_consumer(svc->consumer);
    svc->cwatch = ax_kafka_watch(svc->base, svc->cqueue, 100, on_dispatch_ready, ex);
    for (size_t i = 0; i < ex->npools; i++)
        ax_info("pool %s: %lld slots, queue %lld", ex->pools[i].name,
                (long long)ex->pools[i].slots, (long long)ex->pools[i].queue);
    for (size_t i = 0; i < ln.ntopics; i++)
        ax_info("executing %s (lane P%d)", ln.topics[i].name, ln.topics[i].lane);
    char fw[32] = "500";
    size_t fwlen = sizeof fw;
    rd_kafka_conf_get(rd_kafka_conf(svc->consumer), "fetch.wait.max.ms", fw, &fwlen);
    ln.round_ms = atoll(fw) + LANE_TICK_MS;
    ln.ev_tick = every(ex, LANE_TICK_MS, on_lane_tick);
    heartbeat(ex, "running");
    event_base_dispatch(svc->base);
    ax_info("stopped: %lld attempts run, %lld duplicate dispatches dropped, %lld dead-lettered, "
            "%lld leases lost",
            (long long)ex->ran, (long long)ex->duplicates, (long long)ex->dead_lettered,
            (long long)ex->lost_leases);
    heartbeat(ex, "stopped");
    ax_kafka_watch_free(svc->cwatch);
    svc->cwatch = NULL;
    rd_kafka_queue_destroy(svc->cqueue);
    svc->cqueue = NULL;
    rd_kafka_consumer_close(svc->consumer);
    rd_kafka_flush(svc->producer, 10000);
    for (size_t i = 0; i < AX_ARRAY_SIZE(handlers); i++)
        if (handlers[i]->fini)
            handlers[i]->fini(ex);
    event_free(ex->ev_retry);
    event_free(ex->ev_deadline);
    event_free(ex->ev_kick);
    event_free(ex->ev_start);
    event_free(ex->ev_more);
    event_free(ex->ev_commit);
    event_free(ex->ev_lease);
    event_free(ev_cancel_poll);
    event_free(ev_heart);
    event_free(ln.ev_tick);
    if (ln.assignment)
        rd_kafka_topic_partition_list_destroy(ln.assignment);
    free(ln.parts);
    free(ln.topics);
    free(routes);
    free(ex->pools);
    free(ex->child_env_base);
    ax_svc_destroy(svc);
    return 0;
}
