/* idem.c — see ax/idem.h. */
#include "ax/idem.h"

#include <stdio.h>
#include <string.h>

#include "ax/common.h"

int ax_idem_claim(ax_pg_t *pg, const char *scope, const char *key, int64_t instance_id,
                  int64_t *ret_owner, char *errbuf, size_t errlen) {
    if (!key || !*key || strlen(key) > 512)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "idempotency key must be 1 to 512 bytes");
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)instance_id);
    const char *p[] = {scope ? scope : "", key, id};
    PGresult *r;
    /* Insert, or read the existing owner, in one round trip. */
    int rc = ax_pg_exec(pg,
                        "WITH ins AS (INSERT INTO idempotency_claim (scope, key, instance_id)"
                        "  VALUES ($1, $2, $3::bigint) ON CONFLICT DO NOTHING RETURNING instance_id)"
                        " SELECT instance_id FROM ins"
                        " UNION ALL SELECT instance_id FROM idempotency_claim"
                        "  WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM ins)",
                        3, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (PQntuples(r) != 1) {
        /* the other claimer's insert is not visible to our snapshot yet */
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "idempotency claim raced; try again");
    }
    int64_t owner = ax_pg_int(r, 0, 0);
    PQclear(r);
    if (ret_owner)
        *ret_owner = owner;
    return owner == instance_id ? AX_IDEM_NEW : AX_IDEM_TAKEN;
}
