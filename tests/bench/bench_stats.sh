#!/usr/bin/env bash
# bench_stats.sh — GET /api/v1/stats (the console overview's aggregate,
# statement api.stats) over N instances (default 1,000,000), by window:
# for minutes=5, 30 and 1440, the instances the window holds and wrk's
# p50/p99 on one connection (closed loop, DUR each). BENCHMARKS.md, "Issue
# #14: api.stats over 1,000,000 instances".
# The instances are bench_api.sh's (N FINISHED instances of bench-api-{a,b,
# c,d}, one every 10 ms ending at the load, loaded once into AX_CONFIG's
# database and kept; dispatched_at set here where it is not): a window
# holds what the load put in it, so the figures move as the load ages; each
# line says how many it held (LOAD_ONLY=1: load, then stop). Run it under
# the machine's benchmark lock:
#   flock /work/devenv/bench.lock env AX_CONFIG=... AX_BIN=build/rel tests/bench/bench_stats.sh
set -euo pipefail
: "${AX_CONFIG:?AX_CONFIG: the configuration of the database to use}"
AX_BIN=${AX_BIN:-build/rel}
N=${N:-1000000}
DUR=${DUR:-10s}
command -v wrk >/dev/null || { echo "bench_stats: wrk is not installed (apt-get install wrk)" >&2; exit 2; }
conf_get() { awk -F' *= *' -v k="$1" '$1 == k { print $2 }' "$AX_CONFIG" | tail -n 1; }
export PGHOST=$(conf_get pg.host) PGPORT=$(conf_get pg.port) PGDATABASE=$(conf_get pg.dbname) \
       PGUSER=$(conf_get pg.user) PGPASSWORD=$(conf_get pg.password)
sql() { psql -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }
WORK=$(mktemp -d /tmp/bench_stats.XXXXXX)
trap '[ -n "${PID:-}" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT

for j in a b c d; do
    sql "INSERT INTO job (name, command, timeout_ms, enabled) VALUES ('bench-api-$j', '{/bin/true}', 1000, false)
         ON CONFLICT (name) DO NOTHING" >/dev/null
done
have=$(sql "SELECT count(*) FROM job_instance WHERE job_name LIKE 'bench-api-%'")
if [ "$have" -lt "$N" ]; then
    echo "bench_stats: loading $((N - have)) instances"
    sql "INSERT INTO job_instance (job_id, job_name, state, outcome, exit_code, priority, timeout_ms,
             due_at, scheduled_at, dispatched_at, locked_at, running_at, finished_at, result_published_at,
             worker, output, trace_id, idempotency_key)
         SELECT j.id, j.name, 'FINISHED', CASE WHEN g % 100 = 0 THEN 'FAILED' ELSE 'SUCCESS' END::ax_outcome,
                CASE WHEN g % 100 = 0 THEN 1 ELSE 0 END, (g % 5)::smallint, 1000, t, t, t, t, t, t, t,
                'bench', 'output of ' || g, 'bench-api-' || g, 'bench-api-' || g
         FROM generate_series($have + 1, $N) g
         JOIN job j ON j.name = 'bench-api-' || (ARRAY['a','b','c','d'])[1 + g % 4]
         CROSS JOIN LATERAL (SELECT now() - (($N - g) * interval '10 ms') AS t) ts" >/dev/null
fi
sql "UPDATE instance_state SET dispatched_at = due_at WHERE dispatched_at IS NULL AND state = 'FINISHED'" >/dev/null
sql "VACUUM ANALYZE instance_state" >/dev/null
total=$(sql "SELECT count(*) FROM instance_state")
[ "${LOAD_ONLY:-0}" = 1 ] && { echo "bench_stats: $total instances loaded"; exit 0; }

out=$("$AX_BIN/axctl/axctl" api token create bench-stats --scope read)
TOKEN=$(awk '/^token:/ { print $2 }' <<<"$out")
ENTRY=$(awk '/entry:/ { print $3 }' <<<"$out")
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$AX_BIN/services/api/ax-api" --config "$AX_CONFIG" --set "api.listen=127.0.0.1:$PORT" \
    --set "api.tokens=$ENTRY" --set api.rate.limit=1000000 --set api.rate.burst=1000000 \
    --set log.level=warn >"$WORK/ax-api.log" 2>&1 &
PID=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
H="Authorization: Bearer $TOKEN"
pct() { awk -v p="$2" '$1 == p"%" { print $2 }' "$1"; }
echo "bench_stats: $total instances in instance_state; ax-api $AX_BIN, wrk $DUR, 1 connection"
for m in 5 30 1440; do
    url="http://127.0.0.1:$PORT/api/v1/stats?minutes=$m"
    # the window's size as the statement sees it (an error, e.g. 503 when it
    # ran over db.statement.timeout.ms, is printed instead, and counted by wrk)
    code=$(curl -s -o "$WORK/body" -w '%{http_code}' -H "$H" "$url")
    if [ "$code" = 200 ]; then
        rows=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(sum(x["finished"].values()) for x in d["minutes"]))' "$WORK/body")
    else
        rows="(status $code: $(head -c 200 "$WORK/body"))"
    fi
    wrk -t1 -c1 -d"$DUR" --timeout 60s --latency -H "$H" "$url" >"$WORK/m$m.txt"
    bad=$(awk '/Non-2xx/ { print $NF }' "$WORK/m$m.txt")
    echo "minutes=$m finished_in_window=$rows p50=$(pct "$WORK/m$m.txt" 50) p99=$(pct "$WORK/m$m.txt" 99) requests=$(awk '/requests in/ { print $1 }' "$WORK/m$m.txt") non_2xx=${bad:-0}"
done
