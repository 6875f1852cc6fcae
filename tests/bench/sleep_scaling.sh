#!/usr/bin/env bash
# sleep_scaling.sh — sleep10 scaling, 1 -> 2 executors (BENCHMARKS.md,
# "Issue #13: sustained load and sleep10 scaling").
#
#   AX_CONFIG=ax.conf tests/bench/sleep_scaling.sh BUILD [ROUNDS] [N1]
#
# ROUNDS (default 3) of, alternated:
#   bench_exec --config AX_CONFIG --set executor.pools=plugin:8:4096 BUILD sleep10 1 N1
#   bench_exec --config AX_CONFIG --set executor.pools=plugin:8:4096 BUILD sleep10 2 2*N1
# (N1 default 4000: jobs of ax-sleep.so 10, 8 plugin slots per executor, so
# at most 800 jobs/s per executor). Prints each run's completed_per_s,
# fire-to-start and the busy slots' share (completed/s x 10 ms / slots), then
# the medians and efficiency = median(2) / (2 x median(1)).
# SCALE_ARGS: more bench_exec options (e.g. --set executor.queue=...).
# Logs: /tmp/sleep_scaling.<pid>.<K>.<round>.log.
set -uo pipefail
BUILD=$(cd "$1" && pwd); ROUNDS=${2:-3}; N1=${3:-4000}
: "${AX_CONFIG:?AX_CONFIG}"
((EUID == 0)) && export AXCONF_EXECUTOR_ALLOW_ROOT=true # as ab.sh (docs/SECURITY.md)
declare -A v
for r in $(seq 1 "$ROUNDS"); do
    for k in 1 2; do
        log=/tmp/sleep_scaling.$$.$k.$r.log
        # shellcheck disable=SC2086 # SCALE_ARGS is a list of words
        "$BUILD/tests/bench_exec" --config "$AX_CONFIG" --set executor.pools=plugin:8:4096 \
            ${SCALE_ARGS:-} "$BUILD" sleep10 "$k" $((N1 * k)) >"$log" 2>&1 || echo "(exit $?, $log)"
        c=$(grep -o 'completed_per_s=[0-9]*' "$log" | cut -d= -f2)
        v[$k,$r]=${c:-0}
        echo "round $r executors $k: completed_per_s=${c:-fail} slots_busy_pct=$(( ${c:-0} * 10 * 100 / (8 * k) / 1000 ))" \
             "$(grep -o 'fire_start_ms_p50_p99_max=[^ ]*' "$log") $(grep -o 'cpu_pct_executors=[^ ]*' "$log") $(grep -o 'machine_busy_pct=[^ ]*' "$log")"
    done
done
# the median of the runs that printed a figure (a failed run is left out)
med() { printf '%s\n' "$@" | awk '$1 > 0' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] + 0 }'; }
m1=$(med $(for r in $(seq 1 "$ROUNDS"); do echo "${v[1,$r]}"; done))
m2=$(med $(for r in $(seq 1 "$ROUNDS"); do echo "${v[2,$r]}"; done))
echo "median_1=$m1 median_2=$m2 efficiency=$(awk -v a="$m1" -v b="$m2" 'BEGIN { printf "%.2f", (a > 0 ? b / (2 * a) : 0) }')"
