/*
 * stmt.c — running the store's named statements: prepared once per
 * connection, counted and timed by name.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

#define AX_STMT_MAX 1024

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static ax_stmt_t *g_reg[AX_STMT_MAX];
static int g_nreg;

/* The statement's id, registering it on its first run in this process. */
static int stmt_id(ax_stmt_t *st) {
    int id = __atomic_load_n(&st->id, __ATOMIC_ACQUIRE);
    if (id > 0)
        return id;
    pthread_mutex_lock(&g_reg_mu);
    id = st->id;
    if (id == 0 && g_nreg < AX_STMT_MAX) {
        g_reg[g_nreg] = st;
        id = g_nreg + 1;
        __atomic_store_n(&g_nreg, id, __ATOMIC_RELEASE);
        __atomic_store_n(&st->id, id, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_reg_mu);
    return id;
}

static __thread int64_t t_exec_m0, t_exec_m1; /* ax_store_last_exec */

void ax_store_last_exec(int64_t *ret_mono0, int64_t *ret_mono1) {
    *ret_mono0 = t_exec_m0;
    *ret_mono1 = t_exec_m1;
}

static uint64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void chomp(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    for (char *p = s; *p; p++)
        if (*p == '\n')
            *p = ' ';
}

static void account(ax_stmt_t *st, uint64_t t0, uint64_t rows, int failed) {
    uint64_t d = now_us() - t0;
    __atomic_fetch_add(&st->calls, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&st->rows, rows, __ATOMIC_RELAXED);
    __atomic_fetch_add(&st->total_us, d, __ATOMIC_RELAXED);
    if (failed)
        __atomic_fetch_add(&st->errors, 1, __ATOMIC_RELAXED);
    uint64_t m = __atomic_load_n(&st->max_us, __ATOMIC_RELAXED);
    while (d > m &&
           !__atomic_compare_exchange_n(&st->max_us, &m, d, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* 0A000 "cached plan must not change result type" (a migration changed a
 * table under a prepared statement) and 26000 (the statement is gone, e.g.
 * DISCARD ALL): prepare again once. */
static int stale_plan(const PGresult *r) {
    const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    return s && (strcmp(s, "0A000") == 0 || strcmp(s, "26000") == 0);
}

/* A stale plan inside the caller's transaction: that transaction is
 * aborted and only the caller can end it, so the statement cannot be
 * prepared again here. It is no fault in the data (classified as such, the
 * callback would try its batch one result at a time and dead-letter good
 * results): the session is closed, which ends the transaction and forgets
 * every statement it prepared, and the call fails as after a lost
 * connection (AX_ERR_IO: the caller rolls back and retries on a new
 * session). */
static int stale_in_txn(ax_pg_t *pg, PGresult *r, const ax_stmt_t *st, char *errbuf,
                        size_t errlen) {
    ax_seterr(errbuf, errlen, AX_ERR_IO, "PostgreSQL (%s, stale plan in a transaction): %s",
              st->name, PQresultErrorMessage(r));
    if (errbuf)
        chomp(errbuf);
    PQclear(r);
    ax_pg_drop(pg);
    return AX_ERR_IO;
}

static int fail(ax_pg_t *pg, PGconn *conn, PGresult *r, const char *what, const ax_stmt_t *st,
                char *errbuf, size_t errlen) {
    int rc = ax_pg_classify(r, conn);
    ax_seterr(errbuf, errlen, rc, "PostgreSQL (%s%s): %s", st->name, what,
              r ? PQresultErrorMessage(r) : PQerrorMessage(conn));
    if (errbuf)
        chomp(errbuf);
    PQclear(r);
    if (rc == AX_ERR_IO && PQstatus(conn) != CONNECTION_OK)
        ax_pg_mark_down(pg);
    return rc;
}

/* A generic plan is made once, with the tables as they are at its first
 * execution, and kept until an ANALYZE of one of them: made on empty,
 * vacuumed tables (a fresh or restored database, where a deployment
 * starts) it reads them sequentially, per row in a NOT EXISTS, however
 * large they have grown since (store_int.h, AX_STMT_GENERIC). So a generic
 * statement prepared db.replan.interval.ms ago is deallocated before it
 * runs, and its next execution plans it again. DEALLOCATE is not
 * transactional and may run inside the caller's transaction; if it fails
 * there the transaction is aborted, and the caller's batch fails as after
 * a lost connection (AX_ERR_IO: retried). 26000 (already gone: DISCARD
 * ALL) outside a transaction is no failure. */
static int replan(ax_pg_t *pg, PGconn *conn, const ax_stmt_t *st, const char *pname,
                  int64_t *prepared, char *errbuf, size_t errlen) {
    char sql[40];
    snprintf(sql, sizeof sql, "DEALLOCATE %s", pname);
    int in_txn = PQtransactionStatus(conn) != PQTRANS_IDLE;
    PGresult *r = PQexec(conn, sql);
    if (r && PQresultStatus(r) == PGRES_COMMAND_OK) {
        PQclear(r);
        *prepared = 0;
        return 0;
    }
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    int gone = state && strcmp(state, "26000") == 0;
    if (gone)
        *prepared = 0;
    if (gone && !in_txn) {
        PQclear(r);
        return 0;
    }
    int rc = fail(pg, conn, r, ", deallocate", st, errbuf, errlen);
    return rc == AX_ERR_INVALID || rc == AX_ERR_CONFLICT ? AX_ERR_IO : rc;
}

/* A run's start: connected, st's id and prepared name (pname, 16 bytes),
 * the session's plan mode for it. 0 or <0 (counted as st's error). */
static int run_start(ax_pg_t *pg, ax_stmt_t *st, uint64_t t0, int *ret_id, char *pname,
                     char *errbuf, size_t errlen) {
    int rc = ax_pg_ensure(pg, errbuf, errlen);
    if (rc == 0) {
        *ret_id = stmt_id(st);
        snprintf(pname, 16, "ax%d", *ret_id);
        rc = ax_pg_plan(pg, st->generic, errbuf, errlen);
    }
    if (rc < 0)
        account(st, t0, 0, 1);
    return rc;
}

/* st prepared on the connection under pname if its slot says it is not. */
static int prepare(ax_pg_t *pg, PGconn *conn, ax_stmt_t *st, const char *pname, int nparams,
                   int64_t *prepared, uint64_t t0, char *errbuf, size_t errlen) {
    if (*prepared)
        return 0;
    PGresult *pr = PQprepare(conn, pname, st->sql, nparams, NULL);
    if (!pr || PQresultStatus(pr) != PGRES_COMMAND_OK) {
        account(st, t0, 0, 1);
        return fail(pg, conn, pr, ", prepare", st, errbuf, errlen);
    }
    PQclear(pr);
    int64_t now = ax_mono_ms();
    *prepared = now > 0 ? now : 1;
    return 0;
}

/* After a stale plan: every statement of the session forgotten, here and
 * in the store's slots. */
static void forget_prepared(ax_pg_t *pg, PGconn *conn) {
    PQclear(PQexec(conn, "DEALLOCATE ALL"));
    for (int i = 1, n = __atomic_load_n(&g_nreg, __ATOMIC_ACQUIRE); i <= n; i++) {
        int64_t *s = ax_pg_prep_slot(pg, i);
        if (s)
            *s = 0;
    }
}

int ax_stmt_run(ax_pg_t *pg, ax_stmt_t *st, int nparams, const char *const *params,
                const int *lengths, const int *formats, PGresult **ret_res, char *errbuf,
                size_t errlen) {
    uint64_t t0 = now_us();
    int id;
    char pname[16];
    int rc = run_start(pg, st, t0, &id, pname, errbuf, errlen);
    if (rc < 0)
        return rc;
    PGconn *conn = ax_pg_conn(pg);
    for (int round = 0;; round++) {
        int64_t *prepared = ax_pg_prep_slot(pg, id);
        if (!prepared) {
            account(st, t0, 0, 1);
            return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st->name);
        }
        int64_t every = st->generic ? ax_pg_replan_ms(pg) : 0;
        if (*prepared && every > 0 && ax_mono_ms() - *prepared >= every &&
            PQtransactionStatus(conn) != PQTRANS_INERROR) {
            rc = replan(pg, conn, st, pname, prepared, errbuf, errlen);
            if (rc < 0) {
                account(st, t0, 0, 1);
                return rc;
            }
        }
        if ((rc = prepare(pg, conn, st, pname, nparams, prepared, t0, errbuf, errlen)) < 0)
            return rc;
        t_exec_m0 = ax_mono_ms();
        PGresult *r = PQexecPrepared(conn, pname, nparams, params, lengths, formats, 0);
        t_exec_m1 = ax_mono_ms();
        ExecStatusType es = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
        if (es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK) {
            uint64_t rows = es == PGRES_TUPLES_OK ? (uint64_t)PQntuples(r)
                                                  : strtoull(PQcmdTuples(r), NULL, 10);
            account(st, t0, rows, 0);
            if (ret_res)
                *ret_res = r;
            else
                PQclear(r);
            return 0;
        }
        if (round == 0 && stale_plan(r) && PQtransactionStatus(conn) == PQTRANS_IDLE) {
            PQclear(r);
            forget_prepared(pg, conn);
            continue;
        }
        account(st, t0, 0, 1);
        if (stale_plan(r) && PQtransactionStatus(conn) == PQTRANS_INERROR)
            return stale_in_txn(pg, r, st, errbuf, errlen);
        return fail(pg, conn, r, "", st, errbuf, errlen);
    }
}

/* One pipeline: [BEGIN,] st, [COMMIT,] sync. 0 with *ret the statement's
 * result, or the first failed command's result in *ret_fail and its index
 * in *ret_which (0 BEGIN, 1 st, 2 COMMIT; the rest of the pipeline is
 * skipped by the server); <0 when the pipeline could not be sent or read
 * to its end (the caller drops the connection: libpq may still be in
 * pipeline mode with commands queued). */
static int framed_once(PGconn *conn, int begin, const char *pname, int nparams,
                       const char *const *params, int commit, PGresult **ret,
                       PGresult **ret_fail, int *ret_which) {
    *ret = *ret_fail = NULL;
    if (!PQenterPipelineMode(conn))
        return AX_ERR_IO;
    int sent = (!begin || PQsendQueryParams(conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0)) &&
               PQsendQueryPrepared(conn, pname, nparams, params, NULL, NULL, 0) &&
               (!commit || PQsendQueryParams(conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0)) &&
               PQpipelineSync(conn);
    /* every command's result, then the sync's: the first failure kept */
    int want = sent ? (begin != 0) + 1 + (commit != 0) : 0, lost = !sent;
    for (int k = 0; k < want; k++) {
        PGresult *r = PQgetResult(conn);
        if (!r) {
            lost = 1;
            break;
        }
        ExecStatusType es = PQresultStatus(r);
        if (es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK) {
            if (k == (begin != 0) && !*ret)
                *ret = r;
            else
                PQclear(r);
        } else if (es != PGRES_PIPELINE_ABORTED && !*ret_fail) {
            *ret_fail = r;
            *ret_which = k + (begin == 0);
        } else {
            PQclear(r);
        }
        PGresult *end;
        while ((end = PQgetResult(conn)) != NULL) /* the command's end */
            PQclear(end);
    }
    if (!lost) {
        PGresult *r = PQgetResult(conn); /* PGRES_PIPELINE_SYNC */
        lost = !r || PQresultStatus(r) != PGRES_PIPELINE_SYNC;
        PQclear(r);
    }
    if (lost || !PQexitPipelineMode(conn)) {
        PQclear(*ret);
        PQclear(*ret_fail);
        *ret = *ret_fail = NULL;
        return AX_ERR_IO;
    }
    if (*ret_fail) {
        PQclear(*ret);
        *ret = NULL;
    }
    return 0;
}

int ax_stmt_run_framed(ax_pg_t *pg, int begin, ax_stmt_t *st, int nparams,
                       const char *const *params, int commit, PGresult **ret_res, char *errbuf,
                       size_t errlen) {
    uint64_t t0 = now_us();
    int id;
    char pname[16];
    /* the plan mode: a session SET before a BEGIN, a SET LOCAL inside the
     * transaction, as for ax_stmt_run */
    int rc = run_start(pg, st, t0, &id, pname, errbuf, errlen);
    if (rc < 0)
        return rc;
    PGconn *conn = ax_pg_conn(pg);
    for (int round = 0;; round++) {
        int64_t *prepared = ax_pg_prep_slot(pg, id);
        if (!prepared) {
            account(st, t0, 0, 1);
            return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st->name);
        }
        if ((rc = prepare(pg, conn, st, pname, nparams, prepared, t0, errbuf, errlen)) < 0)
            return rc;
        PGresult *r = NULL, *bad = NULL;
        int which = 1;
        t_exec_m0 = ax_mono_ms();
        rc = framed_once(conn, begin, pname, nparams, params, commit, &r, &bad, &which);
        t_exec_m1 = ax_mono_ms();
        if (begin || commit)
            ax_pg_txn_edge(pg);
        if (rc == 0 && !bad) {
            uint64_t rows = PQresultStatus(r) == PGRES_TUPLES_OK
                                ? (uint64_t)PQntuples(r)
                                : strtoull(PQcmdTuples(r), NULL, 10);
            account(st, t0, rows, 0);
            if (ret_res)
                *ret_res = r;
            else
                PQclear(r);
            return 0;
        }
        if (rc < 0) {
            account(st, t0, 0, 1);
            ax_seterr(errbuf, errlen, AX_ERR_IO, "PostgreSQL (%s, pipeline): %s", st->name,
                      PQerrorMessage(conn));
            ax_pg_drop(pg); /* a half-read pipeline: a new session */
            return AX_ERR_IO;
        }
        /* a stale plan in a transaction this call began: that transaction
         * rolled back, prepared again, the whole tried once more */
        if (round == 0 && begin && !commit && which == 1 && stale_plan(bad)) {
            PQclear(bad);
            PGresult *rb = PQexec(conn, "ROLLBACK");
            int rolled = rb && PQresultStatus(rb) == PGRES_COMMAND_OK;
            PQclear(rb);
            if (!rolled) {
                account(st, t0, 0, 1);
                ax_seterr(errbuf, errlen, AX_ERR_IO, "PostgreSQL (%s, rollback): %s", st->name,
                          PQerrorMessage(conn));
                ax_pg_drop(pg);
                return AX_ERR_IO;
            }
            forget_prepared(pg, conn);
            continue;
        }
        account(st, t0, 0, 1);
        if (which == 1 && stale_plan(bad) && PQtransactionStatus(conn) == PQTRANS_INERROR)
            return stale_in_txn(pg, bad, st, errbuf, errlen);
        return fail(pg, conn, bad, which == 0 ? ", begin" : which == 2 ? ", commit" : "", st,
                    errbuf, errlen);
    }
}

size_t ax_store_stats(ax_store_stat_t *out, size_t max) {
    pthread_mutex_lock(&g_reg_mu);
    size_t n = (size_t)g_nreg;
    for (size_t i = 0; i < n && i < max; i++) {
        const ax_stmt_t *st = g_reg[i];
        out[i] = (ax_store_stat_t){
            .name = st->name,
            .calls = __atomic_load_n(&st->calls, __ATOMIC_RELAXED),
            .rows = __atomic_load_n(&st->rows, __ATOMIC_RELAXED),
            .errors = __atomic_load_n(&st->errors, __ATOMIC_RELAXED),
            .total_us = __atomic_load_n(&st->total_us, __ATOMIC_RELAXED),
            .max_us = __atomic_load_n(&st->max_us, __ATOMIC_RELAXED),
        };
    }
    pthread_mutex_unlock(&g_reg_mu);
    return n;
}

const char *ax_num(ax_num_t *n, int64_t v) {
    snprintf(n->s, sizeof n->s, "%lld", (long long)v);
    return n->s;
}

const char *ax_pg_str(const PGresult *r, int row, int col) {
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

char *ax_pg_strdup(const PGresult *r, int row, int col) {
    return PQgetisnull(r, row, col) ? NULL : strdup(PQgetvalue(r, row, col));
}

int ax_pg_bool(const PGresult *r, int row, int col) {
    return !PQgetisnull(r, row, col) && PQgetvalue(r, row, col)[0] == 't';
}
