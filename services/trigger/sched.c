/*
 * sched.c — the leader's schedules: every enabled job with a schedule sits
 * on the timing wheel at its next nominal fire time (the trigger's clock,
 * epoch ms). When it fires, every nominal time due up to now is decided —
 * fired, or skipped by the misfire policy — and the decisions of the whole
 * wheel run are flushed in batches: one PostgreSQL transaction (epoch
 * check, overlap, ledger rows + instances in one statement) and one Kafka
 * transaction, then the instances are marked dispatched. A flow job's fire
 * (job.flow_id) starts a flow run in that statement instead of an instance.
 *
 * Where the next fire comes from (the same rule `axctl job next` uses):
 * the first nominal time strictly after max(last ledger time of the job,
 * schedule_from - 1 ms). So a restart or a new leader resumes exactly after
 * what is in the ledger, and the ledger's primary key (job, nominal time)
 * makes a second decision about the same time a no-op.
 */
#include <stdio.h>
#include <stdlib.h>
#include <malloc.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "ax/common.h"
#include "ax/log.h"
#include "ax/store_circuit.h"
#include "trigger.h"

enum { MISFIRE_FIRE_ONCE, MISFIRE_SKIP, MISFIRE_CATCH_UP };
enum { OVERLAP_ALLOW, OVERLAP_SKIP, OVERLAP_QUEUE, OVERLAP_CANCEL };

struct sjob {
    ax_wheel_entry_t e;   /* first: wheel callbacks get this */
    sjob_t *hnext;
    int64_t id;
    int64_t version;
    ax_schedule_t sched;
    int64_t next_ms;      /* armed nominal time */
    int64_t threshold_ms;
    int64_t wait_instance; /* fixed_delay: waiting for this instance to finish */
    int32_t catchup_max;
    uint8_t misfire, overlap;
    uint8_t next_flags;
    uint8_t pending_fd;   /* fixed_delay: a fire of this job is in t->fires */
    uint8_t flow;         /* job.flow_id: a fire starts a flow run, no instance */
    uint8_t priority;     /* 0..4: its lane */
    int32_t tolerance_ms; /* mixed precision: how late a fire may be coalesced */
};

static trigger_t *g_t; /* wheel callbacks carry no argument */

/* ---- the job table ---------------------------------------------------------- */

static size_t hslot(const trigger_t *t, int64_t id) {
    uint64_t h = (uint64_t)id * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & (t->nbuckets - 1);
}

static sjob_t *job_find(trigger_t *t, int64_t id) {
    for (sjob_t *j = t->buckets[hslot(t, id)]; j; j = j->hnext)
        if (j->id == id)
            return j;
    return NULL;
}

static int job_table_grow(trigger_t *t) {
    size_t n = t->nbuckets * 2;
    sjob_t **b = calloc(n, sizeof *b);
    if (!b)
        return AX_ERR_NOMEM;
    sjob_t **old = t->buckets;
    size_t oldn = t->nbuckets;
    t->buckets = b;
    t->nbuckets = n;
    for (size_t i = 0; i < oldn; i++)
        for (sjob_t *j = old[i], *nx; j; j = nx) {
            nx = j->hnext;
            size_t s = hslot(t, j->id);
            j->hnext = b[s];
            b[s] = j;
        }
    free(old);
    return 0;
}

static void job_free(trigger_t *t, sjob_t *j) {
    if (j->sched.kind == AX_SCHED_FIXED_DELAY)
        t->nfixed_delay--;
    ax_wheel_unlink(&j->e);
    ax_schedule_clear(&j->sched);
    free(j);
}

static void job_remove(trigger_t *t, int64_t id) {
    for (sjob_t **pp = &t->buckets[hslot(t, id)]; *pp; pp = &(*pp)->hnext)
        if ((*pp)->id == id) {
            sjob_t *j = *pp;
            *pp = j->hnext;
            job_free(t, j);
            t->njobs--;
            return;
        }
}

static void jobs_clear(trigger_t *t) {
    for (size_t i = 0; i < t->nbuckets; i++) {
        for (sjob_t *j = t->buckets[i], *nx; j; j = nx) {
            nx = j->hnext;
            job_free(t, j);
        }
        t->buckets[i] = NULL;
    }
    t->njobs = 0;
}

/* ---- fire decisions ----------------------------------------------------------- */

static int fires_push(trigger_t *t, int64_t job_id, int64_t nominal, const char *decision,
                      char *detail) {
    if (t->nfires == t->capfires) {
        size_t n = t->capfires ? t->capfires * 2 : 1024;
        fire_t *f = realloc(t->fires, n * sizeof *f);
        if (!f) {
            free(detail);
            return AX_ERR_NOMEM;
        }
        t->fires = f;
        t->capfires = n;
    }
    t->fires[t->nfires++] = (fire_t){job_id, nominal, decision, detail, 0};
    return 0;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

static void iso_utc(int64_t ms, char *buf, size_t len) {
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static const char *dst_note(int flags) {
    return flags & AX_CRON_SHIFTED ? "; DST: shifted" : flags & AX_CRON_REPEATED ? "; DST: repeated hour" : "";
}

/* Hard cap on schedule steps walked after an outage (a 1-second cron down
 * for 23 days); beyond it the walk jumps to the last hour before now. */
#define WALK_MAX 2000000

/* Mixed precision: a tolerant job's timer is rounded up to the coarse tick
 * (trigger.coalesce.ms) while the trigger is loaded, when that moves it by
 * at most its tolerance and less than half its misfire threshold; tolerant
 * fires then share wheel expiries and fire batches. next_ms stays the
 * nominal time, so the ledger records the schedule's own time. */
static int64_t coalesced(const trigger_t *t, const sjob_t *j, int64_t next) {
    int64_t tick = t->svc.conf.trigger_coalesce_ms;
    if (j->tolerance_ms <= 0 || tick <= 1 || next <= 0)
        return next;
    if (t->svc.conf.trigger_coalesce_load > 0 && t->fire_rate <= t->svc.conf.trigger_coalesce_load)
        return next;
    int64_t at = (next + tick - 1) / tick * tick;
    int64_t room = j->tolerance_ms;
    if (room > j->threshold_ms / 2)
        room = j->threshold_ms / 2;
    return at - next <= room ? at : next;
}

static void arm(trigger_t *t, sjob_t *j, int64_t next, int flags) {
    j->next_ms = next;
    j->next_flags = (uint8_t)flags;
    int64_t at = coalesced(t, j, next);
    if (at != next)
        t->coalesced++;
    ax_wheel_link(t->wheel, &j->e, at < 0 ? 0 : (uint64_t)at);
}

static void on_fire(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now_u) {
    trigger_t *t = g_t;
    sjob_t *j = (sjob_t *)e;
    int64_t now = (int64_t)now_u;
    size_t keep = (size_t)t->svc.conf.trigger_misfire_record_max;
    if ((size_t)j->catchup_max > keep)
        keep = (size_t)j->catchup_max;
    /* The due times, newest `keep` of them in a ring; `older` counts the rest. */
    int64_t one_t[1];
    uint8_t one_f[1];
    int64_t *ring = one_t;
    uint8_t *rflags = one_f;
    size_t cap = 1, n = 0, head = 0;
    int64_t older = 0, older_first = 0, older_last = 0;
    int64_t cur = j->next_ms;
    int cflags = j->next_flags, more = 1, jumped = 0;
    for (int64_t steps = 0; cur <= now; steps++) {
        if (n == cap && cap < keep) {
            size_t nc = cap * 8 < keep ? cap * 8 : keep;
            int64_t *r = malloc(nc * sizeof *r);
            uint8_t *rf = malloc(nc);
            if (!r || !rf) {
                free(r);
                free(rf);
                break;
            }
            for (size_t i = 0; i < n; i++) {
                r[i] = ring[(head + i) % cap];
                rf[i] = rflags[(head + i) % cap];
            }
            if (ring != one_t) {
                free(ring);
                free(rflags);
            }
            ring = r;
            rflags = rf;
            cap = nc;
            head = 0;
        }
        if (n == cap) { /* full: the oldest becomes "older" */
            if (!older)
                older_first = ring[head];
            older_last = ring[head];
            older++;
            ring[head] = cur;
            rflags[head] = (uint8_t)cflags;
            head = (head + 1) % cap;
        } else {
            ring[(head + n) % cap] = cur;
            rflags[(head + n) % cap] = (uint8_t)cflags;
            n++;
        }
        if (j->sched.kind == AX_SCHED_ONCE || j->sched.kind == AX_SCHED_FIXED_DELAY) {
            more = 0;
            break;
        }
        int64_t nx;
        int64_t from = cur;
        if (steps == WALK_MAX && !jumped) {
            jumped = 1;
            from = now - 3600 * 1000 > cur ? now - 3600 * 1000 : cur;
        }
        if (ax_schedule_next(&j->sched, from, &nx, &cflags) < 0) {
            more = 0;
            break;
        }
        cur = nx;
    }
    /* Decide. Index i runs oldest -> newest over the ring. */
    int any_on_time = 0;
    for (size_t i = 0; i < n; i++)
        if (now - ring[(head + i) % cap] <= j->threshold_ms)
            any_on_time = 1;
    size_t late_fired = 0;
    for (size_t k = n; k-- > 0;) { /* newest first to count catch-ups */
        size_t i = (head + k) % cap;
        int64_t nominal = ring[i], late = now - nominal;
        const char *decision;
        char *detail;
        if (late <= j->threshold_ms) {
            decision = "fired";
            detail = late > 1000 || rflags[i] ? fmt("late by %lld ms%s", (long long)late, dst_note(rflags[i])) : NULL;
        } else if (j->misfire == MISFIRE_SKIP) {
            decision = "skipped_misfire";
            detail = fmt("misfire: late by %lld ms > threshold %lld ms; policy skip%s", (long long)late,
                         (long long)j->threshold_ms, dst_note(rflags[i]));
        } else if (j->misfire == MISFIRE_FIRE_ONCE) {
            if (!any_on_time && late_fired == 0) {
                decision = "fired";
                late_fired++;
                detail = fmt("misfire: late by %lld ms > threshold %lld ms; policy fire_once "
                             "runs the latest missed time%s",
                             (long long)late, (long long)j->threshold_ms, dst_note(rflags[i]));
            } else {
                decision = "skipped_misfire";
                detail = fmt("misfire: late by %lld ms; policy fire_once ran a later time only%s",
                             (long long)late, dst_note(rflags[i]));
            }
        } else { /* catch_up */
            if (late_fired < (size_t)j->catchup_max) {
                decision = "fired";
                late_fired++;
                detail = fmt("misfire: late by %lld ms; policy catch_up%s", (long long)late,
                             dst_note(rflags[i]));
            } else {
                decision = "skipped_misfire";
                detail = fmt("misfire: late by %lld ms; policy catch_up runs at most %d missed "
                             "times%s",
                             (long long)late, (int)j->catchup_max, dst_note(rflags[i]));
            }
        }
        if (k == 0 && older) {
            char a[40], b[40];
            iso_utc(older_first, a, sizeof a);
            iso_utc(older_last, b, sizeof b);
            char *d2 = fmt("%s%salso %s%lld earlier fire times from %s through %s skipped "
                           "(misfire), not recorded one by one",
                           detail ? detail : "", detail ? "; " : "", jumped ? "more than " : "",
                           (long long)older, a, b);
            free(detail);
            detail = d2;
        }
        if (strcmp(decision, "fired") == 0)
            t->fired++;
        else
            t->skipped++;
        fires_push(t, j->id, nominal, decision, detail);
    }
    /* fires were pushed newest first; put this job's run in time order */
    for (size_t a = t->nfires - n, b = t->nfires - 1; n && a < b; a++, b--) {
        fire_t x = t->fires[a];
        t->fires[a] = t->fires[b];
        t->fires[b] = x;
    }
    if (ring != one_t) {
        free(ring);
        free(rflags);
    }
    /* Re-arm. */
    if (j->sched.kind == AX_SCHED_FIXED_DELAY) {
        if (n && strcmp(t->fires[t->nfires - 1].decision, "fired") == 0)
            j->pending_fd = 1; /* armed again once that instance finished */
        else
            arm(t, j, now + j->sched.interval_ms, 0);
    } else if (more && j->sched.kind != AX_SCHED_ONCE) {
        arm(t, j, cur, cflags);
    }
}

/* ---- loading jobs ----------------------------------------------------------- */

static const char sql_load[] =
    "SELECT j.id, j.version, j.schedule_kind, j.schedule_expr, j.time_zone, j.dst_gap,"
    "  j.dst_overlap, coalesce(j.interval_ms, 0),"
    "  (extract(epoch FROM coalesce(j.start_at, j.schedule_from)) * 1000)::bigint,"
    "  (extract(epoch FROM j.schedule_from) * 1000)::bigint,"
    "  j.misfire_policy, j.misfire_threshold_ms, j.catchup_max, j.overlap_policy,"
    "  (extract(epoch FROM lf.nominal_time) * 1000)::bigint, lf.instance_id, i.state,"
    "  ceil(extract(epoch FROM i.finished_at) * 1000)::bigint,"
    "  (j.enabled AND j.schedule_kind <> 'none'), j.flow_id IS NOT NULL,"
    "  j.priority, j.tolerance_ms"
    " FROM job j"
    " LEFT JOIN LATERAL (SELECT f.nominal_time, f.instance_id FROM job_fire f"
    "   WHERE f.job_id = j.id ORDER BY f.nominal_time DESC LIMIT 1) lf ON true"
    " LEFT JOIN job_instance i ON i.id = lf.instance_id"
    " WHERE j.deployment = $2"
    "   AND CASE WHEN $1::bigint[] IS NULL THEN j.enabled AND j.schedule_kind <> 'none'"
    "            ELSE j.id = ANY($1::bigint[]) END";

static int pick(const char *v, const char *const *names) {
    for (int i = 0; names[i]; i++)
        if (strcmp(v, names[i]) == 0)
            return i;
    return 0;
}

/* (Re)build job from row i of a sql_load result. */
static void load_row(trigger_t *t, PGresult *r, int i) {
    int64_t id = ax_pg_int(r, i, 0), version = ax_pg_int(r, i, 1);
    sjob_t *j = job_find(t, id);
    if (strcmp(PQgetvalue(r, i, 18), "t") != 0) {
        if (j)
            ax_info("job %lld: no longer scheduled", (long long)id);
        job_remove(t, id);
        return;
    }
    if (j && j->version == version)
        return;
    char err[512];
    ax_schedule_t s;
    ax_dst_policy_t dst = (strcmp(PQgetvalue(r, i, 5), "skip") == 0 ? AX_DST_GAP_SKIP : 0) |
                          (strcmp(PQgetvalue(r, i, 6), "twice") == 0 ? AX_DST_OVERLAP_TWICE : 0);
    int kind = ax_sched_kind_parse(PQgetvalue(r, i, 2));
    if (ax_schedule_init(&s, kind < 0 ? AX_SCHED_NONE : (ax_sched_kind_t)kind,
                         PQgetisnull(r, i, 3) ? NULL : PQgetvalue(r, i, 3), PQgetvalue(r, i, 4),
                         dst, ax_pg_int(r, i, 7), ax_pg_int(r, i, 8), err, sizeof err) < 0) {
        ax_error("job %lld: schedule not usable, not armed: %s", (long long)id, err);
        job_remove(t, id);
        return;
    }
    if (!j) {
        if (t->njobs >= t->nbuckets && job_table_grow(t) < 0) {
            ax_schedule_clear(&s);
            return;
        }
        j = calloc(1, sizeof *j);
        if (!j) {
            ax_schedule_clear(&s);
            return;
        }
        ax_wheel_entry_init(&j->e, on_fire);
        j->id = id;
        size_t b = hslot(t, id);
        j->hnext = t->buckets[b];
        t->buckets[b] = j;
        t->njobs++;
    } else {
        ax_wheel_unlink(&j->e);
        if (j->sched.kind == AX_SCHED_FIXED_DELAY)
            t->nfixed_delay--;
        ax_schedule_clear(&j->sched);
    }
    if (s.kind == AX_SCHED_FIXED_DELAY)
        t->nfixed_delay++;
    static const char *const misfires[] = {"fire_once", "skip", "catch_up", NULL};
    static const char *const overlaps[] = {"allow", "skip", "queue", "cancel", NULL};
    j->version = version;
    j->sched = s;
    j->misfire = (uint8_t)pick(PQgetvalue(r, i, 10), misfires);
    j->threshold_ms = ax_pg_int(r, i, 11);
    j->catchup_max = (int32_t)ax_pg_int(r, i, 12);
    j->overlap = (uint8_t)pick(PQgetvalue(r, i, 13), overlaps);
    j->wait_instance = 0;
    j->pending_fd = 0;
    j->flow = PQgetvalue(r, i, 19)[0] == 't';
    j->priority = (uint8_t)ax_pg_int(r, i, 20);
    if (j->priority >= AX_PRIORITIES)
        j->priority = AX_PRIORITY_DEFAULT;
    j->tolerance_ms = (int32_t)ax_pg_int(r, i, 21);
    int64_t from = ax_pg_int(r, i, 9);
    int has_last = !PQgetisnull(r, i, 14);
    int64_t last = ax_pg_int(r, i, 14);
    int64_t next;
    int flags = 0;
    switch (s.kind) {
    case AX_SCHED_ONCE:
        if (has_last)
            return; /* decided already */
        arm(t, j, s.anchor_ms, 0);
        return;
    case AX_SCHED_FIXED_DELAY:
        if (!has_last || last < from) {
            arm(t, j, s.anchor_ms > from ? s.anchor_ms : from, 0);
        } else if (PQgetisnull(r, i, 15)) {
            arm(t, j, last + s.interval_ms, 0); /* last one was skipped */
        } else if (strcmp(PQgetvalue(r, i, 16), "FINISHED") == 0) {
            arm(t, j, ax_pg_int(r, i, 17) + s.interval_ms, 0);
        } else {
            j->wait_instance = ax_pg_int(r, i, 15);
        }
        return;
    default:
        break;
    }
    int64_t after = from - 1;
    if (has_last && last > after)
        after = last;
    if (ax_schedule_next(&s, after, &next, &flags) == 0)
        arm(t, j, next, flags);
    else
        ax_info("job %lld: the schedule has no further fire time", (long long)id);
}

/* Load all scheduled jobs (ids == NULL) or the listed ones. */
static int load_jobs(trigger_t *t, const char *ids) {
    char err[1024];
    const char *p[] = {ids, t->svc.conf.topic_prefix};
    PGresult *r;
    int64_t t0 = ax_mono_ms();
    int rc = ax_pg_exec(t->svc.pg, sql_load, 2, p, NULL, NULL, &r, err, sizeof err);
    if (rc < 0) {
        ax_warn("loading jobs: %s", err);
        return rc;
    }
    int rows = PQntuples(r);
    for (int i = 0; i < rows; i++)
        load_row(t, r, i);
    PQclear(r);
    if (!ids) {
        /* the result of a 100,000-row load is freed but kept by malloc:
         * give it back (RSS 80 MB -> 37 MB with 100,000 cron jobs) */
        malloc_trim(0);
        ax_info("%zu scheduled job(s) armed in %lld ms", t->njobs, (long long)(ax_mono_ms() - t0));
    }
    return rows;
}

/* ---- flushing decisions ------------------------------------------------------ */

/* Ledger rows and instances in one statement: the ledger's primary key
 * decides; an instance exists only for a ledger row this statement wrote.
 * A fired time of a flow job ($8: 1) gets no instance but a flow run id in
 * its ledger row; the row's AFTER INSERT trigger (job_fire_flow,
 * infra/migrations/008_flow_schedule.sql) starts that run in this statement,
 * and only for a row actually written. */
static const char sql_fire[] =
    "WITH f AS ("
    "  SELECT f.job_id, to_timestamp(f.ms / 1000.0) AS nominal, f.decision::ax_fire_decision AS"
    "    decision, f.detail, f.wait_for,"
    "    CASE WHEN f.decision IN ('fired', 'queued', 'deferred') AND f.flow = 0"
    "         THEN nextval('job_instance_id_seq') END AS iid,"
    "    CASE WHEN f.decision = 'fired' AND f.flow = 1 THEN nextval('flow_run_id_seq') END AS rid"
    "  FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $8::int[])"
    "    AS f(job_id, ms, decision, detail, wait_for, flow)"
    "), led AS ("
    "  INSERT INTO job_fire (job_id, nominal_time, decision, instance_id, epoch, detail,"
    "    flow_run_id)"
    "  SELECT job_id, nominal, decision, iid, $6::bigint,"
    "    CASE WHEN rid IS NULL THEN detail"
    "         ELSE concat_ws('; ', 'flow run ' || rid, detail) END, rid"
    "  FROM f ON CONFLICT DO NOTHING RETURNING job_id, nominal_time, instance_id"
    "), ins AS ("
    "  INSERT INTO job_instance (id, job_id, job_name, handler_kind, command, payload,"
    "    timeout_ms, priority, nominal_time, due_at, trace_id, idempotency_key, wait_for,"
    "    deployment, executor_group, routing_field, dispatched_at, shard_mode, deferred_at)"
    "  SELECT led.instance_id, j.id, j.name, j.handler_kind, j.command, j.payload, j.timeout_ms,"
    "    j.priority, led.nominal_time, led.nominal_time,"
    "    replace(gen_random_uuid()::text, '-', ''),"
    "    j.name || '@' || (extract(epoch FROM led.nominal_time) * 1000)::bigint, f.wait_for, $7,"
    "    j.executor_group, j.routing_key,"
    "    CASE WHEN f.wait_for IS NULL AND j.shard_count IS NULL"
    "         AND f.decision <> 'deferred' THEN now() END,"
    "    CASE WHEN j.shard_count IS NOT NULL THEN 'static'"
    "         WHEN j.shard_base IS NOT NULL THEN 'probe' END,"
    /* its lane defers: kept SCHEDULED for the due scan to release */
    "    CASE WHEN f.decision = 'deferred' THEN now() END"
    "  FROM led JOIN job j ON j.id = led.job_id JOIN f ON f.iid = led.instance_id"
    "  WHERE led.instance_id IS NOT NULL"
    "  RETURNING " DISPATCH_COLS ", wait_for, job_id,"
    /* held back: queued behind a running instance, or a static shard
     * parent (the due scan splits it) */
    "    CASE WHEN wait_for IS NULL AND shard_mode IS DISTINCT FROM 'static'"
    "         AND deferred_at IS NULL THEN NULL ELSE 1 END AS hold"
    "), pend AS ("
    "  INSERT INTO dispatch_pending (instance_id, epoch, deployment)"
    "  SELECT id, $6::bigint, $7 FROM ins WHERE hold IS NULL"
    ")"
    " SELECT * FROM ins";

/* Circuit breaker: a job whose circuit is open has its fires recorded as
 * skipped_circuit; once the cool-down passed, one fire runs as the probe
 * (the circuit goes half-open; ax-callback closes it on success or opens it
 * again on failure), and fires meanwhile are skipped. ax_circuit_on_fire()
 * (ax/circuit.h) decides; the store reads and writes the circuit. */
static int apply_circuit(trigger_t *t, fire_t *f, size_t n, char *err, size_t errlen) {
    int64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "circuit: out of memory");
    for (size_t i = 0; i < n; i++)
        ids[i] = f[i].job_id;
    ax_circuit_row_t *rows = NULL;
    size_t nrows = 0;
    int rc = ax_store_circuit_load(t->svc.pg, ids, n, &rows, &nrows, err, errlen);
    free(ids);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n && nrows; i++) {
        if (strcmp(f[i].decision, "fired") != 0)
            continue;
        ax_circuit_row_t *c = NULL;
        for (size_t k = 0; k < nrows && !c; k++)
            if (rows[k].job_id == f[i].job_id)
                c = &rows[k];
        if (!c)
            continue;
        char *old = f[i].detail;
        if (ax_circuit_on_fire(&c->circuit, c->now_ms) == AX_CIRCUIT_FIRE_PROBE) {
            rc = ax_store_circuit_half_open(t->svc.pg, f[i].job_id, err, errlen);
            if (rc < 0)
                break;
            f[i].detail = fmt("circuit half-open: this run is the probe%s%s", old ? "; " : "",
                              old ? old : "");
            ax_info("job %lld: circuit cool-down over; probing", (long long)f[i].job_id);
            /* the rest of the batch is skipped: the circuit is half-open now */
        } else {
            f[i].decision = "skipped_circuit";
            f[i].detail = fmt("circuit %s since %s after %lld consecutive failures%s%s",
                              ax_circuit_state_name(c->stored), c->opened_at,
                              (long long)c->circuit.consecutive_failures, old ? "; " : "",
                              old ? old : "");
            t->fired--;
            t->skipped++;
        }
        free(old);
    }
    free(rows);
    return rc;
}

/* Overlap: for jobs that do not allow parallel runs, look at their
 * unfinished instances and turn "fired" into skipped/queued/cancel. */
static int apply_overlap(trigger_t *t, fire_t *f, size_t n, char *err, size_t errlen) {
    ax_strbuf_t ids = {0}, cancel = {0};
    ax_pgarr_begin(&ids);
    ax_pgarr_begin(&cancel);
    int any = 0, ncancel = 0, rc = 0;
    for (size_t i = 0; i < n; i++) {
        sjob_t *j = job_find(t, f[i].job_id);
        if (j && j->overlap != OVERLAP_ALLOW && strcmp(f[i].decision, "fired") == 0) {
            ax_pgarr_int(&ids, f[i].job_id);
            any = 1;
        }
    }
    ax_pgarr_end(&ids);
    if (!any)
        goto out;
    const char *p[] = {ids.s};
    PGresult *r;
    rc = ax_pg_exec(t->svc.pg,
                    "SELECT job_id, max(id), string_agg(id || ' ' || state, ', ' ORDER BY id),"
                    "  bool_or(wait_for IS NOT NULL AND state = 'SCHEDULED')"
                    " FROM job_instance WHERE job_id = ANY($1::bigint[]) AND state <> 'FINISHED'"
                    " GROUP BY job_id"
                    /* a flow job (no instances): its flow's running runs */
                    " UNION ALL SELECT j.id, max(fr.id),"
                    "  string_agg('flow run ' || fr.id || ' running', ', ' ORDER BY fr.id), false"
                    " FROM job j JOIN flow_run fr"
                    "  ON fr.flow_id = j.flow_id AND fr.state = 'running'"
                    " WHERE j.id = ANY($1::bigint[]) GROUP BY j.id",
                    1, p, NULL, NULL, &r, err, errlen);
    if (rc < 0)
        goto out;
    int rows = PQntuples(r);
    /* busy[job]: 0 idle, 1 running (or fired earlier in this batch) */
    for (size_t i = 0; i < n; i++) {
        sjob_t *j = job_find(t, f[i].job_id);
        if (!j || j->overlap == OVERLAP_ALLOW || strcmp(f[i].decision, "fired") != 0)
            continue;
        int row = -1;
        for (int k = 0; k < rows; k++)
            if (ax_pg_int(r, k, 0) == f[i].job_id)
                row = k;
        int earlier = 0; /* an earlier fire of this batch already runs */
        for (size_t k = 0; k < i; k++)
            if (f[k].job_id == f[i].job_id &&
                (strcmp(f[k].decision, "fired") == 0 || strcmp(f[k].decision, "queued") == 0))
                earlier = 1;
        if (row < 0 && !earlier)
            continue;
        const char *what = row >= 0 ? PQgetvalue(r, row, 2) : "an earlier fire of this batch";
        char *old = f[i].detail;
        if (j->overlap == OVERLAP_SKIP ||
            (j->overlap == OVERLAP_QUEUE &&
             (earlier || strcmp(PQgetvalue(r, row, 3), "t") == 0))) {
            f[i].decision = "skipped_overlap";
            f[i].detail = fmt("overlap=%s: still unfinished: %s%s%s",
                              j->overlap == OVERLAP_SKIP ? "skip" : "queue (one already queued)",
                              what, old ? "; " : "", old ? old : "");
            t->fired--;
            t->skipped++;
        } else if (j->overlap == OVERLAP_QUEUE) {
            f[i].decision = "queued";
            f[i].wait_for = ax_pg_int(r, row, 1);
            f[i].detail = fmt("overlap=queue: runs after instance %lld finished%s%s",
                              (long long)f[i].wait_for, old ? "; " : "", old ? old : "");
        } else { /* cancel */
            if (row >= 0) {
                ax_pgarr_int(&cancel, f[i].job_id);
                ncancel++;
            }
            f[i].detail = fmt("overlap=cancel: cancelling %s%s%s", what, old ? "; " : "",
                              old ? old : "");
        }
        free(old);
    }
    PQclear(r);
    ax_pgarr_end(&cancel);
    if (ncancel) {
        const char *q[] = {cancel.s};
        rc = ax_pg_exec(t->svc.pg,
                        "UPDATE job_instance SET cancel_requested_at = now()"
                        " WHERE job_id = ANY($1::bigint[]) AND state <> 'FINISHED'"
                        " AND cancel_requested_at IS NULL",
                        1, q, NULL, NULL, NULL, err, errlen);
    }
out:
    ax_strbuf_free(&ids);
    ax_strbuf_free(&cancel);
    return rc;
}

static void fires_drop(trigger_t *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(t->fires[i].detail);
    memmove(t->fires, t->fires + n, (t->nfires - n) * sizeof *t->fires);
    t->nfires -= n;
}

/* Record and dispatch up to one batch. Returns fires handled, 0 if none,
 * <0 on error (the fires stay for a retry unless leadership is gone). */
static int flush_batch(trigger_t *t) {
    ax_svc_t *svc = &t->svc;
    size_t n = t->nfires < (size_t)svc->conf.trigger_fire_batch ? t->nfires
                                                                  : (size_t)svc->conf.trigger_fire_batch;
    if (!n)
        return 0;
    if (!lead_active(t))
        return AX_ERR_CONFLICT;
    char err[1024];
    int rc = ax_pg_begin(svc->pg, err, sizeof err);
    if (rc == 0)
        rc = lead_check_in_tx(t, err, sizeof err);
    if (rc == 0)
        rc = apply_circuit(t, t->fires, n, err, sizeof err);
    if (rc == 0)
        rc = apply_overlap(t, t->fires, n, err, sizeof err);
    PGresult *r = NULL;
    if (rc == 0) {
        ax_strbuf_t a[6] = {{0}};
        for (int k = 0; k < 6; k++)
            ax_pgarr_begin(&a[k]);
        for (size_t i = 0; i < n; i++) {
            fire_t *f = &t->fires[i];
            sjob_t *dj = job_find(t, f->job_id);
            /* backpressure: the job's lane defers (docs/PRIORITIES.md) */
            if (dj && !dj->flow && strcmp(f->decision, "fired") == 0 &&
                t->lane_min_age_ms[dj->priority] != 0) {
                char *old = f->detail;
                f->decision = "deferred";
                f->detail = fmt("lane P%d deferring: lag %lld%s%s", dj->priority,
                                (long long)t->lanes[dj->priority].lag, old ? "; " : "",
                                old ? old : "");
                free(old);
                t->deferred_fires++;
            }
            ax_pgarr_int(&a[0], f->job_id);
            ax_pgarr_int(&a[1], f->nominal_ms);
            ax_pgarr_text(&a[2], f->decision);
            ax_pgarr_text(&a[3], f->detail);
            if (f->wait_for)
                ax_pgarr_int(&a[4], f->wait_for);
            else
                ax_pgarr_text(&a[4], NULL);
            ax_pgarr_int(&a[5], dj && dj->flow);
        }
        for (int k = 0; k < 6; k++)
            ax_pgarr_end(&a[k]);
        char epoch[32];
        snprintf(epoch, sizeof epoch, "%lld", (long long)t->epoch);
        const char *p[] = {a[0].s, a[1].s, a[2].s, a[3].s, a[4].s, epoch, svc->conf.topic_prefix,
                           a[5].s};
        rc = ax_pg_exec(svc->pg, sql_fire, 8, p, NULL, NULL, &r, err, sizeof err);
        for (int k = 0; k < 6; k++)
            ax_strbuf_free(&a[k]);
    }
    if (rc == 0)
        rc = ax_pg_commit(svc->pg, err, sizeof err);
    if (rc < 0) {
        ax_pg_rollback(svc->pg);
        PQclear(r);
        if (rc == AX_ERR_CONFLICT) {
            lead_lost(t, err);
            return rc;
        }
        ax_warn("recording %zu fire(s): %s; will retry", n, err);
        return rc;
    }
    /* Durable: the ledger decided. Fixed-delay jobs now wait for their
     * instance; the rest is dispatch. */
    int rows = PQntuples(r);
    for (int i = 0; i < rows; i++) {
        sjob_t *j = job_find(t, ax_pg_int(r, i, 15));
        if (j && j->sched.kind == AX_SCHED_FIXED_DELAY && j->pending_fd) {
            j->pending_fd = 0;
            j->wait_instance = ax_pg_int(r, i, 0);
        }
    }
    for (size_t i = 0; i < n; i++) { /* fixed-delay fires that were skipped */
        sjob_t *j = job_find(t, t->fires[i].job_id);
        if (j && j->pending_fd && !j->wait_instance) {
            j->pending_fd = 0;
            arm(t, j, lead_now(t) + j->sched.interval_ms, 0);
        }
    }
    fires_drop(t, n);
    if (rows == 0) {
        PQclear(r);
        return (int)n;
    }
    produce_settle(t, r, 16);
    for (int i = 0; i < rows; i++)
        if (!PQgetisnull(r, i, 16) && PQgetisnull(r, i, 14)) {
            arm_scan(t, 0); /* a static shard parent: split it now */
            break;
        }
    PQclear(r);
    return (int)n;
}

/* Flush at most a few batches per turn of the loop, so lease renewal and
 * everything else keep running under a backlog (a drain longer than the
 * lease would lose leadership); the wheel timer continues at once. */
#define FLUSH_BATCHES_PER_TURN 4
static void flush(trigger_t *t) {
    for (int turn = 0; t->nfires; turn++) {
        if (turn == FLUSH_BATCHES_PER_TURN) {
            /* a zero timeout, not event_active: due timers run first */
            event_add(t->ev_wheel, &(struct timeval){0, 0});
            return;
        }
        int rc = flush_batch(t);
        if (rc == AX_ERR_CONFLICT || !t->leader) {
            fires_drop(t, t->nfires); /* the next leader decides these again */
            return;
        }
        if (rc < 0) {
            int64_t ms = ax_backoff_ms(t->flush_failures++, t->svc.conf.backoff_initial_ms,
                                       t->svc.conf.backoff_max_ms);
            struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
            event_add(t->ev_wheel, &tv);
            return;
        }
        t->flush_failures = 0;
    }
}

/* ---- the wheel timer --------------------------------------------------------- */

static void arm_wheel(trigger_t *t) {
    uint64_t d = ax_wheel_next_deadline(t->wheel);
    int64_t now = lead_now(t);
    int64_t ms = d == UINT64_MAX ? 1000 : (int64_t)d - now;
    if (ms > 1000)
        ms = 1000;
    if (ms < 0)
        ms = 0;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(t->ev_wheel, &tv);
}

static void on_wheel(evutil_socket_t fd, short what, void *arg) {
    trigger_t *t = arg;
    if (t->svc.stopping || !lead_active(t))
        return;
    if (t->nfires) { /* a failed flush being retried */
        flush(t);
        if (t->nfires)
            return;
    }
    ax_wheel_run(t->wheel, (uint64_t)lead_now(t));
    flush(t);
    if (t->leader && !t->nfires)
        arm_wheel(t);
}

/* ---- NOTIFY, fixed-delay waits --------------------------------------------- */

static void reload_push(trigger_t *t, int64_t id) {
    if (t->nreload == t->capreload) {
        size_t n = t->capreload ? t->capreload * 2 : 64;
        int64_t *p = realloc(t->reload_ids, n * sizeof *p);
        if (!p) {
            t->reload_all = 1;
            return;
        }
        t->reload_ids = p;
        t->capreload = n;
    }
    t->reload_ids[t->nreload++] = id;
}

void sched_poll_notify(trigger_t *t) {
    if (!t->leader)
        return;
    char err[512];
    if (!t->listening) {
        if (ax_pg_exec(t->svc.pg, "LISTEN ax_job", 0, NULL, NULL, NULL, NULL, err, sizeof err) < 0 ||
            ax_pg_exec(t->svc.pg, "LISTEN ax_due", 0, NULL, NULL, NULL, NULL, err, sizeof err) < 0)
            return;
        t->listening = 1;
    }
    PGconn *c = ax_pg_conn(t->svc.pg);
    if (c && PQconsumeInput(c)) {
        PGnotify *nf;
        while ((nf = PQnotifies(c))) {
            if (strcmp(nf->relname, "ax_due") == 0) {
                /* retries rescheduled by the callback: look at the due scan */
                if (strcmp(nf->extra, t->svc.conf.topic_prefix) == 0)
                    arm_scan(t, 0);
                PQfreemem(nf);
                continue;
            }
            char *end;
            long long id = strtoll(nf->extra, &end, 10);
            if (*end == 0 && id > 0)
                reload_push(t, id);
            PQfreemem(nf);
        }
    }
    if (t->reload_all) {
        t->reload_all = 0;
        t->nreload = 0;
        /* re-read every job: changed versions are re-armed */
        jobs_clear(t);
        ax_wheel_init(t->wheel, (uint64_t)lead_now(t));
        if (load_jobs(t, NULL) < 0)
            t->reload_all = 1;
        arm_wheel(t);
        return;
    }
    while (t->nreload) {
        size_t n = t->nreload < 10000 ? t->nreload : 10000;
        ax_strbuf_t ids = {0};
        ax_pgarr_begin(&ids);
        for (size_t i = 0; i < n; i++)
            ax_pgarr_int(&ids, t->reload_ids[t->nreload - n + i]);
        ax_pgarr_end(&ids);
        int rows = load_jobs(t, ids.s);
        ax_strbuf_free(&ids);
        if (rows < 0)
            break;
        if (rows < (int)n) { /* deleted jobs: drop what the database no longer has */
            ax_strbuf_t all = {0};
            ax_pgarr_begin(&all);
            for (size_t i = 0; i < n; i++)
                ax_pgarr_int(&all, t->reload_ids[t->nreload - n + i]);
            ax_pgarr_end(&all);
            PGresult *r;
            const char *q[] = {all.s, t->svc.conf.topic_prefix};
            if (ax_pg_exec(t->svc.pg, "SELECT x FROM unnest($1::bigint[]) x WHERE NOT EXISTS"
                                      " (SELECT 1 FROM job WHERE id = x AND deployment = $2)",
                           2, q, NULL, NULL, &r, err, sizeof err) == 0) {
                for (int i = 0; i < PQntuples(r); i++) {
                    ax_info("job %lld deleted", (long long)ax_pg_int(r, i, 0));
                    job_remove(t, ax_pg_int(r, i, 0));
                }
                PQclear(r);
            }
            ax_strbuf_free(&all);
        }
        t->nreload -= n;
    }
    arm_wheel(t);
}

/* Fixed-delay jobs waiting for their instance: arm them once it finished. */
static void poll_fixed_delay(trigger_t *t) {
    if (!t->nfixed_delay)
        return; /* no walk over 100,000 cron jobs five times a second */
    ax_strbuf_t ids = {0};
    ax_pgarr_begin(&ids);
    int any = 0;
    for (size_t b = 0; b < t->nbuckets; b++)
        for (sjob_t *j = t->buckets[b]; j; j = j->hnext)
            if (j->wait_instance) {
                ax_pgarr_int(&ids, j->wait_instance);
                any = 1;
            }
    ax_pgarr_end(&ids);
    if (any) {
        char err[512];
        const char *p[] = {ids.s};
        PGresult *r;
        if (ax_pg_exec(t->svc.pg,
                       "SELECT job_id, id, ceil(extract(epoch FROM finished_at) * 1000)::bigint"
                       " FROM job_instance WHERE id = ANY($1::bigint[]) AND state = 'FINISHED'",
                       1, p, NULL, NULL, &r, err, sizeof err) == 0) {
            for (int i = 0; i < PQntuples(r); i++) {
                sjob_t *j = job_find(t, ax_pg_int(r, i, 0));
                if (j && j->wait_instance == ax_pg_int(r, i, 1)) {
                    j->wait_instance = 0;
                    arm(t, j, ax_pg_int(r, i, 2) + j->sched.interval_ms, 0);
                }
            }
            PQclear(r);
            arm_wheel(t);
        }
    }
    ax_strbuf_free(&ids);
}

void sched_tick(trigger_t *t) {
    /* the fire rate over the last second: is the trigger loaded? */
    int64_t now = ax_mono_ms();
    if (now - t->rate_at_ms >= 1000) {
        t->fire_rate = t->rate_at_ms ? (t->fired - t->rate_fired) * 1000 / (now - t->rate_at_ms) : 0;
        t->rate_fired = t->fired;
        t->rate_at_ms = now;
    }
    if (!lead_active(t))
        return;
    sched_poll_notify(t);
    poll_fixed_delay(t);
}

/* ---- leadership changes --------------------------------------------------------- */

int sched_init(trigger_t *t) {
    g_t = t;
    t->wheel = calloc(1, sizeof *t->wheel);
    t->nbuckets = 1024;
    t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
    t->ev_wheel = evtimer_new(t->svc.base, on_wheel, t);
    return t->wheel && t->buckets && t->ev_wheel ? 0 : AX_ERR_NOMEM;
}

void sched_on_leader(trigger_t *t) {
    jobs_clear(t);
    ax_wheel_init(t->wheel, (uint64_t)lead_now(t));
    t->listening = 0;
    t->nreload = 0;
    t->reload_all = 0;
    sched_poll_notify(t); /* LISTEN before loading: no change slips between */
    if (load_jobs(t, NULL) < 0)
        t->reload_all = 1;
    arm_wheel(t);
}

void sched_on_follower(trigger_t *t) {
    if (t->ev_wheel)
        event_del(t->ev_wheel);
    for (size_t i = 0; i < t->nfires; i++)
        free(t->fires[i].detail);
    t->nfires = 0;
    jobs_clear(t);
    if (t->listening) {
        char err[256];
        ax_pg_exec(t->svc.pg, "UNLISTEN *", 0, NULL, NULL, NULL, NULL, err, sizeof err);
        t->listening = 0;
    }
}

void sched_rebuild(trigger_t *t, const char *why) {
    if (!t->leader)
        return;
    ax_warn("%s: rebuilding the schedule from the ledger", why);
    flush(t);
    t->reload_all = 1;
    sched_poll_notify(t);
}

void sched_destroy(trigger_t *t) {
    sched_on_follower(t);
    free(t->buckets);
    free(t->wheel);
    free(t->fires);
    free(t->reload_ids);
    if (t->ev_wheel)
        event_free(t->ev_wheel);
}
