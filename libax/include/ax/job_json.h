/*
 * ax/job_json.h — a job spec (ax/store_job.h) from the JSON of ax-api's
 * JobSpec (docs/API.md), and the checks every spec passes before it is
 * written (what the job table, the trigger and the callback accept).
 *
 * Errors: AX_ERR_INVALID with the reason in errbuf and *ret_field the
 * member at fault as a JSON path ("schedule.expr", "retry.multiplier").
 */
#ifndef AX_JOB_JSON_H
#define AX_JOB_JSON_H

#include <jansson.h>

#include "ax/store_job.h"

/* A spec and the storage it points into (besides the JSON it was read
 * from, which must outlive it). */
typedef struct ax_job_spec_buf {
    ax_job_spec_t spec;
    int has_at;            /* schedule.kind once with "at" */
    char **command;        /* spec.command's array */
    char *retry_rules;     /* serialized retry.rules */
    char mult[32];         /* retry.multiplier as text */
    char field[64];        /* the member at fault (what *ret_field points to) */
} ax_job_spec_buf_t;
void ax_job_spec_buf_clear(ax_job_spec_buf_t *b);

/* Read o (a JSON object) into ret: every member optional for an update
 * (create = 0; then "name" and "enabled" are refused), "name" and
 * "command" required on create. Unknown members are refused. Values are
 * range-checked here; then call ax_job_spec_check. On failure *ret_field
 * points into ret (ret->field), which stays valid until ret is reused. */
int ax_job_spec_from_json(const json_t *o, int create, ax_job_spec_buf_t *ret,
                          const char **ret_field, char *errbuf, size_t errlen);

/* The checks of a spec's values that need more than ranges: the job name,
 * time zone, cron expression with its DST policy, group name, handler and
 * command, retry rules (as ax-callback parses them). */
int ax_job_spec_check(const ax_job_spec_t *s, int create, const char **ret_field, char *errbuf,
                      size_t errlen);

/* 1 if s is a job name: 1-128 of A-Z a-z 0-9 . _ - starting with a letter or digit. */
int ax_job_name_valid(const char *s);

/* 1 if s is an executor group: 1-64 of A-Z a-z 0-9 _ - starting with a letter or digit (what
 * the job table's CHECK allows and a Kafka topic name can carry), not a lane's reserved name
 * (p0-p9, ax_conf_group_reserved). */
int ax_job_group_valid(const char *s);

/* 0 if cron parses as a cron expression in zone tz with the DST policies
 * named gap and overlap (ax/fire.h's names; NULL or unknown: the defaults),
 * as the trigger will read it; else -1 with the parser's reason in err. */
int ax_job_cron_valid(const char *cron, const char *tz, const char *gap, const char *overlap,
                      char *err, size_t errlen);

#endif
