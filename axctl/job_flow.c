/*
 * job_flow.c — a flow's schedule job (flow.<name>, handler 'flow'): the
 * schedule options of job create/update applied to it (axctl flow, flow.c),
 * and a job's schedule described for flow show/list.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/job_json.h"
#include "ax/schedule.h"
#include "ax/store_job.h"
#include "axctl.h"
#include "job_int.h"

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

/* Exits 2 unless argv[0..argc) are a flow's schedule options. */
static void flow_opts_check(int argc, char **argv) {
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
}

/* The options as job_parse_opts reads them: argv[2..] after "schedule"
 * and the job's name. -1 if out of memory (said). */
static int flow_opts_parse(const char *jobname, int argc, char **argv, opts_t *o) {
    char **av = malloc(sizeof *av * ((size_t)argc + 3));
    if (!av) {
        fprintf(stderr, "axctl: out of memory\n");
        return -1;
    }
    av[0] = "schedule";
    av[1] = (char *)jobname;
    for (int i = 0; i < argc; i++)
        av[i + 2] = argv[i];
    av[argc + 2] = NULL;
    job_parse_opts("schedule", argc + 2, av, 0, o);
    free(av);
    if (o->overlap_policy && strcmp(o->overlap_policy, "allow") != 0 &&
        strcmp(o->overlap_policy, "skip") != 0)
        die_usagef("--overlap for a flow must be allow or skip (a fire starts a run, not an "
                   "instance to queue behind or cancel), not '%s'", o->overlap_policy);
    job_validate(o->sched_set ? o->kind : AX_SCHED_NONE, o->cron, o->tz ? o->tz : "UTC", o->gap,
                 o->overlap);
    return 0;
}

/* Change the existing schedule job j; exits 2 if the options do not fit it. */
static int flow_sched_update(ax_pg_t *pg, const char *flow, const ax_job_t *j, const opts_t *o,
                             char *err, size_t errlen) {
    int kind = o->sched_set ? o->kind : ax_sched_kind_parse(j->schedule_kind);
    if (o->has_start && kind != AX_SCHED_FIXED_RATE)
        die_usagef("--start goes with a fixed-rate schedule; flow %s has %s", flow,
                   ax_sched_kind_name((ax_sched_kind_t)kind));
    job_validate(kind, o->sched_set ? o->cron : j->schedule_expr, o->tz ? o->tz : j->time_zone,
                 o->gap ? o->gap : j->dst_gap, o->overlap ? o->overlap : j->dst_overlap);
    if (job_opts_empty(o))
        die_usagef("flow schedule needs a schedule option (see axctl --help)");
    ax_job_spec_t spec;
    job_spec_of(o, j->name, &spec);
    return ax_store_job_update(pg, &spec, err, errlen);
}

/* A new schedule job; 0 if there is nothing to write (*ret_wrote = 0). */
static int flow_sched_create(ax_pg_t *pg, const char *flow, int64_t flow_id, const char *jobname,
                             int argc, const opts_t *o, int *ret_wrote, char *err,
                             size_t errlen) {
    *ret_wrote = 0;
    if (!o->sched_set || o->kind == AX_SCHED_NONE) {
        if (o->sched_set || argc == 0)
            return 0; /* no schedule, none wanted */
        die_usagef("flow %s has no schedule yet: give --cron, --fixed-rate, --at or --after",
                   flow);
    }
    if (!ax_job_name_valid(jobname))
        die_usagef("flow name '%s' too long for its schedule job %s (at most 123 characters)",
                   flow, jobname);
    ax_job_spec_t spec;
    job_spec_of(o, jobname, &spec);
    spec.handler_kind = "flow";
    spec.flow_id = flow_id;
    *ret_wrote = 1;
    return ax_store_job_create(pg, &spec, err, errlen);
}

int job_flow_schedule_try(ax_pg_t *pg, const char *flow, const char *flow_id, int argc,
                          char **argv) {
    flow_opts_check(argc, argv);
    char jobname[160];
    snprintf(jobname, sizeof jobname, "flow.%s", flow);
    opts_t o;
    if (flow_opts_parse(jobname, argc, argv, &o) < 0)
        return -1;
    int64_t fid = parse_int(flow_id, "flow id");
    char err[1024];
    ax_job_t j;
    int wrote = 1;
    int rc = ax_store_job_get_by_flow(pg, fid, 1, &j, err, sizeof err);
    if (rc == 0) {
        snprintf(jobname, sizeof jobname, "%s", j.name);
        rc = flow_sched_update(pg, flow, &j, &o, err, sizeof err);
        ax_job_clear(&j);
    } else if (rc == AX_ERR_NOTFOUND) {
        rc = flow_sched_create(pg, flow, fid, jobname, argc, &o, &wrote, err, sizeof err);
    }
    job_opts_free(&o);
    if (rc == AX_ERR_CONFLICT)
        fprintf(stderr, "axctl: a job named %s already exists and is not the schedule of flow %s\n",
                jobname, flow);
    else if (rc < 0)
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
    return rc < 0 ? -1 : wrote;
}

int job_sched_describe(ax_pg_t *pg, const char *name, int verbose, char **sched, char **next) {
    ax_job_t j;
    char err[512], buf[256];
    if (ax_store_job_get(pg, name, 0, &j, err, sizeof err) < 0)
        return -1;
    ax_tz_t *tz = job_zone_open(j.time_zone);
    *sched = job_sched_summary(&j, tz);
    job_next_summary(&j, tz, verbose, buf, sizeof buf);
    *next = strdup(buf);
    ax_tz_destroy(tz);
    ax_job_clear(&j);
    if (!*sched || !*next) {
        free(*sched);
        free(*next);
        fprintf(stderr, "axctl: out of memory\n");
        return -1;
    }
    return 0;
}
