/*
 * job.c — axctl job: define and change jobs, their schedules, retry
 * policies and circuit breakers, preview their fire times, read their fire
 * ledger, and close an open circuit (job reset). The options are parsed in
 * job_opts.c, schedules shown by job_view.c; every read and write is a
 * store function (ax/store_job.h).
 *
 * A store error is reported as one line and the command exits 1; invalid
 * input exits 2 before anything is written.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/pg.h"
#include "ax/schedule.h"
#include "ax/store_job.h"
#include "ax/store_api.h"
#include "axctl.h"
#include "job_int.h"

/* One line for a store error; the command's exit status. */
static int failed(char *err) {
    fprintf(stderr, "axctl: %s\n", pg_err_line(err));
    return 1;
}

static int out_of_memory(void) {
    fprintf(stderr, "axctl: out of memory\n");
    return 1;
}

/* "next fire: ..." after a write (nothing if the job cannot be read). */
static void report_next(ax_pg_t *pg, const char *name) {
    ax_job_t j;
    char err[512];
    if (ax_store_job_get(pg, name, 0, &j, err, sizeof err) < 0)
        return;
    ax_tz_t *tz = job_zone_open(j.time_zone);
    char buf[256];
    job_next_summary(&j, tz, 1, buf, sizeof buf);
    printf("next fire: %s\n", buf);
    ax_tz_destroy(tz);
    ax_job_clear(&j);
}

/* ---- create and update ------------------------------------------------------------ */

static int job_create(int argc, char **argv) {
    job_need_name("create", argc, argv);
    const char *name = argv[1];
    opts_t o;
    job_parse_opts("create", argc, argv, 1, &o);
    if (!o.ncommand)
        die_usagef("job create needs -- COMMAND ARG...");
    if (o.has_start && o.kind != AX_SCHED_FIXED_RATE && o.kind != AX_SCHED_FIXED_DELAY)
        die_usagef("--start goes with --fixed-rate or --fixed-delay");
    job_validate(o.kind, o.cron, o.tz ? o.tz : "UTC", o.gap, o.overlap);
    job_validate_handler(o.handler ? o.handler : "command", o.ncommand, o.command[0], 1);

    ax_pg_t *pg = pg_open();
    ax_job_spec_t spec;
    char err[1024];
    job_spec_of(&o, name, &spec);
    int rc = ax_store_job_create(pg, &spec, err, sizeof err);
    job_opts_free(&o);
    if (rc == 0) {
        printf("created job %s\n", name);
        report_next(pg, name);
    } else if (rc == AX_ERR_CONFLICT) {
        fprintf(stderr, "axctl: a job named %s already exists (change it with job update)\n",
                name);
    }
    ax_pg_destroy(pg);
    return rc == 0 ? 0 : rc == AX_ERR_CONFLICT ? 1 : failed(err);
}

/* What can only be checked against the stored job; exits 2 if invalid. */
static void update_check(const opts_t *o, const ax_job_t *j) {
    int kind = o->sched_set ? o->kind : ax_sched_kind_parse(j->schedule_kind);
    if (o->has_start && kind != AX_SCHED_FIXED_RATE && kind != AX_SCHED_FIXED_DELAY)
        die_usagef("--start goes with a fixed-rate or fixed-delay schedule; job %s has %s",
                   j->name, ax_sched_kind_name((ax_sched_kind_t)kind));
    job_validate(kind, o->sched_set ? o->cron : j->schedule_expr, o->tz ? o->tz : j->time_zone,
                 o->gap ? o->gap : j->dst_gap, o->overlap ? o->overlap : j->dst_overlap);
    /* The handler and its command must fit together, whichever changes. */
    if (o->handler || o->ncommand) {
        const char *hkind = o->handler ? o->handler : j->handler_kind;
        if (o->ncommand)
            job_validate_handler(hkind, o->ncommand, o->command[0], 1);
        else
            job_validate_handler(hkind, j->ncommand, j->command0, 0);
    }
}

/* The update in a transaction, the job locked while it is checked. */
static int update_tx(ax_pg_t *pg, const char *name, const opts_t *o, char *err, size_t errlen) {
    ax_job_t j;
    ax_job_spec_t spec;
    int rc = ax_pg_begin(pg, err, errlen);
    if (rc == 0)
        rc = ax_store_job_get(pg, name, 1, &j, err, errlen);
    if (rc < 0) {
        ax_pg_rollback(pg);
        return rc;
    }
    update_check(o, &j);
    ax_job_clear(&j);
    job_spec_of(o, name, &spec);
    rc = ax_store_job_update(pg, &spec, err, errlen);
    if (rc == 0)
        rc = ax_pg_commit(pg, err, errlen);
    if (rc < 0)
        ax_pg_rollback(pg);
    return rc;
}

static int job_update(int argc, char **argv) {
    job_need_name("update", argc, argv);
    const char *name = argv[1];
    opts_t o;
    job_parse_opts("update", argc, argv, 0, &o);
    if (argc <= 2 || job_opts_empty(&o))
        die_usagef("job update needs at least one option to change (see axctl --help)");
    /* What can be checked without the stored job. */
    job_validate(o.sched_set ? o.kind : AX_SCHED_NONE, o.cron, o.tz ? o.tz : "UTC", o.gap,
                 o.overlap);

    ax_pg_t *pg = pg_open();
    char err[1024];
    int rc = update_tx(pg, name, &o, err, sizeof err);
    job_opts_free(&o);
    if (rc == 0) {
        printf("updated job %s\n", name);
        report_next(pg, name);
    }
    ax_pg_destroy(pg);
    return rc == 0 ? 0 : failed(err);
}

/* ---- enable, disable, delete ------------------------------------------------------------ */

static int job_enable(int argc, char **argv, int enable) {
    job_need_name(enable ? "enable" : "disable", argc, argv);
    if (argc > 2)
        die_usagef("job %s takes only a NAME", enable ? "enable" : "disable");
    const char *name = argv[1];
    ax_pg_t *pg = pg_open();
    char err[1024];
    int changed;
    int rc = ax_store_job_set_enabled(pg, name, enable, &changed, err, sizeof err);
    if (rc == 0) {
        if (changed)
            printf("%s job %s\n", enable ? "enabled" : "disabled", name);
        else
            printf("job %s is already %s\n", name, enable ? "enabled" : "disabled");
        if (enable)
            report_next(pg, name);
    }
    ax_pg_destroy(pg);
    return rc == 0 ? 0 : failed(err);
}

/* The first five of p's ids, "1, 2, 3, 4, 5, ..." style (", ..." added by
 * the caller's message when there are more). */
static void first_ids(const ax_job_pending_t *p, char *buf, size_t len) {
    size_t l = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < p->n && i < 5 && l < len; i++)
        l += (size_t)snprintf(buf + l, len - l, "%s%" PRId64, i ? ", " : "", p->ids[i]);
}

/* Cancel the job's unfinished instances (job delete --cancel-pending):
 * outside any transaction, so their cancel_requested_at commits before
 * Kafka is waited for. 0, or 1 (said why). */
static int cancel_pending(ax_pg_t *pg, const ax_job_pending_t *p) {
    int stopping, scheduled;
    int n = cancel_instance_ids(pg, p->ids, p->n,
                                "cancelled by an operator (axctl job delete --cancel-pending)",
                                &stopping, &scheduled);
    if (n < 0)
        return 1;
    printf("cancelled %d instance(s) not started yet; asked executors to stop %d claimed "
           "or running\n", scheduled, stopping);
    return 0;
}

/* The delete: a short transaction of its own, tried again if PostgreSQL
 * picks it to end a deadlock (the callback finishing the cancelled
 * instances locks an instance, then the job). 0 deleted, else 1 (said). */
static int delete_retrying(ax_pg_t *pg, const char *name, int64_t id) {
    char err[1024], first[128];
    for (int tries = 1;; tries++) {
        ax_job_pending_t fresh;
        int rc = ax_store_job_delete(pg, name, id, &fresh, err, sizeof err);
        if (rc == 0)
            return 0;
        if (rc == AX_ERR_NOTFOUND) {
            fprintf(stderr, "axctl: job %s was deleted or replaced meanwhile: nothing more "
                            "deleted\n", name);
            return 1;
        }
        if (rc == AX_ERR_CONFLICT) {
            first_ids(&fresh, first, sizeof first);
            fprintf(stderr,
                    "axctl: job %s has %zu unfinished instance(s) (%s%s) nobody asked to cancel "
                    "(made since): not deleted; disable it first (axctl job disable %s), then "
                    "run job delete %s --cancel-pending again\n",
                    name, fresh.n, first, fresh.n > 5 ? ", ..." : "", name, name);
            ax_job_pending_clear(&fresh);
            return 1; /* the cancellations stay */
        }
        if (rc != AX_ERR_IO || tries == 5 ||
            (!strstr(err, "deadlock detected") && !strstr(err, "could not serialize")))
            return failed(err);
        usleep((useconds_t)(100000 * tries));
    }
}

/* Refused (unless --cancel-pending) while the job has unfinished
 * instances, so no instance is left behind that nothing dispatches. No
 * PostgreSQL transaction is open while Kafka is waited for (up to 35 s):
 * cancel_requested_at is committed first, the cancellations produced, then
 * the job deleted in a short transaction of its own. */
static int delete_job(ax_pg_t *pg, const char *name, int cancel) {
    char err[1024], first[128];
    ax_job_t j;
    ax_job_pending_t p = {0};
    int rc = ax_store_job_get(pg, name, 0, &j, err, sizeof err);
    if (rc < 0)
        return failed(err);
    int64_t id = j.id;
    ax_job_clear(&j);
    if (ax_store_job_pending(pg, id, 1, &p, err, sizeof err) < 0)
        return failed(err);
    if (p.n > 0 && !cancel) {
        first_ids(&p, first, sizeof first);
        fprintf(stderr,
                "axctl: job %s has %zu unfinished instance(s) (%s%s): not deleted; cancel them "
                "with job delete %s --cancel-pending, or wait for them to finish\n",
                name, p.n, first, p.n > 5 ? ", ..." : "", name);
        ax_job_pending_clear(&p);
        return 1; /* nothing written */
    }
    rc = p.n > 0 ? cancel_pending(pg, &p) : 0;
    ax_job_pending_clear(&p);
    if (rc == 0)
        rc = delete_retrying(pg, name, id);
    if (rc == 0)
        printf("deleted job %s\n", name);
    return rc;
}

static int job_delete(int argc, char **argv) {
    job_need_name("delete", argc, argv);
    int cancel = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--cancel-pending") == 0)
            cancel = 1;
        else
            die_usagef("job delete: unknown argument '%s' (job delete NAME [--cancel-pending])",
                       argv[i]);
    }
    ax_pg_t *pg = pg_open();
    int rc = delete_job(pg, argv[1], cancel);
    ax_pg_destroy(pg);
    return rc;
}

/* ---- list, show, next, history ------------------------------------------------------- */

/* The run settings that differ from the defaults, after the next fire. */
static void list_extra(const ax_job_t *j, char *extra, size_t len) {
    size_t el = 0;
    extra[0] = '\0';
    if (strcmp(j->handler_kind, "command") != 0)
        el += (size_t)snprintf(extra + el, len - el, "  handler=%s", j->handler_kind);
    if (strcmp(j->executor_group, "default") != 0 && el < len)
        el += (size_t)snprintf(extra + el, len - el, "  group=%s", j->executor_group);
    if (j->has_concurrency_limit && el < len)
        el += (size_t)snprintf(extra + el, len - el, "  concurrency=%" PRId64 " running=%" PRId64,
                               j->concurrency_limit, j->running_count);
    if (j->routing_key && el < len)
        el += (size_t)snprintf(extra + el, len - el, "  routing-key=%.200s", j->routing_key);
    if (strcmp(j->circuit_state, "closed") != 0 && el < len)
        snprintf(extra + el, len - el, "  circuit=%s failures=%" PRId64, j->circuit_state,
                 j->consecutive_failures);
}

static int job_list(int argc, char **argv) {
    if (argc > 1)
        die_usagef("job list takes no arguments");
    ax_pg_t *pg = pg_open();
    ax_job_t *jobs;
    size_t n;
    char err[1024];
    int rc = ax_store_job_list(pg, &jobs, &n, err, sizeof err);
    ax_pg_destroy(pg);
    if (rc < 0)
        return failed(err);
    char **sum = calloc(n + 1, sizeof *sum), **next = calloc(n + 1, sizeof *next);
    size_t wname = 0, wsum = 0;
    for (size_t i = 0; i < n && sum && next; i++) {
        ax_tz_t *tz = job_zone_open(jobs[i].time_zone);
        char buf[256];
        sum[i] = job_sched_summary(&jobs[i], tz);
        job_next_summary(&jobs[i], tz, 0, buf, sizeof buf);
        next[i] = strdup(buf);
        ax_tz_destroy(tz);
        wname = strlen(jobs[i].name) > wname ? strlen(jobs[i].name) : wname;
        wsum = sum[i] && strlen(sum[i]) > wsum ? strlen(sum[i]) : wsum;
    }
    for (size_t i = 0; i < n && sum && next; i++) {
        char extra[512];
        list_extra(&jobs[i], extra, sizeof extra);
        printf("%-*s  %-8s  %-*s  %s%s\n", (int)wname, jobs[i].name,
               jobs[i].enabled ? "enabled" : "disabled", (int)wsum, sum[i] ? sum[i] : "?",
               next[i] ? next[i] : "?", extra);
    }
    rc = n && (!sum || !next) ? out_of_memory() : 0;
    for (size_t i = 0; i < n && sum && next; i++) {
        free(sum[i]);
        free(next[i]);
    }
    free(sum);
    free(next);
    ax_jobs_free(jobs, n);
    return rc;
}

/* Every column of the job as `key: value`, times in the job's zone. */
static int show_columns(ax_pg_t *pg, const char *name, const ax_tz_t *tz) {
    ax_job_col_t *cols;
    size_t n;
    char err[1024];
    if (ax_store_job_columns(pg, name, &cols, &n, err, sizeof err) < 0)
        return failed(err);
    for (size_t i = 0; i < n; i++) {
        char t[64];
        const ax_job_col_t *c = &cols[i];
        if (c->kind == AX_JOB_COL_NULL)
            printf("%s:\n", c->key);
        else if (c->kind == AX_JOB_COL_TIME)
            printf("%s: %s\n", c->key, job_fmt_time(tz, c->time_ms, t, sizeof t));
        else if (c->kind == AX_JOB_COL_BYTES)
            job_print_payload(c->key, c->text);
        else
            printf("%s: %s\n", c->key, c->text);
    }
    ax_job_cols_free(cols, n);
    return 0;
}

static int show_job(ax_pg_t *pg, const ax_job_t *j) {
    ax_tz_t *tz = job_zone_open(j->time_zone);
    int rc = show_columns(pg, j->name, tz);
    if (rc == 0 && j->has_last_fire) {
        char t[64];
        printf("last_fire: %s %s", job_fmt_time(tz, j->last_fire_ms, t, sizeof t),
               j->last_decision ? j->last_decision : "");
        if (j->has_last_instance)
            printf(" instance %" PRId64 " %s", j->last_instance_id,
                   j->last_instance_state ? j->last_instance_state : "(gone)");
        printf("\n");
    } else if (rc == 0) {
        printf("last_fire: -\n");
    }
    if (rc == 0 && !j->enabled)
        printf("next_fire: - (disabled)\n");
    else if (rc == 0 && ax_sched_kind_parse(j->schedule_kind) == AX_SCHED_NONE)
        printf("next_fire: - (no schedule: runs when submitted)\n");
    else if (rc == 0)
        rc = job_print_next("next_fire: ", j, tz, 0, 0, 5);
    ax_tz_destroy(tz);
    return rc;
}

static int job_show(int argc, char **argv) {
    job_need_name("show", argc, argv);
    if (argc > 2)
        die_usagef("job show takes only a NAME");
    ax_pg_t *pg = pg_open();
    ax_job_t j;
    char err[1024];
    int rc = ax_store_job_get(pg, argv[1], 0, &j, err, sizeof err);
    rc = rc < 0 ? failed(err) : show_job(pg, &j);
    ax_job_clear(&j);
    ax_pg_destroy(pg);
    return rc;
}

static int job_next(int argc, char **argv) {
    job_need_name("next", argc, argv);
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
            n = job_int_in(a, v, 1, 100000);
        else {
            has_from = 1;
            from = parse_time(v, a);
        }
    }
    ax_pg_t *pg = pg_open();
    ax_job_t j;
    char err[1024];
    int rc = ax_store_job_get(pg, name, 0, &j, err, sizeof err);
    ax_pg_destroy(pg);
    if (rc < 0)
        return failed(err);
    if (ax_sched_kind_parse(j.schedule_kind) == AX_SCHED_NONE)
        fprintf(stderr, "axctl: job %s has no schedule: it runs only when submitted\n", name);
    else if (!j.enabled)
        fprintf(stderr, "axctl: job %s is disabled; these are the times if it is enabled now\n",
                name);
    ax_tz_t *tz = job_zone_open(j.time_zone);
    rc = job_print_next("", &j, tz, has_from, from, n);
    ax_tz_destroy(tz);
    ax_job_clear(&j);
    return rc;
}

static void print_fire(const ax_job_fire_t *f, const ax_tz_t *tz) {
    char t[64], st[64], inst[32] = "-";
    if (f->has_instance)
        snprintf(inst, sizeof inst, "%" PRId64, f->instance_id);
    if (!f->has_instance)
        snprintf(st, sizeof st, "-");
    else if (!f->instance_exists)
        snprintf(st, sizeof st, "(gone)");
    else if (f->instance_outcome)
        snprintf(st, sizeof st, "%s/%s", f->instance_state, f->instance_outcome);
    else
        snprintf(st, sizeof st, "%s", f->instance_state ? f->instance_state : "");
    char *line = NULL;
    if (asprintf(&line, "%-25s  %-15s  %-8s  %-16s  %s",
                 job_fmt_time(tz, f->nominal_ms, t, sizeof t), f->decision, inst, st,
                 f->detail ? f->detail : "") < 0) {
        out_of_memory();
        return;
    }
    size_t len = strlen(line);
    while (len > 0 && line[len - 1] == ' ')
        line[--len] = '\0';
    puts(line);
    free(line);
}

static int job_history(int argc, char **argv) {
    job_need_name("history", argc, argv);
    const char *name = argv[1];
    int64_t limit = 20, since = 0;
    int has_since = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--limit") != 0 && strcmp(a, "--since") != 0)
            die_usagef("job history: unknown option '%s' (see axctl --help)", a);
        if (i + 1 >= argc)
            die_usagef("%s needs a value", a);
        const char *v = argv[++i];
        if (a[2] == 'l') {
            limit = job_int_in(a, v, 1, 1000000);
        } else {
            has_since = 1;
            since = parse_time(v, a);
        }
    }
    ax_pg_t *pg = pg_open();
    ax_job_t j;
    ax_job_fire_t *fires = NULL;
    size_t n = 0;
    char err[1024];
    int rc = ax_store_job_get(pg, name, 0, &j, err, sizeof err);
    if (rc == 0)
        rc = ax_store_job_history(pg, name, has_since, since, limit, &fires, &n, err,
                                  sizeof err);
    ax_pg_destroy(pg);
    if (rc < 0) {
        ax_job_clear(&j);
        return failed(err);
    }
    ax_tz_t *tz = job_zone_open(j.time_zone);
    for (size_t i = 0; i < n; i++)
        print_fire(&fires[i], tz);
    ax_tz_destroy(tz);
    ax_job_fires_free(fires, n);
    ax_job_clear(&j);
    return 0;
}

/* ---- reset: close a job's circuit breaker ------------------------------------------ */

static int job_reset(int argc, char **argv) {
    job_need_name("reset", argc, argv);
    if (argc > 2)
        die_usagef("job reset takes only a NAME");
    const char *name = argv[1];
    ax_pg_t *pg = pg_open();
    ax_job_t j;
    char err[1024];
    int rc = ax_store_job_circuit_reset(pg, name, &j, err, sizeof err);
    ax_pg_destroy(pg);
    if (rc < 0)
        return failed(err);
    if (strcmp(j.circuit_state, "closed") == 0) {
        printf("job %s: circuit was already closed (%" PRId64 " consecutive failures, threshold "
               "%" PRId64 "); failure count reset\n",
               name, j.consecutive_failures, j.circuit_threshold);
    } else {
        char t[64] = "?";
        if (j.has_circuit_opened) {
            ax_tz_t *tz = job_zone_open(j.time_zone);
            job_fmt_time(tz, j.circuit_opened_ms, t, sizeof t);
            ax_tz_destroy(tz);
        }
        printf("job %s: circuit was %s%s since %s after %" PRId64 " consecutive failures; now "
               "closed\n",
               name, j.circuit_state,
               strcmp(j.circuit_state, "half_open") == 0 ? " (a probe was running)" : "", t,
               j.consecutive_failures);
    }
    ax_job_clear(&j);
    return 0;
}

/* job pause-all | resume-all: the store's statement ax-api's
 * POST /jobs/pause-all|resume-all runs too. */
static int job_pause_all(int argc, int pause) {
    if (argc > 1)
        die_usagef("job %s takes no arguments", pause ? "pause-all" : "resume-all");
    ax_pg_t *pg = pg_open();
    ax_names_t names;
    char err[1024];
    int rc = pause ? ax_store_api_pause_all(pg, &names, err, sizeof err)
                   : ax_store_api_resume_all(pg, &names, err, sizeof err);
    ax_pg_destroy(pg);
    if (rc < 0)
        return failed(err);
    for (size_t i = 0; i < names.n; i++)
        printf("%s job %s\n", pause ? "paused" : "resumed", names.v[i]);
    printf("%zu job(s) %s\n", names.n, pause ? "paused (resume-all enables them again)"
                                              : "resumed");
    ax_names_clear(&names);
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
    if (strcmp(sub, "pause-all") == 0 || strcmp(sub, "resume-all") == 0)
        return job_pause_all(argc, sub[0] == 'p');
    die_usagef("unknown job subcommand '%s' (see axctl --help)", sub);
}
