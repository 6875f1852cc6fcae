/*
 * bench_common.h — what the benchmark programs share: CPU, RSS and load
 * figures from /proc, the broker's pid, medians, an interruptible sleep,
 * starting and stopping the services under test (bench_proc_t), the
 * --config/--set options passed on to them, and deleting a run's topics and
 * consumer groups. Header-only (static inline), so each bench stays one
 * source file.
 */
#ifndef AX_BENCH_COMMON_H
#define AX_BENCH_COMMON_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/conf.h"
#include "ax/kafka.h"

/* utime + stime in clock ticks, or -1. */
/* utime + stime in clock ticks from a /proc stat file (PATH: /proc/PID/stat
 * or /proc/PID/task/TID/stat), read into buf, or -1. The command name is
 * between the first '(' and the last ')' (it may hold both); when name is
 * not NULL it is pointed at it (inside buf) and *namelen set to its length. */
static inline long long stat_ticks(const char *path, char *buf, size_t bufsz, const char **name,
                                   size_t *namelen) {
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, bufsz - 1, f);
    fclose(f);
    buf[n] = 0;
    char *open = strchr(buf, '('), *s = strrchr(buf, ')');
    if (!open || !s || s < open)
        return -1;
    if (name) {
        *name = open + 1;
        *namelen = (size_t)(s - open - 1);
    }
    long long ut = -1, st = -1;
    s++;
    for (int field = 3; field <= 15 && s; field++) {
        while (*s == ' ')
            s++;
        if (field == 14)
            ut = strtoll(s, NULL, 10);
        else if (field == 15)
            st = strtoll(s, NULL, 10);
        s = strchr(s, ' ');
    }
    return ut < 0 || st < 0 ? -1 : ut + st;
}

static inline long long proc_ticks(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    return stat_ticks(path, buf, sizeof buf, NULL, NULL);
}

static inline void machine_ticks(long long *busy, long long *total) {
    long long v[8] = {0};
    *busy = *total = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return;
    if (fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) == 8) {
        for (int i = 0; i < 8; i++)
            *total += v[i];
        *busy = *total - v[3] - v[4];
    }
    fclose(f);
}

static inline double loadavg1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

/* The Kafka broker's pid from $AX_STATE/run/kafka.pid, or 0. */
static inline pid_t kafka_pid(void) {
    const char *st = getenv("AX_STATE");
    if (!st || !*st)
        return 0;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/run/kafka.pid", st);
    FILE *f = fopen(path, "r");
    long p = 0;
    if (f) {
        if (fscanf(f, "%ld", &p) != 1)
            p = 0;
        fclose(f);
    }
    return p > 0 && proc_ticks((pid_t)p) >= 0 ? (pid_t)p : 0;
}

/* Wall clock in ms since the epoch (to line up with another program's log). */
static inline int64_t bench_epoch_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline double median(double *v, int n) {
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Sleep ms, in 100 ms steps, returning early once *stop is set. */
static inline void bench_nap(int64_t ms, const volatile sig_atomic_t *stop) {
    int64_t end = ax_mono_ms() + ms;
    while (!*stop) {
        int64_t left = end - ax_mono_ms();
        if (left <= 0)
            return;
        usleep((useconds_t)(left > 100 ? 100 : left) * 1000);
    }
}

static inline int64_t bench_mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A numeric option's value: the whole of `s` an integer in [lo, hi] (1),
 * else a message naming the option on stderr (0): atoi() took "abc" for 0
 * and a bench ran without what was asked of it. */
static inline int bench_int_arg(const char *me, const char *what, const char *s, long long lo,
                                long long hi, long long *out) {
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "%s: %s: '%s' is not an integer from %lld to %lld\n", me, what,
                s ? s : "", lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

/* The same for a number with a fraction (a rate), in [lo, hi]. */
static inline int bench_num_arg(const char *me, const char *what, const char *s, double lo,
                                double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s: '%s' is not a number from %g to %g\n", me, what, s ? s : "",
                lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

/* Clock ticks over `secs` as % of one core, or -1. */
static inline double bench_pct(long long ticks, double secs) {
    return ticks < 0 || secs <= 0 ? -1
                                  : (double)ticks * 100.0 / (double)sysconf(_SC_CLK_TCK) / secs;
}

/* VmRSS of pid in kB, or -1. */
static inline long proc_rss_kb(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = atol(line + 6);
            break;
        }
    fclose(f);
    return kb;
}

/* ---- the services under test ---------------------------------------------- */

/* One service process a bench started. */
typedef struct bench_proc {
    char name[32]; /* trigger, callback, exec0, ... */
    char wid[64];  /* worker.id */
    char log[256]; /* stdout and stderr */
    pid_t pid;     /* -1: not running */
} bench_proc_t;

/* The --config/--set options of argv to pass on to the services (pointers
 * into argv, taken before ax_conf_from_args() consumes them), except
 * topic.prefix and worker.id, which each bench sets itself. NULL when out
 * of memory. */
static inline char **bench_pass_args(int argc, char **argv, int *npass) {
    char **pass = calloc((size_t)argc + 1, sizeof *pass);
    int n = 0;
    if (!pass)
        return NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if ((strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--set") == 0) && i + 1 < argc) {
            if (strcmp(argv[i], "--set") == 0 && (strncmp(argv[i + 1], "topic.prefix=", 13) == 0 ||
                                                  strncmp(argv[i + 1], "worker.id=", 10) == 0)) {
                i++;
                continue;
            }
            pass[n++] = argv[i];
            pass[n++] = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0 ||
                   (strncmp(argv[i], "--set=", 6) == 0 &&
                    strncmp(argv[i] + 6, "topic.prefix=", 13) != 0 &&
                    strncmp(argv[i] + 6, "worker.id=", 10) != 0)) {
            pass[n++] = argv[i];
        }
    }
    *npass = n;
    return pass;
}

/* Start `bin` as p (p->wid, p->log set): argv is --set log.level=warn, then
 * `extra` (the bench's own settings for this service), then `pass` (the
 * user's, so a later --set wins), then --set worker.id=<p->wid>; the
 * environment is ours with AXCONF_TOPIC_PREFIX=<prefix> (and no
 * AXCONF_WORKER_ID). stdin is /dev/null, stdout and stderr go to p->log.
 * `me` names the bench in messages. */
static inline int bench_spawn(const char *me, bench_proc_t *p, const char *bin, const char *prefix,
                              char *const *extra, int nextra, char *const *pass, int npass) {
    extern char **environ;
    char wid[96];
    snprintf(wid, sizeof wid, "worker.id=%s", p->wid);
    char **av = calloc((size_t)npass + (size_t)nextra + 6, sizeof *av);
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
    for (int i = 0; i < nextra; i++)
        av[k++] = extra[i];
    for (int i = 0; i < npass; i++)
        av[k++] = pass[i];
    av[k++] = "--set";
    av[k++] = wid;
    size_t e = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "AXCONF_TOPIC_PREFIX=", 20) != 0 &&
            strncmp(environ[i], "AXCONF_WORKER_ID=", 17) != 0)
            env[e++] = environ[i];
    char pre[128];
    snprintf(pre, sizeof pre, "AXCONF_TOPIC_PREFIX=%s", prefix);
    env[e++] = pre;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawn(&pid, bin, &fa, NULL, av, env);
    posix_spawn_file_actions_destroy(&fa);
    free(av);
    free(env);
    if (rc != 0) {
        fprintf(stderr, "%s: cannot start %s: %s\n", me, bin, strerror(rc));
        return -1;
    }
    p->pid = pid;
    return 0;
}

/* 1 while every one of the n services runs; reaps and reports the others. */
static inline int bench_all_alive(const char *me, bench_proc_t *ps, int n) {
    int ok = 1;
    for (int i = 0; i < n; i++) {
        bench_proc_t *p = &ps[i];
        if (p->pid <= 0) {
            ok = 0;
            continue;
        }
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            fprintf(stderr, "%s: %s exited (status %d); see %s\n", me, p->name, st, p->log);
            p->pid = -1;
            ok = 0;
        }
    }
    return ok;
}

/* SIGTERM to the n services, up to 30 s for clean stops, then SIGKILL. */
static inline void bench_stop_all(const char *me, bench_proc_t *ps, int n) {
    int left = 0;
    for (int i = 0; i < n; i++)
        if (ps[i].pid > 0) {
            kill(ps[i].pid, SIGTERM);
            left++;
        }
    for (int t = 0; t < 300 && left; t++) {
        left = 0;
        for (int i = 0; i < n; i++) {
            if (ps[i].pid <= 0)
                continue;
            if (waitpid(ps[i].pid, NULL, WNOHANG) == ps[i].pid)
                ps[i].pid = -1;
            else
                left++;
        }
        if (left)
            usleep(100 * 1000);
    }
    for (int i = 0; i < n; i++)
        if (ps[i].pid > 0) {
            fprintf(stderr, "%s: %s did not stop in 30 s; SIGKILL\n", me, ps[i].name);
            kill(ps[i].pid, SIGKILL);
            waitpid(ps[i].pid, NULL, 0);
            ps[i].pid = -1;
        }
}

/* Delete the topics of `prefix` (every one ax_kafka_create_topics()
 * creates) and its consumer groups <prefix><groups[i]>; failures are
 * reported, not fatal. conf supplies the broker settings. */
static inline void bench_delete_kafka(const char *me, const ax_conf_t *conf, const char *prefix,
                                      const char *const *groups, size_t ngroups) {
    ax_conf_t c = *conf; /* shallow: only topic_prefix differs, nothing is freed */
    char err[512];
    c.topic_prefix = (char *)prefix;
    if (ax_kafka_delete_topics(&c, groups, ngroups, err, sizeof err) < 0)
        fprintf(stderr, "%s: %s\n", me, err);
}

/* One chunk of a run's instances ($1: its deployment), deleted from their
 * definitions (their AFTER DELETE trigger takes the state rows, attempts
 * and submission keys with them); it answers how many went. A bench loops
 * on it until 0, and keeps its job row (which its next run's stale cleanup
 * finds) when a chunk fails: through the job_instance view in one
 * statement, the row-level trigger took over the statement timeout above
 * ~100,000 rows, and once the job row was gone nothing found the rest
 * (200,000 rows of a bench_callback run left for hours, walked by every
 * later run's retention sweep; BENCHMARKS.md, "The bench database's
 * bloat"). */
#define BENCH_DELETE_INSTANCES_SQL                                                             \
    "WITH x AS (SELECT id FROM instance_state WHERE deployment = $1 ORDER BY id LIMIT 20000),"  \
    " d AS (DELETE FROM instance_def d USING x WHERE d.id = x.id RETURNING 1)"                  \
    " SELECT count(*) FROM d"

/* The loop every bench runs on BENCH_DELETE_INSTANCES_SQL for the
 * deployment `prefix`, with its own statement runner (sql_int: the count, or
 * <0 with the error printed). 0 when nothing is left; -1 when a chunk failed,
 * said on stderr: the caller returns and keeps its job row. */
static inline int bench_delete_instances(int64_t (*sql_int)(const char *, int, const char *const *),
                                         const char *me, const char *prefix) {
    const char *pd[] = {prefix};
    int64_t gone;
    while ((gone = sql_int(BENCH_DELETE_INSTANCES_SQL, 1, pd)) > 0)
        ;
    if (gone == 0)
        return 0;
    fprintf(stderr, "%s: %s: instances left, deleted by a later run\n", me, prefix);
    return -1;
}

#endif
