/*
 * worker.c — the worker table (ax/store_worker.h): executor heartbeats.
 */
#include <stdio.h>

#include "ax/store_worker.h"
#include "store_int.h"

AX_STMT(st_heartbeat, "worker.heartbeat",
        "INSERT INTO worker (id, host, pid, groups, cpu_pct, mem_pct, rss_bytes,"
        "  running, waiting, pools, fetching, state)"
        " VALUES ($1, $2, $3::int, $4::text[], $5::real, $6::real, $7::bigint,"
        "  $8::int, $9::int, $10::jsonb, $11::boolean, $12)"
        " ON CONFLICT (id) DO UPDATE SET host = $2, pid = $3::int, groups = $4::text[],"
        "  heartbeat_at = now(), cpu_pct = $5::real, mem_pct = $6::real,"
        "  rss_bytes = $7::bigint, running = $8::int, waiting = $9::int,"
        "  pools = $10::jsonb, fetching = $11::boolean, state = $12,"
        "  started_at = CASE WHEN worker.pid = $3::int AND NOT $13::boolean"
        "                    THEN worker.started_at ELSE now() END");

int ax_worker_heartbeat(ax_pg_t *pg, const ax_worker_beat_t *b, char *errbuf, size_t errlen) {
    ax_strbuf_t groups = {0};
    int rc = ax_pgarr_begin(&groups);
    for (size_t i = 0; rc == 0 && i < b->ngroups; i++)
        rc = ax_pgarr_text(&groups, b->groups[i]);
    if (rc == 0)
        rc = ax_pgarr_end(&groups);
    if (rc < 0) {
        ax_strbuf_free(&groups);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "out of memory");
    }
    char cpu[32], mem[32];
    ax_num_t pid, rss, run, wait;
    snprintf(cpu, sizeof cpu, "%.1f", b->cpu_pct);
    snprintf(mem, sizeof mem, "%.1f", b->mem_pct);
    const char *p[] = {b->id,
                       b->host,
                       ax_num(&pid, b->pid),
                       groups.s,
                       cpu,
                       mem,
                       ax_num(&rss, b->rss_bytes),
                       ax_num(&run, b->running),
                       ax_num(&wait, b->waiting),
                       b->pools_json,
                       b->fetching ? "t" : "f",
                       b->state,
                       b->first ? "t" : "f"};
    rc = ax_stmt_run(pg, &st_heartbeat, 13, p, NULL, NULL, NULL, errbuf, errlen);
    ax_strbuf_free(&groups);
    return rc;
}
