/*
 * ax/store_retention.h — the retention sweep's statements (store family
 * "retention"): finished instances and old fire-ledger rows deleted in small
 * batches by primary-key ranges, each batch one statement (its own short
 * transaction), fenced by the trigger leader's lease (docs/OPERATIONS.md,
 * "Retention").
 *
 * Functions return 0 or an ax error (ax/common.h; AX_ERR_IO: retry later)
 * with the reason in errbuf (which may be NULL).
 */
#ifndef AX_STORE_RETENTION_H
#define AX_STORE_RETENTION_H

#include <stddef.h>
#include <stdint.h>

#include "ax/store_leader.h"

typedef struct ax_pg ax_pg_t;

/* Where a pass over a table has got to, and what one batch did. */
typedef struct ax_retention_batch {
    int64_t deleted; /* rows deleted (instances: definitions; their state rows,
                        attempts and submission keys go with them) */
    int64_t seen;    /* rows examined (instances: walked, of every deployment) */
    int64_t last_id; /* instances: the last id examined (the next batch's cursor) */
    int64_t last_job;  /* ledger: the last (job_id, nominal time in ms) examined */
    int64_t last_ms;
    int young;       /* instances: the deployment's last row examined was
                        created inside the retention (instance_def.scheduled_at,
                        the insert's now()): every later id was created later
                        still, so none can have finished before the cut (end
                        the pass) */
    int end;         /* the end of the table: start the next pass at the start */
    int64_t mine;    /* instances: rows of the deployment among those walked */
} ax_retention_batch_t;

/* Walk the next `walk` instances (at least `batch`) with id > after_id, in
 * id order, every deployment's (a walk of the primary key); of the first
 * `batch` of `deployment` among them delete those FINISHED more than keep_ms ago whose result is published,
 * that nothing live still needs: no child (shard, probe) live
 * or unpublished, no live parent, no running flow run, not held, not in a
 * Kafka transaction being confirmed. Nothing is deleted unless `lease` is
 * still the current leader lease. The next cursor (last_id) is the last row
 * examined: the walk's last, or the deployment's `batch`-th when the walk
 * held more of them. */
int ax_store_retention_instances(ax_pg_t *pg, const ax_lease_key_t *lease,
                                 const char *deployment, int64_t after_id, int64_t keep_ms,
                                 int64_t batch, int64_t walk, ax_retention_batch_t *ret,
                                 char *errbuf, size_t errlen);

/* Examine up to `batch` fire-ledger rows of `deployment`'s jobs after
 * (after_job, after_ms), in primary-key order, and delete those decided more
 * than keep_ms ago that are not their job's latest row (the latest is what
 * the trigger resumes the schedule and its misfire and overlap decisions
 * from). */
int ax_store_retention_ledger(ax_pg_t *pg, const ax_lease_key_t *lease, const char *deployment,
                              int64_t after_job, int64_t after_ms, int64_t keep_ms,
                              int64_t batch, ax_retention_batch_t *ret, char *errbuf,
                              size_t errlen);

#endif
