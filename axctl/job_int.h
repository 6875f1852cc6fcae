/*
 * job_int.h — what the parts of axctl job share: the options of job
 * create/update and flow schedules (job_opts.c), a job's schedule and fire
 * times as the trigger computes them (job_view.c), the commands (job.c)
 * and a flow's schedule job (job_flow.c). Calls go one way: job.c and
 * job_flow.c use job_opts.c and job_view.c, which use neither.
 */
#ifndef AXCTL_JOB_INT_H
#define AXCTL_JOB_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ax/cron.h"
#include "ax/store_job.h"

/* ---- job_opts.c: the options of job create/update ---------------------------------- */

typedef struct {
    int sched_set;         /* a schedule option was given */
    const char *sched_opt; /* which one */
    int kind;              /* ax_sched_kind_t */
    const char *cron;
    int64_t interval_ms;
    int has_at, has_after, has_start;
    int64_t at_ms, after_ms, start_ms;
    const char *tz, *gap, *overlap, *misfire, *overlap_policy;
    int has_threshold, has_catchup, has_timeout, has_priority, has_payload;
    int64_t threshold, catchup, timeout, priority;
    const char *payload;
    size_t payload_len;
    char *payload_buf; /* --payload-file's bytes (owned) */
    int disabled;
    char **command;
    int ncommand;
    const char *handler;     /* --handler */
    const char *group;       /* --group */
    int has_routing_key, has_concurrency, has_backlog_max, has_tolerance;
    int64_t backlog_max;     /* -1: clear */
    int64_t tolerance;
    const char *routing_key; /* NULL: clear */
    int64_t concurrency;     /* 0: clear */
    /* retry policy and circuit breaker */
    int has_retries, has_retry_initial, has_retry_max, has_retry_jitter, has_retry_rules;
    int64_t retries, retry_initial, retry_max, retry_jitter;
    const char *retry_mult; /* normalised number text, NULL: not given */
    char retry_mult_buf[40];
    const char *retry_rules; /* NULL: clear (the default chain) */
    int has_circuit_threshold, has_circuit_cooldown;
    int64_t circuit_threshold, circuit_cooldown;
} opts_t;

/* Names: exit 2 (naming the rule) unless usable. */
void job_need_name(const char *sub, int argc, char **argv);

/* The options argv[2..argc) of job `sub` (create: --disabled allowed);
 * exits 2 on a usage error. opts_free releases what it read. */
void job_parse_opts(const char *sub, int argc, char **argv, int create, opts_t *o);
void job_opts_free(opts_t *o);
/* 1 if the options change nothing. */
int job_opts_empty(const opts_t *o);
/* Exits 2 unless zone and schedule are usable (what ax-trigger builds). */
void job_validate(int kind, const char *cron, const char *tz, const char *gap,
                  const char *overlap);
/* Exits 2 unless the handler's command is usable by that handler; `given`:
 * the command came after -- (else it is the stored one). */
void job_validate_handler(const char *kind, int ncommand, const char *first, int given);
/* The store's spec of the options, for job `name` (borrows from o). */
void job_spec_of(const opts_t *o, const char *name, ax_job_spec_t *spec);
/* An option value in a range, exit 2 naming the option otherwise. */
int64_t job_int_in(const char *opt, const char *v, int64_t lo, int64_t hi);

/* ---- job_view.c: schedules and fire times ---------------------------------------- */

/* The zone (UTC, with a warning, if it cannot be loaded); NULL only if UTC
 * cannot be loaded either (said on stderr). */
ax_tz_t *job_zone_open(const char *name);
const char *job_fmt_time(const ax_tz_t *tz, int64_t ms, char *buf, size_t len);
const char *job_dst_mark(int flags);
/* "cron '...' ZONE", "fixed_rate 90000ms start ...", ... (malloc'd; NULL
 * if out of memory). */
char *job_sched_summary(const ax_job_t *j, const ax_tz_t *tz);
/* The next fire ("-" if none) in buf; verbose: say why there is none. */
void job_next_summary(const ax_job_t *j, const ax_tz_t *tz, int verbose, char *buf,
                      size_t len);
/* Prints up to n next fires as `prefix TIME[ # DST: ...]` lines (after
 * `from` if has_from, else by the trigger's rule; fixed_delay: with a
 * comment line). Returns 0, or 1 if the stored schedule is not usable. */
int job_print_next(const char *prefix, const ax_job_t *j, const ax_tz_t *tz, int has_from,
                   int64_t from, int64_t n);
/* A bytea value ("\x" and hex digits) as `key: (N bytes) TEXT` or hex. */
void job_print_payload(const char *key, const char *hex);

#endif
