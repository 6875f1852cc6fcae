#!/usr/bin/env bash
# plan_ab.sh — A/B of two builds at RATE jobs/s (empty: full load), ROUNDS
# rounds alternating OLD, NEW, with each run's planning and execution µs per
# job from pg_stat_statements (BENCHMARKS.md, "Issue #13: planning on the
# hot path"). Needs pg_stat_statements in AX_CONFIG's database and, for the
# planning figures, track_planning there:
#   ALTER DATABASE <db> SET pg_stat_statements.track_planning = on  (as a superuser)
#
#   AX_CONFIG=ax.conf tests/bench/plan_ab.sh OLD_BUILD NEW_BUILD [ROUNDS] [RATE]
set -u
OLD=${1:?old build}; NEW=${2:?new build}; R=${3:-3}; RATE=${4-1000}
: "${AX_CONFIG:?AX_CONFIG}"
((EUID == 0)) && export AXCONF_EXECUTOR_ALLOW_ROOT=true
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGDATABASE=$(cfg pg.dbname)
export PGPASSWORD=$(cfg pg.password)
p() { psql -X -qtA -c "$1"; }
for r in $(seq 1 "$R"); do for side in OLD NEW; do
    B=$OLD; [ $side = NEW ] && B=$NEW
    p 'SELECT pg_stat_statements_reset()' >/dev/null
    echo "== $side round $r $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    "$B/tests/bench_exec" --config "$AX_CONFIG" "$B" noop 1 20000 $RATE 2>&1 |
        grep -E '^(completed|sched_fin|stage|cpu_pct)'
    p "SELECT 'ingest plan_us_job=' || round((sum(total_plan_time) / 20000 * 1000)::numeric, 2)
         || ' exec_us_job=' || round((sum(total_exec_time) / 20000 * 1000)::numeric, 2)
       FROM pg_stat_statements WHERE (query LIKE 'WITH ld AS ( SELECT % FROM ax_leader %'
         OR query LIKE 'WITH u AS MATERIALIZED ( SELECT u.*%') AND calls >= 10"
    p "SELECT 'all plan_us_job=' || round((sum(total_plan_time) / 20000 * 1000)::numeric, 2)
         || ' exec_us_job=' || round((sum(total_exec_time) / 20000 * 1000)::numeric, 2)
       FROM pg_stat_statements WHERE calls >= 10"
done; done
