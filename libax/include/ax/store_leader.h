/*
 * ax/store_leader.h — the leader lease (table ax_leader): one row per role
 * holding the holder, an epoch (the fencing token: taking the row
 * increments it) and an expiry in PostgreSQL's clock.
 *
 * Every trigger also keeps a heartbeat row in trigger_member (role,
 * holder), so standbys are visible.
 *
 * Every function returns 0 or an ax error (ax/store.h): AX_ERR_NOTFOUND
 * says the lease is not (or no longer) the caller's.
 */
#ifndef AX_STORE_LEADER_H
#define AX_STORE_LEADER_H

#include <stddef.h>
#include <stdint.h>


typedef struct ax_pg ax_pg_t; /* a connection (ax/pg.h) */

/* Who asks: the role (<topic.prefix>trigger), this process's holder
 * string and, once leading, the epoch it holds. */
typedef struct ax_lease_key {
    const char *role;
    const char *holder;
    int64_t epoch;
} ax_lease_key_t;

/* Take the lease for lease_ms if it has expired (creating the row the
 * first time): 0 taken, with the new epoch and PostgreSQL's now() (epoch
 * ms) in *ret_epoch / *ret_pg_ms; AX_ERR_NOTFOUND another holder's lease
 * still runs. */
int ax_store_leader_take(ax_pg_t *pg, const char *role, const char *holder, int64_t lease_ms,
                         int64_t *ret_epoch, int64_t *ret_pg_ms, char *errbuf, size_t errlen);

/* Extend k's lease to now() + lease_ms if it has not run out: 0 renewed,
 * PostgreSQL's now() in *ret_pg_ms; AX_ERR_NOTFOUND expired or taken over. */
int ax_store_leader_renew(ax_pg_t *pg, const ax_lease_key_t *k, int64_t lease_ms,
                          int64_t *ret_pg_ms, char *errbuf, size_t errlen);

/* Let k's lease run out now, so a standby takes over at once. */
int ax_store_leader_release(ax_pg_t *pg, const ax_lease_key_t *k, char *errbuf, size_t errlen);

/* Inside the caller's transaction: read k's lease row FOR SHARE (a
 * takeover waits for this transaction). 0 still k's, AX_ERR_NOTFOUND not. */
int ax_store_leader_check(ax_pg_t *pg, const ax_lease_key_t *k, char *errbuf, size_t errlen);

/* This trigger's heartbeat as a member of role (table trigger_member,
 * leader or standby): its row made or renewed now; members silent for an
 * hour are deleted on the way. What GET /api/v1/leader and axctl status
 * list as standbys (ax/store_fleet.h). */
int ax_store_leader_beat(ax_pg_t *pg, const char *role, const char *holder, char *errbuf,
                         size_t errlen);

/* This trigger stops: its member row deleted. */
int ax_store_leader_leave(ax_pg_t *pg, const char *role, const char *holder, char *errbuf,
                          size_t errlen);

/* PostgreSQL's now() in epoch ms. */
int ax_store_clock_ms(ax_pg_t *pg, int64_t *ret_ms, char *errbuf, size_t errlen);

#endif
