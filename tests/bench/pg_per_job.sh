#!/usr/bin/env bash
# pg_per_job.sh — PostgreSQL's work per job on the no-op path: runs
# bench_exec BUILD noop 1 N against AX_CONFIG's database and prints, per
# job, every statement pg_stat_statements saw in that database during the
# run (called at least 10 times: the benchmark's own cleanup and checks are
# left out; calls, WAL records, WAL bytes, µs of execution), the backend CPU
# per job (bench_exec's cpu_pct_postgres x window / N), after bench_exec's
# own summary (jobs/s, WAL per job from pg_stat_wal, CPU), then each
# statement's shared blocks dirtied per job, and per table of this database
# the row versions written per job (inserted, updated, of which HOT, deleted:
# pg_stat_user_tables, reset for the database before the run), and per
# statement called at least 5 times its calls, rows, µs and WAL records per
# row and ms per call.
# BENCHMARKS.md, "Issue #13: PostgreSQL writes per job".
#
#   AX_CONFIG=ax.conf tests/bench/pg_per_job.sh DRIVER_BUILD BUILD [N]
#
# EXECUTORS: how many executors (default 1). BENCH_ARGS: more bench_exec options (e.g. --set executor.allow.root=true
# when run as root). DRIVER_BUILD holds bench_exec (the instrument), BUILD the services under
# test. Needs the pg_stat_statements extension (created if missing) and a
# role that may reset its statistics. pg_stat_wal is cluster-wide: other
# databases' writes during the run are counted too; the statement list is
# this database's only.
set -euo pipefail
DRV=${1:?driver build}; BUILD=${2:?build}; N=${3:-20000}
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGDATABASE=$(cfg pg.dbname)
export PGPASSWORD=$(cfg pg.password)
[[ -n $PGPASSWORD ]] || { pf=$(cfg pg.password_file); [[ -z $pf ]] || PGPASSWORD=$(cat "$pf"); }
p() { psql -X -q -v ON_ERROR_STOP=1 -tA "$@"; }
# infra's cluster does not preload the extension (a cost on every statement
# of a deployment that does not look at it): say how, rather than fail below
case ",$(p -c "SHOW shared_preload_libraries" | tr -d ' ')," in
*,pg_stat_statements,*) ;;
*) echo "$(basename "$0"): pg_stat_statements is not in shared_preload_libraries; as a superuser:" >&2
   echo "  ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'; then restart PostgreSQL" >&2
   echo "  (infra/lib.sh: ax_pg_stop; ax_pg_start)" >&2
   exit 2 ;;
esac
p -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
p -c "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)" >/dev/null
p -c "SELECT pg_stat_reset()" >/dev/null
# PG_WALINSPECT=1: every WAL record of the run by relation of this database
# and record type (pg_walinspect; bench_exec's cleanup deletes are in it)
[[ -z ${PG_WALINSPECT:-} ]] || { p -c "CREATE EXTENSION IF NOT EXISTS pg_walinspect" >/dev/null
  lsn0=$(p -c "SELECT pg_current_wal_flush_lsn()"); }
"$DRV/tests/bench_exec" --config "$AX_CONFIG" ${BENCH_ARGS:-} "$BUILD" noop "${EXECUTORS:-1}" "$N" | tee /tmp/pg_per_job.$$.out
[[ -z ${PG_WALINSPECT:-} ]] || { lsn1=$(p -c "SELECT pg_current_wal_flush_lsn()")
  echo "WAL records per job by relation and type (bytes per job; by the relation of its first block):"
  p -F $'\t' -c "WITH r AS (SELECT resource_manager || ' ' || record_type AS kind, record_length, fpi_length,
        (regexp_match(block_ref, 'rel [0-9]+/([0-9]+)/([0-9]+)')) AS m
      FROM pg_get_wal_records_info('$lsn0', '$lsn1'))
    SELECT CASE WHEN r.m IS NULL THEN '(no block)' WHEN c.relname IS NULL THEN '(other database or relation)'
        ELSE c.relname END, r.kind, round(count(*)::numeric / $N, 3),
      round(sum(r.record_length)::numeric / $N, 1), round(sum(r.fpi_length)::numeric / $N, 1)
    FROM r LEFT JOIN pg_class c ON r.m[1]::oid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND c.relfilenode = r.m[2]::oid
    GROUP BY 1, 2 HAVING count(*) >= $N / 100 ORDER BY 3 DESC" || echo "(pg_walinspect failed)"; }
echo "statements per job (calls, WAL records, WAL bytes, µs), this database:"
p -F $'\t' -c "SELECT round(calls::numeric / $N, 3), round(wal_records::numeric / $N, 2),
      round(wal_bytes::numeric / $N, 0), round((total_exec_time * 1000 / $N)::numeric, 2),
      left(regexp_replace(query, '\s+', ' ', 'g'), 110)
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND calls >= 10 ORDER BY total_exec_time DESC LIMIT 40"
p -F $'\t' -c "SELECT 'total', round(sum(calls)::numeric / $N, 2), round(sum(wal_records)::numeric / $N, 2),
      round(sum(wal_bytes)::numeric / $N, 0), round((sum(total_exec_time) * 1000 / $N)::numeric, 2)
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls >= 10"
echo "µs and WAL records per row (rows: pg_stat_statements' rows, returned or written), this database:"
p -F $'\t' -c "SELECT calls, rows, round((total_exec_time * 1000 / nullif(rows, 0))::numeric, 2),
      round(wal_records::numeric / nullif(rows, 0), 2), round((total_exec_time / calls)::numeric, 2),
      left(regexp_replace(query, '\s+', ' ', 'g'), 60)
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND calls >= 5 ORDER BY total_exec_time DESC LIMIT 12"
echo "shared blocks dirtied per job (calls >= 10), this database:"
p -F $'\t' -c "SELECT round(shared_blks_dirtied::numeric / $N, 3), round(shared_blks_written::numeric / $N, 3),
      left(regexp_replace(query, '\s+', ' ', 'g'), 60)
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND calls >= 10 AND shared_blks_dirtied > 0 ORDER BY shared_blks_dirtied DESC LIMIT 15"
sleep 1  # the backends' table statistics reach the collector at their next report
echo "row versions per job by table (inserted, updated, HOT, HOT %, deleted):"
p -F $'\t' -c "SELECT relname, round(n_tup_ins::numeric / $N, 3), round(n_tup_upd::numeric / $N, 3),
      round(n_tup_hot_upd::numeric / $N, 3),
      CASE WHEN n_tup_upd > 0 THEN round(100.0 * n_tup_hot_upd / n_tup_upd, 1) END,
      round(n_tup_del::numeric / $N, 3)
    FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del >= 10
    ORDER BY n_tup_ins + n_tup_upd + n_tup_del DESC"
awk '/^completed_per_s=/ { for (i = 1; i <= NF; i++) if ($i ~ /^window_s=/) { split($i, a, "="); w = a[2] } }
     /^cpu_pct_trigger=/ { for (i = 1; i <= NF; i++) if ($i ~ /^cpu_pct_postgres=/) { split($i, a, "="); c = a[2] } }
     END { printf "pg_backend_cpu_us_per_job=%.0f\n", c / 100 * w * 1e6 / '"$N"' }' /tmp/pg_per_job.$$.out
rm -f /tmp/pg_per_job.$$.out
