/*
 * ax/store_dlq.h — what replaying a dead-letter record needs from
 * PostgreSQL (axctl dlq replay; the REST API next): whether an idempotency
 * key already made an instance (the trigger's submission table, keyed
 * "idem:<key>"), and the instance a final failure names, to resubmit it.
 *
 * Functions return 0 or an ax error (ax/common.h): AX_ERR_NOTFOUND nothing
 * of that key or id, AX_ERR_IO retry later; the reason in errbuf. Rows are
 * the caller's: free them with the matching _clear (accepts zeroed rows).
 */
#ifndef AX_STORE_DLQ_H
#define AX_STORE_DLQ_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t;

/* The instance a submission with an idempotency key made. */
typedef struct ax_dlq_replayed {
    int64_t instance_id;
    char *trace_id; /* NULL if the instance is gone */
    char *state;    /* NULL if the instance is gone */
} ax_dlq_replayed_t;

/* The instance that idempotency key `idem` made; AX_ERR_NOTFOUND if none. */
int ax_store_dlq_replayed(ax_pg_t *pg, const char *idem, ax_dlq_replayed_t *ret, char *errbuf,
                          size_t errlen);
void ax_dlq_replayed_clear(ax_dlq_replayed_t *r);

/* What a new submission of an instance's job needs. */
typedef struct ax_dlq_instance {
    char *job;         /* NULL: an inline command (no job to resubmit) */
    uint8_t *payload;  /* payload_len bytes (never NULL on success) */
    size_t payload_len;
    int64_t timeout_ms;
    int32_t priority;
    char *trace_id;
} ax_dlq_instance_t;

/* Instance `id`; AX_ERR_NOTFOUND if it no longer exists. */
int ax_store_dlq_instance(ax_pg_t *pg, int64_t id, ax_dlq_instance_t *ret, char *errbuf,
                          size_t errlen);
void ax_dlq_instance_clear(ax_dlq_instance_t *r);

#endif
