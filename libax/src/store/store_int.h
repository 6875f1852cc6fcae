/*
 * store_int.h — private to libax/src/store: how a family file declares and
 * runs its statements. Nothing outside libax/src/store includes this.
 *
 *   AX_STMT(st_claim, "instance.claim", "UPDATE instance_state ...");
 *   ax_num_t n1;
 *   const char *p[] = {ax_num(&n1, id)};
 *   PGresult *r;
 *   int rc = ax_stmt_run(pg, &st_claim, 1, p, NULL, NULL, &r, err, errlen);
 *
 * A statement is prepared on a connection the first time it runs there
 * (and again after a reconnect); its text never changes at run time, so
 * every optional filter is a parameter that may be NULL.
 */
#ifndef AX_STORE_INT_H
#define AX_STORE_INT_H

#include <libpq-fe.h>
#include <stdint.h>

#include "ax/common.h"
#include "adapters/pg_raw.h"
#include "ax/store.h"

typedef struct ax_stmt {
    const char *name;
    const char *sql;
    int id; /* 1.., assigned on first run */
    uint64_t calls, rows, errors, total_us, max_us; /* updated atomically */
} ax_stmt_t;

#define AX_STMT(ident, name_, sql_) static ax_stmt_t ident = {.name = (name_), .sql = (sql_)}

/* Run statement `st` with text parameters (NULL = SQL NULL); `formats`
 * may give 1 for binary parameters with `lengths`. On success *ret_res (if
 * non-NULL) receives the result, which the caller PQclear()s. */
int ax_stmt_run(ax_pg_t *pg, ax_stmt_t *st, int nparams, const char *const *params,
                const int *lengths, const int *formats, PGresult **ret_res, char *errbuf,
                size_t errlen);

/* Text form of an integer parameter, in caller storage. */
typedef struct ax_num {
    char s[24];
} ax_num_t;
const char *ax_num(ax_num_t *n, int64_t v);

/* Column readers: ax_pg_int (0 if NULL) is in ax/pg.h for now. */
const char *ax_pg_str(const PGresult *r, int row, int col); /* NULL if NULL */
char *ax_pg_strdup(const PGresult *r, int row, int col);    /* malloc'd; NULL if NULL */
int ax_pg_bool(const PGresult *r, int row, int col);        /* 1 for 't' */

/* Adapter internals the runner needs (libax/src/adapters/pg.c). */
unsigned char *ax_pg_prep_slot(ax_pg_t *pg, int id);
int ax_pg_classify(const PGresult *r, PGconn *conn);
void ax_pg_mark_down(ax_pg_t *pg);

#endif
