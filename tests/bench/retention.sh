#!/usr/bin/env bash
# retention.sh — the leader's retention sweep (services/trigger/retention.c)
# measured (BENCHMARKS.md, "Issue #13: retention").
#
#   AX_CONFIG=ax.conf tests/bench/retention.sh BUILD rate [ROWS]
#       preload ROWS (default 500000) finished, published instances of
#       deployment ret.<pid>. (instance_def, instance_state, one job_attempt
#       each), finished two days ago; start one ax-trigger on that prefix
#       with retention.finished.ms = 1 day; time until all are deleted:
#       rows/s, and WAL bytes per deleted instance (pg_current_wal_lsn
#       around it: cluster-wide, other sessions' WAL is in it).
#   AX_CONFIG=ax.conf tests/bench/retention.sh BUILD ab [ROWS] [N] [ROUNDS]
#       ROUNDS (default 3) of: A = bench_exec BUILD noop 1 N (default 20000)
#       alone; B = the same while a second ax-trigger (deployment ret.<pid>.)
#       sweeps ROWS preloaded old rows. Prints completed_per_s and the
#       stage latencies of each run, and how many rows B deleted during it.
#   AX_CONFIG=ax.conf tests/bench/retention.sh BUILD loop [ROWS] [N] [ROUNDS] [RATE]
#       ROUNDS (default 3) of: A = bench_exec --reuse-topics BUILD noop 1 N
#       RATE (default 2000 a second) with its own trigger's retention on
#       (retention.finished.ms = 1 day) and nothing old; B = the same with
#       ROWS old rows preloaded in the benchmark's own deployment, so its
#       own leader sweeps them while it dispatches. Prints the latencies of
#       each run: what the sweep costs the leader that runs it.
#   RET_ARGS="--set k=v ..." are passed to the sweeping trigger (in loop
#   mode: to bench_exec, so to every service).
#
# The sweeping trigger is a second process: B measures what the deletes
# cost the hot path in PostgreSQL (WAL, locks, I/O, CPU), not the pause of
# the bench's own leader loop, which retention.budget.ms bounds.
set -euo pipefail
BUILD=$(cd "$1" && pwd); MODE=$2; ROWS=${3:-500000}; N=${4:-20000}; ROUNDS=${5:-3}
: "${AX_CONFIG:?AX_CONFIG}"
# as ab.sh: the executor refuses root without it (docs/SECURITY.md)
((EUID == 0)) && export AXCONF_EXECUTOR_ALLOW_ROOT=true
conf_get() { awk -F' *= *' -v k="$1" '$1 == k { print $2 }' "$AX_CONFIG" | tail -n 1; }
export PGHOST=$(conf_get pg.host) PGPORT=$(conf_get pg.port) PGDATABASE=$(conf_get pg.dbname) \
       PGUSER=$(conf_get pg.user) PGPASSWORD=$(conf_get pg.password)
DEP="ret.$$."
[ "$MODE" = loop ] && DEP="bench.reuse.p8s2." # bench_exec --reuse-topics' own deployment
RATE=${6:-2000}
sql() { psql -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }
TPID=

cleanup() {
    [ -n "$TPID" ] && kill "$TPID" 2>/dev/null && wait "$TPID" 2>/dev/null || true
    sql "DELETE FROM instance_def d USING instance_state s WHERE s.id = d.id AND s.deployment = '$DEP'" >/dev/null || true
    sql "DELETE FROM ax_leader WHERE role = '${DEP}trigger'" >/dev/null || true
    [ "$MODE" = loop ] || # bench_exec's reused topics stay
        AXCONF_TOPIC_PREFIX=$DEP "$BUILD/axctl/axctl" --config "$AX_CONFIG" topics delete >/dev/null 2>&1 || true
}
trap cleanup EXIT

preload() {
    sql "WITH d AS (INSERT INTO instance_def (id, trace_id, idempotency_key, timeout_ms, command, scheduled_at)
           SELECT nextval('job_instance_id_seq'), 'ret-' || g, 'ret-' || g, 1000, '{true}',
                  now() - interval '2 days' FROM generate_series(1, $ROWS) g RETURNING id),
         s AS (INSERT INTO instance_state (id, deployment, state, outcome, due_at, dispatched_at,
                  locked_at, running_at, finished_at, result_published_at, worker, exit_code, output)
           SELECT id, '$DEP', 'FINISHED', 'SUCCESS', now() - interval '2 days', now() - interval '2 days',
                  now() - interval '2 days', now() - interval '2 days', now() - interval '2 days',
                  now() - interval '2 days', 'w', 0, '' FROM d)
         INSERT INTO job_attempt_log (instance_id, attempt, worker, outcome, exit_code, started_at, finished_at)
           SELECT id, 1, 'w', 'SUCCESS', 0, now() - interval '2 days', now() - interval '2 days' FROM d" >/dev/null
    sql "VACUUM ANALYZE instance_def, instance_state, job_attempt_log" >/dev/null
}
left() { sql "SELECT count(*) FROM instance_state WHERE deployment = '$DEP'"; }

start_sweeper() {
    AXCONF_TOPIC_PREFIX=$DEP "$BUILD/axctl/axctl" --config "$AX_CONFIG" topics create --partitions 1 >/dev/null 2>&1 || true
    AXCONF_TOPIC_PREFIX=$DEP "$BUILD/services/trigger/ax-trigger" --config "$AX_CONFIG" \
        --set log.level=warn --set retention.finished.ms=86400000 ${RET_ARGS:-} >>"/tmp/retention.$$.trigger.log" 2>&1 &
    TPID=$!
}
stop_sweeper() { kill "$TPID"; wait "$TPID" 2>/dev/null || true; TPID=; }

# bench_exec's whole output in /tmp/retention.<pid>.<run>.log; its figures.
exec_run() {
    local log=/tmp/retention.$$.$1.log
    "$BUILD/tests/bench_exec" --config "$AX_CONFIG" "$BUILD" noop 1 "$N" >"$log" 2>&1 \
        || echo "(bench_exec exit $?, $log)"
    grep -E "completed_per_s|sched_fin_ms|pg_wal" "$log" | tr '\n' ' ' || true
}

case $MODE in
rate)
    preload
    n0=$(left); w0=$(sql "SELECT pg_current_wal_lsn()")
    t0=$(date +%s%3N)
    start_sweeper
    until [ "$(left)" = 0 ]; do sleep 0.2; done
    t1=$(date +%s%3N); w1=$(sql "SELECT pg_current_wal_lsn()")
    stop_sweeper
    wal=$(sql "SELECT pg_wal_lsn_diff('$w1', '$w0')::bigint")
    echo "deleted=$n0 ms=$((t1 - t0)) rows_per_s=$((n0 * 1000 / (t1 - t0))) wal_bytes_per_row=$((wal / n0))"
    ;;
ab)
    for r in $(seq 1 "$ROUNDS"); do
        out=$(exec_run "A$r")
        echo "round $r A (no sweep): $out"
        preload
        n0=$(left)
        start_sweeper
        until [ "$(left)" != "$n0" ]; do sleep 0.1; done # sweeping
        n1=$(left)
        out=$(exec_run "B$r")
        n2=$(left)
        echo "round $r B (sweeping): $out deleted_during_run=$((n1 - n2)) left=$n2"
        stop_sweeper
        sql "DELETE FROM instance_def d USING instance_state s WHERE s.id = d.id AND s.deployment = '$DEP'" >/dev/null
    done
    ;;
loop)
    for r in $(seq 1 "$ROUNDS"); do
        for v in A B; do
            [ $v = B ] && preload
            n1=$(left)
            log=/tmp/retention.$$.$v$r.log
            "$BUILD/tests/bench_exec" --config "$AX_CONFIG" --reuse-topics \
                --set retention.finished.ms=86400000 ${RET_ARGS:-} "$BUILD" noop 1 "$N" "$RATE" \
                >"$log" 2>&1 &
            bpid=$!
            # the old rows left as the run ends: the last count read before
            # its summary line (within 0.5 s), not after it, when bench_exec's
            # cleanup deletes the deployment's rows
            n2=$n1
            while kill -0 "$bpid" 2>/dev/null && ! grep -q completed_per_s "$log"; do
                n2=$(left); sleep 0.5
            done
            wait "$bpid" || echo "(bench_exec exit $?, $log)"
            echo "round $r $v: $(grep -E "completed_per_s|sched_fin_ms|submit_run" "$log" | tr '\n' ' ')" \
                "old_rows_before=$n1 after=$n2"
            sql "DELETE FROM instance_def d USING instance_state s WHERE s.id = d.id AND s.deployment = '$DEP'" >/dev/null
        done
    done
    ;;
*) echo "usage: $0 BUILD rate|ab|loop [ROWS] [N] [ROUNDS] [RATE]" >&2; exit 2 ;;
esac
