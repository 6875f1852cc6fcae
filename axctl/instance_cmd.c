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

/* --state: one of the states, any case, as stored (upper case). */
static const char *state_arg(const char *v, char *st, size_t len) {
    static const char *const states[] = {"SCHEDULED", "LOCKED", "RUNNING", "FINISHED", NULL};
    snprintf(st, len, "%.15s", v);
    for (char *c = st; *c; c++)
        *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
    int k = 0;
    while (states[k] && strcmp(states[k], st) != 0)
        k++;
    if (!states[k])
        die_usagef("--state must be SCHEDULED, LOCKED, RUNNING or FINISHED, not '%s'", v);
    return st;
}

static int instance_list(int argc, char **argv) {
    ax_instance_filter_t f = {.limit = 20};
    char st[16];
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        if (strcmp(a, "--limit") != 0 && strcmp(a, "--trace") != 0 &&
            strcmp(a, "--job") != 0 && strcmp(a, "--state") != 0)
            die_usagef("instance list: unknown option '%s' (see axctl --help)", a);
        if (i + 1 >= argc)
            die_usagef("%s needs a value", a);
        const char *v = argv[i + 1];
        need_utf8(v, a);
        if (strcmp(a, "--limit") == 0) {
            f.limit = parse_int(v, a);
            if (f.limit < 1 || f.limit > 1000000)
                die_usagef("--limit must be 1..1000000, not %s", v);
        } else if (strcmp(a, "--trace") == 0) {
            f.trace_id = v;
        } else if (strcmp(a, "--job") == 0) {
            f.job = v;
        } else {
            f.state = state_arg(v, st, sizeof st);
        }
    }
    ax_pg_t *pg = pg_open();
    ax_instance_view_t *rows;
    size_t n;
    char err[1024];
    int rc = ax_store_instance_admin_list(pg, &f, &rows, &n, err, sizeof err);
    ax_pg_destroy(pg);
    if (rc < 0)
        return failed(err);
    for (size_t i = 0; i < n; i++)
        instance_print_json(&rows[i], 0);
    ax_instance_views_free(rows, n);
    return 0;
}

/* ---- cancel ------------------------------------------------------------------------------ */

/* A running shard parent runs nowhere (worker 'shards'): its unfinished
 * shards are cancelled; it finishes (FAILED) when the last has. */
static int cancel_parent(ax_pg_t *pg, const char *arg, int64_t id) {
    int64_t *ids;
    size_t n;
    char err[1024];
    if (ax_store_instance_admin_open_shards(pg, id, &ids, &n, err, sizeof err) < 0)
        return failed(err);
    int stopping = 0, scheduled = 0;
    int k = n ? cancel_instance_ids(pg, ids, n,
                                    "cancelled by an operator (axctl instance cancel of its shard "
                                    "parent)",
                                    &stopping, &scheduled)
              : 0;
    free(ids);
    if (k < 0)
        return 1;
    if (k == 0) {
        fprintf(stderr, "axctl: instance %s is a shard parent whose shards have all finished: "
                        "nothing to cancel (it finishes with them)\n", arg);
        return 1;
    }
    printf("instance %s is a shard parent (no executor runs it): cancelled its %d shard(s) not "
           "started yet, asked executors to stop %d; it finishes when they have\n",
           arg, scheduled, stopping);
    return 0;
}

static int cancel_one(ax_pg_t *pg, const char *arg, int64_t id) {
    ax_instance_view_t v;
    char err[1024];
    int rc = ax_store_instance_admin_show(pg, id, &v, err, sizeof err);
    if (rc == AX_ERR_NOTFOUND) {
        fprintf(stderr, "axctl: no instance %s\n", arg);
        return 1;
    }
    if (rc < 0)
        return failed(err);
    int finished = strcmp(v.state, "FINISHED") == 0;
    int parent = strcmp(v.state, "RUNNING") == 0 && v.worker && strcmp(v.worker, "shards") == 0;
    if (finished)
        fprintf(stderr, "axctl: instance %s already finished (%s): nothing to cancel\n", arg,
                v.outcome ? v.outcome : "");
    ax_instance_view_clear(&v);
    if (finished)
        return 1;
    if (parent)
        return cancel_parent(pg, arg, id);
    int stopping, scheduled;
    int n = cancel_instance_ids(pg, &id, 1, "cancelled by an operator (axctl instance cancel)",
                                &stopping, &scheduled);
    if (n == 0)
        fprintf(stderr, "axctl: instance %s finished meanwhile: nothing to cancel\n", arg);
    if (n <= 0)
        return 1;
    if (scheduled)
        printf("instance %s cancelled before it started: ax-callback records it FINISHED "
               "CANCELLED and publishes its result\n", arg);
    else
        printf("instance %s: its executor was asked to stop it (it ends CANCELLED)\n", arg);
    return 0;
}

static int instance_cancel(int argc, char **argv) {
    if (argc != 2)
        die_usage("instance cancel needs one ID");
    int64_t id = parse_int(argv[1], "ID");
    if (id < 1)
        die_usagef("ID must be a positive instance id, not %s", argv[1]);
    ax_pg_t *pg = pg_open();
    int rc = cancel_one(pg, argv[1], id);
    ax_pg_destroy(pg);
    return rc;
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
    die_usage("unknown instance subcommand");
}
