#!/usr/bin/env bash
# claim_one_update.sh — the executor's claim (run.claim, the store's own
# text) against the same claim as one UPDATE (the batch joined to the
# table by the UPDATE itself, the job's lease and concurrency limit read
# per row by subquery): BENCHMARKS.md, "Issue #13: the twenty-first
# session". In a scratch database SCRATCH (made, migrated with BUILD's
# axctl, and dropped here): one job and 2 x ROUNDS x 1,000 dispatched
# SCHEDULED instances, then ROUNDS rounds of one 1,000-row claim each way
# on ids not claimed before (each committed; plan_cache_mode =
# force_custom_plan, as the store runs it); psql's timing, ms per claim,
# and the medians.
#   AX_CONFIG=ax.conf tests/bench/claim_one_update.sh BUILD [ROUNDS] [SCRATCH]
set -euo pipefail
ME=claim_one_update.sh
die() { echo "$ME: $*" >&2; exit 2; }
(($# >= 1)) || die "usage: $ME BUILD [ROUNDS] [SCRATCH]"
BUILD=$(cd "$1" 2>/dev/null && pwd) || die "$1: no such directory"
ROUNDS=${2:-20}; DB=${3:-ax_claim1}
: "${AX_CONFIG:?AX_CONFIG: the configuration whose PostgreSQL server to use}"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer: $ROUNDS"
[[ $DB =~ ^[a-z_][a-z0-9_]*$ ]] || die "SCRATCH must be a plain lower-case name: $DB"
[[ -x $BUILD/axctl/axctl ]] || die "$BUILD/axctl/axctl: not built"
HERE=$(cd "$(dirname "$0")" && pwd)
CLAIM=$("$HERE/store_sql.py" run.claim) || die "run.claim not found in the store"
cfg() { sed -n "s/^$1 *= *//p" "$AX_CONFIG" | head -1; }
export PGHOST=$(cfg pg.host) PGPORT=$(cfg pg.port) PGUSER=$(cfg pg.user) PGPASSWORD=$(cfg pg.password)
p() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
tmp=$(mktemp -d)
p -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
trap 'p -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null; rm -rf "$tmp"' EXIT
sed "s/^pg.dbname *=.*/pg.dbname = $DB/" "$AX_CONFIG" >"$tmp/conf"
grep -q '^pg.dbname' "$tmp/conf" || echo "pg.dbname = $DB" >>"$tmp/conf"
"$BUILD/axctl/axctl" --config "$tmp/conf" migrate apply >/dev/null
N=$((2 * ROUNDS * 1000))
p -d "$DB" <<SQL
INSERT INTO job (name, handler_kind, command, timeout_ms) VALUES ('xc', 'plugin', ARRAY['/x.so'], 60000);
INSERT INTO instance_def (id, job_id, handler_kind, command, timeout_ms, trace_id, idempotency_key)
  SELECT g, j.id, 'plugin', ARRAY['/x.so'], 60000, 'bx-1-' || g, 'k' || g FROM job j, generate_series(1, $N) g;
INSERT INTO instance_state (id, job_id, deployment, priority, due_at, dispatched_at)
  SELECT g, j.id, 'ax.', 2, now(), now() FROM job j, generate_series(1, $N) g;
VACUUM ANALYZE instance_def, instance_state;
SQL
{
    echo "SET plan_cache_mode = force_custom_plan;"
    echo "PREPARE a(text, bigint[], int[], bigint, bigint, bigint, bigint, bigint) AS $CLAIM;"
    cat <<'SQL'
PREPARE b(text, bigint[], int[], bigint, bigint, bigint, bigint, bigint) AS
UPDATE instance_state i SET state = 'LOCKED', worker = $1, locked_at = clock_timestamp(),
  lease_expires_at = now() + (SELECT least(greatest($4::bigint * coalesce(j.avg_run_ms, 0), $5::bigint),
    $6::bigint) FROM job j WHERE j.id = i.job_id) * interval '1 millisecond'
 FROM unnest($2::bigint[], $3::int[]) AS u(id, attempt)
 WHERE i.id BETWEEN $7::bigint AND $8::bigint AND i.id = u.id AND i.state = 'SCHEDULED'
  AND i.attempt = u.attempt
  AND NOT EXISTS (SELECT 1 FROM job j WHERE j.id = i.job_id AND j.concurrency_limit IS NOT NULL)
 RETURNING i.id, (extract(epoch FROM i.lease_expires_at - now()) * 1000)::bigint, i.shard_index,
  i.shard_total, i.shard_mode = 'probe', i.attempt;
\timing on
SQL
    for ((k = 0; k < 2 * ROUNDS; k++)); do
        lo=$((k * 1000 + 1)) hi=$((k * 1000 + 1000)) s=$([ $((k % 2)) = 0 ] && echo a || echo b)
        echo "\\echo $s"
        # (EXECUTE takes no subquery: the ids as a literal)
        echo "EXECUTE $s('w1', '{$(seq -s, "$lo" "$hi")}', array_fill(1, ARRAY[1000]),"
        echo "  3, 30000, 3600000, $lo, $hi) \\g $tmp/$s.rows"
    done
} >"$tmp/run.sql"
p -d "$DB" -f "$tmp/run.sql" | paste - - | awk '
    { t[$1] = t[$1] " " $3; v[$1, ++n[$1]] = $3 + 0 }   # "a<TAB>Time: 6.110 ms"
    END {
        for (s in n) {
            m = n[s]; for (i = 1; i <= m; i++) x[i] = v[s, i]
            for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (x[j] < x[i]) { y = x[i]; x[i] = x[j]; x[j] = y }
            med = m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
            printf "%s %s ms:%s\nmedian_%s_ms=%.2f\n", s, s == "a" ? "run.claim" : "one UPDATE", t[s], s, med
        }
    }'
# every claim claimed its 1,000 rows (a plan that skipped rows is not faster)
locked=$(p -d "$DB" -tAc "SELECT count(*) FROM instance_state WHERE state = 'LOCKED'")
[ "$locked" = "$N" ] || { echo "$ME: $locked of $N rows claimed" >&2; exit 1; }
