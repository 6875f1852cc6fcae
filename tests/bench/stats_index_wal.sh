#!/usr/bin/env bash
# stats_index_wal.sh — the WAL the hot path's instance_state writes cost
# with and without migration 019's BRIN index (finished_at, dispatched_at),
# counted by PostgreSQL itself (EXPLAIN (ANALYZE, WAL): records and bytes
# of exactly that statement, whatever else the server does), per row:
#   ingest   INSERT of N SCHEDULED instances dispatched at once (as the
#            direct lane's ingest; instance_def rows first, not counted)
#   claim    SCHEDULED -> LOCKED      start   LOCKED -> RUNNING
#   finish   RUNNING -> FINISHED      mark    result_published_at
# each its own transaction, in batches of B rows as the services batch
# them, on the instance_state of AX_CONFIG's database as it is (its rows
# stay: run it on a database of its own). With `drop` the index is dropped
# first and created again at the end (BRIN: a sequential scan of the table).
#   AX_CONFIG=ax.conf [SUMMARIZE=1] tests/bench/stats_index_wal.sh [with|drop] [N] [B]
# BENCHMARKS.md, "Issue #14: api.stats over 1,000,000 instances".
set -euo pipefail
MODE=${1:-with}; N=${2:-20000}; B=${3:-1000}
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGDATABASE=$(cfg pg.dbname)
export PGPASSWORD=$(cfg pg.password)
p() { psql -X -q -v ON_ERROR_STOP=1 -tA "$@"; }
[ "$MODE" = drop ] && p -c "DROP INDEX IF EXISTS instance_state_done_brin"
p -c "SELECT count(*) > 0 FROM pg_indexes WHERE indexname = 'instance_state_done_brin'" | grep -q "$([ "$MODE" = drop ] && echo f || echo t)" \
    || { echo "stats_index_wal: index state is not '$MODE'" >&2; exit 2; }
lo=$(p -c "SELECT nextval('job_instance_id_seq')")
p -c "SELECT setval('job_instance_id_seq', $lo + $N)" >/dev/null
p -c "INSERT INTO instance_def (id, handler_kind, command, timeout_ms, trace_id, idempotency_key)
      SELECT g, 'command', '{/bin/true}', 1000, 'wal-' || g, 'wal-' || g FROM generate_series($lo + 1, $lo + $N) g"
declare -A rec=() byt=()
wal() { # step SQL-with-$a-$b
    local step=$1 sql=$2 a out r b
    for ((a = lo + 1; a <= lo + N; a += B)); do
        out=$(p -c "EXPLAIN (ANALYZE, WAL, COSTS OFF, TIMING OFF, SUMMARY OFF) $(sed "s/@A/$a/g; s/@B/$((a + B - 1))/g" <<<"$sql")")
        r=$(grep -o 'records=[0-9]*' <<<"$out" | head -1 | cut -d= -f2); b=$(grep -o 'bytes=[0-9]*' <<<"$out" | head -1 | cut -d= -f2)
        rec[$step]=$(( ${rec[$step]:-0} + ${r:-0} )); byt[$step]=$(( ${byt[$step]:-0} + ${b:-0} ))
    done
}
R="id BETWEEN @A AND @B"
wal ingest "INSERT INTO instance_state (id, due_at, dispatched_at) SELECT g, now(), now() FROM generate_series(@A, @B) g"
# SUMMARIZE=1: the new rows' page ranges summarized before they move on
# (as autovacuum would for instances that run longer than its naptime)
[ "${SUMMARIZE:-0}" = 1 ] && [ "$MODE" = with ] && p -c "SELECT brin_summarize_new_values('instance_state_done_brin')" >/dev/null
wal claim  "UPDATE instance_state SET state = 'LOCKED', locked_at = now(), worker = 'wal', lease_expires_at = now() + interval '1 minute' WHERE $R"
wal start  "UPDATE instance_state SET state = 'RUNNING', running_at = now() WHERE $R"
wal finish "UPDATE instance_state SET state = 'FINISHED', outcome = 'SUCCESS', finished_at = now(), exit_code = 0 WHERE $R"
wal mark   "UPDATE instance_state SET result_published_at = now() WHERE $R"
hot=$(p -c "SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'instance_state'")
for s in ingest claim start finish mark; do
    awk -v s=$s -v r=${rec[$s]} -v b=${byt[$s]} -v n=$N 'BEGIN { printf "%s=%s wal_records_per_row=%.2f wal_bytes_per_row=%.0f\n", s, "'"$MODE"'", r / n, b / n }'
done
awk -v r="$(IFS=+; echo $(( ${rec[*]} )))" -v b="$(IFS=+; echo $(( ${byt[*]} )))" -v n=$N \
    'BEGIN { printf "total='"$MODE"' wal_records_per_row=%.2f wal_bytes_per_row=%.0f\n", r / n, b / n }'
echo "n_tup_hot_upd(cumulative)=$hot"
[ "$MODE" = drop ] && p -c "CREATE INDEX instance_state_done_brin ON instance_state
    USING brin (finished_at, dispatched_at) WITH (autosummarize = on)"
exit 0
