#!/usr/bin/env bash
# bench_api.sh — ax-api's latency (issue #14, BENCHMARKS.md):
#   1. a list page of 50 over N instances (default 1,000,000) with a filter
#      (job + outcome, 4% of the job's instances match), p99, on 4
#      connections (closed loop: the machine saturated) and on 1 (one page
#      at a time: a page's own latency);
#   2. one instance's page (attempts, timeline, output), p99, on 4
#      connections and on 1;
#   3. 500 requests/s sustained on one ax-api (a mix of list pages and
#      instance pages on 52 connections, each waiting 100 ms after each
#      reply: at most 52 / (0.1 s + latency), 520 req/s at zero latency,
#      500 at 4 ms), p99;
#   4. a list page of 50 without a job: outcome FAILED (1% of all
#      instances, newest first), p99.
# Loads N FINISHED instances of four jobs bench-api-{a,b,c,d} into the
# database of AX_CONFIG once (plain SQL, kept for the next run), starts one
# ax-api of AX_BIN (a Release build) on a free loopback port, and runs wrk
# (Debian's wrk) against it. Run it under the machine's benchmark lock:
#   flock /work/devenv/bench.lock env AX_CONFIG=... AX_BIN=build/rel tests/bench/bench_api.sh
set -euo pipefail
: "${AX_CONFIG:?AX_CONFIG: the configuration of the database to use}"
AX_BIN=${AX_BIN:-build/rel}
N=${N:-1000000}
DUR=${DUR:-20s}
THREADS=${THREADS:-}   # api.threads (empty: its default)
command -v wrk >/dev/null || { echo "bench_api: wrk is not installed (apt-get install wrk)" >&2; exit 2; }
conf_get() { awk -F' *= *' -v k="$1" '$1 == k { print $2 }' "$AX_CONFIG" | tail -n 1; }
export PGHOST=$(conf_get pg.host) PGPORT=$(conf_get pg.port) PGDATABASE=$(conf_get pg.dbname) \
       PGUSER=$(conf_get pg.user) PGPASSWORD=$(conf_get pg.password)
sql() { psql -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }
WORK=$(mktemp -d /tmp/bench_api.XXXXXX)
trap '[ -n "${PID:-}" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT

for j in a b c d; do
    sql "INSERT INTO job (name, command, timeout_ms, enabled) VALUES ('bench-api-$j', '{/bin/true}', 1000, false)
         ON CONFLICT (name) DO NOTHING" >/dev/null
done
have=$(sql "SELECT count(*) FROM job_instance WHERE job_name LIKE 'bench-api-%'")
if [ "$have" -lt "$N" ]; then
    echo "bench_api: loading $((N - have)) instances"
    sql "INSERT INTO job_instance (job_id, job_name, state, outcome, exit_code, priority, timeout_ms,
             due_at, scheduled_at, locked_at, running_at, finished_at, result_published_at, worker,
             output, trace_id, idempotency_key)
         SELECT j.id, j.name, 'FINISHED', CASE WHEN g % 100 = 0 THEN 'FAILED' ELSE 'SUCCESS' END::ax_outcome,
                CASE WHEN g % 100 = 0 THEN 1 ELSE 0 END, (g % 5)::smallint, 1000, t, t, t, t, t, t,
                'bench', 'output of ' || g, 'bench-api-' || g, 'bench-api-' || g
         FROM generate_series($have + 1, $N) g
         JOIN job j ON j.name = 'bench-api-' || (ARRAY['a','b','c','d'])[1 + g % 4]
         CROSS JOIN LATERAL (SELECT now() - (($N - g) * interval '10 ms') AS t) ts" >/dev/null
    # job_instance is a view over instance_def and instance_state (migration
    # 016): vacuum (the visibility map, for index-only scans) and analyze those
    for t in instance_def instance_state job_attempt_log; do sql "VACUUM ANALYZE $t" >/dev/null; done
fi
total=$(sql "SELECT count(*) FROM job_instance")
ID=$(sql "SELECT max(id) - 1000 FROM job_instance WHERE job_name = 'bench-api-b'")
# the instance page's instance has its attempts (two: a failure, then the success)
sql "INSERT INTO job_attempt_log (instance_id, attempt, worker, outcome, exit_code, started_at, finished_at)
     SELECT id, a, worker, CASE WHEN a = 1 THEN 'FAILED' ELSE 'SUCCESS' END::ax_outcome, a - 1,
            running_at, finished_at FROM job_instance, generate_series(1, 2) a WHERE id = $ID
     ON CONFLICT DO NOTHING" >/dev/null

out=$("$AX_BIN/axctl/axctl" api token create bench --scope read)
TOKEN=$(awk '/^token:/ { print $2 }' <<<"$out")
ENTRY=$(awk '/entry:/ { print $3 }' <<<"$out")
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$AX_BIN/services/api/ax-api" --config "$AX_CONFIG" --set "api.listen=127.0.0.1:$PORT" \
    --set "api.tokens=$ENTRY" --set api.rate.limit=1000000 --set api.rate.burst=1000000 \
    --set log.level=warn ${THREADS:+--set api.threads=$THREADS} >"$WORK/ax-api.log" 2>&1 &
PID=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
BASE="http://127.0.0.1:$PORT/api/v1"
LIST="$BASE/instances?job=bench-api-a&outcome=FAILED&limit=50"
ONE="$BASE/instances/$ID"
curl -sf -H "Authorization: Bearer $TOKEN" "$LIST" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert len(d["items"]) == 50, d'
curl -sf -H "Authorization: Bearer $TOKEN" "$ONE" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["attempts"], d'

cat >"$WORK/paced.lua" <<'EOF'
-- ~500 requests/s over 52 connections: each waits 100 ms after each
-- reply; list pages and instance pages alternate.
local n = 0
function init(args) conns = tonumber(args[1]); one = args[2]; list = args[3] end
function delay() return 100 end
function request()
    n = n + 1
    return wrk.format("GET", (n % 2 == 0) and one or list)
end
EOF
H="Authorization: Bearer $TOKEN"
p99() { awk '/^ +99%/ { print $2 }' "$1"; }
rps() { awk '/^Requests\/sec/ { print $2 }' "$1"; }
echo "bench_api: $total instances in job_instance (bench jobs: $N); ax-api $AX_BIN, api.threads ${THREADS:-default}, wrk $DUR"
wrk -t1 -c4 -d"$DUR" --latency -H "$H" "$LIST" >"$WORK/list.txt"
echo "list page of 50, job + outcome filter (4% of the job): p99 $(p99 "$WORK/list.txt"), $(rps "$WORK/list.txt") req/s (4 connections, closed loop)"
wrk -t1 -c1 -d"$DUR" --latency -H "$H" "$LIST" >"$WORK/list1.txt"
echo "list page of 50, job + outcome filter, one at a time: p99 $(p99 "$WORK/list1.txt"), $(rps "$WORK/list1.txt") req/s (1 connection)"
wrk -t1 -c4 -d"$DUR" --latency -H "$H" "$ONE" >"$WORK/one.txt"
echo "instance page: p99 $(p99 "$WORK/one.txt"), $(rps "$WORK/one.txt") req/s (4 connections, closed loop)"
wrk -t1 -c1 -d"$DUR" --latency -H "$H" "$ONE" >"$WORK/one1.txt"
echo "instance page, one at a time: p99 $(p99 "$WORK/one1.txt"), $(rps "$WORK/one1.txt") req/s (1 connection)"
wrk -t2 -c52 -d"$DUR" --latency -H "$H" -s "$WORK/paced.lua" "$BASE/instances" -- 52 \
    "/api/v1/instances/$ID" "/api/v1/instances?job=bench-api-c&state=FINISHED&limit=50" >"$WORK/paced.txt"
echo "paced mix at ~500 req/s: p99 $(p99 "$WORK/paced.txt"), $(rps "$WORK/paced.txt") req/s sustained (52 connections)"
wrk -t1 -c4 -d"$DUR" --latency -H "$H" "$BASE/instances?outcome=FAILED&limit=50" >"$WORK/nojob.txt"
echo "list page of 50, outcome filter only (1% of all): p99 $(p99 "$WORK/nojob.txt"), $(rps "$WORK/nojob.txt") req/s (4 connections, closed loop)"
grep -q "Non-2xx" "$WORK/list.txt" "$WORK/list1.txt" "$WORK/one.txt" "$WORK/one1.txt" "$WORK/paced.txt" "$WORK/nojob.txt" && { echo "bench_api: non-2xx responses" >&2; exit 1; }
exit 0
