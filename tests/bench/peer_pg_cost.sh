#!/usr/bin/env bash
# peer_pg_cost.sh — what one pg-boss round costs PostgreSQL per job, measured
# as bench_exec measures ax (BENCHMARKS.md, "Issue #13: PostgreSQL per job,
# ax against pg-boss"): ROUNDS runs of ../shared/peers' pgboss_bench.mjs
# (N no-op jobs, inserted in batches of 1,000, fetched 5,000 at a time by 4
# workers, as run.sh runs it) on PEERS_DSN's database, each printing
#
#   total_per_s                 pg-boss's own submit -> done figure
#   pg_cpu_us_per_job           user + system ticks of every postgres
#                               process of the cluster over the run (the
#                               postmaster's reaped children included: pg-boss
#                               closes its connections at the end) / N
#   node_cpu_us_per_job         the node process's own CPU / N
#   machine_busy_us_per_job     /proc/stat busy ticks of the whole machine / N
#   wal_records_per_job, wal_bytes_per_job   pg_stat_wal (cluster-wide)
#
# and pg-boss's statements by time (pg_stat_statements of that database,
# reset before each run: calls, WAL records and µs per job). bench_exec's
# pg_backend_cpu_us_per_job (pg_per_job.sh) and cpu_pct_postgres are the
# same ticks for ax.
#
#   PEERS_DSN=postgres://u:p@127.0.0.1:15432/peers \
#     tests/bench/peer_pg_cost.sh [N [ROUNDS]]
#
# PostgreSQL must run on this machine (its processes are read from /proc),
# with pg_stat_statements loaded; run.sh must have installed pg-boss into
# PEERS_DIR (default /tmp/ax-peers) once. Run it alone (the bench lock).
set -euo pipefail
N=${1:-20000}; ROUNDS=${2:-3}
DSN=${PEERS_DSN:?PEERS_DSN: the peers database}
P=${PEERS_DIR:-/tmp/ax-peers}
HERE=$(cd "$(dirname "$0")" && pwd)
[[ -d $P/node_modules/pg-boss ]] || { echo "peer_pg_cost.sh: no pg-boss in $P: run ../shared/peers/run.sh once" >&2; exit 2; }
# the peers' own script, as peers.sh finds run.sh (PEERS_RUN)
PEERS=$(dirname "${PEERS_RUN:-$HERE/../../../shared/peers/run.sh}")
cp "$PEERS/pgboss_bench.mjs" "$P/"
p() { psql "$DSN" -X -q -v ON_ERROR_STOP=1 -tA "$@"; }
# infra's cluster does not preload the extension (a cost on every statement
# of a deployment that does not look at it): say how, rather than fail below
case ",$(p -c "SHOW shared_preload_libraries" | tr -d ' ')," in
*,pg_stat_statements,*) ;;
*) echo "$(basename "$0"): pg_stat_statements is not in shared_preload_libraries; as a superuser:" >&2
   echo "  ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'; then restart PostgreSQL" >&2
   echo "  (infra/lib.sh: ax_pg_stop; ax_pg_start)" >&2
   exit 2 ;;
esac
p -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null 2>&1 || true
# the postmaster: the parent of a backend of ours
PM=$(printf 'SELECT pg_backend_pid() AS bp \\gset\n\\setenv BP :bp\n\\! ps -o ppid= -p "$BP"\n' | p | tr -d ' ')
[[ -n $PM && -r /proc/$PM/stat ]] || { echo "peer_pg_cost.sh: PostgreSQL's processes are not on this machine" >&2; exit 2; }
# utime + stime of the postmaster's children alive now, and its cutime +
# cstime (the children it reaped); field numbers after "pid (comm) "
pg_ticks() {
    local s=0 c f
    for c in $PM $(pgrep -P "$PM"); do
        f=$(sed 's/.*) //' "/proc/$c/stat" 2>/dev/null) || continue
        set -- $f
        s=$((s + ${12} + ${13}))
        [[ $c == "$PM" ]] && s=$((s + ${14} + ${15}))
    done
    echo $s
}
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
hz=$(getconf CLK_TCK)
for r in $(seq 1 "$ROUNDS"); do
    p -c "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)" >/dev/null
    w0=$(p -c "SELECT wal_records || ' ' || wal_bytes FROM pg_stat_wal")
    t0=$(pg_ticks); m0=$(busy)
    out=$( cd "$P" && /usr/bin/time -f "node_cpu_s %U %S" node pgboss_bench.mjs "$DSN" "$N" 5000 4 2>&1 )
    t1=$(pg_ticks); m1=$(busy)
    w1=$(p -c "SELECT wal_records || ' ' || wal_bytes FROM pg_stat_wal")
    echo "$out" | grep '^{'
    read -r _ nu ns <<<"$(echo "$out" | grep '^node_cpu_s')"
    set -- $w0 $w1
    echo "round=$r total_per_s=$(echo "$out" | grep -o '"total_per_s":[0-9]*' | cut -d: -f2)" \
         "pg_cpu_us_per_job=$(( (t1 - t0) * 1000000 / hz / N ))" \
         "node_cpu_us_per_job=$(echo "($nu + $ns) * 1000000 / $N" | bc)" \
         "machine_busy_us_per_job=$(( (m1 - m0) * 1000000 / hz / N ))" \
         "wal_records_per_job=$(echo "scale=2; ($3 - $1) / $N" | bc)" \
         "wal_bytes_per_job=$(( ($4 - $2) / N ))"
    p -F $'\t' -c "SELECT round(calls::numeric / $N, 4), round(wal_records::numeric / $N, 2),
          round((total_exec_time * 1000 / $N)::numeric, 2), left(regexp_replace(query, '\s+', ' ', 'g'), 90)
        FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND calls >= 2 ORDER BY total_exec_time DESC LIMIT 5"
done
