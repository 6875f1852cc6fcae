#!/usr/bin/env bash
# load.sh — the ThreadSanitizer pass's load (ctest tsan.load in a
# -DAX_TSAN=ON build; tests/tsan/README.md): the services of AX_BIN under
# bench_exec at full load, 20,000 no-op jobs over two executors, then 2,000
# at 500 jobs/s: the callback's results publisher beside its loop, the
# executors' plugin and fence threads, the trigger's retention and lease
# threads, all busy at once. It asserts that every job ran once and
# succeeded; tsan.reports (run after it) fails on any race TSan saw.
set -euo pipefail
: "${AX_BIN:?AX_BIN: a -DAX_TSAN=ON build}" "${AX_CONFIG:?AX_CONFIG: the configuration of the servers}"
export AXCONF_EXECUTOR_ALLOW_ROOT=true # as root (infra/test); the services never need it
run() { # run EXECUTORS N [RATE]
    local out rc=0
    out=$("$AX_BIN/tests/bench_exec" --config "$AX_CONFIG" "$AX_BIN" noop "$@" 2>&1) || rc=$?
    if ((rc != 0)) || ! grep -q "^outcomes=SUCCESS:$2 retried=0 instances=$2 " <<<"$out"; then
        printf '%s\n' "$out" | tail -40
        echo "load.sh: bench_exec noop $* (rc $rc): not every job succeeded once" >&2
        exit 1
    fi
    grep -E '^(completed_per_s|outcomes)=' <<<"$out"
}
run 2 20000
run 1 2000 500
echo "load.sh: ok"
