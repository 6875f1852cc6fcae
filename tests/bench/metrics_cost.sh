#!/usr/bin/env bash
# metrics_cost.sh — bench_exec with metrics off and on, alternating, with one
# long-lived scraper; the services' CPU per job on vs off, the throughput,
# and the time of the scrapes made under the load (client and server side).
#
#   AX_CONFIG=/path/ax.conf tests/bench/metrics_cost.sh BUILD [ROUNDS] [N] [INTERVAL_MS] [MODES]
#
# BUILD is a release build directory. One scraper (BUILD/tests/bench_scrape
# --watch INTERVAL_MS, as a Prometheus is) is started once and runs through
# every round, scraping 127.0.0.1:19600 (trigger), :19601 (callback) and
# :19602 (the executor) every INTERVAL_MS: in the "off" runs nothing listens
# there (a refused connect each), in the "on" runs bench_exec starts the
# services with --metrics-port 19600. Each round runs
#   BUILD/tests/bench_exec --config $AX_CONFIG [--metrics-port 19600] BUILD noop 1 N
# off then on (odd rounds) or on then off (even rounds), each round under
# the machine-wide benchmark lock (flock /work/devenv/bench.lock), so other
# benchmarks get the lock between rounds. MODES: the runs of a round, in
# that order in odd rounds and reversed in even ones, of off, on, and onk
# (on, but librdkafka's statistics off: --set kafka.statistics.interval.ms=0);
# default "off on"; "on" alone for the scrape figures. Prints each run's completed/s, CPU µs per job of
# the three services (cpu_us_per_job_*), the machine's busy %, the medians
# and on/off ratios, and for the "on" runs the scrapes whose start fell in
# bench_exec's measurement window: per service, the medians over the runs
# of each run's p50 and p99 of client time (connect to last byte) and of
# the server's read, render and send phases and render CPU (bench_scrape.c).
# Defaults: 3 rounds, N = 100000, INTERVAL_MS = 1000.
set -euo pipefail
: "${AX_CONFIG:?AX_CONFIG}"
B=${1:?BUILD}; ROUNDS=${2:-3}; N=${3:-100000}; IV=${4:-1000}; MODES=${5:-off on}
BASE=19600
OUT=$(mktemp -d /tmp/metrics_cost.XXXXXX)
"$B/tests/bench_scrape" --watch "$IV" "$OUT/scrapes" \
    127.0.0.1:$BASE 127.0.0.1:$((BASE + 1)) 127.0.0.1:$((BASE + 2)) &
WPID=$!
trap 'kill "$WPID" 2>/dev/null || true' EXIT

run() { # run off|on ROUND
    local mode=$1 r=$2 extra=()
    [ "$mode" = on ] && extra=(--metrics-port "$BASE")
    [ "$mode" = onk ] && extra=(--metrics-port "$BASE" --set kafka.statistics.interval.ms=0)
    if ! "$B/tests/bench_exec" --config "$AX_CONFIG" "${extra[@]}" "$B" noop 1 "$N" \
        >"$OUT/$mode.$r.out" 2>"$OUT/$mode.$r.err"; then
        echo "run $mode $r failed (see $OUT/$mode.$r.err)" >&2
        return 0
    fi
    local o="$OUT/$mode.$r.out" v c w
    v=$(sed -n 's/.*completed_per_s=\([0-9]*\).*/\1/p' "$o")
    c=$(sed -n 's/.*cpu_us_per_job_trigger=\([0-9.]*\) cpu_us_per_job_callback=\([0-9.]*\) cpu_us_per_job_executors=\([0-9.]*\) cpu_us_per_job_services=\([0-9.]*\).*/\1 \2 \3 \4/p' "$o")
    w=$(sed -n 's/.*window_epoch_ms=\([0-9]*\),\([0-9]*\).*/\1 \2/p' "$o")
    echo "$mode $r $v $c $(sed -n 's/.*machine_busy_pct=\([0-9]*\).*/\1/p' "$o") $w" >>"$OUT/runs"
}

export -f run
export B N BASE OUT AX_CONFIG
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then order=$MODES
    else order=$(echo $MODES | tr ' ' '\n' | tac | paste -sd' '); fi
    flock /work/devenv/bench.lock bash -c "for m in $order; do run \$m $r; done"
    tail -n "$(wc -w <<<"$order")" "$OUT/runs" | sed 's/^/run /'
done
kill "$WPID" 2>/dev/null || true
wait "$WPID" 2>/dev/null || true

med() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
echo "# mode round completed_per_s cpu_us_per_job: trigger callback executor services; machine_busy_pct"
awk '{ print $1, $2, $3, $4, $5, $6, $7, $8 }' "$OUT/runs"
for col in 3:completed_per_s 4:cpu_us_trigger 5:cpu_us_callback 6:cpu_us_executor 7:cpu_us_services; do
    k=${col%%:*}; name=${col#*:}
    off=$(awk -v k="$k" '$1 == "off" { print $k }' "$OUT/runs" | med)
    line="$name median off $off"
    for m in on onk; do
        v=$(awk -v k="$k" -v m="$m" '$1 == m { print $k }' "$OUT/runs" | med)
        [ "$v" = - ] && continue
        line="$line $m $v$(awk -v a="$v" -v b="$off" 'BEGIN { if (b + 0 > 0) printf " (%s/off %.3f)", "x", a / b }' | sed "s/x/$m/")"
    done
    echo "$line"
done
# Scrapes in each "on" run's measurement window: per run and port, p50 and p99 of each column.
awk '$1 == "on" || $1 == "onk" { print $1 $2, $9, $10 }' "$OUT/runs" | while read -r r w0 w1; do
    for p in 0 1 2; do
        awk -v a="$w0" -v b="$w1" -v port=$((BASE + p)) '$1 >= a && $1 <= b && $2 == port' \
            "$OUT/scrapes" >"$OUT/s.$r.$p"
        [ -s "$OUT/s.$r.$p" ] || continue
        line="$r $p $(wc -l <"$OUT/s.$r.$p")"
        for c in 3 4 5 6 7; do
            line="$line $(awk -v c="$c" '{ print $c }' "$OUT/s.$r.$p" | sort -g |
                awk '{ v[NR] = $1 } END { k = int(NR * 0.99 + 0.5); if (k < 1) k = 1; if (k > NR) k = NR
                    printf "%s %s", v[int((NR + 1) / 2)], v[k] }')"
        done
        echo "$line $(tail -n 1 "$OUT/s.$r.$p" | awk '{ print $9 }')" >>"$OUT/scrape_runs"
    done
done
if [ -s "$OUT/scrape_runs" ]; then
    echo "# scrapes under load, ms, median over runs of each run's p50/p99: client read render send render_cpu"
    for p in 0 1 2; do
        name=$(echo trigger callback executor | cut -d' ' -f$((p + 1)))
        awk -v p="$p" '$2 == p' "$OUT/scrape_runs" >"$OUT/sr.$p"
        [ -s "$OUT/sr.$p" ] || continue
        line="$name scrapes/run $(awk '{ print $3 }' "$OUT/sr.$p" | med) lines $(awk '{ print $14 }' "$OUT/sr.$p" | med)"
        for c in 4 6 8 10 12; do
            line="$line | $(awk -v c="$c" '{ print $c }' "$OUT/sr.$p" | med)/$(awk -v c=$((c + 1)) '{ print $c }' "$OUT/sr.$p" | med)"
        done
        echo "$line"
    done
fi
echo "logs: $OUT"
