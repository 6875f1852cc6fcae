#!/usr/bin/env bash
# broker_idle.sh — what the three services cost the Kafka broker when they
# have nothing to do: starts BUILD's ax-trigger, ax-executor and ax-callback
# on CONFIG (no job submitted), waits WARM seconds, then samples the broker
# JVM's threads (/proc/PID/task/*/stat, utime + stime) for SECONDS and prints
# its CPU as % of a core, split like bench_exec's cpu_pct_kafka_{jit,gc,work}
# (JIT compilers "C1/C2 Compiler*", GC "GC *"/"G1 *", the rest). With
# BUILD = none no service is started: the broker's own background.
# BENCHMARKS.md, "Issue #13: the broker's idle fetches".
#
#   AX_STATE=var tests/bench/broker_idle.sh BUILD CONFIG [SECONDS [WARM]] [-- --set k=v ...]
#
# The broker's pid comes from $AX_STATE/run/kafka.pid (infra). Run it alone
# (the machine-wide benchmark lock where one exists). As root, pass
# AXCONF_EXECUTOR_ALLOW_ROOT=true in the environment.
set -euo pipefail
build=${1:?usage: broker_idle.sh BUILD|none CONFIG [SECONDS [WARM]] [-- ARGS]}
config=${2:?config}
shift 2
secs=20 warm=12
[[ $# -gt 0 && $1 != -- ]] && { secs=$1; shift; }
[[ $# -gt 0 && $1 != -- ]] && { warm=$1; shift; }
[[ $# -gt 0 && $1 == -- ]] && shift
: "${AX_STATE:?set AX_STATE, the state directory of infra}"
kpid=$(cat "$AX_STATE/run/kafka.pid")
[[ -d /proc/$kpid/task ]] || { echo "broker_idle.sh: no broker process $kpid" >&2; exit 2; }

pids=()
stop() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null && wait "${pids[@]}" 2>/dev/null; true; }
trap stop EXIT
if [[ $build != none ]]; then
    for s in trigger executor callback; do
        "$build/services/$s/ax-$s" --config "$config" "$@" >"/tmp/broker_idle.$$.$s.log" 2>&1 &
        pids+=($!)
    done
fi
sleep "$warm"
for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { echo "broker_idle.sh: a service exited; see /tmp/broker_idle.$$.*.log" >&2; exit 1; }
done

python3 - "$kpid" "$secs" "$build" <<'EOF'
import os, sys, time
pid, secs, build = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def snap():  # tid -> (class, utime + stime)
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            s = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue  # ended since listdir
        name = s[s.index("(") + 1:s.rindex(")")]
        f = s[s.rindex(")") + 2:].split()
        cls = ("jit" if name.startswith(("C1 Compiler", "C2 Compiler")) else
               "gc" if name.startswith(("GC Thread", "G1 ", "GC ")) else "work")
        out[tid] = (cls, int(f[11]) + int(f[12]))
    return out
a = snap()
time.sleep(secs)
b = snap()
d = {"jit": 0, "gc": 0, "work": 0}
for tid, (cls, t) in b.items():  # threads that ended within the window are lost
    d[cls] += t - min(a.get(tid, (cls, 0))[1], t)
pct = lambda t: 100.0 * t / os.sysconf("SC_CLK_TCK") / secs
print(f"services={build} seconds={secs:.0f} broker_pct={pct(sum(d.values())):.1f} "
      f"broker_pct_jit={pct(d['jit']):.1f} broker_pct_gc={pct(d['gc']):.1f} "
      f"broker_pct_work={pct(d['work']):.1f}")
EOF
