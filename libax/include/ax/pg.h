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
 *
 * Statements themselves are the store's (ax/store_*.h, libax/src/store);
 * this header has no libpq type: the raw statement runner is private to
 * libax (libax/src/adapters/pg_raw.h).
 */
#ifndef AX_PG_H
#define AX_PG_H

#include <stddef.h>
#include <stdint.h>

#include "ax/conf.h"

typedef struct ax_pg ax_pg_t;

/* The TCP settings every connection gets unless pg.* sets them, so a call
 * on a connection whose packets a partition drops fails in bounded time
 * (instead of when TCP gives up, minutes): user_timeout_ms, half the
 * shortest lease (executor.lease.min.ms, trigger.lease.ms) within
 * 1000..30000 ms, is libpq's tcp_user_timeout (unacknowledged data, or
 * keepalive probes unanswered, for that long close the connection); then
 * keepalives on, keepalives_idle = user_timeout/2 and keepalives_interval
 * = user_timeout/4 (in s, at least 1), keepalives_count 3; connect_timeout
 * 2 x user_timeout (in s, at least 2). A pg.keepalives = 0 drops the three
 * keepalive settings (and libpq then ignores tcp_user_timeout: it sets it
 * only with keepalives on); pg.tcp_user_timeout = 0 is the system's
 * default. */
typedef struct ax_pg_tcp {
    int64_t user_timeout_ms;
    int keepalives_idle_s, keepalives_interval_s, keepalives_count;
    int connect_timeout_s;
} ax_pg_tcp_t;
void ax_pg_tcp_defaults(const ax_conf_t *conf, ax_pg_tcp_t *out);
/* What a session gets: the defaults, each replaced by the user's pg.*
 * value where set (ax_pg_new checks them: whole numbers). Both sides of
 * the session use them: the client through libpq's keywords, the server
 * through the session's options (tcp_keepalives_*, tcp_user_timeout).
 * Returns whether keepalives are on (pg.keepalives = 0 turns them off, on
 * both sides). */
int ax_pg_tcp_effective(const ax_conf_t *conf, ax_pg_tcp_t *out);

/* Checks every pg.* key against libpq's keywords; nothing is connected yet. */
ax_pg_t *ax_pg_new(const ax_conf_t *conf, const char *application_name, char *errbuf,
                   size_t errlen);
void ax_pg_destroy(ax_pg_t *pg);

/* One connection attempt if not connected (or the connection is bad).
 * Returns 0, or AX_ERR_IO with the reason (no password in it). */
int ax_pg_ensure(ax_pg_t *pg, char *errbuf, size_t errlen);

/* Asks the server to cancel whatever the connection runs now (PQcancel):
 * safe from any thread, also while another thread waits in a statement on
 * pg; that statement then fails ("canceling statement due to user
 * request"). 1 if a request was sent, 0 if not connected or it failed. */
int ax_pg_cancel(ax_pg_t *pg);

/* 1 if the last ax_pg_ensure() made a new connection (session state such
 * as advisory locks or LISTEN must be set up again). Clears the flag. */
int ax_pg_reconnected(ax_pg_t *pg);

/* Convenience wrappers for transactions (BEGIN/COMMIT/ROLLBACK). */
int ax_pg_begin(ax_pg_t *pg, char *errbuf, size_t errlen);
int ax_pg_commit(ax_pg_t *pg, char *errbuf, size_t errlen);
void ax_pg_rollback(ax_pg_t *pg);

#endif
