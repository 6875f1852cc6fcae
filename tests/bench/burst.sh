#!/usr/bin/env bash
# burst.sh — the burst benchmark (BENCHMARKS.md, "The burst"): RUNS times,
# fresh services on a topic prefix of their own (two triggers, one executor,
# the callback; default settings), a burst of N submissions of a no-op
# plugin job produced as fast as Kafka takes them (bench_burst), until every
# instance is FINISHED (after 10,000 finished instances of history and an
# ANALYZE, as in tests/integration/170_burst.sh). Prints per run: time to produce, time to drain,
# first-finish latency, leader changes, statements cancelled by
# db.statement.timeout.ms, peak RSS (VmHWM) of each service.
#
#   AX_BIN=build/rel AX_SRC=. AX_CONFIG=/path/ax.conf tests/bench/burst.sh N [RUNS]
#
# TRIGGER_SET="--set k=v ..." adds settings of both triggers (e.g. a low
# trigger.lag.high, so the lanes defer and the burst waits in PostgreSQL).
# DUMP=PREFIX writes, per run, PREFIX.<run>.csv: every instance's id,
# priority and its scheduled_at, deferred_at, dispatched_at, locked_at,
# running_at, finished_at in epoch ms (where a drain's time goes).
#
# Not a ctest test. Uses the integration tests' lib.sh for starting and
# stopping services and cleaning up.
N=${1:?usage: burst.sh N [RUNS]}
RUNS=${2:-3}
. "$(dirname "$0")/../integration/lib.sh"
create_topics 4
PLUGDIR=$(cd "$AX_BIN/plugins" && pwd)
J="${JOBP}noop"
sql "INSERT INTO job (name, handler_kind, command, timeout_ms, retry_max)
     VALUES ('$J', 'plugin', ARRAY['$PLUGDIR/ax-noop.so'], 600000, 0)" >/dev/null
ROLE=$(topic trigger)
# History, as a production database has it: 10,000 finished instances of
# another job, and the planner's statistics taken over them before each
# burst (HISTORY=0: none).
HJ="${JOBP}history"
sql "INSERT INTO job (name, handler_kind, command, timeout_ms) VALUES ('$HJ', 'plugin', ARRAY['$PLUGDIR/ax-noop.so'], 60000)" >/dev/null
sql "INSERT INTO job_instance (job_id, job_name, handler_kind, command, timeout_ms, due_at, trace_id,
       idempotency_key, state, outcome, finished_at, dispatched_at, result_published_at)
     SELECT j.id, j.name, 'plugin', j.command, 60000, now() - interval '1 hour', md5(g::text),
       'h' || g, 'FINISHED', 'SUCCESS', now(), now(), now()
     FROM job j, generate_series(1, ${HISTORY:-10000}) g WHERE j.name = '$HJ'" >/dev/null
led() { [ -n "$(sql "SELECT 1 FROM ax_leader WHERE role = '$ROLE' AND expires_at > now()")" ]; }
ms() { printf '(extract(epoch FROM %s) * 1000)::bigint' "$1"; }
hwm() { awk '/VmHWM/ { printf "%d", $2 / 1024 }' "/proc/${SVC_PID[$1]}/status" 2>/dev/null; }
for run in $(seq 1 "$RUNS"); do
    # shellcheck disable=SC2086
    start_svc trigger@1 --set log.level=warn --set worker.id=b1 ${TRIGGER_SET:-}
    wait_for 30 "a leader" led
    # shellcheck disable=SC2086
    start_svc trigger@2 --set log.level=warn --set worker.id=b2 ${TRIGGER_SET:-}
    start_svc executor --set log.level=warn
    start_svc callback --set log.level=warn
    sleep 3
    sql "ANALYZE instance_def, instance_state" >/dev/null
    out=$("$AX_BIN/tests/bench_burst" --set log.level=warn "$J" "$N" | tr '\n' ' ')
    lost=$(cat "$WORK"/ax-trigger@*.log | grep -c "leadership lost" || true)
    cancelled=$(cat "$WORK"/*.log | grep -c "canceling statement due to statement timeout" || true)
    echo "run=$run N=$N $out lost_logged=$lost statements_cancelled=$cancelled rss_mb trigger1=$(hwm trigger@1) trigger2=$(hwm trigger@2) executor=$(hwm executor) callback=$(hwm callback)"
    [ -z "${DUMP:-}" ] || sql "COPY (SELECT id, priority, $(ms scheduled_at), $(ms deferred_at),
        $(ms dispatched_at), $(ms locked_at), $(ms running_at), $(ms finished_at)
        FROM job_instance WHERE job_name = '$J' ORDER BY id) TO STDOUT WITH CSV" >"$DUMP.$run.csv"
    for s in trigger@1 trigger@2 executor callback; do stop_svc "$s" TERM >/dev/null; done
    sql "DELETE FROM job_instance WHERE job_name = '$J'" >/dev/null
done
sql "DELETE FROM job_instance WHERE job_name = '$HJ'" >/dev/null
