#!/usr/bin/env bash
# sustained.sh — a fixed rate of no-op jobs offered for a long time, with a
# report every minute (BENCHMARKS.md, "Issue #13: sustained load").
#
#   AX_CONFIG=ax.conf tests/bench/sustained.sh BUILD RATE [DURATION_S] [EXECUTORS]
#
# Runs `bench_exec --config AX_CONFIG --timeout 600 --live SUS_EVERY [retention settings]
# BUILD noop EXECUTORS RATE*DURATION_S RATE` (DURATION_S default 600,
# EXECUTORS 1): the services on a prefix of their own, a warm-up, then
# RATE submissions per second. From the end of the warm-up, every
# SUS_EVERY seconds (default 60) one line:
#
#   at              the line's wall-clock time, UTC (for PostgreSQL's log)
#   t_s             seconds since the measurement began (the warm-up's end)
#   offered         submissions offered so far (RATE x t_s)
#   fin, fin_per_s  results of the run read from <prefix>results in this
#                   interval (bench_exec --live: FINISHED and published)
#   fire_start_ms   running_at - scheduled_at of those, p50/p99 (these jobs
#                   are due when ingested: fire-to-start)
#   sched_fin_ms    finished_at - scheduled_at of those, p50/p99
#   submit_run_ms   running_at - the submission's produce time, p50/p99
#   not_success     those whose outcome is not SUCCESS
#   unfinished_pg   the run's instances in PostgreSQL not FINISHED
#   backlog         offered - finished so far (in Kafka or in PostgreSQL)
#   rss_mb_*        VmRSS of ax-trigger, ax-callback, each ax-executor
#   busy_pct        the machine's CPU busy over the interval, load1
#   rows/size       n_live_tup and pg_total_relation_size (MB) of
#                   instance_def, instance_state, job_attempt_log, job_fire,
#                   ax_result_outbox, ax_result_batch, idempotency_claim, submission (whole
#                   tables of the database: only this run writes them if the
#                   database is the run's own)
#
# Retention is short so that its bound shows within the run (SUS_RET, the
# default below: finished instances kept 120 s, the sweep every 250 ms for
# at most 100 ms, i.e. up to ~40 % of a PostgreSQL backend's time, on the
# leader's retention thread); the per-interval
# figures need the interval's rows, so keep retention.finished.ms above
# SUS_EVERY. SUS_ARGS: more --set k=v for bench_exec (passed to the
# services). After DURATION_S the benchmark is stopped (SIGTERM: it deletes
# its rows and topics) whatever the backlog: bench_exec's own summary (all
# N published) is neither waited for nor possible with retention deleting
# the rows it would count. Exit status 3 when an interval had an outcome
# other than SUCCESS. bench_exec's output: /tmp/sustained.<pid>.bench.log.
set -euo pipefail
BUILD=$(cd "$1" && pwd); RATE=$2; DUR=${3:-600}; NEXEC=${4:-1}
EVERY=${SUS_EVERY:-60}
: "${AX_CONFIG:?AX_CONFIG}"
((EUID == 0)) && export AXCONF_EXECUTOR_ALLOW_ROOT=true # as ab.sh (docs/SECURITY.md)
conf_get() { awk -F' *= *' -v k="$1" '$1 == k { print $2 }' "$AX_CONFIG" | tail -n 1; }
export PGHOST=$(conf_get pg.host) PGPORT=$(conf_get pg.port) PGDATABASE=$(conf_get pg.dbname) \
       PGUSER=$(conf_get pg.user) PGPASSWORD=$(conf_get pg.password)
RET=${SUS_RET:---set retention.finished.ms=120000 --set retention.ledger.ms=120000 --set retention.interval.ms=250 --set retention.budget.ms=100}
sql() { psql -X -q -t -A -F ' ' -v ON_ERROR_STOP=1 -c "$1"; }
LOG=/tmp/sustained.$$.bench.log
N=$((RATE * DUR))
BPID=

# bench_exec's own cleanup deletes its rows in one statement each, which
# PostgreSQL's statement timeout cancels at millions of rows: what is left
# of the run is deleted here by ranges of ids (a definition's delete takes
# its state row, attempts and submission key with it), then the job row.
purge() {
    local lo hi
    read -r lo hi < <(sql "SELECT coalesce(min(id), 0), coalesce(max(id), -1) FROM instance_state
                           WHERE deployment = '$DEP'")
    for ((; lo <= hi; lo += 100000)); do
        sql "DELETE FROM instance_def d USING instance_state s WHERE s.id = d.id
             AND s.id BETWEEN $lo AND $((lo + 99999)) AND s.deployment = '$DEP'" >/dev/null
    done
    sql "DELETE FROM dispatch_pending WHERE deployment = '$DEP'" >/dev/null
    sql "DELETE FROM job WHERE name = '$JOB'" >/dev/null
    sql "VACUUM (ANALYZE) instance_def, instance_state, job_attempt_log, submission" >/dev/null
}
stop_bench() {
    [ -n "$BPID" ] || return 0
    kill -TERM "$BPID" 2>/dev/null || true
    wait "$BPID" 2>/dev/null || true
    BPID=
    purge
}
trap stop_bench EXIT
trap 'exit 130' INT TERM

# shellcheck disable=SC2086 # RET and SUS_ARGS are lists of words
"$BUILD/tests/bench_exec" --config "$AX_CONFIG" --timeout 600 --live "$EVERY" $RET ${SUS_ARGS:-} \
    "$BUILD" noop "$NEXEC" "$N" "$RATE" >"$LOG" 2>&1 &
BPID=$!
DEP="bench.$BPID." JOB="bench-exec-$BPID"
until grep -q "warm-up:" "$LOG"; do
    kill -0 "$BPID" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
    sleep 0.2
done
T0=$(date +%s%3N)
JOB_ID=$(sql "SELECT id FROM job WHERE name = '$JOB'")
echo "rate=$RATE duration_s=$DUR executors=$NEXEC every_s=$EVERY retention: $RET ${SUS_ARGS:-}"

# VmRSS (MB) of bench_exec's children: trigger, callback, executors.
rss() {
    local p out="" c e=0
    for p in $(pgrep -P "$BPID" || true); do
        c=$(cat "/proc/$p/comm" 2>/dev/null) || continue
        c=${c#ax-}
        [ "$c" = executor ] && c=executor$((e++))
        out+=" rss_mb_$c=$(awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$p/status" 2>/dev/null)"
    done
    echo "$out"
}
cpu_line() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat; }
tables() {
    sql "SELECT string_agg(relname || '=' || n_live_tup || '/' ||
                round(pg_total_relation_size(relid) / 1048576.0, 1) || 'MB', ' ' ORDER BY relname)
         FROM pg_stat_user_tables WHERE relname IN ('instance_def', 'instance_state', 'job_attempt_log',
              'job_fire', 'ax_result_outbox', 'ax_result_batch', 'idempotency_claim', 'submission')"
}

echo "t_s=0 $(tables)"
fin_total=0 bad=0 k=0
read -r b0 t0 < <(cpu_line)
while :; do
    k=$((k + 1))
    # bench_exec's k-th "live" line: the results it read in the interval
    # (from the Result records: no statement on PostgreSQL)
    until (($(grep -c '^live ' "$LOG" || true) >= k)); do
        kill -0 "$BPID" 2>/dev/null || { echo "bench_exec ended early:" >&2; tail -5 "$LOG" >&2; exit 1; }
        sleep 0.2
    done
    now=$(date +%s%3N)
    line=$(grep '^live ' "$LOG" | sed -n "${k}p")
    val() { sed -nE "s/.* $1=([^ ]*).*/\1/p" <<<"$line"; }
    fin=$(val n) fs=$(val fire_start_ms) sf=$(val sched_fin_ms) sr=$(val submit_run_ms)
    ns=$(val not_success)
    unf=$(sql "SELECT count(*) FROM instance_state WHERE job_id = $JOB_ID AND active")
    read -r b1 t1 < <(cpu_line)
    busy=$(((b1 - b0) * 100 / (t1 - t0 > 0 ? t1 - t0 : 1)))
    b0=$b1 t0=$t1
    fin_total=$((fin_total + fin)) bad=$((bad + ns))
    ts=$(((now - T0) / 1000))
    off=$((RATE * (now - T0) / 1000)); ((off > N)) && off=$N
    printf 'at=%s t_s=%d offered=%d fin=%d fin_per_s=%d fire_start_ms=%s sched_fin_ms=%s submit_run_ms=%s not_success=%d unfinished_pg=%d backlog=%d%s busy_pct=%d load1=%s %s\n' \
        "$(date -u -d "@$((now / 1000))" +%T)" "$ts" "$off" "$fin" $((fin / EVERY)) "$fs" "$sf" "$sr" "$ns" "$unf" $((off - fin_total)) \
        "$(rss)" "$busy" "$(cut -d' ' -f1 /proc/loadavg)" "$(tables)"
    ((k * EVERY >= DUR)) && break
done
echo "finished_total=$fin_total offered_total=$N mean_fin_per_s=$((fin_total / DUR)) not_success_total=$bad"
stop_bench
grep -iE "cleanup|error|warn|SIGKILL" "$LOG" | cut -c1-200 | head -8 || true
((bad == 0)) || exit 3
