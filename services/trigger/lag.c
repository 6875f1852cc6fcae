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
 * disturbs the executors. The loop picks each sample up (lag_tick) and,
 * while this trigger leads:
 *
 *   - feeds the hysteresis of each lane (ax_lane_sample) and recomputes the
 *     release plan (ax_lane_plan) the due scan and the fire path follow;
 *   - about once a second stores lag, state and deferred count per lane in
 *     lane_status (axctl status), and raises the backlog-age alert;
 *   - fails the newest instances of jobs beyond their backlog cap: an
 *     attempt with error class backlog_full goes to the callback topic in a
 *     Kafka transaction, and ax-callback finishes them (FAILED, result,
 *     dead letter, alert) like any other final failure.
 *
 * A lag sample that fails (broker down) keeps the last plan; after three
 * failed intervals in a row every lane counts as not over, so an outage
 * of the monitor never holds work back for good.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ax/alert.h"
#include "ax/codec.h"
#include "ax/kafka.h"
#include "ax/log.h"
#include "ax/pg.h"
#include "trigger.h"

#define MAX_TOPICS 256

struct lagmon {
    trigger_t *t;
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, started;
    rd_kafka_t *rk;
    char prefix[256]; /* <topic.prefix>dispatch */
    int64_t interval_ms;
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

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The lane of a dispatch topic name, or -1 when it is not one of ours. */
static int topic_lane(const char *prefix, const char *name) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0)
        return -1;
    const char *rest = name + n;
    if (*rest != '\0' && *rest != '.')
        return -1;
    size_t rl = strlen(rest);
    if (rl >= 3 && rest[rl - 3] == '.' && rest[rl - 2] == 'p' && rest[rl - 1] >= '0' &&
        rest[rl - 1] < '0' + AX_PRIORITIES)
        return rest[rl - 1] - '0';
    return AX_PRIORITY_DEFAULT;
}

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
        int lane = topic_lane(m->prefix, md->topics[i].topic);
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
            int lane = topic_lane(m->prefix, parts->elems[i].topic);
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
        pthread_mutex_unlock(&m->mu);
        char err[256] = "";
        int64_t now = mono_ms();
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
        if (rc == 0) {
            memcpy(m->lag, lag, sizeof lag);
            m->failures = 0;
        } else {
            m->failures++;
            snprintf(m->err, sizeof m->err, "%s", err);
        }
        m->seq++;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + m->interval_ms % 1000 * 1000000;
        ts.tv_sec += m->interval_ms / 1000 + ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        if (!m->stop)
            pthread_cond_timedwait(&m->cv, &m->mu, &ts);
    }
    pthread_mutex_unlock(&m->mu);
    if (parts)
        rd_kafka_topic_partition_list_destroy(parts);
    return NULL;
}

int lag_start(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    char err[512], group[300];
    struct lagmon *m = calloc(1, sizeof *m);
    if (!m)
        return -1;
    m->t = t;
    m->interval_ms = svc->conf.trigger_lag_interval_ms;
    ax_conf_topic(&svc->conf, "dispatch", m->prefix, sizeof m->prefix);
    ax_conf_topic(&svc->conf, "executor", group, sizeof group);
    m->rk = ax_kafka_consumer_new(&svc->conf, group, "ax-trigger-lag", err, sizeof err);
    if (!m->rk) {
        ax_error("lag monitor: %s", err);
        free(m);
        return -1;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    if (pthread_create(&m->thr, NULL, monitor, m) != 0) {
        rd_kafka_destroy(m->rk);
        free(m);
        return -1;
    }
    m->started = 1;
    t->lag = m;
    /* Until the first sample, the lanes keep the state the last leader
     * stored, so a restart does not release a deferred backlog at once. */
    PGresult *r = NULL;
    const char *p[] = {svc->conf.topic_prefix};
    if (ax_pg_exec(svc->pg,
                   "SELECT lane, lag, over FROM lane_status WHERE deployment = $1"
                   " AND updated_at > now() - interval '1 minute'",
                   1, p, NULL, NULL, &r, err, sizeof err) == 0) {
        for (int i = 0; i < PQntuples(r); i++) {
            int lane = (int)ax_pg_int(r, i, 0);
            if (lane > 0 && lane < AX_PRIORITIES) {
                t->lanes[lane].lag = ax_pg_int(r, i, 1);
                t->lanes[lane].over = strcmp(PQgetvalue(r, i, 2), "t") == 0;
            }
        }
        PQclear(r);
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
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
    t->lag = NULL;
}

/* lane_status and the deferred counts; the backlog-age alert. */
#define DEFERRED_COUNT_MAX 10000
static void store_status(trigger_t *t, struct lagmon *m, int64_t now) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    ax_strbuf_t lanes = {0}, lags = {0}, overs = {0}, changed = {0};
    ax_pgarr_begin(&lanes);
    ax_pgarr_begin(&lags);
    ax_pgarr_begin(&overs);
    ax_pgarr_begin(&changed);
    for (int p = 0; p < AX_PRIORITIES; p++) {
        ax_pgarr_int(&lanes, p);
        ax_pgarr_int(&lags, t->lanes[p].lag);
        ax_pgarr_int(&overs, t->lanes[p].over);
        ax_pgarr_int(&changed, t->lanes[p].changed_ms ? t->lanes[p].changed_ms : -1);
    }
    ax_pgarr_end(&lanes);
    ax_pgarr_end(&lags);
    ax_pgarr_end(&overs);
    ax_pgarr_end(&changed);
    char cap[32];
    snprintf(cap, sizeof cap, "%lld",
             (long long)(svc->conf.trigger_backlog_alert_depth < DEFERRED_COUNT_MAX
                             ? DEFERRED_COUNT_MAX
                             : svc->conf.trigger_backlog_alert_depth + 1));
    const char *p[] = {svc->conf.topic_prefix, lanes.s, lags.s, overs.s, changed.s, cap};
    PGresult *r = NULL;
    if (ax_pg_exec(svc->pg,
                   /* per lane through job_instance_deferred, counted up to
                    * $6 (a count of 1M deferred rows every second would
                    * hold the loop: BENCHMARKS.md, the burst) */
                   "WITH d AS (SELECT l.lane, (SELECT count(*) FROM (SELECT 1 FROM job_instance"
                   "  WHERE state = 'SCHEDULED' AND dispatched_at IS NULL AND priority = l.lane"
                   "  AND deferred_at IS NOT NULL AND deployment = $1 LIMIT $6) c) AS n"
                   "  FROM generate_series(0, 4) AS l(lane)),"
                   " v AS (SELECT * FROM unnest($2::int[], $3::bigint[], $4::int[], $5::bigint[])"
                   "  AS v(lane, lag, over, changed))"
                   " INSERT INTO lane_status AS s (deployment, lane, lag, over, deferred,"
                   "  changed_at, updated_at)"
                   " SELECT $1, v.lane, v.lag, v.over = 1, coalesce(d.n, 0),"
                   "  CASE WHEN v.changed > 0 THEN to_timestamp(v.changed / 1000.0) END, now()"
                   " FROM v LEFT JOIN d USING (lane)"
                   " ON CONFLICT (deployment, lane) DO UPDATE SET lag = excluded.lag,"
                   "  over = excluded.over, deferred = excluded.deferred,"
                   "  changed_at = coalesce(excluded.changed_at, s.changed_at),"
                   "  updated_at = excluded.updated_at"
                   " RETURNING lane, deferred",
                   6, p, NULL, NULL, &r, err, sizeof err) < 0) {
        ax_warn("lane status: %s", err);
    } else {
        for (int i = 0; i < PQntuples(r); i++) {
            int lane = (int)ax_pg_int(r, i, 0);
            if (lane >= 0 && lane < AX_PRIORITIES)
                t->deferred[lane] = ax_pg_int(r, i, 1);
        }
    }
    PQclear(r);
    ax_strbuf_free(&lanes);
    ax_strbuf_free(&lags);
    ax_strbuf_free(&overs);
    ax_strbuf_free(&changed);

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

/* Fail the newest SCHEDULED instances of jobs beyond their backlog cap. */
static void enforce_backlog_caps(trigger_t *t, struct lagmon *m) {
    ax_svc_t *svc = &t->svc;
    char err[512];
    const char *p[] = {svc->conf.topic_prefix};
    PGresult *r = NULL;
    /* marked backlog_full at once, so the next tick does not report them
     * again while ax-callback catches up; the due scan skips them */
    int rc = ax_pg_begin(svc->pg, err, sizeof err);
    if (rc == 0)
        rc = lead_check_in_tx(t, err, sizeof err);
    /* the newest beyond each cap get marked; marks older than 5 s whose
     * instance is still SCHEDULED are announced again (their attempt may
     * never have reached the callback topic; a duplicate is stale there) */
    if (rc == 0)
        rc = ax_pg_exec(svc->pg,
                        "WITH o AS (SELECT i.id, j.name, j.backlog_max FROM job j"
                        "  CROSS JOIN LATERAL (SELECT id FROM job_instance"
                        "   WHERE job_id = j.id AND state = 'SCHEDULED'"
                        "   AND error_class IS DISTINCT FROM 'backlog_full'"
                        "   ORDER BY id OFFSET j.backlog_max LIMIT 1000) i"
                        "  WHERE j.backlog_max IS NOT NULL AND j.deployment = $1),"
                        " m AS (UPDATE job_instance i SET error_class = 'backlog_full',"
                        "  capped_at = now() FROM o"
                        "  WHERE i.id = o.id AND i.state = 'SCHEDULED'"
                        "  RETURNING i.id, i.attempt, i.trace_id, o.name, o.backlog_max),"
                        " again AS (UPDATE job_instance i SET capped_at = now() FROM job j"
                        "  WHERE j.id = i.job_id AND j.deployment = $1 AND j.backlog_max IS NOT NULL"
                        "  AND i.job_id = j.id AND i.state = 'SCHEDULED'"
                        "  AND i.error_class = 'backlog_full'"
                        "  AND i.capped_at < now() - interval '5 seconds'"
                        "  RETURNING i.id, i.attempt, i.trace_id, j.name, j.backlog_max)"
                        " SELECT * FROM m UNION ALL SELECT * FROM again",
                        1, p, NULL, NULL, &r, err, sizeof err);
    if (lead_tx_finish(t, rc, "backlog caps", err, sizeof err) < 0) {
        PQclear(r);
        return;
    }
    int rows = PQntuples(r);
    if (rows && lead_txn_begin(t) == 0) {
        int64_t now = ax_now_ms();
        for (int i = 0; i < rows; i++) {
            char reason[300];
            snprintf(reason, sizeof reason, "backlog full: job %s holds more than %s waiting",
                     PQgetvalue(r, i, 3), PQgetvalue(r, i, 4));
            ax_attempt_t a = {
                .instance_id = ax_pg_int(r, i, 0),
                .attempt = (int32_t)ax_pg_int(r, i, 1),
                .worker = "ax-trigger",
                .outcome = AX_OUTCOME_FAILED,
                .error_class = "backlog_full",
                .error = reason,
                .output = "",
                .started_at_ms = now,
                .finished_at_ms = now,
                .trace_id = PQgetvalue(r, i, 2),
                .retryable = 0,
            };
            if (produce_attempt(t, &a, err, sizeof err) < 0)
                ax_warn("%s", err); /* announced again in 5 s (capped_at) */
        }
        if (lead_txn_commit(t) == 0) {
            ax_warn("%d instance(s) beyond their job's backlog cap failed (backlog_full)", rows);
        } /* else: announced again in 5 s (capped_at) */
    }
    PQclear(r);
}

void lag_tick(trigger_t *t) {
    struct lagmon *m = t->lag;
    ax_svc_t *svc = &t->svc;
    if (!m || !lead_active(t))
        return;
    int64_t now = mono_ms();
    int64_t lag[AX_PRIORITIES];
    uint64_t seq;
    int failures;
    char err[256];
    pthread_mutex_lock(&m->mu);
    memcpy(lag, m->lag, sizeof lag);
    seq = m->seq;
    failures = m->failures;
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
            arm_scan(t, 0);
        }
    }
    if (now - m->last_status_ms >= 1000) {
        m->last_status_ms = now;
        store_status(t, m, now);
        enforce_backlog_caps(t, m);
        /* aged instances become releasable without a lane change */
        for (int p = 1; p < AX_PRIORITIES; p++)
            if (t->deferred[p] && t->lane_min_age_ms[p] > 0 && t->lane_min_age_ms[p] != INT64_MAX)
                arm_scan(t, 0);
    }
}
