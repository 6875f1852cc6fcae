#!/usr/bin/env bash
# A dispatch message delivered twice runs the command once: the second
# claim (CAS SCHEDULED->LOCKED) loses and is counted.
source "$(dirname "$0")/lib.sh"
create_topics 1
start_all
marks="$WORK/marks"
out=$(axctl submit --wait --wait-timeout 60 -- sh -c "echo ran >> $marks") || fail "submit failed: $out"
[ "$(wc -l <"$marks")" = 1 ] || fail "command ran $(wc -l <"$marks") times"
before=$(sql "SELECT coalesce(sum(value), 0) FROM ax_counter WHERE name = 'executor.claims_lost'")

# Replay the exact dispatch message (key and bytes) twice more.
kc -C -t "$(topic dispatch)" -o beginning -c 1 -e -q -f '%k' >"$WORK/key"
kc -C -t "$(topic dispatch)" -o beginning -c 1 -e -q -f '%s' >"$WORK/msg"
[ -s "$WORK/msg" ] || fail "no dispatch message found"
for i in 1 2; do
    kc -P -t "$(topic dispatch)" -k "$(cat "$WORK/key")" "$WORK/msg"
done
wait_for 30 "two lost claims counted" bash -c \
    "[ \$(psql -X -tAc \"SELECT coalesce(sum(value), 0) FROM ax_counter WHERE name = 'executor.claims_lost'\") -ge $((before + 2)) ]"
sleep 1
[ "$(wc -l <"$marks")" = 1 ] || fail "the duplicate dispatch ran the command again"
trace=$(echo "$out" | sed -n 's/.*"trace_id":"\([0-9a-f]*\)".*/\1/p')
[ "$(field "$trace" attempt)" = 1 ] || fail "attempt changed"
grep -q "claim lost" "$WORK/ax-executor.log" || fail "executor did not log the lost claim"
log "ok"
