#!/usr/bin/env bash
# result_batch_storage_ab.sh — ax_result_batch.ids stored EXTENDED (the
# default: pglz, inline when it compresses under 2 kB) against EXTERNAL
# (out of line, uncompressed, as 021 made dispatch_batch.ids), alternated
# R times: the execution times of outcome.finish, outbox.pending and
# outbox.mark_published from tests/bench/explain_finish.sh (BENCHMARKS.md,
# "Issue #13: the publisher's statements per row"). Not a test: it ALTERs
# the column of the database it is given and leaves it EXTENDED.
#
#   H=me source /work/devenv/lib.sh; dev_migrate
#   PGPASSWORD=$(ax_pg_password) PSQL="psql -X -q -h 127.0.0.1 -p $AX_PG_PORT -U ax -d ax_me" \
#     flock /work/devenv/bench.lock tests/bench/result_batch_storage_ab.sh [B] [R]
set -euo pipefail
B=${1:-500}; R=${2:-3}
PSQL=${PSQL:-psql}
HERE=$(cd "$(dirname "$0")" && pwd)
alter() { eval "$PSQL" -v ON_ERROR_STOP=1 -c "'ALTER TABLE ax_result_batch ALTER COLUMN ids SET STORAGE $1'" >/dev/null; }
trap 'alter EXTENDED' EXIT
for r in $(seq 1 "$R"); do
    for s in EXTENDED EXTERNAL; do
        alter "$s"
        "$HERE/explain_finish.sh" "$B" all | grep -E '^===|^Execution Time' | paste -sd' ' | sed "s/^/$r $s /"
    done
done
