/* idem.c — the idempotency_claim table (store family "idem"); see ax/idem.h. */
#include "ax/idem.h"

#include <string.h>

#include "store_int.h"

/* Insert, or read the existing owner, in one round trip. */
AX_STMT(st_claim, "idem.claim",
        "WITH ins AS (INSERT INTO idempotency_claim (scope, key, instance_id)"
        "  VALUES ($1, $2, $3::bigint) ON CONFLICT DO NOTHING RETURNING instance_id)"
        " SELECT instance_id FROM ins"
        " UNION ALL SELECT instance_id FROM idempotency_claim"
        "  WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM ins)");

int ax_idem_claim(ax_pg_t *pg, const char *scope, const char *key, int64_t instance_id,
                  int64_t *ret_owner, char *errbuf, size_t errlen) {
    if (!key || !*key || strlen(key) > 512)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "idempotency key must be 1 to 512 bytes");
    ax_num_t id;
    const char *p[] = {scope ? scope : "", key, ax_num(&id, instance_id)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_claim, 3, p, NULL, NULL, &r, errbuf, errlen);
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
