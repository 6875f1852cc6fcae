/*
 * ax/store_migrate.h — the schema migrations (infra/migrations/NNN_name.sql, carried
 * by every build: cmake/migrations.cmake) and their bookkeeping in table
 * ax_schema_migrations (version, applied_at): what axctl migrate
 * status|apply and the services' start-up check use.
 *
 * A migration is applied in one transaction together with its row; every
 * applier holds one advisory lock for its whole run, so two appliers never
 * race (the second waits, then finds nothing left to do).
 *
 * Every function returns 0 or an ax error (ax/store.h).
 */
#ifndef AX_STORE_MIGRATE_H
#define AX_STORE_MIGRATE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ax_pg ax_pg_t; /* a connection (ax/pg.h) */

typedef struct ax_migration {
    const char *version; /* the file name without .sql: "015_results_once" */
    const char *sql;     /* the script, run as it is */
} ax_migration_t;

/* The migrations of this build, in the order they apply (lexical). */
const ax_migration_t *ax_migrations(size_t *ret_n);

/* The newest migration of this build: the schema version it runs on. */
const char *ax_schema_newest(void);

/* One applied migration. */
typedef struct ax_applied {
    char *version;
    int64_t applied_ms; /* epoch ms */
} ax_applied_t;

/* The applied migrations, oldest version first (malloc'd array of n,
 * freed with ax_applied_free); none when the table does not exist yet. */
int ax_store_migrate_applied(ax_pg_t *pg, ax_applied_t **ret_v, size_t *ret_n, char *errbuf,
                             size_t errlen);
void ax_applied_free(ax_applied_t *v, size_t n);

/* Take (wait for) / release the appliers' advisory lock of this session. */
int ax_store_migrate_lock(ax_pg_t *pg, char *errbuf, size_t errlen);
int ax_store_migrate_unlock(ax_pg_t *pg, char *errbuf, size_t errlen);

/* Under the lock: create ax_schema_migrations if missing, then apply m in
 * one transaction with its row (no statement timeout). AX_ERR_CONFLICT:
 * already applied (nothing done); another error: rolled back, the reason
 * (with PostgreSQL's message) in errbuf. */
int ax_store_migrate_apply(ax_pg_t *pg, const ax_migration_t *m, char *errbuf, size_t errlen);

/* The start-up check of every service: the schema's newest applied
 * migration must be this build's newest. AX_ERR_INVALID (the reason, an
 * operator error) when it is older (pending migrations: axctl migrate
 * apply) or newer/unknown (this build is older than the schema);
 * AX_ERR_IO when PostgreSQL cannot be asked. Reads only. */
int ax_store_schema_check(ax_pg_t *pg, char *errbuf, size_t errlen);

#endif
