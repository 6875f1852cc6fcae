/*
 * ax-executor internals shared by its files:
 *   main.c       consumer group (the lane topics of every group served), the
 *                run list and in-order offset commits, claims, pools
 *                (admission, per-lane queues), the pause state of every
 *                partition (full pools, lane preference, watermarks,
 *                shutdown), results, shutdown
 *   h_command.c  the command handler (posix_spawn, process group, timeout)
 *   h_http.c     the http handler (libevent HTTP client)
 *   h_plugin.c   the plugin handler (dlopen'ed ax/plugin.h API, worker threads)
 *
 * Handlers run on the executor's libevent loop thread, except plugin code,
 * which runs on the plugin handler's own worker threads; every handler
 * reports back on the loop thread through run_done().
 */
#ifndef AX_EXECUTOR_H
#define AX_EXECUTOR_H

#include <stddef.h>
#include <stdint.h>

#include "ax/codec.h"
#include "ax/lane.h"
#include "ax/service.h"

typedef struct executor executor_t;
typedef struct run run_t;
typedef struct pool pool_t;

typedef enum {
    RUN_NEW,       /* consumed, decoded, not claimed yet */
    RUN_CLAIMED,   /* LOCKED by us, waiting in its pool's queue */
    RUN_RUNNING,   /* handler started */
    RUN_REPORTING, /* result produced, waiting for Kafka's ack */
    RUN_DONE,      /* offset may be committed */
} run_state_t;

/* What a handler reports. Strings are copied by run_done(). */
typedef struct handler_result {
    ax_outcome_t outcome;
    const char *error_class; /* "exit", "timeout", "http", ...; NULL on success */
    char error[512];         /* human-readable reason; "" on success */
    int exit_code;           /* command exit status or HTTP status */
    int exit_code_set;
    int retryable;           /* the handler's opinion */
    const char *output;      /* captured output excerpt (may be NULL) */
    size_t output_len;
} handler_result_t;

typedef struct handler_ops {
    const char *kind; /* the dispatch's handler_kind: "command", "http", "plugin" */
    /* Once at start-up / shutdown (may be NULL). */
    int (*init)(executor_t *ex);
    void (*fini)(executor_t *ex);
    /* Start r (r->d holds the dispatch: command argv, payload, timeout...).
     * Returns 0 when started: run_done(r, ...) follows later, on the loop
     * thread, exactly once — never from inside start(). On failure returns
     * <0 with *res filled; the caller then reports it. */
    int (*start)(executor_t *ex, run_t *r, handler_result_t *res);
    /* Stop r early (timeout of the run, cancel request, lost lease,
     * shutdown deadline): run_done() still follows. `why` is an
     * error_class ("cancelled", "lease_lost", "shutdown"). */
    void (*cancel)(executor_t *ex, run_t *r, const char *why);
} handler_ops_t;

extern const handler_ops_t handler_command, handler_http, handler_plugin;

/* privilege.c: the root refusal and executor.run.user/group (before
 * ax_svc_init; <0 = exit 2, the line printed), and the identity commands
 * switch to (NULL: the executor's own). */
int privilege_check(int argc, char **argv);
const struct ax_cmd_creds *privilege_creds(void);
void privilege_log(void);
void privilege_fini(void);

struct run {
    run_t *next;             /* arrival order (the commit order) */
    run_t *qnext, *qprev;    /* its pool's queue of its lane */
    int lane;                /* priority lane 0..4 it arrived on (its dispatch topic) */
    int64_t queued_mono;     /* when it joined its pool's queue */
    executor_t *ex;
    rd_kafka_message_t *msg;
    ax_dispatch_t d;
    run_state_t state;
    pool_t *pool;
    const handler_ops_t *ops;
    void *hstate;            /* the handler's per-run state */
    const char *stop_why;    /* set when cancelled: overrides the outcome */
    ax_delivery_t dlv;       /* delivery of the result message */
    void *result_buf;
    size_t result_len;
    int64_t started_at_ms;
    int64_t started_mono;
    int64_t lease_ms;        /* renewed by this much each time */
    int shard_index, shard_total;
    int probe;               /* dynamic sharding: run as the size probe */
};

struct pool {
    char name[64];
    int64_t slots;        /* handlers running at once */
    int64_t queue;        /* claimed runs waiting beyond the slots */
    size_t running, waiting;
    size_t lane_waiting[AX_PRIORITIES]; /* `waiting` by lane */
    struct {
        run_t *head, *tail;           /* RUN_CLAIMED of one lane, in arrival order */
    } q[AX_PRIORITIES];
    int64_t lane_started[AX_PRIORITIES]; /* mono ms of the lane's last start here */
    int full;             /* partitions feeding it are paused */
};

/* The environment handed to commands (ours minus AXCONF_* and AX_*), plus
 * the per-run AX_* variables; free with free_child_env(). */
char **child_env(executor_t *ex, const run_t *r);
void free_child_env(executor_t *ex, char **env);

/* Report the end of a started run (loop thread only). */
void run_done(run_t *r, const handler_result_t *res);

struct executor {
    ax_svc_t svc;
    run_t *head, *tail;   /* every message not yet committed */
    size_t tracked, running;
    pool_t *pools;
    size_t npools;
    struct event *ev_retry, *ev_deadline, *ev_kick, *ev_lease, *ev_more, *ev_commit, *ev_start;
    int64_t queued_renewed_mono; /* on_lease: when queued claims were last renewed */
    unsigned claim_failures;
    char **child_env_base;
    size_t child_env_n;
    int64_t ran, duplicates, dead_lettered, lost_leases;
    void *http;           /* h_http.c state */
    void *plugin;         /* h_plugin.c state */
};

#endif
