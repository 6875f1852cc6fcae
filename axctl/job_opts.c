/*
 * job_opts.c — the options of axctl job create/update (and of a flow's
 * schedule): parsed and checked before anything is written, every invalid
 * value exits 2 naming its option; then turned into the store's job spec.
 */
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/conf.h"
#include "ax/fire.h"
#include "ax/job_json.h"
#include "ax/retry.h"
#include "ax/schedule.h"
#include "axctl.h"
#include "job_int.h"

/* The job table's CHECK (misfire_threshold_ms >= 1000). */
#define MISFIRE_THRESHOLD_MIN_MS 1000
/* Longest --after and --fixed-rate/--fixed-delay interval: a century (the
 * fire times stay within what PostgreSQL and the trigger hold). */
#define SCHED_MS_MAX INT64_C(3153600000000)
/* The longest circuit cool-down: a year (beyond, "until axctl job reset"
 * is meant; a threshold of 0 turns the breaker off). */
#define CIRCUIT_COOLDOWN_MAX_MS INT64_C(31536000000)

/* The names an option's value may take (NULL-terminated): the policies'
 * from the core's one table of each (ax/fire.h), which the trigger parses
 * with too. */
static const char *const *option_names(const char *opt) {
    static const char *const handler[] = {"command", "http", "plugin", NULL};
    static const char *const none[] = {NULL};
    return strcmp(opt, "--dst-gap") == 0       ? ax_dst_gap_names
           : strcmp(opt, "--dst-overlap") == 0 ? ax_dst_overlap_names
           : strcmp(opt, "--misfire") == 0     ? ax_misfire_names
           : strcmp(opt, "--overlap") == 0     ? ax_overlap_names
           : strcmp(opt, "--handler") == 0     ? handler
                                               : none;
}

void job_need_name(const char *sub, int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-')
        die_usagef("job %s needs a NAME (see axctl --help)", sub);
    if (!ax_job_name_valid(argv[1]))
        die_usagef("invalid job name '%s': 1-128 of A-Z a-z 0-9 . _ - starting with a letter "
                   "or digit", argv[1]);
}

static void set_sched(opts_t *o, const char *opt, int kind) {
    if (o->sched_set)
        die_usagef("%s and %s: give one schedule (--cron, --fixed-rate, --fixed-delay, --at, "
                   "--after or --no-schedule)", o->sched_opt, opt);
    o->sched_set = 1;
    o->sched_opt = opt;
    o->kind = kind;
}

static const char *one_of(const char *opt, const char *v) {
    const char *const *allowed = option_names(opt);
    for (int i = 0; allowed[i]; i++)
        if (strcmp(v, allowed[i]) == 0)
            return v;
    char list[256] = "";
    for (int i = 0; allowed[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "",
                 allowed[i]);
    die_usagef("%s must be %s, not '%s'", opt, list, v);
}

int64_t job_int_in(const char *opt, const char *v, int64_t lo, int64_t hi) {
    int64_t x = parse_int(v, opt);
    if (x < lo || x > hi) {
        if (hi == INT64_MAX)
            die_usagef("%s must be >= %" PRId64 ", not %s", opt, lo, v);
        die_usagef("%s must be %" PRId64 "..%" PRId64 ", not %s", opt, lo, hi, v);
    }
    return x;
}

void job_validate_handler(const char *kind, int ncommand, const char *first, int given) {
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

/* The schedule options; 0 if `a` is not one. */
static int opt_schedule(opts_t *o, const char *a, const char *v) {
    if (strcmp(a, "--cron") == 0) {
        set_sched(o, a, AX_SCHED_CRON);
        o->cron = v;
    } else if (strcmp(a, "--tz") == 0) {
        o->tz = v;
    } else if (strcmp(a, "--dst-gap") == 0) {
        o->gap = one_of(a, v);
    } else if (strcmp(a, "--dst-overlap") == 0) {
        o->overlap = one_of(a, v);
    } else if (strcmp(a, "--fixed-rate") == 0 || strcmp(a, "--fixed-delay") == 0) {
        set_sched(o, a, a[8] == 'r' ? AX_SCHED_FIXED_RATE : AX_SCHED_FIXED_DELAY);
        o->interval_ms = job_int_in(a, v, 1, SCHED_MS_MAX);
    } else if (strcmp(a, "--at") == 0) {
        set_sched(o, a, AX_SCHED_ONCE);
        o->has_at = 1;
        o->at_ms = parse_time(v, a);
    } else if (strcmp(a, "--after") == 0) {
        set_sched(o, a, AX_SCHED_ONCE);
        o->has_after = 1;
        o->after_ms = job_int_in(a, v, 0, SCHED_MS_MAX);
    } else if (strcmp(a, "--start") == 0) {
        o->has_start = 1;
        o->start_ms = parse_time(v, a);
    } else if (strcmp(a, "--misfire") == 0) {
        o->misfire = one_of(a, v);
    } else if (strcmp(a, "--misfire-threshold") == 0) {
        o->has_threshold = 1;
        o->threshold = job_int_in(a, v, MISFIRE_THRESHOLD_MIN_MS, INT64_MAX);
    } else if (strcmp(a, "--catchup-max") == 0) {
        o->has_catchup = 1;
        o->catchup = job_int_in(a, v, 1, 10000);
    } else if (strcmp(a, "--overlap") == 0) {
        o->overlap_policy = one_of(a, v);
    } else {
        return 0;
    }
    return 1;
}

/* The run options; 0 if `a` is not one. */
static int opt_run(opts_t *o, const char *a, const char *v) {
    if (strcmp(a, "--timeout") == 0) {
        o->has_timeout = 1;
        o->timeout = job_int_in(a, v, 1, SCHED_MS_MAX);
    } else if (strcmp(a, "--priority") == 0) {
        o->has_priority = 1;
        o->priority = job_int_in(a, v, 0, 4);
    } else if (strcmp(a, "--payload") == 0 || strcmp(a, "--payload-file") == 0) {
        if (o->has_payload)
            die_usagef("give one of --payload TEXT or --payload-file FILE");
        o->has_payload = 1;
        if (a[9] == '\0') {
            o->payload = v;
            o->payload_len = strlen(v);
        } else {
            o->payload = o->payload_buf = read_file(v, &o->payload_len);
        }
    } else if (strcmp(a, "--handler") == 0) {
        o->handler = one_of(a, v);
    } else if (strcmp(a, "--group") == 0) {
        /* p0-p9 (reserved) get group_check's own message */
        if (!ax_conf_group_reserved(v) && !ax_job_group_valid(v))
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
        o->backlog_max = strcmp(v, "none") == 0 ? -1 : job_int_in(a, v, 0, 1000000000);
    } else if (strcmp(a, "--tolerance") == 0) {
        o->has_tolerance = 1;
        o->tolerance = job_int_in(a, v, 0, 3600000);
    } else if (strcmp(a, "--concurrency") == 0) {
        o->has_concurrency = 1;
        o->concurrency = job_int_in(a, v, 0, 1000000);
    } else {
        return 0;
    }
    return 1;
}

/* The retry and circuit options; 0 if `a` is not one. */
static int opt_retry(opts_t *o, const char *a, const char *v) {
    if (strcmp(a, "--retries") == 0) {
        o->has_retries = 1;
        o->retries = job_int_in(a, v, 0, 1000000);
    } else if (strcmp(a, "--retry-initial") == 0) {
        o->has_retry_initial = 1;
        o->retry_initial = job_int_in(a, v, 0, AX_RETRY_MAX_DELAY_MS);
    } else if (strcmp(a, "--retry-max-delay") == 0) {
        o->has_retry_max = 1;
        o->retry_max = job_int_in(a, v, 0, AX_RETRY_MAX_DELAY_MS);
    } else if (strcmp(a, "--retry-jitter") == 0) {
        o->has_retry_jitter = 1;
        o->retry_jitter = job_int_in(a, v, 0, AX_RETRY_MAX_DELAY_MS);
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
        o->circuit_threshold = job_int_in(a, v, 0, 1000000);
    } else if (strcmp(a, "--circuit-cooldown") == 0) {
        o->has_circuit_cooldown = 1;
        o->circuit_cooldown = job_int_in(a, v, 0, CIRCUIT_COOLDOWN_MAX_MS);
    } else {
        return 0;
    }
    return 1;
}

/* The command after --, argv[i..argc). */
static void opt_command(const char *sub, int argc, char **argv, int i, opts_t *o) {
    if (i >= argc)
        die_usagef("job %s: -- needs COMMAND ARG...", sub);
    o->command = argv + i;
    o->ncommand = argc - i;
    for (int k = 0; k < o->ncommand; k++)
        if (!utf8_valid(o->command[k], strlen(o->command[k])))
            die_usagef("job %s: argument %d of the command after -- is not valid UTF-8 "
                       "text", sub, k + 1);
}

void job_parse_opts(const char *sub, int argc, char **argv, int create, opts_t *o) {
    memset(o, 0, sizeof *o);
    o->kind = AX_SCHED_NONE;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            opt_command(sub, argc, argv, i + 1, o);
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
        /* Each option's value is read by the one parser that knows it. */
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
        if (!opt_schedule(o, a, v) && !opt_run(o, a, v))
            opt_retry(o, a, v);
    }
    if (o->has_start && o->sched_set && o->kind != AX_SCHED_FIXED_RATE &&
        o->kind != AX_SCHED_FIXED_DELAY)
        die_usagef("--start goes with --fixed-rate or --fixed-delay, not %s", o->sched_opt);
}

void job_opts_free(opts_t *o) {
    free(o->payload_buf);
    o->payload_buf = NULL;
}

void job_validate(int kind, const char *cron, const char *tz, const char *gap,
                  const char *overlap) {
    char err[512];
    ax_tz_t *z = NULL;
    int rc = ax_tz_new(tz, &z, err, sizeof err);
    if (rc < 0)
        die_usagef("--tz: %s", err);
    ax_tz_destroy(z);
    if (kind != AX_SCHED_CRON)
        return;
    if (ax_job_cron_valid(cron, tz, gap, overlap, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: invalid cron expression '%s': %s\n", cron ? cron : "", err);
        int pos;
        if (cron && sscanf(err, "position %d:", &pos) == 1 && pos >= 1)
            fprintf(stderr, "  %s\n  %*s^\n", cron, pos - 1, "");
        exit(2);
    }
}

int job_opts_empty(const opts_t *o) {
    return !o->sched_set && !o->has_start && !o->tz && !o->gap && !o->overlap && !o->misfire &&
           !o->has_threshold && !o->has_catchup && !o->overlap_policy && !o->has_timeout &&
           !o->has_priority && !o->has_payload && !o->handler && !o->group &&
           !o->has_routing_key && !o->has_backlog_max && !o->has_tolerance &&
           !o->has_concurrency && !o->has_retries && !o->has_retry_initial && !o->retry_mult &&
           !o->has_retry_max && !o->has_retry_jitter && !o->has_retry_rules &&
           !o->has_circuit_threshold && !o->has_circuit_cooldown && !o->ncommand;
}

void job_spec_of(const opts_t *o, const char *name, ax_job_spec_t *s) {
    memset(s, 0, sizeof *s);
    s->name = name;
    s->disabled = o->disabled;
    s->set_schedule = o->sched_set;
    if (o->sched_set) {
        s->schedule_kind = ax_sched_kind_name((ax_sched_kind_t)o->kind);
        s->schedule_expr = o->kind == AX_SCHED_CRON ? o->cron : NULL;
        if (o->kind == AX_SCHED_FIXED_RATE || o->kind == AX_SCHED_FIXED_DELAY)
            s->interval_ms = o->interval_ms;
        s->has_after = o->has_after;
        s->after_ms = o->after_ms;
    }
    s->has_start = o->has_at || o->has_start;
    s->start_ms = o->has_at ? o->at_ms : o->start_ms;
    s->time_zone = o->tz;
    s->dst_gap = o->gap;
    s->dst_overlap = o->overlap;
    s->misfire_policy = o->misfire;
    s->overlap_policy = o->overlap_policy;
    s->has_misfire_threshold = o->has_threshold;
    s->misfire_threshold_ms = o->threshold;
    s->has_catchup_max = o->has_catchup;
    s->catchup_max = o->catchup;
    s->has_timeout = o->has_timeout;
    s->timeout_ms = o->timeout;
    s->has_priority = o->has_priority;
    s->priority = o->priority;
    s->has_payload = o->has_payload;
    s->payload = o->payload;
    s->payload_len = o->payload_len;
    s->handler_kind = o->handler;
    s->executor_group = o->group;
    s->has_routing_key = o->has_routing_key;
    s->routing_key = o->routing_key;
    s->has_backlog_max = o->has_backlog_max;
    s->backlog_max = o->backlog_max;
    s->has_tolerance = o->has_tolerance;
    s->tolerance_ms = o->tolerance;
    s->has_concurrency = o->has_concurrency;
    s->concurrency_limit = o->concurrency;
    s->has_retry_max = o->has_retries;
    s->retry_max = o->retries;
    s->has_retry_initial = o->has_retry_initial;
    s->retry_initial_ms = o->retry_initial;
    s->retry_multiplier = o->retry_mult;
    s->has_retry_max_delay = o->has_retry_max;
    s->retry_max_delay_ms = o->retry_max;
    s->has_retry_jitter = o->has_retry_jitter;
    s->retry_jitter_ms = o->retry_jitter;
    s->has_retry_rules = o->has_retry_rules;
    s->retry_rules = o->retry_rules;
    s->has_circuit_threshold = o->has_circuit_threshold;
    s->circuit_threshold = o->circuit_threshold;
    s->has_circuit_cooldown = o->has_circuit_cooldown;
    s->circuit_cooldown_ms = o->circuit_cooldown;
    s->command = o->command;
    s->ncommand = o->ncommand;
}
