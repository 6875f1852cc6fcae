/*
 * bench_callback — ax-callback's throughput: attempt results persisted and
 * final outcomes published per second, batched.
 *
 * Inserts one job (bench-cb-<pid>) and N of its instances in state RUNNING
 * (attempt 1, a worker, running_at set, the lease a day ahead, deployment
 * = the topic prefix bench.<pid>.) with a few INSERT ... SELECT
 * generate_series statements, then VACUUM (ANALYZE) and a CHECKPOINT so
 * every run starts from the same state. Then it produces N Attempt records
 * to <prefix>callback, keyed by instance id:
 *
 *   backlog mode (the default): all N before AX_CALLBACK starts, so the
 *     callback consumes a backlog — pure throughput;
 *   --live RATE: AX_CALLBACK runs first and the results are produced while
 *     it runs, RATE per second (0 = as fast as possible); the latency
 *     production -> persisted is reported (job_attempt.finished_at, the
 *     callback's clock_timestamp(), minus started_at, which the benchmark
 *     sets to the production time).
 *
 * Outcomes are SUCCESS except for --fail-pct P percent of them (every
 * instance whose ordinal modulo 100 is below P): FAILED, exit 1, error
 * class "exit", retryable. The job has the default retry chain with
 * retry_max 3 and a 10-minute delay, so failed attempts are rescheduled
 * (SCHEDULED, attempt 2; no trigger runs to dispatch them) instead of
 * finished; the callback gets callback.retry.budget=N so that none is
 * refused (a later --set wins).
 *
 * AX_CALLBACK gets --set log.level=warn, the --config/--set options given
 * here (except topic.prefix and worker.id), --set callback.batch=BATCH when
 * BATCH is given, and AXCONF_TOPIC_PREFIX. Log: /tmp/bench_callback.<pid>.log.
 *
 * Sampled once a second: published = outcome records read from
 * <prefix>results (one per instance, keyed by id; reading the topic adds no
 * load to PostgreSQL); persisted = published + instances FINISHED and not
 * yet published (a window of ids, as sample() says) +
 * rescheduled instances (the partial index job_instance_retry_pending). A
 * result counts as both read and unpublished between the commit of its Kafka
 * transaction (results are read read_committed, librdkafka's default) and
 * the callback's mark, so one sample may be off by up to one batch;
 * the error does not accumulate. The run ends when published + rescheduled
 * = N; PostgreSQL then confirms every instance FINISHED with
 * result_published_at set (or rescheduled).
 *
 * Printed (key=value lines):
 *   persisted_per_s_median   median of the per-second rates between the
 *                            first sample with a persisted result and the
 *                            last full second
 *   persisted_per_s_overall  job_attempt rows / (last - first
 *                            job_attempt.finished_at)
 *   published_per_s_*        the same for outcomes published (overall:
 *                            to the last result_published_at)
 *   cpu_pct_*                over the window (first persisted sample to the
 *                            end), % of one core: the callback, its
 *                            PostgreSQL backend, all of PostgreSQL (the
 *                            processes pg_stat_activity lists, this
 *                            connection's backend excluded), Kafka (when
 *                            AX_STATE/run/kafka.pid is readable), this
 *                            program, and the whole machine
 *   pg_*                     per result: commits, WAL records and bytes,
 *                            full-page images; job_instance updates and the
 *                            share of them that were HOT
 *   stmt                     when pg_stat_statements is loaded and created
 *                            in the database: the statements that took the
 *                            most time during the window (delta of calls,
 *                            total and mean execution time)
 *
 * --callbacks K starts K ax-callback processes (one consumer group sharing
 * the partitions, each with its own PostgreSQL backend); CPU figures are
 * summed over them.
 *
 * Usage: bench_callback [--config F] [--set k=v]... [--partitions P]
 *                       [--fail-pct P] [--live RATE] [--callbacks K] [--timeout S]
 *                       AX_CALLBACK N [BATCH]
 *
 * Cleanup on every way out (also SIGINT/SIGTERM/SIGHUP of the benchmark):
 * the callback gets SIGTERM (SIGKILL after 30 s), then every instance of
 * the deployment (its attempt rows cascade) and the job are deleted, and
 * the topics and consumer groups of the prefix. What an earlier run left
 * behind (a job bench-cb-<pid> whose process is gone) is removed at start.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ax/codec.h"
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
static char g_prefix[64]; /* bench.<pid>. */
static char g_job[64];    /* bench-cb-<pid> */
static char g_log[256];
static int64_t g_job_id = -1;
/* --callbacks K: K ax-callback processes share the callback topic's
 * partitions (one consumer group); g_cbs[0] is the one sampled for
 * scheduler statistics, CPU is summed over all. */
#define MAX_CB 8
static pid_t g_cbs[MAX_CB] = {-1, -1, -1, -1, -1, -1, -1, -1};
static int g_ncb = 1;
#define g_cb g_cbs[0]

static int sql(const char *text, int n, const char *const *p, PGresult **r) {
    char err[1024];
    int rc = ax_pg_exec(g_pg, text, n, p, NULL, NULL, r, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "bench_callback: %s\n", err);
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

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}



/* ---- /proc --------------------------------------------------------------- */


/* /proc/PID/schedstat (the main thread): on-CPU and run-queue wait, ns. */
static void proc_sched(pid_t pid, long long *run, long long *wait) {
    char path[64];
    *run = *wait = -1;
    snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fscanf(f, "%lld %lld", run, wait) != 2)
        *run = *wait = -1;
    fclose(f);
}




static pid_t g_cb_backend; /* the callback's PostgreSQL backend, 0 = unknown */
static pid_t g_cb_backends[MAX_CB]; /* every callback's backend (--callbacks) */

static long long sum_ticks(const pid_t *pids, int n) {
    long long t = 0;
    for (int i = 0; i < n; i++) {
        if (pids[i] <= 0)
            return -1;
        long long v = proc_ticks(pids[i]);
        if (v < 0)
            return -1;
        t += v;
    }
    return t;
}

typedef struct cpu {
    long long cb, cb_backend, kafka, self, mbusy, mtotal;
    long long cb_run, cb_wait, be_run, be_wait; /* schedstat, ns */
    int npg;
    pid_t pgpid[256];
    long long pg[256];
    pid_t kpid;
    int64_t mono_ms;
} cpu_t;

static void cpu_snap(cpu_t *c, const cpu_t *start) {
    c->cb = sum_ticks(g_cbs, g_ncb);
    c->cb_backend = g_ncb > 1 ? sum_ticks(g_cb_backends, g_ncb)
                              : g_cb_backend > 0 ? proc_ticks(g_cb_backend) : -1;
    proc_sched(g_cb, &c->cb_run, &c->cb_wait);
    proc_sched(g_cb_backend, &c->be_run, &c->be_wait);
    if (!start) {
        PGresult *r;
        c->npg = 0;
        if (sql("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()", 0, NULL, &r) ==
            0) {
            for (int i = 0; i < PQntuples(r) && c->npg < 256; i++)
                c->pgpid[c->npg++] = (pid_t)ax_pg_int(r, i, 0);
            PQclear(r);
        }
        c->kpid = kafka_pid();
    } else {
        c->npg = start->npg;
        memcpy(c->pgpid, start->pgpid, sizeof c->pgpid);
        c->kpid = start->kpid;
    }
    for (int i = 0; i < c->npg; i++)
        c->pg[i] = proc_ticks(c->pgpid[i]);
    c->kafka = c->kpid ? proc_ticks(c->kpid) : -1;
    c->self = proc_ticks(getpid());
    machine_ticks(&c->mbusy, &c->mtotal);
    c->mono_ms = ax_mono_ms();
}

static double pct(long long ticks, double secs) {
    return ticks < 0 || secs <= 0 ? -1
                                  : (double)ticks * 100.0 / (double)sysconf(_SC_CLK_TCK) / secs;
}

/* ---- PostgreSQL's own counters ------------------------------------------------ */

typedef struct pgstat {
    long long commits, wal_records, wal_fpi, wal_bytes, wal_sync, upd, hot;
} pgstat_t;

static void pg_snap(pgstat_t *s) {
    PGresult *r;
    memset(s, 0, sizeof *s);
    if (sql("SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),"
            " w.wal_records, w.wal_fpi, w.wal_bytes::bigint, w.wal_sync, t.n_tup_upd,"
            " t.n_tup_hot_upd FROM pg_stat_wal w, pg_stat_user_tables t"
            " WHERE t.relid = 'instance_state'::regclass",
            0, NULL, &r) < 0)
        return;
    if (PQntuples(r)) {
        s->commits = ax_pg_int(r, 0, 0);
        s->wal_records = ax_pg_int(r, 0, 1);
        s->wal_fpi = ax_pg_int(r, 0, 2);
        s->wal_bytes = ax_pg_int(r, 0, 3);
        s->wal_sync = ax_pg_int(r, 0, 4);
        s->upd = ax_pg_int(r, 0, 5);
        s->hot = ax_pg_int(r, 0, 6);
    }
    PQclear(r);
}

/* pg_stat_statements, when loaded and created: (queryid, calls, time). */
typedef struct stmts {
    int n;
    char (*id)[24];
    long long *calls, *rows;
    double *ms;
    char (*text)[96];
} stmts_t;

static int pgss_usable(void) {
    return sql_int("SELECT (to_regclass('pg_stat_statements') IS NOT NULL AND"
                   " current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%')::int",
                   0, NULL) == 1;
}

static void stmts_free(stmts_t *s) {
    free(s->id);
    free(s->calls);
    free(s->rows);
    free(s->ms);
    free(s->text);
    memset(s, 0, sizeof *s);
}

static int stmts_snap(stmts_t *s) {
    PGresult *r;
    memset(s, 0, sizeof *s);
    if (sql("SELECT queryid::text, calls, total_exec_time, rows,"
            "  left(regexp_replace(query, '\\s+', ' ', 'g'), 90)"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
            "   WHERE datname = current_database()) AND queryid IS NOT NULL",
            0, NULL, &r) < 0)
        return -1;
    int n = PQntuples(r);
    size_t cap = n ? (size_t)n : 1;
    s->id = calloc(cap, sizeof *s->id);
    s->calls = calloc(cap, sizeof *s->calls);
    s->rows = calloc(cap, sizeof *s->rows);
    s->ms = calloc(cap, sizeof *s->ms);
    s->text = calloc(cap, sizeof *s->text);
    if (!s->id || !s->calls || !s->rows || !s->ms || !s->text) {
        PQclear(r);
        stmts_free(s);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        snprintf(s->id[i], sizeof s->id[i], "%s", PQgetvalue(r, i, 0));
        s->calls[i] = ax_pg_int(r, i, 1);
        s->ms[i] = atof(PQgetvalue(r, i, 2));
        s->rows[i] = ax_pg_int(r, i, 3);
        snprintf(s->text[i], sizeof s->text[i], "%s", PQgetvalue(r, i, 4));
    }
    s->n = n;
    PQclear(r);
    return 0;
}

/* Print the `top` statements with the most execution time between a and b. */
static void stmts_report(const stmts_t *a, const stmts_t *b, double win_s, long results, int top) {
    int *order = calloc(b->n ? (size_t)b->n : 1, sizeof *order);
    double *dms = calloc(b->n ? (size_t)b->n : 1, sizeof *dms);
    long long *dcalls = calloc(b->n ? (size_t)b->n : 1, sizeof *dcalls);
    long long *drows = calloc(b->n ? (size_t)b->n : 1, sizeof *drows);
    if (!order || !dms || !dcalls || !drows)
        goto out;
    for (int i = 0; i < b->n; i++) {
        order[i] = i;
        dms[i] = b->ms[i];
        dcalls[i] = b->calls[i];
        drows[i] = b->rows[i];
        for (int k = 0; k < a->n; k++)
            if (strcmp(a->id[k], b->id[i]) == 0) {
                dms[i] -= a->ms[k];
                dcalls[i] -= a->calls[k];
                drows[i] -= a->rows[k];
                break;
            }
    }
    for (int i = 1; i < b->n; i++) /* insertion sort by time, descending */
        for (int k = i; k > 0 && dms[order[k]] > dms[order[k - 1]]; k--) {
            int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    for (int i = 0; i < b->n && i < top; i++) {
        int k = order[i];
        if (dcalls[k] <= 0)
            break;
        printf("stmt calls=%lld rows=%lld total_ms=%.0f mean_ms=%.2f us_per_result=%.1f "
               "pct_of_window=%.1f query=\"%s\"\n",
               dcalls[k], drows[k], dms[k], dms[k] / (double)dcalls[k],
               results > 0 ? dms[k] * 1000.0 / (double)results : 0,
               win_s > 0 ? dms[k] / (win_s * 10.0) : 0, b->text[k]);
    }
out:
    free(order);
    free(dms);
    free(dcalls);
    free(drows);
}

/* ---- the callback process ------------------------------------------------------ */

static int cb_spawn1(int idx, const char *bin, char **pass, int npass, const char *batch,
                     long n_budget) {
    char wid[96], bs[64], budget[64], logf[300];
    if (idx)
        snprintf(wid, sizeof wid, "worker.id=bench-cb-%d-callback-%d", (int)getpid(), idx);
    else
        snprintf(wid, sizeof wid, "worker.id=bench-cb-%d-callback", (int)getpid());
    if (idx)
        snprintf(logf, sizeof logf, "%s.%d", g_log, idx);
    else
        snprintf(logf, sizeof logf, "%s", g_log);
    snprintf(bs, sizeof bs, "callback.batch=%s", batch ? batch : "");
    snprintf(budget, sizeof budget, "callback.retry.budget=%ld", n_budget);
    char **av = calloc((size_t)npass + 12, sizeof *av);
    size_t ne = 0;
    while (environ[ne])
        ne++;
    char **env = calloc(ne + 2, sizeof *env);
    if (!av || !env) {
        free(av);
        free(env);
        return -1;
    }
    int k = 0;
    av[k++] = (char *)bin;
    av[k++] = "--set";
    av[k++] = "log.level=warn";
    if (n_budget > 0) {
        av[k++] = "--set";
        av[k++] = budget;
    }
    for (int i = 0; i < npass; i++)
        av[k++] = pass[i];
    if (batch) {
        av[k++] = "--set";
        av[k++] = bs;
    }
    av[k++] = "--set";
    av[k++] = wid;
    size_t e = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "AXCONF_TOPIC_PREFIX=", 20) != 0 &&
            strncmp(environ[i], "AXCONF_WORKER_ID=", 17) != 0)
            env[e++] = environ[i];
    char pre[128];
    snprintf(pre, sizeof pre, "AXCONF_TOPIC_PREFIX=%s", g_prefix);
    env[e++] = pre;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, logf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawn(&pid, bin, &fa, NULL, av, env);
    posix_spawn_file_actions_destroy(&fa);
    free(av);
    free(env);
    if (rc != 0) {
        fprintf(stderr, "bench_callback: cannot start %s: %s\n", bin, strerror(rc));
        return -1;
    }
    g_cbs[idx] = pid;
    return 0;
}

static int cb_spawn(const char *bin, char **pass, int npass, const char *batch, long n_budget) {
    for (int i = 0; i < g_ncb; i++)
        if (cb_spawn1(i, bin, pass, npass, batch, n_budget) < 0)
            return -1;
    return 0;
}

/* 1 while every callback runs. */
static int cb_alive(void) {
    for (int i = 0; i < g_ncb; i++) {
        if (g_cbs[i] <= 0)
            return 0;
        int st;
        if (waitpid(g_cbs[i], &st, WNOHANG) == g_cbs[i]) {
            fprintf(stderr, "bench_callback: callback %d exited (status %d); see %s%s\n", i, st,
                    g_log, i ? ".N" : "");
            g_cbs[i] = -1;
            return 0;
        }
    }
    return 1;
}

/* SIGTERM, up to 30 s for a clean stop, then SIGKILL. */
static void cb_stop(void) {
    for (int i = 0; i < g_ncb; i++)
        if (g_cbs[i] > 0)
            kill(g_cbs[i], SIGTERM);
    for (int i = 0; i < g_ncb; i++) {
        for (int k = 0; k < 300 && g_cbs[i] > 0; k++) {
            if (waitpid(g_cbs[i], NULL, WNOHANG) == g_cbs[i])
                g_cbs[i] = -1;
            else
                usleep(100 * 1000);
        }
        if (g_cbs[i] > 0) {
            fprintf(stderr, "bench_callback: callback %d did not stop in 30 s; SIGKILL\n", i);
            kill(g_cbs[i], SIGKILL);
            waitpid(g_cbs[i], NULL, 0);
            g_cbs[i] = -1;
        }
    }
}

/* ---- Kafka topics and groups ----------------------------------------------- */

static void delete_kafka(const ax_conf_t *conf, const char *prefix) {
    static const char *const groups[] = {"callback", "bench"};
    bench_delete_kafka("bench_callback", conf, prefix, groups, AX_ARRAY_SIZE(groups));
}

/* ---- database rows ---------------------------------------------------------- */

/* Everything a run of `prefix` (job `job`) left in the database: the
 * instances (attempt rows cascade), what the results outbox still holds
 * of them, the results topic's reconciled offsets, the job, its counters
 * untouched. */
static int delete_rows(const char *prefix, const char *job) {
    const char *pd[] = {prefix};
    const char *pj[] = {job};
    char results[300];
    snprintf(results, sizeof results, "%sresults", prefix);
    const char *pr[] = {results};
    if (bench_delete_instances(sql_int, "bench_callback", prefix) < 0)
        return -1; /* the job row stays for the next run */
    /* state rows without a definition (none expected), through the view */
    sql("DELETE FROM job_instance WHERE deployment = $1", 1, pd, NULL);
    sql("DELETE FROM ax_result_outbox WHERE deployment = $1", 1, pd, NULL);
    /* 020_result_batch (an older schema has no such table: the error is printed only) */
    sql("DELETE FROM ax_result_batch WHERE deployment = $1", 1, pd, NULL);
    sql("DELETE FROM ax_results_offset WHERE topic = $1", 1, pr, NULL);
    sql("DELETE FROM job WHERE name = $1", 1, pj, NULL);
    return 0;
}

static void cleanup(const ax_conf_t *conf) {
    cb_stop();
    if (g_pg) {
        int64_t t0 = ax_mono_ms();
        int rc = delete_rows(g_prefix, g_job);
        /* The next run should not pay for this one's dead rows. */
        sql("VACUUM (ANALYZE) instance_def, instance_state, job_attempt_log, job", 0, NULL, NULL);
        if (rc == 0)
            fprintf(stderr, "bench_callback: cleanup: rows deleted in %lld ms\n",
                    (long long)(ax_mono_ms() - t0));
    }
    delete_kafka(conf, g_prefix);
}

/* Runs whose benchmark process is gone. */
static void cleanup_stale(const ax_conf_t *conf) {
    PGresult *r;
    if (sql("SELECT substr(name, 10) FROM job WHERE name ~ '^bench-cb-[0-9]+$'", 0, NULL, &r) < 0)
        return;
    for (int i = 0; i < PQntuples(r); i++) {
        pid_t pid = (pid_t)atol(PQgetvalue(r, i, 0));
        if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        char prefix[64], job[64];
        snprintf(prefix, sizeof prefix, "bench.%d.", (int)pid);
        snprintf(job, sizeof job, "bench-cb-%d", (int)pid);
        if (delete_rows(prefix, job) < 0)
            continue; /* its job row stays: tried again by the next run */
        delete_kafka(conf, prefix);
        fprintf(stderr, "bench_callback: deleted what run %d left behind\n", (int)pid);
    }
    PQclear(r);
}

/* ---- set-up ---------------------------------------------------------------------- */

static int64_t *g_ids; /* the instances, by ordinal */
static long g_n;

/* Straight into the tables of migration 016 (job_instance is a view whose
 * INSTEAD OF trigger inserts row by row). $4 || g is the trace id: the
 * state row reads its ordinal back from it. */
static const char sql_instances[] =
    "WITH d AS (INSERT INTO instance_def (job_id, job_name, command, timeout_ms, nominal_time,"
    "  scheduled_at, trace_id, idempotency_key)"
    " SELECT $1::bigint, $2, '{true}', 3600000, now() - interval '2 s', now() - interval '2 s',"
    "   $4 || g, $4 || g"
    " FROM generate_series($6::bigint, $7::bigint) g RETURNING id, trace_id)"
    " INSERT INTO instance_state (id, job_id, deployment, attempt, state, due_at, worker,"
    "  lease_expires_at, dispatched_at, locked_at, running_at)"
    " SELECT d.id, $1::bigint, $5, 1, 'RUNNING', now() - interval '2 s',"
    "   $3 || (substr(d.trace_id, length($4) + 1)::bigint % 4), now() + interval '1 day',"
    "   now() - interval '1900 ms', now() - interval '1800 ms', now() - interval '1700 ms'"
    " FROM d";

static int setup(long n, int fail_pct) {
    const char *pj[] = {g_job, g_prefix};
    /* Failed attempts are retried after 10 minutes: rescheduled, never due
     * during the run. */
    g_job_id = sql_int("INSERT INTO job (name, command, retry_max, retry_initial_ms,"
                       "  retry_max_ms, retry_jitter_ms, deployment)"
                       " VALUES ($1, '{true}', 3, 600000, 600000, 0, $2) RETURNING id",
                       2, pj);
    if (g_job_id == INT64_MIN)
        return -1;
    char jid[32], wpre[64], tpre[64], a[32], b[32];
    snprintf(jid, sizeof jid, "%lld", (long long)g_job_id);
    snprintf(wpre, sizeof wpre, "bench-cb-%d-w", (int)getpid());
    snprintf(tpre, sizeof tpre, "bcb-%d-", (int)getpid());
    int64_t t0 = ax_mono_ms();
    for (long from = 0; from < n && !g_stop; from += 100000) {
        long to = from + 100000 < n ? from + 100000 - 1 : n - 1;
        snprintf(a, sizeof a, "%ld", from);
        snprintf(b, sizeof b, "%ld", to);
        const char *p[] = {jid, g_job, wpre, tpre, g_prefix, a, b};
        if (sql(sql_instances, 7, p, NULL) < 0)
            return -1;
    }
    if (g_stop)
        return -1;
    /* Ordinal -> id (the trace id holds the ordinal). */
    PGresult *r;
    const char *pi[] = {jid, tpre};
    if (sql("SELECT id, substr(trace_id, length($2) + 1)::bigint FROM job_instance"
            " WHERE job_id = $1::bigint",
            2, pi, &r) < 0)
        return -1;
    if (PQntuples(r) != n) {
        fprintf(stderr, "bench_callback: %d instances inserted, not %ld\n", PQntuples(r), n);
        PQclear(r);
        return -1;
    }
    g_ids = calloc((size_t)n, sizeof *g_ids);
    if (!g_ids) {
        PQclear(r);
        return -1;
    }
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t ord = ax_pg_int(r, i, 1);
        if (ord < 0 || ord >= n) {
            PQclear(r);
            return -1;
        }
        g_ids[ord] = ax_pg_int(r, i, 0);
    }
    PQclear(r);
    g_n = n;
    fprintf(stderr, "bench_callback: job %lld and %ld RUNNING instance(s) inserted in %lld ms"
                    " (%d%% to fail)\n",
            (long long)g_job_id, n, (long long)(ax_mono_ms() - t0), fail_pct);
    /* The same starting state for every run: statistics, visibility map
     * and hint bits set, no checkpoint pending (its full-page images). */
    t0 = ax_mono_ms();
    if (sql("VACUUM (ANALYZE) instance_def, instance_state, job_attempt_log, job", 0, NULL, NULL) < 0)
        return -1;
    if (sql("CHECKPOINT", 0, NULL, NULL) < 0)
        fprintf(stderr, "bench_callback: no CHECKPOINT (needs pg_checkpoint); continuing\n");
    fprintf(stderr, "bench_callback: vacuum + checkpoint in %lld ms\n",
            (long long)(ax_mono_ms() - t0));
    return 0;
}

/* ---- producing results ---------------------------------------------------------- */

static rd_kafka_t *g_rk;
static char g_topic[256];
static ax_delivery_t g_dlv;
static long g_produced;

/* Produce attempt results [g_produced, upto). */
static int produce_upto(long upto, int fail_pct) {
    char err[512], key[32], trace[64], worker[64];
    snprintf(worker, sizeof worker, "bench-cb-%d-w", (int)getpid());
    for (; g_produced < upto && !g_stop; g_produced++) {
        long i = g_produced;
        int64_t now = ax_now_ms();
        int fail = (int)(i % 100) < fail_pct;
        snprintf(trace, sizeof trace, "bcb-%d-%ld", (int)getpid(), i);
        ax_attempt_t a = {
            .instance_id = g_ids[i],
            .attempt = 1,
            .worker = worker,
            .outcome = fail ? AX_OUTCOME_FAILED : AX_OUTCOME_SUCCESS,
            .exit_code = fail ? 1 : 0,
            .exit_code_set = 1,
            .error_class = fail ? "exit" : NULL,
            .error = fail ? "exit status 1" : NULL,
            .output = "",
            .started_at_ms = now,
            .finished_at_ms = now,
            .trace_id = trace,
            .retryable = 1,
        };
        void *buf;
        size_t len;
        if (ax_attempt_encode(&a, &buf, &len) < 0) {
            fprintf(stderr, "bench_callback: cannot encode an attempt\n");
            return -1;
        }
        int klen = snprintf(key, sizeof key, "%lld", (long long)g_ids[i]);
        int rc = ax_kafka_produce(g_rk, g_topic, key, (size_t)klen, buf, len, NULL, &g_dlv, err,
                                  sizeof err);
        free(buf);
        if (rc < 0) {
            fprintf(stderr, "bench_callback: %s\n", err);
            return -1;
        }
        if (i % 1000 == 0)
            rd_kafka_poll(g_rk, 0);
    }
    rd_kafka_poll(g_rk, 0);
    return g_stop ? -1 : 0;
}

/* ---- progress -------------------------------------------------------------------- */

static rd_kafka_t *g_rc;  /* reads <prefix>results */
static uint8_t *g_seen;   /* bit (id - g_lo): an outcome for it was read */
static int64_t g_lo, g_hi;
static int64_t g_floor; /* every id below it was seen on the results topic */
static long g_nseen;

static int results_poll(int timeout_ms) {
    int64_t end = ax_mono_ms() + timeout_ms;
    for (;;) {
        int64_t left = end - ax_mono_ms();
        rd_kafka_message_t *m = rd_kafka_consumer_poll(g_rc, left > 0 ? (int)left : 0);
        if (!m)
            return 0;
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                fprintf(stderr, "bench_callback: results: %s\n", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        char key[32];
        size_t kl = m->key_len < sizeof key - 1 ? m->key_len : sizeof key - 1;
        memcpy(key, m->key ? m->key : "", m->key ? kl : 0);
        key[m->key ? kl : 0] = 0;
        rd_kafka_message_destroy(m);
        int64_t id = atoll(key);
        if (id < g_lo || id > g_hi)
            continue;
        size_t bit = (size_t)(id - g_lo);
        if (!(g_seen[bit / 8] & (1u << (bit % 8)))) {
            g_seen[bit / 8] |= (uint8_t)(1u << (bit % 8));
            g_nseen++;
        }
    }
}

typedef struct sample {
    int64_t mono_ms;
    long persisted, published, retried;
} sample_t;

static int sample(sample_t *s, int fail_pct) {
    if (results_poll(0) < 0)
        return -1;
    char lo[32], hi[32];
    /* Finished but not yet read from the results topic: near the lowest
     * id not seen yet. No index covers result_published_at (so that the
     * publish mark can be a HOT update), so the count looks at a window of
     * ids from there rather than at all N rows. */
    while (g_floor <= g_hi) {
        size_t bit = (size_t)(g_floor - g_lo);
        if (!(g_seen[bit / 8] & (1u << (bit % 8))))
            break;
        g_floor++;
    }
    snprintf(lo, sizeof lo, "%lld", (long long)g_floor);
    snprintf(hi, sizeof hi, "%lld", (long long)(g_floor + 50000 < g_hi ? g_floor + 50000 : g_hi));
    const char *p[] = {lo, hi, g_prefix};
    PGresult *r;
    if (sql(fail_pct > 0
                ? "SELECT (SELECT count(*) FROM job_instance WHERE state = 'FINISHED'"
                  "   AND result_published_at IS NULL AND id BETWEEN $1::bigint AND $2::bigint"
                  "   AND deployment = $3),"
                  " (SELECT count(*) FROM job_instance WHERE state = 'SCHEDULED' AND attempt > 1"
                  "   AND deployment = $3)"
                : "SELECT (SELECT count(*) FROM job_instance WHERE state = 'FINISHED'"
                  "   AND result_published_at IS NULL AND id BETWEEN $1::bigint AND $2::bigint"
                  "   AND deployment = $3), 0",
            3, p, &r) < 0)
        return -1;
    long unpub = (long)ax_pg_int(r, 0, 0);
    s->retried = (long)ax_pg_int(r, 0, 1);
    PQclear(r);
    s->published = g_nseen;
    s->persisted = g_nseen + unpub + s->retried;
    if (s->persisted > g_n)
        s->persisted = g_n;
    s->mono_ms = ax_mono_ms();
    return 0;
}

/* ---- the run ------------------------------------------------------------------------ */

static int run(const char *bin, long n, const char *batch, int fail_pct, int live, double rate,
               long stall_s, int partitions, char **pass, int npass) {
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "bench_callback: %s: %s\n", bin, strerror(errno));
        return 1;
    }
    if (setup(n, fail_pct) < 0)
        return 1;
    g_lo = g_hi = g_ids[0];
    for (long i = 0; i < n; i++) {
        if (g_ids[i] < g_lo)
            g_lo = g_ids[i];
        if (g_ids[i] > g_hi)
            g_hi = g_ids[i];
    }
    g_seen = calloc((size_t)(g_hi - g_lo) / 8 + 1, 1);
    g_floor = g_lo;
    if (!g_seen)
        return 1;
    int use_pgss = pgss_usable();
    stmts_t st0 = {0}, st1 = {0};
    pgstat_t s0, s1;
    double load0 = loadavg1();
    int64_t t_prod = ax_mono_ms();
    if (!live) {
        if (produce_upto(n, fail_pct) < 0)
            return 1;
        if (ax_kafka_wait(g_rk, &g_dlv, 120000) < 0) {
            fprintf(stderr, "bench_callback: results not acknowledged by Kafka\n");
            return 1;
        }
        fprintf(stderr, "bench_callback: %ld attempt result(s) produced in %lld ms\n", n,
                (long long)(ax_mono_ms() - t_prod));
    }
    if (use_pgss && stmts_snap(&st0) < 0)
        use_pgss = 0;
    pg_snap(&s0);
    int64_t t_spawn = ax_mono_ms();
    if (cb_spawn(bin, pass, npass, batch, fail_pct > 0 ? n : 0) < 0)
        return 1;
    /* Its PostgreSQL session: the newest ax-callback backend. */
    while (!g_stop && !g_cb_backend) {
        if (!cb_alive())
            return 1;
        PGresult *br = NULL;
        char lim[16];
        snprintf(lim, sizeof lim, "%d", g_ncb);
        const char *bp[] = {lim};
        if (sql("SELECT pid FROM pg_stat_activity WHERE application_name = 'ax-callback'"
                " AND backend_start > now() - interval '60 s'"
                " ORDER BY backend_start DESC LIMIT $1::int",
                1, bp, &br) == 0 &&
            PQntuples(br) == g_ncb) {
            for (int i = 0; i < g_ncb; i++)
                g_cb_backends[i] = (pid_t)ax_pg_int(br, i, 0);
            g_cb_backend = g_cb_backends[0];
        }
        PQclear(br);
        if (g_cb_backend > 0)
            continue;
        else if (ax_mono_ms() - t_spawn > 60000) {
            fprintf(stderr, "bench_callback: the callback did not connect in 60 s\n");
            return 1;
        }
        else
            nap(50);
    }
    int64_t t_connected = ax_mono_ms();
    /* Sample every second until published + rescheduled = N. */
    size_t cap = 256;
    int ns = 0;
    sample_t *sv = calloc(cap, sizeof *sv);
    if (!sv)
        return 1;
    cpu_t c0, c1;
    int started = 0, first = -1;
    int64_t next = ax_mono_ms(), t_live0 = 0, last_change = ax_mono_ms();
    long last_persisted = -1;
    sample_t cur = {0};
    if (live) {
        cpu_snap(&c0, NULL); /* the window starts with production */
        started = 1;
        t_live0 = mono_us();
    }
    int rc = 1;
    for (;;) {
        if (g_stop || !cb_alive())
            goto out;
        if (live && g_produced < n) {
            long upto = g_produced + 20000; /* a bounded slice: keep sampling */
            if (upto > n)
                upto = n;
            if (rate > 0) {
                upto = (long)((double)(mono_us() - t_live0) * rate / 1e6) + 1;
                if (upto > n)
                    upto = n;
            }
            if (produce_upto(upto, fail_pct) < 0)
                goto out;
        }
        int64_t now = ax_mono_ms();
        if (now < next) {
            if (live && g_produced < n) {
                rd_kafka_poll(g_rk, 1);
                continue;
            }
            nap(next - now);
            continue;
        }
        next += 1000;
        if (next <= now) /* production held the loop up: skip, keep ~1 s intervals */
            next = now + 1000;
        if (sample(&cur, fail_pct) < 0)
            goto out;
        if (!started && cur.persisted > 0) {
            cpu_snap(&c0, NULL);
            started = 1;
        }
        if (started) {
            if ((size_t)ns == cap) {
                sample_t *nv = realloc(sv, cap * 2 * sizeof *sv);
                if (!nv)
                    goto out;
                sv = nv;
                cap *= 2;
            }
            if (first < 0 && cur.persisted > 0)
                first = ns;
            sv[ns++] = cur;
        }
        if (cur.published + cur.retried >= n)
            break;
        if (cur.persisted != last_persisted) {
            last_persisted = cur.persisted;
            last_change = ax_mono_ms();
        } else if (ax_mono_ms() - last_change > stall_s * 1000) {
            fprintf(stderr, "bench_callback: %ld persisted, %ld published, %ld rescheduled of %ld;"
                            " no progress in %ld s; see %s\n",
                    cur.persisted, cur.published, cur.retried, n, stall_s, g_log);
            goto out;
        }
    }
    cpu_snap(&c1, &c0);
    double load1 = loadavg1();
    cb_stop(); /* its backend flushes its statistics when it exits */
    nap(1200);
    pg_snap(&s1);
    if (use_pgss && stmts_snap(&st1) < 0)
        use_pgss = 0;
    double win = (double)(c1.mono_ms - c0.mono_ms) / 1000.0;
    /* Per-second rates: full seconds from the first persisted sample on. */
    double *pr = calloc((size_t)ns + 1, sizeof *pr), *pu = calloc((size_t)ns + 1, sizeof *pu);
    if (!pr || !pu) {
        free(pr);
        free(pu);
        goto out;
    }
    int nr = 0;
    char per[8192] = "";
    size_t perlen = 0;
    for (int i = first < 0 ? ns : first + 1; i < ns - 1; i++) {
        double dt = (double)(sv[i].mono_ms - sv[i - 1].mono_ms) / 1000.0;
        pr[nr] = (double)(sv[i].persisted - sv[i - 1].persisted) / dt;
        pu[nr] = (double)(sv[i].published - sv[i - 1].published) / dt;
        if (perlen < sizeof per - 32)
            perlen += (size_t)snprintf(per + perlen, sizeof per - perlen, "%s%.0f", nr ? "," : "",
                                       pr[nr]);
        nr++;
    }
    double pr_med = median(pr, nr), pu_med = median(pu, nr);
    free(pr);
    free(pu);
    /* PostgreSQL's account. */
    char jid[32];
    snprintf(jid, sizeof jid, "%lld", (long long)g_job_id);
    const char *pj[] = {jid};
    PGresult *r;
    if (sql("SELECT count(*) FILTER (WHERE state = 'FINISHED' AND result_published_at IS NOT NULL),"
            "  count(*) FILTER (WHERE state = 'SCHEDULED' AND attempt = 2),"
            "  count(*) FILTER (WHERE outcome = 'SUCCESS'),"
            "  count(*) FILTER (WHERE outcome <> 'SUCCESS'),"
            "  extract(epoch FROM max(result_published_at)),"
            "  count(*)"
            " FROM job_instance WHERE job_id = $1::bigint",
            1, pj, &r) < 0)
        goto out;
    long fin_pub = (long)ax_pg_int(r, 0, 0), resched = (long)ax_pg_int(r, 0, 1);
    long ok = (long)ax_pg_int(r, 0, 2), bad = (long)ax_pg_int(r, 0, 3);
    double last_pub = atof(PQgetvalue(r, 0, 4));
    long count = (long)ax_pg_int(r, 0, 5);
    PQclear(r);
    if (sql("SELECT count(*), extract(epoch FROM min(a.finished_at)),"
            "  extract(epoch FROM max(a.finished_at)),"
            "  round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM"
            "    a.finished_at - a.started_at) * 1000))::numeric, 1) || '/' ||"
            "  round((percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM"
            "    a.finished_at - a.started_at) * 1000))::numeric, 1) || '/' ||"
            "  round(extract(epoch FROM max(a.finished_at - a.started_at)) * 1000)"
            " FROM job_attempt a JOIN job_instance i ON i.id = a.instance_id"
            " WHERE i.job_id = $1::bigint",
            1, pj, &r) < 0)
        goto out;
    long attempts = (long)ax_pg_int(r, 0, 0);
    double a_first = atof(PQgetvalue(r, 0, 1)), a_last = atof(PQgetvalue(r, 0, 2));
    char lat[96];
    snprintf(lat, sizeof lat, "%s", PQgetvalue(r, 0, 3));
    PQclear(r);
    double span = a_last - a_first, span_pub = last_pub - a_first;
    char rate_s[32];
    if (!live)
        snprintf(rate_s, sizeof rate_s, "backlog");
    else if (rate > 0)
        snprintf(rate_s, sizeof rate_s, "%.0f", rate);
    else
        snprintf(rate_s, sizeof rate_s, "max");
    printf("mode=%s n=%ld batch=%s fail_pct=%d partitions=%d\n", live ? "live" : "backlog", n,
           batch ? batch : "default", fail_pct, partitions);
    printf("persisted_per_s_median=%.0f persisted_per_s_overall=%.0f published_per_s_median=%.0f "
           "published_per_s_overall=%.0f span_s=%.2f window_s=%.1f seconds_sampled=%d "
           "spawn_to_connected_ms=%lld\n",
           pr_med, span > 0 ? (double)attempts / span : 0, pu_med,
           span_pub > 0 ? (double)fin_pub / span_pub : 0, span, win, nr,
           (long long)(t_connected - t_spawn));
    if (live)
        printf("offered_per_s=%s produced_to_persisted_ms_p50_p99_max=%s\n", rate_s, lat);
    long long pgd = 0;
    for (int i = 0; i < c0.npg; i++)
        if (c0.pg[i] >= 0 && c1.pg[i] >= c0.pg[i])
            pgd += c1.pg[i] - c0.pg[i];
    printf("cpu_pct_callback=%.0f cpu_pct_callback_backend=%.0f cpu_pct_postgres=%.0f "
           "cpu_pct_kafka=%.0f cpu_pct_bench=%.0f machine_busy_pct=%.0f loadavg1_before=%.2f "
           "loadavg1_after=%.2f\n",
           pct(c1.cb - c0.cb, win),
           c0.cb_backend >= 0 && c1.cb_backend >= 0 ? pct(c1.cb_backend - c0.cb_backend, win)
                                                    : -1.0,
           pct(pgd, win), c0.kpid ? pct(c1.kafka - c0.kafka, win) : -1.0,
           pct(c1.self - c0.self, win),
           c1.mtotal > c0.mtotal
               ? (double)(c1.mbusy - c0.mbusy) * 100.0 / (double)(c1.mtotal - c0.mtotal)
               : 0.0,
           load0, load1);
    /* Where the two serial halves of the pipeline spent the window: on a
     * CPU, waiting for one (the machine is shared), or blocked (I/O, the
     * other half, Kafka). */
    double wns = win * 1e9;
    if (c0.cb_run >= 0 && c1.cb_run >= 0 && c0.be_run >= 0 && c1.be_run >= 0 && wns > 0)
        printf("callback_main_thread_pct_on_cpu=%.0f callback_main_thread_pct_runqueue=%.0f "
               "backend_pct_on_cpu=%.0f backend_pct_runqueue=%.0f\n",
               (double)(c1.cb_run - c0.cb_run) * 100.0 / wns,
               (double)(c1.cb_wait - c0.cb_wait) * 100.0 / wns,
               (double)(c1.be_run - c0.be_run) * 100.0 / wns,
               (double)(c1.be_wait - c0.be_wait) * 100.0 / wns);
    long long dupd = s1.upd - s0.upd;
    printf("pg_commits_per_result=%.3f pg_wal_records_per_result=%.1f pg_wal_bytes_per_result=%.0f "
           "pg_wal_fpi_per_result=%.2f pg_wal_syncs=%lld instance_state_updates_per_result=%.2f "
           "instance_state_hot_pct=%.0f\n",
           (double)(s1.commits - s0.commits) / (double)n,
           (double)(s1.wal_records - s0.wal_records) / (double)n,
           (double)(s1.wal_bytes - s0.wal_bytes) / (double)n,
           (double)(s1.wal_fpi - s0.wal_fpi) / (double)n, s1.wal_sync - s0.wal_sync,
           (double)dupd / (double)n, dupd > 0 ? (double)(s1.hot - s0.hot) * 100.0 / (double)dupd : 0);
    printf("instances=%ld finished_published=%ld rescheduled=%ld success=%ld not_success=%ld "
           "job_attempt_rows=%ld\n",
           count, fin_pub, resched, ok, bad, attempts);
    printf("persisted_per_s_samples=%s\n", per);
    if (use_pgss)
        stmts_report(&st0, &st1, win, n, 8);
    else
        printf("stmt=unavailable (pg_stat_statements not loaded or not created)\n");
    long want_fail = 0;
    for (long i = 0; i < n; i++)
        want_fail += (int)(i % 100) < fail_pct;
    if (count != n || fin_pub + resched != n || resched != want_fail || attempts != n) {
        fprintf(stderr,
                "bench_callback: expected %ld finished and published + %ld rescheduled, got %ld +"
                " %ld (%ld job_attempt rows)\n",
                n - want_fail, want_fail, fin_pub, resched, attempts);
        rc = 3;
    } else {
        rc = 0;
    }
out:
    free(sv);
    stmts_free(&st0);
    stmts_free(&st1);
    return rc;
}

/* ---- main ------------------------------------------------------------------ */

static const char usage[] =
    "Usage: bench_callback [--config F] [--set k=v]... [--partitions P] [--fail-pct P]\n"
    "                      [--live RATE] [--callbacks K] [--timeout S] AX_CALLBACK N [BATCH]\n"
    "Backlog mode by default (all N results produced before the callback starts);\n"
    "--live RATE produces them while it runs, RATE/s (0 = as fast as possible).\n"
    "--config and --set are passed on to the callback (except topic.prefix, worker.id).\n";

int main(int argc, char **argv) {
    /* What the callback gets of our options, taken before they are consumed. */
    char **pass = calloc((size_t)argc + 1, sizeof *pass);
    int npass = 0;
    if (!pass)
        return 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if ((strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--set") == 0) && i + 1 < argc) {
            if (strcmp(argv[i], "--set") == 0 && (strncmp(argv[i + 1], "topic.prefix=", 13) == 0 ||
                                                  strncmp(argv[i + 1], "worker.id=", 10) == 0)) {
                i++;
                continue;
            }
            pass[npass++] = argv[i];
            pass[npass++] = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0 ||
                   (strncmp(argv[i], "--set=", 6) == 0 &&
                    strncmp(argv[i] + 6, "topic.prefix=", 13) != 0 &&
                    strncmp(argv[i] + 6, "worker.id=", 10) != 0)) {
            pass[npass++] = argv[i];
        }
    }
    ax_conf_t conf;
    ax_conf_from_args(&conf, &argc, argv, "bench_callback", usage, NULL);
    int partitions = 6, fail_pct = 0, live = 0;
    long stall_s = 60;
    double rate = 0;
    long long v = 0;
    int ai = 1;
    /* --timeout: up to ~31 years, so that S * 1000 cannot overflow. */
#define INT_OPT(name, lo, hi, var)                                                             \
    else if (strcmp(argv[ai], name) == 0 && ai + 1 < argc) {                                   \
        if (!bench_int_arg("bench_callback", name, argv[++ai], lo, hi, &v))                    \
            return 2;                                                                          \
        var = v;                                                                               \
    }
    for (; ai < argc && strncmp(argv[ai], "--", 2) == 0; ai++) {
        if (strcmp(argv[ai], "--live") == 0 && ai + 1 < argc) {
            live = 1;
            if (!bench_num_arg("bench_callback", "--live", argv[++ai], 0, 1e9, &rate))
                return 2;
        }
        INT_OPT("--partitions", 1, INT_MAX, partitions)
        INT_OPT("--fail-pct", 0, 100, fail_pct)
        INT_OPT("--callbacks", 1, MAX_CB, g_ncb)
        INT_OPT("--timeout", 1, 1000000000, stall_s)
        else {
            fprintf(stderr, "%s", usage);
            return 2;
        }
    }
#undef INT_OPT
    if (argc - ai != 2 && argc - ai != 3) {
        fprintf(stderr, "%s", usage);
        return 2;
    }
    const char *bin = argv[ai];
    const char *batch = argc - ai == 3 ? argv[ai + 2] : NULL;
    long long n_ll = 0, batch_ll = 0;
    if (!bench_int_arg("bench_callback", "N", argv[ai + 1], 1, LONG_MAX, &n_ll) ||
        (batch && !bench_int_arg("bench_callback", "BATCH", batch, 1, LONG_MAX, &batch_ll)))
        return 2;
    long n = (long)n_ll;
    char err[512];
    snprintf(g_prefix, sizeof g_prefix, "bench.%d.", (int)getpid());
    snprintf(g_job, sizeof g_job, "bench-cb-%d", (int)getpid());
    snprintf(g_log, sizeof g_log, "/tmp/bench_callback.%d.log", (int)getpid());
    if (ax_conf_set(&conf, "topic.prefix", g_prefix, "bench_callback", err, sizeof err) < 0) {
        fprintf(stderr, "bench_callback: %s\n", err);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (ax_codec_init(err, sizeof err) < 0) {
        fprintf(stderr, "bench_callback: %s\n", err);
        return 1;
    }
    g_pg = ax_pg_new(&conf, "bench_callback", err, sizeof err);
    if (!g_pg || ax_pg_ensure(g_pg, err, sizeof err) < 0) {
        fprintf(stderr, "bench_callback: %s\n", err);
        return 1;
    }
    cleanup_stale(&conf);
    g_rk = ax_kafka_producer_new(&conf, "bench-callback", err, sizeof err);
    if (!g_rk) {
        fprintf(stderr, "bench_callback: %s\n", err);
        return 1;
    }
    ax_conf_topic(&conf, "callback", g_topic, sizeof g_topic);
    int rc = 1;
    char group[128], results[256];
    ax_conf_topic(&conf, "bench", group, sizeof group);
    const char *rt[] = {ax_conf_topic(&conf, "results", results, sizeof results)};
    if (ax_kafka_create_topics(&conf, partitions, partitions, 0, err, sizeof err) < 0 ||
        !(g_rc = ax_kafka_consumer_new(&conf, group, "bench-callback", err, sizeof err)) ||
        ax_kafka_subscribe(g_rc, rt, 1, err, sizeof err) < 0)
        fprintf(stderr, "bench_callback: %s\n", err);
    else
        rc = run(bin, n, batch, fail_pct, live, rate, stall_s, partitions, pass, npass);
    if (g_stop)
        fprintf(stderr, "bench_callback: interrupted\n");
    fflush(stdout);
    if (g_rc) {
        rd_kafka_consumer_close(g_rc);
        rd_kafka_destroy(g_rc);
    }
    free(g_seen);
    free(g_ids);
    rd_kafka_purge(g_rk, RD_KAFKA_PURGE_F_QUEUE);
    rd_kafka_flush(g_rk, 5000);
    rd_kafka_destroy(g_rk);
    cleanup(&conf);
    fprintf(stderr, "bench_callback: log: %s\n", g_log);
    ax_pg_destroy(g_pg);
    ax_codec_shutdown();
    ax_conf_free(&conf);
    free(pass);
    return rc;
}
