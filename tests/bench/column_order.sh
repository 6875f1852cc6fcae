#!/usr/bin/env bash
# column_order.sh — what instance_state's column order costs its updates
# (BENCHMARKS.md, "Issue #13: the twentieth session"). heap_update compares
# every indexed column (partial-index predicates included) of the old and
# the new row; columns behind nullable or variable-width ones are found by
# walking the row (nocachegetattr). In a scratch database SCRATCH (made and
# dropped here) two copies of the table with its eight indexes, fillfactor
# 25 and ROWS dispatched SCHEDULED rows: `a` in today's order, `b` with the
# fixed-width NOT NULL columns and the generated flags first, text last.
# Then ROUNDS rounds, each table in turn, of three 1,000-row updates as the
# claim (LOCKED), run.start (RUNNING) and the finish write them; psql's
# timing, ms per statement.
#   AX_CONFIG=ax.conf tests/bench/column_order.sh [ROUNDS] [ROWS] [SCRATCH]
set -euo pipefail
ROUNDS=${1:-8}; ROWS=${2:-200000}; DB=${3:-ax_colorder}
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGPASSWORD=$(cfg pg.password)
[[ $ROUNDS =~ ^[1-9][0-9]*$ && $ROWS =~ ^[1-9][0-9]*$ ]] || { echo "column_order: ROUNDS and ROWS are positive integers" >&2; exit 2; }
[[ $DB =~ ^[a-z_][a-z0-9_]*$ ]] || { echo "column_order: SCRATCH must be a plain lower-case name" >&2; exit 2; }
((ROUNDS * 1000 <= ROWS)) || { echo "column_order: ROUNDS x 1,000 must be <= ROWS" >&2; exit 2; }
p() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
p -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
trap 'p -d postgres -c "DROP DATABASE IF EXISTS $DB"' EXIT
p -d "$DB" <<SQL
CREATE TYPE st AS ENUM ('SCHEDULED', 'LOCKED', 'RUNNING', 'FINISHED');
CREATE TYPE oc AS ENUM ('SUCCESS', 'FAILED', 'TIMEOUT', 'CANCELLED');
CREATE TABLE a (
 id bigint PRIMARY KEY, job_id bigint, deployment text NOT NULL, priority smallint NOT NULL,
 shard_mode text, shard_index integer NOT NULL, shard_total integer NOT NULL, wait_for bigint,
 attempt integer NOT NULL, state st NOT NULL, outcome oc, due_at timestamptz NOT NULL,
 worker text, lease_expires_at timestamptz, dispatched_at timestamptz, locked_at timestamptz,
 running_at timestamptz, finished_at timestamptz, result_published_at timestamptz,
 exit_code integer, error_class text, error text, output text, cancel_requested_at timestamptz,
 holds_slot boolean NOT NULL, shards_pending integer, deferred_at timestamptz, capped_at timestamptz,
 queued boolean GENERATED ALWAYS AS (state = 'SCHEDULED' AND dispatched_at IS NULL) STORED,
 flying boolean GENERATED ALWAYS AS (state IN ('LOCKED', 'RUNNING')
   OR (state = 'SCHEDULED' AND dispatched_at IS NOT NULL)) STORED,
 active boolean GENERATED ALWAYS AS (state <> 'FINISHED') STORED,
 retrying boolean GENERATED ALWAYS AS (state = 'SCHEDULED' AND attempt > 1) STORED,
 result_batch bigint, attempt_worker text, attempt_started_at timestamptz) WITH (fillfactor = 25);
CREATE TABLE b (
 id bigint PRIMARY KEY, priority smallint NOT NULL, state st NOT NULL, attempt integer NOT NULL,
 shard_index integer NOT NULL, shard_total integer NOT NULL, holds_slot boolean NOT NULL,
 due_at timestamptz NOT NULL,
 queued boolean GENERATED ALWAYS AS (state = 'SCHEDULED' AND dispatched_at IS NULL) STORED,
 flying boolean GENERATED ALWAYS AS (state IN ('LOCKED', 'RUNNING')
   OR (state = 'SCHEDULED' AND dispatched_at IS NOT NULL)) STORED,
 active boolean GENERATED ALWAYS AS (state <> 'FINISHED') STORED,
 retrying boolean GENERATED ALWAYS AS (state = 'SCHEDULED' AND attempt > 1) STORED,
 job_id bigint, dispatched_at timestamptz, deferred_at timestamptz, finished_at timestamptz,
 wait_for bigint, outcome oc, lease_expires_at timestamptz, locked_at timestamptz,
 running_at timestamptz, result_published_at timestamptz, exit_code integer,
 cancel_requested_at timestamptz, shards_pending integer, capped_at timestamptz,
 result_batch bigint, attempt_started_at timestamptz,
 deployment text NOT NULL, shard_mode text, worker text, error_class text, error text,
 output text, attempt_worker text) WITH (fillfactor = 25);
SQL
for t in a b; do
    p -d "$DB" <<SQL
CREATE INDEX ON $t (job_id) WHERE active;
CREATE INDEX ON $t (priority) WHERE queued AND deferred_at IS NOT NULL;
CREATE INDEX ON $t USING brin (finished_at, dispatched_at) WITH (autosummarize = on);
CREATE INDEX ON $t (priority, due_at) WHERE queued;
CREATE INDEX ON $t (dispatched_at) WHERE flying;
CREATE INDEX ON $t (deployment) WHERE retrying;
CREATE INDEX ON $t (due_at) WHERE queued AND shard_mode = 'static';
INSERT INTO $t (id, job_id, deployment, priority, shard_index, shard_total, attempt, state,
  due_at, holds_slot, dispatched_at)
 SELECT g, 1, 'bench.', 2, 0, 1, 1, 'SCHEDULED', now(), false, now()
 FROM generate_series(1, $ROWS) g;
VACUUM ANALYZE $t;
SQL
done
echo "table  claim_ms  running_ms  finish_ms"
for ((r = 0; r < ROUNDS; r++)); do
    lo=$((1 + r * 1000)); hi=$((lo + 999))
    for t in a b; do
        p -d "$DB" <<SQL | awk -v t="$t" '/^Time:/ { v = v "  " $2 } END { print t v }'
\timing on
UPDATE $t SET state = 'LOCKED', worker = 'exec0', locked_at = clock_timestamp(),
  lease_expires_at = now() + interval '1 min' WHERE id BETWEEN $lo AND $hi;
UPDATE $t SET state = 'RUNNING', running_at = clock_timestamp(),
  lease_expires_at = now() + interval '1 min' WHERE id BETWEEN $lo AND $hi;
UPDATE $t SET state = 'FINISHED', outcome = 'SUCCESS', finished_at = now(), exit_code = 0,
  lease_expires_at = NULL, attempt_worker = 'exec0', attempt_started_at = now(),
  result_batch = 1, output = '' WHERE id BETWEEN $lo AND $hi;
SQL
    done
done
