#!/usr/bin/env bash
# metrics_ab.sh — bench_exec with metrics off and on, alternating (off, on,
# off, on, ...), and the time of the scrapes made meanwhile.
#
#   AX_CONFIG=/path/ax.conf tests/bench/metrics_ab.sh BUILD [ROUNDS] [N] [EXECUTORS]
#
# BUILD is a release build directory (RelWithDebInfo). Each round runs
#   BUILD/tests/bench_exec --config $AX_CONFIG BUILD noop EXECUTORS N
# once as it is (metrics off: metrics.listen empty, no registry) and once
# with --set metrics.listen=127.0.0.1:0 (every service serves /metrics on a
# port of its own), while a scraper finds those ports (ss -ltnp of
# bench_exec's children) and scrapes each every second, as Prometheus would
# (BUILD/tests/bench_scrape, one scrape each). Prints every run's
# completed_per_s, the medians, on/off, and the scrape times (p50, p99,
# max over all scrapes of the "on" runs, per service). Defaults: 3 rounds,
# N = 20000, 1 executor. Run it under the machine-wide benchmark lock.
set -euo pipefail
: "${AX_CONFIG:?AX_CONFIG}"
B=${1:?BUILD}; ROUNDS=${2:-3}; N=${3:-20000}; K=${4:-1}
OUT=$(mktemp -d /tmp/metrics_ab.XXXXXX)

scraper() { # scraper BENCH_PID: scrape every listening port of its children each second
    local bp=$1 kids ports p name
    while kill -0 "$bp" 2>/dev/null; do
        kids=$(pgrep -P "$bp" | paste -sd'|' || true)
        if [ -n "$kids" ]; then
            while read -r p name; do
                "$B/tests/bench_scrape" "127.0.0.1:$p" 1 |
                    sed -n "s/.*scrape_ms_p50=\([0-9.]*\).*lines=\([0-9]*\).*/$name \1 \2/p" \
                        >>"$OUT/scrapes" || true
            done < <(ss -ltnpH 2>/dev/null | grep -E "pid=($kids)," |
                     sed -nE 's/.*127\.0\.0\.1:([0-9]+) .*users:\(\("([^"]+)".*/\1 \2/p' | sort -u)
        fi
        sleep 1
    done
}

run() { # run off|on ROUND
    local mode=$1 r=$2 extra=()
    [ "$mode" = on ] && extra=(--set metrics.listen=127.0.0.1:0)
    "$B/tests/bench_exec" --config "$AX_CONFIG" "${extra[@]}" "$B" noop "$K" "$N" \
        >"$OUT/$mode.$r.out" 2>"$OUT/$mode.$r.err" &
    local bp=$!
    [ "$mode" = on ] && scraper "$bp" &
    wait "$bp" || echo "run $mode $r failed (see $OUT/$mode.$r.err)" >&2
    wait
    local v; v=$(sed -n 's/.*completed_per_s=\([0-9]*\).*/\1/p' "$OUT/$mode.$r.out")
    echo "$mode $r ${v:-fail}" | tee -a "$OUT/runs"
}

for r in $(seq 1 "$ROUNDS"); do run off "$r"; run on "$r"; done
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
off=$(awk '$1 == "off" && $3 != "fail" { print $3 }' "$OUT/runs" | median)
on=$(awk '$1 == "on" && $3 != "fail" { print $3 }' "$OUT/runs" | median)
echo "completed_per_s off: $(awk '$1 == "off" { printf "%s ", $3 }' "$OUT/runs")median $off"
echo "completed_per_s on:  $(awk '$1 == "on" { printf "%s ", $3 }' "$OUT/runs")median $on"
awk -v a="$on" -v b="$off" 'BEGIN { if (b > 0) printf "on/off: %.3f\n", a / b }'
if [ -s "$OUT/scrapes" ]; then
    for s in $(awk '{ print $1 }' "$OUT/scrapes" | sort -u); do
        awk -v s="$s" '$1 == s { print $2 }' "$OUT/scrapes" | sort -n |
            awk -v s="$s" '{ v[NR] = $1 } END { k = int(NR * 0.99); if (k < 1) k = 1
                printf "scrape %s: %d scrapes, ms p50 %.3f p99 %.3f max %.3f\n",
                s, NR, v[int((NR + 1) / 2)], v[k], v[NR] }'
    done
    echo "lines per exposition: $(awk '{ print $1 "=" $3 }' "$OUT/scrapes" | sort -u | tail -n 6 | paste -sd' ')"
fi
echo "logs: $OUT"
