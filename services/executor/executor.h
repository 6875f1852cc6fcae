/*
 * ax-executor internals shared by its files. Calls go one way, from the
 * top of this list down (main.c may call anything; nothing calls main.c):
 *   main.c        wiring: configuration, the consume loop (decode, admit,
 *                 claim, start, commit), SIGHUP, shutdown
 *   lease.c       lease renewals, cancel polls, heartbeat and watermarks
 *   fence.c       each running instance's local lease deadline: handlers
 *                 stopped before their lease can expire (a thread of its
 *                 own kills commands' process groups)
 *   claim.c       claims of consumed runs (ax_claim_decide over the store),
 *                 handing back unstarted claims at shutdown
 *   pools.c       pools and routes (executor.pools / pool.routes), admission
 *                 into a pool and start waves (ax/pool.h decides the order)
 *   h_command.c   the command handler (posix_spawn, process group, timeout)
 *   h_http.c      the http handler (libevent HTTP client)
 *   h_plugin.c    the plugin handler (dlopen'ed ax/plugin.h API, worker threads)
 *                 (handlers are reached through handler_ops_t from pools.c,
 *                 lease.c and main.c, and report through run_done)
 *   report.c      a finished run's Attempt (run_done), its delivery, the
 *                 in-order offset commits; the environment of commands
 *   partitions.c  the lane topics and the pause state of every partition
 *                 (full pools, lane preference, watermarks, shutdown)
 *   privilege.c   the root refusal and the identity commands run as
 * Every piece of state is in executor_t (no file-level globals); the
 * service's callbacks get it as their argument or as the ax_svc_t it
 * starts with.
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
#include "ax/pool.h"
#include "ax/service.h"
#include "ax/spawn.h"

typedef struct executor executor_t;
typedef struct run run_t;
typedef struct pool pool_t;
typedef struct fence fence_t;

typedef enum {
    RUN_NEW,       /* consumed, decoded, not claimed yet */
    RUN_CLAIMED,   /* LOCKED by us, waiting in its pool's queue */
    RUN_RUNNING,   /* handler started */
    RUN_REPORTING, /* result produced, waiting for Kafka's ack */
    RUN_DONE,      /* offset may be committed */
    RUN_NSTATES
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
     * Returns 0 when started (a handler with flush may begin it only at
     * the wave's flush): run_done(r, ...) follows later, on the loop
     * thread, exactly once — never from inside start() or flush(). On failure returns
     * <0 with *res filled; the caller then reports it. */
    int (*start)(executor_t *ex, run_t *r, handler_result_t *res);
    /* Stop r early (timeout of the run, cancel request, lost lease,
     * shutdown deadline): run_done() still follows. `why` is an
     * error_class ("cancelled", "lease_lost", "shutdown"). */
    void (*cancel)(executor_t *ex, run_t *r, const char *why);
    /* After a start wave (may be NULL): hand what start() queued to the
     * handler's threads at once (one lock, the wake-ups decided per wave). */
    void (*flush)(executor_t *ex);
} handler_ops_t;

extern const handler_ops_t handler_command, handler_http, handler_plugin;

/* privilege.c: the root refusal and executor.run.user/group (before
 * ax_svc_init; <0 = exit 2, the line printed), and the identity commands
 * switch to (NULL: the executor's own). */
typedef struct privilege {
    ax_cmd_creds_t creds;
    int on; /* 1: children switch to creds */
} privilege_t;
int privilege_check(executor_t *ex, int argc, char **argv);
const ax_cmd_creds_t *privilege_creds(const executor_t *ex);
void privilege_log(const executor_t *ex);
void privilege_fini(executor_t *ex);

/* Cancel requests are looked for this often (on_cancel_poll), among the
 * runs claimed or started at least this long ago. */
#define CANCEL_POLL_MS 200

struct run {
    run_t *next;             /* arrival order (the commit order) */
    ax_pool_item_t qi;       /* its place in its pool's queue; qi.lane: the priority
                              * lane 0..4 it arrived on (its dispatch topic) */
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
    int64_t fence_mono;      /* fence.c: stopped at this CLOCK_MONOTONIC ms (0: none) */
    size_t fence_slot;       /* fence.c: its entry in the fence thread's table + 1 */
    int shard_index, shard_total;
    int probe;               /* dynamic sharding: run as the size probe */
    int topic_ix;            /* its topic's index in ex->ln.topics (-1: none) */
};

#define RUN_OF_ITEM(it) ((run_t *)(void *)((char *)(it) - offsetof(run_t, qi)))

/* A pool: its counts and per-lane queues of RUN_CLAIMED runs (ax/pool.h:
 * slots, queue, running, waiting...), with what the executor adds. */
struct pool {
    char name[64];
    ax_pool_t core;
    int full; /* partitions feeding it are paused */
};

typedef struct route {
    char job[256];
    pool_t *pool;
} route_t;

typedef struct lane_topic {
    char name[300];
    int lane;
} lane_topic_t;

typedef struct part part_t; /* partitions.c */

/* partitions.c's state: which partition is fetched. */
typedef struct lanes {
    lane_topic_t *topics; /* every lane topic subscribed */
    size_t ntopics;
    part_t *parts;
    size_t nparts, cap;
    size_t for_pool;                             /* parts with for_pool set */
    rd_kafka_topic_partition_list_t *assignment; /* as last read */
    unsigned mask;                               /* lanes fetched from (ax_lane_serve) */
    int64_t backlog[AX_PRIORITIES]; /* last sample: broker + consumed, not started */
    int64_t served[AX_PRIORITIES];  /* mono ms a lane was last fetched from */
    int64_t entered[AX_PRIORITIES]; /* mono ms a lane last entered the mask */
    int64_t round_ms;               /* fetch.wait.max.ms + a tick */
    struct event *ev_tick;
} lanes_t;

/* The environment handed to commands (ours minus AXCONF_* and AX_*), plus
 * the per-run AX_* variables; free with free_child_env(). */
char **child_env(executor_t *ex, const run_t *r);
void free_child_env(executor_t *ex, char **env);

/* ---- report.c ---- */

/* Report the end of a started run (loop thread only). */
void run_done(run_t *r, const handler_result_t *res);
/* Commit every partition up to its first unfinished message. */
void commit_ready(executor_t *ex);
/* The hot path's commit_ready: at once while stopping, else by the
 * executor.commit.interval.ms timer (one OffsetCommit per interval, not one
 * per delivery report batch or consumed batch). */
void commit_soon(executor_t *ex);
/* Free every run still tracked (at exit, before the Kafka handles go). */
void runs_free_all(executor_t *ex);

struct executor {
    ax_svc_t svc; /* first: the service's callbacks cast it back */
    run_t *head, *tail;   /* every message not yet committed */
    size_t tracked, running;
    size_t nstate[RUN_NSTATES]; /* tracked runs per state (run_set_state) */
    run_t *first_new;     /* no run before it is RUN_NEW (claim_new starts there) */
    pool_t *pools;
    size_t npools;
    struct event *ev_retry, *ev_deadline, *ev_kick, *ev_lease, *ev_more, *ev_commit, *ev_start;
    int64_t queued_renewed_mono; /* on_lease: when queued claims were last renewed */
    unsigned claim_failures;
    char **child_env_base;
    size_t child_env_n;
    int64_t ran, duplicates, dead_lettered, lost_leases;
    int64_t primers; /* the trigger's partition primers skipped (dispatch.prime) */
    int64_t part_seq;     /* Attempt records produced (their chunks: report.c) */
    void *http;           /* h_http.c state */
    void *plugin;         /* h_plugin.c state */
    route_t *routes;      /* executor.pool.routes */
    size_t nroutes;
    lanes_t ln;           /* partitions.c */
    privilege_t priv;     /* privilege.c */
    struct {
        int fetching;          /* 0 while above a watermark */
        int64_t lease_ok_mono; /* last successful lease renewal */
        uint64_t cpu_busy, cpu_total;
        double cpu_pct, mem_pct;
        int beaten;            /* a heartbeat of this process was recorded */
    } load;               /* lease.c */
    struct event *ev_cancel_poll, *ev_heart;
    struct xmetrics *metrics; /* metrics.c; NULL when metrics are off */
    fence_t *fence;           /* fence.c */
};

/* ---- partitions.c ---- */

/* executor.groups -> ex->ln.topics (five lane topics per group); <0 with
 * the reason naming the key. */
int lane_topics(executor_t *ex, const ax_conf_t *c, char *err, size_t errlen);
int lane_of_topic(const executor_t *ex, const char *topic);
/* The index of a lane topic in ex->ln.topics, or -1. */
int topic_index(const executor_t *ex, const char *topic);
/* Bring every assigned partition to the state it should be in. */
void apply_pauses(executor_t *ex);
/* Pause the partition of m: it fed pool p, which is full for its lane. */
void pause_for_pool(executor_t *ex, pool_t *p, const rd_kafka_message_t *m);
/* Resume what full pools paused once they drained (ax_pool_drained). */
void maybe_resume(executor_t *ex);
/* Lane preference; with refresh the assignment is read again. */
void lanes_tick(executor_t *ex, int refresh);
void on_lane_tick(evutil_socket_t fd, short what, void *arg);
void lanes_fini(executor_t *ex);

/* ---- pools.c ---- */

int pools_configure(executor_t *ex, const ax_conf_t *c, char *err, size_t errlen);
pool_t *pool_for(executor_t *ex, const ax_dispatch_t *d);
void pools_log(const executor_t *ex);
void pools_fini(executor_t *ex);
/* Every state change of a tracked run goes through here (the counts of
 * ex->nstate let the loop skip walks that would find nothing). */
void run_set_state(run_t *r, run_state_t state);
/* A consumed run joins r->pool as waiting (RUN_NEW); pauses its partition
 * when that fills the pool. */
void run_admit(executor_t *ex, run_t *r);
/* A claimed run joins its pool's queue (RUN_CLAIMED). */
void run_queue(run_t *r, int64_t lease_ms);
/* A waiting run (RUN_NEW or RUN_CLAIMED) leaves its pool's queue and
 * count, as `state`. */
void run_unqueue(run_t *r, run_state_t state);
/* A run that will not start: RUN_DONE, out of its pool's count. */
void run_drop(run_t *r);
/* A waiting run counted as running from now on (before its handler starts
 * or is reported right away). */
void run_begin(executor_t *ex, run_t *r);
/* Mark RUNNING and start as many waiting runs as the pools have slots. */
void start_ready(executor_t *ex);

/* ---- claim.c ---- */

/* Claim every RUN_NEW run; <0 when some stay RUN_NEW (retry later). */
int claim_new(executor_t *ex);
/* Shutdown: claimed runs not started go back to SCHEDULED (RUN_NEW). */
void release_waiting(executor_t *ex);

/* ---- lease.c ---- */

void stop_run(executor_t *ex, run_t *r, const char *why);
void on_lease(evutil_socket_t fd, short what, void *arg);
void on_cancel_poll(evutil_socket_t fd, short what, void *arg);
void heartbeat(executor_t *ex, const char *state);
void on_heartbeat(evutil_socket_t fd, short what, void *arg);

/* ---- fence.c ---- */

/* The exit status of an executor whose plugin was still inside run() at its
 * exit deadline (fence.c; docs/OPERATIONS.md). */
#define EXECUTOR_EXIT_FENCED 3

/* The local deadline of a lease of lease_ms written by a statement sent at
 * CLOCK_MONOTONIC ms mono0: 95% of it minus executor.fence.margin.ms (m,
 * at most half the lease). */
int64_t fence_deadline(const executor_t *ex, int64_t mono0, int64_t lease_ms);
/* The exit deadline of a plugin still inside run(): the lease minus m/2. */
int64_t fence_exit_deadline(const executor_t *ex, int64_t mono0, int64_t lease_ms);
/* A running r's deadlines, after its start or a renewal of its lease of
 * lease_ms written by a statement sent at mono0. */
void fence_set(executor_t *ex, run_t *r, int64_t mono0, int64_t lease_ms);
/* r's handler reported (run_done). */
void fence_clear(executor_t *ex, run_t *r);
/* Stop (stop_run "lease_lost") every running handler past its deadline. */
void fence_check(executor_t *ex);
int fence_start(executor_t *ex);
int64_t fence_killed(const executor_t *ex);
void fence_fini(executor_t *ex);

/* h_command.c: the process group of r's command (0: none). */
pid_t handler_command_pid(const run_t *r);
/* h_http.c: the socket of r's request (-1: none yet). */
int handler_http_fd(const run_t *r);
/* h_plugin.c, loop thread: r's run() gets its stop flag raised at stop_at
 * (CLOCK_MONOTONIC ms) and must have returned by exit_at. 1 when the fence
 * thread already raised it (a renewal came back after the deadline). */
int handler_plugin_fence_set(const run_t *r, int64_t stop_at, int64_t exit_at);
/* h_plugin.c, the fence thread: raise the stop flag of every run() past its
 * stop_at; *overdue = the instance of one still inside run() past its
 * exit_at (else untouched). Returns when to look again. */
int64_t handler_plugin_fence(void *plugin_handler, int64_t now, int64_t *overdue);

/* ---- metrics.c (docs/METRICS.md; each a no-op when metrics are off) ---- */

void xm_init(executor_t *ex); /* after pools_configure: pools are labels */
void xm_fini(executor_t *ex);
void xm_claim(executor_t *ex, int verdict);       /* an ax_claim_t */
void xm_started(executor_t *ex, const run_t *r);  /* in run_begin */
void xm_done(executor_t *ex, const run_t *r, int outcome); /* in run_done, before the count */

#endif
