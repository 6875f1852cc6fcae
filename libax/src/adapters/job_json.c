/*
 * job_json.c — job specs from ax-api's JSON and the checks every spec
 * passes (ax/job_json.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/conf.h"
#include "ax/cron.h"
#include "ax/fire.h"
#include "ax/job_json.h"
#include "ax/retry.h"
#include "ax/retry_json.h"
#include "ax/schedule.h"

/* Longest interval, delay, timeout: a century; circuit cool-down: a year. */
#define MS_MAX INT64_C(3153600000000)
#define COOLDOWN_MAX_MS INT64_C(31536000000)

typedef struct rd {
    ax_job_spec_buf_t *b;
    const char **field;
    char *err;
    size_t errlen;
} rd_t;

/* msg with its "%s" (if any) replaced by detail. */
static void fill(char *out, size_t len, const char *msg, const char *detail) {
    const char *p = strstr(msg, "%s");
    if (!p)
        snprintf(out, len, "%s", msg);
    else
        snprintf(out, len, "%.*s%s%s", (int)(p - msg), msg, detail ? detail : "", p + 2);
}

static int fail(rd_t *r, const char *member, const char *msg, const char *detail) {
    snprintf(r->b->field, sizeof r->b->field, "%s", member);
    *r->field = r->b->field;
    char m[600];
    fill(m, sizeof m, msg, detail);
    return ax_seterr(r->err, r->errlen, AX_ERR_INVALID, "%s: %s", member, m);
}

/* member's integer in [lo, hi] into *v (*has = 1); absent: 0, nothing set. */
static int get_int(rd_t *r, const json_t *o, const char *key, const char *path, int64_t lo,
                   int64_t hi, int *has, int64_t *v) {
    const json_t *x = json_object_get(o, key);
    if (!x)
        return 0;
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi) {
        char b[80];
        snprintf(b, sizeof b, "%lld..%lld", (long long)lo, (long long)hi);
        return fail(r, path, "must be an integer %s", b);
    }
    *v = json_integer_value(x);
    if (has)
        *has = 1;
    return 0;
}

/* member's string into *v (NULL if absent); allowed: NULL or the names it may take. */
static int get_str(rd_t *r, const json_t *o, const char *key, const char *path,
                   const char *const *allowed, const char **v) {
    const json_t *x = json_object_get(o, key);
    if (!x)
        return 0;
    if (!json_is_string(x))
        return fail(r, path, "must be a string", NULL);
    const char *s = json_string_value(x);
    if (strlen(s) != json_string_length(x))
        return fail(r, path, "must not hold NUL characters", NULL);
    for (int i = 0; allowed && allowed[i]; i++)
        if (strcmp(s, allowed[i]) == 0)
            allowed = NULL;
    if (allowed) {
        char list[200] = "";
        for (int i = 0; allowed[i]; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "",
                     allowed[i]);
        return fail(r, path, "must be one of %s", list);
    }
    *v = s;
    return 0;
}

/* Members of o must be among keys (NULL-terminated). */
static int only(rd_t *r, const json_t *o, const char *prefix, const char *const *keys) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        int i = 0;
        while (keys[i] && strcmp(keys[i], k) != 0)
            i++;
        if (!keys[i]) {
            char p[64];
            snprintf(p, sizeof p, "%s%s", prefix, k);
            return fail(r, p, "unknown member%s", "");
        }
    }
    return 0;
}

static int read_schedule(rd_t *r, const json_t *o) {
    static const char *const keys[] = {"kind", "expr", "time_zone", "dst_gap", "dst_overlap",
                                       "interval_ms", "start_at", "at", "after_ms", NULL};
    static const char *const kinds[] = {"none", "cron", "fixed_rate", "fixed_delay", "once",
                                        NULL};
    ax_job_spec_t *s = &r->b->spec;
    if (!json_is_object(o))
        return fail(r, "schedule", "must be an object", NULL);
    int rc = only(r, o, "schedule.", keys);
    const char *kind = NULL, *at = NULL, *start = NULL;
    if (!rc)
        rc = get_str(r, o, "kind", "schedule.kind", kinds, &kind);
    if (!rc && !kind)
        return fail(r, "schedule.kind", "is required", NULL);
    s->set_schedule = 1;
    s->schedule_kind = kind;
    if (!rc)
        rc = get_str(r, o, "expr", "schedule.expr", NULL, &s->schedule_expr);
    if (!rc)
        rc = get_str(r, o, "time_zone", "schedule.time_zone", NULL, &s->time_zone);
    if (!rc)
        rc = get_str(r, o, "dst_gap", "schedule.dst_gap", ax_dst_gap_names, &s->dst_gap);
    if (!rc)
        rc = get_str(r, o, "dst_overlap", "schedule.dst_overlap", ax_dst_overlap_names,
                     &s->dst_overlap);
    if (!rc)
        rc = get_int(r, o, "interval_ms", "schedule.interval_ms", 1, MS_MAX, NULL,
                     &s->interval_ms);
    if (!rc)
        rc = get_int(r, o, "after_ms", "schedule.after_ms", 0, MS_MAX, &s->has_after,
                     &s->after_ms);
    if (!rc)
        rc = get_str(r, o, "at", "schedule.at", NULL, &at);
    if (!rc)
        rc = get_str(r, o, "start_at", "schedule.start_at", NULL, &start);
    if (rc)
        return rc;
    int cron = strcmp(kind, "cron") == 0, once = strcmp(kind, "once") == 0;
    int interval = strcmp(kind, "fixed_rate") == 0 || strcmp(kind, "fixed_delay") == 0;
    if (cron != (s->schedule_expr != NULL))
        return fail(r, "schedule.expr", cron ? "is required for cron" : "is for cron only", NULL);
    if (interval != (s->interval_ms != 0))
        return fail(r, "schedule.interval_ms",
                    interval ? "is required for fixed_rate and fixed_delay"
                             : "is for fixed_rate and fixed_delay only", NULL);
    if (!once && (at || s->has_after))
        return fail(r, at ? "schedule.at" : "schedule.after_ms", "is for once only", NULL);
    if (once && !at == !s->has_after)
        return fail(r, "schedule.at", "once needs exactly one of at and after_ms", NULL);
    if (start && !interval)
        return fail(r, "schedule.start_at", "is for fixed_rate and fixed_delay only", NULL);
    const char *t = at ? at : start;
    if (t && ax_time_parse(t, &s->start_ms) < 0)
        return fail(r, at ? "schedule.at" : "schedule.start_at",
                    "must be ISO-8601 with an offset (2026-12-01T02:30:00Z), years 1-9999", NULL);
    s->has_start = t != NULL;
    r->b->has_at = at != NULL;
    return 0;
}

static int read_retry(rd_t *r, const json_t *o) {
    static const char *const keys[] = {"max", "initial_ms", "multiplier", "max_delay_ms",
                                       "jitter_ms", "rules", NULL};
    ax_job_spec_t *s = &r->b->spec;
    if (!json_is_object(o))
        return fail(r, "retry", "must be an object", NULL);
    int rc = only(r, o, "retry.", keys);
    if (!rc)
        rc = get_int(r, o, "max", "retry.max", 0, 1000000, &s->has_retry_max, &s->retry_max);
    if (!rc)
        rc = get_int(r, o, "initial_ms", "retry.initial_ms", 0, AX_RETRY_MAX_DELAY_MS,
                     &s->has_retry_initial, &s->retry_initial_ms);
    if (!rc)
        rc = get_int(r, o, "max_delay_ms", "retry.max_delay_ms", 0, AX_RETRY_MAX_DELAY_MS,
                     &s->has_retry_max_delay, &s->retry_max_delay_ms);
    if (!rc)
        rc = get_int(r, o, "jitter_ms", "retry.jitter_ms", 0, AX_RETRY_MAX_DELAY_MS,
                     &s->has_retry_jitter, &s->retry_jitter_ms);
    if (rc)
        return rc;
    const json_t *m = json_object_get(o, "multiplier");
    if (m) {
        double x = json_is_number(m) ? json_number_value(m) : NAN;
        if (!isfinite(x) || x < 1 || x > 1000)
            return fail(r, "retry.multiplier", "must be a number 1..1000", NULL);
        snprintf(r->b->mult, sizeof r->b->mult, "%.17g", x);
        s->retry_multiplier = r->b->mult;
    }
    const json_t *rules = json_object_get(o, "rules");
    if (rules) {
        s->has_retry_rules = 1;
        if (!json_is_null(rules)) {
            if (!json_is_array(rules))
                return fail(r, "retry.rules", "must be an array of rules or null", NULL);
            r->b->retry_rules = json_dumps(rules, JSON_COMPACT);
            if (!r->b->retry_rules)
                return ax_seterr(r->err, r->errlen, AX_ERR_NOMEM, "out of memory");
            s->retry_rules = r->b->retry_rules;
        }
    }
    return 0;
}

static int read_circuit(rd_t *r, const json_t *o) {
    static const char *const keys[] = {"threshold", "cooldown_ms", NULL};
    ax_job_spec_t *s = &r->b->spec;
    if (!json_is_object(o))
        return fail(r, "circuit", "must be an object", NULL);
    int rc = only(r, o, "circuit.", keys);
    if (!rc)
        rc = get_int(r, o, "threshold", "circuit.threshold", 0, 1000000,
                     &s->has_circuit_threshold, &s->circuit_threshold);
    if (!rc)
        rc = get_int(r, o, "cooldown_ms", "circuit.cooldown_ms", 0, COOLDOWN_MAX_MS,
                     &s->has_circuit_cooldown, &s->circuit_cooldown_ms);
    return rc;
}

static int read_command(rd_t *r, const json_t *c) {
    ax_job_spec_t *s = &r->b->spec;
    if (!json_is_array(c) || json_array_size(c) < 1 || json_array_size(c) > 4096)
        return fail(r, "command", "must be an array of 1..4096 strings", NULL);
    size_t n = json_array_size(c);
    if (!(r->b->command = calloc(n + 1, sizeof *r->b->command)))
        return ax_seterr(r->err, r->errlen, AX_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(c, i);
        if (!json_is_string(x) || strlen(json_string_value(x)) != json_string_length(x))
            return fail(r, "command", "must be an array of strings without NULs", NULL);
        r->b->command[i] = (char *)json_string_value(x);
    }
    s->command = r->b->command;
    s->ncommand = (int)n;
    return 0;
}

/* The nullable limits: null clears. */
static int read_limits(rd_t *r, const json_t *o) {
    ax_job_spec_t *s = &r->b->spec;
    const json_t *x = json_object_get(o, "concurrency");
    int rc = 0;
    if (x && json_is_null(x)) {
        s->has_concurrency = 1;
        s->concurrency_limit = 0;
    } else {
        rc = get_int(r, o, "concurrency", "concurrency", 0, 1000000, &s->has_concurrency,
                     &s->concurrency_limit);
    }
    x = json_object_get(o, "backlog_max");
    if (!rc && x && json_is_null(x)) {
        s->has_backlog_max = 1;
        s->backlog_max = -1;
    } else if (!rc) {
        rc = get_int(r, o, "backlog_max", "backlog_max", 0, 1000000000, &s->has_backlog_max,
                     &s->backlog_max);
    }
    x = json_object_get(o, "routing_key");
    if (!rc && x && json_is_null(x)) {
        s->has_routing_key = 1;
    } else if (!rc) {
        rc = get_str(r, o, "routing_key", "routing_key", NULL, &s->routing_key);
        if (!rc && s->routing_key) {
            s->has_routing_key = 1;
            if (strlen(s->routing_key) > 255)
                return fail(r, "routing_key", "must name a payload field of at most 255 bytes",
                            NULL);
            if (!*s->routing_key)
                s->routing_key = NULL;
        }
    }
    return rc;
}

static int read_run(rd_t *r, const json_t *o) {
    static const char *const handlers[] = {"command", "http", "plugin", NULL};
    ax_job_spec_t *s = &r->b->spec;
    const char *payload = NULL;
    int rc = get_str(r, o, "handler", "handler", handlers, &s->handler_kind);
    if (!rc)
        rc = get_str(r, o, "group", "group", NULL, &s->executor_group);
    if (!rc)
        rc = get_str(r, o, "payload", "payload", NULL, &payload);
    if (!rc)
        rc = get_int(r, o, "priority", "priority", 0, 4, &s->has_priority, &s->priority);
    if (!rc)
        rc = get_int(r, o, "timeout_ms", "timeout_ms", 1, MS_MAX, &s->has_timeout,
                     &s->timeout_ms);
    if (!rc)
        rc = get_int(r, o, "tolerance_ms", "tolerance_ms", 0, 3600000, &s->has_tolerance,
                     &s->tolerance_ms);
    if (!rc)
        rc = get_str(r, o, "misfire", "misfire", ax_misfire_names, &s->misfire_policy);
    if (!rc)
        rc = get_int(r, o, "misfire_threshold_ms", "misfire_threshold_ms", 1000, INT64_MAX,
                     &s->has_misfire_threshold, &s->misfire_threshold_ms);
    if (!rc)
        rc = get_int(r, o, "catchup_max", "catchup_max", 1, 10000, &s->has_catchup_max,
                     &s->catchup_max);
    if (!rc)
        rc = get_str(r, o, "overlap", "overlap", ax_overlap_names, &s->overlap_policy);
    if (!rc)
        rc = read_limits(r, o);
    if (!rc && payload) {
        s->has_payload = 1;
        s->payload = payload;
        s->payload_len = strlen(payload);
    }
    return rc;
}

int ax_job_spec_from_json(const json_t *o, int create, ax_job_spec_buf_t *ret,
                          const char **ret_field, char *errbuf, size_t errlen) {
    static const char *const keys[] = {
        "name", "enabled", "schedule", "handler", "command", "payload", "group", "routing_key",
        "priority", "timeout_ms", "concurrency", "backlog_max", "tolerance_ms", "misfire",
        "misfire_threshold_ms", "catchup_max", "overlap", "retry", "circuit", NULL};
    memset(ret, 0, sizeof *ret);
    rd_t r = {.b = ret, .field = ret_field, .err = errbuf, .errlen = errlen};
    *ret_field = NULL;
    int rc = only(&r, o, "", keys);
    if (!rc && !create && (json_object_get(o, "name") || json_object_get(o, "enabled")))
        rc = fail(&r, json_object_get(o, "name") ? "name" : "enabled",
                  "cannot be changed here (enable/disable: POST .../enable|disable)", NULL);
    if (!rc && create) {
        rc = get_str(&r, o, "name", "name", NULL, &ret->spec.name);
        if (!rc && !ret->spec.name)
            rc = fail(&r, "name", "is required", NULL);
        const json_t *en = json_object_get(o, "enabled");
        if (!rc && en && !json_is_boolean(en))
            rc = fail(&r, "enabled", "must be true or false", NULL);
        ret->spec.disabled = en && json_is_false(en);
    }
    const json_t *x;
    if (!rc && (x = json_object_get(o, "schedule")))
        rc = read_schedule(&r, x);
    if (!rc)
        rc = read_run(&r, o);
    if (!rc && (x = json_object_get(o, "retry")))
        rc = read_retry(&r, x);
    if (!rc && (x = json_object_get(o, "circuit")))
        rc = read_circuit(&r, x);
    if (!rc && (x = json_object_get(o, "command")))
        rc = read_command(&r, x);
    if (!rc && create && !ret->spec.ncommand)
        rc = fail(&r, "command", "is required", NULL);
    if (rc) {
        char field[sizeof ret->field];
        memcpy(field, ret->field, sizeof field);
        ax_job_spec_buf_clear(ret);
        memcpy(ret->field, field, sizeof field);
    }
    return rc;
}

void ax_job_spec_buf_clear(ax_job_spec_buf_t *b) {
    if (!b)
        return;
    free(b->command);
    free(b->retry_rules);
    memset(b, 0, sizeof *b);
}

int ax_job_name_valid(const char *s) {
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

int ax_job_group_valid(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64 || ax_conf_group_reserved(s))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '_' && c != '-')))
            return 0;
    }
    return 1;
}

static int bad(const char **ret_field, const char *field, char *errbuf, size_t errlen,
               const char *msg_, const char *detail) {
    *ret_field = field;
    char msg[600];
    fill(msg, sizeof msg, msg_, detail);
    return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "%s: %s", field, msg);
}

static int handler_check(const ax_job_spec_t *s, const char **ret_field, char *errbuf,
                         size_t errlen) {
    const char *kind = s->handler_kind ? s->handler_kind : "command";
    const char *first = s->ncommand ? s->command[0] : NULL;
    if (!s->ncommand)
        return 0;
    if (strcmp(kind, "command") == 0 && (!first || !*first))
        return bad(ret_field, "command", errbuf, errlen,
                   "handler command: a program and its arguments%s", NULL);
    if (strcmp(kind, "http") == 0 &&
        (s->ncommand != 1 || strncmp(first, "http://", 7) != 0 || !first[7]))
        return bad(ret_field, "command", errbuf, errlen,
                   "handler http: exactly one URL, http://HOST[:PORT]/PATH (https is not "
                   "supported)%s", NULL);
    if (strcmp(kind, "plugin") == 0 && first[0] != '/')
        return bad(ret_field, "command", errbuf, errlen,
                   "handler plugin: the absolute path of the plugin's .so, then its "
                   "arguments%s", NULL);
    return 0;
}

int ax_job_cron_valid(const char *cron, const char *tz, const char *gap, const char *overlap,
                      char *err, size_t errlen) {
    int g = gap ? ax_dst_gap_parse(gap) : 0;
    int o = overlap ? ax_dst_overlap_parse(overlap) : 0;
    ax_dst_policy_t dst = (ax_dst_policy_t)((g > 0 ? g : 0) | (o > 0 ? o : 0));
    ax_schedule_t sc;
    if (ax_schedule_init(&sc, AX_SCHED_CRON, cron, tz, dst, 0, 0, err, errlen) < 0)
        return -1;
    ax_schedule_clear(&sc);
    return 0;
}

static int schedule_check(const ax_job_spec_t *s, const char **ret_field, char *errbuf,
                          size_t errlen) {
    char err[512];
    const char *tz = s->time_zone ? s->time_zone : "UTC";
    ax_tz_t *z = NULL;
    if (ax_tz_new(tz, &z, err, sizeof err) < 0)
        return bad(ret_field, "schedule.time_zone", errbuf, errlen, "%s", err);
    ax_tz_destroy(z);
    if (!s->schedule_expr)
        return 0;
    if (ax_job_cron_valid(s->schedule_expr, tz, s->dst_gap, s->dst_overlap, err, sizeof err) < 0)
        return bad(ret_field, "schedule.expr", errbuf, errlen, "invalid cron expression: %s",
                   err);
    return 0;
}

int ax_job_spec_check(const ax_job_spec_t *s, int create, const char **ret_field, char *errbuf,
                      size_t errlen) {
    *ret_field = NULL;
    if (create && (!s->name || !ax_job_name_valid(s->name)))
        return bad(ret_field, "name", errbuf, errlen,
                   "1-128 of A-Z a-z 0-9 . _ - starting with a letter or digit%s", NULL);
    int rc = schedule_check(s, ret_field, errbuf, errlen);
    if (rc)
        return rc;
    if (s->executor_group && !ax_job_group_valid(s->executor_group))
        return bad(ret_field, "group", errbuf, errlen,
                   "1-64 of A-Z a-z 0-9 _ - starting with a letter or digit, not p0-p9 (lane "
                   "names)%s", NULL);
    if ((rc = handler_check(s, ret_field, errbuf, errlen)))
        return rc;
    if (s->has_retry_rules && s->retry_rules) {
        ax_retry_policy_t pol;
        char err[512];
        ax_retry_policy_default(&pol);
        if (ax_retry_rules_parse(&pol, s->retry_rules, err, sizeof err) < 0)
            return bad(ret_field, "retry.rules", errbuf, errlen, "%s", err);
    }
    return 0;
}
