/*
 * ax/store_api.h — the reads and writes ax-api (and axctl's instance
 * list/cancel/retry, job pause-all/resume-all) needs beyond the families
 * axctl already had: instances by filter with keyset pagination, one
 * instance with its attempts and state timeline, and pause-all/resume-all.
 *
 * Instance rows come as JSON text built by PostgreSQL, in the shapes of
 * docs/API.md (Instance, and one instance with attempts/timeline), so the
 * API and axctl print the same documents. Functions return 0 or an ax
 * error (ax/common.h): AX_ERR_NOTFOUND, AX_ERR_IO (retry later); the reason
 * in errbuf. Rows returned are the caller's (free with the _free).
 */
#ifndef AX_STORE_API_H
#define AX_STORE_API_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t;

/* NULL strings / has_ off / priority -1 / before_id 0 match everything. */
typedef struct ax_instance_query {
    const char *job, *state, *outcome, *group, *trace_id, *idempotency_key;
    int priority;
    int has_since, has_until; /* scheduled_at in [since, until) */
    int64_t since_ms, until_ms;
    int64_t before_id; /* keyset: ids below this one */
    int64_t limit;
    /* the deployment (topic.prefix) whose instances are listed: the
     * caller's own by default (ax-api, axctl); NULL: every deployment's */
    const char *deployment;
} ax_instance_query_t;

typedef struct ax_json_row {
    int64_t id;
    char *json;
} ax_json_row_t;
void ax_json_rows_free(ax_json_row_t *rows, size_t n);

/* Instances matching q, newest (highest id) first, at most q->limit. */
int ax_store_api_instances(ax_pg_t *pg, const ax_instance_query_t *q, ax_json_row_t **ret_rows,
                           size_t *ret_n, char *errbuf, size_t errlen);

/* Instance id with output, payload_base64, command, attempts and timeline
 * (*ret_json malloc'd); AX_ERR_NOTFOUND if none. */
int ax_store_api_instance(ax_pg_t *pg, int64_t id, char **ret_json, char *errbuf,
                          size_t errlen);

/* The overview of the last `minutes` (1..1440) whole minutes of a
 * deployment, as JSON text (*ret_json malloc'd): {"now", "minutes":[{"minute",
 * "finished":{OUTCOME:n}, "lateness_p50_ms", "lateness_p99_ms"}...],
 * "backlog":{"count","oldest_scheduled_at","oldest_age_ms"}} (one statement,
 * api.stats). */
int ax_store_api_stats(ax_pg_t *pg, const char *deployment, int minutes, char **ret_json,
                       char *errbuf, size_t errlen);

/* A names list (malloc'd strings). */
typedef struct ax_names {
    char **v;
    size_t n;
} ax_names_t;
void ax_names_clear(ax_names_t *n);

/* In one statement: disable every enabled job and remember it in
 * job_paused; *ret the jobs paused now, by name. */
int ax_store_api_pause_all(ax_pg_t *pg, ax_names_t *ret, char *errbuf, size_t errlen);
/* Enable the jobs pause-all remembered that are still disabled, and
 * forget them all; *ret the jobs enabled, by name. */
int ax_store_api_resume_all(ax_pg_t *pg, ax_names_t *ret, char *errbuf, size_t errlen);

#endif
