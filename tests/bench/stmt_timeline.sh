#!/usr/bin/env bash
# stmt_timeline.sh — every statement PostgreSQL ran during a bench_exec run,
# placed in time (BENCHMARKS.md, "Issue #13: the twenty-eighth session",
# "One run's statements in time"). Sets log_min_duration_statement = 0 for
# the run, with log_parameter_max_length = 0 (ALTER SYSTEM, both RESET
# afterwards, also on failure: a setting of your own is gone too), runs
# COMMAND, then reads the lines the run added to PostgreSQL's log for the
# connection's database ("duration: D ms  parse|bind|execute NAME: TEXT"; a
# step's start is the line's time minus D) and prints, per statement (its
# text's first 72 characters: ax names its prepared statements ax1, ax2, ...
# per connection in the order of first use, so a name says nothing across
# processes): how many ran (executes), the first start and the last end in
# ms from the start of bench_exec's window (window_epoch_ms), and the time
# they took in all (busy: the sum of their parse, bind and execute
# durations, over every backend). COMMAND's own output goes to OUT (default:
# a temporary file, removed). The server must log in UTC (log_timezone).
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
reset() {
  pg -c "ALTER SYSTEM RESET log_min_duration_statement" -c "ALTER SYSTEM RESET log_parameter_max_length" \
     -c "SELECT pg_reload_conf()" || true
}
trap 'reset; rm -f "$lines"; [ -n "$keep" ] || rm -f "$out"' EXIT
tz=$(psql -X -At -c "SHOW log_timezone")
case $tz in UTC | Etc/UTC | UCT | Etc/UCT | Zulu | Etc/Zulu | GMT | Etc/GMT) ;;
  *) echo "stmt_timeline: the server logs in $tz, not UTC" >&2; exit 2 ;; esac
db=$(psql -X -At -c "SELECT current_database()")
start=$(stat -c %s "$log")
pg -c "ALTER SYSTEM SET log_min_duration_statement = 0" -c "ALTER SYSTEM SET log_parameter_max_length = 0" \
   -c "SELECT pg_reload_conf()"
sleep 0.5 # every backend has read the reloaded setting at its next statement
rc=0
"$@" >"$out" 2>&1 || rc=$?
reset
sleep 0.2
tail -c +"$((start + 1))" "$log" >"$lines"
grep -oE 'completed_per_s=[0-9]+' "$out" || true
window=$(grep -oE 'window_epoch_ms=[0-9]+,[0-9]+' "$out" | cut -d= -f2 || true)
[ -n "$window" ] || { echo "stmt_timeline: no window_epoch_ms in the command's output (exit $rc)" >&2; exit 1; }
python3 - "$window" "$lines" "$db" <<'EOF'
import calendar, re, sys
w0, w1 = (int(x) for x in sys.argv[1].split(","))
db = sys.argv[3]
# log_line_prefix '%m [%p] %q%u@%d ' (infra/lib.sh)
pat = re.compile(r"^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{3}) UTC \[\d+\] "
                 r"\S*@(\S+) LOG:  duration: ([0-9.]+) ms  "
                 r"(?:(parse|bind|execute) [^:]+|statement): (.*)")
st = {}
for line in open(sys.argv[2], errors="replace"):
    m = pat.match(line)
    if not m or m.group(8) != db:
        continue
    y, mo, d, h, mi, s, ms = (int(m.group(i)) for i in range(1, 8))
    end = calendar.timegm((y, mo, d, h, mi, s)) * 1000 + ms
    dur = float(m.group(9))
    step = m.group(10) or "execute"
    text = " ".join(m.group(11).split())[:72]
    begin = end - dur
    if end < w0 - 100 or begin > w1 + 100:
        continue
    e = st.setdefault(text, [0, begin, end, 0.0])
    e[0] += step == "execute"
    e[1] = min(e[1], begin)
    e[2] = max(e[2], end)
    e[3] += dur
print(f"window {w1 - w0} ms, database {db}; statements by text (ms from the window's start):")
print(f"{'count':>7} {'first':>7} {'last end':>8} {'busy ms':>8}  statement")
for text, (n, b, e, busy) in sorted(st.items(), key=lambda kv: -kv[1][3]):
    print(f"{n:>7} {b - w0:>7.0f} {e - w0:>8.0f} {busy:>8.1f}  {text}")
EOF
exit "$rc"
