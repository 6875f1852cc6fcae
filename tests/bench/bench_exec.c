/*
 * bench_exec — the executor end to end: submit -> ingest -> dispatch ->
 * claim -> run -> persist -> publish, with a plugin handler, every state
 * transition durable.
 *
 * Inserts one plugin job (MODE noop: ax-noop.so; sleep10: ax-sleep.so 10),
 * starts ax-trigger, ax-callback and EXECUTORS x ax-executor from BUILD_DIR
 * on a topic prefix of its own (bench.<pid>.), waits until every executor
 * has a row in the worker table, then warms up: rounds of --warmup
 * submissions until every executor has run some (the consumer group is
 * balanced) and all are published. Then it produces N submissions of the
 * job to <prefix>submit (as fast as possible, or RATE per second), waits
 * until all N are FINISHED with result_published_at set (progress is read
 * from <prefix>results, so the wait adds no load to PostgreSQL; one count
 * there confirms it), and prints, from PostgreSQL's timestamps of the N
 * instances (the warm-up excluded):
 *
 *   completed_per_s   N / (last finished_at - first scheduled_at)
 *   sched_fin_ms      finished_at - scheduled_at, p50/p99/max
 *   fire_start_ms     running_at - due_at (fire-to-start), p50/p99/max
 *   submit_run_ms     running_at - the submission's produce time (in its trace
 *                     id, the bench's clock), p50/p99: what the stamps taken
 *                     from the ingest on do not show, the wait before it
 *   stage_*_ms        due->dispatched, dispatched->locked, locked->running,
 *                     running->finished, finished->published, p50/p99
 *   cpu_pct_*         CPU over the measurement window (submission start to
 *                     the last result seen), % of one core: trigger,
 *                     callback, each executor, PostgreSQL (the processes
 *                     pg_stat_activity lists, this connection's backend
 *                     excluded), Kafka (when AX_STATE/run/kafka.pid is
 *                     readable), this program, and the whole machine
 *   cpu_pct_kafka_{jit,gc,work}
 *                     the broker's CPU split by thread (only when its pid
 *                     is known): the JVM's JIT compilers ("C1 Compiler*",
 *                     "C2 Compiler*"), its garbage collector ("GC *",
 *                     "G1 *"), and the rest (cpu_pct_kafka less those two;
 *                     it also holds the CPU of threads that ended within the
 *                     window); every run creates and deletes fresh topics,
 *                     which keeps the compilers working: _jit is a cost a
 *                     broker that keeps its topics mostly stops paying
 *   cpu_us_per_job_*  the same CPU, µs per job: trigger, callback, executors
 *                     (summed), the three services, the broker's _work
 *                     (kafka_work, only when its pid is known);
 *                     window_epoch_ms: the window's start and end, ms since
 *                     the epoch
 *   pg_*              commits, WAL records/bytes and WAL syncs per job: the
 *                     bytes from the WAL insert position (exact, the whole
 *                     cluster's), the rest pg_stat_database and pg_stat_wal
 *                     deltas, which each backend flushes at most once a
 *                     second (later when idle): a burst of about a second
 *                     under-reports them (2-4 WAL records per job printed
 *                     against ~12.5 in pg_stat_statements)
 *   outcomes          counts by outcome; anything but SUCCESS, or an
 *                     attempt > 1, makes the exit status 3
 *
 * Usage: bench_exec [--config F] [--set k=v]... [--partitions P]
 *                   [--service-partitions Q] [--warmup W]
 *                   [--timeout S] [--submit-chunk K] [--metrics-port BASE]
 *                   [--reuse-topics] [--timeline MS] [--live S]
 *                   BUILD_DIR MODE EXECUTORS N [RATE]
 *
 * --config and --set (except topic.prefix) are passed on to every service,
 * after a default --set log.level=warn (a later --set wins); each service
 * also gets worker.id=bench-<pid>-<service> and AXCONF_TOPIC_PREFIX. Logs:
 * /tmp/bench_exec.<pid>.<service>.log. --timeout: give up when no instance
 * was published for S seconds (default 60). --submit-chunk K: this
 * program's submissions go to the submit topic's partitions K at a time in
 * turn (ax_kafka_chunk_hint), as a client batching its records would,
 * instead of each to its key's (trace id) partition, as axctl submit does
 * (default: submit.partition.chunk of the configuration, 128; 0: by key).
 * --partitions P (default 8): the dispatch lanes' partitions;
 * --service-partitions Q: submit's, callback's, results' and dlq's (default
 * as axctl topics create: ax_kafka_service_partitions(P), 2 for P >= 2).
 * --reuse-topics: the topic prefix is bench.reuse.p<P>s<Q>.
 * its topics (created when missing), consumer groups and submit-topic
 * watermarks are left for the next run, which resumes from the committed
 * offsets (the rows of the run are deleted as always; results are told
 * apart by instance id; this program commits its results consumer's
 * positions at the end): the broker then works as for a long-lived
 * deployment, not on nine new topics and their fresh index files per run
 * (BENCHMARKS.md, "Issue #13: the publish mark per batch"). One such run
 * at a time (the bench lock).
 * --timeline MS: after the summary, per MS-long bucket since the first
 * instance was scheduled, how many reached each state in it (timeline B:
 * scheduled dispatched locked running finished): which stage fell behind,
 * and when (BENCHMARKS.md, "Issue #13: the lag sample on demand").
 * --live S: while the run goes on, every S seconds a line
 *   live t_s=T n=K fire_start_ms=P50/P99 sched_fin_ms=P50/P99 submit_run_ms=P50/P99 not_success=F
 * of the results read in those S seconds, from the Result records
 * themselves (running_at - scheduled_at: for these jobs, due when
 * ingested, fire-to-start; finished_at - scheduled_at; running_at - the
 * produce time in the trace id): no statement on PostgreSQL, where
 * tests/bench/sustained.sh's query of each minute's rows took 5-8 s of a
 * core at 10,000 jobs/s. The results consumer is polled between
 * submissions too; an interval nothing finished in prints -/-.
 * --metrics-port BASE: each service gets metrics.listen=127.0.0.1:BASE+i
 * (0 trigger, 1 callback, 2.. the executors; before --set, which wins), so
 * a scraper started once finds every run's endpoints (default 0: none).
 *
 * Cleanup on every way out (also SIGINT/SIGTERM/SIGHUP of the benchmark):
 * the services get SIGTERM (SIGKILL after 30 s), then the job, every
 * instance of the deployment (attempt rows cascade), its
 * dispatch_pending rows, leader row and worker rows are deleted, the
 * topics and consumer groups too. Jobs of an earlier run whose benchmark
 * process no longer exists (bench-exec-<pid>) are removed at start with
 * their deployment's rows and topics.
 */
#include <dirent.h>
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

#define MAX_EXECUTORS 64
#define NPROC (MAX_EXECUTORS + 2)

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static ax_pg_t *g_pg;
static char g_prefix[64]; /* bench.<pid>., or bench.reuse.p<P>s<Q>. with --reuse-topics */
static int g_reuse; /* --reuse-topics: the topics and groups outlive the run */
static int g_svc_partitions; /* --service-partitions, as created */
static int g_timeline_ms; /* --timeline MS: per-stage counts per bucket of MS */
static int g_live_s;      /* --live S: latencies of the results read, every S seconds */
static int g_live_on;     /* from the measurement's first submission on */
static int results_poll(int timeout_ms);
static void live_tick(void);
static char g_job[64];    /* bench-exec-<pid> */
static int64_t g_job_id;

/* The services: [0] trigger, [1] callback, [2..] executors. */
static bench_proc_t g_proc[NPROC];
static int g_nproc;

static int sql(const char *text, int n, const char *const *p, PGresult **r) {
    char err[1024];
    int rc = ax_pg_exec(g_pg, text, n, p, NULL, NULL, r, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "bench_exec: %s\n", err);
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

/* ---- /proc --------------------------------------------------------------- */

/* The broker's CPU by thread class: the JVM's JIT compilers (threads named
 * "C1 CompilerThre", "C2 CompilerThre": comm is cut at 15 characters), its
 * garbage collector ("GC Thread#N", "G1 Main Marker", "G1 Conc#N",
 * "G1 Refine#N", "G1 Service") and the rest. Every run creates and deletes
 * fresh topics, so the compilers may still be busy long after the broker
 * started: cpu_pct_kafka alone is not the broker's steady-state cost. */
enum { KT_WORK, KT_JIT, KT_GC, KT_N };
#define MAX_KTASKS 1024

typedef struct ktask {
    pid_t tid;
    int cls;         /* KT_* */
    long long ticks; /* utime + stime */
} ktask_t;

typedef struct cpu {
    long long svc[NPROC];
    int npg;
    pid_t pgpid[256];
    long long pg[256];
    long long kafka, self, mbusy, mtotal;
    pid_t kpid;
    int nkt; /* the broker's threads in kt, -1: not read */
    ktask_t kt[MAX_KTASKS];
    int64_t mono_ms;
} cpu_t;

static int ktask_class(const char *name, size_t len) {
    static const char *const jit[] = {"C1 Compiler", "C2 Compiler"};
    static const char *const gc[] = {"GC Thread", "G1 ", "GC "};
    for (size_t i = 0; i < AX_ARRAY_SIZE(jit); i++)
        if (len >= strlen(jit[i]) && memcmp(name, jit[i], strlen(jit[i])) == 0)
            return KT_JIT;
    for (size_t i = 0; i < AX_ARRAY_SIZE(gc); i++)
        if (len >= strlen(gc[i]) && memcmp(name, gc[i], strlen(gc[i])) == 0)
            return KT_GC;
    return KT_WORK;
}

/* utime + stime of thread tid of pid in clock ticks and its class, or -1. */
static long long task_ticks(pid_t pid, pid_t tid, int *cls) {
    char path[96], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    const char *name;
    size_t len;
    long long t = stat_ticks(path, buf, sizeof buf, &name, &len);
    if (t >= 0)
        *cls = ktask_class(name, len);
    return t;
}

/* Every thread of the broker (c->kpid) with its ticks; c->nkt = -1 when the
 * list cannot be read whole. */
static void ktasks_snap(cpu_t *c) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)c->kpid);
    c->nkt = -1;
    DIR *d = opendir(path);
    if (!d)
        return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end || tid <= 0)
            continue; /* . and .. */
        if (n == MAX_KTASKS) {
            closedir(d);
            return;
        }
        int cls;
        long long t = task_ticks(c->kpid, (pid_t)tid, &cls);
        if (t < 0)
            continue; /* ended since readdir */
        c->kt[n++] = (ktask_t){(pid_t)tid, cls, t};
    }
    closedir(d);
    c->nkt = n;
}

/* Ticks per class over the window, or -1 when either end was not read: each
 * thread alive at the end, less its ticks at the start (0 if born since).
 * Threads that ended within the window are lost: their CPU is in the
 * process's cpu_pct_kafka (a thread's times join the process's when it ends)
 * but in no class, so it lands in _work. The JVM retires compiler threads it
 * added when idle, never the first C1 and C2 ones; with CICompilerCount=2 (a
 * 2-core machine) there are no others. */
static void ktasks_delta(const cpu_t *c0, const cpu_t *c1, long long d[KT_N]) {
    for (int k = 0; k < KT_N; k++)
        d[k] = c0->nkt < 0 || c1->nkt < 0 ? -1 : 0;
    if (d[0] < 0)
        return;
    for (int i = 0; i < c1->nkt; i++) {
        long long t0 = 0;
        for (int j = 0; j < c0->nkt; j++)
            if (c0->kt[j].tid == c1->kt[i].tid) {
                t0 = c0->kt[j].ticks <= c1->kt[i].ticks ? c0->kt[j].ticks : c1->kt[i].ticks;
                break;
            }
        d[c1->kt[i].cls] += c1->kt[i].ticks - t0;
    }
}

static void cpu_snap(cpu_t *c, const cpu_t *start) {
    for (int i = 0; i < g_nproc; i++)
        c->svc[i] = proc_ticks(g_proc[i].pid);
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
    c->nkt = -1;
    if (c->kpid)
        ktasks_snap(c);
    c->self = proc_ticks(getpid());
    machine_ticks(&c->mbusy, &c->mtotal);
    c->mono_ms = ax_mono_ms();
}

/* PostgreSQL's own counters: commits of this database, WAL. */
typedef struct pgstat {
    long long commits, wal_records, wal_bytes, wal_sync;
} pgstat_t;

static void pg_snap(pgstat_t *s) {
    PGresult *r;
    memset(s, 0, sizeof *s);
    if (sql("SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),"
            " wal_records, pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint, wal_sync"
            " FROM pg_stat_wal",
            0, NULL, &r) < 0)
        return;
    if (PQntuples(r)) {
        s->commits = ax_pg_int(r, 0, 0);
        s->wal_records = ax_pg_int(r, 0, 1);
        s->wal_bytes = ax_pg_int(r, 0, 2);
        s->wal_sync = ax_pg_int(r, 0, 3);
    }
    PQclear(r);
}

/* ---- the services -------------------------------------------------------- */

/* --timeline MS: how many of the run's instances reached each state in
 * every MS-long bucket since the first was scheduled (scheduled_at,
 * dispatched_at, locked_at, running_at, finished_at): the stage whose rate
 * falls behind the others is the one that limits the run. */
static void print_timeline(const char **pa) {
    char ms[32];
    snprintf(ms, sizeof ms, "%d", g_timeline_ms);
    const char *p3[] = {pa[0], pa[1], ms};
    PGresult *r;
    if (sql("WITH i AS (SELECT scheduled_at, dispatched_at, locked_at, running_at, finished_at"
            "  FROM job_instance WHERE job_id = $1::bigint AND id > $2::bigint),"
            " t0 AS (SELECT min(scheduled_at) AS t FROM i),"
            " e AS (SELECT k, floor(extract(epoch FROM ts - t0.t) * 1000 / $3::int)::int AS b"
            "  FROM i, t0, LATERAL (VALUES (0, scheduled_at), (1, dispatched_at), (2, locked_at),"
            "    (3, running_at), (4, finished_at)) v(k, ts) WHERE ts IS NOT NULL)"
            " SELECT b, count(*) FILTER (WHERE k = 0), count(*) FILTER (WHERE k = 1),"
            "  count(*) FILTER (WHERE k = 2), count(*) FILTER (WHERE k = 3),"
            "  count(*) FILTER (WHERE k = 4) FROM e GROUP BY b ORDER BY b",
            3, p3, &r) < 0)
        return;
    printf("timeline_ms=%d bucket: scheduled dispatched locked running finished\n", g_timeline_ms);
    for (int i = 0; i < PQntuples(r); i++)
        printf("timeline %s: %s %s %s %s %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
               PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5));
    PQclear(r);
}

/* --metrics-port BASE: service i serves /metrics on 127.0.0.1:BASE+i (trigger,
 * callback, executors in order), so one long-lived scraper knows the targets. */
static int g_metrics_port;

static int spawn(bench_proc_t *p, int i, const char *bin, char **pass, int npass) {
    char listen[64];
    char *extra[] = {"--set", listen};
    snprintf(listen, sizeof listen, "metrics.listen=127.0.0.1:%d", g_metrics_port + i);
    return bench_spawn("bench_exec", p, bin, g_prefix, extra, g_metrics_port > 0 ? 2 : 0, pass,
                       npass);
}

/* 1 while every service runs. */
static int all_alive(void) { return bench_all_alive("bench_exec", g_proc, g_nproc); }

static void stop_all(void) { bench_stop_all("bench_exec", g_proc, g_nproc); }

/* ---- Kafka topics and groups ----------------------------------------------- */

/* Delete the topics and consumer groups of `prefix`. */
static void delete_kafka(const ax_conf_t *conf, const char *prefix) {
    static const char *const groups[] = {"trigger", "executor", "callback", "bench"};
    bench_delete_kafka("bench_exec", conf, prefix, groups, AX_ARRAY_SIZE(groups));
}

/* ---- database rows ---------------------------------------------------------- */

/* Everything a run of `prefix` (job `job`) left in the database. */
static int delete_rows(const char *prefix, const char *job) {
    char role[128], wlike[96];
    snprintf(role, sizeof role, "%strigger", prefix);
    /* worker ids are bench-<pid>-<service>; the job is bench-exec-<pid> */
    snprintf(wlike, sizeof wlike, "bench-%s-%%", job + strlen("bench-exec-"));
    const char *pd[] = {prefix};
    const char *pj[] = {job};
    const char *pr[] = {role};
    const char *pw[] = {wlike};
    if (bench_delete_instances(sql_int, "bench_exec", prefix) < 0)
        return -1; /* the job row stays for the next run */
    /* state rows without a definition (none expected), through the view */
    sql("DELETE FROM job_instance WHERE deployment = $1", 1, pd, NULL);
    sql("DELETE FROM dispatch_pending WHERE deployment = $1", 1, pd, NULL);
    /* 018_hot_writes: the pending batches and the submit topic's watermarks
     * (a later run of the same pid recreates the topic from offset 0) */
    sql("DELETE FROM dispatch_batch WHERE deployment = $1", 1, pd, NULL);
    /* kept when the topics are (--reuse-topics): a submission the trigger
     * reads again is then known, not new */
    if (strncmp(prefix, "bench.reuse.", 12) != 0)
        sql("DELETE FROM submit_offset WHERE left(topic, length($1)) = $1", 1, pd, NULL);
    /* 023_publish_per_batch: the results batches stay, marked published,
     * until retention deletes their instances */
    sql("DELETE FROM ax_result_batch WHERE deployment = $1", 1, pd, NULL);
    sql("DELETE FROM job WHERE name = $1", 1, pj, NULL);
    sql("DELETE FROM ax_leader WHERE role = $1", 1, pr, NULL);
    sql("DELETE FROM worker WHERE id LIKE $1", 1, pw, NULL);
    return 0;
}

static void cleanup(const ax_conf_t *conf) {
    stop_all();
    if (g_pg) {
        int64_t t0 = ax_mono_ms();
        int rc = delete_rows(g_prefix, g_job);
        /* The next run should not pay for this one's dead rows. */
        sql("VACUUM (ANALYZE) instance_def, instance_state, job_attempt_log, dispatch_pending, job", 0, NULL, NULL);
        if (rc == 0)
            fprintf(stderr, "bench_exec: cleanup: rows deleted in %lld ms\n",
                    (long long)(ax_mono_ms() - t0));
    }
    if (!g_reuse)
        delete_kafka(conf, g_prefix);
}

/* Runs whose benchmark process is gone. A run's deployment is bench.<pid>.
 * or, with --reuse-topics, the shared bench.reuse.p<P>s<S>. (whose topics
 * stay): read from one of its job's instances, if any is left. */
static void cleanup_stale(const ax_conf_t *conf) {
    PGresult *r;
    if (sql("SELECT substr(j.name, 12), coalesce((SELECT s.deployment FROM instance_def d"
            "  JOIN instance_state s ON s.id = d.id WHERE d.job_id = j.id LIMIT 1), '')"
            " FROM job j WHERE j.name ~ '^bench-exec-[0-9]+$'",
            0, NULL, &r) < 0)
        return;
    for (int i = 0; i < PQntuples(r); i++) {
        pid_t pid = (pid_t)atol(PQgetvalue(r, i, 0));
        if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        char prefix[64], job[64];
        const char *dep = PQgetvalue(r, i, 1);
        if (*dep && strlen(dep) < sizeof prefix)
            snprintf(prefix, sizeof prefix, "%s", dep);
        else
            snprintf(prefix, sizeof prefix, "bench.%d.", (int)pid);
        snprintf(job, sizeof job, "bench-exec-%d", (int)pid);
        if (delete_rows(prefix, job) < 0)
            continue; /* its job row stays: tried again by the next run */
        if (strncmp(prefix, "bench.reuse.", 12) != 0)
            delete_kafka(conf, prefix);
        fprintf(stderr, "bench_exec: deleted what run %d left behind\n", (int)pid);
    }
    PQclear(r);
}

/* ---- submissions ------------------------------------------------------------ */

static rd_kafka_t *g_rk;
static char g_topic[256];
/* Outlives submit(): an interrupted submit leaves messages in flight whose
 * delivery reports arrive in the final flush. */
static ax_delivery_t g_dlv;
/* --submit-chunk: 0 = by key (trace id); -1 (unset) = submit.partition.chunk */
static long g_submit_chunk = -1;

/* Produce submissions [from, from + n) of the job, `rate` per second (0 =
 * as fast as possible); waits until Kafka has them all. */
static int submit(const char *tag, long from, long n, double rate) {
    char err[512], trace[96];
    ax_delivery_t *d = &g_dlv;
    d->failed = 0;
    d->err = 0;
    int64_t t0 = bench_mono_us(), check = ax_mono_ms() + 1000;
    for (long i = 0; i < n && !g_stop; i++) {
        if (rate > 0) {
            int64_t due = t0 + (int64_t)((double)i * 1e6 / rate);
            for (int64_t now = bench_mono_us(); now < due; now = bench_mono_us()) {
                rd_kafka_poll(g_rk, 0);
                if (g_live_on && results_poll(0) == 0)
                    live_tick();
                int64_t us = due - now;
                usleep((useconds_t)(us > 2000 ? 2000 : us));
            }
            if (ax_mono_ms() > check) {
                if (!all_alive())
                    return -1;
                check = ax_mono_ms() + 1000;
            }
        }
        ax_submit_t s;
        ax_submit_init(&s);
        s.job = g_job;
        /* its submit time last: submit_run_ms below */
        snprintf(trace, sizeof trace, "bx-%d-%s%ld-%lld", (int)getpid(), tag, from + i,
                 (long long)ax_now_ms());
        s.trace_id = trace;
        void *buf;
        size_t len;
        if (ax_submit_encode(&s, &buf, &len) < 0) {
            fprintf(stderr, "bench_exec: cannot encode a submission\n");
            return -1;
        }
        d->part_hint = ax_kafka_chunk_hint(from + i, g_submit_chunk);
        int rc = ax_kafka_produce(g_rk, g_topic, trace, strlen(trace), buf, len, NULL, d, err,
                                  sizeof err);
        free(buf);
        if (rc < 0) {
            fprintf(stderr, "bench_exec: %s\n", err);
            return -1;
        }
        rd_kafka_poll(g_rk, 0);
        /* a submitter behind its rate (or unpaced) never waits above:
         * the results are read here too */
        if (g_live_on && i % 256 == 255 && results_poll(0) == 0)
            live_tick();
    }
    if (g_stop)
        return -1;
    if (ax_kafka_wait(g_rk, d, 60000) < 0) {
        fprintf(stderr, "bench_exec: submissions not acknowledged by Kafka\n");
        return -1;
    }
    return 0;
}

/* Progress is read from the results topic (one message per published
 * instance, keyed by its id), not from PostgreSQL: polling the database
 * would add to the load being measured. The last step checks
 * result_published_at in PostgreSQL once. */
static rd_kafka_t *g_rc;
static uint8_t *g_seen; /* bit (id - g_base - 1): a result for it was read */
static size_t g_seen_cap;
static int64_t g_base;
static long g_nseen;

static void seen_reset(int64_t above) {
    g_base = above;
    g_nseen = 0;
    if (g_seen)
        memset(g_seen, 0, g_seen_cap);
}

/* Read what the results topic has, for up to timeout_ms. */
/* --live S: the latencies of the results read since the last line. */
typedef struct live_set {
    double *v;
    size_t n, cap;
} live_set_t;
static live_set_t g_lv_fs, g_lv_sf, g_lv_sr;
static long g_lv_bad;
static int64_t g_lv_t0, g_lv_next;

static void live_push(live_set_t *l, double v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16384;
        double *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv)
            return; /* a sample lost, not the run */
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

static void live_add(const rd_kafka_message_t *m) {
    ax_result_t r;
    char err[256];
    if (!m->payload || ax_result_decode(m->payload, m->len, &r, err, sizeof err) < 0)
        return;
    if (r.running_at_ms > 0) {
        live_push(&g_lv_fs, (double)(r.running_at_ms - r.scheduled_at_ms));
        /* bx-PID-TAG-SUBMIT_MS (submit()) */
        const char *dash = r.trace_id ? strrchr(r.trace_id, '-') : NULL;
        long long sub = dash ? atoll(dash + 1) : 0;
        if (sub > 0)
            live_push(&g_lv_sr, (double)(r.running_at_ms - sub));
    }
    live_push(&g_lv_sf, (double)(r.finished_at_ms - r.scheduled_at_ms));
    g_lv_bad += r.outcome != AX_OUTCOME_SUCCESS;
    ax_result_clear(&r);
}

static int dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p-th percentile of the sorted v[0..n) by nearest rank: the
 * ceil(p/100 * n)-th smallest. */
static double rank(const double *v, size_t n, unsigned p) {
    size_t k = (n * p + 99) / 100;
    return v[k ? k - 1 : 0];
}

/* "P50/P99" of l, emptied; "-/-" when it holds none. */
static const char *live_pct(live_set_t *l, char buf[64]) {
    if (l->n == 0) {
        snprintf(buf, 64, "-/-");
        return buf;
    }
    qsort(l->v, l->n, sizeof *l->v, dcmp);
    snprintf(buf, 64, "%.1f/%.1f", rank(l->v, l->n, 50), rank(l->v, l->n, 99));
    l->n = 0;
    return buf;
}

static void live_tick_at(int force) {
    if (!g_live_on)
        return;
    int64_t now = ax_mono_ms();
    if (force && g_lv_next > now && g_lv_sf.n > 0)
        g_lv_next = now; /* the last, shorter interval */
    if (g_lv_next == 0) {
        g_lv_t0 = now;
        g_lv_next = now + (int64_t)g_live_s * 1000;
        return;
    }
    if (now < g_lv_next)
        return;
    char a[64], b[64], c[64];
    size_t n = g_lv_sf.n;
    printf("live t_s=%lld n=%zu fire_start_ms=%s sched_fin_ms=%s submit_run_ms=%s "
           "not_success=%ld\n",
           (long long)((now - g_lv_t0) / 1000), n, live_pct(&g_lv_fs, a),
           live_pct(&g_lv_sf, b), live_pct(&g_lv_sr, c), g_lv_bad);
    fflush(stdout);
    g_lv_bad = 0;
    g_lv_next += (int64_t)g_live_s * 1000;
}

static void live_tick(void) {
    live_tick_at(0);
}

static int results_poll(int timeout_ms) {
    int64_t end = ax_mono_ms() + timeout_ms;
    for (;;) {
        int64_t left = end - ax_mono_ms();
        rd_kafka_message_t *m = rd_kafka_consumer_poll(g_rc, left > 0 ? (int)left : 0);
        if (!m)
            return 0;
        if (m->err) {
            fprintf(stderr, "bench_exec: results: %s\n", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        char key[32];
        size_t kl = m->key_len < sizeof key - 1 ? m->key_len : sizeof key - 1;
        memcpy(key, m->key ? m->key : "", m->key ? kl : 0);
        key[m->key ? kl : 0] = 0;
        int64_t id = atoll(key);
        if (id <= g_base) {
            rd_kafka_message_destroy(m);
            continue;
        }
        size_t bit = (size_t)(id - g_base - 1);
        if (bit / 8 >= g_seen_cap) {
            size_t cap = g_seen_cap ? g_seen_cap : 4096;
            while (bit / 8 >= cap)
                cap *= 2;
            uint8_t *ns = realloc(g_seen, cap);
            if (!ns) {
                rd_kafka_message_destroy(m);
                return -1;
            }
            memset(ns + g_seen_cap, 0, cap - g_seen_cap);
            g_seen = ns;
            g_seen_cap = cap;
        }
        if (!(g_seen[bit / 8] & (1u << (bit % 8)))) {
            g_seen[bit / 8] |= (uint8_t)(1u << (bit % 8));
            g_nseen++;
            if (g_live_on) /* a result read again counts once */
                live_add(m);
        }
        rd_kafka_message_destroy(m);
    }
}

/* --reuse-topics: the results consumer's positions committed, so that the
 * next run starts after this run's results instead of reading the topic's
 * whole history again at its start (the group has no offsets otherwise:
 * auto-commit is off in ax_kafka_consumer_new). */
static void results_commit(void) {
    rd_kafka_topic_partition_list_t *a = NULL, *c = NULL;
    if (rd_kafka_assignment(g_rc, &a) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        rd_kafka_position(g_rc, a) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        (c = rd_kafka_topic_partition_list_new(a->cnt))) {
        for (int i = 0; i < a->cnt; i++)
            if (a->elems[i].offset >= 0)
                rd_kafka_topic_partition_list_add(c, a->elems[i].topic, a->elems[i].partition)
                    ->offset = a->elems[i].offset;
        rd_kafka_resp_err_t e = c->cnt ? rd_kafka_commit(g_rc, c, 0) : RD_KAFKA_RESP_ERR_NO_ERROR;
        if (e)
            fprintf(stderr, "bench_exec: results offsets not committed: %s\n", rd_kafka_err2str(e));
    }
    if (c)
        rd_kafka_topic_partition_list_destroy(c);
    if (a)
        rd_kafka_topic_partition_list_destroy(a);
}

/* Wait until results for `want` instances with id > `above` were read.
 * Gives up after `stall_s` seconds without progress. *ret_done_mono: when
 * the last result was read. */
static int wait_read(int64_t above, long want, long stall_s, int64_t *ret_done_mono) {
    long last = -1;
    int64_t last_change = ax_mono_ms();
    while (!g_stop && g_nseen < want) {
        if (results_poll(200) < 0)
            return -1;
        live_tick();
        if (g_nseen != last) {
            last = g_nseen;
            last_change = ax_mono_ms();
        } else if (ax_mono_ms() - last_change > stall_s * 1000) {
            char job[32], ab[32];
            snprintf(job, sizeof job, "%lld", (long long)g_job_id);
            snprintf(ab, sizeof ab, "%lld", (long long)above);
            const char *p[] = {job, ab};
            int64_t ing = sql_int("SELECT count(*) FROM job_instance"
                                  " WHERE job_id = $1::bigint AND id > $2::bigint",
                                  2, p);
            fprintf(stderr,
                    "bench_exec: %ld of %ld results read (%lld instances ingested), no progress"
                    " in %ld s\n",
                    g_nseen, want, (long long)ing, stall_s);
            return -1;
        }
        if (!all_alive())
            return -1;
    }
    if (g_stop)
        return -1;
    *ret_done_mono = ax_mono_ms();
    return 0;
}

/* Then PostgreSQL has all of them published: checked once the results
 * were read, outside the measurement's window (its count, a scan of the
 * run's rows through job_instance, cost 2.5-6 us of PostgreSQL's CPU per job
 * of a 20,000-job run when it was inside; BENCHMARKS.md). */
static int wait_marked(int64_t above, long want) {
    char job[32], ab[32];
    snprintf(job, sizeof job, "%lld", (long long)g_job_id);
    snprintf(ab, sizeof ab, "%lld", (long long)above);
    const char *p[] = {job, ab};
    for (int i = 0; i < 100 && !g_stop; i++) {
        int64_t k = sql_int("SELECT count(*) FROM job_instance WHERE job_id = $1::bigint"
                            " AND id > $2::bigint AND result_published_at IS NOT NULL",
                            2, p);
        if (k == INT64_MIN)
            return -1;
        if (k >= want)
            return 0;
        nap(100);
    }
    fprintf(stderr, "bench_exec: results read but result_published_at not set in 10 s\n");
    return -1;
}

/* ---- main ------------------------------------------------------------------ */

static const char usage[] =
    "Usage: bench_exec [--config F] [--set k=v]... [--partitions P] [--service-partitions Q]\n"
    "                  [--warmup W] [--timeout S]\n"
    "                  [--submit-chunk K] [--metrics-port BASE] [--reuse-topics]\n"
    "                  [--timeline MS] [--live S]\n"
    "                  BUILD_DIR MODE EXECUTORS N [RATE]\n"
    "MODE is noop (ax-noop.so) or sleep10 (ax-sleep.so 10); RATE paces submissions (jobs/s).\n"
    "--config and --set are passed on to the services (except topic.prefix).\n";

static int run(const char *build, const char *mode, int nexec, long n,
               double rate, int partitions, long warmup, long stall_s, char **pass, int npass) {
    char bin[3][PATH_MAX + 64], plugin[PATH_MAX + 64];
    snprintf(bin[0], sizeof bin[0], "%s/services/trigger/ax-trigger", build);
    snprintf(bin[1], sizeof bin[1], "%s/services/callback/ax-callback", build);
    snprintf(bin[2], sizeof bin[2], "%s/services/executor/ax-executor", build);
    int sleep10 = strcmp(mode, "sleep10") == 0;
    snprintf(plugin, sizeof plugin, "%s/plugins/%s", build, sleep10 ? "ax-sleep.so" : "ax-noop.so");
    for (int i = 0; i < 3; i++)
        if (access(bin[i], X_OK) != 0) {
            fprintf(stderr, "bench_exec: %s: %s\n", bin[i], strerror(errno));
            return 1;
        }
    if (access(plugin, R_OK) != 0) {
        fprintf(stderr, "bench_exec: %s: %s\n", plugin, strerror(errno));
        return 1;
    }
    /* The job. */
    ax_strbuf_t cmd = {0};
    ax_pgarr_begin(&cmd);
    ax_pgarr_text(&cmd, plugin);
    if (sleep10)
        ax_pgarr_text(&cmd, "10");
    ax_pgarr_end(&cmd);
    const char *pj[] = {g_job, cmd.s};
    g_job_id = sql_int("INSERT INTO job (name, handler_kind, command, retry_max)"
                       " VALUES ($1, 'plugin', $2::text[], 0) RETURNING id",
                       2, pj);
    ax_strbuf_free(&cmd);
    if (g_job_id == INT64_MIN)
        return 1;
    /* The services. */
    g_nproc = 2 + nexec;
    for (int i = 0; i < g_nproc; i++) {
        bench_proc_t *p = &g_proc[i];
        if (i < 2)
            snprintf(p->name, sizeof p->name, "%s", i == 0 ? "trigger" : "callback");
        else
            snprintf(p->name, sizeof p->name, "exec%d", i - 2);
        char nm[32]; /* a copy: gcc -Wrestrict sees p->name and p->wid as overlapping */
        snprintf(nm, sizeof nm, "%.31s", p->name);
        snprintf(p->wid, sizeof p->wid, "bench-%d-%s", (int)getpid(), nm);
        snprintf(p->log, sizeof p->log, "/tmp/bench_exec.%d.%s.log", (int)getpid(), nm);
        p->pid = -1;
    }
    for (int i = 0; i < g_nproc; i++)
        if (spawn(&g_proc[i], i, bin[i < 2 ? i : 2], pass, npass) < 0)
            return 1;
    /* Every executor has a worker row. */
    ax_strbuf_t wids = {0};
    ax_pgarr_begin(&wids);
    for (int i = 2; i < g_nproc; i++)
        ax_pgarr_text(&wids, g_proc[i].wid);
    ax_pgarr_end(&wids);
    const char *pw[] = {wids.s};
    int64_t t0 = ax_mono_ms();
    for (;;) {
        int64_t k = sql_int("SELECT count(*) FROM worker WHERE id = ANY($1::text[])"
                            " AND state = 'running'",
                            1, pw);
        if (k == nexec)
            break;
        if (g_stop || k == INT64_MIN || !all_alive() || ax_mono_ms() - t0 > 60000) {
            if (!g_stop && k != INT64_MIN && ax_mono_ms() - t0 > 60000)
                fprintf(stderr, "bench_exec: only %lld of %d executors registered in 60 s\n",
                        (long long)k, nexec);
            ax_strbuf_free(&wids);
            return 1;
        }
        nap(100);
    }
    ax_strbuf_free(&wids);
    fprintf(stderr, "bench_exec: %d executor(s) registered in %lld ms\n", nexec,
            (long long)(ax_mono_ms() - t0));
    /* Warm-up: until every executor ran some (the group is balanced). */
    char job[32];
    snprintf(job, sizeof job, "%lld", (long long)g_job_id);
    int64_t above = 0;
    int round = 0, used = 0;
    for (; round < 10 && !g_stop; round++) {
        char tag[16], ab[32];
        snprintf(tag, sizeof tag, "w%d-", round);
        int64_t dm;
        seen_reset(above);
        if (submit(tag, 0, warmup, 0) < 0 || wait_read(above, warmup, stall_s, &dm) < 0 ||
            wait_marked(above, warmup) < 0)
            return 1;
        snprintf(ab, sizeof ab, "%lld", (long long)above);
        const char *pa[] = {job, ab};
        used = (int)sql_int("SELECT count(DISTINCT worker) FROM job_instance"
                            " WHERE job_id = $1::bigint AND id > $2::bigint",
                            2, pa);
        above = sql_int("SELECT max(id) FROM job_instance WHERE job_id = $1::bigint", 1, pa);
        if (above == INT64_MIN)
            return 1;
        if (used >= nexec)
            break;
        nap(1000);
    }
    if (g_stop)
        return 1;
    fprintf(stderr, "bench_exec: warm-up: %d round(s) of %ld, last one ran on %d of %d executor(s)\n",
            round + 1, warmup, used, nexec);
    if (used < nexec)
        fprintf(stderr, "bench_exec: warning: the executor group is not balanced\n");
    /* The measurement. */
    cpu_t c0, c1;
    pgstat_t s0, s1;
    double load0 = loadavg1();
    pg_snap(&s0);
    seen_reset(above);
    cpu_snap(&c0, NULL);
    int64_t p0 = ax_mono_ms(), w0 = bench_epoch_ms();
    g_live_on = g_live_s > 0;
    live_tick(); /* its clock starts */
    if (submit("m", 0, n, rate) < 0)
        return 1;
    int64_t submit_ms = ax_mono_ms() - p0, done_mono;
    if (wait_read(above, n, stall_s, &done_mono) < 0)
        return 1;
    live_tick_at(1);
    cpu_snap(&c1, &c0);
    int64_t w1 = bench_epoch_ms();
    pg_snap(&s1);
    double load1 = loadavg1();
    if (wait_marked(above, n) < 0)
        return 1;
    double win = (double)(c1.mono_ms - c0.mono_ms) / 1000.0;
    char ab[32];
    snprintf(ab, sizeof ab, "%lld", (long long)above);
    const char *pa[] = {job, ab};
    PGresult *r;
#define PCT(expr)                                                                          \
    " round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM " expr          \
    ") * 1000))::numeric, 1) || '/' || round((percentile_cont(0.99) WITHIN GROUP (ORDER BY" \
    " extract(epoch FROM " expr ") * 1000))::numeric, 1)"
    if (sql("SELECT count(*), count(*) FILTER (WHERE outcome = 'SUCCESS'),"
            "  count(*) FILTER (WHERE attempt > 1),"
            "  extract(epoch FROM max(finished_at) - min(scheduled_at)),"
            "  extract(epoch FROM max(result_published_at) - min(scheduled_at)),"
            "  extract(epoch FROM max(scheduled_at) - min(scheduled_at)),"
            " " PCT("finished_at - scheduled_at") " || '/' ||"
            "  round(extract(epoch FROM max(finished_at - scheduled_at)) * 1000),"
            " " PCT("running_at - due_at") " || '/' ||"
            "  round(extract(epoch FROM max(running_at - due_at)) * 1000, 1),"
            " " PCT("dispatched_at - due_at") ","
            " " PCT("locked_at - dispatched_at") ","
            " " PCT("running_at - locked_at") ","
            " " PCT("finished_at - running_at") ","
            " " PCT("result_published_at - finished_at") ","
            " " PCT("running_at - to_timestamp(substring(trace_id from '-([0-9]+)$')::bigint / 1000.0)")
            " FROM job_instance WHERE job_id = $1::bigint AND id > $2::bigint",
            2, pa, &r) < 0)
        return 1;
#undef PCT
    long count = (long)ax_pg_int(r, 0, 0), ok = (long)ax_pg_int(r, 0, 1);
    long retried = (long)ax_pg_int(r, 0, 2);
    double span = atof(PQgetvalue(r, 0, 3)), span_pub = atof(PQgetvalue(r, 0, 4));
    double ingest_span = atof(PQgetvalue(r, 0, 5));
    char rate_s[32];
    if (rate > 0)
        snprintf(rate_s, sizeof rate_s, "%.0f", rate);
    else
        snprintf(rate_s, sizeof rate_s, "max");
    printf("mode=%s executors=%d n=%ld rate=%s partitions=%d service_partitions=%d warmup=%ld "
           "submit_chunk=%ld\n",
           mode, nexec, n, rate_s, partitions, g_svc_partitions, warmup, g_submit_chunk);
    printf("completed_per_s=%.0f published_per_s=%.0f span_s=%.2f ingest_span_s=%.2f "
           "submit_s=%.2f window_s=%.2f\n",
           span > 0 ? (double)n / span : 0, span_pub > 0 ? (double)n / span_pub : 0, span,
           ingest_span, (double)submit_ms / 1000.0, win);
    printf("sched_fin_ms_p50_p99_max=%s fire_start_ms_p50_p99_max=%s\n", PQgetvalue(r, 0, 6),
           PQgetvalue(r, 0, 7));
    printf("stage_due_disp_ms=%s stage_disp_lock_ms=%s stage_lock_run_ms=%s stage_run_fin_ms=%s "
           "stage_fin_pub_ms=%s\n",
           PQgetvalue(r, 0, 8), PQgetvalue(r, 0, 9), PQgetvalue(r, 0, 10), PQgetvalue(r, 0, 11),
           PQgetvalue(r, 0, 12));
    printf("submit_run_ms=%s\n", PQgetvalue(r, 0, 13));
    PQclear(r);
    /* CPU */
    double ex_sum = 0;
    char exl[1024] = "";
    size_t el = 0;
    for (int i = 2; i < g_nproc; i++) {
        double v = bench_pct(c1.svc[i] - c0.svc[i], win);
        ex_sum += v;
        if (el < sizeof exl - 16)
            el += (size_t)snprintf(exl + el, sizeof exl - el, "%s%.0f", i > 2 ? "," : "", v);
    }
    long long pgd = 0;
    for (int i = 0; i < c0.npg; i++)
        if (c0.pg[i] >= 0 && c1.pg[i] >= c0.pg[i])
            pgd += c1.pg[i] - c0.pg[i];
    /* The broker by thread class (only when its pid is known): JIT compilers,
     * GC, the rest (its whole CPU less those two). */
    long long kd[KT_N];
    char kcls[128] = "";
    ktasks_delta(&c0, &c1, kd);
    if (c0.kpid && c0.kafka >= 0 && c1.kafka >= 0 && kd[KT_JIT] >= 0) {
        /* Each thread's ticks and the process's are truncated on their own:
         * the difference can be a tick or two below 0. */
        kd[KT_WORK] = c1.kafka - c0.kafka - kd[KT_JIT] - kd[KT_GC];
        if (kd[KT_WORK] < 0)
            kd[KT_WORK] = 0;
    } else {
        kd[KT_WORK] = kd[KT_JIT] = kd[KT_GC] = -1;
    }
    if (c0.kpid)
        snprintf(kcls, sizeof kcls,
                 " cpu_pct_kafka_jit=%.0f cpu_pct_kafka_gc=%.0f cpu_pct_kafka_work=%.0f",
                 bench_pct(kd[KT_JIT], win), bench_pct(kd[KT_GC], win),
                 bench_pct(kd[KT_WORK], win));
    printf("cpu_pct_trigger=%.0f cpu_pct_callback=%.0f cpu_pct_executors=%s "
           "cpu_pct_executors_sum=%.0f cpu_pct_postgres=%.0f cpu_pct_kafka=%.0f%s "
           "cpu_pct_bench=%.0f machine_busy_pct=%.0f loadavg1_before=%.2f loadavg1_after=%.2f\n",
           bench_pct(c1.svc[0] - c0.svc[0], win), bench_pct(c1.svc[1] - c0.svc[1], win), exl, ex_sum,
           bench_pct(pgd, win), c0.kpid ? bench_pct(c1.kafka - c0.kafka, win) : -1.0, kcls,
           bench_pct(c1.self - c0.self, win),
           c1.mtotal > c0.mtotal
               ? (double)(c1.mbusy - c0.mbusy) * 100.0 / (double)(c1.mtotal - c0.mtotal)
               : 0.0,
           load0, load1);
    /* CPU per job, less noisy than a rate: what each service spent for one instance. */
    double us_tick = 1e6 / (double)sysconf(_SC_CLK_TCK);
    long long exd = 0;
    for (int i = 2; i < g_nproc; i++)
        exd += c1.svc[i] - c0.svc[i];
    char kwork[64] = "";
    if (c0.kpid)
        snprintf(kwork, sizeof kwork, " cpu_us_per_job_kafka_work=%.1f",
                 kd[KT_WORK] < 0 ? -1.0 : (double)kd[KT_WORK] * us_tick / (double)n);
    printf("cpu_us_per_job_trigger=%.1f cpu_us_per_job_callback=%.1f cpu_us_per_job_executors=%.1f "
           "cpu_us_per_job_services=%.1f%s window_epoch_ms=%lld,%lld\n",
           (double)(c1.svc[0] - c0.svc[0]) * us_tick / (double)n,
           (double)(c1.svc[1] - c0.svc[1]) * us_tick / (double)n, (double)exd * us_tick / (double)n,
           (double)(c1.svc[0] - c0.svc[0] + c1.svc[1] - c0.svc[1] + exd) * us_tick / (double)n,
           kwork, (long long)w0, (long long)w1);
    printf("pg_commits_per_job=%.2f pg_wal_records_per_job=%.1f pg_wal_bytes_per_job=%.0f "
           "pg_wal_syncs_per_s=%.0f pg_commits_per_s=%.0f\n",
           (double)(s1.commits - s0.commits) / (double)n,
           (double)(s1.wal_records - s0.wal_records) / (double)n,
           (double)(s1.wal_bytes - s0.wal_bytes) / (double)n,
           (double)(s1.wal_sync - s0.wal_sync) / win, (double)(s1.commits - s0.commits) / win);
    /* Outcomes and where the instances ran. */
    char outc[512] = "", per[1024] = "";
    if (sql("SELECT coalesce(outcome::text, 'none') || ':' || count(*) FROM job_instance"
            " WHERE job_id = $1::bigint AND id > $2::bigint GROUP BY outcome ORDER BY 1",
            2, pa, &r) == 0) {
        size_t ol = 0;
        for (int i = 0; i < PQntuples(r) && ol < sizeof outc - 64; i++)
            ol += (size_t)snprintf(outc + ol, sizeof outc - ol, "%s%s", i ? "," : "",
                                   PQgetvalue(r, i, 0));
        PQclear(r);
    }
    char wpre[64];
    snprintf(wpre, sizeof wpre, "bench-%d-", (int)getpid());
    const char *pp[] = {job, ab, wpre};
    if (sql("SELECT coalesce(substr(worker, length($3) + 1), 'none') || ':' || count(*)"
            " FROM job_instance WHERE job_id = $1::bigint AND id > $2::bigint"
            " GROUP BY worker ORDER BY 1",
            3, pp, &r) == 0) {
        size_t pl = 0;
        for (int i = 0; i < PQntuples(r) && pl < sizeof per - 64; i++)
            pl += (size_t)snprintf(per + pl, sizeof per - pl, "%s%s", i ? "," : "",
                                   PQgetvalue(r, i, 0));
        PQclear(r);
    }
    printf("outcomes=%s retried=%ld instances=%ld per_worker=%s\n", outc, retried, count, per);
    if (g_timeline_ms > 0)
        print_timeline(pa);
    if (ok != n || retried || count != n) {
        fprintf(stderr, "bench_exec: %ld of %ld instances SUCCESS (%ld counted, %ld retried)\n",
                ok, n, count, retried);
        return 3;
    }
    return 0;
}

int main(int argc, char **argv) {
    /* What the services get of our options, taken before they are consumed. */
    int npass = 0;
    char **pass = bench_pass_args(argc, argv, &npass);
    if (!pass)
        return 1;
    ax_conf_t conf;
    ax_conf_from_args(&conf, &argc, argv, "bench_exec", usage, NULL);
    int partitions = 8, svc_partitions = 0;
    long warmup = 300, stall_s = 60;
    long long v = 0;
    int ai = 1;
#define INT_OPT(name, lo, hi, var)                                                             \
    else if (strcmp(argv[ai], name) == 0 && ai + 1 < argc) {                                   \
        if (!bench_int_arg("bench_exec", name, argv[++ai], lo, hi, &v))                        \
            return 2;                                                                          \
        var = v;                                                                               \
    }
    for (; ai < argc && strncmp(argv[ai], "--", 2) == 0; ai++) {
        if (strcmp(argv[ai], "--reuse-topics") == 0)
            g_reuse = 1;
        INT_OPT("--partitions", 1, 10000, partitions)
        INT_OPT("--service-partitions", 0, 10000, svc_partitions)
        INT_OPT("--warmup", 1, 100000000, warmup)
        INT_OPT("--timeout", 1, 86400, stall_s)
        INT_OPT("--submit-chunk", 0, 1000000, g_submit_chunk)
        INT_OPT("--metrics-port", 0, 65535, g_metrics_port)
        INT_OPT("--timeline", 1, 3600000, g_timeline_ms)
        INT_OPT("--live", 1, 3600, g_live_s)
        else {
            fprintf(stderr, "%s", usage);
            return 2;
        }
    }
#undef INT_OPT
    if (argc - ai != 4 && argc - ai != 5) {
        fprintf(stderr, "%s", usage);
        return 2;
    }
    const char *mode = argv[ai + 1];
    long long nexec_ll = 0, n_ll = 0;
    double rate = 0;
    if (!bench_int_arg("bench_exec", "EXECUTORS", argv[ai + 2], 1, MAX_EXECUTORS, &nexec_ll) ||
        !bench_int_arg("bench_exec", "N", argv[ai + 3], 1, 1000000000, &n_ll) ||
        (argc - ai == 5 && !bench_num_arg("bench_exec", "RATE", argv[ai + 4], 0, 1e9, &rate)))
        return 2;
    int nexec = (int)nexec_ll;
    long n = (long)n_ll;
    char build[PATH_MAX];
    if (!realpath(argv[ai], build)) {
        fprintf(stderr, "bench_exec: %s: %s\n", argv[ai], strerror(errno));
        return 2;
    }
    if ((strcmp(mode, "noop") != 0 && strcmp(mode, "sleep10") != 0) ||
        g_metrics_port + 2 + nexec > 65536) {
        fprintf(stderr, "%s", usage);
        return 2;
    }
    char err[512];
    if (svc_partitions == 0)
        svc_partitions = ax_kafka_service_partitions(partitions);
    g_svc_partitions = svc_partitions;
    if (g_reuse)
        snprintf(g_prefix, sizeof g_prefix, "bench.reuse.p%ds%d.", partitions, svc_partitions);
    else
        snprintf(g_prefix, sizeof g_prefix, "bench.%d.", (int)getpid());
    snprintf(g_job, sizeof g_job, "bench-exec-%d", (int)getpid());
    if (ax_conf_set(&conf, "topic.prefix", g_prefix, "bench_exec", err, sizeof err) < 0) {
        fprintf(stderr, "bench_exec: %s\n", err);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (ax_codec_init(err, sizeof err) < 0) {
        fprintf(stderr, "bench_exec: %s\n", err);
        return 1;
    }
    g_pg = ax_pg_new(&conf, "bench_exec", err, sizeof err);
    if (!g_pg || ax_pg_ensure(g_pg, err, sizeof err) < 0) {
        fprintf(stderr, "bench_exec: %s\n", err);
        return 1;
    }
    cleanup_stale(&conf);
    if (g_submit_chunk < 0)
        g_submit_chunk = conf.submit_partition_chunk;
    g_rk = ax_kafka_producer_new(&conf, "bench-exec", err, sizeof err);
    if (!g_rk) {
        fprintf(stderr, "bench_exec: %s\n", err);
        return 1;
    }
    ax_conf_topic(&conf, "submit", g_topic, sizeof g_topic);
    int rc = 1;
    char group[128], results[256];
    ax_conf_topic(&conf, "bench", group, sizeof group);
    const char *rt[] = {ax_conf_topic(&conf, "results", results, sizeof results)};
    if (ax_kafka_create_topics(&conf, partitions, svc_partitions, 0, err, sizeof err) < 0 ||
        !(g_rc = ax_kafka_consumer_new(&conf, group, "bench-exec", err, sizeof err)) ||
        ax_kafka_subscribe(g_rc, rt, 1, err, sizeof err) < 0)
        fprintf(stderr, "bench_exec: %s\n", err);
    else
        rc = run(build, mode, nexec, n, rate, partitions, warmup, stall_s, pass, npass);
    if (g_stop)
        fprintf(stderr, "bench_exec: interrupted\n");
    fflush(stdout);
    if (g_rc) {
        if (g_reuse)
            results_commit();
        rd_kafka_consumer_close(g_rc);
        rd_kafka_destroy(g_rc);
    }
    free(g_seen);
    rd_kafka_flush(g_rk, 5000);
    rd_kafka_destroy(g_rk);
    cleanup(&conf);
    fprintf(stderr, "bench_exec: logs: /tmp/bench_exec.%d.*.log\n", (int)getpid());
    ax_pg_destroy(g_pg);
    ax_codec_shutdown();
    ax_conf_free(&conf);
    free(pass);
    return rc;
}
