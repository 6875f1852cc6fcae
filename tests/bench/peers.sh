#!/usr/bin/env bash
# peers.sh — ax beside pg-boss and River in one session on one PostgreSQL
# cluster (BENCHMARKS.md, "Issue #13: side by side with the peers"):
# ROUNDS rounds of bench_exec (no-op plugin, 1 executor, N jobs) each
# followed by one round of ../shared/peers/run.sh on PEERS_DSN (a database
# of its own), then ROUNDS runs with 2 and with 4 executors, then ROUNDS
# runs paced at 1,000 jobs/s (fire-to-start at a moderate load). Prints
# bench_exec's figures and the peers' JSON lines as they come. The peers'
# tables are emptied before each of their rounds (psql on PEERS_DSN).
#
#   AX_CONFIG=/path/ax.conf PEERS_DSN=postgres://u:p@host:port/peers \
#     tests/bench/peers.sh BUILD_DIR [N] [ROUNDS]
#
# BENCH_ARGS: more bench_exec options, e.g. BENCH_ARGS=--reuse-topics (the
# broker's steady state: the same topics every run). AX_STATE (the servers'
# state directory, e.g. var/) lets bench_exec find the broker's pid for
# cpu_pct_kafka (-1 without it).
#
# Run it alone (the machine-wide benchmark lock where one exists):
# every figure moves with what else the machine does.
set -u
build=${1:?usage: peers.sh BUILD_DIR [N] [ROUNDS]}; n=${2:-20000}; rounds=${3:-3}
: "${AX_CONFIG:?set AX_CONFIG}" "${PEERS_DSN:?set PEERS_DSN (a database of its own)}"
here=$(cd "$(dirname "$0")" && pwd)
peers=${PEERS_RUN:-$here/../../../shared/peers/run.sh}
[ -x "$peers" ] || { echo "peers.sh: no $peers (set PEERS_RUN)" >&2; exit 2; }
# Every round of every system starts on empty tables: bench_exec's cleanup
# deletes its run's rows, and here the peers' are deleted before each of
# their rounds. pg-boss 10 keeps its completed jobs (the harness's
# deleteQueue at its start leaves them), River its finished rows: beside
# 622,000 kept jobs pg-boss ran at 18-22k jobs/s, on emptied tables at
# 28-31k, so a ratio depended on how often the peers had run on the
# machine (BENCHMARKS.md, "After the eleventh session's measurements"). A
# round that could not start on empty tables would not be the comparison:
# the script stops instead.
command -v psql >/dev/null || { echo "peers.sh: psql is needed to empty the peers' tables" >&2; exit 2; }
# shellcheck source=peers_clean.sh
source "$here/peers_clean.sh"
ax() { # ax EXECUTORS [RATE]
    # A run that fails says so (its exit status and the last lines of its
    # stderr) instead of leaving its round without a figure.
    local err rc
    err=$(mktemp) || { echo "ax: mktemp failed"; return 1; }
    # shellcheck disable=SC2086 # BENCH_ARGS: words
    "$build/tests/bench_exec" --config "$AX_CONFIG" ${BENCH_ARGS:-} "$build" noop "$1" "$n" ${2:+"$2"} 2>"$err" |
        grep -E '^(completed|sched_fin|cpu_pct|pg_commits|outcomes)'
    rc=${PIPESTATUS[0]}
    if ((rc != 0)); then
        echo "ax: bench_exec failed (exit $rc):"
        grep -vE '^20[0-9]{2}-[^ ]+ (INFO|DEBUG) ' "$err" | tail -n 5 | sed 's/^/  /'
    fi
    rm -f "$err"
}
for i in $(seq 1 "$rounds"); do
    echo "== ax, 1 executor, then the peers: round $i $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    ax 1
    peers_clean
    "$peers" "$PEERS_DSN" "$n" 1 2>&1 | grep '^{'
done
for e in 2 4; do
    for i in $(seq 1 "$rounds"); do echo "== ax, $e executors: round $i $(date -u +%T)"; ax "$e"; done
done
for i in $(seq 1 "$rounds"); do echo "== ax at 1,000 jobs/s: round $i $(date -u +%T)"; ax 1 1000; done
