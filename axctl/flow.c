/*
 * flow.c — axctl flow create | run | show | list | delete.
 *
 * A flow is a DAG of stages, each running a job; a stage starts when all
 * its upstream stages succeeded (infra/migrations/005_flows.sql holds the
 * state machine: ax_flow_advance, ax_flow_stage_done, which ax-callback
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
#include "axctl.h"

#define MAX_STAGES 256

#define FLOW_SCHED_USAGE                                                                     \
    "--cron EXPR [--tz ZONE] [--dst-gap shift|skip] [--dst-overlap once|twice] | "           \
    "--fixed-rate MS [--start TIME] | --at TIME | --after MS | --no-schedule; "               \
    "[--misfire fire_once|skip|catch_up] [--misfire-threshold MS] [--catchup-max N] "        \
    "[--overlap allow|skip]"

typedef struct stage {
    char name[65];
    char job[129];
    char deps[MAX_STAGES][65];
    int ndeps;
    int mark; /* DFS: 0 new, 1 on the path, 2 done */
} stage_t;

static stage_t stages[MAX_STAGES];
static int nstages;

static int find_stage(const char *name) {
    for (int i = 0; i < nstages; i++)
        if (strcmp(stages[i].name, name) == 0)
            return i;
    return -1;
}

/* Depth-first search for a cycle; prints it and exits 2. */
static void visit(int i, int *path, int depth) {
    if (stages[i].mark == 2)
        return;
    path[depth] = i;
    if (stages[i].mark == 1) {
        int from = 0;
        while (path[from] != i)
            from++;
        fprintf(stderr, "axctl: flow has a cycle:");
        for (int k = from; k <= depth; k++)
            fprintf(stderr, " %s%s", stages[path[k]].name, k < depth ? " ->" : "");
        fprintf(stderr, "\n");
        exit(2);
    }
    stages[i].mark = 1;
    for (int d = 0; d < stages[i].ndeps; d++)
        visit(find_stage(stages[i].deps[d]), path, depth + 1);
    stages[i].mark = 2;
}

/* --stage NAME=JOB[:UP,UP...] */
static void parse_stage(const char *spec) {
    if (nstages == MAX_STAGES)
        die_usagef("at most %d stages", MAX_STAGES);
    stage_t *s = &stages[nstages];
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
    if (colon && colon[1]) {
        char *list = strdup(colon + 1);
        for (char *save = NULL, *d = strtok_r(list, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
            if (s->ndeps == MAX_STAGES || strlen(d) >= sizeof s->deps[0])
                die_usagef("--stage '%s': bad upstream list", spec);
            snprintf(s->deps[s->ndeps++], sizeof s->deps[0], "%s", d);
        }
        free(list);
    }
    if (find_stage(s->name) >= 0)
        die_usagef("stage '%s' defined twice", s->name);
    nstages++;
}

/* After a schedule was written: "schedule: ...", "next fire: ...". */
static void report_schedule(ax_pg_t *pg, const char *flow_id) {
    const char *p[] = {flow_id};
    PGresult *r = q(pg, "SELECT name FROM job WHERE flow_id = $1::bigint", 1, p);
    char *sched = NULL, *next = NULL;
    if (PQntuples(r) == 1 && job_sched_describe(pg, PQgetvalue(r, 0, 0), 1, &sched, &next) == 0) {
        if (strcmp(sched, "none") == 0)
            printf("schedule: none (job %s keeps the fire history)\n", PQgetvalue(r, 0, 0));
        else
            printf("schedule: %s (job %s)\nnext fire: %s\n", sched, PQgetvalue(r, 0, 0), next);
        free(sched);
        free(next);
    }
    PQclear(r);
}

static int flow_create(int argc, char **argv) {
    if (argc < 1)
        die_usage("flow create NAME --stage NAME=JOB[:UPSTREAM,...]... [--on-failure stop|continue]"
                  " [SCHEDULE]");
    const char *name = argv[0], *policy = "stop";
    char **sched = calloc((size_t)argc, sizeof *sched);
    int nsched = 0;
    if (!sched) {
        fprintf(stderr, "axctl: out of memory\n");
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        int arity = job_flow_sched_opt(argv[i]);
        if (strcmp(argv[i], "--fixed-delay") == 0)
            arity = 1; /* refused with its reason by job_flow_schedule */
        if (strcmp(argv[i], "--stage") == 0 && i + 1 < argc)
            parse_stage(argv[++i]);
        else if (strcmp(argv[i], "--on-failure") == 0 && i + 1 < argc) {
            policy = argv[++i];
            if (strcmp(policy, "stop") != 0 && strcmp(policy, "continue") != 0)
                die_usagef("--on-failure must be stop or continue, not '%s'", policy);
        } else if (arity >= 0) {
            sched[nsched++] = argv[i];
            if (arity == 1) {
                if (i + 1 >= argc)
                    die_usagef("%s needs a value", argv[i]);
                sched[nsched++] = argv[++i];
            }
        } else
            die_usagef("flow create: unknown option '%s'", argv[i]);
    }
    /* The flow table's CHECK; with a schedule, its job flow.NAME must fit
     * the job table's 128 bytes too. */
    size_t nlen = strlen(name), nmax = nsched ? 123 : 128;
    int name_ok = nlen >= 1 && nlen <= nmax &&
                  strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
                      nlen &&
                  strchr("._-", name[0]) == NULL;
    if (!name_ok)
        die_usagef("invalid flow name '%s': 1-%zu of A-Z a-z 0-9 . _ - starting with a letter "
                   "or digit", name, nmax);
    if (nstages == 0)
        die_usage("a flow needs at least one --stage");
    for (int i = 0; i < nstages; i++)
        for (int d = 0; d < stages[i].ndeps; d++)
            if (find_stage(stages[i].deps[d]) < 0)
                die_usagef("stage '%s' depends on unknown stage '%s'", stages[i].name,
                           stages[i].deps[d]);
    int path[MAX_STAGES + 1];
    for (int i = 0; i < nstages; i++)
        visit(i, path, 0);
    ax_pg_t *pg = pg_open();
    char err[1024];
    for (int i = 0; i < nstages; i++) {
        const char *p[] = {stages[i].job};
        PGresult *r = q(pg, "SELECT 1 FROM job WHERE name = $1", 1, p);
        int found = PQntuples(r);
        PQclear(r);
        if (!found) {
            fprintf(stderr, "axctl: stage '%s': no job named %s\n", stages[i].name, stages[i].job);
            return 1;
        }
    }
    if (ax_pg_begin(pg, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    const char *fp[] = {name, policy};
    PGresult *r;
    if (ax_pg_exec(pg, "INSERT INTO flow (name, failure_policy) VALUES ($1, $2) RETURNING id", 2, fp,
                   NULL, NULL, &r, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: cannot create flow %s: %s\n", name, pg_err_line(err));
        return 1;
    }
    char id[32];
    snprintf(id, sizeof id, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    for (int i = 0; i < nstages; i++) {
        ax_strbuf_t deps = {0};
        ax_pgarr_begin(&deps);
        for (int d = 0; d < stages[i].ndeps; d++)
            ax_pgarr_text(&deps, stages[i].deps[d]);
        ax_pgarr_end(&deps);
        const char *sp[] = {id, stages[i].name, stages[i].job, deps.s};
        int rc = ax_pg_exec(pg,
                            "INSERT INTO flow_stage (flow_id, name, job_name, depends_on)"
                            " VALUES ($1::bigint, $2, $3, $4::text[])",
                            4, sp, NULL, NULL, NULL, err, sizeof err);
        ax_strbuf_free(&deps);
        if (rc < 0) {
            fprintf(stderr, "axctl: stage '%s': %s\n", stages[i].name, pg_err_line(err));
            return 1;
        }
    }
    int scheduled = job_flow_schedule(pg, name, id, nsched, sched);
    free(sched);
    if (ax_pg_commit(pg, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    printf("created flow %s (%d stages, on failure %s)\n", name, nstages, policy);
    if (scheduled)
        report_schedule(pg, id);
    return 0;
}

/* flow schedule NAME SCHEDULE: set, change or remove the flow's schedule. */
static int flow_schedule(int argc, char **argv) {
    if (argc < 2)
        die_usage("flow schedule NAME " FLOW_SCHED_USAGE);
    ax_pg_t *pg = pg_open();
    char err[1024];
    if (ax_pg_begin(pg, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    const char *p[] = {argv[0]};
    PGresult *r = q(pg, "SELECT id FROM flow WHERE name = $1 FOR UPDATE", 1, p);
    if (PQntuples(r) != 1) {
        fprintf(stderr, "axctl: no flow named %s\n", argv[0]);
        return 1;
    }
    char id[32];
    snprintf(id, sizeof id, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    int wrote = job_flow_schedule(pg, argv[0], id, argc - 1, argv + 1);
    if (ax_pg_commit(pg, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    if (wrote)
        report_schedule(pg, id);
    else
        printf("schedule: none\n");
    return 0;
}

static int flow_run(int argc, char **argv) {
    if (argc != 1)
        die_usage("flow run NAME");
    ax_pg_t *pg = pg_open();
    char err[1024];
    const char *p[] = {argv[0]};
    PGresult *r;
    /* the run, its stages, the first instances: ax_flow_start, the code a
     * scheduled fire runs too */
    if (ax_pg_exec(pg, "SELECT ax_flow_start(id, 'manual') FROM flow WHERE name = $1", 1, p, NULL,
                   NULL, &r, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    if (PQntuples(r) != 1) {
        fprintf(stderr, "axctl: no flow named %s\n", argv[0]);
        return 1;
    }
    printf("%s\n", PQgetvalue(r, 0, 0));
    PQclear(r);
    return 0;
}

static int flow_show(int argc, char **argv) {
    if (argc != 1 && !(argc == 3 && strcmp(argv[1], "--run") == 0))
        die_usage("flow show NAME [--run ID]");
    ax_pg_t *pg = pg_open();
    const char *p[] = {argv[0]};
    PGresult *r = q(pg,
                    "SELECT f.failure_policy, s.name, s.job_name, array_to_string(s.depends_on, ',')"
                    " FROM flow f JOIN flow_stage s ON s.flow_id = f.id WHERE f.name = $1"
                    " ORDER BY s.name",
                    1, p);
    if (PQntuples(r) == 0) {
        fprintf(stderr, "axctl: no flow named %s\n", argv[0]);
        return 1;
    }
    printf("flow %s (on failure %s)\n", argv[0], PQgetvalue(r, 0, 0));
    for (int i = 0; i < PQntuples(r); i++)
        printf("  stage %s: job %s%s%s\n", PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
               *PQgetvalue(r, i, 3) ? " after " : "", PQgetvalue(r, i, 3));
    PQclear(r);
    r = q(pg,
          "SELECT j.name, j.enabled, j.misfire_policy, j.overlap_policy FROM job j"
          " JOIN flow f ON f.id = j.flow_id WHERE f.name = $1",
          1, p);
    char *sched = NULL, *next = NULL;
    if (PQntuples(r) == 1 && job_sched_describe(pg, PQgetvalue(r, 0, 0), 1, &sched, &next) == 0 &&
        strcmp(sched, "none") != 0) {
        printf("schedule: %s (job %s%s; misfire %s, overlap %s)\nnext fire: %s\n", sched,
               PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1)[0] == 't' ? "" : ", disabled",
               PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 3), next);
        free(sched);
        free(next);
    } else {
        free(sched);
        free(next);
        printf("schedule: none (runs when started: axctl flow run)\n");
    }
    PQclear(r);
    const char *rp[] = {argv[0], argc == 3 ? argv[2] : NULL};
    r = q(pg,
          "SELECT fr.id, fr.state, fr.started_at, coalesce(fr.finished_at::text, ''),"
          "  sr.stage, sr.state, coalesce(sr.instance_id::text, '-'), fr.started_by,"
          "  coalesce((SELECT ' ' || jf.nominal_time FROM job_fire jf"
          "            WHERE jf.flow_run_id = fr.id), '')"
          " FROM flow f JOIN flow_run fr ON fr.flow_id = f.id"
          " JOIN flow_stage_run sr ON sr.run_id = fr.id"
          " WHERE f.name = $1 AND ($2::bigint IS NULL OR fr.id = $2::bigint)"
          "   AND fr.id IN (SELECT id FROM flow_run WHERE flow_id = f.id"
          "                 ORDER BY id DESC LIMIT CASE WHEN $2::bigint IS NULL THEN 5 END)"
          " ORDER BY fr.id DESC, sr.stage",
          2, rp);
    const char *last = "";
    for (int i = 0; i < PQntuples(r); i++) {
        if (strcmp(last, PQgetvalue(r, i, 0)) != 0) {
            last = PQgetvalue(r, i, 0);
            printf("run %s: %s (%s%s, started %s%s%s)\n", last, PQgetvalue(r, i, 1),
                   PQgetvalue(r, i, 7), PQgetvalue(r, i, 8), PQgetvalue(r, i, 2),
                   *PQgetvalue(r, i, 3) ? ", finished " : "", PQgetvalue(r, i, 3));
        }
        printf("  %s: %s (instance %s)\n", PQgetvalue(r, i, 4), PQgetvalue(r, i, 5),
               PQgetvalue(r, i, 6));
    }
    PQclear(r);
    return 0;
}

static int flow_list(void) {
    ax_pg_t *pg = pg_open();
    PGresult *r = q(pg,
                    "SELECT f.name, f.failure_policy, (SELECT count(*) FROM flow_stage s"
                    "  WHERE s.flow_id = f.id), coalesce((SELECT state || ' (run ' || id || ')'"
                    "  FROM flow_run WHERE flow_id = f.id ORDER BY id DESC LIMIT 1), 'never run'),"
                    "  j.name, j.enabled"
                    " FROM flow f LEFT JOIN job j ON j.flow_id = f.id ORDER BY f.name",
                    0, NULL);
    for (int i = 0; i < PQntuples(r); i++) {
        char *sched = NULL, *next = NULL;
        printf("%s  %s stages  on-failure=%s  last: %s", PQgetvalue(r, i, 0), PQgetvalue(r, i, 2),
               PQgetvalue(r, i, 1), PQgetvalue(r, i, 3));
        if (!PQgetisnull(r, i, 4) &&
            job_sched_describe(pg, PQgetvalue(r, i, 4), 0, &sched, &next) == 0) {
            printf("  schedule: %s%s  next: %s", sched,
                   PQgetvalue(r, i, 5)[0] == 't' ? "" : " (disabled)", next);
            free(sched);
            free(next);
        }
        printf("\n");
    }
    PQclear(r);
    return 0;
}

static int flow_delete(int argc, char **argv) {
    if (argc != 1)
        die_usage("flow delete NAME");
    ax_pg_t *pg = pg_open();
    const char *p[] = {argv[0]};
    PGresult *r = q(pg, "DELETE FROM flow WHERE name = $1 RETURNING id", 1, p);
    int n = PQntuples(r);
    PQclear(r);
    if (!n) {
        fprintf(stderr, "axctl: no flow named %s\n", argv[0]);
        return 1;
    }
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
