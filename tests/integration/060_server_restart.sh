#!/usr/bin/env bash
# PostgreSQL and Kafka restarting under load lose nothing: the services log
# the outage, retry with capped backoff, and every instance submitted before
# and during the outages ends with exactly one outcome and one result.
source "$(dirname "$0")/lib.sh"
: "${AX_STATE:?needs AX_STATE (run through infra/test)}"
: "${AX_PG_PORT:?needs AX_PG_PORT}" "${AX_KAFKA_PORT:?needs AX_KAFKA_PORT}"
source "$AX_SRC/infra/lib.sh"
create_topics 2
start_all --set backoff.max.ms=1000

submit_some() { # submit_some N TAG
    local i
    for i in $(seq 1 "$1"); do axctl submit --trace-id "$2-$i" -- sh -c 'sleep 0.2; echo ok' >/dev/null; done
}
all_done() { # all_done TAG N
    [ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$1-%' AND state = 'FINISHED'
              AND result_published_at IS NOT NULL")" = "$2" ]
}
tag="r$$"

# PostgreSQL goes away while work is in flight, and comes back.
submit_some 10 "$tag-pg"
ax_pg_stop >/dev/null
submit_some 10 "$tag-pgdown"          # accepted by Kafka while PostgreSQL is down
sleep 3
ax_pg_start >/dev/null
wait_for 120 "all instances finished after the PostgreSQL restart" all_done "$tag-pg" 10
wait_for 120 "submissions made during the outage finished" all_done "$tag-pgdown" 10
grep -q "PostgreSQL" "$WORK/ax-trigger.log" || fail "trigger did not log the outage"

# Kafka goes away and comes back.
submit_some 5 "$tag-k"
ax_kafka_stop >/dev/null
sleep 2
ax_kafka_start >/dev/null
wait_for 180 "all instances finished after the Kafka restart" all_done "$tag-k" 5

# Exactly one outcome and one attempt row per instance; one result event each.
[ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND outcome = 'SUCCESS'")" = 25 ] \
    || fail "not every instance succeeded: $(sql "SELECT outcome, count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' GROUP BY 1")"
[ "$(sql "SELECT count(*) FROM job_attempt a JOIN job_instance i ON i.id = a.instance_id WHERE i.trace_id LIKE '$tag-%'")" = 25 ] \
    || fail "attempt rows are not one per instance"
for s in trigger executor callback; do kill -0 "${SVC_PID[$s]}" || fail "ax-$s died during the outages"; done
log "ok"
