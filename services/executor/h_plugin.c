/*
 * h_plugin.c — the plugin handler: runs the ax/plugin.h API of shared
 * objects on a pool of worker threads.
 *
 * A run's command is {"/abs/path/plugin.so", args...}. start() copies what
 * the plugin will see into a task and queues it; a worker takes it, loads
 * the .so if this is its first use (dlopen RTLD_NOW | RTLD_LOCAL, cached by
 * path for the life of the executor), calls init() once per distinct
 * (path, args) if not done yet, then run(). The finished task goes on the
 * done list and an eventfd wakes the loop thread, which calls run_done()
 * for every task on the list (the eventfd is written only when the list was
 * empty: one wake-up of the loop per batch of finished tasks, not per task;
 * a worker takes its next task in the same hold of the lock).
 *
 * Wake-ups: start() only links the task onto the loop thread's batch; the
 * wave's flush() queues the batch under one hold of the lock and wakes as
 * many idle workers as the queued work needs: one per task while the
 * plugins' run time (a moving average the workers keep) is unknown or at
 * least WAKE_SLICE_NS (busy workers not counted), else one per
 * WAKE_SLICE_NS of estimated work beyond the workers awake (a wave
 * of no-op tasks wakes one worker, not one per task: a futex wake, two
 * context switches and a futex wait per job were half the executor's CPU).
 * A worker that pops a task with more queued wakes another when the work
 * left needs it. So that an under-estimate (a slow task behind cheap ones,
 * its worker busy) cannot leave the queue waiting, the flush arms a timer:
 * when no worker has taken a task for STALL_MS and tasks wait, it wakes
 * one idle worker per queued task.
 *
 * Timeout: a timer on the loop thread fires at d.timeout_ms; the run is
 * reported TIMEOUT (retryable) right then, its should_stop() turns 1 and its
 * task is "detached": the result the plugin returns later is dropped. The
 * worker stays busy until the plugin returns — plugins must poll
 * should_stop() — and if that is past the run's exit deadline (below) the
 * fence thread exits the executor. Cancel works the same way, except that the plugin gets
 * executor.kill.grace.ms to return (its result is then reported, and main.c
 * turns it into the cancel outcome) before the run is reported without it.
 *
 * Workers: as many as the "plugin" pool's slots (executor.slots if there
 * is no such pool), fixed at start-up. The default pool has 256 slots: a
 * start wave is at most the free slots, and with 16 a no-op backlog
 * started ~15 per RUNNING statement, one executor capped near 7,500 jobs/s
 * by the round trips (BENCHMARKS.md, issue #13 "start waves"); idle
 * workers cost a stack's reserve and a few pages each, and the wake-ups
 * above keep a wave of cheap tasks on one or two of them.
 *
 * Threads: the loop thread owns every run_t, the timers and the live list;
 * workers touch only tasks they popped, the queue and done list (under mu),
 * the library/instance cache (under lib_mu, init under each instance's own
 * mutex) and the idem_claim connections (at most IDEM_CONNS, shared under
 * idem_mu, opened on first use). A task's `stop` flag is the only field both sides write
 * without a lock.
 *
 * Fencing (fence.c): each running task has a stop deadline and an exit
 * deadline (handler_plugin_fence_set, from the loop, under watch_mu). A
 * worker names the task whose run() it is inside (worker_t.cur, under
 * watch_mu: a task is not freed while a worker is inside its run()); the
 * fence thread (handler_plugin_fence) raises the stop flag of each past
 * its stop deadline, without the loop, and exits the process if one is
 * still inside run() past its exit deadline.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "ax/common.h"
#include "ax/idem.h"
#include "ax/log.h"
#include "ax/pg.h"
#include "ax/plugin.h"
#include "executor.h"

#define MAX_INSTANCES 256 /* distinct (path, args) combinations */
/* A worker per this much estimated queued work (see the top). */
#define WAKE_SLICE_NS 200000
/* A task's hand-off costs a worker about this on top of run(). */
#define TASK_OVERHEAD_NS 2000
/* The stall check: queued tasks that no worker took for this long. */
#define STALL_MS 1
/* idem_claim connections per executor, whatever the number of workers */
#define IDEM_CONNS 4

typedef struct plugin_h plugin_h_t;

typedef struct plib { /* one loaded .so */
    struct plib *next;
    char *path;
    void *dl;
    const ax_plugin_t *api;
} plib_t;

typedef struct pinst { /* one (path, args) combination */
    struct pinst *next;
    plib_t *lib;
    char **args; /* NULL-terminated */
    size_t nargs;
    pthread_mutex_t init_mu; /* held around init() */
    int inited;              /* under init_mu */
    void *state;
} pinst_t;

typedef struct worker {
    plugin_h_t *ph;
    pthread_t th;
    int started, joined;
    struct ptask *cur; /* whose run() it is inside (under watch_mu) */
} worker_t;

typedef struct ptask {
    struct ptask *next;         /* queue or done list (under mu) */
    struct ptask *lprev, *lnext; /* live list (loop thread) */
    plugin_h_t *ph;
    run_t *r;                   /* loop thread; NULL once reported */
    struct event *timer;        /* the deadline, then the cancel grace */
    atomic_int stop;            /* should_stop() */
    int cancelled;              /* loop thread */
    const char *why;            /* the cancel's error_class */
    int64_t timeout_ms;
    int64_t deadline_mono;
    int64_t reported_mono;      /* when it was reported without its result */
    int64_t fence_stop, fence_exit; /* CLOCK_MONOTONIC ms; 0: none (under watch_mu) */
    int64_t fenced_mono;        /* when the fence thread raised stop (under watch_mu) */
    size_t output_cap;          /* executor.output.cap when queued (SIGHUP swaps the
                                 * conf on the loop thread; workers read only this) */
    /* what the plugin sees; copies in the task's own block (start) */
    char **argv;                /* path, args..., NULL */
    size_t argc;
    char *job_name, *trace_id, *idem_key;
    uint8_t *payload;
    ax_plugin_job_t job;
    /* filled by the worker */
    worker_t *w;
    const char *plugin_name;    /* valid while the .so is loaded */
    ax_outcome_t outcome;
    const char *error_class;
    char error[512];
    int retryable;
    char *output;
    size_t output_len;
} ptask_t;

struct plugin_h {
    executor_t *ex;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ptask_t *qhead, *qtail;
    size_t qlen;   /* tasks queued (under mu) */
    ptask_t *done; /* finished, newest first */
    int nidle;     /* workers waiting on cv (under mu) */
    int waking;    /* signalled and not awake yet (under mu) */
    int64_t run_ns;  /* moving average of run() (under mu); -1: none yet */
    uint64_t popped; /* tasks taken by workers (under mu) */
    ptask_t *bhead, *btail; /* started, not queued yet (loop thread; flush) */
    uint64_t stall_popped;  /* popped when ev_stall was armed (loop thread) */
    struct event *ev_stall;
    int quit;
    atomic_int stopping;
    pthread_mutex_t watch_mu; /* worker_t.cur, ptask_t.fence_* */
    pthread_mutex_t lib_mu;
    plib_t *libs;
    pinst_t *insts;
    size_t ninsts;
    int efd;
    struct event *ev_done;
    worker_t *workers;
    size_t nworkers;
    ptask_t *live; /* every task not freed yet (loop thread) */
    /* idem_claim's connections, shared by the workers: at most IDEM_CONNS
     * open (a worker per plugin slot, 256 by default, must not mean a
     * connection each), opened on first use */
    pthread_mutex_t idem_mu;
    pthread_cond_t idem_cv;
    ax_pg_t *idem_free[IDEM_CONNS]; /* open and not in use (under idem_mu) */
    int idem_nfree, idem_nopen;     /* under idem_mu */
};

/* ---- host functions (worker threads) --------------------------------------- */

static int host_should_stop(const ax_plugin_job_t *job) {
    ptask_t *t = job->host_data;
    return atomic_load(&t->stop) || atomic_load(&t->ph->stopping) ||
           ax_mono_ms() >= t->deadline_mono;
}

/* A connection for idem_claim: a free one, a new one while fewer than
 * IDEM_CONNS are open, else wait for one (the claim is one statement).
 * NULL when it cannot be opened (e says why). */
static ax_pg_t *idem_take(plugin_h_t *ph, char *e, size_t elen) {
    pthread_mutex_lock(&ph->idem_mu);
    while (ph->idem_nfree == 0 && ph->idem_nopen >= IDEM_CONNS)
        pthread_cond_wait(&ph->idem_cv, &ph->idem_mu);
    if (ph->idem_nfree > 0) {
        ax_pg_t *pg = ph->idem_free[--ph->idem_nfree];
        pthread_mutex_unlock(&ph->idem_mu);
        return pg;
    }
    ph->idem_nopen++;
    pthread_mutex_unlock(&ph->idem_mu);
    ax_pg_t *pg = ax_pg_new(&ph->ex->svc.conf, "ax-executor-plugin", e, elen);
    if (!pg) {
        pthread_mutex_lock(&ph->idem_mu);
        ph->idem_nopen--;
        pthread_cond_signal(&ph->idem_cv);
        pthread_mutex_unlock(&ph->idem_mu);
    }
    return pg;
}

static void idem_give(plugin_h_t *ph, ax_pg_t *pg) {
    pthread_mutex_lock(&ph->idem_mu);
    ph->idem_free[ph->idem_nfree++] = pg;
    pthread_cond_signal(&ph->idem_cv);
    pthread_mutex_unlock(&ph->idem_mu);
}

static int host_idem_claim(const ax_plugin_job_t *job, const char *key, char *err,
                           size_t errlen) {
    ptask_t *t = job->host_data;
    char e[512] = "";
    int rc;
    ax_pg_t *pg = idem_take(t->ph, e, sizeof e);
    if (!pg) {
        ax_seterr(err, errlen, AX_PLUGIN_IDEM_ERROR, "idempotency claim: %s",
                  *e ? e : "out of memory");
        return AX_PLUGIN_IDEM_ERROR;
    }
    /* A dropped connection shows up as AX_ERR_IO once; reconnect and retry. */
    for (int i = 0; i < 2; i++) {
        rc = ax_pg_ensure(pg, e, sizeof e);
        if (rc == 0)
            rc = ax_idem_claim(pg, job->job, key, job->instance_id, NULL, e, sizeof e);
        if (rc != AX_ERR_IO)
            break;
    }
    idem_give(t->ph, pg);
    if (rc == AX_IDEM_NEW)
        return AX_PLUGIN_IDEM_NEW;
    if (rc == AX_IDEM_TAKEN)
        return AX_PLUGIN_IDEM_TAKEN;
    ax_seterr(err, errlen, AX_PLUGIN_IDEM_ERROR, "idempotency claim: %s", e);
    return AX_PLUGIN_IDEM_ERROR;
}

static void host_log(const ax_plugin_job_t *job, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void host_log(const ax_plugin_job_t *job, int level, const char *fmt, ...) {
    ptask_t *t = job->host_data;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level < AX_LOG_DEBUG)
        level = AX_LOG_DEBUG;
    if (level > AX_LOG_ERROR)
        level = AX_LOG_ERROR;
    ax_log((ax_log_level_t)level, "plugin %s: %s instance=%lld attempt=%d trace=%s",
           t->plugin_name ? t->plugin_name : "?", msg, (long long)job->instance_id,
           (int)job->attempt, job->trace_id);
}

static const ax_plugin_host_t host = {host_idem_claim, host_should_stop, host_log};

/* ---- loading (worker threads) ----------------------------------------------- */

static void lib_free(plib_t *l) {
    if (!l)
        return;
    if (l->dl)
        dlclose(l->dl);
    free(l->path);
    free(l);
}

/* Under lib_mu. */
static plib_t *lib_get(plugin_h_t *ph, const char *path, char *err, size_t errlen) {
    for (plib_t *l = ph->libs; l; l = l->next)
        if (strcmp(l->path, path) == 0)
            return l;
    plib_t *l = calloc(1, sizeof *l);
    if (!l || !(l->path = strdup(path))) {
        free(l);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!l->dl) {
        const char *de = dlerror();
        snprintf(err, errlen, "cannot load plugin: %s", de ? de : path);
        lib_free(l);
        return NULL;
    }
    dlerror();
    void *sym = dlsym(l->dl, AX_PLUGIN_ENTRY_SYMBOL);
    if (!sym) {
        snprintf(err, errlen, "%s is not an ax plugin: it has no symbol %s", path,
                 AX_PLUGIN_ENTRY_SYMBOL);
        lib_free(l);
        return NULL;
    }
    ax_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    l->api = entry();
    if (!l->api) {
        snprintf(err, errlen, "%s: %s() returned NULL", path, AX_PLUGIN_ENTRY_SYMBOL);
        lib_free(l);
        return NULL;
    }
    if (l->api->api_version != AX_PLUGIN_API_VERSION) {
        snprintf(err, errlen,
                 "%s: plugin API version %u, but this executor supports version %u only", path,
                 (unsigned)l->api->api_version, (unsigned)AX_PLUGIN_API_VERSION);
        lib_free(l);
        return NULL;
    }
    if (!l->api->run) {
        snprintf(err, errlen, "%s: the plugin has no run function", path);
        lib_free(l);
        return NULL;
    }
    l->next = ph->libs;
    ph->libs = l;
    ax_info("plugin %s loaded from %s", l->api->name ? l->api->name : "?", path);
    return l;
}

static int args_equal(char *const *a, size_t na, char *const *b, size_t nb) {
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return 0;
    return 1;
}

static void inst_free(pinst_t *pi) {
    if (!pi)
        return;
    for (size_t i = 0; pi->args && i < pi->nargs; i++)
        free(pi->args[i]);
    free(pi->args);
    pthread_mutex_destroy(&pi->init_mu);
    free(pi);
}

/* The instance for the task's (path, args), created if new. */
static pinst_t *inst_get(plugin_h_t *ph, ptask_t *t, char *err, size_t errlen) {
    char *const *args = t->argv + 1;
    size_t nargs = t->argc - 1;
    pinst_t *pi = NULL;
    pthread_mutex_lock(&ph->lib_mu);
    plib_t *l = lib_get(ph, t->argv[0], err, errlen);
    if (!l)
        goto out;
    for (pi = ph->insts; pi; pi = pi->next)
        if (pi->lib == l && args_equal(pi->args, pi->nargs, args, nargs))
            goto out;
    if (ph->ninsts >= MAX_INSTANCES) {
        snprintf(err, errlen,
                 "too many distinct plugin argument lists (%d); plugin arguments are "
                 "configuration, pass per-run data in the payload",
                 MAX_INSTANCES);
        goto out;
    }
    pi = calloc(1, sizeof *pi);
    if (!pi || !(pi->args = calloc(nargs + 1, sizeof *pi->args))) {
        free(pi);
        pi = NULL;
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    pthread_mutex_init(&pi->init_mu, NULL);
    pi->lib = l;
    for (; pi->nargs < nargs; pi->nargs++)
        if (!(pi->args[pi->nargs] = strdup(args[pi->nargs]))) {
            inst_free(pi);
            pi = NULL;
            snprintf(err, errlen, "out of memory");
            goto out;
        }
    pi->next = ph->insts;
    ph->insts = pi;
    ph->ninsts++;
out:
    pthread_mutex_unlock(&ph->lib_mu);
    return pi;
}

/* init() once; returns 0, or the plugin's failure code with err filled. */
static int inst_ready(pinst_t *pi, char *err, size_t errlen) {
    int rc = 0;
    pthread_mutex_lock(&pi->init_mu);
    if (!pi->inited) {
        const ax_plugin_t *api = pi->lib->api;
        void *state = NULL;
        err[0] = '\0';
        if (api->init)
            rc = api->init((const char *const *)pi->args, pi->nargs, &state, err, errlen);
        if (rc == 0) {
            pi->state = state;
            pi->inited = 1;
        } else if (!err[0]) {
            snprintf(err, errlen, "init failed (%d)", rc);
        }
    }
    pthread_mutex_unlock(&pi->init_mu);
    return rc;
}

/* ---- running (worker threads) ----------------------------------------------- */

static void task_fail(ptask_t *t, int retryable, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void task_fail(ptask_t *t, int retryable, const char *fmt, ...) {
    va_list ap;
    t->outcome = AX_OUTCOME_FAILED;
    t->error_class = "plugin";
    t->retryable = retryable;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
}

/* run(), with w->cur naming t meanwhile (the fence thread's view); <0 when
 * t's stop deadline passed before it started. */
static int run_fenced(worker_t *w, ptask_t *t, pinst_t *pi, ax_plugin_result_t *res) {
    plugin_h_t *ph = w->ph;
    pthread_mutex_lock(&ph->watch_mu);
    int late = t->fence_stop && ax_mono_ms() >= t->fence_stop;
    if (!late)
        w->cur = t;
    pthread_mutex_unlock(&ph->watch_mu);
    if (late)
        return -1;
    pi->lib->api->run(pi->state, &t->job, res);
    pthread_mutex_lock(&ph->watch_mu);
    w->cur = NULL;
    int64_t fenced = t->fenced_mono, exit_at = t->fence_exit;
    pthread_mutex_unlock(&ph->watch_mu);
    if (fenced) {
        int64_t now = ax_mono_ms();
        ax_log_inst(AX_LOG_WARN, t->job.instance_id, t->job_name, t->trace_id,
                    "instance %lld: plugin %s returned %lld ms after the fence raised its "
                    "stop flag, %lld ms before its exit deadline",
                    (long long)t->job.instance_id, t->plugin_name, (long long)(now - fenced),
                    (long long)(exit_at - now));
    }
    return 0;
}

int handler_plugin_fence_set(const run_t *r, int64_t stop_at, int64_t exit_at) {
    ptask_t *t = r->hstate;
    if (!t)
        return 0;
    plugin_h_t *ph = t->ph;
    pthread_mutex_lock(&ph->watch_mu);
    t->fence_stop = stop_at;
    t->fence_exit = exit_at;
    int fenced = t->fenced_mono != 0;
    pthread_mutex_unlock(&ph->watch_mu);
    return fenced;
}

int64_t handler_plugin_fence(void *plugin_handler, int64_t now, int64_t *overdue) {
    plugin_h_t *ph = plugin_handler;
    int64_t next = INT64_MAX;
    pthread_mutex_lock(&ph->watch_mu);
    for (size_t i = 0; i < ph->nworkers; i++) {
        ptask_t *t = ph->workers[i].cur;
        if (!t || !t->fence_stop)
            continue;
        if (t->fence_exit <= now) {
            *overdue = t->job.instance_id;
        } else if (t->fenced_mono) {
            next = t->fence_exit < next ? t->fence_exit : next;
        } else if (t->fence_stop <= now) {
            atomic_store(&t->stop, 1);
            t->fenced_mono = now;
            ax_log_inst(AX_LOG_ERROR, t->job.instance_id, t->job_name, t->trace_id,
                        "instance %lld: lease not renewed in time (%lld ms past the fence): "
                        "plugin %s told to stop (should_stop); it must return within %lld ms",
                        (long long)t->job.instance_id, (long long)(now - t->fence_stop),
                        t->plugin_name ? t->plugin_name : "?",
                        (long long)(t->fence_exit - now));
            next = t->fence_exit < next ? t->fence_exit : next;
        } else {
            next = t->fence_stop < next ? t->fence_stop : next;
        }
    }
    pthread_mutex_unlock(&ph->watch_mu);
    return next;
}

static void task_exec(worker_t *w, ptask_t *t) {
    char err[512];
    t->w = w;
    if (atomic_load(&t->stop)) {
        task_fail(t, 1, "stopped before a plugin worker was free");
        return;
    }
    pinst_t *pi = inst_get(w->ph, t, err, sizeof err);
    if (!pi) {
        task_fail(t, 0, "%s", err);
        return;
    }
    t->plugin_name = pi->lib->api->name ? pi->lib->api->name : "?";
    int rc = inst_ready(pi, err, sizeof err);
    if (rc != 0) {
        task_fail(t, rc == AX_PLUGIN_INIT_RETRY, "plugin %s: init: %s", t->plugin_name, err);
        return;
    }
    ax_plugin_result_t res;
    memset(&res, 0, sizeof res);
    if (run_fenced(w, t, pi, &res) < 0) {
        task_fail(t, 1, "lease not renewed in time: not started");
        return;
    }
    res.message[sizeof res.message - 1] = '\0';
    if (res.output) {
        size_t cap = t->output_cap;
        size_t n = res.output_len ? res.output_len : strlen(res.output);
        t->output = res.output; /* ours now */
        t->output_len = n < cap ? n : cap;
        ax_utf8_sanitize(t->output, t->output_len);
    }
    if (res.status == AX_PLUGIN_OK) {
        t->outcome = AX_OUTCOME_SUCCESS;
    } else {
        task_fail(t, res.retryable != 0, "%s",
                  res.message[0] ? res.message : "the plugin reported a failure");
        ax_utf8_sanitize(t->error, strlen(t->error));
    }
}

/* Under mu: how many more workers the queue needs woken (the top), at
 * most as many as are idle and not being woken; counted as waking. The
 * caller signals that many times (after unlocking, when it can). */
static int wakes_needed(plugin_h_t *ph) {
    if (!ph->qlen)
        return 0;
    int64_t n, idle = ph->nidle - ph->waking;
    if (ph->run_ns < 0 || ph->run_ns >= WAKE_SLICE_NS) {
        /* slow (or not known yet): a worker per queued task not already
         * being woken for; the busy ones are not coming back soon */
        n = (int64_t)ph->qlen - ph->waking;
    } else {
        /* cheap: the workers awake (busy or about to be) take the queue
         * soon; more only for more than WAKE_SLICE_NS each */
        int64_t want =
            ((int64_t)ph->qlen * (ph->run_ns + TASK_OVERHEAD_NS) + WAKE_SLICE_NS - 1) /
            WAKE_SLICE_NS;
        int awake = (int)ph->nworkers - ph->nidle + ph->waking;
        n = want - awake;
        if (awake == 0 && n < 1)
            n = 1;
    }
    if (n > idle)
        n = idle;
    if (n <= 0)
        return 0;
    ph->waking += (int)n;
    return (int)n;
}

static void signal_n(plugin_h_t *ph, int n) {
    for (int i = 0; i < n; i++)
        pthread_cond_signal(&ph->cv);
}

/* Under mu: the next queued task, or NULL when there is none. */
static ptask_t *pop_task(plugin_h_t *ph) {
    ptask_t *t = ph->qhead;
    if (!t)
        return NULL;
    ph->qhead = t->next;
    if (!ph->qhead)
        ph->qtail = NULL;
    ph->qlen--;
    ph->popped++;
    return t;
}

static void *worker_main(void *arg) {
    worker_t *w = arg;
    plugin_h_t *ph = w->ph;
    pthread_mutex_lock(&ph->mu);
    for (;;) {
        ptask_t *t;
        while (!(t = pop_task(ph)) && !ph->quit) {
            ph->nidle++;
            pthread_cond_wait(&ph->cv, &ph->mu);
            ph->nidle--;
            if (ph->waking > 0)
                ph->waking--;
        }
        if (!t)
            break;
        int more = wakes_needed(ph); /* the work left may need another worker */
        pthread_mutex_unlock(&ph->mu);
        signal_n(ph, more);

        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        task_exec(w, t);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        int64_t ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);

        /* Onto the done list, and the loop woken only if the list was
         * empty: its on_done takes the whole list, so one eventfd write per
         * batch of finished tasks, not per task. */
        pthread_mutex_lock(&ph->mu);
        ph->run_ns = ph->run_ns < 0 ? ns : ph->run_ns + (ns - ph->run_ns) / 8;
        int first = ph->done == NULL;
        t->next = ph->done;
        ph->done = t;
        if (first) {
            uint64_t one = 1;
            ssize_t n = write(ph->efd, &one, sizeof one);
            (void)n; /* EAGAIN only if the counter is near 2^64: already readable */
        }
    }
    pthread_mutex_unlock(&ph->mu);
    return NULL;
}

/* ---- loop thread ---------------------------------------------------------------- */

static void task_free(ptask_t *t) {
    plugin_h_t *ph = t->ph;
    if (t->lprev)
        t->lprev->lnext = t->lnext;
    else if (ph->live == t)
        ph->live = t->lnext;
    if (t->lnext)
        t->lnext->lprev = t->lprev;
    if (t->timer)
        event_free(t->timer);
    free(t->output);
    free(t); /* argv, strings and payload live in the same block (start) */
}

static void report(ptask_t *t, const handler_result_t *h) {
    run_t *r = t->r;
    t->r = NULL;
    r->hstate = NULL;
    run_done(r, h);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    ptask_t *t = arg;
    if (!t->r)
        return;
    handler_result_t h = {.retryable = 1};
    atomic_store(&t->stop, 1);
    if (t->cancelled) {
        h.outcome = AX_OUTCOME_FAILED;
        h.error_class = t->why ? t->why : "cancelled";
        snprintf(h.error, sizeof h.error,
                 "the plugin did not return within %lld ms of being stopped; its worker "
                 "stays busy until it does",
                 (long long)t->ph->ex->svc.conf.executor_kill_grace_ms);
    } else {
        h.outcome = AX_OUTCOME_TIMEOUT;
        h.error_class = "timeout";
        snprintf(h.error, sizeof h.error, "timed out after %lld ms", (long long)t->timeout_ms);
    }
    t->reported_mono = ax_mono_ms();
    report(t, &h);
}

static void on_done(evutil_socket_t fd, short what, void *arg) {
    plugin_h_t *ph = arg;
    uint64_t v;
    ssize_t n = read(ph->efd, &v, sizeof v);
    (void)n;
    pthread_mutex_lock(&ph->mu);
    ptask_t *list = ph->done;
    ph->done = NULL;
    pthread_mutex_unlock(&ph->mu);
    /* Oldest first. */
    ptask_t *rev = NULL;
    while (list) {
        ptask_t *next = list->next;
        list->next = rev;
        rev = list;
        list = next;
    }
    while (rev) {
        ptask_t *t = rev;
        rev = t->next;
        if (t->r && t->outcome != AX_OUTCOME_SUCCESS && !t->cancelled &&
            ax_mono_ms() >= t->deadline_mono) {
            /* It failed because should_stop() saw the deadline, just before
             * our timer fired: that is the timeout. */
            on_timer(-1, 0, t);
        } else if (t->r) {
            handler_result_t h = {
                .outcome = t->outcome,
                .error_class = t->error_class,
                .retryable = t->retryable,
                .output = t->output,
                .output_len = t->output_len,
            };
            snprintf(h.error, sizeof h.error, "%s", t->error);
            report(t, &h);
        } else if (t->reported_mono) {
            ax_info("plugin %s returned %lld ms after its run was reported (%s); result "
                    "dropped instance=%lld attempt=%d",
                    t->plugin_name ? t->plugin_name : "?",
                    (long long)(ax_mono_ms() - t->reported_mono),
                    t->error[0] ? t->error : "ok", (long long)t->job.instance_id,
                    (int)t->job.attempt);
        }
        task_free(t);
    }
}

static void fini(executor_t *ex);
static void on_stall(evutil_socket_t fd, short what, void *arg);

static int init(executor_t *ex) {
    if (ex->plugin)
        return 0;
    plugin_h_t *ph = calloc(1, sizeof *ph);
    if (!ph)
        return AX_ERR_NOMEM;
    ph->ex = ex;
    ph->efd = -1;
    ph->run_ns = -1;
    pthread_mutex_init(&ph->mu, NULL);
    pthread_cond_init(&ph->cv, NULL);
    pthread_mutex_init(&ph->lib_mu, NULL);
    pthread_mutex_init(&ph->watch_mu, NULL);
    pthread_mutex_init(&ph->idem_mu, NULL);
    pthread_cond_init(&ph->idem_cv, NULL);
    ex->plugin = ph;
    ph->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ph->efd < 0) {
        ax_error("plugin handler: eventfd: %s", strerror(errno));
        goto fail;
    }
    ph->ev_done = event_new(ex->svc.base, ph->efd, EV_READ | EV_PERSIST, on_done, ph);
    if (!ph->ev_done || event_add(ph->ev_done, NULL) < 0)
        goto fail;
    ph->ev_stall = evtimer_new(ex->svc.base, on_stall, ph);
    if (!ph->ev_stall)
        goto fail;
    /* As many workers as the "plugin" pool runs at once (executor.slots
     * without one). Plugin jobs routed to other pools share them. */
    ph->nworkers = (size_t)ex->svc.conf.executor_slots;
    for (size_t i = 0; i < ex->npools; i++)
        if (strcmp(ex->pools[i].name, "plugin") == 0 && ex->pools[i].core.slots > 0)
            ph->nworkers = (size_t)ex->pools[i].core.slots;
    if (ph->nworkers < 1)
        ph->nworkers = 1;
    ph->workers = calloc(ph->nworkers, sizeof *ph->workers);
    if (!ph->workers)
        goto fail;
    /* Workers never take signals: the loop thread handles them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (size_t i = 0; i < ph->nworkers; i++) {
        worker_t *w = &ph->workers[i];
        w->ph = ph;
        int rc = pthread_create(&w->th, NULL, worker_main, w);
        if (rc != 0) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            ax_error("plugin handler: cannot start worker thread: %s", strerror(rc));
            goto fail;
        }
        w->started = 1;
        pthread_setname_np(w->th, "ax-plugin"); /* tells them apart in perf and top */
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    ax_info("plugin handler: %zu worker thread(s)", ph->nworkers);
    return 0;
fail:
    fini(ex);
    return AX_ERR_IO;
}

static void fini(executor_t *ex) {
    plugin_h_t *ph = ex->plugin;
    if (!ph)
        return;
    atomic_store(&ph->stopping, 1);
    for (ptask_t *t = ph->live; t; t = t->lnext)
        atomic_store(&t->stop, 1);
    pthread_mutex_lock(&ph->mu);
    ph->quit = 1;
    pthread_cond_broadcast(&ph->cv);
    pthread_mutex_unlock(&ph->mu);

    /* Give plugins the shutdown grace to notice should_stop(). */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t grace = ex->svc.conf.executor_shutdown_grace_ms;
    until.tv_sec += grace / 1000;
    until.tv_nsec += (grace % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    size_t stuck = 0;
    for (size_t i = 0; ph->workers && i < ph->nworkers; i++) {
        worker_t *w = &ph->workers[i];
        if (!w->started)
            continue;
        if (pthread_timedjoin_np(w->th, NULL, &until) == 0)
            w->joined = 1;
        else
            stuck++;
    }
    if (ph->ev_done)
        event_free(ph->ev_done);
    ph->ev_done = NULL;
    if (ph->ev_stall)
        event_free(ph->ev_stall);
    ph->ev_stall = NULL;
    ex->plugin = NULL;
    if (stuck) {
        /* They may still read ph and the instances: leave it all be. */
        ax_warn("plugin handler: %zu worker thread(s) still inside a plugin at shutdown; "
                "leaving them",
                stuck);
        for (ptask_t *t = ph->live; t; t = t->lnext)
            if (t->r) {
                t->r->hstate = NULL;
                t->r = NULL;
            }
        return;
    }
    /* Every task is on the done list or still live; none is reported now. */
    while (ph->live) {
        if (ph->live->r)
            ph->live->r->hstate = NULL;
        task_free(ph->live);
    }
    for (pinst_t *pi = ph->insts, *next; pi; pi = next) {
        next = pi->next;
        if (pi->inited && pi->lib->api->fini)
            pi->lib->api->fini(pi->state);
        inst_free(pi);
    }
    for (plib_t *l = ph->libs, *next; l; l = next) {
        next = l->next;
        lib_free(l);
    }
    if (ph->efd >= 0)
        close(ph->efd);
    free(ph->workers);
    for (int i = 0; i < ph->idem_nfree; i++) /* every worker joined: all are free */
        ax_pg_destroy(ph->idem_free[i]);
    pthread_cond_destroy(&ph->idem_cv);
    pthread_mutex_destroy(&ph->idem_mu);
    pthread_mutex_destroy(&ph->lib_mu);
    pthread_mutex_destroy(&ph->watch_mu);
    pthread_cond_destroy(&ph->cv);
    pthread_mutex_destroy(&ph->mu);
    free(ph);
}

static int fail_now(handler_result_t *res, int retryable, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_now(handler_result_t *res, int retryable, const char *fmt, ...) {
    va_list ap;
    res->outcome = AX_OUTCOME_FAILED;
    res->error_class = "plugin";
    res->retryable = retryable;
    va_start(ap, fmt);
    vsnprintf(res->error, sizeof res->error, fmt, ap);
    va_end(ap);
    return -1;
}

/* Copies s ("" for NULL) to *at, moving it past the copy. */
static char *put_copy(char **at, const char *s) {
    size_t n = strlen(s ? s : "") + 1;
    char *c = memcpy(*at, s ? s : "", n);
    *at += n;
    return c;
}

static int start(executor_t *ex, run_t *r, handler_result_t *res) {
    const ax_dispatch_t *d = &r->d;
    if (!ex->plugin && init(ex) < 0)
        return fail_now(res, 1, "the plugin handler could not start its workers");
    plugin_h_t *ph = ex->plugin;
    if (d->command_len < 1 || !d->command || !d->command[0] || !d->command[0][0])
        return fail_now(res, 0, "a plugin job's command must be {\"/path/to/plugin.so\", args...}");
    if (d->command[0][0] != '/')
        return fail_now(res, 0, "plugin path '%s' is not absolute", d->command[0]);

    /* One block: the task, argv, the strings and the payload (one
     * allocation per run instead of one per string). */
    size_t size = sizeof(ptask_t) + (d->command_len + 1) * sizeof(char *) + d->payload_len + 1;
    for (size_t i = 0; i < d->command_len; i++)
        size += strlen(d->command[i] ? d->command[i] : "") + 1;
    size += strlen(d->job ? d->job : "") + 1 + strlen(d->trace_id ? d->trace_id : "") + 1;
    if (d->idempotency_key)
        size += strlen(d->idempotency_key) + 1;
    ptask_t *t = calloc(1, size);
    if (!t)
        return fail_now(res, 1, "out of memory");
    t->ph = ph;
    t->lnext = ph->live; /* linked first: task_free() unlinks */
    if (ph->live)
        ph->live->lprev = t;
    ph->live = t;
    t->argc = d->command_len;
    t->argv = (char **)(void *)(t + 1);
    char *at = (char *)(t->argv + t->argc + 1);
    for (size_t i = 0; i < t->argc; i++)
        t->argv[i] = put_copy(&at, d->command[i]);
    t->job_name = put_copy(&at, d->job);
    t->trace_id = put_copy(&at, d->trace_id);
    t->idem_key = d->idempotency_key ? put_copy(&at, d->idempotency_key) : NULL;
    t->payload = (uint8_t *)at;
    if (d->payload_len)
        memcpy(t->payload, d->payload, d->payload_len);
    t->payload[d->payload_len] = '\0'; /* not part of the payload; convenient for text */

    t->timeout_ms = d->timeout_ms > 0 ? d->timeout_ms : ex->svc.conf.executor_default_timeout_ms;
    t->deadline_mono = ax_mono_ms() + t->timeout_ms;
    t->output_cap = (size_t)ex->svc.conf.executor_output_cap;
    t->job = (ax_plugin_job_t){
        .instance_id = d->instance_id,
        .attempt = d->attempt,
        .job = t->job_name,
        .payload = t->payload,
        .payload_len = d->payload_len,
        .idempotency_key = t->idem_key,
        .trace_id = t->trace_id,
        .shard_index = 0,
        .shard_total = 1,
        .deadline_ms = ax_now_ms() + t->timeout_ms,
        .args = (const char *const *)(t->argv + 1),
        .nargs = t->argc - 1,
        .host = &host,
        .host_data = t,
    };
    t->timer = evtimer_new(ex->svc.base, on_timer, t);
    if (!t->timer)
        goto nomem;
    struct timeval tv = AX_TV_MS(t->timeout_ms);
    evtimer_add(t->timer, &tv);

    t->r = r;
    r->hstate = t;
    t->next = NULL; /* queued by flush() after the wave */
    if (ph->btail)
        ph->btail->next = t;
    else
        ph->bhead = t;
    ph->btail = t;
    return 0;
nomem:
    task_free(t);
    return fail_now(res, 1, "out of memory");
}

/* Loop thread: the stall check (the top). */
static void on_stall(evutil_socket_t fd, short what, void *arg) {
    plugin_h_t *ph = arg;
    pthread_mutex_lock(&ph->mu);
    int n = 0, again = ph->qlen > 0;
    if (again && ph->popped == ph->stall_popped) {
        int idle = ph->nidle - ph->waking;
        n = (int)ph->qlen < idle ? (int)ph->qlen : idle;
        ph->waking += n > 0 ? n : 0;
    }
    ph->stall_popped = ph->popped;
    pthread_mutex_unlock(&ph->mu);
    signal_n(ph, n);
    if (again)
        evtimer_add(ph->ev_stall, &(struct timeval)AX_TV_MS(STALL_MS));
}

/* After a start wave: the batch onto the queue, the workers it needs woken. */
static void flush(executor_t *ex) {
    plugin_h_t *ph = ex->plugin;
    if (!ph || !ph->bhead)
        return;
    size_t n = 0;
    for (ptask_t *t = ph->bhead; t; t = t->next)
        n++;
    pthread_mutex_lock(&ph->mu);
    if (ph->qtail)
        ph->qtail->next = ph->bhead;
    else
        ph->qhead = ph->bhead;
    ph->qtail = ph->btail;
    ph->qlen += n;
    int wake = wakes_needed(ph);
    int under = (size_t)wake < ph->qlen; /* fewer workers than tasks: watch for a stall */
    uint64_t popped = ph->popped;
    pthread_mutex_unlock(&ph->mu);
    ph->bhead = ph->btail = NULL;
    signal_n(ph, wake);
    if (under && !evtimer_pending(ph->ev_stall, NULL)) {
        ph->stall_popped = popped;
        evtimer_add(ph->ev_stall, &(struct timeval)AX_TV_MS(STALL_MS));
    }
}

static void cancel(executor_t *ex, run_t *r, const char *why) {
    ptask_t *t = r->hstate;
    if (!t || !t->r || t->cancelled)
        return;
    t->cancelled = 1;
    t->why = why;
    atomic_store(&t->stop, 1);
    int64_t g = ex->svc.conf.executor_kill_grace_ms;
    struct timeval tv = AX_TV_MS(g);
    evtimer_add(t->timer, &tv); /* replaces the deadline */
}

const handler_ops_t handler_plugin = {"plugin", init, fini, start, cancel, flush};
