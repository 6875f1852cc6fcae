/*
 * instance_ops.c — operators' actions on instances (ax/store_instance_ops.h).
 */
#include <stdlib.h>

#include "ax/store_instance_ops.h"
#include "store_int.h"

enum { CANCEL_ID, CANCEL_STATE, CANCEL_ATTEMPT, CANCEL_TRACE, CANCEL_WORKER };
AX_STMT(st_cancel_request, "instance_ops.cancel_request",
        "UPDATE instance_state s SET cancel_requested_at = coalesce(cancel_requested_at, now())"
        " WHERE id = ANY($1::bigint[]) AND state <> 'FINISHED'"
        " RETURNING id, state, attempt,"
        "  (SELECT trace_id FROM instance_def d WHERE d.id = s.id), coalesce(worker, '')");

static int nomem(char *errbuf, size_t errlen) {
    return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "instance_ops.cancel_request: out of memory");
}

void ax_cancel_rows_free(ax_cancel_row_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++) {
        free(rows[i].state);
        free(rows[i].trace_id);
        free(rows[i].worker);
    }
    free(rows);
}

static int cancel_rows(PGresult *r, ax_cancel_row_t **ret_rows, size_t *ret_n, char *errbuf,
                       size_t errlen) {
    size_t n = (size_t)PQntuples(r);
    ax_cancel_row_t *rows = n ? calloc(n, sizeof *rows) : NULL;
    if (n && !rows)
        return nomem(errbuf, errlen);
    for (size_t i = 0; i < n; i++) {
        int row = (int)i;
        rows[i] = (ax_cancel_row_t){
            .id = ax_pg_int(r, row, CANCEL_ID),
            .state = ax_pg_strdup(r, row, CANCEL_STATE),
            .attempt = (int32_t)ax_pg_int(r, row, CANCEL_ATTEMPT),
            .trace_id = ax_pg_strdup(r, row, CANCEL_TRACE),
            .worker = ax_pg_strdup(r, row, CANCEL_WORKER),
        };
        if (!rows[i].state || !rows[i].trace_id || !rows[i].worker) {
            ax_cancel_rows_free(rows, i + 1);
            return nomem(errbuf, errlen);
        }
    }
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

int ax_store_instance_cancel_request(ax_pg_t *pg, const int64_t *ids, size_t n,
                                     ax_cancel_row_t **ret_rows, size_t *ret_n, char *errbuf,
                                     size_t errlen) {
    ax_strbuf_t arr = {0};
    if (ax_pgarr_ints(&arr, ids, n) < 0)
        return nomem(errbuf, errlen);
    const char *p[] = {arr.s};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_cancel_request, 1, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&arr);
    if (rc < 0)
        return rc;
    rc = cancel_rows(r, ret_rows, ret_n, errbuf, errlen);
    PQclear(r);
    return rc;
}
