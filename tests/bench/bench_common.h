/*
 * bench_common.h — what the benchmark programs share: CPU and load figures
 * from /proc, the broker's pid, medians, and an interruptible sleep.
 * Header-only (static inline), so each bench stays one source file.
 */
#ifndef AX_BENCH_COMMON_H
#define AX_BENCH_COMMON_H

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "ax/common.h"

/* utime + stime in clock ticks, or -1. */
static inline long long proc_ticks(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *s = strrchr(buf, ')');
    if (!s)
        return -1;
    long long ut = 0, st = 0;
    s++;
    for (int field = 3; field <= 15; field++) {
        char *end;
        while (*s == ' ')
            s++;
        if (field == 14)
            ut = strtoll(s, &end, 10);
        else if (field == 15)
            st = strtoll(s, &end, 10);
        s = strchr(s, ' ');
        if (!s && field < 15)
            return -1;
    }
    return ut + st;
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

#endif
