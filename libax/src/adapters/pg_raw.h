/*
 * pg_raw.h — private to libax (the store, and the benchmark programs that
 * set up their own rows): the PostgreSQL connection's libpq handle, an
 * unnamed statement runner, array literals and a column reader. Services
 * and axctl use the store's functions instead (ax/store_*.h).
 */
#ifndef AX_PG_RAW_H
#define AX_PG_RAW_H

#include <libpq-fe.h>

#include "ax/pg.h"

PGconn *ax_pg_conn(ax_pg_t *pg);

/* Run one statement with text parameters (NULL = SQL NULL); `formats` may
 * be NULL (all text) or give 1 for binary parameters with `lengths`.
 * On success *ret_res (if ret_res is non-NULL) receives the result, which
 * the caller PQclear()s. */
int ax_pg_exec(ax_pg_t *pg, const char *sql, int nparams, const char *const *params,
               const int *lengths, const int *formats, PGresult **ret_res, char *errbuf,
               size_t errlen);

/* Array literals for array parameters ($1::bigint[], $1::text[]).
 * The buffer grows as needed; free with ax_strbuf_free(). */
typedef struct ax_strbuf {
    char *s;
    size_t len, cap;
} ax_strbuf_t;
int ax_strbuf_add(ax_strbuf_t *b, const char *s, size_t n);
void ax_strbuf_free(ax_strbuf_t *b);
/* Start "{", add elements, end "}". Text elements are quoted and escaped;
 * a NULL text element is written as NULL. */
int ax_pgarr_begin(ax_strbuf_t *b);
int ax_pgarr_int(ax_strbuf_t *b, int64_t v);
int ax_pgarr_text(ax_strbuf_t *b, const char *s);
int ax_pgarr_end(ax_strbuf_t *b);
/* "{v0,v1,...}" of v[0..n) in b from its start; AX_ERR_NOMEM (b freed) if
 * it could not grow. */
int ax_pgarr_ints(ax_strbuf_t *b, const int64_t *v, size_t n);

/* Parse the text form of an int8 column; 0 if NULL. */
int64_t ax_pg_int(const PGresult *r, int row, int col);

#endif
