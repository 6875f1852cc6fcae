#!/usr/bin/env bash
# split_explain.sh — the state transitions of one instance, as the store
# runs them, on N-row batches (EXPLAIN (ANALYZE, WAL, BUFFERS)), in a schema
# of its own (dropped at the end) of AX_CONFIG's database, for the layouts
# BENCHMARKS.md compares ("Issue #13: PostgreSQL writes per job"):
#
#   wide        job_instance before 016: 43 columns, its 11 indexes
#   genNN       instance_state of 016 (queues as partial indexes on stored
#               generated columns), fillfactor NN
#   sideNN      a state table with only its primary key, fillfactor NN; the
#               due and in-flight queues as side tables (insert on entering,
#               delete on leaving)
#   trims       on gen40, N/2 rows each: the claim as SELECT ... FOR UPDATE
#               then UPDATE (before 84c9009) against the UPDATE's own CAS,
#               and the finish's attempt insert with ON CONFLICT DO NOTHING
#               against NOT EXISTS
#
# Per layout and step: µs per row, WAL records and bytes per row, and
# the share of the step's row updates that were HOT.
#
#   AX_CONFIG=ax.conf tests/bench/split_explain.sh [N] [LAYOUT...]
set -euo pipefail
N=${1:-10000}; shift || true
LAYOUTS=${*:-wide gen50 gen70 gen100 side50}
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGDATABASE=$(cfg pg.dbname)
export PGPASSWORD=$(cfg pg.password)
[[ -n $PGPASSWORD ]] || { pf=$(cfg pg.password_file); [[ -z $pf ]] || PGPASSWORD=$(cat "$pf"); }
S=ax_split_bench_$$
p() { psql -X -q -v ON_ERROR_STOP=1 -tA -c "SET search_path = $S, public" "$@"; }
trap 'p -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true' EXIT

setup() { # layout
  p -c "DROP SCHEMA IF EXISTS $S CASCADE; CREATE SCHEMA $S" >/dev/null
  case $1 in
  wide)
    p -c "CREATE TABLE st (LIKE public.job_instance_wide_model INCLUDING ALL)" >/dev/null 2>&1 || \
    p -c "CREATE TABLE st (id bigint PRIMARY KEY, job_id bigint, job_name text, attempt int NOT NULL DEFAULT 1,
      state ax_instance_state NOT NULL DEFAULT 'SCHEDULED', outcome ax_outcome, handler_kind text NOT NULL DEFAULT 'command',
      command text[], payload bytea NOT NULL DEFAULT '\x', timeout_ms bigint NOT NULL DEFAULT 60000,
      priority smallint NOT NULL DEFAULT 2, nominal_time timestamptz, due_at timestamptz NOT NULL, worker text,
      lease_expires_at timestamptz, scheduled_at timestamptz NOT NULL DEFAULT now(), dispatched_at timestamptz,
      locked_at timestamptz, running_at timestamptz, finished_at timestamptz, result_published_at timestamptz,
      exit_code int, error_class text, error text, output text, trace_id text NOT NULL, idempotency_key text NOT NULL,
      submit_key text, wait_for bigint, cancel_requested_at timestamptz, executor_group text NOT NULL DEFAULT 'default',
      routing_field text, holds_slot boolean NOT NULL DEFAULT false, deployment text NOT NULL DEFAULT 'ax.',
      flow_run_id bigint, flow_stage text, parent_id bigint, shard_index int NOT NULL DEFAULT 0,
      shard_total int NOT NULL DEFAULT 1, shard_mode text, shards_pending int, deferred_at timestamptz, capped_at timestamptz);
    CREATE INDEX ON st (job_id) WHERE state <> 'FINISHED';
    CREATE INDEX ON st (priority) WHERE state = 'SCHEDULED' AND dispatched_at IS NULL AND deferred_at IS NOT NULL;
    CREATE INDEX ON st (dispatched_at) WHERE state = 'SCHEDULED' AND dispatched_at IS NOT NULL;
    CREATE INDEX ON st (priority, due_at) WHERE state = 'SCHEDULED' AND dispatched_at IS NULL;
    CREATE INDEX ON st (flow_run_id) WHERE flow_run_id IS NOT NULL;
    CREATE INDEX ON st (job_id, id);
    CREATE INDEX ON st (lease_expires_at) WHERE state IN ('LOCKED', 'RUNNING');
    CREATE INDEX ON st (parent_id) WHERE parent_id IS NOT NULL;
    CREATE INDEX ON st (deployment) WHERE state = 'SCHEDULED' AND attempt > 1;
    CREATE INDEX ON st (due_at) WHERE state = 'SCHEDULED' AND dispatched_at IS NULL AND shard_mode = 'static'" >/dev/null ;;
  gen*)
    p -c "CREATE TABLE st (LIKE public.instance_state INCLUDING ALL) WITH (fillfactor = ${1#gen})" >/dev/null ;;
  side*)
    p -c "CREATE TABLE st (LIKE public.instance_state INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = ${1#side});
      ALTER TABLE st DROP COLUMN queued, DROP COLUMN flying, DROP COLUMN active, DROP COLUMN retrying,
        ADD PRIMARY KEY (id);
      CREATE TABLE due (id bigint PRIMARY KEY, priority smallint NOT NULL, due_at timestamptz NOT NULL);
      CREATE INDEX ON due (priority, due_at);
      CREATE TABLE flight (id bigint PRIMARY KEY, dispatched_at timestamptz NOT NULL);
      CREATE INDEX ON flight (dispatched_at)" >/dev/null ;;
  esac
}

wide_extra=""
step() { # layout name sql
  local out hot
  out=$(p -c "BEGIN" -c "EXPLAIN (ANALYZE, WAL, BUFFERS, FORMAT JSON) $3" \
          -c "SELECT pg_stat_get_xact_tuples_hot_updated('$S.st'::regclass)" -c "COMMIT")
  hot=$(sed -n '$p' <<<"$out"); out=$(sed '$d' <<<"$out")
  python3 -c '
import json, sys
j = json.loads(sys.argv[1])[0]; pl = j["Plan"]; n = int(sys.argv[2])

print("%-7s %-9s %7.2f us/row %6.2f rec/row %6.0f B/row %5.2f fpi/row  hot %.2f" % (sys.argv[3], sys.argv[4],
  j["Execution Time"] * 1000 / n, pl.get("WAL Records", 0) / n, pl.get("WAL Bytes", 0) / n,
  pl.get("WAL FPI", 0) / n, int(sys.argv[5]) / n))' "$out" "${ROWS:-$N}" "$1" "$2" "$hot"
}

run() { # layout
  local L=$1 extra="" due="" flight="" flightdel=""
  setup "$L"
  [[ $L == wide ]] && extra=", trace_id, idempotency_key, job_name, command, payload" && \
    extra_v=", md5(g::text), md5(g::text) || '@1', 'bench', ARRAY['true'], '\x'::bytea" || extra_v=""
  p -c "CHECKPOINT" >/dev/null 2>&1 || true
  # the direct path: inserted dispatched (in flight), claim, start, finish, publish
  if [[ $L == side* ]]; then
    step $L insert "WITH s AS (INSERT INTO st (id, job_id, deployment, priority, due_at, dispatched_at)
      SELECT g, 1, 'ax.', 2, now(), now() FROM generate_series(1, $N) g RETURNING id, dispatched_at)
      INSERT INTO flight SELECT id, dispatched_at FROM s"
  else
    step $L insert "INSERT INTO st (id, job_id, deployment, priority, due_at, dispatched_at$extra)
      SELECT g, 1, 'ax.', 2, now(), now()$extra_v FROM generate_series(1, $N) g"
  fi
  step $L claim "UPDATE st SET state = 'LOCKED', worker = 'vm:1', locked_at = clock_timestamp(),
      lease_expires_at = now() + interval '30 s' WHERE id BETWEEN 1 AND $N AND state = 'SCHEDULED'"
  step $L running "UPDATE st SET state = 'RUNNING', running_at = clock_timestamp(),
      lease_expires_at = now() + interval '30 s' WHERE id BETWEEN 1 AND $N AND state = 'LOCKED'"
  step $L renew "UPDATE st SET lease_expires_at = now() + interval '60 s'
      WHERE id BETWEEN 1 AND $N AND state IN ('LOCKED', 'RUNNING')"
  if [[ $L == side* ]]; then
    step $L finish "WITH u AS (UPDATE st SET state = 'FINISHED', outcome = 'SUCCESS', finished_at = clock_timestamp(),
        exit_code = 0, output = 'ok', lease_expires_at = NULL WHERE id BETWEEN 1 AND $N AND state = 'RUNNING' RETURNING id)
      DELETE FROM flight f USING u WHERE f.id = u.id"
  else
    step $L finish "UPDATE st SET state = 'FINISHED', outcome = 'SUCCESS', finished_at = clock_timestamp(),
        exit_code = 0, output = 'ok', lease_expires_at = NULL WHERE id BETWEEN 1 AND $N AND state = 'RUNNING'"
  fi
  step $L publish "UPDATE st SET result_published_at = now() WHERE id BETWEEN 1 AND $N AND state = 'FINISHED'"
  # the due path: inserted undispatched (queued), then dispatched
  local M=$((N + 1)) E=$((2 * N))
  if [[ $L == side* ]]; then
    step $L ins_due "WITH s AS (INSERT INTO st (id, job_id, deployment, priority, due_at)
      SELECT g, 1, 'ax.', 2, now() FROM generate_series($M, $E) g RETURNING id, priority, due_at)
      INSERT INTO due SELECT id, priority, due_at FROM s"
    step $L dispatch "WITH d AS (DELETE FROM due WHERE id BETWEEN $M AND $E RETURNING id),
      u AS (UPDATE st SET dispatched_at = now() FROM d WHERE st.id = d.id RETURNING st.id, st.dispatched_at)
      INSERT INTO flight SELECT id, dispatched_at FROM u"
  else
    step $L ins_due "INSERT INTO st (id, job_id, deployment, priority, due_at$extra)
      SELECT g, 1, 'ax.', 2, now()$extra_v FROM generate_series($M, $E) g"
    step $L dispatch "UPDATE st SET dispatched_at = now() WHERE id BETWEEN $M AND $E"
  fi
}
trims() {
  local H=$((N / 2)) H1=$((N / 2 + 1))
  setup gen40
  p -c "CREATE TABLE att (instance_id bigint, attempt int, worker text, PRIMARY KEY (instance_id, attempt))" >/dev/null
  p -c "CHECKPOINT" >/dev/null 2>&1 || true
  step trims insert "INSERT INTO st (id, job_id, deployment, priority, due_at, dispatched_at)
      SELECT g, 1, 'ax.', 2, now(), now() FROM generate_series(1, $N) g"
  ROWS=$H step trims claim_lock "WITH c AS (SELECT id FROM st WHERE id BETWEEN 1 AND $H
      AND state = 'SCHEDULED' ORDER BY id FOR UPDATE)
      UPDATE st SET state = 'LOCKED', worker = 'vm:1', locked_at = clock_timestamp(),
      lease_expires_at = now() + interval '30 s' FROM c WHERE st.id = c.id"
  ROWS=$H step trims claim_cas "WITH c AS MATERIALIZED (SELECT id, attempt FROM st WHERE id BETWEEN $H1 AND $N
      AND state = 'SCHEDULED' ORDER BY id)
      UPDATE st SET state = 'LOCKED', worker = 'vm:1', locked_at = clock_timestamp(),
      lease_expires_at = now() + interval '30 s' FROM c
      WHERE st.id = c.id AND st.state = 'SCHEDULED' AND st.attempt = c.attempt"
  ROWS=$H step trims att_on_conflict "INSERT INTO att SELECT g, 1, 'vm:1' FROM generate_series(1, $H) g
      ON CONFLICT DO NOTHING"
  ROWS=$H step trims att_not_exists "INSERT INTO att SELECT g, 1, 'vm:1' FROM generate_series($H1, $N) g
      WHERE NOT EXISTS (SELECT 1 FROM att a WHERE a.instance_id = g AND a.attempt = 1)"
}
for L in $LAYOUTS; do if [[ $L == trims ]]; then trims; else run "$L"; fi; done
