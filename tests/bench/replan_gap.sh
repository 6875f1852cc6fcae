#!/usr/bin/env bash
# replan_gap.sh — dispatch.ingest's cached generic plan when the tables
# grow after it was made, with and without db.replan.interval.ms
# (BENCHMARKS.md, "Issue #13: the ingest's plan made again").
#
#   AX_CONFIG=ax.conf tests/bench/replan_gap.sh BUILD DBNAME [FILL] [BATCHES] [ROUNDS]
#
# EMPTIES the instance tables, submission, submit_offset and dispatch_batch
# of AX_CONFIG's database (TRUNCATE … CASCADE: and every table referencing
# them), which must be DBNAME (a scratch database: say its name to
# confirm). Per round and interval (0 = never, then 2000 ms): the
# tables emptied and vacuumed (statistics of empty tables, as a fresh or
# restored database has), autovacuum off on submission (so no ANALYZE
# invalidates the plan: a table filled faster than autovacuum analyzes it);
# BUILD/tests/it_ingest on one session ingests a batch of 200 Kafka
# positions (the generic plan is made then), FILL keyed rows are written to
# submission from another session, and after the interval has passed the
# same session ingests BATCHES more batches of 200: their time per row is
# printed (each row's NOT EXISTS reads submission: by its primary key, or
# the whole table on the plan made empty). Autovacuum's setting is reset at
# exit.
set -euo pipefail
BUILD=${1:?build}; DB=${2:?database name (confirms it may be emptied)}
FILL=${3:-200000}; NB=${4:-10}; ROUNDS=${5:-3}
: "${AX_CONFIG:?AX_CONFIG}"
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGDATABASE=$(cfg pg.dbname)
export PGPASSWORD=$(cfg pg.password)
[[ -n $PGPASSWORD ]] || { pf=$(cfg pg.password_file); [[ -z $pf ]] || PGPASSWORD=$(cat "$pf"); }
[[ $PGDATABASE == "$DB" ]] || { echo "replan_gap.sh: AX_CONFIG's database is '$PGDATABASE', not '$DB'" >&2; exit 2; }
for v in "$FILL" "$NB" "$ROUNDS"; do
    [[ $v =~ ^[1-9][0-9]{0,7}$ ]] || { echo "replan_gap.sh: '$v' is not a count from 1" >&2; exit 2; }
done
q() { psql -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }
W=$(mktemp -d /tmp/replan_gap.XXXXXX)
trap 'exec 3>&- 2>/dev/null || true; q "ALTER TABLE submission RESET (autovacuum_enabled)" || true; rm -rf "$W"' EXIT
q "INSERT INTO job (name, handler_kind, command) VALUES ('replan-gap', 'command', ARRAY['true'])
   ON CONFLICT DO NOTHING"

round() { # round INTERVAL_MS -> µs per row of batches 2..NB+1
    local rp=$1 off=0
    q "TRUNCATE instance_def, instance_state, submission, submit_offset, dispatch_batch CASCADE"
    q "ALTER TABLE submission SET (autovacuum_enabled = false)"
    for t in instance_def instance_state submission submit_offset dispatch_batch; do q "VACUUM ANALYZE $t"; done
    rm -f "$W/fifo"; mkfifo "$W/fifo"
    AXCONF_DB_REPLAN_INTERVAL_MS=$rp "$BUILD/tests/it_ingest" "$AX_CONFIG" replan-gap. \
        <"$W/fifo" >"$W/out" &
    local pid=$!
    exec 3>"$W/fifo"
    batch() {
        for _ in $(seq 200); do echo "replan-gap kafka:replan-gap:0:$off 1000000000"; off=$((off + 1)); done >&3
        echo >&3
    }
    batch
    sleep 1
    q "INSERT INTO submission (submit_key, instance_id)
       SELECT 'idem:replan-gap-fill' || g, g FROM generate_series(1, $FILL) g"
    sleep $(( rp > 0 ? rp / 1000 + 1 : 3 ))
    local t0=$(date +%s%N)
    for _ in $(seq "$NB"); do batch; done
    exec 3>&-
    wait "$pid" || { echo "replan_gap.sh: it_ingest failed" >&2; exit 1; }
    local t1=$(date +%s%N) made=$(grep -c '^kafka:' "$W/out")
    (( made == (NB + 1) * 200 )) || { echo "replan_gap.sh: $made instances, not $(( (NB + 1) * 200 ))" >&2; exit 1; }
    echo $(( (t1 - t0) / 1000 / (NB * 200) ))
}

for rp in 0 2000; do
    runs=()
    for _ in $(seq "$ROUNDS"); do runs+=("$(round "$rp")"); done
    med=$(printf '%s\n' "${runs[@]}" | sort -n | sed -n "$(( (ROUNDS + 1) / 2 ))p")
    echo "db.replan.interval.ms=$rp: submission $FILL rows, $NB batches of 200: µs per row ${runs[*]}; median $med"
done
q "TRUNCATE instance_def, instance_state, submission, submit_offset, dispatch_batch CASCADE"
