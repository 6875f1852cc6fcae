/*
 * ax/store_worker.h — the store family of the worker table: each
 * executor's heartbeat row (what axctl worker list and the lease sweep
 * read to tell a live executor from a lost one).
 *
 * Conventions (ax/store.h): returns 0 or an ax/common.h error with the
 * reason in errbuf; nothing is logged.
 */
#ifndef AX_STORE_WORKER_H
#define AX_STORE_WORKER_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t; /* ax/pg.h */

typedef struct ax_worker_beat {
    const char *id;                 /* the worker id (ax_svc_t.worker_id) */
    const char *host;
    int pid;
    const char *const *groups;      /* executor groups served */
    size_t ngroups;
    double cpu_pct, mem_pct;        /* machine load, percent */
    int64_t rss_bytes;
    int64_t running, waiting;       /* handlers running; claimed or consumed, not started */
    const char *pools_json;         /* a JSON object: pool name -> its figures */
    int fetching;                   /* 0 while paused (watermark, draining) */
    const char *state;              /* "running", "draining", "stopped" */
    int first;                      /* none of this process recorded yet */
} ax_worker_beat_t;

/* Insert or refresh the worker's row; heartbeat_at = now(), started_at
 * kept unless the pid changed or this is the process's first (a restart
 * with a fixed worker.id may get the same pid: pid 1 in a container). */
int ax_worker_heartbeat(ax_pg_t *pg, const ax_worker_beat_t *b, char *errbuf, size_t errlen);

#endif
