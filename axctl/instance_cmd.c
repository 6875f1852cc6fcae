/*
 * instance_cmd.c — axctl instance show | list | cancel, and the JSON line
 * an instance is printed as (also by submit --wait). Reads through the
 * store (ax/store_instance_admin.h); cancelling goes through instance.c.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "ax/ops.h"
#include "ax/store_api.h"
#include "ax/store_instance_admin.h"
#include "axctl.h"

/* ---- an instance as one JSON line ------------------------------------------------------ */

/* A JSON string as PostgreSQL's row_to_json writes it. */
static void json_str(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '\b': fputs("\\b", stdout); break;
        case '\f': fputs("\\f", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        default:
            if (*p < ' ')
                printf("\\u%04x", *p);
            else
                putchar(*p);
        }
    }
    putchar('"');
}

typedef enum { F_ID, F_ATTEMPT, F_EXIT, F_STR } field_kind_t;

typedef struct {
    const char *key;
    field_kind_t kind;
    size_t off; /* of the char * (F_STR) */
} field_t;

#define S(k, m) {k, F_STR, offsetof(ax_instance_view_t, m)}

/* instance show and list: the columns in table order, then why it is held. */
static const field_t full_fields[] = {
    {"id", F_ID, 0}, S("job", job), {"attempt", F_ATTEMPT, 0}, S("state", state),
    S("outcome", outcome), {"exit_code", F_EXIT, 0}, S("error_class", error_class),
    S("error", error), S("output", output), S("trace_id", trace_id),
    S("idempotency_key", idempotency_key), S("worker", worker), S("due_at", due_at),
    S("scheduled_at", scheduled_at), S("dispatched_at", dispatched_at),
    S("locked_at", locked_at), S("running_at", running_at), S("finished_at", finished_at),
    S("result_published_at", result_published_at), S("held_reason", held_reason),
};

/* submit --wait: the outcome first. */
static const field_t final_fields[] = {
    {"id", F_ID, 0}, S("job", job), S("state", state), S("outcome", outcome),
    {"attempt", F_ATTEMPT, 0}, {"exit_code", F_EXIT, 0}, S("error_class", error_class),
    S("error", error), S("output", output), S("trace_id", trace_id), S("worker", worker),
    S("scheduled_at", scheduled_at), S("locked_at", locked_at), S("running_at", running_at),
    S("finished_at", finished_at),
};

static void print_fields(const ax_instance_view_t *v, const field_t *f, size_t n) {
    putchar('{');
    for (size_t i = 0; i < n; i++) {
        printf("%s\"%s\":", i ? "," : "", f[i].key);
        if (f[i].kind == F_ID)
            printf("%" PRId64, v->id);
        else if (f[i].kind == F_ATTEMPT)
            printf("%" PRId64, v->attempt);
        else if (f[i].kind == F_EXIT && v->has_exit_code)
            printf("%" PRId64, v->exit_code);
        else if (f[i].kind == F_EXIT)
            fputs("null", stdout);
        else {
            const char *s = *(char *const *)((const char *)v + f[i].off);
            if (s)
                json_str(s);
            else
                fputs("null", stdout);
        }
    }
    puts("}");
}

void instance_print_json(const ax_instance_view_t *v, int final) {
    if (final)
        print_fields(v, final_fields, AX_ARRAY_SIZE(final_fields));
    else
        print_fields(v, full_fields, AX_ARRAY_SIZE(full_fields));
}

/* ---- show, list ------------------------------------------------------------------------- */

static int failed(char *err) {
    fprintf(stderr, "axctl: %s\n", pg_err_line(err));
    return 1;
}

static int instance_show(int argc, char **argv) {
    if (argc < 2)
        die_usage("instance show needs an ID");
    int64_t id = parse_int(argv[1], "ID");
    ax_pg_t *pg = pg_open();
    ax_instance_view_t v;
    char err[1024];
    int rc = ax_store_instance_admin_show(pg, id, &v, err, sizeof err);
    ax_pg_destroy(pg);
    if (rc == AX_ERR_NOTFOUND) {
        fprintf(stderr, "axctl: no instance %s\n", argv[1]);
        return 1;
    }
    if (rc < 0)
        return failed(err);
    instance_print_json(&v, 0);
    ax_instance_view_clear(&v);
    return 0;
}

/* v upper-cased into buf (as stored); exits 2 naming opt and the choices when it is not one of
 * names (NULL-terminated). */
static const char *enum_arg(const char *v, char *buf, size_t len, const char *const *names,
                            const char *opt, const char *choices) {
    snprintf(buf, len, "%.15s", v);
    for (char *c = buf; *c; c++)
        *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
    int k = 0;
    while (names[k] && strcmp(names[k], buf) != 0)
        k++;
    if (!names[k])
        die_usagef("%s must be %s, not '%s'", opt, choices, v);
    return buf;
}

/* --state: one of the states, any case, as stored (upper case). */
static const char *state_arg(const char *v, char *st, size_t len) {
    static const char *const states[] = {"SCHEDULED", "LOCKED", "RUNNING", "FINISHED", NULL};
    return enum_arg(v, st, len, states, "--state", "SCHEDULED, LOCKED, RUNNING or FINISHED");
}

/* --outcome: one of the outcomes, any case, as stored (upper case). */
static const char *outcome_arg(const char *v, char *oc, size_t len) {
    static const char *const outcomes[] = {"SUCCESS", "FAILED", "TIMEOUT", "CANCELLED", NULL};
    return enum_arg(v, oc, len, outcomes, "--outcome", "SUCCESS, FAILED, TIMEOUT or CANCELLED");
}

/* instance list's options into q; exits 2 on a bad one. */
static void list_opts(int argc, char **argv, ax_instance_query_t *q, char *st, char *oc,
                      size_t len) {
    static const char *const known[] = {"--limit", "--trace", "--job", "--state", "--outcome",
                                        "--since", "--until", "--group", "--priority",
                                        "--idempotency-key", "--before", NULL};
    /* this deployment's (topic.prefix) unless --all-deployments */
    *q = (ax_instance_query_t){.limit = 20, .priority = -1, .deployment = conf.topic_prefix};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        if (strcmp(a, "--all-deployments") == 0) {
            q->deployment = NULL;
            i--; /* a flag: no value */
            continue;
        }
        int k = 0;
        while (known[k] && strcmp(known[k], a) != 0)
            k++;
        if (!known[k])
            die_usagef("instance list: unknown option '%s' (see axctl --help)", a);
        if (i + 1 >= argc)
            die_usagef("%s needs a value", a);
        const char *v = argv[i + 1];
        need_utf8(v, a);
        if (strcmp(a, "--limit") == 0) {
            q->limit = parse_int(v, a);
            if (q->limit < 1 || q->limit > 1000000)
                die_usagef("--limit must be 1..1000000, not %s", v);
        } else if (strcmp(a, "--trace") == 0) {
            q->trace_id = v;
        } else if (strcmp(a, "--job") == 0) {
            q->job = v;
        } else if (strcmp(a, "--state") == 0) {
            q->state = state_arg(v, st, len);
        } else if (strcmp(a, "--outcome") == 0) {
            q->outcome = outcome_arg(v, oc, len);
        } else if (strcmp(a, "--since") == 0) {
            q->has_since = 1;
            q->since_ms = parse_time(v, a);
        } else if (strcmp(a, "--until") == 0) {
            q->has_until = 1;
            q->until_ms = parse_time(v, a);
        } else if (strcmp(a, "--group") == 0) {
            q->group = v;
        } else if (strcmp(a, "--idempotency-key") == 0) {
            q->idempotency_key = v;
        } else if (strcmp(a, "--before") == 0) {
            q->before_id = parse_int(v, a);
        } else {
            int64_t p = parse_int(v, a);
            if (p < 0 || p > 4)
                die_usagef("--priority must be 0..4, not %s", v);
            q->priority = (int)p;
        }
    }
}

/* Instances newest first as JSON lines: the store's documents (the API's
 * Instance shape, docs/API.md), compact. */
static int instance_list(int argc, char **argv) {
    ax_instance_query_t q;
    char st[16], oc[16], err[1024];
    list_opts(argc, argv, &q, st, oc, sizeof st);
    ax_pg_t *pg = pg_open();
    ax_json_row_t *rows;
    size_t n;
    int rc = ax_store_api_instances(pg, &q, &rows, &n, err, sizeof err);
    ax_pg_destroy(pg);
    if (rc < 0)
        return failed(err);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_loads(rows[i].json, 0, NULL);
        char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
        puts(line ? line : rows[i].json);
        free(line);
        json_decref(o);
    }
    ax_json_rows_free(rows, n);
    return 0;
}

/* ---- cancel ------------------------------------------------------------------------------ */

/* instance cancel through ax_ops_cancel_instance (libax, ax/ops.h), as
 * ax-api's POST /instances/{id}/cancel. */
static int cancel_one(ax_pg_t *pg, const char *arg, int64_t id) {
    char err[1024];
    ax_cancel_result_t r;
    rd_kafka_t *rk = producer_open();
    int rc = ax_ops_cancel_instance(pg, rk, &conf, id,
                                    "cancelled by an operator (axctl instance cancel)", &r, err,
                                    sizeof err);
    rd_kafka_destroy(rk);
    if (rc == AX_ERR_NOTFOUND) {
        fprintf(stderr, "axctl: no instance %s\n", arg);
        return 1;
    }
    if (rc == AX_ERR_IO && r.scheduled) {
        fprintf(stderr, "axctl: the cancellation was not acknowledged by Kafka: %s (run "
                        "the command again)\n", err);
        return 1;
    }
    if (rc < 0)
        return failed(err);
    if (r.parents)
        printf("instance %s is a shard parent (no executor runs it): cancelled its %d shard(s) "
               "not started yet, asked executors to stop %d; it finishes when they have\n",
               arg, r.scheduled, r.stopping);
    else if (r.scheduled)
        printf("instance %s cancelled before it started: ax-callback records it FINISHED "
               "CANCELLED and publishes its result\n", arg);
    else
        printf("instance %s: its executor was asked to stop it (it ends CANCELLED)\n", arg);
    return 0;
}

/* The one ID argument of instance cancel/retry; exits 2 (usage) unless a positive id. */
static int64_t one_id(int argc, char **argv, const char *usage) {
    if (argc != 2)
        die_usage(usage);
    int64_t id = parse_int(argv[1], "ID");
    if (id < 1)
        die_usagef("ID must be a positive instance id, not %s", argv[1]);
    return id;
}

static int instance_cancel(int argc, char **argv) {
    int64_t id = one_id(argc, argv, "instance cancel needs one ID");
    ax_pg_t *pg = pg_open();
    int rc = cancel_one(pg, argv[1], id);
    ax_pg_destroy(pg);
    return rc;
}

/* instance retry ID through ax_ops_retry (libax), as ax-api's POST .../retry. */
static int instance_retry(int argc, char **argv) {
    int64_t id = one_id(argc, argv, "instance retry needs one ID");
    ax_pg_t *pg = pg_open();
    rd_kafka_t *rk = producer_open();
    char err[1024];
    ax_retry_result_t r;
    int rc = ax_ops_retry(pg, rk, &conf, id, &r, err, sizeof err);
    rd_kafka_destroy(rk);
    ax_pg_destroy(pg);
    if (rc == AX_ERR_NOTFOUND) {
        fprintf(stderr, "axctl: no instance %s\n", argv[1]);
        return 1;
    }
    if (rc < 0)
        return failed(err);
    if (r.duplicate)
        printf("instance %s was already retried: instance %lld (trace %s); nothing produced\n",
               argv[1], (long long)r.instance_id, r.trace_id);
    else
        printf("instance %s resubmitted as trace %s (idempotency key %s)\n", argv[1], r.trace_id,
               r.idempotency_key);
    return 0;
}

int cmd_instance(int argc, char **argv) {
    if (argc < 1)
        die_usage("instance needs a subcommand");
    if (strcmp(argv[0], "show") == 0)
        return instance_show(argc, argv);
    if (strcmp(argv[0], "list") == 0)
        return instance_list(argc, argv);
    if (strcmp(argv[0], "cancel") == 0)
        return instance_cancel(argc, argv);
    if (strcmp(argv[0], "retry") == 0)
        return instance_retry(argc, argv);
    die_usage("unknown instance subcommand");
}
