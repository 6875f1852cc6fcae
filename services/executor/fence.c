/*
 * fence.c — an executor cut off from PostgreSQL stops its handlers before
 * their leases can expire, so an instance is never RUNNING on two hosts.
 *
 * Each running instance has a local deadline (run_t.fence_mono): 95% of the
 * lease last written successfully, minus executor.fence.margin.ms, counted
 * on CLOCK_MONOTONIC from before the statement that wrote it was sent (the
 * start, then every renewal). PostgreSQL's expiry is later than that: its
 * now() is read after the statement arrived. The trigger's sweep reports a
 * lease lost only once it expired (and the worker's heartbeat is stale),
 * and only then may the instance run again elsewhere.
 *
 * Two stop the handlers at that deadline:
 * - the fence thread (fence_main), whatever the event loop is doing (it may
 *   be stuck for minutes in a PostgreSQL call whose packets a partition
 *   drops: libpq waits for TCP to give up, or for the TCP settings of
 *   ax_pg_tcp_defaults): it SIGKILLs the process group of every command
 *   whose deadline passed (ax_cmd_kill_group: safe from any thread, a group
 *   is signalled only while its leader is unreaped); shuts down the socket
 *   of every http request whose deadline passed (a dup of it, ours, taken
 *   by fence_set or, once connected, by the loop's on_fence_sock, closed by
 *   fence_clear: its number cannot be reused under the shutdown); and
 *   raises the stop flag of every plugin run() whose deadline passed
 *   (handler_plugin_fence), so ax_plugin_should_stop() turns 1. It touches
 *   nothing else;
 * - the loop (fence_check, on a timer armed at the earliest deadline and
 *   after every failed renewal), for every handler kind: stop_run with
 *   "lease_lost", which also reports the attempt.
 * A plugin that does not return cannot be stopped from outside its thread:
 * if one is still inside run() at R + L - m/2 (the exit deadline, between
 * the fence's R + 0.95 L - m and the lease's expiry, no earlier than R + L),
 * the fence thread kills every command's process group and exits the
 * process (EXECUTOR_EXIT_FENCED), whether its run was reported (timeout,
 * cancel) or not: that is the only way to be sure the instance does not run
 * twice. Its supervisor restarts it.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/log.h"
#include "executor.h"

typedef struct fence_ent {
    int64_t instance_id;
    pid_t pid;     /* a command's group; 0: none, or nothing (more) to kill */
    int fd;        /* an http request's socket (our dup); -1: none */
    int64_t until; /* CLOCK_MONOTONIC ms */
    int killed;    /* the thread stopped it (killed its group, shut its socket) */
    const run_t *http; /* the loop's: an http run whose socket is looked up (ev_sock) */
} fence_ent_t;

#define FENCE_ENT_FREE ((fence_ent_t){0, 0, -1, 0, 0, NULL})

/* How often the loop looks for the socket of an http request that had none
 * at its fence_set (its host name still being resolved): once connected, it
 * may be stuck in PostgreSQL before the next renewal's fence_set. */
#define SOCK_POLL_MS 10

struct fence {
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    fence_ent_t *v;
    size_t n, cap;
    size_t *free_slots; /* indexes of free entries */
    size_t nfree;
    int64_t wake_at; /* the thread sleeps until then */
    int stop, started;
    int64_t killed; /* groups the thread killed */
    void *plugin;   /* the plugin handler, once a plugin run had a deadline */
    struct event_base *base;
    struct event *ev_check; /* the loop's check at the earliest deadline */
    struct event *ev_sock;  /* the loop's look for http sockets (SOCK_POLL_MS) */
    int64_t check_at;       /* when ev_check fires (the loop's; INT64_MAX: not armed) */
};

/* The loop's check at `at` at the latest. */
static void arm_check(fence_t *f, int64_t at) {
    if (at >= f->check_at)
        return;
    f->check_at = at;
    int64_t in = at - ax_mono_ms();
    event_add(f->ev_check, &(struct timeval)AX_TV_MS(in > 0 ? in : 0));
}

/* The local deadline of a lease of lease_ms written by a statement sent at
 * mono0. */
static int64_t margin_of(const executor_t *ex, int64_t lease_ms) {
    int64_t margin = ex->svc.conf.executor_fence_margin_ms;
    return margin > lease_ms / 2 ? lease_ms / 2 : margin;
}

int64_t fence_deadline(const executor_t *ex, int64_t mono0, int64_t lease_ms) {
    return mono0 + lease_ms * 95 / 100 - margin_of(ex, lease_ms);
}

int64_t fence_exit_deadline(const executor_t *ex, int64_t mono0, int64_t lease_ms) {
    return mono0 + lease_ms - margin_of(ex, lease_ms) / 2;
}

/* The fence thread, under mu: a plugin still inside run() at its exit
 * deadline. Nothing else can stop it before its lease expires: every
 * command's group goes, then the process. */
static void exit_fenced(fence_t *f, int64_t instance_id) {
    size_t n = ax_cmd_kill_all(f->base);
    ax_log_inst(AX_LOG_ERROR, instance_id, NULL, NULL,
                "instance %lld: a plugin is still inside run() after its stop flag was "
                "raised, and its lease could expire before it returns: exiting (status %d; "
                "%zu command process group(s) killed) so the instance never runs twice",
                (long long)instance_id, EXECUTOR_EXIT_FENCED, n);
    _exit(EXECUTOR_EXIT_FENCED);
}

/* The fence thread, under mu: stop e, past its deadline by late ms. */
static void stop_ent(fence_t *f, fence_ent_t *e, int64_t late) {
    if (e->pid && ax_cmd_kill_group(f->base, e->pid)) {
        f->killed++;
        e->killed = 1;
        ax_log_inst(AX_LOG_ERROR, e->instance_id, NULL, NULL,
                    "instance %lld: lease not renewed in time (%lld ms past the "
                    "fence): process group %d killed",
                    (long long)e->instance_id, (long long)late, (int)e->pid);
    } else if (e->fd >= 0 && shutdown(e->fd, SHUT_RDWR) == 0) {
        e->killed = 1;
        ax_log_inst(AX_LOG_ERROR, e->instance_id, NULL, NULL,
                    "instance %lld: lease not renewed in time (%lld ms past the "
                    "fence): http request aborted (connection shut down)",
                    (long long)e->instance_id, (long long)late);
    }
    e->pid = 0; /* once; the loop reports it when it runs */
    e->until = INT64_MAX;
}

static void *fence_main(void *arg) {
    fence_t *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        int64_t now = ax_mono_ms(), next = now + 1000;
        for (size_t i = 0; i < f->n; i++) {
            fence_ent_t *e = &f->v[i];
            if ((!e->pid && e->fd < 0) || e->until == INT64_MAX)
                continue;
            if (e->until > now)
                next = e->until < next ? e->until : next;
            else
                stop_ent(f, e, now - e->until);
        }
        if (f->plugin) {
            int64_t overdue = 0;
            int64_t at = handler_plugin_fence(f->plugin, now, &overdue);
            if (overdue)
                exit_fenced(f, overdue);
            next = at < next ? at : next;
        }
        f->wake_at = next;
        struct timespec ts = {next / 1000, (next % 1000) * 1000000L};
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* The loop: stop every running handler whose deadline passed, and arm the
 * check again at the earliest deadline left. */
void fence_check(executor_t *ex) {
    int64_t now = ax_mono_ms(), next = INT64_MAX;
    int stopped = 0;
    for (run_t *r = ex->head; r; r = r->next) {
        if (r->state != RUN_RUNNING || r->stop_why || !r->fence_mono)
            continue;
        if (r->fence_mono <= now) {
            if (!stopped++)
                ax_error("leases not renewed in time: stopping the handlers whose lease could "
                         "run out (their instances are recovered elsewhere)");
            ex->lost_leases++;
            stop_run(ex, r, "lease_lost");
        } else if (r->fence_mono < next) {
            next = r->fence_mono;
        }
    }
    fence_t *f = ex->fence;
    if (f) {
        f->check_at = INT64_MAX; /* fired, or re-armed below */
        event_del(f->ev_check);
        if (next != INT64_MAX)
            arm_check(f, next);
    }
    if (stopped)
        commit_ready(ex);
}

static void on_fence_check(evutil_socket_t fd, short what, void *arg) { fence_check(arg); }

static int http_fd(const run_t *r);

/* The loop: the socket of every http request in the table without one yet
 * (connected since its fence_set); again SOCK_POLL_MS later while one has
 * none. */
static void on_fence_sock(evutil_socket_t fd, short what, void *arg) {
    fence_t *f = arg;
    int left = 0;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->n; i++) {
        fence_ent_t *e = &f->v[i];
        if (!e->http || e->fd >= 0 || e->killed || e->until == INT64_MAX)
            continue; /* (INT64_MAX: past its deadline, the loop's check stops it) */
        e->fd = http_fd(e->http);
        left |= e->fd < 0;
    }
    pthread_mutex_unlock(&f->mu);
    if (left)
        evtimer_add(f->ev_sock, &(struct timeval)AX_TV_MS(SOCK_POLL_MS));
}

/* Under mu: r's entry in the thread's table (0: out of memory; the loop's
 * check still stops it). */
static size_t ent_slot(fence_t *f) {
    size_t i;
    if (f->nfree) {
        i = f->free_slots[--f->nfree];
    } else if (f->n < f->cap) {
        i = f->n++;
    } else {
        size_t nc = f->cap ? f->cap * 2 : 256;
        fence_ent_t *v = realloc(f->v, nc * sizeof *v);
        size_t *fs = v ? realloc(f->free_slots, nc * sizeof *fs) : NULL;
        if (v)
            f->v = v;
        if (!fs)
            return 0;
        f->free_slots = fs;
        f->cap = nc;
        i = f->n++;
    }
    f->v[i] = FENCE_ENT_FREE; /* a fresh slot is not zeroed (realloc) */
    return i + 1;
}

/* An http run's socket, ours (a dup the loop cannot close under us); -1
 * while it has none (not connected yet). */
static int http_fd(const run_t *r) {
    int fd = handler_http_fd(r);
    return fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 3);
}

/* r's deadline, after its start or a renewal of its lease of lease_ms
 * written by a statement sent at mono0: the thread's table entry (a
 * command's process group, an http request's socket; a plugin's run() is
 * found through the plugin handler's workers) and the loop's timer. */
void fence_set(executor_t *ex, run_t *r, int64_t mono0, int64_t lease_ms) {
    fence_t *f = ex->fence;
    int64_t until = fence_deadline(ex, mono0, lease_ms);
    r->fence_mono = until;
    if (!f)
        return;
    int plugin = r->ops == &handler_plugin, killed = 0, sock = 0;
    if (plugin) /* stopped by the thread: reported lease_lost, as a command killed */
        killed = handler_plugin_fence_set(r, until, fence_exit_deadline(ex, mono0, lease_ms));
    pid_t pid = r->ops == &handler_command ? handler_command_pid(r) : 0;
    int http = r->ops == &handler_http;
    pthread_mutex_lock(&f->mu);
    if (plugin && !f->plugin)
        f->plugin = ex->plugin;
    if (!r->fence_slot && (pid || http))
        r->fence_slot = ent_slot(f);
    if (r->fence_slot) {
        fence_ent_t *e = &f->v[r->fence_slot - 1];
        killed = e->killed;
        int fd = e->fd >= 0 || !http ? e->fd : http_fd(r);
        if (!killed)
            *e = (fence_ent_t){r->d.instance_id, pid, fd, until, 0, http ? r : NULL};
        sock = !killed && http && fd < 0;
    }
    if (until < f->wake_at)
        pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (killed) { /* the thread was first, a renewal came back after the deadline */
        if (!r->stop_why) /* once, not at every renewal until it ends */
            ex->lost_leases++;
        stop_run(ex, r, "lease_lost");
        return;
    }
    if (sock && !evtimer_pending(f->ev_sock, NULL))
        evtimer_add(f->ev_sock, &(struct timeval)AX_TV_MS(SOCK_POLL_MS));
    arm_check(f, until);
}

/* r ended (its handler reported): out of the thread's table before its
 * process is reaped... or after: ax_cmd_kill_group knows a reaped one. */
void fence_clear(executor_t *ex, run_t *r) {
    fence_t *f = ex->fence;
    r->fence_mono = 0;
    if (!f || !r->fence_slot)
        return;
    pthread_mutex_lock(&f->mu);
    fence_ent_t *e = &f->v[r->fence_slot - 1];
    if (e->fd >= 0)
        close(e->fd);
    *e = FENCE_ENT_FREE;
    f->free_slots[f->nfree++] = r->fence_slot - 1;
    pthread_mutex_unlock(&f->mu);
    r->fence_slot = 0;
}

int fence_start(executor_t *ex) {
    fence_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->base = ex->svc.base;
    f->wake_at = INT64_MAX;
    f->check_at = INT64_MAX;
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    f->ev_check = evtimer_new(ex->svc.base, on_fence_check, ex);
    f->ev_sock = evtimer_new(ex->svc.base, on_fence_sock, f);
    if (!f->ev_check || !f->ev_sock || pthread_create(&f->thr, NULL, fence_main, f) != 0) {
        if (f->ev_check)
            event_free(f->ev_check);
        if (f->ev_sock)
            event_free(f->ev_sock);
        free(f);
        return -1;
    }
    f->started = 1;
    ex->fence = f;
    return 0;
}

int64_t fence_killed(const executor_t *ex) {
    fence_t *f = ex->fence;
    if (!f)
        return 0;
    pthread_mutex_lock(&f->mu);
    int64_t n = f->killed;
    pthread_mutex_unlock(&f->mu);
    return n;
}

void fence_fini(executor_t *ex) {
    fence_t *f = ex->fence;
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thr, NULL);
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i].fd >= 0)
            close(f->v[i].fd);
    event_free(f->ev_check);
    event_free(f->ev_sock);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f->v);
    free(f->free_slots);
    free(f);
    ex->fence = NULL;
}
