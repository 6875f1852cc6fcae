#!/usr/bin/env bash
# broker_profile.sh — where the Kafka broker's CPU goes while a benchmark
# runs: a Java Flight Recorder recording (settings=profile, 10 ms execution
# samples) of the broker over the run of COMMAND, summarised by
# jfr_top.py (beside this script) as the top methods by self samples, by
# inclusive samples, the threads that took the samples, and every thread's
# CPU (jdk.ThreadCPULoad: the JIT compiler and GC threads, which execution
# samples never show, included). BENCHMARKS.md,
# "Issue #13: where the broker's CPU goes".
#
#   tests/bench/broker_profile.sh [--pid PID] [--top N] [--out DIR]
#       -- COMMAND [ARG...]
#
#   --pid PID   the broker's JVM (default: $AX_STATE/run/kafka.pid)
#   --top N     rows per table (default 40)
#   --out DIR   keep the recording (broker.jfr) and the tables there
#               (default: a scratch directory, removed)
#
# jcmd runs as the broker's user (the JVM's attach socket is owned by it).
# COMMAND's output goes where it would; its exit status is this script's.
# The recording covers the whole command, its start-up included.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pid= top=40 out=
usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case $1 in
    --pid) pid=${2:?--pid needs PID}; shift 2 ;;
    --top) top=${2:?--top needs N}; shift 2 ;;
    --out) out=${2:?--out needs DIR}; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "broker_profile.sh: unknown option $1" >&2; usage ;;
  esac
done
(($#)) || { echo "broker_profile.sh: no COMMAND" >&2; usage; }
[[ $top =~ ^[0-9]+$ ]] || { echo "broker_profile.sh: --top: not a count: $top" >&2; exit 2; }
if [[ -z $pid ]]; then
  f=${AX_STATE:?set AX_STATE or --pid}/run/kafka.pid
  [[ -s $f ]] || { echo "broker_profile.sh: no $f (is the broker running?)" >&2; exit 2; }
  pid=$(cat "$f")
fi
[[ -d /proc/$pid ]] || { echo "broker_profile.sh: no process $pid" >&2; exit 2; }
user=$(ps -o user= -p "$pid" | tr -d ' ')
java_home=$(dirname "$(dirname "$(readlink -f "/proc/$pid/exe")")")
jcmd=$java_home/bin/jcmd jfr=$java_home/bin/jfr
[[ -x $jcmd && -x $jfr ]] || { echo "broker_profile.sh: no jcmd/jfr in $java_home" >&2; exit 2; }
as_user() { if [[ $(id -un) == "$user" ]]; then "$@"; else runuser -u "$user" -- "$@"; fi; }

scratch=$(mktemp -d /tmp/broker_profile.XXXXXX)
# the broker's JVM writes the recording into it
[[ $(id -un) == "$user" ]] || chown "$user" "$scratch"
trap 'as_user "$jcmd" "$pid" JFR.stop name=axprof >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
rec=$scratch/broker.jfr
as_user "$jcmd" "$pid" JFR.start name=axprof settings=profile >/dev/null
set +e
"$@"
rc=$?
set -e
as_user "$jcmd" "$pid" JFR.dump name=axprof filename="$rec" >/dev/null
as_user "$jcmd" "$pid" JFR.stop name=axprof >/dev/null
"$jfr" print --json --events jdk.ExecutionSample "$rec" >"$scratch/samples.json"
"$jfr" print --json --events jdk.ThreadCPULoad "$rec" >"$scratch/threads.json"
python3 "$here/jfr_top.py" --top "$top" --threads "$scratch/threads.json" "$scratch/samples.json" \
  | tee "$scratch/top.txt"
if [[ -n $out ]]; then
  mkdir -p "$out"
  cp "$rec" "$scratch/top.txt" "$out/"
fi
exit "$rc"
