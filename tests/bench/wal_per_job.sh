#!/usr/bin/env bash
# wal_per_job.sh — PostgreSQL's WAL per job by record type and by relation
# over bench_exec's measured window only: the insert LSN is read when
# bench_exec prints "warm-up:" and again when it prints its completed_per_s
# line (before its cleanup), and pg_waldump summarizes the WAL between them
# (--stats=record, then the records counted by type and relation name).
# BENCHMARKS.md, "Issue #13: the twenty-seventh session".
#
#   AX_STATE=var AX_CONFIG=var/ax.conf tests/bench/wal_per_job.sh BUILD [N]
#
# Needs the cluster's pg_wal on this machine ($AX_STATE/pg/pg_wal, infra's
# layout; AX_PG_BIN for pg_waldump) and read access to it (root or the
# cluster's owner). BUILD holds bench_exec and the services.
set -euo pipefail
B=${1:?usage: wal_per_job.sh BUILD [N]}; N=${2:-20000}
: "${AX_CONFIG:?set AX_CONFIG}" "${AX_STATE:?set AX_STATE, the state directory of infra}"
WALDUMP=${AX_PG_BIN:-/usr/lib/postgresql/15/bin}/pg_waldump
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGDATABASE=$(cfg pg.dbname)
export PGPASSWORD=$(cfg pg.password)
[[ -n $PGPASSWORD ]] || { pf=$(cfg pg.password_file); [[ -z $pf ]] || PGPASSWORD=$(cat "$pf"); }
lsn() { psql -X -q -tA -c "SELECT pg_current_wal_insert_lsn()"; }
out=$(mktemp /tmp/wal_per_job.XXXXXX)
trap 'rm -f "$out"' EXIT
"$B/tests/bench_exec" --config "$AX_CONFIG" --reuse-topics "$B" noop 1 "$N" >"$out" 2>&1 &
bp=$!
until grep -q 'warm-up:' "$out"; do kill -0 $bp 2>/dev/null || { cat "$out"; exit 1; }; sleep 0.01; done
l0=$(lsn)
until grep -q '^completed_per_s=' "$out"; do kill -0 $bp 2>/dev/null || { cat "$out"; exit 1; }; sleep 0.01; done
l1=$(lsn)
wait $bp
grep -E '^(completed_per_s|pg_)' "$out"
echo "window: $l0 .. $l1"
"$WALDUMP" -p "$AX_STATE/pg/pg_wal" -s "$l0" -e "$l1" --stats=record 2>/dev/null |
    awk -v n="$N" 'NR <= 3 || $2 + 0 > 0 { printf "%s  (%.2f per job)\n", $0, $2 / n }'
echo "records per job by type and relation:"
declare -A rel
while read -r c t f; do
    [[ -n ${rel[$f]:-} ]] || rel[$f]=$(psql -X -q -tA -c "SELECT coalesce((SELECT relname FROM pg_class WHERE relfilenode = $f), '$f')")
    awk -v c="$c" -v n="$N" -v t="$t" -v r="${rel[$f]}" 'BEGIN { if (c / n >= 0.01) printf "%6.2f  %-14s %s\n", c / n, t, r }'
done < <("$WALDUMP" -p "$AX_STATE/pg/pg_wal" -s "$l0" -e "$l1" 2>/dev/null |
    sed -nE 's/.*desc: ([A-Z_+]+).*rel [0-9]+\/[0-9]+\/([0-9]+).*/\1 \2/p' | sort | uniq -c | sort -rn)
