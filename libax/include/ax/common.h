/*
 * ax/common.h — small shared definitions: error codes, time helpers.
 *
 * Rule for the whole library (stated once): functions return 0 (AX_OK) on
 * success and a negative ax_err_t on failure; output parameters are named
 * ret_* and are left untouched on failure; an errbuf/errlen pair, when
 * present, receives a one-line reason. Objects come in _new()/_destroy()
 * pairs and _destroy(NULL) is a no-op.
 */
#ifndef AX_COMMON_H
#define AX_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef enum ax_err {
    AX_OK = 0,
    AX_ERR_INVALID = -1,   /* bad input; not retriable */
    AX_ERR_NOMEM = -2,
    AX_ERR_IO = -3,        /* server or OS failure; retriable */
    AX_ERR_NOTFOUND = -4,
    AX_ERR_CONFLICT = -5,  /* CAS lost / unique violation */
    AX_ERR_TOOBIG = -6,
} ax_err_t;

#define AX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Wall clock in ms since the epoch (for timestamps written into messages). */
static inline int64_t ax_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Monotonic clock in ms (for durations, timeouts, backoff). */
static inline int64_t ax_mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CLOCK_BOOTTIME in ms: monotonic like ax_mono_ms, and counting the time a
 * suspended (or paused) host stood still, for ages that a suspend must not
 * hide (a held batch's, ax_svc_held_age_ms). */
static inline int64_t ax_boot_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A total order of strings for sorting and searching sets of keys, not
 * the lexicographic one: by length, then byte by byte from the last. The
 * submit keys of a batch (kafka:TOPIC:PARTITION:OFFSET) share all but
 * their last digits: past two (vectorised) strlen, the comparison stops at
 * the first digit that differs instead of walking the shared prefix byte
 * by byte. In a perf profile of ax-trigger under load the ingest's key
 * sorts and searches were ~5 % of its samples; the change was not
 * measurable in bench_exec's CPU per job (BENCHMARKS.md, "Issue #13: the
 * thirtieth session"). */
static inline int ax_keycmp(const char *x, const char *y) {
    size_t a = strlen(x), b = strlen(y);
    if (a != b)
        return a < b ? -1 : 1;
    while (a-- > 0)
        if (x[a] != y[a])
            return (unsigned char)x[a] < (unsigned char)y[a] ? -1 : 1;
    return 0;
}

/* A duration in ms as a struct timeval (for libevent timers, select). */
#define AX_TV_MS(ms) {(time_t)((ms) / 1000), (long)(((ms) % 1000) * 1000)}

/* Capped exponential backoff: base * 2^attempt, at most cap (ms). */
static inline int64_t ax_backoff_ms(unsigned attempt, int64_t base, int64_t cap) {
    int64_t d = base;
    while (attempt-- > 0 && d < cap)
        d = d > cap / 2 ? cap : d * 2;
    return d < cap ? d : cap;
}

/* snprintf into errbuf if it is non-NULL; returns `code`. */
int ax_seterr(char *errbuf, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));


/* Fill `out` (2*nbytes+1 chars) with random hex (getrandom). */
void ax_random_hex(char *out, size_t nbytes);

/* A trace id ax generates for an instance that came without one:
 * AX_TRACE_ID_LEN lowercase hex digits (a W3C trace-id's shape), the first
 * 12 the wall-clock time in ms since the epoch, the other 20 random
 * (getrandom). Time first, so that the B-tree on instance_def.trace_id
 * takes each new key at its right-hand edge instead of at a random leaf:
 * over 2,000,000 rows 1.1 against 7.6 us a row, and after a checkpoint no
 * full-page image of a random leaf (BENCHMARKS.md, "Issue #13: the
 * twenty-eighth session"). The SQL
 * function ax_trace_id() (migration 028) makes the same shape. */
#define AX_TRACE_ID_LEN 32
void ax_trace_id_new(char out[AX_TRACE_ID_LEN + 1]);

/* Make `s` valid UTF-8 without NULs, in place: every byte of an invalid
 * sequence (or NUL) becomes '?'. Returns the number of bytes replaced. */
size_t ax_utf8_sanitize(char *s, size_t len);

/* 1 if s[0..n) is valid UTF-8 (NULs allowed). */
int ax_utf8_valid(const char *s, size_t n);

/* A time as ax takes it on command lines and in the API: ISO-8601 with an
 * offset (Z or +HH:MM, optional fraction), or epoch milliseconds. 0;
 * AX_ERR_INVALID (not such a time), AX_ERR_TOOBIG (outside years 1-9999). */
int ax_time_parse(const char *s, int64_t *ret_ms);

#endif
