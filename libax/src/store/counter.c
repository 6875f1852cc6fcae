/*
 * counter.c — the ax_counter table (ax/store_counter.h).
 */
#include <stdlib.h>

#include "ax/store_counter.h"
#include "store_int.h"

AX_STMT(st_add, "counter.add",
        "INSERT INTO ax_counter (name, value) VALUES ($1, $2::bigint) "
        "ON CONFLICT (name) DO UPDATE SET value = ax_counter.value + EXCLUDED.value, "
        "updated_at = now()");

enum { LIST_NAME, LIST_VALUE };
AX_STMT(st_list, "counter.list", "SELECT name, value FROM ax_counter ORDER BY name");

int ax_store_counter_add(ax_pg_t *pg, const char *name, int64_t delta, char *errbuf,
                         size_t errlen) {
    ax_num_t d;
    const char *p[] = {name, ax_num(&d, delta)};
    return ax_stmt_run(pg, &st_add, 2, p, NULL, NULL, NULL, errbuf, errlen);
}

int ax_store_counter_list(ax_pg_t *pg, ax_counter_t **ret_rows, size_t *ret_n, char *errbuf,
                          size_t errlen) {
    PGresult *r;
    *ret_rows = NULL;
    *ret_n = 0;
    int rc = ax_stmt_run(pg, &st_list, 0, NULL, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t n = (size_t)PQntuples(r);
    ax_counter_t *rows = n ? calloc(n, sizeof *rows) : NULL;
    if (n && !rows) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "counter.list: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        rows[i].name = ax_pg_strdup(r, (int)i, LIST_NAME);
        rows[i].value = ax_pg_int(r, (int)i, LIST_VALUE);
        if (!rows[i].name) {
            PQclear(r);
            ax_counters_free(rows, n);
            return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "counter.list: out of memory");
        }
    }
    PQclear(r);
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

void ax_counters_free(ax_counter_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++)
        free(rows[i].name);
    free(rows);
}
