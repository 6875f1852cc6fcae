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
 *   h_fleet.c     /api/v1/executors, lanes, leader, counters, whoami, stats
 *   h_dlq.c       /api/v1/dlq...
 *   pool.c        the handler threads (api.threads), each with its connection
 *   dlqw.c        the DLQ reader's worker thread (Kafka reads off the loop)
 *   metrics.c     ax-api's own metrics (docs/METRICS.md)
 *
 * Replies are always sent by the loop. A pooled request (req_t.pooled) is
 * deferred while a thread runs its handler, which leaves the reply in the
 * request (api_reply never touches the evhttp request off the loop); a
 * loop route's reply goes out when its handler calls api_reply. A DLQ
 * request is deferred too (req_t.deferred): its Kafka reads run on dlqw.c's
 * thread and the loop replies when they are done, so a slow or unreachable
 * Kafka never holds up the other requests.
 */
#ifndef AX_API_H
#define AX_API_H

#include <stdint.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "ax/apiauth.h"
#include "ax/dlq.h"
#include "ax/kafka.h"
#include "ax/service.h"
#include "ax/store_api.h"
#include "ax/tls.h"

typedef struct api {
    ax_svc_t svc;
    struct evhttp *http;
    ax_tls_t *tls;
    ax_api_tokens_t tokens;
    struct api_dlqw *dlqw; /* the dead-letter topic's reader, off the loop (dlqw.c) */
    struct api_metrics *metrics; /* metrics.c; NULL when metrics are off */
    struct api_pool *pool;       /* the handler threads (pool.c) */
    int64_t requests, mutations;
} api_t;

#define API_MAX_SEGS 8

typedef struct req req_t;
typedef void (*api_handler_fn)(req_t *rq);

/* One request while it is handled. */
struct req {
    api_t *api;
    ax_pg_t *pg;                 /* the connection its handler uses (PG(rq)) */
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
    char who[64];                /* the token's name ("" before auth) */
    const char *route;           /* the route table's pattern, once matched */
    int64_t start_us;            /* arrival (api_clock_us) */
    int replied;
    int deferred;                /* the handler replies later, then api_req_free */
    /* a pooled request (pool.c): its handler runs on a thread, which
     * leaves the reply here for the loop to send (api_send) */
    int pooled;
    api_handler_fn fn;
    int reply_status;
    char *reply_text;            /* the JSON text and its newline, or NULL */
    req_t *qnext;
};

/* The end of a deferred request's life (after its reply). */
void api_req_free(req_t *rq);
/* On the loop: send the reply api_reply left in rq (once). */
void api_send(req_t *rq);

/* http.c: replies (each once per request; the first one wins). */
void api_reply(req_t *rq, int status, json_t *obj); /* steals obj */
void api_error(req_t *rq, int status, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The store's or ops' error rc (errbuf in err) as its status: NOTFOUND 404,
 * CONFLICT 409, INVALID 400 (field), IO 503, else 500. */
void api_fail(req_t *rq, int rc, const char *field, const char *err);
/* A list page of the store's JSON rows as they are (not parsed): the first
 * limit of rows[0..n), next_cursor the last one's id when n > limit. */
void api_page_rows(req_t *rq, const ax_json_row_t *rows, size_t n, size_t limit);
/* status with text (a JSON text the store built, freed here) as it is;
 * 500 if it is empty or not UTF-8. */
void api_reply_json_text(req_t *rq, int status, char *text);
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
/* 200 with the JSON text a store function built (freed here), else the
 * store's error (rc < 0) or 500 naming `what` if the text does not parse. */
void api_reply_text(req_t *rq, int rc, char *text, const char *err, const char *what);

/* dlqw.c: the DLQ reader's thread. A job is a request's Kafka reads;
 * finish runs on the loop when they are done (it replies and frees). */
typedef enum { API_DLQ_LIST, API_DLQ_FETCH } api_dlq_op_t;
typedef struct api_dlq_job api_dlq_job_t;
struct api_dlq_job {
    api_dlq_job_t *next;
    req_t *rq;
    api_dlq_op_t op;
    void (*finish)(api_dlq_job_t *j);
    int64_t queued_ms;
    /* in: list */
    int64_t limit, since;
    char reason[256];
    /* in: fetch */
    int32_t part;
    int64_t off;
    /* out */
    int rc;
    char err[512];
    ax_dlq_t *dlq;               /* the reader (its topic names), when rc is 0 */
    ax_dlq_rec_t *recs;
    size_t nrecs;
    rd_kafka_message_t *msg;
    /* a replay's delivery (on the loop) */
    ax_delivery_t dv;
    ax_dlq_replay_t replay;
    api_dlq_job_t *fly_next;     /* the reader's replays awaiting delivery */
    int orphan;                  /* its request went with the server (stop) */
};
typedef struct api_dlqw api_dlqw_t;
api_dlqw_t *api_dlqw_start(api_t *a, char *err, size_t len);
void api_dlqw_stop(api_dlqw_t *w);
/* Queue j; -1 if the queue is full (j still the caller's). */
int api_dlqw_submit(api_dlqw_t *w, api_dlq_job_t *j);
void api_dlq_job_free(api_dlq_job_t *j); /* and its request (api_req_free) */
/* On the loop: j awaits its delivery report (flying) / has it (landed).
 * At stop, jobs still flying lose their request (orphan): their delivery
 * report, if it comes, only frees them. */
void api_dlqw_flying(api_dlqw_t *w, api_dlq_job_t *j);
void api_dlqw_landed(api_dlqw_t *w, api_dlq_job_t *j);

/* pool.c: api.threads threads, each with its PostgreSQL connection. submit
 * hands rq to them (rq is theirs until the loop sends its reply and frees
 * it); -1 if too many wait (rq still the caller's). */
typedef struct api_pool api_pool_t;
api_pool_t *api_pool_start(api_t *a, char *err, size_t len);
void api_pool_stop(api_pool_t *p);
int api_pool_submit(api_pool_t *p, req_t *rq);

/* metrics.c (docs/METRICS.md; each a no-op when metrics are off). */
typedef struct api_metrics api_metrics_t;
void api_metrics_init(api_t *a);
void api_metrics_reply(req_t *rq, int status); /* every reply, once */
void api_metrics_auth_failure(api_t *a, const char *reason); /* missing|invalid|scope */
void api_metrics_rate_limited(api_t *a);
int64_t api_clock_us(void);
/* http.c: the route table's i-th pattern (repeats included); NULL past the end. */
const char *api_route_pattern(size_t i);

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
void h_stats(req_t *rq);
void h_dlq_list(req_t *rq);
void h_dlq_get(req_t *rq);
void h_dlq_replay(req_t *rq);

#endif
