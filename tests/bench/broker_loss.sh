#!/usr/bin/env bash
# broker_loss.sh — how long ax stalls when a broker of a three-node cluster
# dies (BENCHMARKS.md, "Three brokers"). The three services of BUILD run
# against CONF3 (a migrated database, the cluster's kafka.* keys; topics
# of replication factor 3 created here on a prefix of its own) while noop
# plugin jobs are submitted at about RATE/s; after WARM s the broker
# leading the results topic's partition 0 is killed with SIGKILL, started
# again AFTER s later (infra's ax_kafka_start with STATE, the cluster's
# AX_STATE, and its AX_KAFKA_PORT/AX_KAFKA_CONTROLLER_PORT in the
# environment), and the load goes on for TAIL s. Per run, from PostgreSQL's
# result_published_at of the run's instances:
#   first_ms   kill → the first result published after it
#   stall_ms   the longest time without a result published, from 1 s before
#              the kill to the end
#   back_ms    kill → the first second whose publications reach 80 % of the
#              mean rate of the WARM s before the kill
# Runs ROUNDS times; prints each and the medians.
#
#   flock /work/devenv/bench.lock env STATE=/tmp/k3 AX_KAFKA_PORT=41092 AX_KAFKA_CONTROLLER_PORT=41093 AX_CACHE=.cache \
#       tests/bench/broker_loss.sh CONF3 BUILD [ROUNDS] [RATE] [WARM] [AFTER] [TAIL]
set -uo pipefail
CONF=${1:?CONF3} B=${2:?BUILD} ROUNDS=${3:-3} RATE=${4:-400} WARM=${5:-15} AFTER=${6:-15} TAIL=${7:-15}
: "${STATE:?STATE (the AX_STATE of the cluster)}" "${AX_KAFKA_PORT:?}" "${AX_KAFKA_CONTROLLER_PORT:?}"
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$(dirname "$HERE")")
((EUID == 0)) && export AXCONF_EXECUTOR_ALLOW_ROOT=true
conf_get() { awk -F' *= *' -v k="$1" '$1 == k { print $2 }' "$CONF" | tail -n 1; }
export PGHOST=$(conf_get pg.host) PGPORT=$(conf_get pg.port) PGDATABASE=$(conf_get pg.dbname) \
       PGUSER=$(conf_get pg.user) PGPASSWORD=$(conf_get pg.password)
q() { psql -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }
kk() { kcat -F "$STATE/kafka.client.conf" "$@"; }
node_pid() { if [ "$1" = 1 ]; then cat "$STATE/run/kafka.pid"; else cat "$STATE/run/kafka-$1.pid"; fi; }
OUT=$(mktemp -d /tmp/broker_loss.XXXXXX)
PLUG=$(cd "$B/plugins" && pwd)/ax-noop.so
one_run() { # one_run R: prints "first_ms stall_ms back_ms"
    local r=$1 P="bl.$$.$1." J t_kill sub victim
    local pids=()
    export AXCONF_TOPIC_PREFIX=$P
    J="bl-$$-$r"
    "$B/axctl/axctl" --config "$CONF" topics create --partitions 6 >/dev/null 2>&1 || { echo "topics failed" >&2; return 1; }
    q "INSERT INTO job (name, handler_kind, command, timeout_ms, retry_max) VALUES ('$J', 'plugin', ARRAY['$PLUG'], 60000, 0)" >/dev/null
    for s in trigger executor callback; do
        "$B/services/$s/ax-$s" --config "$CONF" --set log.level=warn --set backoff.max.ms=1000 >"$OUT/$s.$r.log" 2>&1 &
        pids+=($!)
    done
    sleep 3
    ( while :; do "$B/axctl/axctl" --config "$CONF" submit --job "$J" --count $((RATE / 4)) --trace-id "$P" >/dev/null 2>&1; sleep 0.25; done ) &
    sub=$!
    sleep "$WARM"
    victim=$(kk -L -t "${P}results" 2>/dev/null | sed -n 's/.*partition 0, leader \([0-9]*\),.*/\1/p')
    t_kill=$(date +%s.%N)
    kill -KILL "$(node_pid "$victim")"
    sleep "$AFTER"
    (export AX_STATE=$STATE; source "$SRC/infra/lib.sh"; AX_KAFKA_BROKERS=3 ax_kafka_start) >>"$OUT/kafka.log" 2>&1
    sleep "$TAIL"
    kill "$sub"; wait "$sub" 2>/dev/null
    sleep 5
    for p in "${pids[@]}"; do kill -TERM "$p"; done
    for p in "${pids[@]}"; do wait "$p"; done
    q "WITH k AS (SELECT to_timestamp($t_kill) AS t),
            p AS (SELECT result_published_at AS at FROM job_instance WHERE deployment = '$P' AND result_published_at IS NOT NULL),
            g AS (SELECT at - lag(at) OVER (ORDER BY at) AS gap, at FROM p),
            base AS (SELECT count(*)::float / $WARM AS per_s FROM p, k WHERE at >= k.t - interval '$WARM s' AND at < k.t),
            sec AS (SELECT date_trunc('second', at) AS s, count(*) AS n FROM p, k WHERE at >= k.t GROUP BY 1)
       SELECT round(extract(epoch FROM (SELECT min(at) FROM p, k WHERE at > k.t) - (SELECT t FROM k)) * 1000),
              round(extract(epoch FROM (SELECT max(gap) FROM g, k WHERE at > k.t - interval '1 s')) * 1000),
              round(extract(epoch FROM (SELECT min(s) FROM sec, base WHERE sec.s > (SELECT t FROM k) AND n >= 0.8 * base.per_s) - (SELECT t FROM k)) * 1000)" \
      | tr '|' ' '
    q "DELETE FROM job_instance WHERE deployment = '$P'" >/dev/null
    q "DELETE FROM job WHERE name = '$J'" >/dev/null
    q "DELETE FROM ax_leader WHERE role LIKE '$P%'" >/dev/null
}
res=()
for ((r = 1; r <= ROUNDS; r++)); do
    line=$(one_run "$r")
    echo "run $r: first_ms stall_ms back_ms = $line" >&2
    res+=("$line")
done
med() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for k in 1 2 3; do
    name=$(echo "first_ms stall_ms back_ms" | cut -d' ' -f$k)
    vals=$(printf '%s\n' "${res[@]}" | cut -d' ' -f$k)
    echo "$name: $(echo $vals) median $(echo "$vals" | med)"
done
echo "logs: $OUT" >&2
