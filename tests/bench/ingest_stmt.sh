#!/usr/bin/env bash
# ingest_stmt.sh — the trigger's ingest statement (dispatch.ingest) alone:
# REPS batches of N no-op submissions of one job, Kafka positions over 8
# partitions (what bench_exec's trigger ingests), run as a prepared
# statement in one transaction that is rolled back, after PRE definitions
# and state rows (FINISHED); prints pg_stat_statements' mean and min ms per
# batch, µs and WAL per row (the first five runs are planned for their
# arguments, the rest use the generic plan, as the trigger's connection
# does). BENCHMARKS.md, "2026-12-02: the ingest statement".
#
#   AX_CONFIG=ax.conf tests/bench/ingest_stmt.sh [-t TREE] [N [REPS [PRE]]]
#
# TREE (default: this one) is the source tree the statement is read from
# (TREE/tests/bench/store_sql.py): a tree before 5dcad5f takes the 16
# parameters of the statement then, a later one the 22 of now. EXPLAIN=1:
# EXPLAIN (ANALYZE, BUFFERS, WAL) of the last batch, printed. PRE_SQL: more
# statements run in the transaction before the first batch (e.g. a large
# submission table and ANALYZE). Needs pg_stat_statements and a role that
# may reset its statistics for its database.
set -euo pipefail
TREE=$(cd "$(dirname "$0")/../.." && pwd)
[[ ${1:-} == -t ]] && { TREE=$2; shift 2; }
N=${1:-900}; REPS=${2:-12}; PRE=${3:-20000}
SQL=$("$TREE/tests/bench/store_sql.py" dispatch.ingest)
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGDATABASE=$(cfg pg.dbname)
export PGPASSWORD=$(cfg pg.password)
[[ -n $PGPASSWORD ]] || { pf=$(cfg pg.password_file); [[ -z $pf ]] || PGPASSWORD=$(cat "$pf"); }
NEWP=; [[ $SQL == *'$22'* ]] && NEWP=1
OUT=/dev/null; [[ -n ${EXPLAIN:-} ]] && OUT=/tmp/ingest_stmt.$$.plan
{
cat <<SQL
BEGIN;
INSERT INTO job (name, handler_kind, command, retry_max) VALUES ('bx-ingest-stmt', 'plugin', '{/x/ax-noop.so}', 0);
INSERT INTO instance_def (id, job_id, job_name, handler_kind, command, timeout_ms, trace_id, idempotency_key, submit_key)
  SELECT 1000000000 + g, (SELECT id FROM job WHERE name = 'bx-ingest-stmt'), 'bx-ingest-stmt', 'plugin', '{/x/ax-noop.so}',
    60000, 'bx-pre' || g, 'kafka:ax.submit:0:' || g, 'kafka:ax.submit:0:' || g FROM generate_series(1, $PRE) g;
INSERT INTO instance_state (id, job_id, deployment, due_at, state, outcome, finished_at, dispatched_at)
  SELECT 1000000000 + g, (SELECT id FROM job WHERE name = 'bx-ingest-stmt'), 'ax.', now(), 'FINISHED', 'SUCCESS', now(), now()
  FROM generate_series(1, $PRE) g;
INSERT INTO submit_offset (topic, partition, next_offset) SELECT 'ax.submit', p, 100000 FROM generate_series(0, 7) p;
${PRE_SQL:-}
PREPARE s AS $SQL;
SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0) \g /dev/null
SQL
for r in $(seq 1 "$REPS"); do
  # row g of batch r: partition g % 8, offsets continuing the previous batch
  cat <<SQL
SELECT array_agg('bx-ingest-stmt'::text) a1, array_agg(NULL::text) a2, array_agg(''::text) a3,
  array_agg(NULL::bigint) a4, array_agg(NULL::smallint) a5, array_agg(NULL::bigint) a6, array_agg(NULL::bigint) a7,
  array_agg('bx-1-m$r-' || g) a8, array_agg('kafka:ax.submit:' || (g % 8) || ':' || (100000 + ($r * $N + g) / 8)) a9,
  array_agg('kafka:ax.submit:' || (g % 8) || ':' || (100000 + ($r * $N + g) / 8)) a10,
  array_agg(10000000::bigint) le_row, array_agg(g % 8 + 1) kp, array_agg((100000 + ($r * $N + g) / 8)::bigint) koff,
  (SELECT array_agg(10000000::bigint) FROM generate_series(0, 7)) le_part,
  (SELECT array_agg('ax.submit'::text) FROM generate_series(0, 7)) topics,
  (SELECT array_agg(p) FROM generate_series(0, 7) p) parts,
  (SELECT array_agg(m ORDER BY p) FROM (SELECT g2 % 8 AS p, max(100000 + ($r * $N + g2) / 8) + 1 AS m
    FROM generate_series(0, $N - 1) g2 GROUP BY 1) x) nxt
FROM generate_series(0, $N - 1) g \gset
SQL
  e=; [[ -n ${EXPLAIN:-} && $r == "$REPS" ]] && e="EXPLAIN (ANALYZE, BUFFERS, WAL)"
  if [[ -n $NEWP ]]; then
    args=":'le_part', :'kp', :'koff', NULL, :'topics', :'parts', :'nxt'"
  else
    args=":'le_row'"
  fi
  echo "$e EXECUTE s(:'a1', :'a2', :'a3', :'a4', :'a5', :'a6', :'a7', :'a8', :'a9', :'a10', 60000, 'ax.', '{0,0,0,0,0}', 1, '{1,1,1,1,1}', $args) \\g $OUT"
done
cat <<SQL
SELECT calls, round(mean_exec_time::numeric, 2) AS mean_ms, round(min_exec_time::numeric, 2) AS min_ms,
  round((mean_exec_time * 1000 / $N)::numeric, 1) AS mean_us_per_row, round((min_exec_time * 1000 / $N)::numeric, 1) AS min_us_per_row,
  round(wal_records::numeric / calls / $N, 2) AS wal_records_per_row, round(wal_bytes::numeric / calls / $N) AS wal_bytes_per_row
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query LIKE 'PREPARE s AS%';
ROLLBACK;
SQL
} | psql -X -q -v ON_ERROR_STOP=1
[[ -z ${EXPLAIN:-} ]] || { sed -E 's/\{[^}]{200,}\}/{...}/g' "$OUT"; rm -f "$OUT"; }
