#!/usr/bin/env bash
# scrape_peer.sh — scrapes under a saturating load, ax's services beside a
# peer endpoint: a Prometheus server's own /metrics (Go's client library,
# Debian's prometheus package) on the same machine, scraped by the same
# long-lived scraper in the same loop, so both wait for the same cores.
#
#   AX_CONFIG=/path/ax.conf tests/bench/scrape_peer.sh BUILD [RUNS] [N] [INTERVAL_MS]
#
# Starts `prometheus` (no scrape jobs of its own, TSDB in a temporary
# directory) on 127.0.0.1:19690 and `BUILD/tests/bench_scrape --watch
# INTERVAL_MS` on the three services' metrics ports (bench_exec
# --metrics-port 19600: trigger :19600, callback :19601, executor :19602)
# and the peer; then RUNS times `bench_exec ... noop 1 N` under the
# machine-wide benchmark lock. For the scrapes whose start fell in each
# run's measurement window: per target p50, p99 and max of the client's
# time (connect to the last byte) and, for ax's services, the server's own
# read+render+send p99; the medians over the runs at the end.
# Defaults: 3 runs, N = 100000, INTERVAL_MS = 200.
set -euo pipefail
: "${AX_CONFIG:?AX_CONFIG}"
B=$(cd "${1:?BUILD}" && pwd); RUNS=${2:-3}; N=${3:-100000}; IV=${4:-200}
((EUID == 0)) && export AXCONF_EXECUTOR_ALLOW_ROOT=true
OUT=$(mktemp -d /tmp/scrape_peer.XXXXXX)
printf 'global:\n  scrape_interval: 60s\nscrape_configs: []\n' >"$OUT/prometheus.yml"
prometheus --config.file="$OUT/prometheus.yml" --storage.tsdb.path="$OUT/tsdb" \
    --web.listen-address=127.0.0.1:19690 >"$OUT/prometheus.log" 2>&1 &
PPID_=$!
"$B/tests/bench_scrape" --watch "$IV" "$OUT/scrapes" \
    127.0.0.1:19600 127.0.0.1:19601 127.0.0.1:19602 127.0.0.1:19690 &
WPID=$!
trap 'kill "$WPID" "$PPID_" 2>/dev/null || true' EXIT
for ((i = 0; i < 50; i++)); do
    curl -sf -o /dev/null http://127.0.0.1:19690/metrics && break; sleep 0.2
done
for r in $(seq 1 "$RUNS"); do
    flock /work/devenv/bench.lock "$B/tests/bench_exec" --config "$AX_CONFIG" --metrics-port 19600 \
        "$B" noop 1 "$N" >"$OUT/run.$r.out" 2>"$OUT/run.$r.err" || { echo "run $r failed ($OUT/run.$r.err)" >&2; continue; }
    read -r lo hi < <(sed -n 's/.*window_epoch_ms=\([0-9]*\),\([0-9]*\).*/\1 \2/p' "$OUT/run.$r.out")
    echo "run $r: $(grep -o 'completed_per_s=[0-9]*' "$OUT/run.$r.out") $(grep -o 'machine_busy_pct=[0-9]*' "$OUT/run.$r.out")"
    awk -v lo="$lo" -v hi="$hi" -v r="$r" '
        $1 >= lo && $1 <= hi { n[$2]++; c[$2, n[$2]] = $3; if ($4 != "-") s[$2, n[$2]] = $4 + $5 + $6 }
        function pct(arr, p, k, m,   i, j, t, v) { # sort arr[k, 1..m] into v
            for (i = 1; i <= m; i++) v[i] = arr[k, i]
            for (i = 2; i <= m; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
            i = int(p * m + 0.999999); if (i < 1) i = 1; if (i > m) i = m; return v[i] }
        END { name[19600] = "ax-trigger"; name[19601] = "ax-callback"; name[19602] = "ax-executor"; name[19690] = "prometheus"
              for (k in n) printf "run %s %s scrapes=%d client_p50=%.3f client_p99=%.3f client_max=%.3f server_p99=%s\n", r, name[k], n[k],
                  pct(c, 0.5, k, n[k]), pct(c, 0.99, k, n[k]), pct(c, 1.0, k, n[k]), (k == 19690 ? "-" : sprintf("%.3f", pct(s, 0.99, k, n[k]))) }' \
        "$OUT/scrapes" | sort -k3 | tee -a "$OUT/summary"
done
echo "medians over the runs:"
for t in ax-trigger ax-callback ax-executor prometheus; do
    awk -v t="$t" '$3 == t { for (i = 4; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = v[kv[1]] " " kv[2] } }
        END { printf "%s", t; for (k in v) { m = split(substr(v[k], 2), a, " "); if (a[1] == "-") { printf " %s=-", k; continue }
              for (i = 2; i <= m; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }
              printf " %s=%s", k, a[int((m + 1) / 2)] } print "" }' "$OUT/summary"
done
echo "(files: $OUT)"
