#!/usr/bin/env bash
# stmt_timeline.sh — every statement PostgreSQL ran during a bench_exec run,
# placed in time (BENCHMARKS.md, "Issue #13: the twenty-eighth session",
# "One run's statements in time"). Sets log_min_duration_statement = 0 for
# the run (ALTER SYSTEM, reset afterwards, also on failure), runs COMMAND,
# then reads the lines the run added to PostgreSQL's log ("duration: D ms
# execute NAME: ..."; a statement's start is the line's time minus D) and
# prints, per prepared statement name (ax's are its store layer's names:
# dispatch.ingest, outcome.finish, run.claim, ...): how many ran, the first
# start and the last end in ms from the start of bench_exec's window
# (window_epoch_ms), and the time they took in all (busy: the sum of their
# durations, over every backend). COMMAND's own output goes to OUT (default:
# a temporary file, removed).
#
#   tests/bench/stmt_timeline.sh [--log FILE] [--out FILE] -- build/rel/tests/bench_exec ARGS...
#
# The connection is psql's defaults and PG* variables (as the superuser
# that may ALTER SYSTEM: user ax on the development servers); --log is the
# server's log (default: $AX_STATE/log/postgres.log, AX_STATE default var/).
set -euo pipefail
log=${AX_STATE:-var}/log/postgres.log
out=
while (($#)); do
  case $1 in
    --log) log=${2:?--log needs FILE}; shift 2 ;;
    --out) out=${2:?--out needs FILE}; shift 2 ;;
    --) shift; break ;;
    *) echo "stmt_timeline: usage: $0 [--log FILE] [--out FILE] -- COMMAND [ARG...]" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "stmt_timeline: no COMMAND" >&2; exit 2; }
[ -r "$log" ] || { echo "stmt_timeline: cannot read the server log $log (--log)" >&2; exit 2; }
keep=$out
[ -n "$out" ] || out=$(mktemp)
lines=$(mktemp)
pg() { psql -X -q -At -v ON_ERROR_STOP=1 "$@" >/dev/null; }
reset() { pg -c "ALTER SYSTEM RESET log_min_duration_statement" -c "SELECT pg_reload_conf()" || true; }
trap 'reset; rm -f "$lines"; [ -n "$keep" ] || rm -f "$out"' EXIT
start=$(stat -c %s "$log")
pg -c "ALTER SYSTEM SET log_min_duration_statement = 0" -c "SELECT pg_reload_conf()"
sleep 0.5 # every backend has read the reloaded setting at its next statement
rc=0
"$@" >"$out" 2>&1 || rc=$?
reset
sleep 0.2
tail -c +"$((start + 1))" "$log" >"$lines"
grep -oE 'completed_per_s=[0-9]+' "$out" || true
window=$(grep -oE 'window_epoch_ms=[0-9]+,[0-9]+' "$out" | cut -d= -f2)
[ -n "$window" ] || { echo "stmt_timeline: no window_epoch_ms in the command's output (exit $rc)" >&2; exit 1; }
python3 - "$window" "$lines" <<'EOF'
import calendar, re, sys
w0, w1 = (int(x) for x in sys.argv[1].split(","))
pat = re.compile(r"^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{3}) UTC \[(\d+)\].*?"
                 r"duration: ([0-9.]+) ms  (?:execute ([^:]+)|statement)")
st = {}
for line in open(sys.argv[2], errors="replace"):
    m = pat.match(line)
    if not m:
        continue
    y, mo, d, h, mi, s, ms = (int(m.group(i)) for i in range(1, 8))
    end = calendar.timegm((y, mo, d, h, mi, s)) * 1000 + ms
    dur = float(m.group(9))
    name = m.group(10) or "(simple query)"
    begin = end - dur
    if end < w0 - 100 or begin > w1 + 100:
        continue
    e = st.setdefault(name, [0, begin, end, 0.0])
    e[0] += 1
    e[1] = min(e[1], begin)
    e[2] = max(e[2], end)
    e[3] += dur
print(f"window {w1 - w0} ms; statements by name (ms from the window's start):")
print(f"{'statement':<32} {'count':>7} {'first':>8} {'last end':>9} {'busy ms':>9}")
for name, (n, b, e, busy) in sorted(st.items(), key=lambda kv: -kv[1][3]):
    print(f"{name:<32} {n:>7} {b - w0:>8.0f} {e - w0:>9.0f} {busy:>9.1f}")
EOF
exit "$rc"
