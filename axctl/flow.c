/*
 * flow.c — axctl flow create | run | show | list | delete.
 *
 * A flow is a DAG of stages, each running a job; a stage starts when all
 * its upstream stages succeeded (infra/migrations/005_flows.sql holds the
 * state machine: ax_flow_advance (made again in 028), ax_flow_stage_done, which ax-callback
 * calls when a stage's instance ends for good). Cycles, unknown upstream
 * stages and unknown jobs are rejected when the flow is defined.
 *
 * A flow's schedule is a job named flow.NAME with handler_kind 'flow' and
 * job.flow_id set (infra/migrations/008_flow_schedule.sql): the trigger
 * fires it like any job, and each fired time starts one run
 * (ax_flow_start) in the statement that writes its ledger row. Its options
 * are job create's schedule options, parsed and written by job.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/pg.h"
#include "ax/store_flow.h"
#include "axctl.h"

#define MAX_STAGES 256
/* flow show: the newest runs shown without --run */
#define SHOW_RUNS 5
/* flow list: flows read per page */
#define LIST_PAGE 500

#define FLOW_SCHED_USAGE                                                                     \
    "--cron EXPR [--tz ZONE] [--dst-gap shift|skip] [--dst-overlap once|twice] | "           \
    "--fixed-rate MS [--start TIME] | --at TIME | --after MS | --no-schedule; "               \
    "[--misfire fire_once|skip|catch_up] [--misfire-threshold MS] [--catchup-max N] "        \
    "[--overlap allow|skip]"

typedef struct stage {
    char name[65];
    char job[129];
    char **deps; /* malloc'd names */
    size_t ndeps;
    int mark; /* DFS: 0 new, 1 on the path, 2 done */
} stage_t;

/* flow create's options. */
typedef struct flow_spec {
    const char *name, *policy;
    stage_t stages[MAX_STAGES];
    int nstages;
    char **sched; /* the schedule options, for job_flow_schedule_try */
    int nsched;
} flow_spec_t;

static void spec_free(flow_spec_t *f) {
    if (!f)
        return;
    for (int i = 0; i < f->nstages; i++) {
        for (size_t d = 0; d < f->stages[i].ndeps; d++)
            free(f->stages[i].deps[d]);
        free(f->stages[i].deps);
    }
    free(f->sched);
    free(f);
}

static void oom(void) {
    fprintf(stderr, "axctl: out of memory\n");
    exit(1);
}

static int find_stage(const flow_spec_t *f, const char *name) {
    for (int i = 0; i < f->nstages; i++)
        if (strcmp(f->stages[i].name, name) == 0)
            return i;
    return -1;
}

/* Depth-first search for a cycle; prints it and exits 2. */
static void visit(flow_spec_t *f, int i, int *path, int depth) {
    stage_t *s = &f->stages[i];
    if (s->mark == 2)
        return;
    path[depth] = i;
    if (s->mark == 1) {
        int from = 0;
        while (path[from] != i)
            from++;
        fprintf(stderr, "axctl: flow has a cycle:");
        for (int k = from; k <= depth; k++)
            fprintf(stderr, " %s%s", f->stages[path[k]].name, k < depth ? " ->" : "");
        fprintf(stderr, "\n");
        exit(2);
    }
    s->mark = 1;
    for (size_t d = 0; d < s->ndeps; d++)
        visit(f, find_stage(f, s->deps[d]), path, depth + 1);
    s->mark = 2;
}

/* --stage NAME=JOB[:UP,UP...] */
static void parse_stage(flow_spec_t *f, const char *spec) {
    if (f->nstages == MAX_STAGES)
        die_usagef("at most %d stages", MAX_STAGES);
    stage_t *s = &f->stages[f->nstages];
    memset(s, 0, sizeof *s);
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof s->name)
        die_usagef("--stage '%s': expected NAME=JOB[:UPSTREAM,...]", spec);
    snprintf(s->name, sizeof s->name, "%.*s", (int)(eq - spec), spec);
    const char *colon = strchr(eq + 1, ':');
    size_t jl = colon ? (size_t)(colon - eq - 1) : strlen(eq + 1);
    if (jl == 0 || jl >= sizeof s->job)
        die_usagef("--stage '%s': missing or too long job name", spec);
    snprintf(s->job, sizeof s->job, "%.*s", (int)jl, eq + 1);
    f->nstages++; /* its deps are freed with the spec from now on */
    if (colon && colon[1]) {
        char *list = strdup(colon + 1);
        if (!list || !(s->deps = calloc(MAX_STAGES, sizeof *s->deps)))
            oom();
        char *save = NULL;
        for (char *d = strtok_r(list, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
            if (s->ndeps == MAX_STAGES || strlen(d) >= sizeof s->name)
                die_usagef("--stage '%s': bad upstream list", spec);
            if (!(s->deps[s->ndeps++] = strdup(d)))
                oom();
        }
        free(list);
    }
    if (find_stage(f, s->name) < f->nstages - 1)
        die_usagef("stage '%s' defined twice", s->name);
}

/* flow create NAME's arguments (argv[0] is NAME); exits 2 on a usage error. */
static void parse_create(flow_spec_t *f, int argc, char **argv) {
    f->name = argv[0];
    f->policy = "stop";
    if (!(f->sched = calloc((size_t)argc, sizeof *f->sched)))
        oom();
    for (int i = 1; i < argc; i++) {
        int arity = job_flow_sched_opt(argv[i]);
        if (strcmp(argv[i], "--fixed-delay") == 0)
            arity = 1; /* refused with its reason by job_flow_schedule_try */
        if (strcmp(argv[i], "--stage") == 0 && i + 1 < argc)
            parse_stage(f, argv[++i]);
        else if (strcmp(argv[i], "--on-failure") == 0 && i + 1 < argc) {
            f->policy = argv[++i];
            if (strcmp(f->policy, "stop") != 0 && strcmp(f->policy, "continue") != 0)
                die_usagef("--on-failure must be stop or continue, not '%s'", f->policy);
        } else if (arity >= 0) {
            f->sched[f->nsched++] = argv[i];
            if (arity == 1) {
                if (i + 1 >= argc)
                    die_usagef("%s needs a value", argv[i]);
                f->sched[f->nsched++] = argv[++i];
            }
        } else
            die_usagef("flow create: unknown option '%s'", argv[i]);
    }
}

/* The flow's name and DAG; exits 2 with the reason. */
static void check_spec(flow_spec_t *f) {
    /* The flow table's CHECK; with a schedule, its job flow.NAME must fit
     * the job table's 128 bytes too. */
    size_t nlen = strlen(f->name), nmax = f->nsched ? 123 : 128;
    static const char allowed[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
    int name_ok = nlen >= 1 && nlen <= nmax && strspn(f->name, allowed) == nlen &&
                  strchr("._-", f->name[0]) == NULL;
    if (!name_ok)
        die_usagef("invalid flow name '%s': 1-%zu of A-Z a-z 0-9 . _ - starting with a letter "
                   "or digit", f->name, nmax);
    if (f->nstages == 0)
        die_usage("a flow needs at least one --stage");
    for (int i = 0; i < f->nstages; i++)
        for (size_t d = 0; d < f->stages[i].ndeps; d++)
            if (find_stage(f, f->stages[i].deps[d]) < 0)
                die_usagef("stage '%s' depends on unknown stage '%s'", f->stages[i].name,
                           f->stages[i].deps[d]);
    int path[MAX_STAGES + 1];
    for (int i = 0; i < f->nstages; i++)
        visit(f, i, path, 0);
}

/* One line for a failed store call: "axctl: [WHAT: ]REASON" (no DETAIL).
 * Returns the exit status: 1. */
static int store_fail(const char *what, char *err) {
    if (what)
        fprintf(stderr, "axctl: %s: %s\n", what, pg_err_line(err));
    else
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
    return 1;
}

/* After a schedule was written: "schedule: ...", "next fire: ...". */
static void report_schedule(ax_pg_t *pg, const char *name) {
    char err[1024];
    ax_flow_t fl = {0};
    char *sched = NULL, *next = NULL;
    if (ax_store_flow_get(pg, name, &fl, err, sizeof err) < 0) {
        store_fail(NULL, err);
        return;
    }
    if (fl.sched_job && job_sched_describe(pg, fl.sched_job, 1, &sched, &next) == 0) {
        if (strcmp(sched, "none") == 0)
            printf("schedule: none (job %s keeps the fire history)\n", fl.sched_job);
        else
            printf("schedule: %s (job %s)\nnext fire: %s\n", sched, fl.sched_job, next);
    }
    free(sched);
    free(next);
    ax_flow_clear(&fl);
}

/* The store's view of a checked spec: stage definitions pointing into it. */
static int define(ax_pg_t *pg, const flow_spec_t *f, int64_t *ret_id, char *err, size_t errlen) {
    ax_flow_stage_def_t defs[MAX_STAGES];
    for (int i = 0; i < f->nstages; i++)
        defs[i] = (ax_flow_stage_def_t){.name = f->stages[i].name,
                                        .job = f->stages[i].job,
                                        .deps = (const char *const *)f->stages[i].deps,
                                        .ndeps = f->stages[i].ndeps};
    ax_flow_def_t def = {.name = f->name, .on_failure = f->policy, .stages = defs,
                         .nstages = (size_t)f->nstages};
    return ax_store_flow_define(pg, &def, ret_id, err, errlen);
}

/* Every stage's job exists (1 if not, said which), then the flow and its
 * schedule in one transaction. Returns the exit status. */
static int create_in_db(ax_pg_t *pg, flow_spec_t *f) {
    char err[1024];
    const char *jobs[MAX_STAGES];
    for (int i = 0; i < f->nstages; i++)
        jobs[i] = f->stages[i].job;
    long missing;
    if (ax_store_flow_missing_job(pg, jobs, (size_t)f->nstages, &missing, err, sizeof err) < 0)
        return store_fail(NULL, err);
    if (missing >= 0) {
        fprintf(stderr, "axctl: stage '%s': no job named %s\n", f->stages[missing].name,
                f->stages[missing].job);
        return 1;
    }
    if (ax_pg_begin(pg, err, sizeof err) < 0)
        return store_fail(NULL, err);
    int64_t id;
    int rc = define(pg, f, &id, err, sizeof err);
    if (rc == AX_ERR_CONFLICT) {
        fprintf(stderr, "axctl: cannot create flow %s: it already exists\n", f->name);
        return 1;
    }
    if (rc < 0) {
        char what[200];
        snprintf(what, sizeof what, "cannot create flow %s", f->name);
        return store_fail(what, err);
    }
    char sid[32];
    snprintf(sid, sizeof sid, "%lld", (long long)id);
    int scheduled = job_flow_schedule_try(pg, f->name, sid, f->nsched, f->sched);
    if (scheduled < 0) {
        ax_pg_rollback(pg);
        return 1;
    }
    if (ax_pg_commit(pg, err, sizeof err) < 0)
        return store_fail(NULL, err);
    printf("created flow %s (%d stages, on failure %s)\n", f->name, f->nstages, f->policy);
    if (scheduled)
        report_schedule(pg, f->name);
    return 0;
}

static int flow_create(int argc, char **argv) {
    if (argc < 1)
        die_usage("flow create NAME --stage NAME=JOB[:UPSTREAM,...]... [--on-failure stop|continue]"
                  " [SCHEDULE]");
    flow_spec_t *f = calloc(1, sizeof *f);
    if (!f)
        oom();
    parse_create(f, argc, argv);
    check_spec(f);
    ax_pg_t *pg = pg_open();
    int rc = create_in_db(pg, f);
    ax_pg_destroy(pg);
    spec_free(f);
    return rc;
}

/* flow schedule NAME SCHEDULE in one transaction; returns the exit status. */
static int schedule_in_db(ax_pg_t *pg, int argc, char **argv) {
    char err[1024];
    if (ax_pg_begin(pg, err, sizeof err) < 0)
        return store_fail(NULL, err);
    int64_t id;
    if (ax_store_flow_lock(pg, argv[0], &id, err, sizeof err) < 0)
        return store_fail(NULL, err);
    char sid[32];
    snprintf(sid, sizeof sid, "%lld", (long long)id);
    int wrote = job_flow_schedule_try(pg, argv[0], sid, argc - 1, argv + 1);
    if (wrote < 0) {
        ax_pg_rollback(pg);
        return 1;
    }
    if (ax_pg_commit(pg, err, sizeof err) < 0)
        return store_fail(NULL, err);
    if (wrote)
        report_schedule(pg, argv[0]);
    else
        printf("schedule: none\n");
    return 0;
}

/* flow schedule NAME SCHEDULE: set, change or remove the flow's schedule. */
static int flow_schedule(int argc, char **argv) {
    if (argc < 2)
        die_usage("flow schedule NAME " FLOW_SCHED_USAGE);
    ax_pg_t *pg = pg_open();
    int rc = schedule_in_db(pg, argc, argv);
    ax_pg_destroy(pg);
    return rc;
}

static int flow_run(int argc, char **argv) {
    if (argc != 1)
        die_usage("flow run NAME");
    ax_pg_t *pg = pg_open();
    char err[1024];
    int64_t run;
    /* the run, its stages, the first instances: ax_flow_start, the code a
     * scheduled fire runs too */
    int rc = ax_store_flow_start(pg, argv[0], "manual", &run, err, sizeof err);
    ax_pg_destroy(pg);
    if (rc < 0)
        return store_fail(NULL, err);
    printf("%lld\n", (long long)run);
    return 0;
}

/* flow show: "stage S: job J[ after A,B]" per stage, a page at a time. */
static int show_stages(ax_pg_t *pg, const ax_flow_t *fl) {
    char err[1024], after[80] = "";
    for (;;) {
        ax_flow_stage_t *st;
        size_t n;
        if (ax_store_flow_stages(pg, fl->id, *after ? after : NULL, MAX_STAGES, &st, &n, err,
                                 sizeof err) < 0)
            return store_fail(NULL, err);
        for (size_t i = 0; i < n; i++) {
            printf("  stage %s: job %s", st[i].name, st[i].job);
            for (size_t d = 0; d < st[i].ndeps; d++)
                printf("%s%s", d ? "," : " after ", st[i].deps[d]);
            printf("\n");
        }
        if (n)
            snprintf(after, sizeof after, "%s", st[n - 1].name);
        ax_flow_stages_free(st, n);
        if (n < MAX_STAGES)
            return 0;
    }
}

/* flow show: its schedule and next fire, or that it has none. */
static void show_schedule(ax_pg_t *pg, const ax_flow_t *fl) {
    char *sched = NULL, *next = NULL;
    if (fl->sched_job && job_sched_describe(pg, fl->sched_job, 1, &sched, &next) == 0 &&
        strcmp(sched, "none") != 0)
        printf("schedule: %s (job %s%s; misfire %s, overlap %s)\nnext fire: %s\n", sched,
               fl->sched_job, fl->sched_enabled ? "" : ", disabled", fl->sched_misfire,
               fl->sched_overlap, next);
    else
        printf("schedule: none (runs when started: axctl flow run)\n");
    free(sched);
    free(next);
}

/* flow show: the newest runs (or run `run_id`), each with its stages. */
static int show_runs(ax_pg_t *pg, const ax_flow_t *fl, int64_t run_id) {
    char err[1024];
    ax_flow_run_filter_t f = {.flow_id = fl->id, .run_id = run_id};
    ax_flow_run_t *runs;
    size_t n;
    if (ax_store_flow_runs(pg, &f, SHOW_RUNS, &runs, &n, err, sizeof err) < 0)
        return store_fail(NULL, err);
    for (size_t i = 0; i < n; i++) {
        const ax_flow_run_t *r = &runs[i];
        if (r->nstages == 0)
            continue;
        printf("run %lld: %s (%s%s%s, started %s%s%s)\n", (long long)r->id, r->state,
               r->started_by, r->nominal_time ? " " : "", r->nominal_time ? r->nominal_time : "",
               r->started_at, r->finished_at ? ", finished " : "",
               r->finished_at ? r->finished_at : "");
        for (size_t k = 0; k < r->nstages; k++) {
            if (r->stages[k].instance_id)
                printf("  %s: %s (instance %lld)\n", r->stages[k].stage, r->stages[k].state,
                       (long long)r->stages[k].instance_id);
            else
                printf("  %s: %s (instance -)\n", r->stages[k].stage, r->stages[k].state);
        }
    }
    ax_flow_runs_free(runs, n);
    return 0;
}

static int flow_show(int argc, char **argv) {
    if (argc != 1 && !(argc == 3 && strcmp(argv[1], "--run") == 0))
        die_usage("flow show NAME [--run ID]");
    int64_t run_id = argc == 3 ? parse_int(argv[2], "--run") : 0;
    ax_pg_t *pg = pg_open();
    char err[1024];
    ax_flow_t fl = {0};
    int rc = ax_store_flow_get(pg, argv[0], &fl, err, sizeof err) < 0 ? store_fail(NULL, err) : 0;
    if (rc == 0) {
        printf("flow %s (on failure %s)\n", fl.name, fl.on_failure);
        rc = show_stages(pg, &fl);
    }
    if (rc == 0) {
        show_schedule(pg, &fl);
        rc = show_runs(pg, &fl, run_id);
    }
    ax_flow_clear(&fl);
    ax_pg_destroy(pg);
    return rc;
}

static void list_line(ax_pg_t *pg, const ax_flow_t *fl) {
    char *sched = NULL, *next = NULL;
    printf("%s  %lld stages  on-failure=%s  last: ", fl->name, (long long)fl->nstages,
           fl->on_failure);
    if (fl->last_run_state)
        printf("%s (run %lld)", fl->last_run_state, (long long)fl->last_run_id);
    else
        printf("never run");
    if (fl->sched_job && job_sched_describe(pg, fl->sched_job, 0, &sched, &next) == 0)
        printf("  schedule: %s%s  next: %s", sched, fl->sched_enabled ? "" : " (disabled)", next);
    free(sched);
    free(next);
    printf("\n");
}

static int flow_list(void) {
    ax_pg_t *pg = pg_open();
    char err[1024], after[200] = "";
    int rc = 0;
    for (;;) {
        ax_flow_filter_t f = {.after_name = *after ? after : NULL};
        ax_flow_t *rows;
        size_t n;
        if (ax_store_flow_list(pg, &f, LIST_PAGE, &rows, &n, err, sizeof err) < 0) {
            rc = store_fail(NULL, err);
            break;
        }
        for (size_t i = 0; i < n; i++)
            list_line(pg, &rows[i]);
        if (n)
            snprintf(after, sizeof after, "%s", rows[n - 1].name);
        ax_flows_free(rows, n);
        if (n < LIST_PAGE)
            break;
    }
    ax_pg_destroy(pg);
    return rc;
}

static int flow_delete(int argc, char **argv) {
    if (argc != 1)
        die_usage("flow delete NAME");
    ax_pg_t *pg = pg_open();
    char err[1024];
    int rc = ax_store_flow_delete(pg, argv[0], err, sizeof err);
    ax_pg_destroy(pg);
    if (rc < 0)
        return store_fail(NULL, err);
    printf("deleted flow %s\n", argv[0]);
    return 0;
}

int cmd_flow(int argc, char **argv) {
    if (argc >= 1 && strcmp(argv[0], "create") == 0)
        return flow_create(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "run") == 0)
        return flow_run(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "show") == 0)
        return flow_show(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "list") == 0)
        return flow_list();
    if (argc >= 1 && strcmp(argv[0], "delete") == 0)
        return flow_delete(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "schedule") == 0)
        return flow_schedule(argc - 1, argv + 1);
    die_usage("flow create|schedule|run|show|list|delete ...");
}
