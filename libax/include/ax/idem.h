/*
 * ax/idem.h — idempotency claims for handlers: a business key is claimed
 * once per scope (the job name; "" for inline commands) in PostgreSQL
 * (table idempotency_claim, primary key (scope, key)).
 *
 * The instance that claimed a key may claim it again — its own retries go
 * ahead — and every other instance is told the key is taken. Used by the
 * plugin host API (ax/plugin.h), `axctl idem claim`, and documented for HTTP
 * handlers (which receive the instance's key as the Idempotency-Key header).
 */
#ifndef AX_IDEM_H
#define AX_IDEM_H

#include <stddef.h>
#include <stdint.h>

#include "ax/pg.h"

enum {
    AX_IDEM_NEW = 1,     /* claimed now, or earlier by this same instance */
    AX_IDEM_TAKEN = 0,   /* claimed by another instance */
};

/* Returns AX_IDEM_NEW, AX_IDEM_TAKEN, or <0 (AX_ERR_IO retriable,
 * AX_ERR_INVALID for an empty or over-long key). */
int ax_idem_claim(ax_pg_t *pg, const char *scope, const char *key, int64_t instance_id,
                  int64_t *ret_owner, char *errbuf, size_t errlen);

#endif
