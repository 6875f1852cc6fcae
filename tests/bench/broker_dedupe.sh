#!/usr/bin/env bash
# broker_dedupe.sh — the broker's heap and GC under bench_exec for each
# log.cleaner.dedupe.buffer.size given: infra's broker (AX_STATE) restarted
# with AX_KAFKA_DEDUPE_BYTES=BYTES, WARMUP full-load runs (default 6), then
# 3 pairs (full load; 1,000 jobs/s), with the old generation and G1's young
# and concurrent collections (jstat -gc) before and after the 3 pairs.
# BENCHMARKS.md, "Issue #13: the twenty-seventh session".
#
#   AX_STATE=var AX_CONFIG=var/ax.conf AXCONF_EXECUTOR_ALLOW_ROOT=true \
#     tests/bench/broker_dedupe.sh BUILD 134217728 16777216
#
# As root (the broker runs as user ax; jstat attaches as that user). Leaves
# the broker running with the last value; infra's default comes back at its
# next start without AX_KAFKA_DEDUPE_BYTES.
set -uo pipefail
B=$(cd "${1:?usage: broker_dedupe.sh BUILD BYTES...}" && pwd); shift
: "${AX_STATE:?set AX_STATE}" "${AX_CONFIG:?set AX_CONFIG}"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=infra/lib.sh
source "$here/../../infra/lib.sh"
J=$(dirname "$(readlink -f "$(ax_java)")")
broker_pid() {
    local p
    for p in $(pgrep -f kafka.Kafka); do
        tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -- "$AX_STATE/kafka" && { echo "$p"; return; }
    done
}
gc() { runuser -u "$AX_USER" -- "$J/jstat" -gc "$1" | tail -1 |
    awk -v w="$2" '{ printf "%s: old %.0f MB, young GCs %d (%.2f s), concurrent cycles %d\n", w, $8 / 1024, $13, $14, $17 }'; }
run() { "$B/tests/bench_exec" --config "$AX_CONFIG" --reuse-topics "$B" noop 1 20000 "$@" 2>&1; }
for bytes in "$@"; do
    echo "=== log.cleaner.dedupe.buffer.size=$bytes ($(date -u +%H:%M:%S))"
    ax_kafka_stop >/dev/null 2>&1
    AX_KAFKA_DEDUPE_BYTES=$bytes ax_kafka_start >/dev/null 2>&1 || { echo "broker_dedupe.sh: the broker did not start" >&2; exit 1; }
    kp=$(broker_pid)
    for ((i = 0; i < ${WARMUP:-6}; i++)); do run >/dev/null; done
    gc "$kp" before
    for r in 1 2 3; do
        run | grep -E '^(completed_per_s|cpu_pct)' | sed 's/^/full: /'
        run 1000 | grep -E '^(fire_start|sched_fin|cpu_pct)' | sed 's/^/1000\/s: /'
    done
    gc "$kp" after
done
