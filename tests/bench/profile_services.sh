#!/usr/bin/env bash
# profile_services.sh — where ax-trigger, ax-executor and ax-callback spend
# their CPU on the no-op path at full load: one bench_exec run, and once its
# measurement has started, a perf recording of the three services (call
# graphs) and, after it, per-service syscall counts. BENCHMARKS.md,
# "Issue #13: service CPU per job".
#
#   AX_CONFIG=/path/ax.conf flock /work/devenv/bench.lock \
#       tests/bench/profile_services.sh BUILD [N] [OUT]
#
# BUILD: a RelWithDebInfo build (services, plugins, tests/bench_exec);
# N submissions (default 150000: long enough for both windows at up to
# ~10,000 jobs/s); OUT: a directory (default /tmp/profile.<time>) for
# bench.log (bench_exec's output), perf.<service>.data, report.<service>.txt
# (self time by symbol), children.<service>.txt (time including callees),
# threads.<service>.txt (by thread name), syscalls.txt
# (perf stat of syscalls:sys_enter_* over PROFILE_STAT_S seconds, default 3,
# per job at the run's completed_per_s).
# PROFILE_RECORD_S (default 4): the recording's length; PROFILE_FREQ
# (default 499 Hz). As root, export AXCONF_EXECUTOR_ALLOW_ROOT=true first
# (BENCHMARKS.md).
set -uo pipefail
ME=profile_services.sh
die() { echo "$ME: $*" >&2; exit 1; }
(($# >= 1)) || die "usage: $ME BUILD [N] [OUT]"
B=$(cd "$1" && pwd) || die "$1: no such directory"
N=${2:-150000}
OUT=${3:-/tmp/profile.$(date +%Y%m%d-%H%M%S)}
REC_S=${PROFILE_RECORD_S:-4}
STAT_S=${PROFILE_STAT_S:-3}
FREQ=${PROFILE_FREQ:-499}
: "${AX_CONFIG:?set AX_CONFIG}"
command -v perf >/dev/null || die "perf is not installed (Debian: linux-perf)"
mkdir -p "$OUT" || die "cannot create $OUT"

"$B/tests/bench_exec" --config "$AX_CONFIG" "$B" noop 1 "$N" >"$OUT/bench.log" 2>&1 &
BPID=$!
trap 'kill -TERM $BPID 2>/dev/null; wait $BPID' INT TERM
for _ in $(seq 1 240); do
    grep -q 'warm-up:' "$OUT/bench.log" && break
    kill -0 $BPID 2>/dev/null || die "bench_exec ended early: $(tail -n 3 "$OUT/bench.log")"
    sleep 0.5
done
sleep 1
declare -A PID
for c in $(cat /proc/$BPID/task/*/children 2>/dev/null); do
    PID[$(cat /proc/$c/comm 2>/dev/null)]=$c
done
for s in ax-trigger ax-executor ax-callback; do
    [[ -n ${PID[$s]:-} ]] || die "no $s among bench_exec's children"
done
echo "$ME: trigger ${PID[ax-trigger]} executor ${PID[ax-executor]} callback ${PID[ax-callback]}" >&2
RP=()
for s in ax-trigger ax-executor ax-callback; do
    perf record -q -F "$FREQ" --call-graph dwarf,16384 -o "$OUT/perf.$s.data" -p "${PID[$s]}" \
        -- sleep "$REC_S" 2>"$OUT/record.$s.err" &
    RP+=($!)
done
wait "${RP[@]}"
# Syscalls per service over STAT_S seconds, per job at the run's
# completed_per_s (attaching to every thread takes perf a while: the jobs
# of the counted window are not known from timestamps).
SP=()
for s in ax-trigger ax-executor ax-callback; do
    perf stat -x, -e 'raw_syscalls:sys_enter,syscalls:sys_enter_*,context-switches,task-clock' \
        -p "${PID[$s]}" -o "$OUT/stat.$s.csv" -- sleep "$STAT_S" 2>/dev/null &
    SP+=($!)
done
wait "${SP[@]}"
wait $BPID
echo "$ME: bench_exec exit $?" >&2
rate=$(grep -oE 'completed_per_s=[0-9.]+' "$OUT/bench.log" | cut -d= -f2)
jobs=$(awk -v r="${rate:-0}" -v s="$STAT_S" 'BEGIN { printf "%d", r * s }')
echo "jobs_in_stat_window=$jobs (completed_per_s ${rate:-?} x $STAT_S s)" >"$OUT/syscalls.txt"
for s in ax-trigger ax-executor ax-callback; do
    {
        echo "== $s: per job"
        awk -F, -v j="$jobs" '$1 ~ /^[0-9.]+$/ && $1 > 0 { printf "%10.3f  %s\n", (j ? $1 / j : 0), $3 }' \
            "$OUT/stat.$s.csv" | sort -rn | head -n 25
    } >>"$OUT/syscalls.txt"
done
for s in ax-trigger ax-executor ax-callback; do
    perf report -i "$OUT/perf.$s.data" --no-children --stdio -g none --percent-limit 0.5 \
        --sort dso,symbol 2>/dev/null >"$OUT/report.$s.txt"
    perf report -i "$OUT/perf.$s.data" --children --stdio -g none --percent-limit 1 \
        --sort symbol 2>/dev/null >"$OUT/children.$s.txt"
    perf report -i "$OUT/perf.$s.data" --no-children --stdio --sort comm -g none \
        2>/dev/null >"$OUT/threads.$s.txt"
done
grep -E '^(completed_per_s|cpu_)' "$OUT/bench.log"
echo "$ME: $OUT" >&2
