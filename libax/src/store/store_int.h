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

#include "ax/codec.h"
#include "ax/common.h"
#include "adapters/pg_raw.h"
#include "ax/store.h"

typedef struct ax_stmt {
    const char *name;
    const char *sql;
    int id; /* 1.., assigned on first run */
    int generic; /* AX_STMT_GENERIC: run with a cached generic plan */
    uint64_t calls, rows, errors, total_us, max_us; /* updated atomically */
} ax_stmt_t;

#define AX_STMT(ident, name_, sql_) static ax_stmt_t ident = {.name = (name_), .sql = (sql_)}
/* A statement whose plan does not depend on its parameters' values or on
 * the tables' statistics of the moment (a fixed shape: primary-key and
 * unique-index lookups driven by its arrays), planned once per session
 * instead of at every execution: the session's plan_cache_mode is switched
 * to force_generic_plan before it runs and back before an AX_STMT runs
 * (ax_pg_plan: a SET, or SET LOCAL in a transaction block, only when the
 * mode changes). Planning cost more than executing
 * for the small batches of a moderate load (dispatch.ingest: 1.4 ms of
 * planning a batch of ~40 rows, 2.3 ms of execution; BENCHMARKS.md,
 * "Issue #13: planning on the hot path"). Declare a statement generic only
 * after EXPLAIN EXECUTE under force_generic_plan shows the plan it gets
 * with stale, fresh and empty-table statistics, and after the running
 * service measured it (pg_stat_statements, a benchmark A/B): the finish,
 * the claim and the due scan each got plans 10-400 times slower generic,
 * and run.start, whose EXPLAIN showed the primary-key plan every time, ran
 * three times slower on the plan its executor's session cached: a generic
 * plan is made once, with the table as it is then, and planned on an empty
 * vacuumed table (where a run starts) it is a sequential scan, kept until
 * an ANALYZE invalidates it (BENCHMARKS.md, "Issue #13: pipelining and
 * planning tried in the eleventh session"). Check the plan on an empty,
 * vacuumed table too. A generic statement is prepared again on its
 * connection every db.replan.interval.ms (stmt.c, replan), so a plan made
 * on empty tables lasts that long at most: dispatch.ingest's, made so,
 * read submission whole for each Kafka position (6.7 ms a row against
 * 24 us with 200,000 keys; BENCHMARKS.md, "Issue #13: the ingest's plan
 * made again"). */
#define AX_STMT_GENERIC(ident, name_, sql_)                                                    \
    static ax_stmt_t ident = {.name = (name_), .sql = (sql_), .generic = 1}

/* Run statement `st` with text parameters (NULL = SQL NULL); `formats`
 * may give 1 for binary parameters with `lengths`. On success *ret_res (if
 * non-NULL) receives the result, which the caller PQclear()s. */
int ax_stmt_run(ax_pg_t *pg, ax_stmt_t *st, int nparams, const char *const *params,
                const int *lengths, const int *formats, PGresult **ret_res, char *errbuf,
                size_t errlen);

/* ax_stmt_run with "BEGIN" sent before it (begin) and/or "COMMIT" after
 * it (commit), in one libpq pipeline: one round trip for the two or three
 * (the callback's finish, BENCHMARKS.md "Issue #13: the twenty-fifth
 * session"). Statement `st` must be an AX_STMT (custom plans). With commit,
 * a failure of st leaves the transaction aborted (the COMMIT is not run):
 * the caller rolls back, as after ax_stmt_run. With begin and no commit,
 * the transaction is open on success, and aborted on failure (the caller
 * rolls back), except that a stale plan is prepared again and the whole
 * tried once more, as ax_stmt_run does outside a transaction. A lost
 * connection, or a pipeline that could not be read to its end, is
 * AX_ERR_IO and closes the session (the next call connects again). The
 * statement's time in the store's metrics includes its BEGIN or COMMIT (a
 * COMMIT's WAL flush), and a failed BEGIN or COMMIT counts as its error,
 * its message naming which ("outcome.jobs, commit"). */
int ax_stmt_run_framed(ax_pg_t *pg, int begin, ax_stmt_t *st, int nparams,
                       const char *const *params, int commit, PGresult **ret_res, char *errbuf,
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

/* A result as the results topic carries it, from AX_RESULT_NCOLS columns
 * of row `row` starting at col0 (AX_RESULT_COLS' order: job, outcome,
 * attempt, exit code, error class, error, output, trace id, idempotency
 * key, then nominal, scheduled, locked, running and finished in ms);
 * instance_id untouched. Read by the outbox's pending rows and by the
 * finish statement's carried results (outbox.c). 0 or AX_ERR_NOMEM. */
enum { AX_RESULT_NCOLS = 14 };
int ax__result_row(const PGresult *r, int row, int col0, ax_result_t *res);

/* Adapter internals the runner needs (libax/src/adapters/pg.c). The slot
 * of statement id on the connection: when it was prepared there
 * (ax_mono_ms, at least 1) or 0; NULL when out of memory. */
int64_t *ax_pg_prep_slot(ax_pg_t *pg, int id);
/* db.replan.interval.ms: an AX_STMT_GENERIC statement prepared this long
 * ago is prepared again before it runs (0 = never). */
int64_t ax_pg_replan_ms(const ax_pg_t *pg);
/* The session's plan_cache_mode made force_generic_plan (generic) or
 * force_custom_plan (0) for the next statement: SET LOCAL in a transaction
 * block, else SET; nothing when it is that already, in a failed
 * transaction, or when pg.options sets plan_cache_mode. */
int ax_pg_plan(ax_pg_t *pg, int generic, char *errbuf, size_t errlen);
int ax_pg_classify(const PGresult *r, PGconn *conn);
void ax_pg_mark_down(ax_pg_t *pg);
/* A transaction began or ended on the connection other than through
 * ax_pg_begin/commit/rollback (ax_stmt_run_framed): its SET LOCAL is gone. */
void ax_pg_txn_edge(ax_pg_t *pg);
/* Close the connection (a pipeline left in an unknown state): the next
 * ax_pg_ensure connects again. */
void ax_pg_drop(ax_pg_t *pg);

#endif
