#!/usr/bin/env bash
# partition.sh — partitions and their healing, timed (BENCHMARKS.md, "A healed
# partition"). Runs the integration tests 215_fence_executor and
# 216_fence_trigger (test hosts in network namespaces, root only) ROUNDS
# times, alternating, with the services of BUILD against CONF (a migrated
# database), and prints per run and as medians:
#   215 gone_ms     cut → the cut-off executor's 100-odd process groups all
#                   gone (lease 4 s)
#   215 spare_ms    how long before the first of their leases expired
#   215 back_ms     heal → the first command that executor starts again
#   216 takeover_ms cut of the leader's host from PostgreSQL → the standby's
#                   lease (trigger.lease.ms 4000)
#   216 fire_ms     the same cut → the first fire under the new leader
#
# KEEP=DIR keeps each run's service logs in DIR/ROUND-TEST.
#
#   flock /work/devenv/bench.lock tests/bench/partition.sh CONF BUILD [ROUNDS]
set -uo pipefail
CONF=${1:?CONF} B=${2:?BUILD} ROUNDS=${3:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$(dirname "$HERE")")
B=$(cd "$B" && pwd)
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : "-") }'; }
declare -A col=()
for r in $(seq 1 "$ROUNDS"); do
    for t in 215_fence_executor 216_fence_trigger; do
        keep=
        [ -n "${KEEP:-}" ] && keep=$KEEP/$r-$t && mkdir -p "$keep"
        line=$(AX_IT_KEEP=$keep AX_CONFIG=$CONF AX_BIN=$B AX_SRC=$SRC bash "$SRC/tests/integration/$t.sh" 2>&1 |
               grep -E "\] (OK|FAIL|SKIP)" | tail -n 1)
        echo "round $r $t: ${line#*] }"
        case $line in
            *215_fence*"] OK"*)
                col[gone]+="$(echo "$line" | sed -n 's/.*stopped \([0-9]*\) ms after the cut.*/\1/p') "
                col[spare]+="$(echo "$line" | sed -n 's/.* \([0-9]*\) ms before the first lease.*/\1/p') "
                col[back]+="$(echo "$line" | sed -n 's/.*again \([0-9]*\) ms after the heal.*/\1/p') " ;;
            *216_fence*"] OK"*)
                col[takeover]+="$(echo "$line" | sed -n 's/.*took over \([0-9]*\) ms after.*/\1/p') "
                col[fire]+="$(echo "$line" | sed -n 's/.*first fire under it \([0-9]*\) ms.*/\1/p') " ;;
        esac
    done
done
for k in gone spare back takeover fire; do
    echo "median ${k}_ms: $(echo ${col[$k]:-} | tr ' ' '\n' | grep . | median) (runs: ${col[$k]:-none})"
done
