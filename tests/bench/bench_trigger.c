/*
 * bench_trigger — ax-trigger's schedules end to end, and at rest.
 *
 * Rate mode (the default): inserts JOBS fixed_rate jobs of INTERVAL_MS
 * whose first fires are spread evenly over one interval a few seconds
 * ahead, starts AX_TRIGGER on a topic prefix of its own, waits until the
 * first instances appear, then samples once per second for SECONDS
 * seconds: instances created (each one is a ledger row decided 'fired' in
 * the same statement) and instances dispatched (produced and confirmed:
 * dispatched_at is set by the recording statement together with a
 * dispatch_pending row, which is deleted once the Kafka transaction
 * committed; an instance counts as dispatched when that row is gone). At the end the ledger itself is read
 * for the window: rows decided, by decision, and the lateness
 * decided_at - nominal_time (decided_at is the start of the recording
 * transaction); dispatched_at - nominal_time equals it since dispatched_at
 * is set in the same statement (the Kafka commit follows within the batch). Offered rate = JOBS * 1000 / INTERVAL_MS.
 *
 * Cron mode (--cron): inserts JOBS cron jobs that cannot fire for hours
 * (daily, weekly and monthly expressions at varied minutes in UTC,
 * Europe/Berlin, America/New_York and Australia/Lord_Howe), starts the
 * trigger, waits for its "N scheduled job(s) armed in X ms" line, then
 * reports the load time, the trigger's RSS and its CPU over SECONDS
 * seconds at rest. JOBS = 0 gives the baseline.
 *
 * --tolerance MS (rate mode) gives every job that tolerance (mixed
 * precision, docs/PRIORITIES.md): with --set trigger.coalesce.load=0 their
 * fires share the coarse tick; compare trigger_cpu_pct with and without.
 *
 * Usage: bench_trigger [--config F] [--set k=v]... [--delay-ms MS] [--partitions N]
 *                      [--tolerance MS] AX_TRIGGER JOBS INTERVAL_MS SECONDS
 *        bench_trigger [--config F] [--set k=v]... --cron AX_TRIGGER JOBS SECONDS
 *
 * --config and --set (except topic.prefix) are passed on to the trigger; it
 * gets AXCONF_TOPIC_PREFIX=bench.<pid>. and logs to
 * /tmp/bench_trigger.<pid>.log. Topics are created and deleted again. Jobs
 * are named bench-<pid>-N and are deleted with their instances and ledger
 * rows on every way out (also on SIGINT/SIGTERM of the benchmark): any
 * trigger on this database would fire jobs left behind. Jobs of an earlier
 * run whose benchmark process no longer exists are deleted at start.
 *
 * Needs no other ax service; nothing consumes the dispatch topic (so the
 * trigger gets trigger.lag.high=10^12 first: no backpressure deferral).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ax/common.h"
#include "bench_common.h"
#include "ax/conf.h"
#include "ax/kafka.h"
#include "adapters/pg_raw.h"

extern char **environ;

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static ax_pg_t *g_pg;
static char g_like[64];    /* bench-<pid>-% */
static char g_name[64];    /* bench-<pid>- */
static char g_prefix[64];  /* bench.<pid>. */
static char g_log[256];    /* the trigger's log */
static pid_t g_trigger = -1;

/* Run a statement; prints the error and returns <0 on failure. */
static int sql(const char *text, int n, const char *const *p, PGresult **r) {
    char err[1024];
    int rc = ax_pg_exec(g_pg, text, n, p, NULL, NULL, r, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "bench_trigger: %s\n", err);
    return rc;
}

/* One bigint from a one-row statement, or INT64_MIN. */
static int64_t sql_int(const char *text, int n, const char *const *p) {
    PGresult *r;
    if (sql(text, n, p, &r) < 0)
        return INT64_MIN;
    int64_t v = PQntuples(r) ? ax_pg_int(r, 0, 0) : INT64_MIN;
    PQclear(r);
    return v;
}

/* Sleep ms, in steps, until g_stop. */
static void nap(int64_t ms) { bench_nap(ms, &g_stop); }

/* ---- /proc --------------------------------------------------------------- */


/* A "Key:   123 kB" line of /proc/PID/status, in kB, or -1. */
static long proc_status_kb(pid_t pid, const char *key) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = atol(line + kl + 1);
            break;
        }
    fclose(f);
    return v;
}


/* CPU of the PostgreSQL server: the processes pg_stat_activity lists
 * (backends and auxiliary processes), this connection's backend excluded. */
typedef struct {
    int n;
    pid_t pid[256];
    long long t0[256];
} pgcpu_t;

static void pgcpu_start(pgcpu_t *c) {
    PGresult *r;
    c->n = 0;
    if (sql("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()", 0, NULL, &r) < 0)
        return;
    for (int i = 0; i < PQntuples(r) && c->n < 256; i++) {
        pid_t p = (pid_t)ax_pg_int(r, i, 0);
        long long t = proc_ticks(p);
        if (t >= 0) {
            c->pid[c->n] = p;
            c->t0[c->n++] = t;
        }
    }
    PQclear(r);
}

static long long pgcpu_delta(const pgcpu_t *c) {
    long long d = 0;
    for (int i = 0; i < c->n; i++) {
        long long t = proc_ticks(c->pid[i]);
        if (t >= c->t0[i])
            d += t - c->t0[i];
    }
    return d;
}

/* ---- the trigger process --------------------------------------------------- */

static int trigger_spawn(const char *bin, char **pass, int npass) {
    char **av = calloc((size_t)npass + 2, sizeof *av);
    size_t ne = 0;
    while (environ[ne])
        ne++;
    char **env = calloc(ne + 2, sizeof *env);
    if (!av || !env)
        return -1;
    av[0] = (char *)bin;
    for (int i = 0; i < npass; i++)
        av[i + 1] = pass[i];
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "AXCONF_TOPIC_PREFIX=", 20) != 0)
            env[k++] = environ[i];
    char pre[128];
    snprintf(pre, sizeof pre, "AXCONF_TOPIC_PREFIX=%s", g_prefix);
    env[k++] = pre;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, g_log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawn(&pid, bin, &fa, NULL, av, env);
    posix_spawn_file_actions_destroy(&fa);
    free(av);
    free(env);
    if (rc != 0) {
        fprintf(stderr, "bench_trigger: cannot start %s: %s\n", bin, strerror(rc));
        return -1;
    }
    g_trigger = pid;
    return 0;
}

/* 1 while the trigger runs. */
static int trigger_alive(void) {
    if (g_trigger <= 0)
        return 0;
    int st;
    pid_t p = waitpid(g_trigger, &st, WNOHANG);
    if (p == g_trigger) {
        fprintf(stderr, "bench_trigger: the trigger exited (status %d); see %s\n", st, g_log);
        g_trigger = -1;
        return 0;
    }
    return 1;
}

/* SIGTERM, up to 20 s for a clean stop (it gives its lease back), then SIGKILL. */
static void trigger_stop(void) {
    if (g_trigger <= 0)
        return;
    kill(g_trigger, SIGTERM);
    for (int i = 0; i < 200; i++) {
        int st;
        if (waitpid(g_trigger, &st, WNOHANG) == g_trigger) {
            g_trigger = -1;
            return;
        }
        usleep(100 * 1000);
    }
    fprintf(stderr, "bench_trigger: the trigger did not stop in 20 s; SIGKILL\n");
    kill(g_trigger, SIGKILL);
    waitpid(g_trigger, NULL, 0);
    g_trigger = -1;
}

/* Count lines of the trigger's log containing `what`; the last such line
 * (if `last` is non-NULL) is copied there. */
static int log_grep(const char *what, char *last, size_t lastlen) {
    FILE *f = fopen(g_log, "r");
    if (!f)
        return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, what)) {
            n++;
            if (last)
                snprintf(last, lastlen, "%s", line);
        }
    fclose(f);
    return n;
}

/* ---- jobs -------------------------------------------------------------------- */

static int64_t g_jobs_from; /* instances with a larger id are ours */

static void cleanup(void) {
    trigger_stop();
    if (!g_pg)
        return;
    const char *p[] = {g_like};
    int64_t t0 = ax_mono_ms();
    /* Instances and ledger rows first: deleting a job leaves both to the
     * retention sweep (026_job_delete_keeps_history). The instances in
     * chunks from their definitions (bench_common.h); if a chunk fails the
     * jobs stay, for the next run's stale cleanup. */
    if (bench_delete_instances(sql_int, "bench_trigger", g_prefix) < 0)
        return;
    sql("DELETE FROM job_instance WHERE job_id IN (SELECT id FROM job WHERE name LIKE $1)", 1, p,
        NULL);
    sql("DELETE FROM job_fire WHERE job_id IN (SELECT id FROM job WHERE name LIKE $1)", 1, p,
        NULL);
    int64_t left = sql_int("WITH d AS (DELETE FROM job WHERE name LIKE $1 RETURNING 1)"
                           " SELECT count(*) FROM d",
                           1, p);
    char role[128];
    snprintf(role, sizeof role, "%strigger", g_prefix);
    const char *q[] = {role};
    sql("DELETE FROM ax_leader WHERE role = $1", 1, q, NULL);
    /* Keep runs independent: the next one should not pay for this one's
     * dead rows. */
    sql("VACUUM (ANALYZE) instance_def, instance_state, job_fire, job", 0, NULL, NULL);
    fprintf(stderr, "bench_trigger: cleanup: %lld job(s) deleted in %lld ms\n",
            (long long)(left < 0 ? 0 : left), (long long)(ax_mono_ms() - t0));
}

/* Jobs of earlier runs whose benchmark process is gone. */
static void cleanup_stale(void) {
    PGresult *r;
    if (sql("SELECT DISTINCT split_part(name, '-', 2) FROM job"
            " WHERE name ~ '^bench-[0-9]+-[0-9]+$'",
            0, NULL, &r) < 0)
        return;
    for (int i = 0; i < PQntuples(r); i++) {
        pid_t pid = (pid_t)atol(PQgetvalue(r, i, 0));
        if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        char like[64];
        snprintf(like, sizeof like, "bench-%d-%%", (int)pid);
        const char *p[] = {like};
        char prefix[64];
        snprintf(prefix, sizeof prefix, "bench.%d.", (int)pid);
        if (bench_delete_instances(sql_int, "bench_trigger", prefix) < 0)
            continue; /* its jobs stay: tried again by the next run */
        sql("DELETE FROM job_instance WHERE job_id IN (SELECT id FROM job WHERE name LIKE $1)",
            1, p, NULL);
        sql("DELETE FROM job_fire WHERE job_id IN (SELECT id FROM job WHERE name LIKE $1)", 1, p,
            NULL);
        sql("DELETE FROM job WHERE name LIKE $1", 1, p, NULL);
        fprintf(stderr, "bench_trigger: deleted the jobs left by run %d\n", (int)pid);
    }
    PQclear(r);
}

static const char sql_rate_jobs[] =
    "INSERT INTO job (name, command, schedule_kind, interval_ms, start_at, tolerance_ms)"
    " SELECT $1 || g, '{true}', 'fixed_rate', $2::bigint,"
    "   to_timestamp(($3::bigint + g * $2::bigint / $4::bigint) / 1000.0), $7::int"
    " FROM generate_series($5::bigint, $6::bigint) g";

/* Cron jobs that cannot fire for at least five hours, whatever the zone:
 * daily 6-17 local hours ahead, weekly 2-6 days ahead, monthly 3-22 days
 * ahead (day of month modulo 28). */
static const char sql_cron_jobs[] =
    "INSERT INTO job (name, command, schedule_kind, schedule_expr, time_zone)"
    " SELECT $1 || g, '{true}', 'cron',"
    "   CASE g % 3"
    "     WHEN 0 THEN format('%s %s * * *', g % 60, (lh + 6 + (g / 60) % 12) % 24)"
    "     WHEN 1 THEN format('%s %s * * %s', g % 60, (g / 60) % 24, (lw + 2 + (g / 60) % 5) % 7)"
    "     ELSE format('%s %s %s * *', g % 60, (g / 60) % 24, (ld + 2 + (g / 60) % 20) % 28 + 1)"
    "   END, z"
    " FROM (SELECT g, z, extract(hour FROM now() AT TIME ZONE z)::int AS lh,"
    "         extract(dow FROM now() AT TIME ZONE z)::int AS lw,"
    "         extract(day FROM now() AT TIME ZONE z)::int AS ld"
    "       FROM generate_series($2::bigint, $3::bigint) g,"
    "       LATERAL (SELECT (ARRAY['UTC', 'Europe/Berlin', 'America/New_York',"
    "                 'Australia/Lord_Howe'])[1 + g % 4] AS z) zz) s";

/* Insert jobs [0, n) in statements of 10,000. */
static long g_tolerance_ms; /* --tolerance: mixed precision (rate mode) */

static int insert_jobs(int cron, long n, long interval_ms, int64_t t0_ms) {
    char a[32], b[32], iv[32], t0[32], nj[32], tol[32];
    snprintf(tol, sizeof tol, "%ld", g_tolerance_ms);
    snprintf(iv, sizeof iv, "%ld", interval_ms);
    snprintf(t0, sizeof t0, "%lld", (long long)t0_ms);
    snprintf(nj, sizeof nj, "%ld", n);
    for (long from = 0; from < n && !g_stop; from += 10000) {
        long to = from + 10000 < n ? from + 10000 - 1 : n - 1;
        snprintf(a, sizeof a, "%ld", from);
        snprintf(b, sizeof b, "%ld", to);
        int rc;
        if (cron) {
            const char *p[] = {g_name, a, b};
            rc = sql(sql_cron_jobs, 3, p, NULL);
        } else {
            const char *p[] = {g_name, iv, t0, nj, a, b, tol};
            rc = sql(sql_rate_jobs, 7, p, NULL);
        }
        if (rc < 0)
            return rc;
    }
    return g_stop ? -1 : 0;
}

/* ---- Kafka topics ------------------------------------------------------------ */

/* The run's topics and the trigger's consumer group. */
static void delete_topics(const ax_conf_t *conf) {
    static const char *const groups[] = {"trigger"};
    bench_delete_kafka("bench_trigger", conf, conf->topic_prefix, groups, AX_ARRAY_SIZE(groups));
}

/* ---- measurements ------------------------------------------------------------ */



static const char sql_sample[] =
    "SELECT count(*) FILTER (WHERE id > $2::bigint), coalesce(max(id), $2::bigint),"
    "  count(*) FILTER (WHERE dispatched_at IS NULL OR EXISTS (SELECT 1 FROM dispatch_pending p"
    "    WHERE p.instance_id = job_instance.id)),"
    "  coalesce(min(id) FILTER (WHERE dispatched_at IS NULL OR EXISTS (SELECT 1"
    "    FROM dispatch_pending p WHERE p.instance_id = job_instance.id)) - 1, max(id), $1::bigint),"
    "  (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    " FROM job_instance WHERE id > $1::bigint AND job_name LIKE $3";

typedef struct {
    int64_t low;        /* every instance of ours up to here is dispatched */
    int64_t last;       /* highest instance id counted */
    int64_t created;    /* instances counted */
    int64_t undispatched;
    int64_t pg_ms;
    int64_t mono_ms;
} counts_t;

static int sample(counts_t *c) {
    char lo[32], la[32];
    snprintf(lo, sizeof lo, "%lld", (long long)c->low);
    snprintf(la, sizeof la, "%lld", (long long)c->last);
    const char *p[] = {lo, la, g_like};
    PGresult *r;
    if (sql(sql_sample, 3, p, &r) < 0)
        return -1;
    c->created += ax_pg_int(r, 0, 0);
    c->last = ax_pg_int(r, 0, 1);
    c->undispatched = ax_pg_int(r, 0, 2);
    c->low = ax_pg_int(r, 0, 3);
    c->pg_ms = ax_pg_int(r, 0, 4);
    c->mono_ms = ax_mono_ms();
    PQclear(r);
    return 0;
}

static int run_rate(const char *bin, char **pass, int npass, long jobs, long interval_ms,
                    long seconds, long delay_ms) {
    int64_t now = sql_int("SELECT (extract(epoch FROM now()) * 1000)::bigint", 0, NULL);
    g_jobs_from = sql_int("SELECT coalesce(max(id), 0) FROM job_instance", 0, NULL);
    if (now == INT64_MIN || g_jobs_from == INT64_MIN)
        return 1;
    int64_t t0 = now + delay_ms;
    int64_t ins0 = ax_mono_ms();
    if (insert_jobs(0, jobs, interval_ms, t0) < 0)
        return 1;
    fprintf(stderr, "bench_trigger: %ld fixed_rate job(s) inserted in %lld ms; first fires at +%ld ms\n",
            jobs, (long long)(ax_mono_ms() - ins0), delay_ms);
    if (trigger_spawn(bin, pass, npass) < 0)
        return 1;
    /* Until the first instance appears. */
    counts_t c = {g_jobs_from, g_jobs_from, 0, 0, 0, 0};
    int64_t deadline = ax_mono_ms() + delay_ms + 60000;
    while (!g_stop && c.created == 0) {
        if (!trigger_alive() || ax_mono_ms() > deadline) {
            if (g_trigger > 0)
                fprintf(stderr, "bench_trigger: nothing fired in %ld s; see %s\n",
                        (delay_ms + 60000) / 1000, g_log);
            return 1;
        }
        nap(200);
        if (sample(&c) < 0)
            return 1;
    }
    nap(2000); /* warm-up, not counted */
    if (g_stop || !trigger_alive() || sample(&c) < 0)
        return 1;
    long ntick = sysconf(_SC_CLK_TCK);
    long long tt0 = proc_ticks(g_trigger), mb0, mt0, mb1, mt1;
    machine_ticks(&mb0, &mt0);
    pgcpu_t pgc;
    pgcpu_start(&pgc);
    counts_t w0 = c, prev = c;
    double *fired_s = calloc((size_t)seconds, sizeof *fired_s);
    double *disp_s = calloc((size_t)seconds, sizeof *disp_s);
    if (!fired_s || !disp_s)
        return 1;
    int ns = 0;
    char per[4096] = "";
    size_t perlen = 0;
    for (long s = 0; s < seconds && !g_stop; s++) {
        int64_t next = w0.mono_ms + (s + 1) * 1000;
        nap(next - ax_mono_ms());
        if (g_stop || !trigger_alive() || sample(&c) < 0)
            break;
        double dt = (double)(c.mono_ms - prev.mono_ms) / 1000.0;
        int64_t disp_prev = prev.created - prev.undispatched, disp = c.created - c.undispatched;
        fired_s[ns] = (double)(c.created - prev.created) / dt;
        disp_s[ns] = (double)(disp - disp_prev) / dt;
        if (perlen < sizeof per - 32)
            perlen += (size_t)snprintf(per + perlen, sizeof per - perlen, "%s%.0f", ns ? "," : "",
                                       fired_s[ns]);
        ns++;
        prev = c;
    }
    if (ns < seconds) {
        free(fired_s);
        free(disp_s);
        return 1;
    }
    long long tt1 = proc_ticks(g_trigger);
    machine_ticks(&mb1, &mt1);
    long long pgd = pgcpu_delta(&pgc);
    long rss = proc_status_kb(g_trigger, "VmRSS"), hwm = proc_status_kb(g_trigger, "VmHWM");
    double win = (double)(c.mono_ms - w0.mono_ms) / 1000.0;
    double trig_cpu = (double)(tt1 - tt0) * 100.0 / (double)ntick / win;
    double pg_cpu = (double)pgd * 100.0 / (double)ntick / win;
    double mach = mt1 > mt0 ? (double)(mb1 - mb0) * 100.0 / (double)(mt1 - mt0) : 0;
    int64_t disp_total = (c.created - c.undispatched) - (w0.created - w0.undispatched);
    double disp_med = median(disp_s, ns);
    double fired_med = median(fired_s, ns);
    trigger_stop(); /* the queries below need not compete with it */
    int lost = log_grep("leadership lost", NULL, 0);
    int warns = log_grep(" WARN ", NULL, 0) + log_grep(" ERROR ", NULL, 0);
    char ws[32], we[32];
    snprintf(ws, sizeof ws, "%lld", (long long)w0.pg_ms);
    snprintf(we, sizeof we, "%lld", (long long)c.pg_ms);
    const char *p[] = {g_like, ws, we};
    PGresult *r;
    if (sql("SELECT count(*), count(*) FILTER (WHERE decision = 'fired'),"
            "  coalesce(round(percentile_cont(0.5) WITHIN GROUP (ORDER BY l))::bigint, -1),"
            "  coalesce(round(percentile_cont(0.99) WITHIN GROUP (ORDER BY l))::bigint, -1),"
            "  coalesce(round(max(l))::bigint, -1)"
            " FROM (SELECT f.decision, extract(epoch FROM f.decided_at - f.nominal_time) * 1000 AS l"
            "   FROM job_fire f JOIN job j ON j.id = f.job_id WHERE j.name LIKE $1"
            "   AND f.decided_at >= to_timestamp($2::bigint / 1000.0)"
            "   AND f.decided_at < to_timestamp($3::bigint / 1000.0)) x",
            3, p, &r) < 0)
        goto fail;
    int64_t ledger = ax_pg_int(r, 0, 0), fired = ax_pg_int(r, 0, 1);
    char late[96];
    snprintf(late, sizeof late, "%s/%s/%s", PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 3),
             PQgetvalue(r, 0, 4));
    PQclear(r);
    if (sql("SELECT coalesce(round(percentile_cont(0.5) WITHIN GROUP (ORDER BY l))::bigint, -1),"
            "  coalesce(round(percentile_cont(0.99) WITHIN GROUP (ORDER BY l))::bigint, -1),"
            "  coalesce(round(max(l))::bigint, -1)"
            " FROM (SELECT extract(epoch FROM dispatched_at - nominal_time) * 1000 AS l"
            "   FROM job_instance WHERE job_name LIKE $1"
            "   AND dispatched_at >= to_timestamp($2::bigint / 1000.0)"
            "   AND dispatched_at < to_timestamp($3::bigint / 1000.0)) x",
            3, p, &r) < 0)
        goto fail;
    char plate[96];
    snprintf(plate, sizeof plate, "%s/%s/%s", PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1),
             PQgetvalue(r, 0, 2));
    PQclear(r);
    double pgwin = (double)(c.pg_ms - w0.pg_ms) / 1000.0;
    printf("mode=rate jobs=%ld interval_ms=%ld offered_per_s=%.0f window_s=%.1f\n", jobs,
           interval_ms, (double)jobs * 1000.0 / (double)interval_ms, win);
    printf("fired_per_s_median=%.0f fired_per_s_overall=%.0f ledger_rows=%lld ledger_fired=%lld "
           "dispatched_per_s_median=%.0f dispatched_per_s_overall=%.0f\n",
           fired_med, (double)ledger / pgwin, (long long)ledger, (long long)fired, disp_med,
           (double)disp_total / win);
    printf("decided_late_ms_p50_p99_max=%s dispatched_late_ms_p50_p99_max=%s\n", late, plate);
    printf("trigger_cpu_pct=%.0f postgres_cpu_pct=%.0f machine_busy_pct=%.0f trigger_rss_kb=%ld "
           "trigger_hwm_kb=%ld leadership_lost=%d warnings=%d\n",
           trig_cpu, pg_cpu, mach, rss, hwm, lost, warns);
    printf("fired_per_s_samples=%s\n", per);
    free(fired_s);
    free(disp_s);
    return 0;
fail:
    free(fired_s);
    free(disp_s);
    return 1;
}

static int run_cron(const char *bin, char **pass, int npass, long jobs, long seconds) {
    int64_t ins0 = ax_mono_ms();
    if (insert_jobs(1, jobs, 0, 0) < 0)
        return 1;
    if (jobs)
        fprintf(stderr, "bench_trigger: %ld cron job(s) inserted in %lld ms\n", jobs,
                (long long)(ax_mono_ms() - ins0));
    int64_t sp0 = ax_mono_ms();
    if (trigger_spawn(bin, pass, npass) < 0)
        return 1;
    char line[2048];
    while (!log_grep("scheduled job(s) armed in", line, sizeof line)) {
        if (g_stop || !trigger_alive())
            return 1;
        if (ax_mono_ms() - sp0 > 120000) {
            fprintf(stderr, "bench_trigger: not armed in 120 s; see %s\n", g_log);
            return 1;
        }
        nap(50);
    }
    int64_t armed_ms = ax_mono_ms() - sp0;
    const char *m = strstr(line, "armed in ");
    long load_ms = m ? atol(m + 9) : -1;
    const char *sp = strstr(line, ": ");
    long armed = sp ? atol(sp + 2) : -1;
    nap(2000); /* settle */
    if (g_stop || !trigger_alive())
        return 1;
    long ntick = sysconf(_SC_CLK_TCK);
    long rss0 = proc_status_kb(g_trigger, "VmRSS");
    long long tt0 = proc_ticks(g_trigger);
    int64_t m0 = ax_mono_ms();
    nap(seconds * 1000);
    if (g_stop || !trigger_alive())
        return 1;
    long long tt1 = proc_ticks(g_trigger);
    double win = (double)(ax_mono_ms() - m0) / 1000.0;
    long rss = proc_status_kb(g_trigger, "VmRSS"), hwm = proc_status_kb(g_trigger, "VmHWM");
    trigger_stop();
    const char *p[] = {g_like};
    int64_t fires = sql_int("SELECT count(*) FROM job_fire f JOIN job j ON j.id = f.job_id"
                            " WHERE j.name LIKE $1",
                            1, p);
    printf("mode=cron jobs=%ld armed=%ld load_ms=%ld spawn_to_armed_ms=%lld rest_s=%.1f\n", jobs,
           armed, load_ms, (long long)armed_ms, win);
    printf("trigger_rss_kb=%ld trigger_rss_kb_after_rest=%ld trigger_hwm_kb=%ld "
           "trigger_cpu_pct_at_rest=%.2f fires_during_run=%lld\n",
           rss0, rss, hwm, (double)(tt1 - tt0) * 100.0 / (double)ntick / win, (long long)fires);
    return 0;
}

int main(int argc, char **argv) {
    static const char usage[] =
        "Usage: bench_trigger [--delay-ms MS] [--partitions N] [--tolerance MS] AX_TRIGGER JOBS INTERVAL_MS SECONDS\n"
        "       bench_trigger --cron AX_TRIGGER JOBS SECONDS\n"
        "--config and --set are passed on to the trigger (except topic.prefix).\n";
    /* What the trigger gets of our options, taken before they are consumed. */
    char **pass = calloc((size_t)argc + 3, sizeof *pass);
    int npass = 0;
    if (!pass)
        return 1;
    /* Nothing consumes the dispatch topic here: without this the trigger
     * would see its lag grow and defer the fires (docs/PRIORITIES.md); a
     * later --set wins. */
    pass[npass++] = "--set";
    pass[npass++] = "trigger.lag.high=1000000000000";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if ((strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--set") == 0) && i + 1 < argc) {
            if (strcmp(argv[i], "--set") == 0 && strncmp(argv[i + 1], "topic.prefix=", 13) == 0) {
                i++;
                continue;
            }
            pass[npass++] = argv[i];
            pass[npass++] = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0 ||
                   (strncmp(argv[i], "--set=", 6) == 0 &&
                    strncmp(argv[i] + 6, "topic.prefix=", 13) != 0)) {
            pass[npass++] = argv[i];
        }
    }
    ax_conf_t conf;
    ax_conf_from_args(&conf, &argc, argv, "bench_trigger", usage, NULL);
    int cron = 0, partitions = 6;
    long delay_ms = 8000;
    long long v = 0;
    int ai = 1;
    /* --delay-ms and SECONDS: up to ~31 years, so that the arithmetic in ms on them
     * cannot overflow; --tolerance: the job table's CHECK (0..3600000). */
#define INT_OPT(name, lo, hi, var)                                                             \
    else if (strcmp(argv[ai], name) == 0 && ai + 1 < argc) {                                   \
        if (!bench_int_arg("bench_trigger", name, argv[++ai], lo, hi, &v))                     \
            return 2;                                                                          \
        var = v;                                                                               \
    }
    for (; ai < argc && strncmp(argv[ai], "--", 2) == 0; ai++) {
        if (strcmp(argv[ai], "--cron") == 0)
            cron = 1;
        INT_OPT("--delay-ms", 0, 1000000000000LL, delay_ms)
        INT_OPT("--partitions", 1, INT_MAX, partitions)
        INT_OPT("--tolerance", 0, 3600000, g_tolerance_ms)
        else {
            fprintf(stderr, "%s", usage);
            return 2;
        }
    }
#undef INT_OPT
    int need = cron ? 3 : 4;
    if (argc - ai != need) {
        fprintf(stderr, "%s", usage);
        return 2;
    }
    const char *bin = argv[ai];
    long long jobs_ll = 0, interval_ll = 0, seconds_ll = 0;
    if (!bench_int_arg("bench_trigger", "JOBS", argv[ai + 1], cron ? 0 : 1, LONG_MAX, &jobs_ll) ||
        (!cron &&
         !bench_int_arg("bench_trigger", "INTERVAL_MS", argv[ai + 2], 1, LONG_MAX, &interval_ll)) ||
        !bench_int_arg("bench_trigger", "SECONDS", argv[ai + need - 1], 1, 1000000000,
                       &seconds_ll))
        return 2;
    long jobs = (long)jobs_ll, interval_ms = (long)interval_ll, seconds = (long)seconds_ll;
    char err[512];
    snprintf(g_prefix, sizeof g_prefix, "bench.%d.", (int)getpid());
    snprintf(g_name, sizeof g_name, "bench-%d-", (int)getpid());
    snprintf(g_like, sizeof g_like, "bench-%d-%%", (int)getpid());
    snprintf(g_log, sizeof g_log, "/tmp/bench_trigger.%d.log", (int)getpid());
    if (ax_conf_set(&conf, "topic.prefix", g_prefix, "bench_trigger", err, sizeof err) < 0) {
        fprintf(stderr, "bench_trigger: %s\n", err);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    g_pg = ax_pg_new(&conf, "bench_trigger", err, sizeof err);
    if (!g_pg || ax_pg_ensure(g_pg, err, sizeof err) < 0) {
        fprintf(stderr, "bench_trigger: %s\n", err);
        return 1;
    }
    cleanup_stale();
    if (ax_kafka_create_topics(&conf, partitions, partitions, 0, err, sizeof err) < 0) {
        fprintf(stderr, "bench_trigger: %s\n", err);
        return 1;
    }
    int rc = cron ? run_cron(bin, pass, npass, jobs, seconds)
                  : run_rate(bin, pass, npass, jobs, interval_ms, seconds, delay_ms);
    if (g_stop)
        fprintf(stderr, "bench_trigger: interrupted\n");
    cleanup();
    delete_topics(&conf);
    if (rc == 0)
        fprintf(stderr, "bench_trigger: trigger log: %s\n", g_log);
    ax_pg_destroy(g_pg);
    ax_conf_free(&conf);
    free(pass);
    return rc;
}
