/*
 * lease.c — what keeps held instances ours: lease renewals (an instance
 * whose lease could not be renewed has its handler stopped), cancel
 * request polls, and the worker heartbeat with the machine watermarks
 * (above a CPU or memory watermark every partition is paused).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/log.h"
#include "ax/store_run.h"
#include "ax/store_worker.h"
#include "executor.h"

void stop_run(executor_t *ex, run_t *r, const char *why) {
    if (r->stop_why)
        return;
    r->stop_why = why;
    if (r->state == RUN_RUNNING) {
        ax_log_inst(AX_LOG_INFO, r->d.instance_id, r->d.job, r->d.trace_id,
                    "instance %lld: stopping its handler (%s)", (long long)r->d.instance_id, why);
        r->ops->cancel(ex, r, why);
    } else if (r->state == RUN_CLAIMED && r->pool && strcmp(why, "cancelled") == 0) {
        /* cancelled while it waited in its pool: reported CANCELLED now (as
         * when a cancel is found at its start), not left to the sweep */
        handler_result_t none = {.outcome = AX_OUTCOME_CANCELLED};
        ax_pool_remove(&r->pool->core, &r->qi);
        run_begin(ex, r);
        run_done(r, &none);
    } else if (r->state == RUN_CLAIMED) {
        run_drop(r);
    }
}

/* Renew the held leases — one statement per distinct lease length, each a
 * primary-key lookup of its ids — and learn about cancel requests.
 *
 * Running (and reporting) instances are renewed every tick. Claimed ones
 * waiting in a pool queue only every QUEUED_RENEW_MS: while this executor
 * heartbeats, the sweep leaves an expired lease alone unless it expired
 * ten minutes ago, and once the heartbeat stops, the queued instances are
 * recovered as soon as it is stale (their leases have long expired).
 * Renewing thousands of queued claims every lease/3 cost more PostgreSQL
 * time than running them (BENCHMARKS.md). */
#define QUEUED_RENEW_MS 60000
#define MAX_LENS 32

/* Also while a result waits for Kafka's ack: the instance is ours until
 * the callback records it. */
static int renews(const run_t *r, int queued_too) {
    return (r->state == RUN_RUNNING || r->state == RUN_REPORTING ||
            (queued_too && r->state == RUN_CLAIMED)) &&
           !r->stop_why;
}

static int held_cmp(const void *a, const void *b) {
    int64_t x = ((const ax_run_held_t *)a)->instance_id;
    int64_t y = ((const ax_run_held_t *)b)->instance_id;
    return x < y ? -1 : x > y;
}

/* Renew every lease to renew, one statement per length (lens[0..nlens);
 * beyond MAX_LENS lengths, the last one renews the rest). The rows of all
 * statements go to got[] (room for n), sorted by id. */
static int renew_all(executor_t *ex, int queued, const int64_t *lens, size_t nlens, size_t n,
                     ax_run_held_t *got, size_t *ret_ngot, char *err, size_t errlen) {
    ax_svc_t *svc = &ex->svc;
    int64_t *ids = calloc(n, sizeof *ids);
    size_t ngot = 0;
    if (!ids)
        return ax_seterr(err, errlen, AX_ERR_NOMEM, "out of memory");
    int rc = 0;
    for (size_t k = 0; k < nlens && rc == 0; k++) {
        size_t m = 0;
        for (run_t *r = ex->head; r; r = r->next)
            if (renews(r, queued) &&
                (r->lease_ms == lens[k] || (k == nlens - 1 && nlens == MAX_LENS)) && m < n)
                ids[m++] = r->d.instance_id;
        ax_run_held_t *rows = NULL;
        size_t nrows = 0;
        rc = ax_run_renew(svc->pg, svc->worker_id, ids, m, lens[k], &rows, &nrows, err, errlen);
        for (size_t i = 0; rc == 0 && i < nrows && ngot < n; i++)
            got[ngot++] = rows[i];
        free(rows);
    }
    free(ids);
    qsort(got, ngot, sizeof *got, held_cmp);
    *ret_ngot = ngot;
    return rc;
}

static void renewal_failed(executor_t *ex, const char *err) {
    ax_warn("lease renewal: %s", err);
    fence_check(ex); /* what is past its deadline stops now, not at the next renewal */
    int64_t since = ax_mono_ms() - ex->load.lease_ok_mono;
    if (since <= ex->svc.conf.executor_lease_min_ms)
        return;
    ax_error("leases not renewed for %lld ms: stopping every handler (their instances are "
             "recovered elsewhere)",
             (long long)since);
    for (run_t *r = ex->head; r; r = r->next)
        stop_run(ex, r, "lease_lost");
    commit_ready(ex);
}

void on_lease(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    int64_t lens[MAX_LENS];
    size_t nlens = 0, n = 0;
    int64_t now = ax_mono_ms();
    int queued = now - ex->queued_renewed_mono >= QUEUED_RENEW_MS;
    if (queued)
        ex->queued_renewed_mono = now;
    for (run_t *r = ex->head; r; r = r->next)
        if (renews(r, queued)) {
            size_t k = 0;
            while (k < nlens && lens[k] != r->lease_ms)
                k++;
            if (k == nlens && nlens < MAX_LENS)
                lens[nlens++] = r->lease_ms;
            n++;
        }
    if (n == 0) {
        ex->load.lease_ok_mono = ax_mono_ms();
        return;
    }
    ax_run_held_t *got = calloc(n, sizeof *got);
    size_t ngot = 0;
    char err[1024] = "out of memory";
    if (!got || renew_all(ex, queued, lens, nlens, n, got, &ngot, err, sizeof err) < 0) {
        renewal_failed(ex, err);
        free(got);
        return;
    }
    ex->load.lease_ok_mono = now;
    for (run_t *r = ex->head; r; r = r->next) {
        if ((r->state != RUN_CLAIMED && r->state != RUN_RUNNING) || !renews(r, queued))
            continue; /* a REPORTING run has nothing left to stop; a queued one not renewed now */
        ax_run_held_t key = {r->d.instance_id, 0};
        const ax_run_held_t *f = bsearch(&key, got, ngot, sizeof *got, held_cmp);
        if (!f) {
            ex->lost_leases++;
            stop_run(ex, r, "lease_lost");
        } else if (f->cancel_requested) {
            stop_run(ex, r, "cancelled");
        } else if (r->state == RUN_RUNNING) {
            fence_set(ex, r, now, r->lease_ms);
        }
    }
    free(got);
    commit_ready(ex);
}

/* Cancel requests (overlap=cancel, axctl instance cancel) of running and
 * claimed instances are looked for every CANCEL_POLL_MS — one primary-key
 * lookup of their ids — not only at the lease renewal (every
 * executor.lease.min.ms/3, 1.7 s by default, and once a minute for claimed
 * ones), so a cancelled handler is stopped within a second and a cancelled
 * claim waiting in its pool is reported CANCELLED soon. Only runs claimed
 * or started at least CANCEL_POLL_MS ago are looked for: a start already
 * read its cancel flag (run.start), and at full load most runs are that
 * young, so the poll no longer reads a thousand ids five times a second
 * per executor (BENCHMARKS.md, "Issue #13: the twenty-sixth session"). A
 * cancel is seen within two intervals of the claim or start. */
void on_cancel_poll(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    ax_svc_t *svc = &ex->svc;
    size_t n = ex->nstate[RUN_RUNNING] + ex->nstate[RUN_CLAIMED]; /* at most */
    if (n == 0)
        return;
    int64_t *ids = calloc(n, sizeof *ids), *hit = NULL;
    size_t k = 0, nhit = 0;
    int64_t old = ax_mono_ms() - CANCEL_POLL_MS;
    for (run_t *r = ex->head; ids && r && k < n; r = r->next)
        if (!r->stop_why && ((r->state == RUN_RUNNING && r->started_mono <= old) ||
                             (r->state == RUN_CLAIMED && r->qi.queued_ms <= old)))
            ids[k++] = r->d.instance_id;
    if (ids && k == 0) { /* none old enough, or every one is being stopped already */
        free(ids);
        return;
    }
    char err[512] = "out of memory";
    int rc = ids ? ax_run_cancel_requested(svc->pg, svc->worker_id, ids, k, &hit, &nhit, err,
                                           sizeof err)
                 : AX_ERR_NOMEM;
    free(ids);
    if (rc < 0) {
        ax_debug("cancel poll: %s", err); /* the lease renewal looks too */
        return;
    }
    for (size_t i = 0; i < nhit; i++)
        for (run_t *r = ex->head; r; r = r->next)
            if (r->d.instance_id == hit[i] &&
                (r->state == RUN_RUNNING || r->state == RUN_CLAIMED)) {
                stop_run(ex, r, "cancelled");
                break;
            }
    free(hit);
    commit_ready(ex);
}

/* ---- heartbeat and watermarks ---- */

static void read_cpu(executor_t *ex) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return;
    unsigned long long v[8] = {0};
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) == 8) {
        uint64_t total = 0;
        for (int i = 0; i < 8; i++)
            total += v[i];
        uint64_t idle = v[3] + v[4];
        uint64_t busy = total - idle;
        if (ex->load.cpu_total && total > ex->load.cpu_total)
            ex->load.cpu_pct = 100.0 * (double)(busy - ex->load.cpu_busy) /
                               (double)(total - ex->load.cpu_total);
        ex->load.cpu_busy = busy;
        ex->load.cpu_total = total;
    }
    fclose(f);
}

static void read_mem(executor_t *ex) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return;
    char line[256];
    unsigned long long total = 0, avail = 0, v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu", &v) == 1)
            total = v;
        else if (sscanf(line, "MemAvailable: %llu", &v) == 1)
            avail = v;
    }
    if (total)
        ex->load.mem_pct = 100.0 * (double)(total - avail) / (double)total;
    fclose(f);
}

static long rss_bytes(void) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss * sysconf(_SC_PAGESIZE);
}

/* Stop fetching above a watermark, fetch again 5 points below. */
static void watermarks(executor_t *ex) {
    const ax_conf_t *c = &ex->svc.conf;
    double cpu = ex->load.cpu_pct, mem = ex->load.mem_pct;
    int over = (c->executor_watermark_cpu > 0 && cpu > (double)c->executor_watermark_cpu) ||
               (c->executor_watermark_mem > 0 && mem > (double)c->executor_watermark_mem);
    int under = !((c->executor_watermark_cpu > 0 && cpu > (double)c->executor_watermark_cpu - 5) ||
                  (c->executor_watermark_mem > 0 && mem > (double)c->executor_watermark_mem - 5));
    if (ex->load.fetching && over) {
        ax_warn("above a watermark (cpu %.0f%%, memory %.0f%%): fetching stopped", cpu, mem);
        ex->load.fetching = 0;
    } else if (!ex->load.fetching && under) {
        ax_info("below the watermarks again (cpu %.0f%%, memory %.0f%%): fetching", cpu, mem);
        ex->load.fetching = 1;
        event_active(ex->ev_kick, 0, 0);
    }
    apply_pauses(ex); /* (partitions assigned since are brought in line by lanes_tick) */
}

/* The pools as the worker row's JSON object. */
static void pools_json(const executor_t *ex, char *buf, size_t size) {
    char *w = buf;
    size_t left = size;
    int k = snprintf(w, left, "{");
    for (size_t i = 0; i < ex->npools && k > 0 && (size_t)k < left; i++) {
        w += k;
        left -= (size_t)k;
        const pool_t *p = &ex->pools[i];
        const ax_pool_t *c = &p->core;
        k = snprintf(w, left, "%s\"%s\": {\"slots\": %lld, \"queue\": %lld, \"running\": %zu,"
                              " \"waiting\": %zu, \"full\": %s,"
                              " \"waiting_by_lane\": [%zu, %zu, %zu, %zu, %zu]}",
                     i ? ", " : "", p->name, (long long)c->slots, (long long)c->queue,
                     c->running, c->waiting, p->full ? "true" : "false", c->lane_waiting[0],
                     c->lane_waiting[1], c->lane_waiting[2], c->lane_waiting[3],
                     c->lane_waiting[4]);
    }
    if (k > 0 && (size_t)k < left)
        snprintf(w + k, left - (size_t)k, "}");
}

void heartbeat(executor_t *ex, const char *state) {
    ax_svc_t *svc = &ex->svc;
    read_cpu(ex);
    read_mem(ex);
    watermarks(ex);
    char pools[16384], host[256] = "";
    pools_json(ex, pools, sizeof pools);
    size_t waiting = 0;
    for (size_t i = 0; i < ex->npools; i++)
        waiting += ex->pools[i].core.waiting;
    gethostname(host, sizeof host - 1);
    char *gl = strdup(svc->conf.executor_groups ? svc->conf.executor_groups : "");
    const char **groups = gl ? calloc(strlen(gl) / 2 + 1, sizeof *groups) : NULL;
    size_t ngroups = 0;
    for (char *save = NULL, *g = groups ? strtok_r(gl, ", ", &save) : NULL; g;
         g = strtok_r(NULL, ", ", &save))
        groups[ngroups++] = g;
    ax_worker_beat_t b = {
        .id = svc->worker_id,
        .host = host,
        .pid = (int)getpid(),
        .groups = groups,
        .ngroups = ngroups,
        .cpu_pct = ex->load.cpu_pct,
        .mem_pct = ex->load.mem_pct,
        .rss_bytes = rss_bytes(),
        .running = (int64_t)ex->running,
        .waiting = (int64_t)waiting,
        .pools_json = pools,
        .fetching = ex->load.fetching && !svc->stopping,
        .state = state,
        .first = !ex->load.beaten,
    };
    char err[512];
    if (ax_worker_heartbeat(svc->pg, &b, err, sizeof err) < 0)
        ax_debug("worker heartbeat: %s", err);
    else
        ex->load.beaten = 1; /* started_at is this process's (the sweep: dispatch.c) */
    free(groups);
    free(gl);
}

void on_heartbeat(evutil_socket_t fd, short what, void *arg) {
    executor_t *ex = arg;
    heartbeat(ex, ex->svc.stopping ? "draining" : "running");
}
