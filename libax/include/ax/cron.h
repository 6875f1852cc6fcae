/*
 * ax/cron.h — cron expressions evaluated in an IANA time zone.
 *
 * Pure computation (core): nothing here reads the clock or a file. The
 * TZif data of a zone other than UTC comes from the loader the program
 * installed (ax_tz_set_loader; ax_tzfile_load in ax/tzfile.h reads the
 * zoneinfo directory, $TZDIR else /usr/share/zoneinfo), once per zone.
 * Objects are immutable after creation, so one ax_cron_t may be used from
 * many threads at once. The library never touches the TZ variable.
 *
 * Syntax (full reference with examples in docs/CRON.md):
 *   5 fields   "min hour dom month dow"            (seconds are 0)
 *   6 fields   "sec min hour dom month dow"
 *   macros     @yearly @annually @monthly @weekly @daily @midnight @hourly
 *   each field is a comma list of: *  N  N-M  with an optional /STEP
 *   (N/STEP means N-max/STEP); names JAN-DEC and SUN-SAT, case-insensitive;
 *   dow 0-7 with 0 and 7 both Sunday.
 *   day of month also: ?  L (last day)  L-N (N days before the last day)
 *                      NW (weekday nearest day N, within the month)
 *                      LW (last weekday of the month)
 *   day of week also:  ?  D#N (N-th weekday D of the month, N 1-5)
 *                      DL (last weekday D of the month, e.g. 5L, FRIL)
 *
 * Day rule (standard cron): when both day-of-month and day-of-week are
 * restricted — neither is exactly "*" or "?" — a day matches when EITHER
 * matches ("0 0 13 * FRI" fires on every 13th and on every Friday).
 * Otherwise the restricted field alone decides. Note that "*" followed by a
 * step (e.g. every-other-day written with a slash) counts as restricted
 * here, unlike Vixie cron.
 *
 * DST: the schedule is in local wall-clock time of the zone. A local time
 * that does not exist (spring forward) runs at the instant that local time
 * would have had with the offset in force before the gap — 02:30 becomes
 * 03:30 in Berlin (AX_DST_GAP_SHIFT, default, as RFC 5545) — or not at all
 * (AX_DST_GAP_SKIP). A local time that occurs twice (fall back) runs at its
 * first occurrence only (AX_DST_OVERLAP_ONCE, default) or at both
 * (AX_DST_OVERLAP_TWICE). A shifted time equal to a regular fire time is
 * one run.
 */
#ifndef AX_CRON_H
#define AX_CRON_H

#include <stddef.h>
#include <stdint.h>

#include "ax/common.h"

typedef struct ax_cron ax_cron_t;
typedef struct ax_tz ax_tz_t;

/* DST policy: one GAP value OR-ed with one OVERLAP value (0 = defaults). */
typedef unsigned ax_dst_policy_t;
enum {
    AX_DST_GAP_SHIFT = 0,
    AX_DST_GAP_SKIP = 1,
    AX_DST_OVERLAP_ONCE = 0,
    AX_DST_OVERLAP_TWICE = 2,
};

/* ret_flags bits of ax_cron_next. */
enum {
    AX_CRON_SHIFTED = 1,  /* the local time fell into a DST gap; moved later */
    AX_CRON_REPEATED = 2, /* second occurrence of a repeated local time */
};

/* Years searched ahead by ax_cron_next before AX_ERR_NOTFOUND. Not 5:
 * "0 0 29 2 *" has a 8-year gap across 2100, and a fifth Monday in
 * February can be 28+ years away. */
#define AX_CRON_HORIZON_YEARS 50

/* Parse `expr` for zone `tz` (IANA name; NULL, "" or "UTC" need no tzdata).
 * Errors: AX_ERR_INVALID with "position N: reason" (N 1-based in expr) for
 * a bad expression, or a reason for a bad zone name / corrupt data;
 * AX_ERR_NOTFOUND when the loader has no such zone (tzdata missing, or no
 * loader installed); AX_ERR_IO from the loader; AX_ERR_NOMEM. */
int ax_cron_new(const char *expr, const char *tz, ax_dst_policy_t dst, ax_cron_t **ret_cron,
                char *errbuf, size_t errlen);
void ax_cron_destroy(ax_cron_t *c);

/* The first fire time strictly after `after_ms` (UTC epoch ms); fire times
 * are whole seconds. ret_flags (may be NULL) gets AX_CRON_* bits.
 * AX_ERR_NOTFOUND if none within AX_CRON_HORIZON_YEARS (e.g. "0 0 30 2 *"). */
int ax_cron_next(const ax_cron_t *c, int64_t after_ms, int64_t *ret_next_ms, int *ret_flags);

/* The zone of the expression (owned by it). */
const ax_tz_t *ax_cron_tz(const ax_cron_t *c);

/* ---- time zones (usable on their own) ---------------------------------- */

/* Where the TZif data of a zone comes from. A loader fills ret->bytes
 * (malloc'ed; ax_tz_new frees it, on failure too) with the TZif file of
 * zone `name` (a checked name: no "..", no leading '/'), at most
 * AX_TZ_MAX_BYTES, and ret->origin with where it came from (a path, for
 * messages). Errors: AX_ERR_NOTFOUND for an unknown zone (the reason says
 * whether tzdata is missing), AX_ERR_IO, AX_ERR_NOMEM; errbuf names the
 * zone. */
#define AX_TZ_MAX_BYTES (1 << 20)
typedef struct ax_tz_data {
    unsigned char *bytes;
    size_t len;
    char origin[512];
} ax_tz_data_t;
typedef int (*ax_tz_loader_fn)(const char *name, ax_tz_data_t *ret, char *errbuf, size_t errlen);

/* Install the process's loader (NULL: none; then only UTC exists and any
 * other zone is AX_ERR_NOTFOUND). Programs call it once at start, before
 * their threads; zones already loaded stay cached. */
void ax_tz_set_loader(ax_tz_loader_fn fn);

/* Load zone `name` (see ax_cron_new for names and errors). */
int ax_tz_new(const char *name, ax_tz_t **ret_tz, char *errbuf, size_t errlen);
void ax_tz_destroy(ax_tz_t *tz);
const char *ax_tz_name(const ax_tz_t *tz);

/* UTC offset in seconds (east positive) in force at UTC instant `utc_s`. */
int32_t ax_tz_offset(const ax_tz_t *tz, int64_t utc_s);

/* Format `ms` as ISO-8601 local time with the zone's offset, e.g.
 * "2026-03-29T03:00:00+02:00" (".mmm" only when ms is not whole; offsets
 * with seconds, as in old LMT, as +HH:MM:SS). Returns strlen or negative. */
int ax_tz_format(const ax_tz_t *tz, int64_t ms, char *buf, size_t len);

#endif
