#!/usr/bin/env bash
# trace_index.sh — what instance_def's trace-id index costs the ingest, as
# the B-tree it is and as a hash index (BENCHMARKS.md, "Issue #13: the
# twenty-second session": measured, not taken). Three scratch copies of
# instance_def (CREATE TABLE ... LIKE instance_def INCLUDING DEFAULTS
# INCLUDING CONSTRAINTS, with its primary key and its job, flow and parent
# indexes made alike) in AX_CONFIG's database: one without a trace index,
# one with a B-tree, one with a hash index. Each is filled with PREFILL
# rows like bench_exec's but with trace ids like ax's own (32 random hex
# digits; TRACE=time: 32 hex digits whose first 12 are the time in ms, as
# ax generates them since the twenty-eighth session; TRACE=same: one
# trace id for every row, as a client that sets a constant one), then
# ROUNDS rounds insert 1,000 more rows into each in turn (committed, so the
# indexes grow as they do under load), and the script prints each table's
# median and each round's ms per 1,000 rows, and the WAL bytes per row of
# its last round (the insert's own, EXPLAIN (ANALYZE, WAL)). The tables
# are dropped at the end.
#   AX_CONFIG=ax.conf [TRACE=random|time|same] tests/bench/trace_index.sh [PREFILL] [ROUNDS]
set -euo pipefail
PREFILL=${1:-300000}; ROUNDS=${2:-15}
[[ $PREFILL =~ ^[0-9]+$ && $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "trace_index: PREFILL and ROUNDS are integers" >&2; exit 2; }
: "${AX_CONFIG:?set AX_CONFIG}"
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGDATABASE=$(cfg pg.dbname)
export PGPASSWORD=$(cfg pg.password)
T="bench_trace_none bench_trace_btree bench_trace_hash"
case ${TRACE:-random} in
random) TRACE_EXPR="md5(random()::text)" ;;
time) TRACE_EXPR="ax_trace_id()" ;; # migration 028
same) TRACE_EXPR="'the-same-trace-id-for-every-row'" ;;
*) echo "trace_index: TRACE is random, time or same" >&2; exit 2 ;;
esac
q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
cleanup() { for t in $T; do q -c "DROP TABLE IF EXISTS $t" 2>/dev/null || true; done; q -c "DROP SEQUENCE IF EXISTS bench_trace_seq" 2>/dev/null || true; }
trap cleanup EXIT
cleanup
rows() { # rows TABLE N: N rows like bench_exec's
    echo "INSERT INTO $1 (id, job_id, job_name, handler_kind, command, payload, timeout_ms, trace_id,
      idempotency_key, executor_group)
      SELECT nextval('bench_trace_seq'), 1, 'bench', 'plugin', ARRAY['ax-noop.so'], '\\x', 60000,
        $TRACE_EXPR, 'idem-' || g, 'default' FROM generate_series(1, $2) g"
}
q -c "CREATE SEQUENCE bench_trace_seq"
for t in $T; do
    # every index of instance_def but its trace index(es), then this table's
    q -c "CREATE TABLE $t (LIKE instance_def INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
    q -c "ALTER TABLE $t ADD PRIMARY KEY (id)" \
      -c "CREATE INDEX ON $t (job_id, id)" \
      -c "CREATE INDEX ON $t (flow_run_id) WHERE flow_run_id IS NOT NULL" \
      -c "CREATE INDEX ON $t (parent_id) WHERE parent_id IS NOT NULL"
    case $t in
    *btree) q -c "CREATE INDEX ON $t (trace_id)" ;;
    *hash) q -c "CREATE INDEX ON $t USING hash (trace_id)" ;;
    esac
    ((PREFILL > 0)) && q -c "$(rows "$t" "$PREFILL")"
    q -c "VACUUM ANALYZE $t"
done
echo "prefill=$PREFILL rounds=$ROUNDS trace=${TRACE:-random} (ms per 1,000 rows)"
out=$(for ((r = 0; r < ROUNDS; r++)); do
    for t in $T; do
        echo "\\echo $t"
        echo "EXPLAIN (ANALYZE, WAL, COSTS OFF) $(rows "$t" 1000);"
    done
done | q | awk '/^bench_trace_/ {t = $1; first = 1}
    /WAL:/ && first {first = 0; for (i = 1; i <= NF; i++) if ($i ~ /^bytes=/) w[t] = substr($i, 7)}
    /Execution Time/ {print t, $3} END {for (k in w) print "wal", k, w[k]}')
for t in $T; do
    ms=$(awk -v t="$t" '$1 == t {print $2}' <<<"$out")
    med=$(sort -n <<<"$ms" | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
    wal=$(awk -v t="$t" '$1 == "wal" && $2 == t {printf "%.0f", $3 / 1000}' <<<"$out")
    echo "table=$t median_ms=$med wal_bytes_per_row=$wal rounds_ms=$(tr '\n' ' ' <<<"$ms")"
done
