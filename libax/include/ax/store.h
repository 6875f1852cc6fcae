/*
 * ax/store.h — the store layer: every SQL statement ax runs lives in
 * libax/src/store/, one file per table family, as a named constant
 * prepared once per connection. Services and axctl call the typed
 * functions of the family headers (ax/store_*.h) and never see SQL or a
 * column number; this header holds what all families share.
 *
 * Connections are the PostgreSQL adapter's ax_pg_t (ax/pg.h): open one
 * per thread that talks to PostgreSQL. Errors follow ax/pg.h:
 * AX_ERR_IO = retry later (server away, schema not ready, timeout),
 * AX_ERR_CONFLICT = unique violation, AX_ERR_INVALID = bad data.
 *
 * Every statement is counted and timed by name (calls, rows, errors,
 * total and worst time) for the metrics endpoint: ax_store_stats().
 */
#ifndef AX_STORE_H
#define AX_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_store_stat {
    const char *name;   /* "instance.claim", "job.load", ... */
    uint64_t calls;     /* executions (errors included) */
    uint64_t rows;      /* rows returned or affected */
    uint64_t errors;
    uint64_t total_us;  /* wall time of the round trips */
    uint64_t max_us;
} ax_store_stat_t;

/* A snapshot of every statement run so far in this process (at most `max`
 * copied into out[]); returns how many statements there are. */
size_t ax_store_stats(ax_store_stat_t *out, size_t max);

/* The CLOCK_MONOTONIC ms just before and just after this thread's last
 * statement execution (its round trip alone: a first run's prepare is not
 * in it), for callers that date a value the server computed, such as its
 * clock (0, 0 before any). */
void ax_store_last_exec(int64_t *ret_mono0, int64_t *ret_mono1);

#endif
