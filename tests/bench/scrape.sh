#!/usr/bin/env bash
# scrape.sh — the time of GET /metrics of each service, idle after a load.
#
#   AX_CONFIG=/path/ax.conf tests/bench/scrape.sh BUILD [COUNT] [LOAD]
#
# Starts ax-trigger, ax-executor, ax-callback and ax-api from BUILD
# (release) on a topic prefix of its own (bench.scrape.<pid>., 8
# partitions) with metrics.listen = 127.0.0.1:19460, :19461, :19462, :19463
# (ax-api's API on a free port, one read token), submits LOAD inline `true`
# commands (default 1000, so every statement, histogram and Kafka
# statistic has values) and makes 200 API requests (a list page and an
# instance page of these, per route labels with values), waits 15 s, then
# scrapes each service COUNT times
# back to back (BUILD/tests/bench_scrape; default 1000) and prints its
# p50/p99/max in ms with the exposition's size. Services are stopped at the
# end (the topics stay, like the integration tests'). Run it under the
# machine-wide benchmark lock.
set -euo pipefail
: "${AX_CONFIG:?AX_CONFIG}"
B=${1:?BUILD}; COUNT=${2:-1000}; LOAD=${3:-1000}
export AXCONF_TOPIC_PREFIX=bench.scrape.$$. AXCONF_EXECUTOR_ALLOW_ROOT=true
"$B/axctl/axctl" --config "$AX_CONFIG" topics create --partitions 8 >/dev/null
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait' EXIT
i=0
for s in trigger executor callback; do
    "$B/services/$s/ax-$s" --config "$AX_CONFIG" --set log.level=warn \
        --set metrics.listen=127.0.0.1:1946$i 2>"/tmp/scrape.$$.$s.log" &
    pids+=($!)
    i=$((i + 1))
done
out=$("$B/axctl/axctl" --config "$AX_CONFIG" api token create scrape --scope read)
token=$(awk '/^token:/ { print $2 }' <<<"$out")
entry=$(awk '/entry:/ { print $3 }' <<<"$out")
aport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$B/services/api/ax-api" --config "$AX_CONFIG" --set log.level=warn \
    --set metrics.listen=127.0.0.1:19463 --set "api.listen=127.0.0.1:$aport" \
    --set "api.tokens=$entry" 2>"/tmp/scrape.$$.api.log" &
pids+=($!)
sleep 5
"$B/axctl/axctl" --config "$AX_CONFIG" submit --count "$LOAD" -- true >/dev/null
sleep 15
for _ in $(seq 1 100); do
    for u in "instances?limit=50" "instances/1"; do
        curl -s -o /dev/null -H "Authorization: Bearer $token" "http://127.0.0.1:$aport/api/v1/$u" || true
    done
done
i=0
for s in trigger executor callback api; do
    echo "ax-$s: $("$B/tests/bench_scrape" "127.0.0.1:1946$i" "$COUNT")"
    i=$((i + 1))
done
