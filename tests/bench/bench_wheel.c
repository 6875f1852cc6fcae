/*
 * bench_wheel — measures the timing wheel (libax/src/core/wheel.c) with
 * 1,000,000 armed timers, the trigger's target scale:
 *  (1) insert+cancel throughput over a wheel already holding 1M timers
 *      (deadlines spread over 0-24 h);
 *  (2) bytes per armed timer: RSS delta (/proc/self/statm) of arming 1M
 *      timers embedded in a minimal struct {entry; uint64_t id;};
 *  (3) fire lateness: 1M timers over ~10 s of real time driven by a real
 *      loop sleeping (clock_nanosleep, CLOCK_MONOTONIC) until
 *      ax_wheel_next_deadline; lateness = clock at fire - deadline, in us.
 * Each figure is measured 5 times; one line per run and the median are
 * printed. No assertions: speed depends on the machine. Build with -O2
 * (CMAKE_BUILD_TYPE=RelWithDebInfo).
 *
 * Usage: bench_wheel [seconds-of-spread for (3), default 10]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/wheel.h"
#include "bench_common.h"

#define N_TIMERS 1000000
#define REPS 5
#define DAY_MS ((uint64_t)24 * 3600 * 1000)

typedef struct timer {
    ax_wheel_entry_t e;
    uint64_t id;
} bench_timer_t;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void print_load(const char *when) {
    char buf[128] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f))
            strcpy(buf, "?\n");
        fclose(f);
    }
    printf("loadavg %s: %s", when, buf);
}

static void nop_cb(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now) {}

/* ---- (1) insert+cancel ------------------------------------------------ */

#define POOL 4096
#define PAIRS 20000000

/* cold = 0: link a pool entry, unlink one armed POOL/2 steps earlier.
 * cold = 1: re-arm random timers among the 1M (unlink + link each), so
 * both the entry and its list neighbours are usually cache misses. */
static double bench_insert_cancel(int cold) {
    ax_wheel_t *w = malloc(sizeof *w);
    bench_timer_t *ts = malloc(sizeof *ts * N_TIMERS);
    bench_timer_t *pool = malloc(sizeof *pool * POOL);
    uint64_t *dl = malloc(sizeof *dl * 65536);
    if (!w || !ts || !pool || !dl) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    ax_wheel_init(w, 0);
    for (uint64_t i = 0; i < N_TIMERS; i++) {
        ts[i].id = i;
        ax_wheel_entry_init(&ts[i].e, nop_cb);
        ax_wheel_link(w, &ts[i].e, rnd() % DAY_MS);
    }
    for (int i = 0; i < POOL; i++)
        ax_wheel_entry_init(&pool[i].e, nop_cb);
    for (int i = 0; i < 65536; i++)
        dl[i] = rnd() % DAY_MS;
    /* Each pool entry stays armed for POOL/2 steps before its cancel, so
     * the cancel patches list neighbours that are cold, as in real use. */
    uint64_t t0 = mono_ns(), pairs = cold ? PAIRS / 4 : PAIRS;
    if (cold) {
        for (uint64_t i = 0; i < pairs; i++) {
            bench_timer_t *t = &ts[rnd() % N_TIMERS];
            ax_wheel_unlink(&t->e);
            ax_wheel_link(w, &t->e, dl[i & 65535]);
        }
    } else {
        for (uint64_t i = 0; i < pairs; i++) {
            ax_wheel_link(w, &pool[i % POOL].e, dl[i & 65535]);
            ax_wheel_unlink(&pool[(i + POOL / 2) % POOL].e);
        }
    }
    uint64_t t1 = mono_ns();
    size_t n = ax_wheel_count(w);
    if (n < N_TIMERS) {
        fprintf(stderr, "count %zu < %d\n", n, N_TIMERS);
        exit(1);
    }
    free(dl);
    free(pool);
    free(ts);
    free(w);
    return (double)pairs / ((double)(t1 - t0) / 1e9);
}

/* ---- (2) bytes per armed timer ---------------------------------------- */

static long rss_pages(void) {
    long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident;
}

/* Run in a fresh child so earlier runs' heap does not hide the growth.
 * `each` = 1 mallocs every struct on its own (allocator overhead counts). */
static double bytes_per_timer_child(int each) {
    long page = sysconf(_SC_PAGESIZE);
    ax_wheel_t *w = malloc(sizeof *w);
    bench_timer_t **ptrs = each ? malloc(sizeof *ptrs * N_TIMERS) : NULL;
    if (!w || (each && !ptrs))
        return -1;
    /* The pointer array is bookkeeping of the benchmark, not of a timer:
     * touch it before the first reading. */
    if (ptrs)
        memset(ptrs, 0, sizeof *ptrs * N_TIMERS);
    ax_wheel_init(w, 0);
    long before = rss_pages();
    bench_timer_t *arr = each ? NULL : malloc(sizeof *arr * N_TIMERS);
    if (!each && !arr)
        return -1;
    for (uint64_t i = 0; i < N_TIMERS; i++) {
        bench_timer_t *t = each ? malloc(sizeof *t) : &arr[i];
        if (!t)
            return -1;
        if (each)
            ptrs[i] = t;
        t->id = i;
        ax_wheel_entry_init(&t->e, nop_cb);
        ax_wheel_link(w, &t->e, rnd() % DAY_MS);
    }
    long after = rss_pages();
    return (double)(after - before) * (double)page / N_TIMERS;
}

static double bytes_per_timer(int each) {
    int fd[2];
    double r = -1;
    if (pipe(fd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        double v = bytes_per_timer_child(each);
        if (write(fd[1], &v, sizeof v) != sizeof v)
            _exit(1);
        _exit(0);
    }
    close(fd[1]);
    if (pid > 0 && read(fd[0], &r, sizeof r) != sizeof r)
        r = -1;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return r;
}

/* ---- (3) fire lateness ------------------------------------------------ */

static int64_t *late_us;
static size_t late_n;

static void late_cb(ax_wheel_t *w, ax_wheel_entry_t *e, uint64_t now) {
    /* Deadline starts at the ms boundary at*1000 us; read the clock per
     * fire so the time spent on earlier callbacks of the run counts. */
    late_us[late_n++] = (int64_t)(mono_ns() / 1000) - (int64_t)(e->at * 1000);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t *wake_us, *runtime_us;

static void bench_lateness(uint64_t spread_ms, double *p50, double *p99, double *pmax,
                           size_t *wakeups, double *wake_p99, double *run_p99, double *run_max) {
    ax_wheel_t *w = malloc(sizeof *w);
    bench_timer_t *ts = malloc(sizeof *ts * N_TIMERS);
    late_us = malloc(sizeof *late_us * N_TIMERS);
    size_t max_wakes = spread_ms * 4 + 1000;
    wake_us = malloc(sizeof *wake_us * max_wakes);
    runtime_us = malloc(sizeof *runtime_us * max_wakes);
    if (!w || !ts || !late_us || !wake_us || !runtime_us) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    late_n = 0;
    /* Start 300 ms ahead so arming 1M timers is over before the first. */
    uint64_t base = mono_ns() / 1000000;
    ax_wheel_init(w, base);
    for (uint64_t i = 0; i < N_TIMERS; i++) {
        ts[i].id = i;
        ax_wheel_entry_init(&ts[i].e, late_cb);
        ax_wheel_link(w, &ts[i].e, base + 300 + rnd() % spread_ms);
    }
    *wakeups = 0;
    for (;;) {
        uint64_t nd = ax_wheel_next_deadline(w);
        if (nd == UINT64_MAX)
            break;
        struct timespec ts_abs = {.tv_sec = (time_t)(nd / 1000),
                                  .tv_nsec = (long)(nd % 1000) * 1000000};
        if (mono_ns() / 1000000 < nd)
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts_abs, NULL) != 0) {
            }
        uint64_t t0 = mono_ns();
        ax_wheel_run(w, t0 / 1000000);
        uint64_t t1 = mono_ns();
        if (*wakeups < max_wakes) {
            /* OS wake-up delay past the requested ms, and time in run(). */
            wake_us[*wakeups] = (int64_t)(t0 / 1000) - (int64_t)(nd * 1000);
            runtime_us[*wakeups] = (int64_t)((t1 - t0) / 1000);
            (*wakeups)++;
        }
    }
    qsort(wake_us, *wakeups, sizeof *wake_us, cmp_i64);
    qsort(runtime_us, *wakeups, sizeof *runtime_us, cmp_i64);
    *wake_p99 = (double)wake_us[*wakeups * 99 / 100];
    *run_p99 = (double)runtime_us[*wakeups * 99 / 100];
    *run_max = (double)runtime_us[*wakeups - 1];
    free(wake_us);
    free(runtime_us);
    qsort(late_us, late_n, sizeof *late_us, cmp_i64);
    *p50 = (double)late_us[late_n / 2];
    *p99 = (double)late_us[late_n * 99 / 100];
    *pmax = (double)late_us[late_n - 1];
    if (late_n != N_TIMERS)
        fprintf(stderr, "fired %zu of %d\n", late_n, N_TIMERS);
    free(late_us);
    free(ts);
    free(w);
}

int main(int argc, char **argv) {
    long long spread_s = 0;
    if (argc > 1 &&
        !bench_int_arg("bench_wheel", "seconds-of-spread", argv[1], 0, 1000000000, &spread_s))
        return 2;
    uint64_t spread_ms = (uint64_t)spread_s * 1000;
    if (spread_ms == 0)
        spread_ms = 10000;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("bench_wheel: %d armed timers, entry %zu bytes, timer struct %zu bytes, "
           "wheel %zu bytes, %d runs per figure\n",
           N_TIMERS, sizeof(ax_wheel_entry_t), sizeof(bench_timer_t), sizeof(ax_wheel_t), REPS);
    print_load("start");

    double v[REPS];
    for (int cold = 0; cold <= 1; cold++) {
        const char *what = cold ? "cold: re-arm random armed timer" : "hot: pool of 4096";
        for (int r = 0; r < REPS; r++) {
            v[r] = bench_insert_cancel(cold);
            printf("insert+cancel (%s) run %d: %.0f pairs/s (%.0f ops/s)\n", what, r + 1, v[r],
                   2 * v[r]);
        }
        double m = median(v, REPS);
        printf("RESULT insert+cancel median (%s): %.0f link+unlink pairs/s = %.0f ops/s "
               "(%.1f ns per pair) over %d armed\n", what, m, 2 * m, 1e9 / m, N_TIMERS);
    }

    for (int each = 0; each <= 1; each++) {
        for (int r = 0; r < REPS; r++) {
            v[r] = bytes_per_timer(each);
            printf("bytes/timer (%s) run %d: %.2f\n", each ? "malloc each" : "one array", r + 1,
                   v[r]);
        }
        printf("RESULT bytes per armed timer median (%s): %.2f\n",
               each ? "each struct malloc'd" : "structs in one array", median(v, REPS));
    }

    double p50[REPS], p99[REPS], pmax[REPS], wp99[REPS], rp99[REPS], rmax[REPS];
    for (int r = 0; r < REPS; r++) {
        size_t wake;
        bench_lateness(spread_ms, &p50[r], &p99[r], &pmax[r], &wake, &wp99[r], &rp99[r], &rmax[r]);
        printf("lateness run %d: p50 %.0f us, p99 %.0f us, max %.0f us (%zu wake-ups over %llu ms;"
               " OS wake-up delay p99 %.0f us; run() p99 %.0f us, max %.0f us)\n",
               r + 1, p50[r], p99[r], pmax[r], wake, (unsigned long long)spread_ms, wp99[r], rp99[r],
               rmax[r]);
    }
    printf("RESULT lateness median of %d runs: p50 %.0f us, p99 %.0f us, max %.0f us\n", REPS,
           median(p50, REPS), median(p99, REPS), median(pmax, REPS));
    printf("RESULT lateness breakdown (median): OS wake-up delay p99 %.0f us; run() p99 %.0f us,"
           " max %.0f us\n", median(wp99, REPS), median(rp99, REPS), median(rmax, REPS));
    print_load("end");
    return 0;
}
