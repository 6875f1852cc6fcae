#!/usr/bin/env bash
# The retention statement with an open dispatch window (libax/src/store/
# retention.c, retention.instances): an instance whose id is in an
# unconfirmed dispatch_batch stays, the others that are old enough go, and
# the window's ids are read once per statement, not once per candidate row,
# and only this deployment's (deployments may share a database).
# With dispatch.transaction.ms the unconfirmed ids are the whole open
# window's (~10,000 at 10,000 jobs/s); a per-row scan of them made the
# statement 126 ms a call and the leader's loop fell behind
# (BENCHMARKS.md, "10 minutes at 10,000 jobs/s offered with the dispatch
# window: a regression"). The statement is the store's own text
# (tests/bench/store_sql.py), run by EXPLAIN ANALYZE so that its plan's
# loop counts can be read; no service runs.
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || fail "jq is needed (infra/lib.sh installs it)"
D=$AXCONF_TOPIC_PREFIX # the deployment of this session's rows (PGOPTIONS)
ROLE="it211-$$"
N=400      # old, finished, published instances
PEND=10000 # ids in the open window
ret_cleanup() {
    sql "DELETE FROM dispatch_batch WHERE deployment IN ('$D', '${D}other');
         DELETE FROM ax_leader WHERE role = '$ROLE';
         DELETE FROM instance_def WHERE id IN (SELECT id FROM instance_state WHERE deployment = '$D')" \
        >/dev/null 2>&1 || true
}
IT_ON_EXIT+=(ret_cleanup)

SQL=$("$(dirname "$0")/../bench/store_sql.py" retention.instances) || fail "no retention.instances in the store"

sql "INSERT INTO job_instance (state, outcome, due_at, finished_at, result_published_at, timeout_ms,
                               trace_id, idempotency_key, command, scheduled_at)
     SELECT 'FINISHED', 'SUCCESS', now() - interval '2 hours', now() - interval '1 hour',
            now() - interval '1 hour', 1000, '$D' || g, '$D' || g, '{true}', now() - interval '2 hours'
     FROM generate_series(1, $N) g" >/dev/null
read -r first last n < <(sql "SELECT min(id), max(id), count(*) FROM instance_state WHERE deployment = '$D'" | tr '|' ' ')
[ "$n" = "$N" ] || fail "$n instances made, $N expected"
held=$(sql "SELECT id FROM instance_state WHERE deployment = '$D' ORDER BY id OFFSET $((N / 2)) LIMIT 1")
# rows the walk has to pass from our first to our last (other sessions'
# ids could lie between them)
span=$(sql "SELECT count(*) FROM instance_state WHERE id BETWEEN $first AND $last")
# The open window: the held instance among PEND - 1 ids of instances in flight
# elsewhere (ids past any row of this table).
sql "INSERT INTO dispatch_batch (epoch, deployment, ids)
     SELECT 1, '$D', array_agg(v ORDER BY v) FROM (SELECT $held AS v UNION ALL
       SELECT g FROM generate_series($last + 1000000, $last + 1000000 + $PEND - 2) g) x" >/dev/null
# another deployment's open window on the same database (its ids are none of ours)
sql "INSERT INTO dispatch_batch (epoch, deployment, ids)
     SELECT 1, '${D}other', array_agg(g) FROM generate_series($last + 2000000, $last + 2000499) g" >/dev/null
sql "INSERT INTO ax_leader (role, holder, epoch, expires_at, acquired_at)
     VALUES ('$ROLE', 'it211', 1, now() + interval '1 hour', now())
     ON CONFLICT (role) DO UPDATE SET holder = 'it211', epoch = 1,
       expires_at = now() + interval '1 hour'" >/dev/null

# $1-$3 the lease, $4 deployment, $5 the cursor, $6 keep 10 minutes, $7 rows
# of this deployment per batch, $8 rows walked.
plan=$(psql -X -q -t -A -v ON_ERROR_STOP=1 2>"$WORK/psql.err" <<EOF
PREPARE ret AS $SQL;
EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ret('$ROLE', 'it211', 1, '$D', $((first - 1)), 600000, $N, $((span + 100)));
EOF
) || fail "retention.instances failed: $(cat "$WORK/psql.err") $plan"

# Every node that reads the CTE pend: its loops and rows.
scans=$(jq -r '[.. | objects | select(."CTE Name"? == "pend") | "\(."Actual Loops" | floor) \(."Actual Rows" | floor)"] | .[]' <<<"$plan")
log "pend read (loops rows): $(echo "$scans" | tr '\n' ';')"
[ -n "$scans" ] || fail "no read of the unconfirmed ids (CTE pend) in the plan"
while read -r loops rows; do
    [ "$loops" -le 1 ] || fail "the $PEND unconfirmed ids were read $loops times in one statement (once per candidate row)"
    # this deployment's only: other deployments' batches (the suite's
    # earlier tests may leave some) hold none of its instances
    [ "$rows" = "$PEND" ] || fail "the unconfirmed ids read were $rows, not this deployment's $PEND"
done <<<"$scans"

left=$(sql "SELECT string_agg(id::text, ',') FROM instance_state WHERE deployment = '$D'")
[ "$left" = "$held" ] || fail "instances left: '$left', expected only the one in the open window ($held)"
log "$((N - 1)) old instances deleted, the one in the open window ($held) kept; the window read once"
