#!/usr/bin/env bash
# A result of another deployment's instance is published by that
# deployment, once. Jobs are global, so `axctl job delete --cancel-pending`
# (or instance cancel) run with one topic.prefix cancels another
# deployment's pending instances through its own deployment's callback
# topic: that callback finishes them (outcome.finish), but their results
# belong on the other deployment's results topic. The finish puts them in
# the per-instance outbox of their deployment (ax_result_outbox), not in
# its own results batch, and returns them to its publisher as ended, not
# as results to carry (libax/src/store/outcome.c). Checked: the instances
# end CANCELLED with no results batch, deployment B's callback publishes
# each to B's results topic exactly once, A's results topic gets none, and
# A's own instances finished in the same window are published by A as
# usual.
source "$(dirname "$0")/lib.sh"
A=$AXCONF_TOPIC_PREFIX
B="${A}b."
create_topics 2
AXCONF_TOPIC_PREFIX=$B axctl topics create --partitions 2 >/dev/null 2>&1 || fail "cannot create B's topics"

axctl job create "${JOBP}later" -- true >/dev/null
axctl job create "${JOBP}now" -- true >/dev/null

# deployment A: the whole pipeline; deployment B: a trigger (to ingest) and
# a callback (to publish), no executor
start_all --set trigger.scan.interval.ms=100
start_svc trigger@b --set "topic.prefix=$B" --set trigger.scan.interval.ms=100
start_svc callback@b --set "topic.prefix=$B"

tag="od$$"
N=5
AXCONF_TOPIC_PREFIX=$B axctl submit --job "${JOBP}later" --delay 3600000 --count $N \
    --trace-id "$tag-b" >/dev/null
ingested() { [ "$(sql "SELECT count(*) FROM instance_state s JOIN instance_def d ON d.id = s.id
                        WHERE d.trace_id LIKE '$tag-b-%' AND s.deployment = '$B'
                        AND s.state = 'SCHEDULED'")" = $N ]; }
wait_for 30 "B's trigger ingests $N delayed instances" ingested
# A's own work in the same window: its callback finishes and publishes it
axctl submit --job "${JOBP}now" --count 3 --trace-id "$tag-a" >/dev/null

# with A's prefix: the cancellations go to A's callback topic
out=$(axctl job delete "${JOBP}later" --cancel-pending 2>&1) || fail "job delete --cancel-pending: $out"

ended() { [ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-b-%'
                    AND state = 'FINISHED' AND outcome = 'CANCELLED'")" = $N ]; }
wait_for 30 "$N instances of B cancelled" ended
published() { [ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-$1-%'
                        AND result_published_at IS NOT NULL")" = "$2" ]; }
wait_for 30 "B's results published" published b $N
wait_for 30 "A's results published" published a 3

# not in a results batch (A's batch rows hold only A's instances), and the
# per-instance outbox rows are gone once published
[ "$(sql "SELECT count(*) FROM instance_state s JOIN instance_def d ON d.id = s.id
          WHERE d.trace_id LIKE '$tag-b-%' AND s.result_batch IS NOT NULL")" = 0 ] \
    || fail "an instance of B is in a results batch"
[ "$(sql "SELECT count(*) FROM ax_result_batch WHERE deployment = '$B'")" = 0 ] \
    || fail "a results batch row of B (B's callback finished nothing)"
[ "$(sql "SELECT count(*) FROM ax_result_outbox WHERE deployment IN ('$A', '$B')")" = 0 ] \
    || fail "outbox rows left: $(sql "SELECT deployment || ':' || instance_id FROM ax_result_outbox WHERE deployment IN ('$A', '$B')")"

# each of B's results once on B's results topic, none on A's
ids_b=$(sql "SELECT id FROM job_instance WHERE trace_id LIKE '$tag-b-%' ORDER BY id")
ids_a=$(sql "SELECT id FROM job_instance WHERE trace_id LIKE '$tag-a-%' ORDER BY id")
keys() { topic_read "$1" '%k\n' -X isolation.level=read_committed | sort -n; }
on_b=$(keys "${B}results")
on_a=$(keys "$(topic results)")
for id in $ids_b; do
    [ "$(grep -cx "$id" <<<"$on_b")" = 1 ] || fail "instance $id (B): $(grep -cx "$id" <<<"$on_b") records on B's results topic, expected 1"
    [ "$(grep -cx "$id" <<<"$on_a")" = 0 ] || fail "instance $id (B) is on A's results topic"
done
for id in $ids_a; do
    [ "$(grep -cx "$id" <<<"$on_a")" = 1 ] || fail "instance $id (A): $(grep -cx "$id" <<<"$on_a") records on A's results topic, expected 1"
done
# A's publisher carried nothing it could not publish (it carried B's
# results before: "carried but no longer pending")
! grep -q "no longer pending" "$WORK/ax-callback.log" || fail "A's publisher carried another deployment's results"
log "ok"
