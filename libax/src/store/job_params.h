/*
 * job_params.h — private to libax/src/store (and its unit test): the
 * parameters of the job create and update statements, made from a job
 * spec. A setting not given is a NULL parameter; a setting that can be
 * cleared (routing key, backlog cap, concurrency limit, retry rules) has a
 * boolean "given" parameter beside it, so NULL can also mean "clear".
 */
#ifndef AX_STORE_JOB_PARAMS_H
#define AX_STORE_JOB_PARAMS_H

#include "ax/pg.h"
#include "ax/store_job.h"
#include "store_int.h"

/* The parameters of both statements, P_X being $(P_X + 1) in their text
 * (create adds P_ENABLED and P_FLOW). */
enum {
    P_NAME, P_SCHED, P_KIND, P_EXPR, P_INTERVAL, P_START, P_AFTER, P_TZ, P_GAP, P_OVERLAP,
    P_MISFIRE, P_THRESHOLD, P_CATCHUP, P_OVERLAP_POLICY, P_TIMEOUT, P_PRIORITY, P_PAYLOAD,
    P_HANDLER, P_GROUP, P_RKEY_SET, P_RKEY, P_BACKLOG_SET, P_BACKLOG, P_TOLERANCE, P_CONC_SET,
    P_CONC, P_RETRY_MAX, P_RETRY_INITIAL, P_RETRY_MULT, P_RETRY_MAX_DELAY, P_RETRY_JITTER,
    P_RULES_SET, P_RULES, P_CIRCUIT_THRESHOLD, P_CIRCUIT_COOLDOWN, P_COMMAND, P_UPDATE_N,
    P_ENABLED = P_UPDATE_N, P_FLOW, P_CREATE_N
};

typedef struct {
    const char *p[P_CREATE_N];
    int len[P_CREATE_N], fmt[P_CREATE_N];
    ax_num_t num[P_CREATE_N];
    ax_strbuf_t cmd;
} ax__job_params_t;

/* Fill sp from s (strings borrowed from s, numbers in sp); AX_ERR_NOMEM
 * if the command does not fit. ax__job_params_clear frees what it made. */
int ax__job_spec_params(ax__job_params_t *sp, const ax_job_spec_t *s);
void ax__job_params_clear(ax__job_params_t *sp);

#endif
