#!/usr/bin/env bash
# The ingest statement (dispatch.ingest) on hand-made batches, through the
# store's own call (tests/integration/helpers/it_ingest.c, as a standby:
# nothing dispatched), no services: every submission makes exactly one
# instance, and the rows returned are exactly the instances made (the
# trigger matches them to its batch by submit key). Covered: several
# topics and partitions in one batch (a partition number shared by two
# topics), positions out of order within a batch, a position twice in a
# batch, an unknown job (no instance; its position still moves the
# watermark), inline commands, an idempotency key twice in a batch and
# again in a later batch, redelivered positions below the watermark mixed
# with new ones, a position a previous release wrote to submission, a
# recreated log (end offset below a watermark written before the batch was
# taken), a late batch of a consumer that lost its partition (its stale end
# offset below a watermark the new owner wrote after the batch was taken:
# duplicates, the watermark kept), and keys that are not positions (an
# offset of 19 digits: deduplicated through submission).
source "$(dirname "$0")/lib.sh"
D="it237.$$.$RANDOM."
T1="${D}a" T2="${D}b" T3="${D}c"
J="it237-$$"
cleanup() {
    sql "DELETE FROM instance_def WHERE id IN (SELECT id FROM instance_state WHERE deployment = '$D');
         DELETE FROM submission WHERE submit_key LIKE 'kafka:$D%' OR submit_key LIKE 'idem:$D%';
         DELETE FROM submit_offset WHERE topic LIKE '$D%';
         DELETE FROM job WHERE name = '$J'" >/dev/null 2>&1 || true
}
trap cleanup EXIT
sql "INSERT INTO job (name, handler_kind, command) VALUES ('$J', 'command', ARRAY['echo', 'x'])" >/dev/null \
    || fail "cannot create job $J"
# a Kafka position a previous release deduplicated through submission
sql "INSERT INTO submission (submit_key, instance_id) VALUES ('kafka:$T3:0:1', nextval('job_instance_id_seq'))" \
    >/dev/null || fail "cannot insert the old-format key"

out=$("$AX_BIN/tests/it_ingest" "$AX_CONFIG" "$D" <<EOF
$J kafka:$T1:0:5
$J kafka:$T1:0:3
$J kafka:$T2:0:7
$J kafka:$T1:1:2
$J kafka:$T1:0:5
nojob-$$ kafka:$T1:1:3
- kafka:$T1:1:4
$J idem:${D}k1
$J idem:${D}k1
- idem:${D}k2

$J kafka:$T1:0:3
$J kafka:$T1:0:5
$J kafka:$T1:0:6
$J kafka:$T1:1:3
$J kafka:$T2:0:7
$J idem:${D}k1
$J kafka:$T1:0:6
$J kafka:$T2:1:0

$J kafka:$T3:0:1
$J kafka:$T3:0:2

$J kafka:$T1:0:0 3
$J kafka:$T1:1:1

$J kafka:$T1:0:1234567890123456789

$J kafka:$T1:0:1234567890123456789

$J kafka:$T2:0:8 12
$J kafka:$T2:0:9 12
$J kafka:$T2:0:10 12
$J kafka:$T2:0:11 12

@taken_ms_ago 60000
$J kafka:$T2:0:8 10
$J kafka:$T2:0:9 10
EOF
) || fail "it_ingest failed: $out"
log "it_ingest: $(echo "$out" | tr '\n' ' ')"
expect=$(cat <<EOF
batch 1: 7
idem:${D}k1
idem:${D}k2
kafka:$T1:0:3
kafka:$T1:0:5
kafka:$T1:1:2
kafka:$T1:1:4
kafka:$T2:0:7
batch 2: 2
kafka:$T1:0:6
kafka:$T2:1:0
batch 3: 1
kafka:$T3:0:2
batch 4: 1
kafka:$T1:0:0
batch 5: 1
kafka:$T1:0:1234567890123456789
batch 6: 0
batch 7: 4
kafka:$T2:0:10
kafka:$T2:0:11
kafka:$T2:0:8
kafka:$T2:0:9
batch 8: 0
EOF
)
[ "$out" = "$expect" ] || fail "rows returned: $(echo "$out" | tr '\n' ' '); expected: $(echo "$expect" | tr '\n' ' ')"

# what was written agrees with what was returned
[ "$(sql "SELECT count(*) FROM instance_state WHERE deployment = '$D'")" = 16 ] \
    || fail "$(sql "SELECT count(*) FROM instance_state WHERE deployment = '$D'") instances, expected 16"
dupk=$(sql "SELECT string_agg(submit_key, ' ') FROM (SELECT d.submit_key FROM instance_def d
            JOIN instance_state s ON s.id = d.id WHERE s.deployment = '$D'
            GROUP BY 1 HAVING count(*) > 1) x")
[ -z "$dupk" ] || fail "keys with more than one instance: $dupk"
[ "$(sql "SELECT count(*) FROM instance_def d JOIN instance_state s ON s.id = d.id
          WHERE s.deployment = '$D' AND d.command = ARRAY['echo', 'x']")" = 16 ] \
    || fail "an instance without its command"
wm=$(sql "SELECT string_agg(topic || '/' || partition || '=' || next_offset, ' ' ORDER BY topic, partition)
          FROM submit_offset WHERE topic LIKE '$D%'")
[ "$wm" = "${T1}/0=1 ${T1}/1=5 ${T2}/0=12 ${T2}/1=1 ${T3}/0=3" ] || fail "watermarks: $wm"
[ "$(sql "SELECT count(*) FROM submission WHERE submit_key LIKE 'kafka:$D%'")" = 2 ] \
    || fail "submission rows: $(sql "SELECT string_agg(submit_key, ' ') FROM submission WHERE submit_key LIKE 'kafka:$D%'")"
log "ok"
