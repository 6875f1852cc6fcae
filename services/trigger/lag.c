/*
 * lag.c — backpressure in the leader trigger (docs/PRIORITIES.md).
 *
 * A monitor thread measures the executor consumer group's lag per priority
 * lane every trigger.lag.interval.ms: for every partition of every dispatch
 * topic of this deployment (<prefix>dispatch[.G][.pN], listed from the
 * cluster's metadata every 10 s), the end offset (ListOffsets "latest", the
 * last stable offset for a read_committed handle) minus the group's
 * committed offset (OffsetFetch; the group's start when it has none).
 * It runs on its own client handle with the executors' group.id, which
 * never joins the group, so it neither blocks the trigger's loop nor
 * disturbs the executors. Each sample wakes the loop (an eventfd), which
 * picks it up (lag_tick) and, while this trigger leads:
 *
 *   - feeds the hysteresis of each lane (ax_lane_sample) and recomputes the
 *     release plan (ax_lane_plan) the due scan and the fire path follow;
 *   - about once a second stores lag, state and deferred count per lane in
 *     lane_status (axctl status), and raises the backlog-age alert;
 *   - fails the newest instances of jobs beyond their backlog cap
 *     (backlog.c).
 *
 * While a lane is held back (over its high mark, instances deferred, or the
 * due scan left due instances for want of room) the monitor samples five
 * times as often (trigger.lag.interval.ms / 5, not below 50 ms) and each
 * sample rescans: room opens as the executors drain, and a lane drained
 * between two slow samples left them idle (BENCHMARKS.md, "Issue #13: the
 * lag samples").
 *
 * A lane is also sampled at once (at most every LAG_NUDGE_MS) when what the
 * trigger sent it since the last sample has used up its room but for two
 * batches (lag_note_sent): the room is counted from the last sample, which
 * does not know what the executors drained since, and under a burst a
 * sample 500 ms old closed the ingest's direct path and left the
 * executors idle while the due instances waited in PostgreSQL for the next
 * sample (BENCHMARKS.md, "Issue #13: the lag sample on demand").
 *
 * A lag sample that fails (broker down) keeps the last plan; after three
 * failed intervals in a row every lane counts as not over, so an outage
 * of the monitor never holds work back for good.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "ax/alert.h"
#include "ax/codec.h"
#include "ax/kafka.h"
#include "ax/log.h"
#include "ax/pg.h"
#include "ax/store_lane.h"
#include "trigger.h"

#define MAX_TOPICS 256
#define LAG_NUDGE_MS 50 /* the earliest a sample on demand follows the last one */

struct lagmon {
    trigger_t *t;
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, started;
    rd_kafka_t *rk;
    char prefix[256]; /* <topic.prefix>dispatch */
    int64_t interval_ms, fast_ms;
    int pressed; /* a lane is held back: sample every fast_ms (set by the loop) */
    int nudge;   /* a sample is wanted now (under mu; cleared when one starts) */
    int demand;  /* the sample under way was asked for (under mu) */
    int64_t samples[2]; /* samples taken: at the interval, on demand (under mu) */
    int efd;     /* written after each sample: wakes the loop */
    struct event *ev_wake;
    /* the last sample, under mu */
    int64_t lag[AX_PRIORITIES];
    uint64_t seq;
    int failures;
    char err[256];
    /* main loop side */
    uint64_t seen_seq;
    int64_t last_status_ms;
    int64_t depth_since_ms[AX_PRIORITIES];
    int depth_alerted[AX_PRIORITIES];
};

/* The partitions of every dispatch topic of the deployment. */
static rd_kafka_topic_partition_list_t *list_partitions(struct lagmon *m, char *err,
                                                        size_t errlen) {
    const struct rd_kafka_metadata *md;
    rd_kafka_resp_err_t e = rd_kafka_metadata(m->rk, 1, NULL, &md, 5000);
    if (e) {
        snprintf(err, errlen, "metadata: %s", rd_kafka_err2str(e));
        return NULL;
    }
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(64);
    int nt = 0;
    for (int i = 0; i < md->topic_cnt && nt < MAX_TOPICS; i++) {
        int lane = ax_lane_of_topic(m->prefix, md->topics[i].topic);
        if (lane < 0 || md->topics[i].err)
            continue;
        for (int p = 0; p < md->topics[i].partition_cnt; p++)
            rd_kafka_topic_partition_list_add(l, md->topics[i].topic,
                                              md->topics[i].partitions[p].id);
        nt++;
    }
    rd_kafka_metadata_destroy(md);
    return l;
}

/* One sample: lag per lane into lag[]. */
static int sample(struct lagmon *m, rd_kafka_topic_partition_list_t *parts,
                  int64_t lag[AX_PRIORITIES], char *err, size_t errlen) {
    memset(lag, 0, sizeof(int64_t) * AX_PRIORITIES);
    if (parts->cnt == 0)
        return 0;
    rd_kafka_topic_partition_list_t *com = rd_kafka_topic_partition_list_copy(parts);
    rd_kafka_topic_partition_list_t *end = rd_kafka_topic_partition_list_copy(parts);
    rd_kafka_topic_partition_list_t *beg = rd_kafka_topic_partition_list_copy(parts);
    for (int i = 0; i < parts->cnt; i++) {
        end->elems[i].offset = RD_KAFKA_OFFSET_END;       /* ListOffsets: latest */
        beg->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING; /* ListOffsets: earliest */
    }
    int rc = 0;
    rd_kafka_resp_err_t e = rd_kafka_committed(m->rk, com, 5000);
    if (!e)
        e = rd_kafka_offsets_for_times(m->rk, end, 5000);
    if (!e)
        e = rd_kafka_offsets_for_times(m->rk, beg, 5000);
    if (e) {
        snprintf(err, errlen, "%s", rd_kafka_err2str(e));
        rc = -1;
    } else {
        for (int i = 0; i < parts->cnt; i++) {
            int lane = ax_lane_of_topic(m->prefix, parts->elems[i].topic);
            int64_t hi = end->elems[i].offset, at = com->elems[i].offset;
            if (end->elems[i].err || hi < 0 || lane < 0)
                continue;
            int64_t start = beg->elems[i].err ? 0 : beg->elems[i].offset;
            if (at < 0 || com->elems[i].err || at < start)
                at = start; /* none, or below what retention kept */
            if (hi > at)
                lag[lane] += hi - at;
        }
    }
    rd_kafka_topic_partition_list_destroy(com);
    rd_kafka_topic_partition_list_destroy(end);
    rd_kafka_topic_partition_list_destroy(beg);
    return rc;
}

static void *monitor(void *arg) {
    struct lagmon *m = arg;
    rd_kafka_topic_partition_list_t *parts = NULL;
    int64_t listed = 0;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        /* this sample answers what was asked for until now; one asked for
         * while it runs gets a sample of its own */
        m->demand = m->nudge;
        m->nudge = 0;
        pthread_mutex_unlock(&m->mu);
        char err[256] = "";
        int64_t now = ax_mono_ms(), started = now;
        if (!parts || now - listed > 10000) {
            rd_kafka_topic_partition_list_t *np = list_partitions(m, err, sizeof err);
            if (np) {
                if (parts)
                    rd_kafka_topic_partition_list_destroy(parts);
                parts = np;
                listed = now;
            }
        }
        int64_t lag[AX_PRIORITIES];
        int rc = parts ? sample(m, parts, lag, err, sizeof err) : -1;
        /* drain the handle's own events (errors, logs) */
        rd_kafka_message_t *msg;
        while ((msg = rd_kafka_consumer_poll(m->rk, 0)))
            rd_kafka_message_destroy(msg);
        pthread_mutex_lock(&m->mu);
        m->samples[m->demand]++;
        if (rc == 0) {
            memcpy(m->lag, lag, sizeof lag);
            m->failures = 0;
        } else {
            m->failures++;
            snprintf(m->err, sizeof m->err, "%s", err);
        }
        m->seq++;
        uint64_t one = 1;
        if (write(m->efd, &one, sizeof one) < 0) {
            /* the counter is full: a wake-up is pending anyway */
        }
        /* the next sample: an interval after this one started (fast_ms
         * while pressed), or LAG_NUDGE_MS after it when one is asked for;
         * a signal (pressed, nudged, stop) makes it look again */
        while (!m->stop) {
            int64_t wait_ms = m->nudge     ? LAG_NUDGE_MS
                              : m->pressed ? m->fast_ms
                                           : m->interval_ms;
            int64_t left = started + wait_ms - ax_mono_ms();
            if (left <= 0)
                break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t ns = ts.tv_nsec + left % 1000 * 1000000;
            ts.tv_sec += left / 1000 + ns / 1000000000;
            ts.tv_nsec = ns % 1000000000;
            pthread_cond_timedwait(&m->cv, &m->mu, &ts);
        }
    }
    pthread_mutex_unlock(&m->mu);
    if (parts)
        rd_kafka_topic_partition_list_destroy(parts);
    return NULL;
}

/* A sample is there: pick it up now, not at the next tick. */
static void on_wake(evutil_socket_t fd, short what, void *arg) {
    trigger_t *t = arg;
    uint64_t v;
    if (read(fd, &v, sizeof v) < 0 && errno != EAGAIN)
        ax_warn("lag monitor: eventfd: %s", strerror(errno));
    if (lag_tick(t))
        arm_scan(t, 0);
}

int lag_start(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512], group[300];
    struct lagmon *m = calloc(1, sizeof *m);
    if (!m)
        return -1;
    m->t = t;
    m->interval_ms = svc->conf.trigger_lag_interval_ms;
    /* the interval is at least 50 ms (ax_conf_table) */
    m->fast_ms = m->interval_ms / 5 > 50 ? m->interval_ms / 5 : 50;
    m->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    m->ev_wake = m->efd < 0 ? NULL
                            : event_new(svc->base, m->efd, EV_READ | EV_PERSIST, on_wake, t);
    if (!m->ev_wake || event_add(m->ev_wake, NULL) < 0) {
        ax_error("lag monitor: eventfd: %s", strerror(errno));
        if (m->ev_wake)
            event_free(m->ev_wake);
        if (m->efd >= 0)
            close(m->efd);
        free(m);
        return -1;
    }
    ax_conf_topic(&svc->conf, "dispatch", m->prefix, sizeof m->prefix);
    ax_conf_topic(&svc->conf, "executor", group, sizeof group);
    m->rk = ax_kafka_consumer_new(&svc->conf, group, "ax-trigger-lag", err, sizeof err);
    if (!m->rk) {
        ax_error("lag monitor: %s", err);
        event_free(m->ev_wake);
        close(m->efd);
        free(m);
        return -1;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    if (pthread_create(&m->thr, NULL, monitor, m) != 0) {
        rd_kafka_destroy(m->rk);
        event_free(m->ev_wake);
        close(m->efd);
        free(m);
        return -1;
    }
    m->started = 1;
    t->lag = m;
    /* Until the first sample, the lanes keep the state the last leader
     * stored, so a restart does not release a deferred backlog at once. */
    ax_lane_status_t v[AX_PRIORITIES];
    size_t n = 0;
    if (ax_store_lane_status_load(svc->pg, svc->conf.topic_prefix, v, &n, err, sizeof err) == 0) {
        for (size_t i = 0; i < n; i++)
            if (v[i].lane > 0 && v[i].lane < AX_PRIORITIES) {
                t->lanes[v[i].lane].lag = v[i].lag;
                t->lanes[v[i].lane].over = v[i].over;
            }
        ax_lane_plan(t->lanes, svc->conf.trigger_aging_ms, t->lane_min_age_ms, t->lane_target);
    }
    return 0;
}

void lag_stop(trigger_t *t) {
    struct lagmon *m = t->lag;
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (m->started)
        pthread_join(m->thr, NULL);
    rd_kafka_consumer_close(m->rk);
    rd_kafka_destroy(m->rk);
    event_free(m->ev_wake);
    close(m->efd);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
    t->lag = NULL;
}

/* The backlog-age alert: a lane whose lag + deferred stays above
 * trigger.backlog.alert.depth for trigger.backlog.alert.ms. */
static void depth_alert(trigger_t *t, struct lagmon *m, int64_t now) {
    ax_svc_t *svc = &t->svc;
    int64_t depth_max = svc->conf.trigger_backlog_alert_depth;
    for (int l = 0; depth_max > 0 && l < AX_PRIORITIES; l++) {
        int64_t depth = t->lanes[l].lag + t->deferred[l];
        if (depth <= depth_max) {
            m->depth_since_ms[l] = 0;
            m->depth_alerted[l] = 0;
            continue;
        }
        if (!m->depth_since_ms[l])
            m->depth_since_ms[l] = now;
        if (!m->depth_alerted[l] && now - m->depth_since_ms[l] >= svc->conf.trigger_backlog_alert_ms) {
            char text[300];
            snprintf(text, sizeof text,
                     "lane P%d backlog %lld (lag %lld, deferred %lld) above %lld for %lld ms", l,
                     (long long)depth, (long long)t->lanes[l].lag, (long long)t->deferred[l],
                     (long long)depth_max, (long long)(now - m->depth_since_ms[l]));
            alert_raise(svc->pg, "backlog_age", NULL, text);
            m->depth_alerted[l] = 1;
        }
    }
}

/* lane_status and the deferred counts; the backlog-age alert. */
#define DEFERRED_COUNT_MAX 10000
static void store_status(trigger_t *t, struct lagmon *m, int64_t now) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    ax_lane_status_t v[AX_PRIORITIES];
    for (int p = 0; p < AX_PRIORITIES; p++)
        v[p] = (ax_lane_status_t){.lane = p, .lag = t->lanes[p].lag, .over = t->lanes[p].over,
                                  .changed_ms = t->lanes[p].changed_ms};
    int64_t cap = svc->conf.trigger_backlog_alert_depth < DEFERRED_COUNT_MAX
                      ? DEFERRED_COUNT_MAX
                      : svc->conf.trigger_backlog_alert_depth + 1;
    if (ax_store_lane_status_save(svc->pg, svc->conf.topic_prefix, v, AX_PRIORITIES, cap, err,
                                  sizeof err) < 0)
        ax_warn("lane status: %s", err);
    else
        for (int p = 0; p < AX_PRIORITIES; p++)
            t->deferred[p] = v[p].deferred;
    depth_alert(t, m, now);
}

int64_t lane_room(const trigger_t *t, int lane) {
    if (lane <= 0 || lane >= AX_PRIORITIES || t->lag_ok <= 0)
        return INT64_MAX / 4;
    int64_t room = t->svc.conf.trigger_lag_high - t->lanes[lane].lag - t->lane_sent[lane];
    return room > 0 ? room : 0;
}

void lane_direct(const trigger_t *t, int direct[AX_PRIORITIES]) {
    for (int p = 0; p < AX_PRIORITIES; p++)
        direct[p] = p == 0 || (t->lane_min_age_ms[p] == 0 && t->deferred[p] == 0 &&
                               lane_room(t, p) >= t->svc.conf.trigger_batch);
}

/* The monitor samples every fast_ms while `pressed` (told at once when it
 * starts), else every interval. */
static void set_pressed(struct lagmon *m, int pressed) {
    if (pressed == m->pressed) /* only the loop writes it */
        return;
    pthread_mutex_lock(&m->mu);
    m->pressed = pressed;
    if (pressed) {
        m->nudge = 1; /* told at once when it starts */
        pthread_cond_signal(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
}

void lag_note_sent(trigger_t *t) {
    struct lagmon *m = t->lag;
    if (!m || !lead_active(t) || t->lag_ok <= 0)
        return;
    for (int p = 1; p < AX_PRIORITIES; p++) {
        if (t->lane_sent[p] <= 0 || lane_room(t, p) >= 2 * t->svc.conf.trigger_batch)
            continue;
        pthread_mutex_lock(&m->mu);
        if (!m->nudge) {
            m->nudge = 1;
            pthread_cond_signal(&m->cv);
        }
        pthread_mutex_unlock(&m->mu);
        return;
    }
}

int lag_tick(trigger_t *t) {
    struct lagmon *m = t->lag;
    ax_svc_t *svc = &t->svc;
    if (!m)
        return 0;
    if (!lead_active(t)) { /* a standby holds nothing back: the slow pace */
        t->room_starved = 0;
        set_pressed(m, 0);
        return 0;
    }
    int rescan = 0;
    int64_t now = ax_mono_ms();
    int64_t lag[AX_PRIORITIES];
    uint64_t seq;
    int failures;
    char err[256];
    pthread_mutex_lock(&m->mu);
    memcpy(lag, m->lag, sizeof lag);
    seq = m->seq;
    failures = m->failures;
    memcpy(t->lag_samples, m->samples, sizeof t->lag_samples);
    snprintf(err, sizeof err, "%s", m->err);
    pthread_mutex_unlock(&m->mu);
    if (seq != m->seen_seq) {
        m->seen_seq = seq;
        int changed = 0;
        if (failures == 0) {
            t->lag_ok = 1;
            memset(t->lane_sent, 0, sizeof t->lane_sent); /* the sample includes them */
            for (int p = 0; p < AX_PRIORITIES; p++) {
                if (ax_lane_sample(&t->lanes[p], p == 0 ? 0 : lag[p], svc->conf.trigger_lag_high,
                                   svc->conf.trigger_lag_low, ax_now_ms())) {
                    changed = 1;
                    ax_info("lane P%d %s: lag %lld (high %lld, low %lld)", p,
                            t->lanes[p].over ? "over its high mark, deferring"
                                             : "back under its low mark, releasing",
                            (long long)lag[p], (long long)svc->conf.trigger_lag_high,
                            (long long)svc->conf.trigger_lag_low);
                }
                if (p == 0)
                    t->lanes[0].lag = lag[0]; /* P0 is never deferred; its lag is shown */
            }
        } else if (failures >= 3 && t->lag_ok >= 0) {
            ax_warn("lag monitor: %s; releasing every lane until it works again", err);
            t->lag_ok = -1; /* told once; -1: failing */
            for (int p = 0; p < AX_PRIORITIES; p++)
                if (t->lanes[p].over) {
                    t->lanes[p].over = 0;
                    t->lanes[p].changed_ms = ax_now_ms();
                    changed = 1;
                }
        }
        if (changed) {
            ax_lane_plan(t->lanes, svc->conf.trigger_aging_ms, t->lane_min_age_ms,
                         t->lane_target);
            rescan = 1;
        }
        /* due work waited for room: this sample may have some */
        if (t->room_starved)
            rescan = 1;
    }
    if (now - m->last_status_ms >= 1000) {
        m->last_status_ms = now;
        store_status(t, m, now);
        backlog_enforce(t);
        /* aged instances become releasable without a lane change */
        for (int p = 1; p < AX_PRIORITIES; p++)
            if (t->deferred[p] && t->lane_min_age_ms[p] > 0 && t->lane_min_age_ms[p] != INT64_MAX)
                rescan = 1;
    }
    /* held back: sample faster */
    int pressed = t->room_starved;
    for (int p = 1; p < AX_PRIORITIES; p++)
        if (t->lanes[p].over || t->deferred[p])
            pressed = 1;
    set_pressed(m, pressed);
    return rescan;
}
