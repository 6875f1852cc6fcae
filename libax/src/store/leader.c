/*
 * leader.c — the leader lease statements (ax/store_leader.h).
 */
#include "ax/store_leader.h"

#include "store_int.h"

AX_STMT(st_ensure, "leader.ensure", "INSERT INTO ax_leader (role) VALUES ($1) ON CONFLICT DO NOTHING");

/* columns of leader.take */
enum { TAKE_EPOCH, TAKE_NOW };
AX_STMT(st_take, "leader.take",
        "UPDATE ax_leader SET holder = $2, epoch = epoch + 1, acquired_at = clock_timestamp(),"
        "  expires_at = now() + $3::bigint * interval '1 ms'"
        " WHERE role = $1 AND expires_at <= now()"
        " RETURNING epoch, (extract(epoch FROM now()) * 1000)::bigint");

enum { RENEW_NOW };
AX_STMT(st_renew, "leader.renew",
        "UPDATE ax_leader SET expires_at = now() + $4::bigint * interval '1 ms'"
        " WHERE role = $1 AND holder = $2 AND epoch = $3::bigint"
        " AND expires_at > now()"
        " RETURNING (extract(epoch FROM now()) * 1000)::bigint");

AX_STMT(st_release, "leader.release",
        "UPDATE ax_leader SET expires_at = now() WHERE role = $1 AND holder = $2"
        " AND epoch = $3::bigint");

AX_STMT(st_check, "leader.check",
        "SELECT 1 FROM ax_leader WHERE role = $1 AND holder = $2"
        " AND epoch = $3::bigint AND expires_at > now() FOR SHARE");

AX_STMT(st_clock, "leader.clock", "SELECT (extract(epoch FROM now()) * 1000)::bigint");

/* A member's heartbeat (trigger_member): its row created or its time
 * renewed (a HOT update: no index but the key), and the rows of members
 * silent for an hour (killed, never stopped) deleted on the way. */
AX_STMT(st_beat, "leader.beat",
        "WITH gone AS (DELETE FROM trigger_member WHERE role = $1 AND holder <> $2"
        "   AND heartbeat_at < now() - interval '1 hour')"
        " INSERT INTO trigger_member (role, holder) VALUES ($1, $2)"
        " ON CONFLICT (role, holder) DO UPDATE SET heartbeat_at = now()");

AX_STMT(st_leave, "leader.leave", "DELETE FROM trigger_member WHERE role = $1 AND holder = $2");

int ax_store_leader_take(ax_pg_t *pg, const char *role, const char *holder, int64_t lease_ms,
                         int64_t *ret_epoch, int64_t *ret_pg_ms, char *errbuf, size_t errlen) {
    ax_num_t n_lease;
    const char *ins[] = {role};
    int rc = ax_stmt_run(pg, &st_ensure, 1, ins, NULL, NULL, NULL, errbuf, errlen);
    if (rc < 0)
        return rc;
    const char *p[] = {role, holder, ax_num(&n_lease, lease_ms)};
    PGresult *r;
    rc = ax_stmt_run(pg, &st_take, 3, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return AX_ERR_NOTFOUND;
    }
    *ret_epoch = ax_pg_int(r, 0, TAKE_EPOCH);
    *ret_pg_ms = ax_pg_int(r, 0, TAKE_NOW);
    PQclear(r);
    return 0;
}

int ax_store_leader_renew(ax_pg_t *pg, const ax_lease_key_t *k, int64_t lease_ms,
                          int64_t *ret_pg_ms, char *errbuf, size_t errlen) {
    ax_num_t n_epoch, n_lease;
    const char *p[] = {k->role, k->holder, ax_num(&n_epoch, k->epoch), ax_num(&n_lease, lease_ms)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_renew, 4, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    rc = PQntuples(r) == 1 ? 0 : AX_ERR_NOTFOUND;
    if (rc == 0)
        *ret_pg_ms = ax_pg_int(r, 0, RENEW_NOW);
    PQclear(r);
    return rc;
}

int ax_store_leader_release(ax_pg_t *pg, const ax_lease_key_t *k, char *errbuf, size_t errlen) {
    ax_num_t n_epoch;
    const char *p[] = {k->role, k->holder, ax_num(&n_epoch, k->epoch)};
    return ax_stmt_run(pg, &st_release, 3, p, NULL, NULL, NULL, errbuf, errlen);
}

int ax_store_leader_check(ax_pg_t *pg, const ax_lease_key_t *k, char *errbuf, size_t errlen) {
    ax_num_t n_epoch;
    const char *p[] = {k->role, k->holder, ax_num(&n_epoch, k->epoch)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_check, 3, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    rc = PQntuples(r) == 1 ? 0 : AX_ERR_NOTFOUND;
    PQclear(r);
    return rc;
}

int ax_store_clock_ms(ax_pg_t *pg, int64_t *ret_ms, char *errbuf, size_t errlen) {
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_clock, 0, NULL, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    *ret_ms = ax_pg_int(r, 0, 0);
    PQclear(r);
    return 0;
}

int ax_store_leader_beat(ax_pg_t *pg, const char *role, const char *holder, char *errbuf,
                         size_t errlen) {
    const char *p[] = {role, holder};
    return ax_stmt_run(pg, &st_beat, 2, p, NULL, NULL, NULL, errbuf, errlen);
}

int ax_store_leader_leave(ax_pg_t *pg, const char *role, const char *holder, char *errbuf,
                          size_t errlen) {
    const char *p[] = {role, holder};
    return ax_stmt_run(pg, &st_leave, 2, p, NULL, NULL, NULL, errbuf, errlen);
}
