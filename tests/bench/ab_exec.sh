#!/usr/bin/env bash
# ab_exec.sh — two builds (or two --set lists on one build) at full load,
# alternating: PAIRS pairs of `bench_exec --config $AX_CONFIG --reuse-topics
# [SETS] BUILD noop E N [RATE]` (E: AB_EXECUTORS, default 1), one line per
# run with jobs/s, fire-to-start
# p50/p99/max, PostgreSQL's CPU per job and the services' (BENCHMARKS.md,
# "Issue #13: the twenty-second session"). With AB_STMT=TEXT, pg_stat_statements
# is reset before each run and the line ends with the statement whose text
# contains TEXT (its calls, rows, and statement time per row and per job —
# per job when two builds return different rows per job; needs
# pg_stat_statements and a role that may reset it). The measuring program is
# bench_exec of NEW's build for both sides; OLD runs first in odd pairs, NEW
# in even ones; a run that fails prints "failed", bench_exec's last three lines of
# standard error, and no figures.
#
#   AX_CONFIG=ax.conf tests/bench/ab_exec.sh OLD_BUILD NEW_BUILD PAIRS [N] [RATE]
#   AX_CONFIG=ax.conf AB_OLD_SETS="" AB_NEW_SETS="--set k=v" \
#     tests/bench/ab_exec.sh BUILD BUILD PAIRS [N] [RATE]
#
# As root, export AXCONF_EXECUTOR_ALLOW_ROOT=true first. No assertions:
# speed depends on the machine; run it alone.
set -uo pipefail
ME=ab_exec.sh
(($# >= 3)) || { echo "usage: $ME OLD_BUILD NEW_BUILD PAIRS [N] [RATE]" >&2; exit 2; }
OLD=$1 NEW=$2 PAIRS=$3 N=${4:-20000} RATE=${5:-}
[[ $PAIRS =~ ^[1-9][0-9]*$ && $N =~ ^[1-9][0-9]*$ ]] || { echo "$ME: PAIRS and N are positive integers" >&2; exit 2; }
: "${AX_CONFIG:?set AX_CONFIG}"
BENCH=$NEW/tests/bench_exec
[[ -x $BENCH ]] || { echo "$ME: $BENCH is not built" >&2; exit 2; }
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGDATABASE=$(cfg pg.dbname)
export PGPASSWORD=$(cfg pg.password)
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
field() { grep -oP "$1=\K[^ ]+" <<<"$2" | head -1; }
for ((i = 1; i <= PAIRS; i++)); do
    order="old new"
    ((i % 2 == 0)) && order="new old" # each side first in every other pair
    for side in $order; do
        b=$OLD sets=${AB_OLD_SETS:-}
        [[ $side == new ]] && b=$NEW sets=${AB_NEW_SETS:-}
        if [[ -n ${AB_STMT:-} ]] && ! q -c "SELECT pg_stat_statements_reset()" >/dev/null; then
            echo "$ME: cannot reset pg_stat_statements" >&2
            exit 1
        fi
        # shellcheck disable=SC2086 # sets: words
        err=$(mktemp)
        out=$("$BENCH" --config "$AX_CONFIG" --reuse-topics $sets "$b" noop "${AB_EXECUTORS:-1}" "$N" ${RATE:+"$RATE"} 2>"$err")
        brc=$?
        if ((brc != 0)); then
            # why: bench_exec's last words (its services' logs are named there)
            echo "$i $side failed: bench_exec exited with $brc: $(tail -n 3 "$err" | tr '\n' ' ')"
            rm -f "$err"
            continue
        fi
        rm -f "$err"
        pg=$(field cpu_pct_postgres "$out") win=$(field window_s "$out")
        pgus=$(awk -v p="${pg:-0}" -v w="${win:-0}" -v n="$N" 'BEGIN {printf "%.1f", p / 100 * w * 1e6 / n}')
        line="$i $side completed_per_s=$(field completed_per_s "$out")"
        line+=" fire_start_ms_p50_p99_max=$(field fire_start_ms_p50_p99_max "$out") pg_us_per_job=$pgus"
        line+=" services_us_per_job=$(field cpu_us_per_job_services "$out")"
        line+=" executors_us_per_job=$(field cpu_us_per_job_executors "$out")"
        if [[ -n ${AB_STMT:-} ]]; then
            st=$(q -v t="$AB_STMT" -v n="$N" <<'SQL'
SELECT calls || ' calls ' || rows || ' rows ' || round((total_exec_time * 1000 / rows)::numeric, 2)
       || ' us_per_row ' || round((total_exec_time * 1000 / :n)::numeric, 2)
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND rows > 0 AND strpos(query, :'t') > 0
 ORDER BY total_exec_time DESC LIMIT 1
SQL
)
            line+=" stmt: ${st:-not found} us_per_job"
        fi
        echo "$line"
    done
done
