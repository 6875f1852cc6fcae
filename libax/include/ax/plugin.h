/*
 * ax/plugin.h — the plugin API: job code loaded into ax-executor as a shared
 * object, for work too small or too frequent for a process per run.
 *
 * This header is all a plugin needs: it depends on nothing else of ax, and
 * a plugin links nothing of ax either (the host reaches the plugin through
 * its descriptor, the plugin reaches the host through function pointers in
 * the job). Build it as a shared object, e.g.
 *     cc -shared -fPIC -o my-plugin.so my-plugin.c -I<ax>/libax/include
 * and export one symbol:
 *     const ax_plugin_t *ax_plugin_entry(void);
 *
 * A job of handler kind "plugin" names it by its command:
 *     {"/abs/path/my-plugin.so", arg1, arg2, ...}
 * The path must be absolute. ax-executor loads each path once
 * (dlopen RTLD_NOW | RTLD_LOCAL) and keeps it loaded until it stops.
 *
 * Instances: init() is called once per distinct (path, args) combination,
 * lazily, on a worker thread, before the first run() that uses it; the state
 * it returns is shared by every run with the same path and args, on many
 * threads at once. Arguments are therefore configuration, not per-run data:
 * per-run data is the payload. A failed init() is not remembered: the next
 * run with the same args calls init() again. fini() is called once per
 * successful init() when the executor stops, after every run returned.
 *
 * Threads: run() is called on the executor's plugin worker threads, many at
 * once (also for the same state), so it must be thread-safe. It may block
 * (I/O, sleeping), but it holds a worker for as long as it runs, and the
 * executor cannot interrupt it: a long run() must poll
 * ax_plugin_should_stop() (at least every few hundred ms) and return soon
 * after it says 1. When a run times out, the executor reports TIMEOUT at
 * the deadline without waiting; whatever run() returns later is dropped,
 * but the worker stays busy until it returns. A run() that never returns
 * holds a worker, delays the executor's shutdown, and once its lease could
 * expire makes the executor exit (fencing, below).
 *
 * Fencing (docs/ARCHITECTURE.md, "Fencing under partitions"): when the
 * executor cannot renew a run's lease (PostgreSQL unreachable), a thread
 * of its own makes should_stop() say 1 at the run's fence deadline,
 * R + 0.95 L - m (R: when its last lease renewal was sent, L the lease, m
 * executor.fence.margin.ms, at most L/2), even while the executor's event
 * loop waits for PostgreSQL. run() must return within m/2 + 0.05 L of that
 * (750 ms with L = 5 s, m = 1 s): a run() still going at R + L - m/2,
 * reported or not, makes the executor kill its commands and exit with
 * status 3 (its supervisor restarts it), since its instance may run
 * elsewhere once the lease expired and nothing else can stop a thread. A
 * plugin that polls should_stop() every few ms never meets this.
 *
 * Every pointer in the job (and the job itself) is valid only during run().
 * Do not keep them, and call the host functions only from inside run(), on
 * the thread that run() was called on.
 *
 * Versioning: api_version must equal the host's AX_PLUGIN_API_VERSION; a
 * plugin built against another version is refused (the run FAILS, not
 * retryable). Fields are only ever added at the end of these structs, with
 * a version bump.
 */
#ifndef AX_PLUGIN_H
#define AX_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#define AX_PLUGIN_API_VERSION 1
#define AX_PLUGIN_ENTRY_SYMBOL "ax_plugin_entry"

typedef struct ax_plugin_job ax_plugin_job_t;

typedef enum ax_plugin_status {
    AX_PLUGIN_OK = 0,      /* the run succeeded */
    AX_PLUGIN_FAILED = 1,  /* the run failed; see retryable */
} ax_plugin_status_t;

/* What run() reports. The host zeroes it before the call: status
 * AX_PLUGIN_OK, retryable 0, message "", output NULL — so a plugin that only
 * returns reports success. */
typedef struct ax_plugin_result {
    ax_plugin_status_t status;
    int retryable;          /* AX_PLUGIN_FAILED only: may the run be retried? */
    char message[512];      /* why it failed (NUL-terminated); "" on success */
    /* Optional output text, shown with the instance's result. Allocate it
     * with malloc(); the host takes it over after run() returns and frees
     * it with free(). Invalid UTF-8 is replaced; beyond executor.output.cap
     * bytes it is cut. output_len 0 means strlen(output). */
    char *output;
    size_t output_len;
} ax_plugin_result_t;

/* Return values of idem_claim(). */
enum {
    AX_PLUGIN_IDEM_NEW = 1,    /* claimed now, or earlier by this same instance */
    AX_PLUGIN_IDEM_TAKEN = 0,  /* another instance claimed it: skip the effect */
    AX_PLUGIN_IDEM_ERROR = -1, /* could not ask (database down, bad key); err says why */
};

/* Levels of log(), as in ax's logs. */
enum {
    AX_PLUGIN_LOG_DEBUG = 0,
    AX_PLUGIN_LOG_INFO = 1,
    AX_PLUGIN_LOG_WARN = 2,
    AX_PLUGIN_LOG_ERROR = 3,
};

/* What the host offers to run(); reach it through the job (job->host) or
 * the inline wrappers below. */
typedef struct ax_plugin_host {
    /* Claim a business key for this instance, once per job (scope = the job
     * name, "" for inline instances), in the database (table
     * idempotency_claim). The instance that claimed a key gets
     * AX_PLUGIN_IDEM_NEW again on its retries; any other instance gets
     * AX_PLUGIN_IDEM_TAKEN. Keys are 1..512 bytes. On AX_PLUGIN_IDEM_ERROR a
     * reason is written to err (if non-NULL); the usual answer is to fail
     * the run as retryable. Blocks for a database round trip (each worker
     * thread has its own connection, opened on first use). */
    int (*idem_claim)(const ax_plugin_job_t *job, const char *key, char *err, size_t errlen);
    /* 1 once the run should end: its deadline passed, it was cancelled, its
     * lease could not be renewed (fencing), or the executor is stopping.
     * Cheap and thread-safe; poll it often. */
    int (*should_stop)(const ax_plugin_job_t *job);
    /* One line in the executor's log, tagged with the plugin name, the
     * instance id and the attempt. */
    void (*log)(const ax_plugin_job_t *job, int level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
} ax_plugin_host_t;

/* One run: one attempt of one instance. */
struct ax_plugin_job {
    int64_t instance_id;
    int32_t attempt;               /* 1 for the first run, 2 for the first retry, ... */
    const char *job;               /* the job name; "" for inline instances */
    const uint8_t *payload;        /* the instance's payload, as submitted (may hold any bytes) */
    size_t payload_len;
    const char *idempotency_key;   /* the instance's key from its submission; NULL if none */
    const char *trace_id;
    int32_t shard_index;           /* this run's shard: 0 .. shard_total-1 (0/1 for now) */
    int32_t shard_total;
    int64_t deadline_ms;           /* wall clock (ms since the epoch) when the run times out */
    const char *const *args;       /* the instance's args (the command after the path) */
    size_t nargs;
    const ax_plugin_host_t *host;  /* host functions; see above */
    void *host_data;               /* the host's; do not touch */
};

/* The plugin's descriptor, returned by ax_plugin_entry(); it must stay valid
 * while the plugin is loaded (a static const struct is the usual way). */
typedef struct ax_plugin {
    uint32_t api_version;  /* AX_PLUGIN_API_VERSION */
    const char *name;      /* for logs */
    /* May be NULL (then state is NULL). Set *state and return 0 on success.
     * On failure write a reason to err (errlen bytes) and return
     * AX_PLUGIN_INIT_RETRY if it is worth trying again later (a server
     * down), any other non-zero value if not (bad arguments): the run FAILS,
     * retryable or not. */
    int (*init)(const char *const *args, size_t nargs, void **state, char *err, size_t errlen);
    /* May be NULL. Called once per successful init(), when the executor stops. */
    void (*fini)(void *state);
    /* Required. Do the work of one run and fill *res; see the rules above. */
    void (*run)(void *state, const ax_plugin_job_t *job, ax_plugin_result_t *res);
} ax_plugin_t;

#define AX_PLUGIN_INIT_RETRY 1

typedef const ax_plugin_t *(*ax_plugin_entry_fn)(void);

/* Wrappers for the host functions. */
static inline int ax_plugin_idem_claim(const ax_plugin_job_t *job, const char *key, char *err,
                                       size_t errlen) {
    return job->host->idem_claim(job, key, err, errlen);
}

static inline int ax_plugin_should_stop(const ax_plugin_job_t *job) {
    return job->host->should_stop(job);
}

#define ax_plugin_log(job, level, ...) ((job)->host->log((job), (level), __VA_ARGS__))

#endif
