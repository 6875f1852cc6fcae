#!/usr/bin/env bash
# peers_latency.sh — fire-to-start at a steady rate, ax beside pg-boss and
# River in one session on one PostgreSQL cluster (BENCHMARKS.md, "Issue
# #13: fire-to-start beside the peers"). Per round: bench_exec (no-op
# plugin, 1 executor, N jobs at RATE a second: running_at - due_at), then
# pg-boss 10 (peers_latency/pgboss_latency.mjs: started_on - start_after,
# 4 workers fetching up to 1,000 jobs each, polling at its shortest
# interval, 0.5 s), then River 0.51
# (peers_latency/river: attempted_at - scheduled_at, LISTEN/NOTIFY, fetch
# cooldown 1 ms, its shortest, and 100 ms, its default). Each figure is
# the server's clock at both ends; each job is due when it is inserted.
# The peers' tables are emptied before each of their rounds.
#
#   AX_CONFIG=/path/ax.conf PEERS_DSN=postgres://u:p@host:port/peers \
#     tests/bench/peers_latency.sh BUILD_DIR [N] [RATE] [ROUNDS]
#
# BENCH_ARGS: more bench_exec options (e.g. --reuse-topics). PEERS_DIR
# (default /tmp/ax-peers): where pg-boss is installed from npm and the River
# program built (Go modules from the proxy), as ../shared/peers/run.sh does.
# Run it alone: every figure moves with what else the machine does.
set -euo pipefail
build=${1:?usage: peers_latency.sh BUILD_DIR [N] [RATE] [ROUNDS]}; n=${2:-15000}; rate=${3:-1000}
rounds=${4:-3}
: "${AX_CONFIG:?set AX_CONFIG}" "${PEERS_DSN:?set PEERS_DSN (a database of its own)}"
for v in "$n" "$rate" "$rounds"; do
    [[ $v =~ ^[1-9][0-9]{0,7}$ ]] || { echo "peers_latency.sh: '$v' is not a count from 1" >&2; exit 2; }
done
command -v psql >/dev/null || { echo "peers_latency.sh: psql is needed" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
P=${PEERS_DIR:-/tmp/ax-peers}; mkdir -p "$P"
( cd "$P" && { [ -d node_modules/pg-boss ] || { npm init -y >/dev/null && npm install pg-boss@10 pg >npm.log 2>&1; }; } )
cp "$here/peers_latency/pgboss_latency.mjs" "$P/"
( cd "$here/peers_latency/river" && GOFLAGS=-mod=mod go build -o "$P/riverlatency" . )
# shellcheck source=peers_clean.sh
source "$here/peers_clean.sh"
peer() { # peer COMMAND...: its JSON line, or its output and exit 1
    local out
    out=$("$@" 2>&1) && grep '^{' <<<"$out" ||
        { echo "peers_latency.sh: $* failed: $out" >&2; exit 1; }
}
for i in $(seq 1 "$rounds"); do
    echo "== round $i $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    # shellcheck disable=SC2086 # BENCH_ARGS: words
    "$build/tests/bench_exec" --config "$AX_CONFIG" ${BENCH_ARGS:-} "$build" noop 1 "$n" "$rate" 2>/dev/null |
        grep -E '^(completed|sched_fin|cpu_pct)' | tr '\n' ' '
    echo
    peers_clean
    ( cd "$P" && peer node pgboss_latency.mjs "$PEERS_DSN" "$n" "$rate" 4 1000 )
    for cool in 1 100; do
        peers_clean
        peer "$P/riverlatency" "$PEERS_DSN" "$n" "$rate" 100 "$cool"
    done
done
