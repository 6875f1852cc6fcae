#!/usr/bin/env bash
# def_insert_indexes.sh — what each index of instance_def costs the ingest's
# insert (BENCHMARKS.md, "Issue #13: the twentieth session"): EXPLAIN
# (ANALYZE, BUFFERS, WAL) of N rows like bench_exec's (a job's plugin
# command, random 32-hex trace ids), inserted into AX_CONFIG's instance_def
# with all its indexes, without instance_def_trace, and without that and
# instance_def_job — each in a transaction rolled back (the ids are taken
# from the sequence; nothing stays).
#   AX_CONFIG=ax.conf tests/bench/def_insert_indexes.sh [N] [ROUNDS]
set -euo pipefail
N=${1:-1000}; ROUNDS=${2:-2}
[[ $N =~ ^[1-9][0-9]*$ && $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "def_insert_indexes: N and ROUNDS are positive integers" >&2; exit 2; }
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGDATABASE=$(cfg pg.dbname)
export PGPASSWORD=$(cfg pg.password)
ins="EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF)
 INSERT INTO instance_def (id, job_id, job_name, handler_kind, command, payload, timeout_ms,
   trace_id, idempotency_key, executor_group)
 SELECT id, 1, 'bench', 'plugin', ARRAY['ax-noop.so'], '\\x', 60000, md5(random()::text),
   'idem-' || id, 'default' FROM src"
{
    echo "CREATE TEMP TABLE src AS SELECT nextval('job_instance_id_seq') AS id FROM generate_series(1, $N);"
    for ((r = 0; r < ROUNDS; r++)); do
        echo "\\echo all indexes"
        echo "BEGIN; $ins; ROLLBACK;"
        echo "\\echo without instance_def_trace"
        echo "BEGIN; DROP INDEX instance_def_trace; $ins; ROLLBACK;"
        echo "\\echo without instance_def_trace and instance_def_job"
        echo "BEGIN; DROP INDEX instance_def_trace; DROP INDEX instance_def_job; $ins; ROLLBACK;"
    done
} | psql -X -q -v ON_ERROR_STOP=1 | grep -E '^(all|without)|WAL:|Execution Time' | grep -v '^ *Buffers'
