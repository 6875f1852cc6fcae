/*
 * legacy_sql.c — transitional: the statement runner that exits on error,
 * for the axctl files not yet on the store (instance.c, flow.c, fleet.c,
 * dlq.c). Deleted once they call store functions (issue #12).
 */
#include <stdio.h>
#include <stdlib.h>

#include "axctl.h"

PGresult *q(ax_pg_t *pg, const char *sql, int n, const char *const *p) {
    char err[1024];
    PGresult *r;
    if (ax_pg_exec(pg, sql, n, p, NULL, NULL, &r, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        exit(1);
    }
    return r;
}

void print_rows(PGresult *r) {
    for (int i = 0; i < PQntuples(r); i++)
        puts(PQgetvalue(r, i, 0));
}
