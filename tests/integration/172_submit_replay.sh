#!/usr/bin/env bash
# Submissions without an idempotency key are deduplicated by their Kafka
# position (018_hot_writes: one consumed-offset watermark per submit-topic
# partition, moved by each ingest): a trigger killed before it committed
# its consumer offsets is restarted, reads every submission again, makes no
# second instance of any and counts each as a duplicate; submissions after
# them are new. Idempotency keys keep their row in submission.
source "$(dirname "$0")/lib.sh"
create_topics 2
# the offsets are not committed before the kill (auto commit every 60 s)
hold=(--set consume.commit.interval.ms=60000)
start_all "${hold[@]}"
P=$AXCONF_TOPIC_PREFIX
n=12
for i in $(seq 1 $n); do axctl submit -- echo "r$i" >/dev/null || fail "submit $i failed"; done
done_n() { sql "SELECT count(*) FROM job_instance WHERE deployment = '$P' AND state = 'FINISHED'
                 AND result_published_at IS NOT NULL"; }
all_done() { [ "$(done_n)" = "$1" ]; }
wait_for 60 "$n instances finished" all_done $n
[ "$(sql "SELECT count(*) FROM submission s JOIN job_instance i ON i.id = s.instance_id
          WHERE i.deployment = '$P'")" = 0 ] || fail "a Kafka position was written to submission"
[ "$(sql "SELECT sum(next_offset) FROM submit_offset WHERE topic = '$(topic submit)'")" = $n ] \
    || fail "the watermarks do not cover the $n submissions: $(sql "SELECT * FROM submit_offset WHERE topic = '$(topic submit)'")"

dups() { sql "SELECT coalesce(sum(value), 0) FROM ax_counter WHERE name = 'trigger.duplicate_submissions'"; }
before=$(dups)
stop_svc trigger KILL
start_svc trigger "${hold[@]}"
replayed() { [ "$(dups)" -ge $((before + n)) ]; }
wait_for 60 "the $n redelivered submissions counted as duplicates" replayed
[ "$(sql "SELECT count(*) FROM job_instance WHERE deployment = '$P'")" = $n ] \
    || fail "a redelivered submission made a second instance: $(sql "SELECT count(*) FROM job_instance WHERE deployment = '$P'") instances"

# After the replay: a new position is new, an idempotency key dedups as before.
t=$(axctl submit -- echo after) || fail "submit after the replay failed"
wait_for 60 "the submission after the replay finished" finished "$t"
k1=$(axctl submit --idempotency-key "rk-$$" -- echo keyed) || fail "keyed submit failed"
wait_for 60 "the keyed submission finished" finished "$k1"
[ "$(sql "SELECT count(*) FROM submission WHERE submit_key = 'idem:rk-$$'")" = 1 ] \
    || fail "the idempotency key has no submission row"
before=$(dups)
axctl submit --idempotency-key "rk-$$" -- echo keyed >/dev/null || fail "second keyed submit failed"
keyed_dup() { [ "$(dups)" -ge $((before + 1)) ]; }
wait_for 60 "the keyed duplicate counted" keyed_dup
[ "$(sql "SELECT count(*) FROM job_instance WHERE deployment = '$P'")" = $((n + 2)) ] \
    || fail "expected $((n + 2)) instances, found $(sql "SELECT count(*) FROM job_instance WHERE deployment = '$P'")"

# A recreated submit topic: its partitions' watermarks from the old life lie
# far above the new log's end (set here; deleting the topic would need an
# admin client): the next submissions must run, not count as replays.
sql "UPDATE submit_offset SET next_offset = next_offset + 1000000 WHERE topic = '$(topic submit)'" >/dev/null
ids=()
for i in 1 2 3; do ids+=("$(axctl submit -- echo "anew$i")") || fail "submit after the reset failed"; done
for id in "${ids[@]}"; do wait_for 60 "submission $id on the recreated topic finished" finished "$id"; done
stale=$(sql "SELECT count(*) FROM submit_offset o WHERE o.topic = '$(topic submit)' AND o.next_offset >= 1000000
             AND o.partition IN (SELECT split_part(submit_key, ':', 3)::int FROM job_instance
                                 WHERE deployment = '$P' AND command[2] LIKE 'anew%')")
[ "$stale" = 0 ] || fail "$stale watermark(s) above their partition's end not started over: $(sql "SELECT * FROM submit_offset WHERE topic = '$(topic submit)'")"
log "ok"
