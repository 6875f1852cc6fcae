/*
 * migrate.c — the schema migrations' bookkeeping (ax/store_migrate.h):
 * table ax_schema_migrations, the appliers' advisory lock, one migration
 * per transaction, and the services' start-up check. The migration files
 * themselves (embedded by cmake/migrations.cmake) are scripts of several
 * statements without parameters: they are run as they are (PQexec), the
 * only SQL here that is not a named statement.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/store_migrate.h"

#include "store_int.h"

/* The appliers' lock: one per database (every deployment sharing it shares
 * its schema). */
static const char lock_name[] = "ax.schema_migrations";

AX_STMT(st_exists, "migrate.exists", "SELECT to_regclass('ax_schema_migrations') IS NOT NULL");

AX_STMT(st_create, "migrate.create",
        "CREATE TABLE IF NOT EXISTS ax_schema_migrations ("
        "  version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())");

/* columns of migrate.list */
enum { LIST_VERSION, LIST_AT };
AX_STMT(st_list, "migrate.list",
        "SELECT version, (extract(epoch FROM applied_at) * 1000)::bigint"
        " FROM ax_schema_migrations ORDER BY version COLLATE \"C\"");

AX_STMT(st_newest, "migrate.newest",
        "SELECT max(version COLLATE \"C\") FROM ax_schema_migrations");

AX_STMT(st_lock, "migrate.lock", "SELECT pg_advisory_lock(hashtextextended($1, 0))");
AX_STMT(st_unlock, "migrate.unlock", "SELECT pg_advisory_unlock(hashtextextended($1, 0))");

AX_STMT(st_applied, "migrate.applied", "SELECT 1 FROM ax_schema_migrations WHERE version = $1");

/* A migration may take long (an index on a big table): no statement
 * timeout for the rest of its transaction; and its NOTICEs ("... does not
 * exist, skipping") are not for the operator's terminal. */
AX_STMT(st_settings, "migrate.settings",
        "SELECT set_config('statement_timeout', '0', true),"
        " set_config('client_min_messages', 'warning', true)");

AX_STMT(st_record, "migrate.record", "INSERT INTO ax_schema_migrations (version) VALUES ($1)");

static int table_exists(ax_pg_t *pg, int *ret, char *errbuf, size_t errlen) {
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_exists, 0, NULL, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    *ret = PQntuples(r) == 1 && ax_pg_bool(r, 0, 0);
    PQclear(r);
    return 0;
}

void ax_applied_free(ax_applied_t *v, size_t n) {
    for (size_t i = 0; v && i < n; i++)
        free(v[i].version);
    free(v);
}

int ax_store_migrate_applied(ax_pg_t *pg, ax_applied_t **ret_v, size_t *ret_n, char *errbuf,
                             size_t errlen) {
    *ret_v = NULL;
    *ret_n = 0;
    int exists;
    int rc = table_exists(pg, &exists, errbuf, errlen);
    if (rc < 0 || !exists)
        return rc;
    PGresult *r;
    rc = ax_stmt_run(pg, &st_list, 0, NULL, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t n = (size_t)PQntuples(r);
    ax_applied_t *v = calloc(n ? n : 1, sizeof *v);
    if (!v) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "applied migrations: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        v[i].version = ax_pg_strdup(r, (int)i, LIST_VERSION);
        v[i].applied_ms = ax_pg_int(r, (int)i, LIST_AT);
        if (!v[i].version) {
            PQclear(r);
            ax_applied_free(v, n);
            return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "applied migrations: out of memory");
        }
    }
    PQclear(r);
    *ret_v = v;
    *ret_n = n;
    return 0;
}

int ax_store_migrate_lock(ax_pg_t *pg, char *errbuf, size_t errlen) {
    const char *p[] = {lock_name};
    return ax_stmt_run(pg, &st_lock, 1, p, NULL, NULL, NULL, errbuf, errlen);
}

int ax_store_migrate_unlock(ax_pg_t *pg, char *errbuf, size_t errlen) {
    const char *p[] = {lock_name};
    return ax_stmt_run(pg, &st_unlock, 1, p, NULL, NULL, NULL, errbuf, errlen);
}

/* Run the script of m on the transaction at hand. */
static int run_script(ax_pg_t *pg, const ax_migration_t *m, char *errbuf, size_t errlen) {
    PGconn *conn = ax_pg_conn(pg);
    PGresult *r = PQexec(conn, m->sql);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY) {
        PQclear(r);
        return 0;
    }
    int rc = ax_pg_classify(r, conn);
    char msg[400];
    snprintf(msg, sizeof msg, "%s", r ? PQresultErrorMessage(r) : PQerrorMessage(conn));
    msg[strcspn(msg, "\n")] = '\0';
    PQclear(r);
    if (rc == AX_ERR_IO && PQstatus(conn) != CONNECTION_OK)
        ax_pg_mark_down(pg);
    /* a script error is the migration's, not a reason to retry */
    return ax_seterr(errbuf, errlen, PQstatus(conn) == CONNECTION_OK ? AX_ERR_INVALID : rc,
                     "migration %s: %s", m->version, msg);
}

int ax_store_migrate_apply(ax_pg_t *pg, const ax_migration_t *m, char *errbuf, size_t errlen) {
    int rc = ax_pg_begin(pg, errbuf, errlen);
    if (rc < 0)
        return rc;
    const char *p[] = {m->version};
    PGresult *r;
    rc = ax_stmt_run(pg, &st_settings, 0, NULL, NULL, NULL, NULL, errbuf, errlen);
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_create, 0, NULL, NULL, NULL, NULL, errbuf, errlen);
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_applied, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc == 0) {
        int done = PQntuples(r) > 0;
        PQclear(r);
        if (done) {
            ax_pg_rollback(pg);
            return AX_ERR_CONFLICT;
        }
    }
    if (rc == 0)
        rc = run_script(pg, m, errbuf, errlen);
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_record, 1, p, NULL, NULL, NULL, errbuf, errlen);
    if (rc == 0)
        rc = ax_pg_commit(pg, errbuf, errlen);
    if (rc < 0)
        ax_pg_rollback(pg);
    return rc;
}

int ax_store_schema_check(ax_pg_t *pg, char *errbuf, size_t errlen) {
    const char *want = ax_schema_newest();
    int exists;
    int rc = table_exists(pg, &exists, errbuf, errlen);
    if (rc < 0)
        return rc;
    char *have = NULL;
    if (exists) {
        PGresult *r;
        if ((rc = ax_stmt_run(pg, &st_newest, 0, NULL, NULL, NULL, &r, errbuf, errlen)) < 0)
            return rc;
        have = ax_pg_strdup(r, 0, 0);
        PQclear(r);
    }
    if (!have)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "the database holds no ax schema (no applied migration); this build "
                         "needs %s: run axctl migrate apply",
                         want);
    if (strcmp(have, want) == 0) {
        free(have);
        return 0;
    }
    size_t n, pending = 0;
    const ax_migration_t *m = ax_migrations(&n);
    int known = 0;
    for (size_t i = 0; i < n; i++) {
        if (known)
            pending++;
        if (strcmp(m[i].version, have) == 0)
            known = 1;
    }
    if (known)
        rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                       "the schema is older than this build: its newest migration is %s, this "
                       "build needs %s (%zu pending): run axctl migrate apply",
                       have, want, pending);
    else
        rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                       "the schema is %s: its newest migration is %s, unknown to this build "
                       "(whose newest is %s): run the ax version that applied it",
                       strcmp(have, want) > 0 ? "newer than this build" : "not this build's",
                       have, want);
    free(have);
    return rc;
}
