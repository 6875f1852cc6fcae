/*
 * api.h — ax-api: the REST API under /api/v1 (docs/API.md), /healthz,
 * /readyz and the console's static files, on libevent's HTTP server. The
 * process is stateless: every request reads or writes PostgreSQL through
 * the store on the service's one connection (requests are served one at a
 * time on the loop), submissions and cancellations go through Kafka as
 * axctl's do (libax ops.h). Parts:
 *   main.c        the command line, configuration, listening, TLS
 *   http.c        routing, auth (bearer tokens, scopes), rate and size limits,
 *                 query parameters, JSON replies and errors
 *   files.c       /healthz, /readyz, /api/v1/openapi.json, the console's files
 *   h_jobs.c      /api/v1/jobs...
 *   h_instances.c /api/v1/instances...
 *   h_flows.c     /api/v1/flows...
 *   h_fleet.c     /api/v1/executors, lanes, leader, counters, whoami
 *   h_dlq.c       /api/v1/dlq...
 */
#ifndef AX_API_H
#define AX_API_H

#include <stdint.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "ax/apiauth.h"
#include "ax/dlq.h"
#include "ax/service.h"
#include "ax/tls.h"

typedef struct api {
    ax_svc_t svc;
    struct evhttp *http;
    ax_tls_t *tls;
    ax_api_tokens_t tokens;
    ax_dlq_t *dlq; /* the dead-letter topic's reader, opened on first use */
    int64_t requests, mutations;
} api_t;

#define API_MAX_SEGS 8

/* One request while it is handled. */
typedef struct req {
    api_t *api;
    struct evhttp_request *r;
    enum evhttp_cmd_type method;
    const char *method_name;
    char *path;                  /* decoded */
    char *segs_buf;
    const char *seg[API_MAX_SEGS]; /* the path's segments after /api/v1 */
    int nseg;
    struct evkeyvalq query;
    ax_api_token_t *token;       /* who (NULL before auth) */
    json_t *body;                /* a mutation's JSON object, or NULL */
    int replied;
} req_t;

typedef void (*api_handler_fn)(req_t *rq);

/* http.c: replies (each once per request; the first one wins). */
void api_reply(req_t *rq, int status, json_t *obj); /* steals obj */
void api_error(req_t *rq, int status, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The store's or ops' error rc (errbuf in err) as its status: NOTFOUND 404,
 * CONFLICT 409, INVALID 400 (field), IO 503, else 500. */
void api_fail(req_t *rq, int rc, const char *field, const char *err);
/* A list page: {"items": items, "next_cursor": cursor or null}. */
void api_page(req_t *rq, json_t *items, const char *next_cursor);
/* A list page keyed by an integer: when more (the store had a row past the
 * page), next_cursor is last (the page's last item's key) in decimal. */
void api_page_int(req_t *rq, json_t *items, int more, int64_t last);

/* Query parameters: each replies 400 (naming the parameter) and returns
 * -1 on a bad value. q_only first: unknown parameters are refused. */
int q_only(req_t *rq, const char *const *allowed);
/* The body's members: 0, or -1 after replying 400 naming the first one not
 * in keys (NULL-terminated). */
int body_only(req_t *rq, const char *const *keys);
const char *q_get(req_t *rq, const char *name);
int q_int(req_t *rq, const char *name, int64_t lo, int64_t hi, int64_t def, int64_t *out);
int q_limit(req_t *rq, int64_t *out); /* limit: default 50, 1..500 */
int q_time(req_t *rq, const char *name, int *has, int64_t *ms);
int q_bool(req_t *rq, const char *name, int *out); /* -1 absent, else 0/1 */
/* A path segment as a positive id (400 naming `what` if it is not). */
int seg_id(req_t *rq, int k, const char *what, int64_t *out);

/* JSON helpers: NULL strings become null. */
json_t *js(const char *s);
json_t *jtime(int has, int64_t ms); /* ISO-8601 UTC, or null */
/* Parse PostgreSQL's JSON text (a store row); NULL if it does not parse. */
json_t *jparse(const char *text);

/* The dispatch (http.c) and the routes (each h_*.c): */
void api_on_request(struct evhttp_request *r, void *arg);
/* files.c */
int api_files_route(req_t *rq); /* 1 if handled (no auth needed) */

/* Route handlers */
void h_jobs_list(req_t *rq);
void h_jobs_create(req_t *rq);
void h_job_get(req_t *rq);
void h_job_update(req_t *rq);
void h_job_delete(req_t *rq);
void h_job_enable(req_t *rq);
void h_job_disable(req_t *rq);
void h_jobs_pause_all(req_t *rq);
void h_jobs_resume_all(req_t *rq);
void h_job_next(req_t *rq);
void h_job_history(req_t *rq);
void h_job_circuit(req_t *rq);
void h_job_circuit_reset(req_t *rq);
void h_instances_list(req_t *rq);
void h_instance_get(req_t *rq);
void h_instances_submit(req_t *rq);
void h_instance_cancel(req_t *rq);
void h_instance_retry(req_t *rq);
void h_flows_list(req_t *rq);
void h_flows_create(req_t *rq);
void h_flow_get(req_t *rq);
void h_flow_delete(req_t *rq);
void h_flow_run(req_t *rq);
void h_flow_runs(req_t *rq);
void h_flow_run_get(req_t *rq);
void h_executors(req_t *rq);
void h_lanes(req_t *rq);
void h_leader(req_t *rq);
void h_counters(req_t *rq);
void h_whoami(req_t *rq);
void h_dlq_list(req_t *rq);
void h_dlq_get(req_t *rq);
void h_dlq_replay(req_t *rq);

#endif
