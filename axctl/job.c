/*
 * job.c — axctl job: define and change jobs, their schedules, retry
 * policies and circuit breakers, preview their fire times, read their fire
 * ledger, and close an open circuit (job reset).
 *
 * Fire times are computed here with ax/schedule.h, the code ax-trigger
 * uses, by the trigger's rule: the next fire is the first one strictly
 * after max(the job's last ledger nominal_time, schedule_from - 1 ms); the
 * anchor of fixed_rate and fixed_delay is COALESCE(start_at, schedule_from).
 *
 * SQL text is made of constants only; every value is a parameter.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/cron.h"
#include "ax/pg.h"
#include "ax/retry.h"
#include "ax/schedule.h"
#include "axctl.h"

/* A timestamptz as epoch milliseconds. */
#define MS(x) "floor(extract(epoch FROM " x ") * 1000)::bigint"
/* Epoch milliseconds parameter as a timestamptz: TS_PRE $n TS_POST. */
#define TS_PRE "timestamptz 'epoch' + "
#define TS_POST "::bigint * interval '1 millisecond'"

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "axctl: out of memory\n");
        exit(1);
    }
    return p;
}

static void cat(ax_strbuf_t *b, const char *s) {
    if (ax_strbuf_add(b, s, strlen(s)) < 0) {
        fprintf(stderr, "axctl: out of memory\n");
        exit(1);
    }
}

static void fail_sql(char *err) {
    fprintf(stderr, "axctl: %s\n", pg_err_line(err));
    exit(1);
}

static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 128)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
            return 0;
    }
    return 1;
}

static void need_name(const char *sub, int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-')
        die_usagef("job %s needs a NAME (see axctl --help)", sub);
    if (!valid_name(argv[1]))
        die_usagef("invalid job name '%s': 1-128 of A-Z a-z 0-9 . _ - starting with a letter "
                   "or digit", argv[1]);
}

static void no_job(const char *name) {
    fprintf(stderr, "axctl: no job named %s\n", name);
    exit(1);
}

/* ---- zones and time formatting -------------------------------------------- */

static ax_tz_t *zone_open(const char *name) {
    char err[512];
    ax_tz_t *tz = NULL;
    if (ax_tz_new(name, &tz, err, sizeof err) == 0)
        return tz;
    fprintf(stderr, "axctl: warning: time zone '%s' cannot be loaded (%s); showing UTC\n", name,
            err);
    if (ax_tz_new("UTC", &tz, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", err);
        exit(1);
    }
    return tz;
}

static const char *fmt_time(const ax_tz_t *tz, int64_t ms, char *buf, size_t len) {
    if (ax_tz_format(tz, ms, buf, len) < 0)
        snprintf(buf, len, "%" PRId64, ms);
    return buf;
}

static const char *dst_mark(int flags) {
    return flags & AX_CRON_SHIFTED    ? " # DST: shifted"
           : flags & AX_CRON_REPEATED ? " # DST: repeated hour"
                                      : "";
}

/* ---- a job's schedule as stored --------------------------------------------- */

typedef struct {
    const char *name, *kind_name, *expr, *tz_name, *gap, *overlap, *last_decision, *inst_state;
    int enabled, kind;
    ax_dst_policy_t dst;
    int64_t interval_ms, start_ms, from_ms, last_ms, inst_id, fin_ms, now_ms;
    int has_start, has_last, has_inst, has_fin;
} jobrow_t;

#define JOB_ROW_SQL                                                                              \
    "SELECT j.name, j.enabled, j.schedule_kind, j.schedule_expr, j.time_zone, j.dst_gap,"       \
    " j.dst_overlap, j.interval_ms, " MS("j.start_at") ", " MS("j.schedule_from") ","           \
    " " MS("lf.nominal_time") ", lf.decision, lf.instance_id, li.state,"                        \
    " " MS("li.finished_at") ", " MS("now()") ", j.handler_kind, j.executor_group,"            \
    " j.concurrency_limit, j.routing_key, j.running_count, j.circuit_state,"                     \
    " j.consecutive_failures FROM job j"                                                         \
    " LEFT JOIN LATERAL (SELECT f.nominal_time, f.decision, f.instance_id FROM job_fire f"      \
    "  WHERE f.job_id = j.id ORDER BY f.nominal_time DESC LIMIT 1) lf ON true"                   \
    " LEFT JOIN job_instance li ON li.id = lf.instance_id"

static const char *opt_val(PGresult *r, int i, int c) {
    return PQgetisnull(r, i, c) ? NULL : PQgetvalue(r, i, c);
}

static void row_get(PGresult *r, int i, jobrow_t *j) {
    memset(j, 0, sizeof *j);
    j->name = PQgetvalue(r, i, 0);
    j->enabled = PQgetvalue(r, i, 1)[0] == 't';
    j->kind_name = PQgetvalue(r, i, 2);
    j->kind = ax_sched_kind_parse(j->kind_name);
    j->expr = opt_val(r, i, 3);
    j->tz_name = PQgetvalue(r, i, 4);
    j->gap = PQgetvalue(r, i, 5);
    j->overlap = PQgetvalue(r, i, 6);
    j->dst = (strcmp(j->gap, "skip") == 0 ? AX_DST_GAP_SKIP : AX_DST_GAP_SHIFT) |
             (strcmp(j->overlap, "twice") == 0 ? AX_DST_OVERLAP_TWICE : AX_DST_OVERLAP_ONCE);
    j->interval_ms = ax_pg_int(r, i, 7);
    j->has_start = !PQgetisnull(r, i, 8);
    j->start_ms = ax_pg_int(r, i, 8);
    j->from_ms = ax_pg_int(r, i, 9);
    j->has_last = !PQgetisnull(r, i, 10);
    j->last_ms = ax_pg_int(r, i, 10);
    j->last_decision = opt_val(r, i, 11);
    j->has_inst = !PQgetisnull(r, i, 12);
    j->inst_id = ax_pg_int(r, i, 12);
    j->inst_state = opt_val(r, i, 13);
    j->has_fin = !PQgetisnull(r, i, 14);
    j->fin_ms = ax_pg_int(r, i, 14);
    j->now_ms = ax_pg_int(r, i, 15);
}

/* The job by name (NULL if absent); the result owns the strings. */
static PGresult *job_load(ax_pg_t *pg, const char *name, int for_update, jobrow_t *j) {
    const char *p[] = {name};
    PGresult *r = q(pg,
                    for_update ? JOB_ROW_SQL " WHERE j.name = $1 FOR UPDATE OF j"
                               : JOB_ROW_SQL " WHERE j.name = $1",
                    1, p);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return NULL;
    }
    row_get(r, 0, j);
    return r;
}

/* schedule_from as the trigger will see it: a disabled job gets a new one
 * (now) when it is enabled. */
static int64_t eff_from(const jobrow_t *j) { return j->enabled ? j->from_ms : j->now_ms; }

static int sched_open(const jobrow_t *j, ax_schedule_t *s) {
    char err[512];
    int64_t anchor = j->kind == AX_SCHED_ONCE ? j->start_ms
                     : j->has_start           ? j->start_ms
                                              : eff_from(j);
    int kind = j->kind < 0 ? AX_SCHED_NONE : j->kind;
    if (ax_schedule_init(s, (ax_sched_kind_t)kind, j->expr, j->tz_name, j->dst, j->interval_ms,
                         anchor, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: job %s: the stored schedule is not usable: %s\n", j->name, err);
        return -1;
    }
    return 0;
}

typedef struct {
    int64_t t;
    int flags;
} fire_t;

/* Up to n next nominal fire times into out (strictly after `from` if
 * has_from, else by the trigger's rule). For fixed_delay past its first
 * fire: the last fired instance's finish + interval, or *ret_waiting = 1
 * while that instance has not finished. Returns the count, -1 on error. */
static int next_fires(const jobrow_t *j, int has_from, int64_t from, int n, fire_t *out,
                      int *ret_waiting) {
    ax_schedule_t s;
    *ret_waiting = 0;
    if (j->kind == AX_SCHED_NONE || n < 1)
        return 0;
    if (sched_open(j, &s) < 0)
        return -1;
    int64_t after = eff_from(j) - 1;
    if (has_from)
        after = from;
    else if (j->has_last && j->last_ms > after)
        after = j->last_ms;
    int k = 0;
    while (k < n) {
        int64_t t;
        int flags;
        if (ax_schedule_next(&s, after, &t, &flags) < 0)
            break;
        out[k].t = t;
        out[k].flags = flags;
        k++;
        after = t;
        if (j->kind == AX_SCHED_FIXED_DELAY)
            break;
    }
    if (j->kind == AX_SCHED_FIXED_DELAY && k == 0 && !has_from && j->has_last &&
        j->last_ms >= eff_from(j)) {
        if (j->has_fin) {
            out[0].t = j->fin_ms + j->interval_ms;
            out[0].flags = 0;
            k = 1;
        } else if (j->has_inst) {
            *ret_waiting = 1;
        }
    }
    ax_schedule_clear(&s);
    return k;
}

/* One line about the next fire ("-" if none), for list and after writes. */
static void next_summary(const jobrow_t *j, const ax_tz_t *tz, int verbose, char *buf,
                         size_t len) {
    fire_t f;
    int waiting;
    if (!j->enabled) {
        snprintf(buf, len, "%s", verbose ? "none (disabled)" : "-");
        return;
    }
    if (j->kind == AX_SCHED_NONE) {
        snprintf(buf, len, "%s", verbose ? "none (no schedule: runs when submitted)" : "-");
        return;
    }
    int k = next_fires(j, 0, 0, 1, &f, &waiting);
    if (k == 1) {
        char t[64];
        snprintf(buf, len, "%s%s", fmt_time(tz, f.t, t, sizeof t), dst_mark(f.flags));
    } else if (waiting) {
        snprintf(buf, len, "after instance %" PRId64 " finishes", j->inst_id);
    } else {
        snprintf(buf, len, "%s", k < 0 ? "?" : verbose ? "none" : "-");
    }
}

static char *sched_summary(const jobrow_t *j, const ax_tz_t *tz) {
    char *s = NULL, t[64];
    int rc = -1;
    switch (j->kind) {
    case AX_SCHED_CRON:
        rc = asprintf(&s, "cron '%s' %s%s%s", j->expr ? j->expr : "", j->tz_name,
                      j->dst & AX_DST_GAP_SKIP ? " dst-gap=skip" : "",
                      j->dst & AX_DST_OVERLAP_TWICE ? " dst-overlap=twice" : "");
        break;
    case AX_SCHED_FIXED_RATE:
    case AX_SCHED_FIXED_DELAY:
        rc = asprintf(&s, "%s %" PRId64 "ms%s%s", j->kind_name, j->interval_ms,
                      j->has_start ? " start " : "",
                      j->has_start ? fmt_time(tz, j->start_ms, t, sizeof t) : "");
        break;
    case AX_SCHED_ONCE:
        rc = asprintf(&s, "once %s", fmt_time(tz, j->start_ms, t, sizeof t));
        break;
    default:
        rc = asprintf(&s, "%s", j->kind_name);
        break;
    }
    if (rc < 0) {
        fprintf(stderr, "axctl: out of memory\n");
        exit(1);
    }
    return s;
}

/* "next fire: ..." after a write. */
static void report_next(ax_pg_t *pg, const char *name) {
    jobrow_t j;
    PGresult *r = job_load(pg, name, 0, &j);
    if (!r)
        return;
    ax_tz_t *tz = zone_open(j.tz_name);
    char buf[256];
    next_summary(&j, tz, 1, buf, sizeof buf);
    printf("next fire: %s\n", buf);
    ax_tz_destroy(tz);
    PQclear(r);
}

/* ---- create and update ------------------------------------------------------ */

typedef struct {
    int sched_set;          /* a schedule option was given */
    const char *sched_opt;  /* which one */
    int kind;
    const char *cron;
    int64_t interval_ms;
    int has_at, has_after, has_start;
    int64_t at_ms, after_ms, start_ms;
    const char *tz, *gap, *overlap, *misfire, *overlap_policy;
    int has_threshold, has_catchup, has_timeout, has_priority, has_payload;
    int64_t threshold, catchup, timeout, priority;
    const char *payload;
    size_t payload_len;
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
    const char *retry_mult;  /* normalised number text, NULL: not given */
    char retry_mult_buf[40];
    const char *retry_rules; /* NULL: clear (the default chain) */
    int has_circuit_threshold, has_circuit_cooldown;
    int64_t circuit_threshold, circuit_cooldown;
} opts_t;

static void set_sched(opts_t *o, const char *opt, int kind) {
    if (o->sched_set)
        die_usagef("%s and %s: give one schedule (--cron, --fixed-rate, --fixed-delay, --at, "
                   "--after or --no-schedule)", o->sched_opt, opt);
    o->sched_set = 1;
    o->sched_opt = opt;
    o->kind = kind;
}

static const char *one_of(const char *opt, const char *v, const char *const *allowed) {
    for (int i = 0; allowed[i]; i++)
        if (strcmp(v, allowed[i]) == 0)
            return v;
    char list[256] = "";
    for (int i = 0; allowed[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "",
                 allowed[i]);
    die_usagef("%s must be %s, not '%s'", opt, list, v);
}

static int64_t int_in(const char *opt, const char *v, int64_t lo, int64_t hi) {
    int64_t x = parse_int(v, opt);
    if (x < lo || x > hi) {
        if (hi == INT64_MAX)
            die_usagef("%s must be >= %" PRId64 ", not %s", opt, lo, v);
        die_usagef("%s must be %" PRId64 "..%" PRId64 ", not %s", opt, lo, hi, v);
    }
    return x;
}

static const char *const gap_values[] = {"shift", "skip", NULL};
static const char *const dst_overlap_values[] = {"once", "twice", NULL};
static const char *const misfire_values[] = {"fire_once", "skip", "catch_up", NULL};
static const char *const overlap_values[] = {"allow", "skip", "queue", "cancel", NULL};
static const char *const handler_values[] = {"command", "http", "plugin", NULL};

/* The job table's CHECK (misfire_threshold_ms >= 1000). */
#define MISFIRE_THRESHOLD_MIN_MS 1000
/* Longest --after and --fixed-rate/--fixed-delay interval: a century (the
 * fire times stay within what PostgreSQL and the trigger hold). */
#define SCHED_MS_MAX INT64_C(3153600000000)

/* The longest circuit cool-down: a year (beyond, "until axctl job reset"
 * is meant; a threshold of 0 turns the breaker off). */
#define CIRCUIT_COOLDOWN_MAX_MS INT64_C(31536000000)

/* An executor group: what the job table's CHECK allows (and what a Kafka
 * topic name can carry). */
static int valid_group(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '_' && c != '-')))
            return 0;
    }
    return 1;
}

/* Exits 2 unless the handler's command is usable by that handler:
 * command: an argv with a non-empty argv[0]; http: one http:// URL;
 * plugin: an absolute path to the .so, then its arguments. `given` says
 * whether the command came from this invocation (after --) or is stored. */
static void validate_handler(const char *kind, int ncommand, const char *first, int given) {
    const char *src = given ? "the command after --" : "the job's stored command";
    if (strcmp(kind, "command") == 0) {
        if (ncommand < 1 || !first || !*first)
            die_usagef("--handler command: %s must be a program and its arguments", src);
    } else if (strcmp(kind, "http") == 0) {
        if (ncommand != 1 || !first || strncmp(first, "http://", 7) != 0 || !first[7])
            die_usagef("--handler http: %s must be exactly one URL, http://HOST[:PORT]/PATH "
                       "(https is not supported)%s",
                       src, given ? "" : "; give one after --");
    } else if (strcmp(kind, "plugin") == 0) {
        if (ncommand < 1 || !first || first[0] != '/')
            die_usagef("--handler plugin: %s must be the absolute path of the plugin's .so, "
                       "then its arguments%s",
                       src, given ? "" : "; give one after --");
    }
}

static void parse_opts(const char *sub, int argc, char **argv, int create, opts_t *o) {
    memset(o, 0, sizeof *o);
    o->kind = AX_SCHED_NONE;
    int i = 2;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            if (i >= argc)
                die_usagef("job %s: -- needs COMMAND ARG...", sub);
            o->command = argv + i;
            o->ncommand = argc - i;
            for (int k = 0; k < o->ncommand; k++)
                if (!utf8_valid(o->command[k], strlen(o->command[k])))
                    die_usagef("job %s: argument %d of the command after -- is not valid UTF-8 "
                               "text", sub, k + 1);
            break;
        }
        if (strcmp(a, "--no-schedule") == 0) {
            set_sched(o, a, AX_SCHED_NONE);
            continue;
        }
        if (strcmp(a, "--disabled") == 0) {
            if (!create)
                die_usagef("--disabled is for job create; use: axctl job disable NAME");
            o->disabled = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0)
            die_usagef("job %s: unexpected argument '%s' (the command goes after --)", sub, a);
        static const char *const known[] = {
            "--cron", "--tz", "--dst-gap", "--dst-overlap", "--fixed-rate", "--fixed-delay",
            "--at", "--after", "--start", "--misfire", "--misfire-threshold", "--catchup-max",
            "--overlap", "--timeout", "--priority", "--payload", "--payload-file", "--handler",
            "--group", "--routing-key", "--concurrency", "--retries", "--retry-initial",
            "--retry-multiplier", "--retry-max-delay", "--retry-jitter", "--retry-rules",
            "--circuit-threshold", "--circuit-cooldown", "--backlog-max", "--tolerance", NULL};
        int k = 0;
        while (known[k] && strcmp(known[k], a) != 0)
            k++;
        if (!known[k])
            die_usagef("job %s: unknown option '%s' (see axctl --help)", sub, a);
        if (i + 1 >= argc)
            die_usagef("%s needs a value", a);
        const char *v = argv[++i];
        if (strcmp(a, "--payload") != 0 && strcmp(a, "--payload-file") != 0)
            need_utf8(v, a); /* stored as text (a payload is bytes) */
        if (strcmp(a, "--cron") == 0) {
            set_sched(o, a, AX_SCHED_CRON);
            o->cron = v;
        } else if (strcmp(a, "--tz") == 0) {
            o->tz = v;
        } else if (strcmp(a, "--dst-gap") == 0) {
            o->gap = one_of(a, v, gap_values);
        } else if (strcmp(a, "--dst-overlap") == 0) {
            o->overlap = one_of(a, v, dst_overlap_values);
        } else if (strcmp(a, "--fixed-rate") == 0 || strcmp(a, "--fixed-delay") == 0) {
            set_sched(o, a, a[8] == 'r' ? AX_SCHED_FIXED_RATE : AX_SCHED_FIXED_DELAY);
            o->interval_ms = int_in(a, v, 1, SCHED_MS_MAX);
        } else if (strcmp(a, "--at") == 0) {
            set_sched(o, a, AX_SCHED_ONCE);
            o->has_at = 1;
            o->at_ms = parse_time(v, a);
        } else if (strcmp(a, "--after") == 0) {
            set_sched(o, a, AX_SCHED_ONCE);
            o->has_after = 1;
            o->after_ms = int_in(a, v, 0, SCHED_MS_MAX);
        } else if (strcmp(a, "--start") == 0) {
            o->has_start = 1;
            o->start_ms = parse_time(v, a);
        } else if (strcmp(a, "--misfire") == 0) {
            o->misfire = one_of(a, v, misfire_values);
        } else if (strcmp(a, "--misfire-threshold") == 0) {
            o->has_threshold = 1;
            o->threshold = int_in(a, v, MISFIRE_THRESHOLD_MIN_MS, INT64_MAX);
        } else if (strcmp(a, "--catchup-max") == 0) {
            o->has_catchup = 1;
            o->catchup = int_in(a, v, 1, 10000);
        } else if (strcmp(a, "--overlap") == 0) {
            o->overlap_policy = one_of(a, v, overlap_values);
        } else if (strcmp(a, "--timeout") == 0) {
            o->has_timeout = 1;
            o->timeout = int_in(a, v, 1, SCHED_MS_MAX);
        } else if (strcmp(a, "--priority") == 0) {
            o->has_priority = 1;
            o->priority = int_in(a, v, 0, 4);
        } else if (strcmp(a, "--payload") == 0 || strcmp(a, "--payload-file") == 0) {
            if (o->has_payload)
                die_usagef("give one of --payload TEXT or --payload-file FILE");
            o->has_payload = 1;
            if (a[9] == '\0') {
                o->payload = v;
                o->payload_len = strlen(v);
            } else {
                o->payload = read_file(v, &o->payload_len);
            }
        } else if (strcmp(a, "--handler") == 0) {
            o->handler = one_of(a, v, handler_values);
        } else if (strcmp(a, "--group") == 0) {
            if (!valid_group(v))
                die_usagef("--group must be 1-64 of A-Z a-z 0-9 _ - starting with a letter or "
                           "digit, not '%s'", v);
            group_check(v);
            o->group = v;
        } else if (strcmp(a, "--routing-key") == 0) {
            if (strlen(v) > 255)
                die_usagef("--routing-key must name a payload field of at most 255 bytes");
            o->has_routing_key = 1;
            o->routing_key = *v ? v : NULL;
        } else if (strcmp(a, "--backlog-max") == 0) {
            o->has_backlog_max = 1;
            o->backlog_max = strcmp(v, "none") == 0 ? -1 : int_in(a, v, 0, 1000000000);
        } else if (strcmp(a, "--tolerance") == 0) {
            o->has_tolerance = 1;
            o->tolerance = int_in(a, v, 0, 3600000);
        } else if (strcmp(a, "--concurrency") == 0) {
            o->has_concurrency = 1;
            o->concurrency = int_in(a, v, 0, 1000000);
        } else if (strcmp(a, "--retries") == 0) {
            o->has_retries = 1;
            o->retries = int_in(a, v, 0, 1000000);
        } else if (strcmp(a, "--retry-initial") == 0) {
            o->has_retry_initial = 1;
            o->retry_initial = int_in(a, v, 0, AX_RETRY_MAX_DELAY_MS);
        } else if (strcmp(a, "--retry-max-delay") == 0) {
            o->has_retry_max = 1;
            o->retry_max = int_in(a, v, 0, AX_RETRY_MAX_DELAY_MS);
        } else if (strcmp(a, "--retry-jitter") == 0) {
            o->has_retry_jitter = 1;
            o->retry_jitter = int_in(a, v, 0, AX_RETRY_MAX_DELAY_MS);
        } else if (strcmp(a, "--retry-multiplier") == 0) {
            char *end;
            double x = strtod(v, &end);
            if (!*v || *end || !isfinite(x) || x < 1 || x > 1000)
                die_usagef("%s must be a number 1..1000, not '%s'", a, v);
            snprintf(o->retry_mult_buf, sizeof o->retry_mult_buf, "%.17g", x);
            o->retry_mult = o->retry_mult_buf;
        } else if (strcmp(a, "--retry-rules") == 0) {
            /* What ax-callback will parse: refuse a chain it would ignore. */
            ax_retry_policy_t pol;
            char err[512];
            ax_retry_policy_default(&pol);
            if (ax_retry_rules_parse(&pol, v, err, sizeof err) < 0)
                die_usagef("%s: %s", a, err);
            o->has_retry_rules = 1;
            o->retry_rules = v[strspn(v, " \t\r\n")] ? v : NULL;
        } else if (strcmp(a, "--circuit-threshold") == 0) {
            o->has_circuit_threshold = 1;
            o->circuit_threshold = int_in(a, v, 0, 1000000);
        } else if (strcmp(a, "--circuit-cooldown") == 0) {
            o->has_circuit_cooldown = 1;
            o->circuit_cooldown = int_in(a, v, 0, CIRCUIT_COOLDOWN_MAX_MS);
        }
    }
    if (o->has_start && o->sched_set && o->kind != AX_SCHED_FIXED_RATE &&
        o->kind != AX_SCHED_FIXED_DELAY)
        die_usagef("--start goes with --fixed-rate or --fixed-delay, not %s", o->sched_opt);
}

/* Exits 2 unless zone and schedule are usable (what ax-trigger will build). */
static void validate(int kind, const char *cron, const char *tz, const char *gap,
                     const char *overlap) {
    char err[512];
    ax_tz_t *z = NULL;
    int rc = ax_tz_new(tz, &z, err, sizeof err);
    if (rc < 0)
        die_usagef("--tz: %s", err);
    ax_tz_destroy(z);
    if (kind != AX_SCHED_CRON)
        return;
    ax_dst_policy_t dst = (gap && strcmp(gap, "skip") == 0 ? AX_DST_GAP_SKIP : 0) |
                          (overlap && strcmp(overlap, "twice") == 0 ? AX_DST_OVERLAP_TWICE : 0);
    ax_schedule_t s;
    rc = ax_schedule_init(&s, AX_SCHED_CRON, cron, tz, dst, 0, 0, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "axctl: invalid cron expression '%s': %s\n", cron ? cron : "", err);
        int pos;
        if (cron && sscanf(err, "position %d:", &pos) == 1 && pos >= 1)
            fprintf(stderr, "  %s\n  %*s^\n", cron, pos - 1, "");
        exit(2);
    }
    ax_schedule_clear(&s);
}

/* Column list builder: INSERT (cols / vals) or UPDATE (cols holds
 * "col = value, ..."); values are always parameters. */
#define SB_MAX 48
typedef struct {
    ax_strbuf_t cols, vals;
    int update, n, ncols;
    const char *params[SB_MAX];
    int lengths[SB_MAX], formats[SB_MAX];
    char nums[SB_MAX][24];
} sqlb_t;

static void sb_param(sqlb_t *b, const char *val, int len, int binary) {
    if (b->n >= SB_MAX)
        abort();
    b->params[b->n] = val;
    b->lengths[b->n] = len;
    b->formats[b->n] = binary;
    b->n++;
}

/* col = pre $N post, with parameter val (NULL: SQL NULL). */
static void sb_add(sqlb_t *b, const char *col, const char *pre, const char *post,
                   const char *val, int len, int binary) {
    char ph[16];
    sb_param(b, val, len, binary);
    snprintf(ph, sizeof ph, "$%d", b->n);
    ax_strbuf_t *dst = b->update ? &b->cols : &b->vals;
    if (b->ncols++) {
        cat(&b->cols, ", ");
        if (!b->update)
            cat(&b->vals, ", ");
    }
    cat(&b->cols, col);
    if (b->update)
        cat(&b->cols, " = ");
    cat(dst, pre);
    cat(dst, ph);
    cat(dst, post);
}

static void sb_int(sqlb_t *b, const char *col, const char *pre, const char *post, int64_t v) {
    if (b->n >= SB_MAX)
        abort();
    char *num = b->nums[b->n];
    snprintf(num, sizeof b->nums[0], "%" PRId64, v);
    sb_add(b, col, pre, post, num, 0, 0);
}

static void sb_free(sqlb_t *b) {
    ax_strbuf_free(&b->cols);
    ax_strbuf_free(&b->vals);
}

/* The columns of the given options. A schedule option sets all the
 * schedule columns (those it does not use to NULL). */
static void sb_opts(sqlb_t *b, const opts_t *o, ax_strbuf_t *cmd) {
    if (o->sched_set) {
        sb_add(b, "schedule_kind", "", "::text", ax_sched_kind_name((ax_sched_kind_t)o->kind), 0,
               0);
        sb_add(b, "schedule_expr", "", "::text", o->kind == AX_SCHED_CRON ? o->cron : NULL, 0, 0);
        if (o->kind == AX_SCHED_FIXED_RATE || o->kind == AX_SCHED_FIXED_DELAY)
            sb_int(b, "interval_ms", "", "::bigint", o->interval_ms);
        else
            sb_add(b, "interval_ms", "", "::bigint", NULL, 0, 0);
        if (o->has_at)
            sb_int(b, "start_at", TS_PRE, TS_POST, o->at_ms);
        else if (o->has_after)
            sb_int(b, "start_at", "date_trunc('milliseconds', now()) + ", TS_POST, o->after_ms);
        else if (o->has_start)
            sb_int(b, "start_at", TS_PRE, TS_POST, o->start_ms);
        else
            sb_add(b, "start_at", "", "::timestamptz", NULL, 0, 0);
    } else if (o->has_start) {
        sb_int(b, "start_at", TS_PRE, TS_POST, o->start_ms);
    }
    if (o->tz)
        sb_add(b, "time_zone", "", "::text", o->tz, 0, 0);
    if (o->gap)
        sb_add(b, "dst_gap", "", "::text", o->gap, 0, 0);
    if (o->overlap)
        sb_add(b, "dst_overlap", "", "::text", o->overlap, 0, 0);
    if (o->misfire)
        sb_add(b, "misfire_policy", "", "::text", o->misfire, 0, 0);
    if (o->has_threshold)
        sb_int(b, "misfire_threshold_ms", "", "::bigint", o->threshold);
    if (o->has_catchup)
        sb_int(b, "catchup_max", "", "::int", o->catchup);
    if (o->overlap_policy)
        sb_add(b, "overlap_policy", "", "::text", o->overlap_policy, 0, 0);
    if (o->has_timeout)
        sb_int(b, "timeout_ms", "", "::bigint", o->timeout);
    if (o->has_priority)
        sb_int(b, "priority", "", "::smallint", o->priority);
    if (o->has_payload)
        sb_add(b, "payload", "", "::bytea", o->payload ? o->payload : "", (int)o->payload_len, 1);
    if (o->handler)
        sb_add(b, "handler_kind", "", "::text", o->handler, 0, 0);
    if (o->group)
        sb_add(b, "executor_group", "", "::text", o->group, 0, 0);
    if (o->has_routing_key)
        sb_add(b, "routing_key", "", "::text", o->routing_key, 0, 0);
    if (o->has_backlog_max) {
        if (o->backlog_max >= 0)
            sb_int(b, "backlog_max", "", "::int", o->backlog_max);
        else
            sb_add(b, "backlog_max", "", "::int", NULL, 0, 0);
    }
    if (o->has_tolerance)
        sb_int(b, "tolerance_ms", "", "::int", o->tolerance);
    if (o->has_concurrency) {
        if (o->concurrency > 0)
            sb_int(b, "concurrency_limit", "", "::int", o->concurrency);
        else
            sb_add(b, "concurrency_limit", "", "::int", NULL, 0, 0);
    }
    if (o->has_retries)
        sb_int(b, "retry_max", "", "::int", o->retries);
    if (o->has_retry_initial)
        sb_int(b, "retry_initial_ms", "", "::bigint", o->retry_initial);
    if (o->retry_mult)
        sb_add(b, "retry_multiplier", "", "::double precision", o->retry_mult, 0, 0);
    if (o->has_retry_max)
        sb_int(b, "retry_max_ms", "", "::bigint", o->retry_max);
    if (o->has_retry_jitter)
        sb_int(b, "retry_jitter_ms", "", "::bigint", o->retry_jitter);
    if (o->has_retry_rules)
        sb_add(b, "retry_rules", "", "::jsonb", o->retry_rules, 0, 0);
    if (o->has_circuit_threshold)
        sb_int(b, "circuit_threshold", "", "::int", o->circuit_threshold);
    if (o->has_circuit_cooldown)
        sb_int(b, "circuit_cooldown_ms", "", "::bigint", o->circuit_cooldown);
    if (o->ncommand) {
        ax_pgarr_begin(cmd);
        for (int i = 0; i < o->ncommand; i++)
            ax_pgarr_text(cmd, o->command[i]);
        if (ax_pgarr_end(cmd) < 0) {
            fprintf(stderr, "axctl: out of memory\n");
            exit(1);
        }
        sb_add(b, "command", "", "::text[]", cmd->s, 0, 0);
    }
}

static int job_create(int argc, char **argv) {
    need_name("create", argc, argv);
    const char *name = argv[1];
    opts_t o;
    parse_opts("create", argc, argv, 1, &o);
    if (!o.ncommand)
        die_usagef("job create needs -- COMMAND ARG...");
    if (o.has_start && o.kind != AX_SCHED_FIXED_RATE && o.kind != AX_SCHED_FIXED_DELAY)
        die_usagef("--start goes with --fixed-rate or --fixed-delay");
    validate(o.kind, o.cron, o.tz ? o.tz : "UTC", o.gap, o.overlap);
    validate_handler(o.handler ? o.handler : "command", o.ncommand, o.command[0], 1);

    ax_pg_t *pg = pg_open();
    sqlb_t b = {0};
    ax_strbuf_t cmd = {0};
    sb_add(&b, "name", "", "::text", name, 0, 0);
    if (o.disabled)
        sb_add(&b, "enabled", "", "::boolean", "false", 0, 0);
    sb_opts(&b, &o, &cmd);
    ax_strbuf_t sql = {0};
    cat(&sql, "INSERT INTO job (");
    cat(&sql, b.cols.s);
    cat(&sql, ") VALUES (");
    cat(&sql, b.vals.s);
    cat(&sql, ")");
    char err[1024];
    int rc = ax_pg_exec(pg, sql.s, b.n, b.params, b.lengths, b.formats, NULL, err, sizeof err);
    ax_strbuf_free(&sql);
    ax_strbuf_free(&cmd);
    sb_free(&b);
    if (rc == AX_ERR_CONFLICT) {
        fprintf(stderr, "axctl: a job named %s already exists (change it with job update)\n",
                name);
        return 1;
    }
    if (rc < 0)
        fail_sql(err);
    printf("created job %s\n", name);
    report_next(pg, name);
    ax_pg_destroy(pg);
    return 0;
}

static int job_update(int argc, char **argv) {
    need_name("update", argc, argv);
    const char *name = argv[1];
    opts_t o;
    parse_opts("update", argc, argv, 0, &o);
    if (argc <= 2)
        die_usagef("job update needs at least one option to change (see axctl --help)");
    /* What can be checked without the stored job. */
    validate(o.sched_set ? o.kind : AX_SCHED_NONE, o.cron, o.tz ? o.tz : "UTC", o.gap,
             o.overlap);

    ax_pg_t *pg = pg_open();
    char err[1024];
    if (ax_pg_begin(pg, err, sizeof err) < 0)
        fail_sql(err);
    jobrow_t j;
    PGresult *cur = job_load(pg, name, 1, &j);
    if (!cur)
        no_job(name);
    int kind = o.sched_set ? o.kind : j.kind;
    if (o.has_start && kind != AX_SCHED_FIXED_RATE && kind != AX_SCHED_FIXED_DELAY)
        die_usagef("--start goes with a fixed-rate or fixed-delay schedule; job %s has %s", name,
                   ax_sched_kind_name((ax_sched_kind_t)kind));
    validate(kind, o.sched_set ? o.cron : j.expr, o.tz ? o.tz : j.tz_name,
             o.gap ? o.gap : j.gap, o.overlap ? o.overlap : j.overlap);
    PQclear(cur);
    if (o.handler || o.ncommand) {
        /* The handler and its command must fit together, whichever of the
         * two changes. */
        const char *p[] = {name};
        PGresult *hr = q(pg,
                         "SELECT handler_kind, coalesce(cardinality(command), 0), command[1]"
                         " FROM job WHERE name = $1",
                         1, p);
        if (PQntuples(hr) != 1)
            no_job(name);
        const char *hkind = o.handler ? o.handler : PQgetvalue(hr, 0, 0);
        if (o.ncommand)
            validate_handler(hkind, o.ncommand, o.command[0], 1);
        else
            validate_handler(hkind, (int)ax_pg_int(hr, 0, 1), opt_val(hr, 0, 2), 0);
        PQclear(hr);
    }

    sqlb_t b = {0};
    ax_strbuf_t cmd = {0};
    b.update = 1;
    sb_param(&b, name, 0, 0);
    sb_opts(&b, &o, &cmd);
    if (!b.ncols)
        die_usagef("job update needs at least one option to change (see axctl --help)");
    ax_strbuf_t sql = {0};
    cat(&sql, "UPDATE job SET ");
    cat(&sql, b.cols.s);
    cat(&sql, " WHERE name = $1");
    int rc = ax_pg_exec(pg, sql.s, b.n, b.params, b.lengths, b.formats, NULL, err, sizeof err);
    ax_strbuf_free(&sql);
    ax_strbuf_free(&cmd);
    sb_free(&b);
    if (rc < 0 || ax_pg_commit(pg, err, sizeof err) < 0)
        fail_sql(err);
    printf("updated job %s\n", name);
    report_next(pg, name);
    ax_pg_destroy(pg);
    return 0;
}

/* ---- enable, disable, delete ---------------------------------------------------- */

static int job_enable(int argc, char **argv, int enable) {
    need_name(enable ? "enable" : "disable", argc, argv);
    if (argc > 2)
        die_usagef("job %s takes only a NAME", enable ? "enable" : "disable");
    const char *name = argv[1];
    ax_pg_t *pg = pg_open();
    const char *p[] = {name, enable ? "true" : "false"};
    PGresult *r = q(pg,
                    "UPDATE job SET enabled = $2::boolean WHERE name = $1"
                    " AND enabled <> $2::boolean RETURNING id",
                    2, p);
    int changed = PQntuples(r) == 1;
    PQclear(r);
    if (!changed) {
        r = q(pg, "SELECT 1 FROM job WHERE name = $1", 1, p);
        if (PQntuples(r) == 0)
            no_job(name);
        PQclear(r);
        printf("job %s is already %s\n", name, enable ? "enabled" : "disabled");
    } else {
        printf("%s job %s\n", enable ? "enabled" : "disabled", name);
    }
    if (enable)
        report_next(pg, name);
    ax_pg_destroy(pg);
    return 0;
}

/* job delete's last step: lock the job's unfinished instances, then the
 * job (the order the callback and the executors lock them in), refuse if
 * it has unfinished instances nobody asked to cancel, delete. 0 deleted,
 * 1 refused (said why), else an error (err), rolled back. */
static int delete_tx(ax_pg_t *pg, const char *name, const char *jid, const char *pending_sql,
                     char *err, size_t errlen) {
    PGresult *r = NULL;
    const char *jp[] = {jid}, *np[] = {name, jid}, *pp[] = {jid, "false"};
    int rc = ax_pg_begin(pg, err, errlen);
    if (rc == 0)
        rc = ax_pg_exec(pg,
                        "SELECT id FROM job_instance WHERE job_id = $1::bigint"
                        " AND state <> 'FINISHED' ORDER BY id FOR UPDATE",
                        1, jp, NULL, NULL, NULL, err, errlen);
    if (rc == 0)
        rc = ax_pg_exec(pg, "SELECT id FROM job WHERE name = $1 AND id = $2::bigint FOR UPDATE",
                        2, np, NULL, NULL, &r, err, errlen);
    if (rc == 0 && PQntuples(r) == 0) {
        fprintf(stderr, "axctl: job %s was deleted or replaced meanwhile: nothing more deleted\n",
                name);
        PQclear(r);
        ax_pg_rollback(pg);
        return 1;
    }
    PQclear(r);
    r = NULL;
    if (rc == 0)
        rc = ax_pg_exec(pg, pending_sql, 2, pp, NULL, NULL, &r, err, errlen);
    if (rc == 0 && ax_pg_int(r, 0, 0) > 0) {
        int64_t fresh = ax_pg_int(r, 0, 0);
        fprintf(stderr,
                "axctl: job %s has %lld unfinished instance(s) (%s%s) nobody asked to cancel "
                "(made since): not deleted; disable it first (axctl job disable %s), then run "
                "job delete %s --cancel-pending again\n",
                name, (long long)fresh, PQgetvalue(r, 0, 1), fresh > 5 ? ", ..." : "", name,
                name);
        PQclear(r);
        ax_pg_rollback(pg);
        return 1;
    }
    PQclear(r);
    if (rc == 0)
        rc = ax_pg_exec(pg, "DELETE FROM job WHERE id = $1::bigint", 1, jp, NULL, NULL, NULL,
                        err, errlen);
    if (rc == 0)
        return ax_pg_commit(pg, err, errlen);
    ax_pg_rollback(pg);
    return rc;
}

/* A job with unfinished instances is deleted only with --cancel-pending
 * (they are cancelled first: instance.c); without it the delete is refused
 * and names them, so no instance is left behind that nothing dispatches.
 * No PostgreSQL transaction is open while Kafka is waited for (up to 35 s:
 * other services would wait on its row locks): cancel_requested_at is
 * committed first, the cancellations produced, then the job deleted in a
 * short transaction of its own, refused if it has unfinished instances
 * nobody asked to cancel (new since). */
static int job_delete(int argc, char **argv) {
    need_name("delete", argc, argv);
    int cancel = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--cancel-pending") == 0)
            cancel = 1;
        else
            die_usagef("job delete: unknown argument '%s' (job delete NAME [--cancel-pending])",
                       argv[i]);
    }
    ax_pg_t *pg = pg_open();
    char err[1024];
    const char *p[] = {argv[1]};
    PGresult *r = q(pg, "SELECT id FROM job WHERE name = $1", 1, p);
    if (PQntuples(r) == 0)
        no_job(argv[1]);
    char jid[32];
    snprintf(jid, sizeof jid, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    /* unfinished instances: count, the first five, all (for cancel_instances) */
    static const char pending_sql[] =
        "SELECT count(*), coalesce((SELECT string_agg(id::text, ', ' ORDER BY id)"
        "  FROM (SELECT id FROM job_instance WHERE job_id = $1::bigint"
        "   AND state <> 'FINISHED' AND ($2::boolean OR cancel_requested_at IS NULL)"
        "   ORDER BY id LIMIT 5) f), ''),"
        " coalesce(array_agg(id ORDER BY id)::text, '{}')"
        " FROM job_instance WHERE job_id = $1::bigint AND state <> 'FINISHED'"
        " AND ($2::boolean OR cancel_requested_at IS NULL)";
    const char *pp[] = {jid, "true"};
    PGresult *pr = q(pg, pending_sql, 2, pp);
    int64_t pending = ax_pg_int(pr, 0, 0);
    if (pending > 0 && !cancel) {
        fprintf(stderr,
                "axctl: job %s has %lld unfinished instance(s) (%s%s): not deleted; cancel them "
                "with job delete %s --cancel-pending, or wait for them to finish\n",
                argv[1], (long long)pending, PQgetvalue(pr, 0, 1), pending > 5 ? ", ..." : "",
                argv[1]);
        exit(1); /* nothing written */
    }
    if (pending > 0) {
        int stopping, scheduled;
        /* outside any transaction: its UPDATE commits before Kafka is waited for */
        if (cancel_instances(pg, PQgetvalue(pr, 0, 2),
                             "cancelled by an operator (axctl job delete --cancel-pending)",
                             &stopping, &scheduled) < 0)
            exit(1);
        printf("cancelled %d instance(s) not started yet; asked executors to stop %d claimed "
               "or running\n", scheduled, stopping);
    }
    PQclear(pr);
    /* The delete: a short transaction of its own, tried again if
     * PostgreSQL picks it to end a deadlock (the callback finishing the
     * cancelled instances locks an instance, then the job). */
    for (int tries = 1;; tries++) {
        int rc = delete_tx(pg, argv[1], jid, pending_sql, err, sizeof err);
        if (rc == 0)
            break;
        if (rc == 1)
            exit(1); /* refused (said why); the cancellations stay */
        if (rc != AX_ERR_IO || tries == 5 ||
            (!strstr(err, "deadlock detected") && !strstr(err, "could not serialize")))
            fail_sql(err);
        usleep((useconds_t)(100000 * tries));
    }
    printf("deleted job %s\n", argv[1]);
    ax_pg_destroy(pg);
    return 0;
}

/* ---- list, show, next, history ---------------------------------------------------- */

static int job_list(int argc, char **argv) {
    if (argc > 1)
        die_usagef("job list takes no arguments");
    ax_pg_t *pg = pg_open();
    PGresult *r = q(pg, JOB_ROW_SQL " ORDER BY j.name", 0, NULL);
    int n = PQntuples(r);
    char **sum = xmalloc(sizeof *sum * (size_t)n), **next = xmalloc(sizeof *next * (size_t)n);
    size_t wname = 0, wsum = 0;
    for (int i = 0; i < n; i++) {
        jobrow_t j;
        row_get(r, i, &j);
        ax_tz_t *tz = zone_open(j.tz_name);
        char buf[256];
        sum[i] = sched_summary(&j, tz);
        next_summary(&j, tz, 0, buf, sizeof buf);
        next[i] = strdup(buf);
        ax_tz_destroy(tz);
        if (strlen(j.name) > wname)
            wname = strlen(j.name);
        if (strlen(sum[i]) > wsum)
            wsum = strlen(sum[i]);
    }
    for (int i = 0; i < n; i++) {
        /* Run settings that differ from the defaults, after the next fire. */
        char extra[512] = "";
        size_t el = 0;
        if (strcmp(PQgetvalue(r, i, 16), "command") != 0)
            el += (size_t)snprintf(extra + el, sizeof extra - el, "  handler=%s",
                                   PQgetvalue(r, i, 16));
        if (strcmp(PQgetvalue(r, i, 17), "default") != 0 && el < sizeof extra)
            el += (size_t)snprintf(extra + el, sizeof extra - el, "  group=%s",
                                   PQgetvalue(r, i, 17));
        if (!PQgetisnull(r, i, 18) && el < sizeof extra)
            el += (size_t)snprintf(extra + el, sizeof extra - el, "  concurrency=%s running=%s",
                                   PQgetvalue(r, i, 18), PQgetvalue(r, i, 20));
        if (!PQgetisnull(r, i, 19) && el < sizeof extra)
            el += (size_t)snprintf(extra + el, sizeof extra - el, "  routing-key=%.200s",
                                   PQgetvalue(r, i, 19));
        if (strcmp(PQgetvalue(r, i, 21), "closed") != 0 && el < sizeof extra)
            snprintf(extra + el, sizeof extra - el, "  circuit=%s failures=%s",
                     PQgetvalue(r, i, 21), PQgetvalue(r, i, 22));
        printf("%-*s  %-8s  %-*s  %s%s\n", (int)wname, PQgetvalue(r, i, 0),
               PQgetvalue(r, i, 1)[0] == 't' ? "enabled" : "disabled", (int)wsum, sum[i],
               next[i] ? next[i] : "?", extra);
        free(sum[i]);
        free(next[i]);
    }
    free(sum);
    free(next);
    PQclear(r);
    ax_pg_destroy(pg);
    return 0;
}

/* Prints the next fires as `prefix TIME[ # DST: ...]` lines (fixed_delay:
 * plus a comment line). Returns 0, or 1 if the schedule is unusable. */
static int print_next(const char *prefix, const jobrow_t *j, const ax_tz_t *tz, int has_from,
                      int64_t from, int64_t n) {
    fire_t *f = xmalloc(sizeof *f * (size_t)n);
    int waiting;
    int k = next_fires(j, has_from, from, (int)n, f, &waiting);
    for (int i = 0; i < k; i++) {
        char t[64];
        printf("%s%s%s\n", prefix, fmt_time(tz, f[i].t, t, sizeof t), dst_mark(f[i].flags));
    }
    free(f);
    if (k < 0)
        return 1;
    if (j->kind == AX_SCHED_FIXED_DELAY) {
        if (waiting)
            printf("%s# waiting for instance %" PRId64 " (%s) to finish\n", prefix, j->inst_id,
                   j->inst_state ? j->inst_state : "gone");
        printf("%s# then every run starts %" PRId64 " ms after the previous one finished\n",
               prefix, j->interval_ms);
    }
    return 0;
}

static void print_payload(const char *key, const char *hex) {
    /* json_each_text gives bytea as "\x" and hex digits. */
    size_t n = strlen(hex) > 2 ? (strlen(hex) - 2) / 2 : 0;
    int printable = 1;
    char *bytes = xmalloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 + 2 * i, "%2x", &v);
        bytes[i] = (char)v;
        if (v < 0x20 && v != '\t')
            printable = 0;
    }
    bytes[n] = '\0';
    if (n == 0)
        printf("%s: (empty)\n", key);
    else if (printable)
        printf("%s: (%zu bytes) %s\n", key, n, bytes);
    else
        printf("%s: (%zu bytes) %s\n", key, n, hex);
    free(bytes);
}

static int job_show(int argc, char **argv) {
    need_name("show", argc, argv);
    if (argc > 2)
        die_usagef("job show takes only a NAME");
    const char *name = argv[1];
    ax_pg_t *pg = pg_open();
    jobrow_t j;
    PGresult *jr = job_load(pg, name, 0, &j);
    if (!jr)
        no_job(name);
    ax_tz_t *tz = zone_open(j.tz_name);
    /* Every column, in table order, whatever columns the table has. */
    const char *p[] = {name};
    PGresult *r = q(pg,
                    "SELECT e.key, e.value, t.typname,"
                    " CASE WHEN a.atttypid = 'timestamptz'::regtype AND e.value IS NOT NULL"
                    "  THEN " MS("e.value::timestamptz") " END"
                    " FROM job j"
                    " CROSS JOIN LATERAL json_each_text(row_to_json(j)) WITH ORDINALITY"
                    "  AS e(key, value, n)"
                    " LEFT JOIN pg_attribute a ON a.attrelid = 'job'::regclass AND a.attname = e.key"
                    " LEFT JOIN pg_type t ON t.oid = a.atttypid"
                    " WHERE j.name = $1 ORDER BY e.n",
                    1, p);
    for (int i = 0; i < PQntuples(r); i++) {
        const char *key = PQgetvalue(r, i, 0), *type = PQgetvalue(r, i, 2);
        char t[64];
        if (PQgetisnull(r, i, 1))
            printf("%s:\n", key);
        else if (!PQgetisnull(r, i, 3))
            printf("%s: %s\n", key, fmt_time(tz, ax_pg_int(r, i, 3), t, sizeof t));
        else if (strcmp(type, "bytea") == 0)
            print_payload(key, PQgetvalue(r, i, 1));
        else
            printf("%s: %s\n", key, PQgetvalue(r, i, 1));
    }
    PQclear(r);
    if (j.has_last) {
        char t[64];
        printf("last_fire: %s %s", fmt_time(tz, j.last_ms, t, sizeof t), j.last_decision);
        if (j.has_inst)
            printf(" instance %" PRId64 " %s", j.inst_id, j.inst_state ? j.inst_state : "(gone)");
        printf("\n");
    } else {
        printf("last_fire: -\n");
    }
    int rc = 0;
    if (!j.enabled)
        printf("next_fire: - (disabled)\n");
    else if (j.kind == AX_SCHED_NONE)
        printf("next_fire: - (no schedule: runs when submitted)\n");
    else
        rc = print_next("next_fire: ", &j, tz, 0, 0, 5);
    ax_tz_destroy(tz);
    PQclear(jr);
    ax_pg_destroy(pg);
    return rc;
}

static int job_next(int argc, char **argv) {
    need_name("next", argc, argv);
    const char *name = argv[1];
    int64_t n = 10, from = 0;
    int has_from = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-n") != 0 && strcmp(a, "--from") != 0)
            die_usagef("job next: unknown option '%s' (see axctl --help)", a);
        if (i + 1 >= argc)
            die_usagef("%s needs a value", a);
        const char *v = argv[++i];
        if (a[1] == 'n')
            n = int_in(a, v, 1, 100000);
        else {
            has_from = 1;
            from = parse_time(v, a);
        }
    }
    ax_pg_t *pg = pg_open();
    jobrow_t j;
    PGresult *jr = job_load(pg, name, 0, &j);
    if (!jr)
        no_job(name);
    if (j.kind == AX_SCHED_NONE)
        fprintf(stderr, "axctl: job %s has no schedule: it runs only when submitted\n", name);
    else if (!j.enabled)
        fprintf(stderr, "axctl: job %s is disabled; these are the times if it is enabled now\n",
                name);
    ax_tz_t *tz = zone_open(j.tz_name);
    int rc = print_next("", &j, tz, has_from, from, n);
    ax_tz_destroy(tz);
    PQclear(jr);
    ax_pg_destroy(pg);
    return rc;
}

static int job_history(int argc, char **argv) {
    need_name("history", argc, argv);
    const char *name = argv[1];
    const char *limit = "20", *since = NULL;
    char since_buf[32];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--limit") != 0 && strcmp(a, "--since") != 0)
            die_usagef("job history: unknown option '%s' (see axctl --help)", a);
        if (i + 1 >= argc)
            die_usagef("%s needs a value", a);
        const char *v = argv[++i];
        if (a[2] == 'l') {
            int_in(a, v, 1, 1000000);
            limit = v;
        } else {
            snprintf(since_buf, sizeof since_buf, "%" PRId64, parse_time(v, a));
            since = since_buf;
        }
    }
    ax_pg_t *pg = pg_open();
    jobrow_t j;
    PGresult *jr = job_load(pg, name, 0, &j);
    if (!jr)
        no_job(name);
    ax_tz_t *tz = zone_open(j.tz_name);
    const char *p[] = {name, since, limit};
    PGresult *r = q(pg,
                    "SELECT " MS("f.nominal_time") ", f.decision, f.instance_id, i.state,"
                    " i.outcome, f.detail, i.id IS NOT NULL"
                    " FROM job_fire f JOIN job j ON j.id = f.job_id"
                    " LEFT JOIN job_instance i ON i.id = f.instance_id"
                    " WHERE j.name = $1 AND ($2::bigint IS NULL OR f.nominal_time >= "
                    TS_PRE "$2" TS_POST ")"
                    " ORDER BY f.nominal_time DESC LIMIT $3::int",
                    3, p);
    for (int i = 0; i < PQntuples(r); i++) {
        char t[64], st[64];
        const char *inst = PQgetisnull(r, i, 2) ? "-" : PQgetvalue(r, i, 2);
        if (PQgetisnull(r, i, 2))
            snprintf(st, sizeof st, "-");
        else if (PQgetvalue(r, i, 6)[0] != 't')
            snprintf(st, sizeof st, "(gone)");
        else if (!PQgetisnull(r, i, 4))
            snprintf(st, sizeof st, "%s/%s", PQgetvalue(r, i, 3), PQgetvalue(r, i, 4));
        else
            snprintf(st, sizeof st, "%s", PQgetvalue(r, i, 3));
        char *line = NULL;
        if (asprintf(&line, "%-25s  %-15s  %-8s  %-16s  %s",
                     fmt_time(tz, ax_pg_int(r, i, 0), t, sizeof t), PQgetvalue(r, i, 1), inst, st,
                     PQgetisnull(r, i, 5) ? "" : PQgetvalue(r, i, 5)) < 0) {
            fprintf(stderr, "axctl: out of memory\n");
            exit(1);
        }
        size_t len = strlen(line);
        while (len > 0 && line[len - 1] == ' ')
            line[--len] = '\0';
        puts(line);
        free(line);
    }
    PQclear(r);
    ax_tz_destroy(tz);
    PQclear(jr);
    ax_pg_destroy(pg);
    return 0;
}

/* ---- reset: close a job's circuit breaker ------------------------------------------ */

static int job_reset(int argc, char **argv) {
    need_name("reset", argc, argv);
    if (argc > 2)
        die_usagef("job reset takes only a NAME");
    const char *name = argv[1];
    ax_pg_t *pg = pg_open();
    char err[1024];
    if (ax_pg_begin(pg, err, sizeof err) < 0)
        fail_sql(err);
    const char *p[] = {name};
    PGresult *r = q(pg,
                    "SELECT circuit_state, consecutive_failures, " MS("circuit_opened_at") ","
                    " time_zone, circuit_threshold FROM job WHERE name = $1 FOR UPDATE",
                    1, p);
    if (PQntuples(r) != 1)
        no_job(name);
    /* Only circuit columns: the job's version stays, the trigger reads the
     * circuit when the job next fires. */
    PQclear(q(pg,
              "UPDATE job SET circuit_state = 'closed', consecutive_failures = 0,"
              " circuit_opened_at = NULL WHERE name = $1",
              1, p));
    if (ax_pg_commit(pg, err, sizeof err) < 0)
        fail_sql(err);
    const char *state = PQgetvalue(r, 0, 0), *fails = PQgetvalue(r, 0, 1);
    if (strcmp(state, "closed") == 0) {
        printf("job %s: circuit was already closed (%s consecutive failures, threshold %s); "
               "failure count reset\n",
               name, fails, PQgetvalue(r, 0, 4));
    } else {
        char t[64] = "?";
        if (!PQgetisnull(r, 0, 2)) {
            ax_tz_t *tz = zone_open(PQgetvalue(r, 0, 3));
            fmt_time(tz, ax_pg_int(r, 0, 2), t, sizeof t);
            ax_tz_destroy(tz);
        }
        printf("job %s: circuit was %s%s since %s after %s consecutive failures; now closed\n",
               name, state, strcmp(state, "half_open") == 0 ? " (a probe was running)" : "", t,
               fails);
    }
    PQclear(r);
    ax_pg_destroy(pg);
    return 0;
}

/* ---- a flow's schedule (axctl flow, flow.c) -------------------------------------- */

/* The options of job create/update that make sense for a flow's schedule
 * job: the schedule and its misfire and overlap policies. */
static const char *const flow_sched_opts[] = {
    "--cron", "--tz", "--dst-gap", "--dst-overlap", "--fixed-rate", "--at", "--after", "--start",
    "--misfire", "--misfire-threshold", "--catchup-max", "--overlap", NULL};

int job_flow_sched_opt(const char *opt) {
    if (strcmp(opt, "--no-schedule") == 0)
        return 0;
    for (int i = 0; flow_sched_opts[i]; i++)
        if (strcmp(opt, flow_sched_opts[i]) == 0)
            return 1;
    return -1;
}

int job_flow_schedule(ax_pg_t *pg, const char *flow, const char *flow_id, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        int arity = job_flow_sched_opt(argv[i]);
        if (arity < 0) {
            if (strcmp(argv[i], "--fixed-delay") == 0)
                die_usagef("--fixed-delay does not apply to a flow (it waits for an instance; a "
                           "flow's fire starts a run): use --fixed-rate or --cron");
            die_usagef("flow schedule: unknown option '%s' (a schedule: --cron, --fixed-rate, "
                       "--at, --after or --no-schedule, and --tz --dst-gap --dst-overlap --start "
                       "--misfire --misfire-threshold --catchup-max --overlap)",
                       argv[i]);
        }
        i += arity;
    }
    /* parse_opts reads argv[2..]: "schedule", the job's name, the options. */
    char **av = xmalloc(sizeof *av * ((size_t)argc + 3));
    char jobname[160];
    snprintf(jobname, sizeof jobname, "flow.%s", flow);
    av[0] = "schedule";
    av[1] = jobname;
    for (int i = 0; i < argc; i++)
        av[i + 2] = argv[i];
    av[argc + 2] = NULL;
    opts_t o;
    parse_opts("schedule", argc + 2, av, 0, &o);
    if (o.overlap_policy && strcmp(o.overlap_policy, "allow") != 0 &&
        strcmp(o.overlap_policy, "skip") != 0)
        die_usagef("--overlap for a flow must be allow or skip (a fire starts a run, not an "
                   "instance to queue behind or cancel), not '%s'", o.overlap_policy);
    validate(o.sched_set ? o.kind : AX_SCHED_NONE, o.cron, o.tz ? o.tz : "UTC", o.gap,
             o.overlap);

    const char *fp[] = {flow_id};
    PGresult *cur = q(pg, "SELECT name FROM job WHERE flow_id = $1::bigint FOR UPDATE", 1, fp);
    int exists = PQntuples(cur) == 1;
    if (exists)
        snprintf(jobname, sizeof jobname, "%s", PQgetvalue(cur, 0, 0));
    PQclear(cur);
    char err[1024];
    sqlb_t b = {0};
    ax_strbuf_t cmd = {0}, sql = {0};
    int rc;
    if (!exists) {
        if (!o.sched_set || o.kind == AX_SCHED_NONE) {
            if (o.sched_set || argc == 0) {
                free(av);
                return 0; /* no schedule, none wanted */
            }
            die_usagef("flow %s has no schedule yet: give --cron, --fixed-rate, --at or --after",
                       flow);
        }
        if (!valid_name(jobname))
            die_usagef("flow name '%s' too long for its schedule job %s (at most 123 characters)",
                       flow, jobname);
        sb_add(&b, "name", "", "::text", jobname, 0, 0);
        sb_add(&b, "handler_kind", "", "::text", "flow", 0, 0);
        sb_add(&b, "flow_id", "", "::bigint", flow_id, 0, 0);
        sb_opts(&b, &o, &cmd);
        cat(&sql, "INSERT INTO job (");
        cat(&sql, b.cols.s);
        cat(&sql, ") VALUES (");
        cat(&sql, b.vals.s);
        cat(&sql, ")");
    } else {
        jobrow_t j;
        PGresult *jr = job_load(pg, jobname, 1, &j);
        if (!jr)
            no_job(jobname);
        int kind = o.sched_set ? o.kind : j.kind;
        if (o.has_start && kind != AX_SCHED_FIXED_RATE)
            die_usagef("--start goes with a fixed-rate schedule; flow %s has %s", flow,
                       ax_sched_kind_name((ax_sched_kind_t)kind));
        validate(kind, o.sched_set ? o.cron : j.expr, o.tz ? o.tz : j.tz_name,
                 o.gap ? o.gap : j.gap, o.overlap ? o.overlap : j.overlap);
        PQclear(jr);
        b.update = 1;
        sb_param(&b, jobname, 0, 0);
        sb_opts(&b, &o, &cmd);
        if (!b.ncols)
            die_usagef("flow schedule needs a schedule option (see axctl --help)");
        cat(&sql, "UPDATE job SET ");
        cat(&sql, b.cols.s);
        cat(&sql, " WHERE name = $1");
    }
    rc = ax_pg_exec(pg, sql.s, b.n, b.params, b.lengths, b.formats, NULL, err, sizeof err);
    ax_strbuf_free(&sql);
    ax_strbuf_free(&cmd);
    sb_free(&b);
    free(av);
    if (rc == AX_ERR_CONFLICT) {
        fprintf(stderr, "axctl: a job named %s already exists and is not the schedule of flow %s\n",
                jobname, flow);
        exit(1);
    }
    if (rc < 0)
        fail_sql(err);
    return 1;
}

int job_sched_describe(ax_pg_t *pg, const char *name, int verbose, char **sched, char **next) {
    jobrow_t j;
    PGresult *r = job_load(pg, name, 0, &j);
    if (!r)
        return -1;
    ax_tz_t *tz = zone_open(j.tz_name);
    char buf[256];
    *sched = sched_summary(&j, tz);
    next_summary(&j, tz, verbose, buf, sizeof buf);
    *next = strdup(buf);
    ax_tz_destroy(tz);
    PQclear(r);
    if (!*next) {
        fprintf(stderr, "axctl: out of memory\n");
        exit(1);
    }
    return 0;
}

int cmd_job(int argc, char **argv) {
    if (argc < 1)
        die_usage("job needs a subcommand: create, update, delete, enable, disable, list, show, "
                  "next, history, reset");
    const char *sub = argv[0];
    if (strcmp(sub, "create") == 0)
        return job_create(argc, argv);
    if (strcmp(sub, "update") == 0)
        return job_update(argc, argv);
    if (strcmp(sub, "delete") == 0)
        return job_delete(argc, argv);
    if (strcmp(sub, "enable") == 0)
        return job_enable(argc, argv, 1);
    if (strcmp(sub, "disable") == 0)
        return job_enable(argc, argv, 0);
    if (strcmp(sub, "list") == 0)
        return job_list(argc, argv);
    if (strcmp(sub, "show") == 0)
        return job_show(argc, argv);
    if (strcmp(sub, "next") == 0)
        return job_next(argc, argv);
    if (strcmp(sub, "history") == 0)
        return job_history(argc, argv);
    if (strcmp(sub, "reset") == 0)
        return job_reset(argc, argv);
    die_usagef("unknown job subcommand '%s' (see axctl --help)", sub);
}
