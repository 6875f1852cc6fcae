/*
 * ax/store_outbox.h — the results outbox (tables ax_result_batch, one row
 * per finishing statement, infra/migrations/020; ax_result_outbox, a
 * previous release's row per instance; ax_results_offset; infra/migrations/015):
 * the final outcomes waiting to
 * be published on the results topic, marking them published, the offsets
 * up to which the topic is reconciled with the rows, and the session
 * advisory lock that makes one callback process of a deployment the
 * publisher (ax-callback, services/callback/publish.c tells the protocol).
 *
 * Functions return 0 (or a count) or an ax error (ax/common.h): AX_ERR_IO
 * retry later, AX_ERR_INVALID bad data; the reason in errbuf. Rows come
 * back malloc'd and are the caller's (free with the matching _free).
 */
#ifndef AX_STORE_OUTBOX_H
#define AX_STORE_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include "ax/codec.h"

typedef struct ax_pg ax_pg_t;

/* Instances of ids[0..n) that a statement other than the finish (the
 * last shard, a size probe of 0) finished: into the outbox. */
int ax_store_outbox_add_finished(ax_pg_t *pg, const int64_t *ids, size_t n, char *errbuf,
                                 size_t errlen);

/* One outbox row: `present` when its instance is FINISHED and not yet
 * published — `res` is then its Result record (the strings malloc'd);
 * otherwise (deleted, or published already) it only leaves the outbox. */
typedef struct ax_outbox_row {
    int present;
    ax_result_t res; /* res.instance_id always set */
} ax_outbox_row_t;

/* The first `limit` rows of the deployment's outbox, in instance order.
 * The batch rows (ax_result_batch) whose ids are in carried[0..ncarried)
 * — results the caller holds already — are not read: their ids come back
 * in ret->carried (and the ids each holds now in ret->carried_n), in batch
 * order, when they are among those first `limit` rows. Free with
 * ax_outbox_pending_free. */
typedef struct ax_outbox_pending {
    ax_outbox_row_t *rows;
    size_t n;
    int64_t *carried, *carried_n;
    size_t ncarried;
} ax_outbox_pending_t;
int ax_store_outbox_pending(ax_pg_t *pg, const char *deployment, int limit,
                            const int64_t *carried, size_t ncarried, ax_outbox_pending_t *ret,
                            char *errbuf, size_t errlen);
void ax_outbox_pending_free(ax_outbox_pending_t *p);
void ax_outbox_rows_free(ax_outbox_row_t *v, size_t n);

/* Who marks: the publisher after its Kafka commit, or a recovery that
 * found the results on the topic (the statement is named by its sender in
 * pg_stat_activity / pg_stat_statements). */
typedef enum ax_outbox_marker {
    AX_OUTBOX_PUBLISHED = 0,
    AX_OUTBOX_RECOVERED = 1,
} ax_outbox_marker_t;

/* In one statement: ids[0..nids) leave the deployment's outbox and are
 * marked published, and the topic's reconciled offsets advance to next[p]
 * for every partition p < nparts with next[p] >= 0 (never backwards).
 * Returns the number of instances marked now, or < 0. */
int ax_store_outbox_mark(ax_pg_t *pg, ax_outbox_marker_t who, const char *deployment,
                         const int64_t *ids, size_t nids, const char *topic, const int64_t *next,
                         int nparts, char *errbuf, size_t errlen);

/* The reconciled offsets of `topic`: *ret_next (malloc'd, *ret_n entries)
 * holds each stored partition's next offset, -1 where none is stored;
 * *ret_n = 0 when the topic has none at all. */
int ax_store_outbox_offsets(ax_pg_t *pg, const char *topic, int64_t **ret_next, int *ret_n,
                            char *errbuf, size_t errlen);

/* ---- the publisher's lock (on a connection used for nothing else) ------------------ */

/* Try the session advisory lock `name`; when taken, the session ends after
 * sitting idle for `idle` (a PostgreSQL interval, "10s"). *ret_got 1/0. */
int ax_store_outbox_lock_try(ax_pg_t *pg, const char *name, const char *idle, int *ret_got,
                             char *errbuf, size_t errlen);
/* Release it (and the idle limit). */
int ax_store_outbox_lock_release(ax_pg_t *pg, const char *name, char *errbuf, size_t errlen);
/* One round trip on the lock's session, so it does not sit idle. */
int ax_store_outbox_lock_ping(ax_pg_t *pg, char *errbuf, size_t errlen);
/* The server process of pg's session, 0 when not connected: a lock is held
 * only as long as this stays the same. */
int ax_store_session_pid(ax_pg_t *pg);

#endif
