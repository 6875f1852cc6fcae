#!/usr/bin/env bash
# explain_finish.sh — EXPLAIN (ANALYZE, BUFFERS, WAL, VERBOSE) of the
# callback's batch statements (outcome.finish, outbox.pending,
# outbox.mark_published) on a batch of B RUNNING no-op instances, after
# PREFILL (20,000) FINISHED ones (BENCHMARKS.md, "Issue #13: the finish per
# row", "Issue #13: the twenty-third session").
# Not a test: a measurement, run by hand against a database of its own (it
# TRUNCATEs the instance tables).
#
#   H=me source /work/devenv/lib.sh; dev_migrate
#   PGPASSWORD=$(ax_pg_password) PSQL="psql -X -q -h 127.0.0.1 -p $AX_PG_PORT -U ax -d ax_me" \
#     [PREFILL=N] [WIDE=1] [CARRY=false] [FIN_SQL=FILE] tests/bench/explain_finish.sh [B] [finish|pending|mark|all]
#
# The statements are the store's own, read from the source by
# tests/bench/store_sql.py and run as prepared statements with their
# parameters; each runs in a transaction that is rolled back, except that
# pending and mark see the outbox a finish committed.
set -euo pipefail
B=${1:-500}; WHAT=${2:-all}
# PREFILL (default 20000): the FINISHED rows before the batch; WIDE=1: the
# finish's id bounds ($12, $13) from 1, as when the batch holds a result of
# an instance far older than the rest (the range then spans the table)
P=${PREFILL:-20000}
[[ $P =~ ^[0-9]+$ ]] || { echo "explain_finish: PREFILL is an integer" >&2; exit 2; }
LO=$((P + 1)); [[ ${WIDE:-0} == 1 ]] && LO=1
PSQL=${PSQL:-psql}
HERE=$(cd "$(dirname "$0")" && pwd)
psql_() { eval "$PSQL" -v ON_ERROR_STOP=1 '"$@"'; }
# FIN_SQL=FILE: the finish's text from FILE instead (another release's, to
# compare: (cd OLD_CHECKOUT && tests/bench/store_sql.py outcome.finish) >FILE)
if [[ -n ${FIN_SQL:-} ]]; then SQL_FIN=$(cat "$FIN_SQL"); else SQL_FIN=$("$HERE/store_sql.py" outcome.finish); fi
SQL_PEND=$("$HERE/store_sql.py" outbox.pending)
SQL_MARK=$("$HERE/store_sql.py" outbox.mark_published)

[[ -z ${GENERIC:-} ]] || export PGOPTIONS="-c plan_cache_mode=force_generic_plan"
# the rows go at the end (ids the sequence never gave out must not stay)
trap 'psql_ -c "TRUNCATE instance_def, instance_state, job_attempt_log, ax_result_batch, ax_result_outbox" \
            -c "DELETE FROM job WHERE name = '"'xf'"'" >/dev/null' EXIT
psql_ -c "TRUNCATE instance_def, instance_state, job_attempt_log, ax_result_batch, ax_result_outbox" \
      -c "DELETE FROM job WHERE name = 'xf'" \
      -c "INSERT INTO job (name, handler_kind, command, timeout_ms) VALUES ('xf', 'plugin', ARRAY['noop'], 60000)" >/dev/null
# $1 first id, $2 rows, $3 instance_state columns, $4 their values (g = 1..$2)
load() {
    psql_ -c "INSERT INTO instance_def (id, job_id, job_name, handler_kind, command, timeout_ms, trace_id,
                idempotency_key)
              SELECT $1 + g, j.id, j.name, 'plugin', ARRAY['noop'], 60000, md5(($1 + g)::text), 'k' || ($1 + g)
              FROM job j, generate_series(1, $2) g WHERE j.name = 'xf'" \
          -c "INSERT INTO instance_state (id, job_id, deployment, priority, $3)
              SELECT $1 + g, j.id, 'ax.', 2, $4 FROM job j, generate_series(1, $2) g
              WHERE j.name = 'xf'" >/dev/null
}
load 0 "$P" "due_at, state, outcome, finished_at, dispatched_at, locked_at, running_at, worker, result_published_at, exit_code" \
    "now() - interval '1 hour', 'FINISHED', 'SUCCESS', now(), now(), now(), now(), 'exec0', now(), 0"
psql_ -c "INSERT INTO job_attempt_log (instance_id, attempt, worker, outcome, exit_code, started_at, finished_at)
          SELECT id, 1, 'exec0', 'SUCCESS', 0, now(), now() FROM instance_state" >/dev/null
# the batch: dispatched, claimed (LOCKED) and started (RUNNING) as the executor does, HOT
load "$P" "$B" "due_at, dispatched_at" "now(), now()"
psql_ -c "UPDATE instance_state SET state = 'LOCKED', worker = 'exec0', locked_at = clock_timestamp(),
            lease_expires_at = now() + interval '30 s', holds_slot = true WHERE id > $P" \
      -c "UPDATE instance_state SET state = 'RUNNING', running_at = clock_timestamp() WHERE id > $P" \
      -c "ANALYZE instance_def, instance_state, job_attempt_log" >/dev/null
arr() { psql_ -tAc "SELECT '{' || string_agg($1, ',') || '}' FROM generate_series($P + 1, $P + $B) g"; }
IDS=$(arr "g::text"); ONES=$(arr "'1'"); OUT=$(arr "'SUCCESS'"); ZERO=$(arr "'0'")
NUL=$(arr "'NULL'"); EMPTY=$(arr "'\"\"'"); W=$(arr "'exec0'"); MS=$(arr "(extract(epoch FROM now()) * 1000)::bigint::text")

explain() { # title, prepare types, sql, args, commit?
    echo "=== $1 (B=$B)"
    psql_ -At -c "BEGIN" -c "PREPARE s($2) AS $3" \
        -c "EXPLAIN (ANALYZE, BUFFERS, WAL, VERBOSE) EXECUTE s($4)" -c "${5:-ROLLBACK}" |
        grep -v '^BEGIN\|^PREPARE\|^ROLLBACK\|^COMMIT'
}
# $11: the results returned for the publisher to carry (the publisher's own
# finish; false in every other callback process); $12, $13 the batch's id
# range; $14 the callback's deployment (the rows' 'ax.')
FT="bigint[], int[], ax_outcome[], int[], text[], text[], text[], text[], bigint[], bigint[], boolean, bigint, bigint, text"
FA="'$IDS', '$ONES', '$OUT', '$ZERO', '$NUL', '$NUL', '$EMPTY', '$W', '$MS', '$NUL', ${CARRY:-true}, $LO, $((P + B)), 'ax.'"
case $WHAT in
finish) explain finish "$FT" "$SQL_FIN" "$FA" ;;
pending|mark|all)
    [[ $WHAT == all ]] && explain finish "$FT" "$SQL_FIN" "$FA"
    psql_ -c "PREPARE s($FT) AS $SQL_FIN" -c "EXECUTE s($FA)" >/dev/null
    [[ $WHAT == mark ]] || explain pending "text, int, bigint[]" "$SQL_PEND" "'ax.', 5000, '{}'"
    [[ $WHAT == pending ]] || explain mark "text, bigint[], text, int[], bigint[]" "$SQL_MARK" \
        "'ax.', '$IDS', 'r', '{0}', '{$B}'" ;;
esac
