#!/usr/bin/env bash
# job_delete.sh — how long deleting a busy job takes (BENCHMARKS.md, "Job
# delete with a week of runs"): a scratch job with N finished, published
# instances (instance_def + instance_state rows) and N fire-ledger rows,
# then its delete — `DELETE FROM job WHERE id = ...`, the statement
# job.delete runs (libax/src/store/job.c) — timed inside a transaction that
# is rolled back, ROUNDS times; then every scratch row is removed.
#
#   AX_CONFIG=ax.conf tests/bench/job_delete.sh [N [ROUNDS]]
#
# Prints one line per round: delete_ms=... . Until migration 026 a statement
# trigger rewrote every instance (job_id = NULL) and deleted every ledger
# row in that statement; the services run it under db.statement.timeout.ms
# (5,000 by default), this script under 120 s so that it can be measured.
# JOBDEL_OLD=1 measures that: the trigger of 016_split_instance is created
# inside each round's transaction, before the delete, and rolled back with
# it.
# Run it alone (the bench lock): it writes 2 N rows.
set -euo pipefail
N=${1:-300000}; ROUNDS=${2:-3}
: "${AX_CONFIG:?AX_CONFIG}"
conf_get() { awk -F' *= *' -v k="$1" '$1 == k { print $2 }' "$AX_CONFIG" | tail -n 1; }
export PGHOST=$(conf_get pg.host) PGPORT=$(conf_get pg.port) PGDATABASE=$(conf_get pg.dbname) \
       PGUSER=$(conf_get pg.user) PGPASSWORD=$(conf_get pg.password)
NAME="bench-job-delete-$$" DEP="bench.jobdel.$$."
BASE=$((9000000000000 + $$ * 10000000))
sql() { psql -X -q -t -A -v ON_ERROR_STOP=1 "$@"; }
cleanup() {
    sql -c "DELETE FROM job_fire WHERE job_id = (SELECT id FROM job WHERE name = '$NAME')" \
        -c "DELETE FROM instance_def WHERE id BETWEEN $((BASE + 1)) AND $((BASE + N))" \
        -c "DELETE FROM job WHERE name = '$NAME'" >/dev/null
}
trap cleanup EXIT
JID=$(sql -c "INSERT INTO job (name, command, deployment) VALUES ('$NAME', '{true}', '$DEP') RETURNING id")
sql >/dev/null <<SQL
INSERT INTO instance_def (id, job_id, job_name, command, timeout_ms, trace_id, idempotency_key)
  SELECT g, $JID, '$NAME', '{true}', 1000, 't' || g, 'k' || g
  FROM generate_series($((BASE + 1)), $((BASE + N))) g;
INSERT INTO instance_state (id, job_id, deployment, due_at, state, outcome, finished_at,
                            result_published_at)
  SELECT g, $JID, '$DEP', now(), 'FINISHED', 'SUCCESS', now(), now()
  FROM generate_series($((BASE + 1)), $((BASE + N))) g;
INSERT INTO job_fire (job_id, nominal_time, decision, epoch)
  SELECT $JID, now() - g * interval '1 s', 'fired', 1 FROM generate_series(1, $N) g;
VACUUM (ANALYZE) instance_def, instance_state, job_fire;
SQL
OLD=
[ "${JOBDEL_OLD:-0}" = 1 ] && OLD="CREATE FUNCTION pg_temp.job_after_delete_016() RETURNS trigger
 LANGUAGE plpgsql AS \$f\$ BEGIN
    DELETE FROM job_fire f USING old_jobs o WHERE f.job_id = o.id;
    UPDATE instance_state i SET job_id = NULL FROM old_jobs o WHERE i.job_id = o.id;
    UPDATE instance_def i SET job_id = NULL FROM old_jobs o WHERE i.job_id = o.id;
    RETURN NULL;
END \$f\$;
CREATE TRIGGER job_after_delete_016 AFTER DELETE ON job REFERENCING OLD TABLE AS old_jobs
 FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.job_after_delete_016();"
for ((r = 1; r <= ROUNDS; r++)); do
    ms=$(sql <<SQL | awk '/^Time:/ { print $2 }' | tail -n 1
SET statement_timeout = '120s';
BEGIN;
$OLD
\timing on
DELETE FROM job WHERE id = $JID;
\timing off
ROLLBACK;
SQL
)
    echo "n=$N round=$r delete_ms=$ms"
done
