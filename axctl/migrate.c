/*
 * migrate.c — axctl migrate status | apply: the schema migrations this
 * build carries (infra/migrations at build time) against those recorded in
 * ax_schema_migrations (ax/store_migrate.h); and axctl config check.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ax/common.h"
#include "ax/kafka.h"
#include "ax/store_migrate.h"
#include "axctl.h"

static int is_applied(const ax_applied_t *a, size_t na, const char *v) {
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].version, v) == 0)
            return 1;
    return 0;
}

static int is_known(const ax_migration_t *m, size_t n, const char *v) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(m[i].version, v) == 0)
            return 1;
    return 0;
}

static void print_time(int64_t ms, char *buf, size_t len) {
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* One line per migration (applied with its time, or pending), then the
 * applied ones this build does not know. Exit 0 up to date, 3 not. */
static int migrate_status(ax_pg_t *pg) {
    char err[512], when[32];
    ax_applied_t *a;
    size_t na, n, pending = 0, unknown = 0;
    if (ax_store_migrate_applied(pg, &a, &na, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: migrate status: %s\n", pg_err_line(err));
        return 1;
    }
    const ax_migration_t *m = ax_migrations(&n);
    for (size_t i = 0; i < n; i++) {
        const ax_applied_t *hit = NULL;
        for (size_t k = 0; k < na && !hit; k++)
            if (strcmp(a[k].version, m[i].version) == 0)
                hit = &a[k];
        if (hit) {
            print_time(hit->applied_ms, when, sizeof when);
            printf("applied  %-32s %s\n", m[i].version, when);
        } else {
            printf("pending  %s\n", m[i].version);
            pending++;
        }
    }
    for (size_t k = 0; k < na; k++)
        if (!is_known(m, n, a[k].version)) {
            print_time(a[k].applied_ms, when, sizeof when);
            printf("unknown  %-32s %s (applied by another ax version)\n", a[k].version, when);
            unknown++;
        }
    ax_applied_free(a, na);
    int rc = ax_store_schema_check(pg, err, sizeof err);
    if (rc == 0) {
        printf("schema is at %s, this build's newest\n", ax_schema_newest());
        return 0;
    }
    printf("%s\n", rc == AX_ERR_INVALID ? err : pg_err_line(err));
    if (pending || unknown)
        printf("%zu pending, %zu unknown to this build\n", pending, unknown);
    return rc == AX_ERR_INVALID ? 3 : 1;
}

/* Every pending migration, in order, each in its own transaction, all
 * under the appliers' advisory lock. */
static int migrate_apply(ax_pg_t *pg) {
    char err[1024];
    if (ax_store_migrate_lock(pg, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: migrate apply: cannot take the lock: %s\n", pg_err_line(err));
        return 1;
    }
    ax_applied_t *a;
    size_t na, n, done = 0;
    int rc = ax_store_migrate_applied(pg, &a, &na, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "axctl: migrate apply: %s\n", pg_err_line(err));
        return 1;
    }
    const ax_migration_t *m = ax_migrations(&n);
    for (size_t k = 0; k < na; k++)
        if (!is_known(m, n, a[k].version) && strcmp(a[k].version, ax_schema_newest()) > 0) {
            fprintf(stderr,
                    "axctl: migrate apply: the schema has %s, newer than this build's newest "
                    "(%s): use the ax version that applied it\n",
                    a[k].version, ax_schema_newest());
            ax_applied_free(a, na);
            return 3;
        }
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (is_applied(a, na, m[i].version))
            continue;
        rc = ax_store_migrate_apply(pg, &m[i], err, sizeof err);
        if (rc == 0) {
            printf("applied %s\n", m[i].version);
            done++;
        } else if (rc == AX_ERR_CONFLICT) {
            rc = 0; /* recorded meanwhile: cannot happen under the lock, harmless */
        }
    }
    ax_applied_free(a, na);
    if (rc < 0) {
        fprintf(stderr, "axctl: migrate apply: %s (rolled back; %zu applied before it)\n",
                pg_err_line(err), done);
        return 1;
    }
    ax_store_migrate_unlock(pg, err, sizeof err);
    printf("schema is at %s (%zu applied now, %zu before)\n", ax_schema_newest(), done, na);
    return 0;
}

int cmd_migrate(int argc, char **argv) {
    if (argc != 1 || (strcmp(argv[0], "status") != 0 && strcmp(argv[0], "apply") != 0))
        die_usage("migrate needs: status | apply");
    ax_pg_t *pg = pg_open();
    int rc = strcmp(argv[0], "status") == 0 ? migrate_status(pg) : migrate_apply(pg);
    ax_pg_destroy(pg);
    return rc;
}

int cmd_config_check(int argc, char **argv) {
    (void)argv;
    if (argc != 0)
        die_usage("config check takes no arguments");
    /* The file was read and its ax keys checked before any command; the
     * pass-through keys are checked by their libraries, without connecting:
     * pg.* against libpq's connection keywords, kafka.* by librdkafka. */
    char err[512];
    ax_pg_t *pg = ax_pg_new(&conf, "axctl", err, sizeof err);
    if (!pg) {
        fprintf(stderr, "axctl: configuration error: %s\n", err);
        return 2;
    }
    ax_pg_destroy(pg);
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "axctl-check", err, sizeof err);
    if (!rk) {
        fprintf(stderr, "axctl: configuration error: %s\n", err);
        return 2;
    }
    rd_kafka_destroy(rk);
    printf("configuration ok\n");
    return 0;
}
