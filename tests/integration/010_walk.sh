#!/usr/bin/env bash
# One job walks SCHEDULED -> LOCKED -> RUNNING -> FINISHED through the three
# services; every timestamp is present and ordered; the final outcome is on
# the results topic; a defined job and an inline command both work; a
# submission repeated with the same idempotency key (in one batch and
# later) makes one instance, findable by trace id; the trace ids ax makes
# (axctl's, the ingest's for a submission without one) start with the time.
source "$(dirname "$0")/lib.sh"
create_topics 3
start_all

t0=$(date +%s%3N)
out=$(axctl submit --wait --wait-timeout 60 --payload "from-stdin" -- sh -c 'cat; echo " hello $AX_ATTEMPT"') \
    || fail "inline submit did not succeed: $out"
t1=$(date +%s%3N)
log "result: $out"
trace=$(echo "$out" | sed -n 's/.*"trace_id":"\([0-9a-f]*\)".*/\1/p')
[ -n "$trace" ] || fail "no trace id in $out"
trace_time_first "$trace" "$t0" "$t1" # axctl made it
[ "$(field "$trace" outcome)" = SUCCESS ] || fail "outcome is not SUCCESS"
[ "$(field "$trace" exit_code)" = 0 ] || fail "exit code is not 0"
field "$trace" output | grep -q "from-stdin hello 1" || fail "payload/env not seen by the command: $(field "$trace" output)"
order=$(field "$trace" "scheduled_at <= locked_at AND locked_at <= running_at AND running_at <= finished_at
          AND dispatched_at IS NOT NULL AND result_published_at IS NOT NULL")
[ "$order" = t ] || fail "timestamps missing or out of order: $(axctl instance list --trace "$trace")"
[ "$(sql "SELECT count(*) FROM job_attempt a JOIN job_instance i ON i.id = a.instance_id WHERE i.trace_id = '$trace'")" = 1 ] \
    || fail "expected one attempt row"

# A defined job.
job="walk-$$-$RANDOM"
axctl job create "$job" --timeout 10000 -- echo defined job ran >/dev/null
out=$(axctl submit --job "$job" --wait --wait-timeout 60) || fail "job submit failed: $out"
echo "$out" | grep -q '"output":"defined job ran' || fail "unexpected output: $out"
trace2=$(echo "$out" | sed -n 's/.*"trace_id":"\([0-9a-f]*\)".*/\1/p')
[ "$(field "$trace2" job_name)" = "$job" ] || fail "job name not recorded"

# A submission produced without a trace id gets one from the ingest.
raw="walk-raw-$$-$RANDOM"
"$AX_BIN/tests/it_submit_raw" "$job" "$raw" >"$WORK/raw-submit" || fail "it_submit_raw failed"
kc -P -t "$(topic submit)" "$WORK/raw-submit"
raw_done() { [ "$(sql "SELECT state FROM instance WHERE idempotency_key = '$raw'")" = FINISHED ]; }
wait_for 60 "the submission without a trace id to finish" raw_done
traces_time_first "idempotency_key = '$raw'"

# A delayed submission waits for its time.
t0=$(date +%s%3N)
out=$(axctl submit --delay 1500 --wait --wait-timeout 60 -- true) || fail "delayed submit failed"
t1=$(date +%s%3N)
[ $((t1 - t0)) -ge 1500 ] || fail "delayed instance ran after $((t1 - t0)) ms (< 1500)"

# Every final outcome is on the results topic, keyed by instance id, once.
id=$(field "$trace" id)
wait_for 20 "result event for instance $id" \
    bash -c "kc -C -t $(topic results) -o beginning -e -q -f '%k\n' | grep -qx $id"
n=$(kc -C -t "$(topic results)" -o beginning -e -q -f '%k\n' | grep -cx "$id")
[ "$n" = 1 ] || fail "instance $id has $n result events"
kc -C -t "$(topic results)" -o beginning -e -q -f '%s\n' | grep -aq "$trace" \
    || fail "the result event does not carry the trace id"
# The same idempotency key three times (two at once, one later): one instance.
key="walk-key-$$-$RANDOM"
axctl submit --idempotency-key "$key" --trace-id "$key-a" -- true >/dev/null &
dup=$!
axctl submit --idempotency-key "$key" --trace-id "$key-b" -- true >/dev/null
wait "$dup"
out=$(axctl submit --idempotency-key "$key" --trace-id "$key-c" --wait --wait-timeout 5 -- true 2>/dev/null) || true
[ -z "$out" ] || fail "a duplicate submission ran: $out"
[ "$(sql "SELECT count(*) FROM job_instance WHERE idempotency_key = '$key'")" = 1 ] \
    || fail "a repeated key made $(sql "SELECT count(*) FROM job_instance WHERE idempotency_key = '$key'") instances"
first=$(sql "SELECT trace_id FROM job_instance WHERE idempotency_key = '$key'")
axctl instance list --trace "$first" | grep -q "\"idempotency_key\":\"$key\"" \
    || fail "instance list --trace does not find $first"
[ "$(sql "SELECT count(*) FROM submission WHERE submit_key = 'idem:$key'")" = 1 ] \
    || fail "the key is not recorded once"
log "ok"
