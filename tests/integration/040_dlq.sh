#!/usr/bin/env bash
# Malformed messages go to the dead-letter topic with the reason in the
# headers (and no job or trace id: they did not decode), a dispatch no pool
# takes with its instance, job and trace id, and the services keep working.
source "$(dirname "$0")/lib.sh"
create_topics 1
start_all --set message.max.bytes=4096

printf 'this is not avro' >"$WORK/garbage"
printf '\x3d' >"$WORK/one-byte"                       # asks avro-c for ~2^64 bytes
printf '\x00\x00\x00\x00\x01\x3d' >"$WORK/framed-3d"  # valid header, hostile length
printf '\x00\x00\x00\x00\x63\x02' >"$WORK/unknown-id" # schema id 99
{ printf '\x00\x00\x00\x00\x01'; head -c 10000 /dev/zero; } >"$WORK/huge" # over message.max.bytes
for f in garbage one-byte framed-3d unknown-id huge; do
    kc -P -t "$(topic submit)" "$WORK/$f"
done
kc -P -t "$(topic dispatch)" "$WORK/framed-3d"
kc -P -t "$(topic callback)" "$WORK/garbage"

wait_for 60 "7 dead letters" bash -c "[ \$(kc -C -t $(topic dlq) -o beginning -e -q -f 'x\n' | wc -l) -ge 7 ]"
kc -C -t "$(topic dlq)" -o beginning -e -q -f '%h\n' >"$WORK/headers"
cat "$WORK/headers"
grep -q "ax.reason=" "$WORK/headers" || fail "no ax.reason header"
grep -q "ax.source.topic=$(topic submit)" "$WORK/headers" || fail "no source topic header"
[ "$(grep -c "ax.service=ax-trigger" "$WORK/headers")" -ge 5 ] || fail "trigger did not dead-letter its 5"
grep -q "exceeds message.max.bytes" "$WORK/headers" || fail "oversized message reason missing"
grep -q "ax.service=ax-executor" "$WORK/headers" || fail "executor did not dead-letter"
grep -q "ax.service=ax-callback" "$WORK/headers" || fail "callback did not dead-letter"
grep -q "schema id 99" "$WORK/headers" || fail "unknown schema id reason missing"
# none of them decoded: none names a job or trace id
grep -qE "ax\.(job|trace\.id)=" "$WORK/headers" && fail "an undecodable dead letter names a job or trace id"

# A dispatch that decodes but that no pool of the executor takes (no http
# pool): its dead letter names its instance, job and trace id.
stop_svc executor
start_svc executor --set message.max.bytes=4096 --set executor.pools=plugin:1:1
H="${JOBP}http"
axctl job create "$H" --handler http -- "http://127.0.0.1:9/never" >/dev/null
axctl submit --job "$H" --trace-id "nopool-$$" >/dev/null
nopool() { kc -C -t "$(topic dlq)" -o beginning -e -q -f '%h\n' | grep "ax.service=ax-executor" | grep -q "ax.trace.id=nopool-$$"; }
wait_for 60 "the dispatch without a pool dead-lettered" nopool
line=$(kc -C -t "$(topic dlq)" -o beginning -e -q -f '%h\n' | grep "ax.trace.id=nopool-$$")
id=$(sql "SELECT id FROM job_instance WHERE trace_id = 'nopool-$$'")
grep -q "ax.job=$H" <<<"$line" && grep -q "ax.instance.id=$id\b" <<<"$line" && grep -q "has no pool" <<<"$line" \
    || fail "the no-pool dead letter lacks its job, instance $id or reason: $line"
stop_svc executor
start_svc executor --set message.max.bytes=4096

# An idempotency key over 512 bytes (axctl refuses it; another client may
# produce it): dead-lettered with the reason, no instance. It used to be cut
# to its first 512 bytes, so a second such key sharing them was taken for a
# duplicate of the first and dropped.
K="${JOBP}idem"
axctl job create "$K" -- true >/dev/null
long=$(head -c 600 /dev/zero | tr '\0' k)
"$AX_BIN/tests/it_submit_raw" "$K" "${long}1" >"$WORK/long-idem" || fail "it_submit_raw failed"
kc -P -t "$(topic submit)" "$WORK/long-idem"
longkey() { kc -C -t "$(topic dlq)" -o beginning -e -q -f '%h\n' | grep -q "idempotency_key is 601 bytes, over the limit of 512"; }
wait_for 60 "the over-long idempotency key dead-lettered" longkey
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_name = '$K'")" = 0 ] || fail "an instance was made for the over-long key"

# Still working.
axctl submit --wait --wait-timeout 60 -- true >/dev/null || fail "services stopped working after bad input"
for s in trigger executor callback; do
    kill -0 "${SVC_PID[$s]}" || fail "ax-$s died"
done
log "ok"
