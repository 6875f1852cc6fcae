/*
 * ax/pg.h — the PostgreSQL adapter: one connection per process, statements
 * only with parameters, failures classified as retriable or not.
 *
 * A statement that fails because the server is unreachable, restarting,
 * or reports a serialization failure / deadlock returns AX_ERR_IO: the
 * caller keeps its work and tries again later (ax_pg_ensure() reconnects).
 * So do errors saying the schema is not what the code expects (42xxx, e.g.
 * a migration not applied; 3F, 55, 58, XX): nothing is dead-lettered for
 * them. A unique violation returns AX_ERR_CONFLICT; other SQL errors (bad
 * data: 22xxx, 23xxx, ...) AX_ERR_INVALID.
 */
#ifndef AX_PG_H
#define AX_PG_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "ax/conf.h"

typedef struct ax_pg ax_pg_t;

/* Checks every pg.* key against libpq's keywords; nothing is connected yet. */
ax_pg_t *ax_pg_new(const ax_conf_t *conf, const char *application_name, char *errbuf,
                   size_t errlen);
void ax_pg_destroy(ax_pg_t *pg);

/* One connection attempt if not connected (or the connection is bad).
 * Returns 0, or AX_ERR_IO with the reason (no password in it). */
int ax_pg_ensure(ax_pg_t *pg, char *errbuf, size_t errlen);

/* 1 if the last ax_pg_ensure() made a new connection (session state such
 * as advisory locks or LISTEN must be set up again). Clears the flag. */
int ax_pg_reconnected(ax_pg_t *pg);

PGconn *ax_pg_conn(ax_pg_t *pg);

/* Run one statement with text parameters (NULL = SQL NULL); `formats` may
 * be NULL (all text) or give 1 for binary parameters with `lengths`.
 * On success *ret_res (if ret_res is non-NULL) receives the result, which
 * the caller PQclear()s. */
int ax_pg_exec(ax_pg_t *pg, const char *sql, int nparams, const char *const *params,
               const int *lengths, const int *formats, PGresult **ret_res, char *errbuf,
               size_t errlen);

/* Convenience wrappers for transactions (BEGIN/COMMIT/ROLLBACK). */
int ax_pg_begin(ax_pg_t *pg, char *errbuf, size_t errlen);
int ax_pg_commit(ax_pg_t *pg, char *errbuf, size_t errlen);
void ax_pg_rollback(ax_pg_t *pg);

/* Add `delta` to counter `name`: kept for its callers, defined by the store
 * as ax_store_counter_add (ax/store_counter.h), which new code calls. */
int ax_pg_count(ax_pg_t *pg, const char *name, int64_t delta);

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

/* Parse the text form of an int8 column; 0 if NULL. */
int64_t ax_pg_int(const PGresult *r, int row, int col);

#endif
