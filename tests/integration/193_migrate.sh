#!/usr/bin/env bash
# Upgrades (docs/DEPLOYMENT.md): axctl migrate status|apply on a database of
# this test's own (created on the suite's PostgreSQL, dropped on exit), and
# the schema check every service makes at start.
#  - a fresh database: status lists every migration pending (exit 3); a
#    service refuses to start (exit 2, "run axctl migrate apply"), and has
#    created nothing;
#  - two appliers at once: both succeed, every migration applied once (the
#    advisory lock makes the second wait), status exit 0;
#  - an older schema (the newest migration's row deleted: the check reads
#    the applied list) and a newer one (a version this build does not
#    know): every service exits 2 with the reason before writing anything,
#    and apply refuses the newer one (exit 3).
source "$(dirname "$0")/lib.sh"

db="ax_it_migrate_$$"
newest=$(find "$AX_SRC/infra/migrations" -maxdepth 1 -name '*.sql' -printf '%f\n' | LC_ALL=C sort | tail -1)
newest=${newest%.sql}
nfiles=$(find "$AX_SRC/infra/migrations" -maxdepth 1 -name '*.sql' | wc -l)
[ -n "$newest" ] || fail "no migrations in $AX_SRC/infra/migrations"
sql_db() { PGDATABASE=$db psql -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }
finish_test() {
    local rc=$?
    psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
    rc_is() { return "$1"; }
    rc_is "$rc"
    cleanup
}
trap finish_test EXIT
psql -X -q -d postgres -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db" >/dev/null || fail "cannot create $db"
(umask 077 && { grep -v '^[[:space:]]*pg\.dbname' "$AX_CONFIG"; echo "pg.dbname = $db"; } >"$WORK/ax.conf")
export AX_CONFIG=$WORK/ax.conf

# ---- a fresh database
set +e
axctl migrate status >"$WORK/status0" 2>&1; rc=$?
set -e
[ "$rc" = 3 ] || fail "status on a fresh database: exit $rc, not 3: $(cat "$WORK/status0")"
[ "$(grep -c '^pending ' "$WORK/status0")" = "$nfiles" ] \
    || fail "status on a fresh database does not list $nfiles pending migrations: $(cat "$WORK/status0")"
for s in trigger executor callback; do
    set +e
    timeout 60 "$AX_BIN/services/$s/ax-$s" >"$WORK/ax-$s-fresh.log" 2>&1; rc=$?
    set -e
    [ "$rc" = 2 ] || fail "ax-$s on a fresh database: exit $rc, not 2: $(tail -3 "$WORK/ax-$s-fresh.log")"
    grep -q "schema version: .*no ax schema.*axctl migrate apply" "$WORK/ax-$s-fresh.log" \
        || fail "ax-$s does not say why: $(tail -3 "$WORK/ax-$s-fresh.log")"
done
[ "$(sql_db "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")" = 0 ] \
    || fail "a service created tables in a database without the schema"

# ---- two appliers at once
axctl migrate apply >"$WORK/apply1" 2>&1 & p1=$!
axctl migrate apply >"$WORK/apply2" 2>&1 & p2=$!
wait "$p1" || fail "first applier failed: $(cat "$WORK/apply1")"
wait "$p2" || fail "second applier failed: $(cat "$WORK/apply2")"
n_applied=$(cat "$WORK/apply1" "$WORK/apply2" | grep -c '^applied ' || true)
[ "$n_applied" = "$nfiles" ] \
    || fail "the two appliers applied $n_applied migrations between them, not $nfiles: $(cat "$WORK/apply1" "$WORK/apply2")"
[ "$(sql_db "SELECT count(*) FROM ax_schema_migrations")" = "$nfiles" ] || fail "not every migration recorded once"
axctl migrate status >"$WORK/status1" 2>&1 || fail "status after apply: $(cat "$WORK/status1")"
grep -q "schema is at $newest" "$WORK/status1" || fail "status does not name $newest: $(cat "$WORK/status1")"
axctl migrate apply >"$WORK/apply3" 2>&1 || fail "apply with nothing to do failed: $(cat "$WORK/apply3")"
grep -q "0 applied now" "$WORK/apply3" || fail "apply re-applied something: $(cat "$WORK/apply3")"

# ---- older and newer schemas: every service refuses before writing
# what a starting service writes first: its worker row, the leader lease,
# counters
written() {
    sql_db "SELECT (SELECT count(*) FROM worker) || '/' || (SELECT count(*) FROM ax_counter) || '/'
                   || coalesce((SELECT string_agg(l::text, ',') FROM ax_leader l), '')"
}
refuses() { # refuses WHAT PATTERN
    local s rc before
    before=$(written)
    for s in trigger executor callback; do
        set +e
        timeout 60 "$AX_BIN/services/$s/ax-$s" >"$WORK/ax-$s-$1.log" 2>&1; rc=$?
        set -e
        [ "$rc" = 2 ] || fail "ax-$s with an $1 schema: exit $rc, not 2: $(tail -3 "$WORK/ax-$s-$1.log")"
        grep -q "schema version: $2" "$WORK/ax-$s-$1.log" \
            || fail "ax-$s with an $1 schema does not say why: $(tail -3 "$WORK/ax-$s-$1.log")"
    done
    [ "$(written)" = "$before" ] || fail "a service wrote to a database with an $1 schema"
}
sql_db "DELETE FROM ax_schema_migrations WHERE version = '$newest'" >/dev/null
refuses older "the schema is older than this build.*needs $newest (1 pending): run axctl migrate apply"
sql_db "INSERT INTO ax_schema_migrations (version) VALUES ('$newest'), ('999_from_the_future')" >/dev/null
refuses newer "the schema is newer than this build: its newest migration is 999_from_the_future"
set +e
axctl migrate apply >"$WORK/apply4" 2>&1; rc=$?
axctl migrate status >"$WORK/status2" 2>&1; rc2=$?
set -e
[ "$rc" = 3 ] || fail "apply on a newer schema: exit $rc, not 3: $(cat "$WORK/apply4")"
[ "$rc2" = 3 ] && grep -q '^unknown  999_from_the_future' "$WORK/status2" \
    || fail "status on a newer schema (exit $rc2): $(cat "$WORK/status2")"
sql_db "DELETE FROM ax_schema_migrations WHERE version = '999_from_the_future'" >/dev/null
log "ok"
