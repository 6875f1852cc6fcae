#!/usr/bin/env bash
# brokers.sh — one Kafka broker against a three-node cluster (topics of
# replication factor 3, min.insync.replicas 2), the same build, one session,
# alternating (1, 3, 1, 3, ...): bench_exec's throughput (noop plugin jobs,
# one executor, N as fast as possible) and fire-to-start at RATE/s, and the
# medians and 3/1 ratios of ROUNDS runs each (BENCHMARKS.md, "Three
# brokers"). CONF1 and CONF3 are configurations of the same PostgreSQL
# with the two clusters' kafka.* keys (a cluster as infra starts it:
# AX_KAFKA_BROKERS=1 or 3); bench_exec creates its topics with the
# cluster's default replication (ax_kafka_replication_default).
#
#   flock /work/devenv/bench.lock tests/bench/brokers.sh CONF1 CONF3 BUILD [ROUNDS] [N] [LAT_N] [RATE]
set -uo pipefail
CONF1=${1:?CONF1} CONF3=${2:?CONF3} B=${3:?BUILD (a release build directory)}
ROUNDS=${4:-3} N=${5:-5000} LAT_N=${6:-3000} RATE=${7:-500}
((EUID == 0)) && export AXCONF_EXECUTOR_ALLOW_ROOT=true
OUT=$(mktemp -d /tmp/brokers.XXXXXX)
fig() { sed -n "s/.*$2=\([^ ]*\).*/\1/p" "$1" | head -1; }
declare -A tput=() p50=() p99=()
for ((r = 1; r <= ROUNDS; r++)); do
    for side in 1 3; do
        conf=$CONF1; [ "$side" = 3 ] && conf=$CONF3
        log=$OUT/tput.$side.$r.log
        "$B/tests/bench_exec" --config "$conf" --warmup 200 "$B" noop 1 "$N" >"$log" 2>&1
        tput[$side]+="$(fig "$log" completed_per_s) "
        log=$OUT/lat.$side.$r.log
        "$B/tests/bench_exec" --config "$conf" --warmup 200 "$B" noop 1 "$LAT_N" "$RATE" >"$log" 2>&1
        f=$(fig "$log" fire_start_ms_p50_p99_max)
        p50[$side]+="${f%%/*} "
        f=${f#*/}
        p99[$side]+="${f%%/*} "
        echo "round $r, $side broker(s): completed/s $(echo "${tput[$side]}" | awk '{print $NF}'), fire-to-start p50/p99 $(echo "${p50[$side]}" | awk '{print $NF}')/$(echo "${p99[$side]}" | awk '{print $NF}') ms" >&2
    done
done
med() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "-" }'; }
echo "| figure | 1 broker (runs) | median | 3 brokers, RF 3 (runs) | median | 3 / 1 |"
echo "|---|---|---|---|---|---|"
for k in tput p50 p99; do
    case $k in
        tput) name="completed/s, noop, 1 executor, $N (↑)"; a=${tput[1]} b=${tput[3]} ;;
        p50) name="fire-to-start p50 ms at $RATE/s (↓)"; a=${p50[1]} b=${p50[3]} ;;
        p99) name="fire-to-start p99 ms at $RATE/s (↓)"; a=${p99[1]} b=${p99[3]} ;;
    esac
    m1=$(med "$a"); m3=$(med "$b")
    echo "| $name | ${a% } | $m1 | ${b% } | $m3 | $(ratio "$m1" "$m3") |"
done
echo "logs: $OUT" >&2
