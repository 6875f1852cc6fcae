/*
 * bench_flood — backpressure and priorities under a flood: P3 submissions
 * at FACTOR x the executor's capacity beside a steady P0 trickle, on the
 * real broker and database, with real ax-trigger, ax-executor and
 * ax-callback processes (docs/PRIORITIES.md).
 *
 * Inserts one plugin job (ax-sleep.so MS, default 10 ms, no retries),
 * starts ax-trigger, ax-callback and one ax-executor from BUILD_DIR on a
 * topic prefix of its own (bench.<pid>.), waits for the executor's worker
 * row, then warms up: --warmup submissions (P2) at once; the executor's
 * capacity is measured from them (instances / (last finished_at - first
 * running_at)) unless --capacity is given. Then, on one clock:
 *
 *   t = 0       --p4 N submissions of priority P4;
 *   0 .. D s    P3 submissions at FACTOR x capacity per second (the flood);
 *   0 .. end    P0 submissions at --p0-rate per second (the trickle), until
 *               every P3 and P4 instance is FINISHED (--p0-drain 0: only
 *               during the flood);
 *
 * and waits until every instance of the run is FINISHED. Once a second it
 * samples VmRSS of the trigger, the executor and the callback
 * (/proc/PID/status), lane_status of the deployment (lag, over, deferred
 * per lane) and the progress (one count over the run's instances in
 * PostgreSQL). It prints, from PostgreSQL's timestamps:
 *
 *   capacity         measured (or given) instances/s, flood rate, slots
 *   p0_fire_start    running_at - due_at of the P0 instances, p50/p99/max,
 *                    overall, due during the flood, due after it
 *                    (target p99 <= 50 ms)
 *   p3_deferred      P3 instances with deferred_at set (held in PostgreSQL
 *                    instead of produced) vs all P3; their waits
 *   p4_wait          the longest running_at - due_at of a P4 instance
 *                    against the aging bound (4 - 1) x trigger.aging.ms
 *                    (aging stops at P1), plus the drain of what is ahead
 *   per priority     count, FINISHED, deferred, fire-to-start p50/p99/max
 *   outcomes         by priority; anything but SUCCESS, or an instance not
 *                    FINISHED, makes the exit status 3
 *   rss_kb_*         trigger, executor and callback: first (flood start),
 *                    min/median/max over the run, at the flood's end, last
 *                    (target: flat)
 *   lanes            per lane the highest lag and deferred count seen in
 *                    lane_status, its flips (the trigger's log lines "lane
 *                    P<n> over its high mark" / "back under its low mark";
 *                    the trigger runs with log.level=info), and the
 *                    messages on its dispatch topic (high watermarks summed
 *                    over partitions: transaction markers included)
 *
 * Usage: bench_flood [--config F] [--set k=v]... [--partitions P]
 *                    [--warmup W] [--capacity C] [--factor F] [--seconds D]
 *                    [--p0-rate R] [--p0-drain 0|1] [--p4 N] [--ms MS]
 *                    [--timeout S] BUILD_DIR
 *
 * Defaults: 4 partitions, W 1000, FACTOR 10, D 20, R 20, --p0-drain 1,
 * N 20, MS 10, S 120 (give up when no instance finished for S seconds).
 * The services get, before the user's --config/--set (a later --set wins):
 * log.level=warn (info for the trigger), executor.pools=plugin:4:32 (one
 * pool of 4 slots and a short queue, so the backlog stays in Kafka where
 * the trigger measures it), trigger.lag.high=2000, trigger.lag.low=500,
 * trigger.aging.ms=10000; each also worker.id=bflood-<pid>-<service> and
 * AXCONF_TOPIC_PREFIX. Logs: /tmp/bench_flood.<pid>.<service>.log.
 *
 * Cleanup on every way out (also SIGINT/SIGTERM/SIGHUP of the benchmark):
 * the services get SIGTERM (SIGKILL after 30 s), then the job, every
 * instance of the deployment (attempt rows cascade), its
 * dispatch_pending and lane_status rows, leader row and worker rows are
 * deleted, the topics (lanes included) and consumer groups too. Jobs of an
 * earlier run whose benchmark process no longer exists (bench-flood-<pid>)
 * are removed at start with their deployment's rows and topics.
 */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/conf.h"
#include "ax/kafka.h"
#include "ax/lane.h"
#include "adapters/pg_raw.h"
#include "bench_common.h"

#define ME "bench_flood"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static ax_pg_t *g_pg;
static char g_prefix[64]; /* bench.<pid>. */
static char g_job[64];    /* bench-flood-<pid> */
static int64_t g_job_id;

/* The services: trigger, callback, executor. */
enum { P_TRIGGER, P_CALLBACK, P_EXEC, NPROC };
static bench_proc_t g_proc[NPROC];

static int sql(const char *text, int n, const char *const *p, PGresult **r) {
    char err[1024];
    int rc = ax_pg_exec(g_pg, text, n, p, NULL, NULL, r, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, ME ": %s\n", err);
    return rc;
}

/* One bigint from a one-row statement, or INT64_MIN. */
static int64_t sql_int(const char *text, int n, const char *const *p) {
    PGresult *r;
    if (sql(text, n, p, &r) < 0)
        return INT64_MIN;
    int64_t v = PQntuples(r) && !PQgetisnull(r, 0, 0) ? ax_pg_int(r, 0, 0) : INT64_MIN;
    PQclear(r);
    return v;
}

static void nap(int64_t ms) { bench_nap(ms, &g_stop); }
static int all_alive(void) { return bench_all_alive(ME, g_proc, NPROC); }

/* ---- cleanup ---------------------------------------------------------------- */

static void delete_kafka(const ax_conf_t *conf, const char *prefix) {
    static const char *const groups[] = {"trigger", "executor", "callback"};
    bench_delete_kafka(ME, conf, prefix, groups, AX_ARRAY_SIZE(groups));
}

/* Everything a run of `prefix` (job `job`, pid `pid`) left in the database. */
static int delete_rows(const char *prefix, const char *job, int pid) {
    char role[128], wlike[64];
    snprintf(role, sizeof role, "%strigger", prefix);
    snprintf(wlike, sizeof wlike, "bflood-%d-%%", pid);
    const char *pd[] = {prefix};
    const char *pj[] = {job};
    const char *pr[] = {role};
    const char *pw[] = {wlike};
    if (bench_delete_instances(sql_int, ME, prefix) < 0)
        return -1; /* the job row stays for the next run */
    /* state rows without a definition (none expected), through the view */
    sql("DELETE FROM job_instance WHERE deployment = $1", 1, pd, NULL);
    sql("DELETE FROM dispatch_pending WHERE deployment = $1", 1, pd, NULL);
    /* 018_hot_writes: the pending batches and the submit topic's watermarks
     * (a later run of the same pid recreates the topic from offset 0) */
    sql("DELETE FROM dispatch_batch WHERE deployment = $1", 1, pd, NULL);
    sql("DELETE FROM submit_offset WHERE left(topic, length($1)) = $1", 1, pd, NULL);
    sql("DELETE FROM lane_status WHERE deployment = $1", 1, pd, NULL);
    sql("DELETE FROM job WHERE name = $1", 1, pj, NULL);
    sql("DELETE FROM ax_leader WHERE role = $1", 1, pr, NULL);
    sql("DELETE FROM worker WHERE id LIKE $1", 1, pw, NULL);
    return 0;
}

static void cleanup(const ax_conf_t *conf) {
    bench_stop_all(ME, g_proc, NPROC);
    if (g_pg) {
        int64_t t0 = ax_mono_ms();
        int rc = delete_rows(g_prefix, g_job, (int)getpid());
        sql("VACUUM (ANALYZE) instance_def, instance_state, job_attempt_log, dispatch_pending, job", 0, NULL, NULL);
        if (rc == 0)
            fprintf(stderr, ME ": cleanup: rows deleted in %lld ms\n",
                    (long long)(ax_mono_ms() - t0));
    }
    delete_kafka(conf, g_prefix);
}

/* Runs whose benchmark process is gone. */
static void cleanup_stale(const ax_conf_t *conf) {
    PGresult *r;
    if (sql("SELECT substr(name, 13) FROM job WHERE name ~ '^bench-flood-[0-9]+$'", 0, NULL,
            &r) < 0)
        return;
    for (int i = 0; i < PQntuples(r); i++) {
        pid_t pid = (pid_t)atol(PQgetvalue(r, i, 0));
        if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        char prefix[64], job[64];
        snprintf(prefix, sizeof prefix, "bench.%d.", (int)pid);
        snprintf(job, sizeof job, "bench-flood-%d", (int)pid);
        if (delete_rows(prefix, job, (int)pid) < 0)
            continue; /* its job row stays: tried again by the next run */
        delete_kafka(conf, prefix);
        fprintf(stderr, ME ": deleted what run %d left behind\n", (int)pid);
    }
    PQclear(r);
}

/* ---- submissions -------------------------------------------------------------- */

static rd_kafka_t *g_rk;
static char g_topic[256];
static ax_delivery_t g_dlv; /* outlives the run: reports arrive in the final flush */
static long g_sent[AX_PRIORITIES];
static int64_t *g_p0_at; /* wall-clock ms each P0 submission was produced, by ordinal */
static long g_p0_cap;

/* Produce one submission of the job with priority `prio`. */
static int submit_one(int prio) {
    char err[512], trace[96];
    ax_submit_t s;
    ax_submit_init(&s);
    s.job = g_job;
    s.priority = prio;
    snprintf(trace, sizeof trace, "bf-%d-p%d-%ld", (int)getpid(), prio, g_sent[prio]);
    s.trace_id = trace;
    void *buf;
    size_t len;
    if (ax_submit_encode(&s, &buf, &len) < 0) {
        fprintf(stderr, ME ": cannot encode a submission\n");
        return -1;
    }
    int rc = ax_kafka_produce(g_rk, g_topic, trace, strlen(trace), buf, len, NULL, &g_dlv, err,
                              sizeof err);
    free(buf);
    if (rc < 0) {
        fprintf(stderr, ME ": %s\n", err);
        return -1;
    }
    if (prio == 0) {
        if (g_sent[0] >= g_p0_cap) {
            long cap = g_p0_cap ? g_p0_cap * 2 : 4096;
            int64_t *n = realloc(g_p0_at, (size_t)cap * sizeof *n);
            if (!n)
                return -1;
            g_p0_at = n;
            g_p0_cap = cap;
        }
        g_p0_at[g_sent[0]] = ax_now_ms();
    }
    g_sent[prio]++;
    return 0;
}

/* P0 submit-to-start: running_at - the moment the bench produced the
 * submission (same host, so the same clock), p50/p99/max in buf. Includes
 * the wait in <prefix>submit behind the flood, which fire-to-start (from
 * due_at, set at ingest) does not see. */
static void p0_submit_start(int64_t above, char *buf, size_t len) {
    char job[32], ab[32], like[64];
    snprintf(job, sizeof job, "%lld", (long long)g_job_id);
    snprintf(ab, sizeof ab, "%lld", (long long)above);
    snprintf(like, sizeof like, "bf-%d-p0-", (int)getpid());
    const char *p[] = {job, ab, like};
    PGresult *r;
    snprintf(buf, len, "-");
    if (sql("SELECT substr(trace_id, length($3) + 1)::bigint,"
            " (extract(epoch FROM running_at) * 1000)::bigint FROM job_instance"
            " WHERE job_id = $1::bigint AND id > $2::bigint AND priority = 0"
            " AND running_at IS NOT NULL AND starts_with(trace_id, $3)",
            3, p, &r) < 0)
        return;
    int n = 0;
    double *v = malloc(((size_t)PQntuples(r) + 1) * sizeof *v);
    for (int i = 0; v && i < PQntuples(r); i++) {
        long k = (long)ax_pg_int(r, i, 0);
        if (k >= 0 && k < g_sent[0])
            v[n++] = (double)(ax_pg_int(r, i, 1) - g_p0_at[k]);
    }
    PQclear(r);
    if (n > 0) {
        qsort(v, (size_t)n, sizeof *v, cmp_dbl);
        snprintf(buf, len, "%.0f/%.0f/%.0f (n=%d)", median(v, n), v[(int)((n - 1) * 0.99)],
                 v[n - 1], n);
    }
    free(v);
}

/* ---- samples ------------------------------------------------------------------ */

typedef struct series {
    double *v;
    int n, cap;
} series_t;

static void series_add(series_t *s, double x) {
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 256;
        double *nv = realloc(s->v, (size_t)cap * sizeof *nv);
        if (!nv)
            return;
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = x;
}

static series_t g_rss[NPROC];
static double g_rss_flood_end[NPROC];
static int64_t g_lane_lag_max[AX_PRIORITIES], g_lane_def_max[AX_PRIORITIES];
static int g_lane_over[AX_PRIORITIES], g_lane_seen_flips[AX_PRIORITIES];
static char g_lanes_now[160];

static void sample_rss(void) {
    for (int i = 0; i < NPROC; i++) {
        long kb = g_proc[i].pid > 0 ? proc_rss_kb(g_proc[i].pid) : -1;
        if (kb >= 0)
            series_add(&g_rss[i], (double)kb);
    }
}

/* lane_status of the deployment: the highest lag and deferred count, the
 * state changes seen between samples, a one-line summary. */
static void sample_lanes(void) {
    const char *p[] = {g_prefix};
    PGresult *r;
    if (sql("SELECT lane, lag, over, deferred FROM lane_status WHERE deployment = $1"
            " ORDER BY lane",
            1, p, &r) < 0)
        return;
    size_t l = 0;
    g_lanes_now[0] = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        int lane = (int)ax_pg_int(r, i, 0);
        if (lane < 0 || lane >= AX_PRIORITIES)
            continue;
        int64_t lag = ax_pg_int(r, i, 1), def = ax_pg_int(r, i, 3);
        int over = strcmp(PQgetvalue(r, i, 2), "t") == 0;
        if (lag > g_lane_lag_max[lane])
            g_lane_lag_max[lane] = lag;
        if (def > g_lane_def_max[lane])
            g_lane_def_max[lane] = def;
        if (over != g_lane_over[lane])
            g_lane_seen_flips[lane]++;
        g_lane_over[lane] = over;
        if (l < sizeof g_lanes_now - 40)
            l += (size_t)snprintf(g_lanes_now + l, sizeof g_lanes_now - l, " P%d:%lld%s/%lld",
                                  lane, (long long)lag, over ? "!" : "", (long long)def);
    }
    PQclear(r);
}

/* Instances of the run (id > above) and how many are FINISHED. */
static int progress(int64_t above, int64_t *total, int64_t *finished) {
    char job[32], ab[32];
    snprintf(job, sizeof job, "%lld", (long long)g_job_id);
    snprintf(ab, sizeof ab, "%lld", (long long)above);
    const char *p[] = {job, ab};
    PGresult *r;
    if (sql("SELECT count(*), count(*) FILTER (WHERE state = 'FINISHED') FROM job_instance"
            " WHERE job_id = $1::bigint AND id > $2::bigint",
            2, p, &r) < 0)
        return -1;
    *total = ax_pg_int(r, 0, 0);
    *finished = ax_pg_int(r, 0, 1);
    PQclear(r);
    return 0;
}

/* "first min/median/max flood_end last" of a series, in MB. */
static void rss_line(const char *name, int i) {
    series_t *s = &g_rss[i];
    if (s->n == 0) {
        printf("rss_mb_%s=none\n", name);
        return;
    }
    double first = s->v[0], last = s->v[s->n - 1];
    double *c = malloc((size_t)s->n * sizeof *c);
    if (!c)
        return;
    memcpy(c, s->v, (size_t)s->n * sizeof *c);
    double med = median(c, s->n);
    double mn = c[0], mx = c[s->n - 1];
    free(c);
    printf("rss_mb_%s first=%.1f min=%.1f median=%.1f max=%.1f flood_end=%.1f last=%.1f"
           " samples=%d\n",
           name, first / 1024, mn / 1024, med / 1024, mx / 1024, g_rss_flood_end[i] / 1024,
           last / 1024, s->n);
}

/* Messages per lane topic: high watermarks summed over partitions. */
static void lane_offsets(const ax_conf_t *conf, int partitions, long long out[AX_PRIORITIES]) {
    for (int p = 0; p < AX_PRIORITIES; p++) {
        char topic[256];
        ax_conf_dispatch_topic(conf, NULL, p, topic, sizeof topic);
        out[p] = 0;
        for (int part = 0; part < partitions; part++) {
            int64_t lo = 0, hi = 0;
            if (rd_kafka_query_watermark_offsets(g_rk, topic, part, &lo, &hi, 10000) ==
                RD_KAFKA_RESP_ERR_NO_ERROR)
                out[p] += hi;
            else
                out[p] = -1;
            if (out[p] < 0)
                break;
        }
    }
}

/* Lines of the trigger's log that contain `needle`. */
static int log_count(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle))
            n++;
    fclose(f);
    return n;
}

/* ---- the run ---------------------------------------------------------------------- */

typedef struct opts {
    int partitions;
    long warmup;
    double capacity; /* 0: measure */
    double factor;
    double seconds;
    double p0_rate;
    int p0_drain;
    long p4;
    long ms;
    long stall_s;
} opts_t;

static const char usage[] =
    "Usage: bench_flood [--config F] [--set k=v]... [--partitions P] [--warmup W]\n"
    "                   [--capacity C] [--factor F] [--seconds D] [--p0-rate R]\n"
    "                   [--p0-drain 0|1] [--p4 N] [--ms MS] [--timeout S] BUILD_DIR\n"
    "P3 submissions at F x the executor's capacity for D s beside P0 at R/s (and N P4\n"
    "at the start); waits until every instance is FINISHED. --config and --set are\n"
    "passed on to the services (except topic.prefix and worker.id).\n";

/* Wait for the warm-up's n instances (id > above) to finish; the capacity
 * they show, or -1. */
static double warm_up(const opts_t *o, int64_t above) {
    for (long i = 0; i < o->warmup && !g_stop; i++) {
        if (submit_one(AX_PRIORITY_DEFAULT) < 0)
            return -1;
        rd_kafka_poll(g_rk, 0);
    }
    if (g_stop || ax_kafka_wait(g_rk, &g_dlv, 60000) < 0)
        return -1;
    int64_t last = -1, last_change = ax_mono_ms();
    for (;;) {
        int64_t total, fin;
        if (g_stop || !all_alive() || progress(above, &total, &fin) < 0)
            return -1;
        if (fin >= o->warmup)
            break;
        if (fin != last) {
            last = fin;
            last_change = ax_mono_ms();
        } else if (ax_mono_ms() - last_change > o->stall_s * 1000) {
            fprintf(stderr, ME ": warm-up: %lld of %ld finished, no progress in %ld s\n",
                    (long long)fin, o->warmup, o->stall_s);
            return -1;
        }
        nap(200);
    }
    char job[32], ab[32];
    snprintf(job, sizeof job, "%lld", (long long)g_job_id);
    snprintf(ab, sizeof ab, "%lld", (long long)above);
    const char *p[] = {job, ab};
    PGresult *r;
    if (sql("SELECT count(*), extract(epoch FROM max(finished_at) - min(running_at)),"
            " count(*) FILTER (WHERE outcome <> 'SUCCESS')"
            " FROM job_instance WHERE job_id = $1::bigint AND id > $2::bigint",
            2, p, &r) < 0)
        return -1;
    double n = (double)ax_pg_int(r, 0, 0), span = atof(PQgetvalue(r, 0, 1));
    long bad = (long)ax_pg_int(r, 0, 2);
    PQclear(r);
    if (bad)
        fprintf(stderr, ME ": warning: %ld warm-up instance(s) did not succeed\n", bad);
    return span > 0 ? n / span : -1;
}

#define PCT3(expr)                                                                             \
    "coalesce(round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM " expr     \
    ") * 1000))::numeric, 1) || '/' || round((percentile_cont(0.99) WITHIN GROUP (ORDER BY"     \
    " extract(epoch FROM " expr ") * 1000))::numeric, 1) || '/' ||"                             \
    " round((extract(epoch FROM max(" expr ")) * 1000)::numeric, 1), '-')"

#define PCT3F(expr, cond)                                                                      \
    "coalesce(round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM " expr     \
    ") * 1000) FILTER (WHERE " cond "))::numeric, 1) || '/' || round((percentile_cont(0.99)"    \
    " WITHIN GROUP (ORDER BY extract(epoch FROM " expr ") * 1000) FILTER (WHERE " cond         \
    "))::numeric, 1) || '/' || round((extract(epoch FROM max(" expr ") FILTER (WHERE " cond    \
    ")) * 1000)::numeric, 1), '-')"

/* The figures; 0 when every instance finished with SUCCESS, 3 otherwise. */
static int report(const ax_conf_t *conf, const opts_t *o, int64_t above, const char *flood_end,
                  double capacity, double rate3, int64_t drain_ms) {
    char job[32], ab[32];
    snprintf(job, sizeof job, "%lld", (long long)g_job_id);
    snprintf(ab, sizeof ab, "%lld", (long long)above);
    const char *p3[] = {job, ab, flood_end};
    PGresult *r;
    int rc = 0;
    long long total_sent = 0;
    for (int p = 0; p < AX_PRIORITIES; p++)
        total_sent += g_sent[p];
    /* per priority */
    if (sql("SELECT priority, count(*), count(*) FILTER (WHERE state = 'FINISHED'),"
            "  count(*) FILTER (WHERE outcome = 'SUCCESS'),"
            "  count(*) FILTER (WHERE deferred_at IS NOT NULL),"
            " " PCT3("running_at - due_at") ","
            " " PCT3("dispatched_at - due_at") ","
            "  coalesce(string_agg(DISTINCT coalesce(outcome::text, state::text), ','), '')"
            " FROM job_instance WHERE job_id = $1::bigint AND id > $2::bigint"
            " GROUP BY priority ORDER BY priority",
            2, p3, &r) < 0)
        return 1;
    long long count[AX_PRIORITIES] = {0}, fin[AX_PRIORITIES] = {0}, ok[AX_PRIORITIES] = {0},
              def[AX_PRIORITIES] = {0};
    char fs[AX_PRIORITIES][64] = {{0}};
    long long all = 0, all_fin = 0, all_ok = 0;
    printf("priority count finished success deferred fire_start_ms_p50/p99/max"
           " due_dispatch_ms_p50/p99/max states\n");
    for (int i = 0; i < PQntuples(r); i++) {
        int pr = (int)ax_pg_int(r, i, 0);
        if (pr < 0 || pr >= AX_PRIORITIES)
            continue;
        count[pr] = ax_pg_int(r, i, 1);
        fin[pr] = ax_pg_int(r, i, 2);
        ok[pr] = ax_pg_int(r, i, 3);
        def[pr] = ax_pg_int(r, i, 4);
        snprintf(fs[pr], sizeof fs[pr], "%s", PQgetvalue(r, i, 5));
        all += count[pr];
        all_fin += fin[pr];
        all_ok += ok[pr];
        printf("P%d %lld %lld %lld %lld %s %s %s\n", pr, count[pr], fin[pr], ok[pr], def[pr],
               PQgetvalue(r, i, 5), PQgetvalue(r, i, 6), PQgetvalue(r, i, 7));
    }
    PQclear(r);
    /* P0 during and after the flood */
    if (sql("SELECT " PCT3F("running_at - due_at", "due_at <= $3::timestamptz") ","
            " " PCT3F("running_at - due_at", "due_at > $3::timestamptz") ","
            " count(*) FILTER (WHERE due_at <= $3::timestamptz),"
            " count(*) FILTER (WHERE due_at > $3::timestamptz),"
            " count(*) FILTER (WHERE due_at <= $3::timestamptz"
            "  AND running_at - due_at > interval '50 ms'),"
            " count(*) FILTER (WHERE due_at > $3::timestamptz"
            "  AND running_at - due_at > interval '50 ms')"
            " FROM job_instance WHERE job_id = $1::bigint AND id > $2::bigint AND priority = 0",
            3, p3, &r) < 0)
        return 1;
    char p0_flood[64], p0_after[64];
    snprintf(p0_flood, sizeof p0_flood, "%s", PQgetvalue(r, 0, 0));
    snprintf(p0_after, sizeof p0_after, "%s", PQgetvalue(r, 0, 1));
    long long n_flood = ax_pg_int(r, 0, 2), n_after = ax_pg_int(r, 0, 3);
    long long slow_flood = ax_pg_int(r, 0, 4), slow_after = ax_pg_int(r, 0, 5);
    PQclear(r);
    double p0_p99 = -1;
    {
        char *sl = strchr(fs[0], '/');
        if (sl)
            p0_p99 = atof(sl + 1);
    }
    printf("p0_fire_start_ms_p50_p99_max=%s (target p99 <= 50) during_flood=%s (n=%lld,"
           " >50ms: %lld) after_flood=%s (n=%lld, >50ms: %lld) %s\n",
           fs[0][0] ? fs[0] : "-", p0_flood, n_flood, slow_flood, p0_after, n_after, slow_after,
           p0_p99 < 0 ? "" : p0_p99 <= 50 ? "MET" : "MISSED");
    char sts[96];
    p0_submit_start(above, sts, sizeof sts);
    printf("p0_submit_start_ms_p50_p99_max=%s (produced by the bench -> running_at)\n", sts);
    /* P3 deferral */
    printf("p3_deferred=%lld of %lld (%.1f %%), produced at once: %lld\n", def[3], count[3],
           count[3] ? 100.0 * (double)def[3] / (double)count[3] : 0.0, count[3] - def[3]);
    /* P4 and the aging bound */
    const char *p4q[] = {job, ab};
    if (sql("SELECT coalesce(round(extract(epoch FROM max(running_at - due_at)) * 1000), -1),"
            " coalesce(round(extract(epoch FROM max(dispatched_at - due_at)) * 1000), -1)"
            " FROM job_instance WHERE job_id = $1::bigint AND id > $2::bigint AND priority = 4",
            2, p4q, &r) < 0)
        return 1;
    long long p4_wait = ax_pg_int(r, 0, 0), p4_disp = ax_pg_int(r, 0, 1);
    PQclear(r);
    long long bound = 3 * (long long)conf->trigger_aging_ms; /* P4 -> P1: aging stops at P1 */
    printf("p4_longest_wait_ms=%lld (due->dispatched %lld) deferred=%lld of %lld;"
           " aging bound (4 - 1) x %lld = %lld ms plus the drain of what is ahead: %s\n",
           p4_wait, p4_disp, def[4], count[4], (long long)conf->trigger_aging_ms, bound,
           conf->trigger_aging_ms <= 0 ? "no aging" : p4_wait <= bound ? "within" : "beyond");
    /* outcomes */
    if (sql("SELECT 'P' || priority || ':' || coalesce(outcome::text, state::text) || ':' ||"
            " count(*) FROM job_instance WHERE job_id = $1::bigint AND id > $2::bigint"
            " GROUP BY priority, outcome, state ORDER BY 1",
            2, p4q, &r) == 0) {
        printf("outcomes=");
        for (int i = 0; i < PQntuples(r); i++)
            printf("%s%s", i ? "," : "", PQgetvalue(r, i, 0));
        printf("\n");
        PQclear(r);
    }
    printf("instances=%lld submitted=%lld finished=%lld success=%lld drain_after_flood_s=%.1f\n",
           all, total_sent, all_fin, all_ok, (double)drain_ms / 1000.0);
    printf("capacity_per_s=%.0f%s flood_rate_per_s=%.0f\n", capacity,
           o->capacity > 0 ? " (given)" : " (measured in the warm-up)", rate3);
    rss_line("trigger", P_TRIGGER);
    rss_line("executor", P_EXEC);
    rss_line("callback", P_CALLBACK);
    long long offs[AX_PRIORITIES];
    lane_offsets(conf, o->partitions, offs);
    printf("lane max_lag max_deferred flips(log over/under) state_changes_seen topic_messages\n");
    for (int p = 0; p < AX_PRIORITIES; p++) {
        char over[64], under[64];
        snprintf(over, sizeof over, "lane P%d over its high mark", p);
        snprintf(under, sizeof under, "lane P%d back under its low mark", p);
        printf("P%d %lld %lld %d/%d %d %lld\n", p, (long long)g_lane_lag_max[p],
               (long long)g_lane_def_max[p], log_count(g_proc[P_TRIGGER].log, over),
               log_count(g_proc[P_TRIGGER].log, under), g_lane_seen_flips[p], offs[p]);
    }
    if (all != total_sent || all_fin != all || all_ok != all) {
        fprintf(stderr, ME ": %lld submitted, %lld instances, %lld FINISHED, %lld SUCCESS\n",
                total_sent, all, all_fin, all_ok);
        rc = 3;
    }
    return rc;
}

static int run(const ax_conf_t *conf, const char *build, const opts_t *o, char **pass,
               int npass) {
    char bin[NPROC][PATH_MAX + 64], plugin[PATH_MAX + 64];
    snprintf(bin[P_TRIGGER], sizeof bin[0], "%s/services/trigger/ax-trigger", build);
    snprintf(bin[P_CALLBACK], sizeof bin[0], "%s/services/callback/ax-callback", build);
    snprintf(bin[P_EXEC], sizeof bin[0], "%s/services/executor/ax-executor", build);
    snprintf(plugin, sizeof plugin, "%s/plugins/ax-sleep.so", build);
    for (int i = 0; i < NPROC; i++)
        if (access(bin[i], X_OK) != 0) {
            fprintf(stderr, ME ": %s: %s\n", bin[i], strerror(errno));
            return 1;
        }
    if (access(plugin, R_OK) != 0) {
        fprintf(stderr, ME ": %s: %s\n", plugin, strerror(errno));
        return 1;
    }
    /* The job: sleep MS, no retries, default priority (each submission sets its own). */
    char ms[32];
    snprintf(ms, sizeof ms, "%ld", o->ms);
    ax_strbuf_t cmd = {0};
    ax_pgarr_begin(&cmd);
    ax_pgarr_text(&cmd, plugin);
    ax_pgarr_text(&cmd, ms);
    ax_pgarr_end(&cmd);
    const char *pj[] = {g_job, cmd.s};
    g_job_id = sql_int("INSERT INTO job (name, handler_kind, command, retry_max)"
                       " VALUES ($1, 'plugin', $2::text[], 0) RETURNING id",
                       2, pj);
    ax_strbuf_free(&cmd);
    if (g_job_id == INT64_MIN)
        return 1;
    /* The services. */
    static const char *const names[NPROC] = {"trigger", "callback", "exec0"};
    for (int i = 0; i < NPROC; i++) {
        bench_proc_t *p = &g_proc[i];
        snprintf(p->name, sizeof p->name, "%s", names[i]);
        snprintf(p->wid, sizeof p->wid, "bflood-%d-%s", (int)getpid(), names[i]);
        snprintf(p->log, sizeof p->log, "/tmp/bench_flood.%d.%s.log", (int)getpid(), names[i]);
        p->pid = -1;
    }
    char *trig_extra[] = {"--set", "log.level=info"};
    for (int i = 0; i < NPROC; i++)
        if (bench_spawn(ME, &g_proc[i], bin[i], g_prefix, i == P_TRIGGER ? trig_extra : NULL,
                        i == P_TRIGGER ? 2 : 0, pass, npass) < 0)
            return 1;
    const char *pw[] = {g_proc[P_EXEC].wid};
    int64_t t0 = ax_mono_ms();
    for (;;) {
        int64_t k = sql_int("SELECT count(*) FROM worker WHERE id = $1 AND state = 'running'", 1,
                            pw);
        if (k == 1)
            break;
        if (g_stop || k == INT64_MIN || !all_alive() || ax_mono_ms() - t0 > 60000) {
            if (!g_stop && k == 0)
                fprintf(stderr, ME ": the executor did not register in 60 s\n");
            return 1;
        }
        nap(100);
    }
    fprintf(stderr, ME ": executor registered in %lld ms\n", (long long)(ax_mono_ms() - t0));
    /* Warm-up and capacity. */
    char jb[32];
    snprintf(jb, sizeof jb, "%lld", (long long)g_job_id);
    const char *pjb[] = {jb};
    int64_t above = sql_int("SELECT coalesce(max(id), 0) FROM job_instance", 0, NULL);
    if (above == INT64_MIN)
        return 1;
    double measured = warm_up(o, above);
    if (measured < 0) {
        if (!g_stop)
            fprintf(stderr, ME ": warm-up failed\n");
        return 1;
    }
    double capacity = o->capacity > 0 ? o->capacity : measured;
    double rate3 = o->factor * capacity;
    fprintf(stderr, ME ": warm-up: %ld instances, capacity %.0f/s measured; flood %.0f/s for %.0f s,"
            " P0 %.0f/s, %ld P4\n",
            o->warmup, measured, rate3, o->seconds, o->p0_rate, o->p4);
    above = sql_int("SELECT coalesce(max(id), 0) FROM job_instance WHERE job_id = $1::bigint", 1,
                    pjb);
    if (above == INT64_MIN)
        return 1;
    nap(2000); /* let the lag monitor see the lanes empty */
    for (int p = 0; p < AX_PRIORITIES; p++)
        g_sent[p] = 0;
    /* The flood. */
    g_dlv.failed = 0;
    g_dlv.err = 0;
    sample_rss();
    sample_lanes();
    int64_t start_us = bench_mono_us(), next_sample = ax_mono_ms() + 1000;
    int64_t flood_us = (int64_t)(o->seconds * 1e6), flood_end_ms = 0, drain_ms = 0;
    int64_t last_fin = -1, last_change = ax_mono_ms(), last_print = 0;
    char flood_end[64] = "";
    int finished_all = 0, rc = 0;
    for (long i = 0; i < o->p4; i++)
        if (submit_one(4) < 0)
            return 1;
    for (;;) {
        if (g_stop)
            return 1;
        int64_t el = bench_mono_us() - start_us;
        int flooding = el < flood_us;
        /* P3 up to where the clock says, at most 2,000 per turn */
        if (flooding) {
            long want = (long)((double)el * rate3 / 1e6);
            for (int k = 0; g_sent[3] < want && k < 2000; k++)
                if (submit_one(3) < 0)
                    return 1;
        } else if (!flood_end[0]) {
            /* PostgreSQL's clock: due_at is the trigger's now() at ingest */
            PGresult *r;
            if (sql("SELECT clock_timestamp()::text", 0, NULL, &r) < 0)
                return 1;
            snprintf(flood_end, sizeof flood_end, "%s", PQgetvalue(r, 0, 0));
            PQclear(r);
            flood_end_ms = ax_mono_ms();
            for (int k = 0; k < NPROC; k++)
                g_rss_flood_end[k] =
                    g_rss[k].n ? g_rss[k].v[g_rss[k].n - 1] : -1;
            fprintf(stderr, ME ": flood over: %ld P3, %ld P0, %ld P4 submitted\n", g_sent[3],
                    g_sent[0], g_sent[4]);
        }
        /* P0 trickle */
        if (flooding || (o->p0_drain && !finished_all)) {
            long want = (long)((double)el * o->p0_rate / 1e6) + 1;
            while (g_sent[0] < want)
                if (submit_one(0) < 0)
                    return 1;
        }
        rd_kafka_poll(g_rk, 0);
        if (ax_mono_ms() >= next_sample) {
            next_sample += 1000;
            if (!all_alive())
                return 1;
            sample_rss();
            sample_lanes();
            int64_t total, fin;
            if (progress(above, &total, &fin) < 0)
                return 1;
            long long sent = 0;
            for (int p = 0; p < AX_PRIORITIES; p++)
                sent += g_sent[p];
            if (fin != last_fin) {
                last_fin = fin;
                last_change = ax_mono_ms();
            } else if (ax_mono_ms() - last_change > o->stall_s * 1000) {
                fprintf(stderr, ME ": %lld of %lld instances FINISHED (%lld submitted),"
                        " no progress in %ld s\n",
                        (long long)fin, (long long)total, sent, o->stall_s);
                rc = 3;
                break;
            }
            if (ax_mono_ms() - last_print >= 5000) {
                last_print = ax_mono_ms();
                fprintf(stderr,
                        ME ": t=%.0fs sent P3 %ld P0 %ld P4 %ld; instances %lld, finished %lld;"
                           " lanes lag[!=over]/deferred:%s; rss MB trigger %.1f executor %.1f\n",
                        (double)el / 1e6, g_sent[3], g_sent[0], g_sent[4], (long long)total,
                        (long long)fin, g_lanes_now,
                        g_rss[P_TRIGGER].n ? g_rss[P_TRIGGER].v[g_rss[P_TRIGGER].n - 1] / 1024 : -1,
                        g_rss[P_EXEC].n ? g_rss[P_EXEC].v[g_rss[P_EXEC].n - 1] / 1024 : -1);
            }
            if (!flooding && flood_end[0]) {
                /* every P3/P4 instance finished: stop the trickle, then wait for all */
                char ab[32];
                snprintf(ab, sizeof ab, "%lld", (long long)above);
                const char *pq[] = {jb, ab};
                PGresult *r;
                if (sql("SELECT count(*), count(*) FILTER (WHERE state <> 'FINISHED')"
                        " FROM job_instance WHERE job_id = $1::bigint AND id > $2::bigint"
                        " AND priority <> 0",
                        2, pq, &r) < 0)
                    return 1;
                long long others = ax_pg_int(r, 0, 0), left = ax_pg_int(r, 0, 1);
                PQclear(r);
                if (!finished_all && others >= sent - g_sent[0] && left == 0) {
                    finished_all = 1;
                    drain_ms = ax_mono_ms() - flood_end_ms;
                    fprintf(stderr, ME ": every P3/P4 instance finished %.1f s after the flood\n",
                            (double)drain_ms / 1000.0);
                }
                if (finished_all && total >= sent && fin >= total &&
                    ax_kafka_wait(g_rk, &g_dlv, 1000) == 0)
                    break;
            }
        }
        usleep(1000);
    }
    if (ax_kafka_wait(g_rk, &g_dlv, 60000) < 0)
        fprintf(stderr, ME ": warning: submissions not all acknowledged by Kafka\n");
    if (!drain_ms)
        drain_ms = ax_mono_ms() - flood_end_ms;
    sample_rss();
    printf("flood: factor=%.1f seconds=%.0f p0_rate=%.0f p4=%ld sleep_ms=%ld partitions=%d"
           " lag_high=%lld lag_low=%lld aging_ms=%lld executor_pools=%s\n",
           o->factor, o->seconds, o->p0_rate, o->p4, o->ms, o->partitions,
           (long long)conf->trigger_lag_high, (long long)conf->trigger_lag_low,
           (long long)conf->trigger_aging_ms,
           conf->executor_pools ? conf->executor_pools : "");
    int rrc = report(conf, o, above, flood_end, capacity, rate3, drain_ms);
    printf("machine: loadavg1=%.2f\n", loadavg1());
    return rc ? rc : rrc;
}

int main(int argc, char **argv) {
    /* The bench's defaults for the services go first, so the user's --set win. */
    static char *defaults[] = {"--set", "executor.pools=plugin:4:32",
                               "--set", "trigger.lag.high=2000",
                               "--set", "trigger.lag.low=500",
                               "--set", "trigger.aging.ms=10000"};
    enum { NDEF = sizeof defaults / sizeof defaults[0] };
    int nargc = argc + NDEF;
    char **nargv = calloc((size_t)nargc + 1, sizeof *nargv);
    if (!nargv)
        return 1;
    nargv[0] = argv[0];
    for (int i = 0; i < NDEF; i++)
        nargv[1 + i] = defaults[i];
    for (int i = 1; i < argc; i++)
        nargv[NDEF + i] = argv[i];
    int npass = 0;
    char **pass = bench_pass_args(nargc, nargv, &npass);
    if (!pass)
        return 1;
    ax_conf_t conf;
    ax_conf_from_args(&conf, &nargc, nargv, ME, usage, NULL);
    opts_t o = {4, 1000, 0, 10, 20, 20, 1, 20, 10, 120};
    long long iv = 0;
    int ai = 1;
    /* An option's value, whole and within bounds, else exit 2 naming it. --factor,
     * --seconds and --p0-rate must be above 0 (DBL_MIN: strtod() takes anything
     * smaller for an underflow); --timeout up to ~31 years, so S * 1000 cannot
     * overflow. */
#define INT_OPT(name, lo, hi, var)                                                             \
    if (strcmp(a, name) == 0) {                                                                \
        if (!bench_int_arg(ME, name, v, lo, hi, &iv))                                          \
            return 2;                                                                          \
        var = iv;                                                                              \
        continue;                                                                              \
    }
#define NUM_OPT(name, lo, hi, var)                                                             \
    if (strcmp(a, name) == 0) {                                                                \
        if (!bench_num_arg(ME, name, v, lo, hi, &var))                                         \
            return 2;                                                                          \
        continue;                                                                              \
    }
    for (; ai < nargc && strncmp(nargv[ai], "--", 2) == 0; ai++) {
        const char *a = nargv[ai];
        if (ai + 1 >= nargc) {
            fprintf(stderr, "%s", usage);
            return 2;
        }
        const char *v = nargv[++ai];
        INT_OPT("--partitions", 1, INT_MAX, o.partitions)
        INT_OPT("--warmup", 1, LONG_MAX, o.warmup)
        NUM_OPT("--capacity", 0, 1e9, o.capacity)
        NUM_OPT("--factor", DBL_MIN, 1e9, o.factor)
        NUM_OPT("--seconds", DBL_MIN, 1e9, o.seconds)
        NUM_OPT("--p0-rate", DBL_MIN, 1e9, o.p0_rate)
        INT_OPT("--p0-drain", 0, 1, o.p0_drain)
        INT_OPT("--p4", 0, LONG_MAX, o.p4)
        INT_OPT("--ms", 0, LONG_MAX, o.ms)
        INT_OPT("--timeout", 1, 1000000000, o.stall_s)
        fprintf(stderr, "%s", usage);
        return 2;
    }
#undef INT_OPT
#undef NUM_OPT
    if (nargc - ai != 1) {
        fprintf(stderr, "%s", usage);
        return 2;
    }
    char build[PATH_MAX];
    if (!realpath(nargv[ai], build)) {
        fprintf(stderr, ME ": %s: %s\n", nargv[ai], strerror(errno));
        return 2;
    }
    char err[512];
    snprintf(g_prefix, sizeof g_prefix, "bench.%d.", (int)getpid());
    snprintf(g_job, sizeof g_job, "bench-flood-%d", (int)getpid());
    if (ax_conf_set(&conf, "topic.prefix", g_prefix, ME, err, sizeof err) < 0) {
        fprintf(stderr, ME ": %s\n", err);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (ax_codec_init(err, sizeof err) < 0) {
        fprintf(stderr, ME ": %s\n", err);
        return 1;
    }
    g_pg = ax_pg_new(&conf, ME, err, sizeof err);
    if (!g_pg || ax_pg_ensure(g_pg, err, sizeof err) < 0) {
        fprintf(stderr, ME ": %s\n", err);
        return 1;
    }
    cleanup_stale(&conf);
    g_rk = ax_kafka_producer_new(&conf, "bench-flood", err, sizeof err);
    if (!g_rk) {
        fprintf(stderr, ME ": %s\n", err);
        ax_pg_destroy(g_pg);
        return 1;
    }
    ax_conf_topic(&conf, "submit", g_topic, sizeof g_topic);
    int rc = 1;
    if (ax_kafka_create_topics(&conf, o.partitions, o.partitions, 0, err, sizeof err) < 0)
        fprintf(stderr, ME ": %s\n", err);
    else
        rc = run(&conf, build, &o, pass, npass);
    if (g_stop)
        fprintf(stderr, ME ": interrupted\n");
    fflush(stdout);
    rd_kafka_flush(g_rk, 5000);
    rd_kafka_destroy(g_rk);
    cleanup(&conf);
    fprintf(stderr, ME ": logs: /tmp/bench_flood.%d.*.log\n", (int)getpid());
    for (int i = 0; i < NPROC; i++)
        free(g_rss[i].v);
    free(g_p0_at);
    ax_pg_destroy(g_pg);
    ax_codec_shutdown();
    ax_conf_free(&conf);
    free(pass);
    free(nargv);
    return rc;
}
