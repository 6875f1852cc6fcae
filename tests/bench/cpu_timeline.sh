#!/usr/bin/env bash
# cpu_timeline.sh — how busy the machine is while a burst goes through:
# the CPU of the whole machine sampled every 50 ms (/proc/stat) during one
# bench_exec run, printed per 50-ms step of the run's measurement window
# beside bench_exec's own summary and timeline (BENCHMARKS.md, "Issue #13:
# the twenty-first session").
#
#   AX_CONFIG=ax.conf tests/bench/cpu_timeline.sh BUILD N [BENCH_EXEC_ARG...]
#
# Runs `bench_exec --config AX_CONFIG --timeline 50 [BENCH_EXEC_ARG...]
# BUILD noop 1 N` (put --reuse-topics, --set k=v ... in BENCH_EXEC_ARG) and
# prints:
#
#   bench_exec's summary lines and its timeline (instances reaching each
#   state per 50 ms since the first was scheduled)
#   busy <t_ms> <pct>   the machine's CPU busy in the 50 ms ending t_ms
#                       after the window's start (window_epoch_ms: the
#                       first submission); 100 = both cores
#   busy_mean_span_pct  the mean over the first span_s of the window (the
#                       burst: first scheduled to last finished, which
#                       starts a little after the window does)
#   busy_mean_window_pct  the mean over the whole window, which also holds
#                       the wait for the last results to be read
#                       (bench_exec's machine_busy_pct, the same figure)
#
# Run it under the benchmark lock, one at a time. As root, export
# AXCONF_EXECUTOR_ALLOW_ROOT=true first (docs/SECURITY.md).
set -euo pipefail
ME=cpu_timeline.sh
die() { echo "$ME: $*" >&2; exit 2; }
(($# >= 2)) || die "usage: $ME BUILD N [BENCH_EXEC_ARG...]"
BUILD=$(cd "$1" 2>/dev/null && pwd) || die "$1: no such directory"
N=$2
shift 2
[[ $N =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer: $N"
: "${AX_CONFIG:?AX_CONFIG: the configuration file bench_exec passes on}"
[[ -x $BUILD/tests/bench_exec ]] || die "$BUILD/tests/bench_exec: not built"
command -v python3 >/dev/null || die "python3 is needed for the sampler"

tmp=$(mktemp -d)
sampler=
trap '[[ -n $sampler ]] && kill "$sampler" 2>/dev/null; rm -rf "$tmp"' EXIT

# epoch_ms busy_pct, every 50 ms, until killed
python3 - "$tmp/cpu" <<'EOF' &
import sys, time
out = open(sys.argv[1], "w")
def read():
    with open("/proc/stat") as f:
        v = list(map(int, f.readline().split()[1:]))
    return sum(v), v[3] + v[4]  # all, idle + iowait
a = read()
while True:
    time.sleep(0.05)
    b = read()
    total, idle = b[0] - a[0], b[1] - a[1]
    out.write("%d %.0f\n" % (time.time() * 1000, 100.0 * (total - idle) / max(total, 1)))
    out.flush()
    a = b
EOF
sampler=$!

rc=0
"$BUILD/tests/bench_exec" --config "$AX_CONFIG" --timeline 50 "$@" "$BUILD" noop 1 "$N" \
    >"$tmp/out" 2>&1 || rc=$?
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=
grep -E '^(completed_per_s|cpu_pct|cpu_us_per_job|timeline)' "$tmp/out" || true
((rc == 0)) || { tail -n 20 "$tmp/out" >&2; die "bench_exec exited $rc"; }

win=$(grep -oE 'window_epoch_ms=[0-9]+,[0-9]+' "$tmp/out" | cut -d= -f2) ||
    die "no window_epoch_ms in bench_exec's output"
span=$(grep -oE 'span_s=[0-9.]+' "$tmp/out" | head -n 1 | cut -d= -f2) ||
    die "no span_s in bench_exec's output"
awk -v w0="${win%,*}" -v w1="${win#*,}" -v span="$span" '
    $1 > w0 && $1 <= w1 + 50 {
        t = $1 - w0; printf "busy %d %s\n", t, $2
        all += $2; n++
        if (t <= span * 1000 + 50) { sp += $2; ns++ }
    }
    END {
        if (n == 0) { print "cpu_timeline.sh: no sample in the window" > "/dev/stderr"; exit 1 }
        printf "busy_mean_span_pct=%.0f busy_mean_window_pct=%.0f samples=%d\n",
            ns ? sp / ns : 0, all / n, n
    }' "$tmp/cpu"
