#!/usr/bin/env bash
# busy_timeline.sh — how busy the machine is, per 100 ms, while a bench_exec
# run's jobs flow (BENCHMARKS.md, "Issue #13: the twenty-eighth session").
# Samples the `cpu` line of /proc/stat every 20 ms while COMMAND runs, then
# prints bench_exec's completed_per_s and machine_busy_pct and the busy share
# of all cores in each 100 ms of its window (window_epoch_ms), from 100 ms
# before it to 100 ms after it. COMMAND's own output goes to OUT (default: a
# temporary file, removed).
#
#   tests/bench/busy_timeline.sh [--out FILE] -- build/rel/tests/bench_exec ARGS...
set -euo pipefail
out=
while (($#)); do
  case $1 in
    --out) out=${2:?--out needs FILE}; shift 2 ;;
    --) shift; break ;;
    *) echo "busy_timeline: usage: $0 [--out FILE] -- COMMAND [ARG...]" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "busy_timeline: no COMMAND" >&2; exit 2; }
samples=$(mktemp)
keep=$out
[ -n "$out" ] || out=$(mktemp)
trap 'rm -f "$samples"; [ -n "$keep" ] || rm -f "$out"' EXIT
"$@" >"$out" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  echo "$(date +%s%3N) $(head -1 /proc/stat)" >>"$samples"
  sleep 0.02
done
rc=0
wait "$pid" || rc=$?
grep -oE 'completed_per_s=[0-9]+|machine_busy_pct=[0-9]+' "$out" | tr '\n' ' '
echo
window=$(grep -oE 'window_epoch_ms=[0-9]+,[0-9]+' "$out" | cut -d= -f2)
[ -n "$window" ] || { echo "busy_timeline: no window_epoch_ms in the command's output (exit $rc)" >&2; exit 1; }
awk -v w="$window" '
  BEGIN { split(w, a, ","); w0 = a[1]; w1 = a[2] }
  { t = $1; idle = $6 + $7; tot = 0; for (i = 3; i <= 10; i++) tot += $i
    if (n++ && t >= w0 - 100 && t <= w1 + 100 && tot > ptot) {
      b = int((t - w0) / 100); if (t < w0) b = -1
      busy[b] += 1 - (idle - pidle) / (tot - ptot); cnt[b]++
      if (!(b in seen)) { seen[b] = 1; order[++k] = b }
    }
    pidle = idle; ptot = tot }
  END { printf "busy %% per 100 ms of the window (ms from its start):"
        for (i = 1; i <= k; i++) printf " %d:%d", order[i] * 100, 100 * busy[order[i]] / cnt[order[i]]
        print "" }' "$samples"
exit "$rc"
