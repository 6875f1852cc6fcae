#!/usr/bin/env bash
# Size limits agree end to end (issue #11, defect 1). One maximum,
# message.max.bytes (1 MiB by default), for every producer, consumer and the
# topics axctl creates (max.message.bytes = it + 64 KiB for keys, headers and
# framing):
#   - a valid submission just under 1 MiB (999,999-byte payload), straight
#     through Kafka and through axctl, is dispatched and runs; its payload
#     arrives whole (wc -c counts it). Before, the trigger's dispatch produce
#     failed ("Message size too large", librdkafka's default 1,000,000), its
#     Kafka transaction stayed open and nothing was dispatched any more;
#   - a 1,100,000-byte submission (the topic accepts it) is dead-lettered by
#     the trigger with its reason, and so is one under the limit whose
#     dispatch record would not be; axctl refuses both with exit 2, before
#     producing anything;
#   - a normal job then succeeds within 5 s, and the leader never left a
#     transaction open nor gave up leadership;
#   - a topic that accepts less (made with a smaller limit) refuses a
#     dispatch record: the leader aborts that transaction, holds the
#     instance with the reason and goes on;
#   - a command's output over the limit (executor.output.cap is larger) is
#     cut to fit, so its result is carried.
source "$(dirname "$0")/lib.sh"
create_topics 2
start_svc trigger
start_svc executor --set executor.output.cap=4000000   # more output than a message can carry
start_svc callback

# An encoded Submit (schemas/submit.avsc, Confluent framing, schema id 1):
# an inline command with a payload of N bytes and a trace id.
cat >"$WORK/submit.py" <<'EOF'
import struct, sys
def varint(n):
    n = (n << 1) ^ (n >> 63)
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])
def string(s):
    s = s.encode()
    return varint(len(s)) + s
size, trace, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
msg = b"\x00" + struct.pack(">i", 1)
msg += b"\x00"                                                    # job: null
msg += b"\x02" + varint(len(argv)) + b"".join(string(a) for a in argv) + b"\x00"
msg += b"\x00\x00\x00"                                            # run_at, delay_ms, priority
msg += varint(size) + b"x" * size                                 # payload
msg += b"\x00"                                                    # idempotency_key: null
msg += b"\x02" + string(trace)                                    # trace_id
msg += b"\x00"                                                    # timeout_ms: null
sys.stdout.buffer.write(msg)
EOF
raw() { # raw NAME PAYLOAD_BYTES: produce an encoded Submit straight to Kafka
    python3 "$WORK/submit.py" "$2" "$1" wc -c >"$WORK/$1.bin"
    log "raw $1: $(stat -c %s "$WORK/$1.bin") bytes"
    kc -X message.max.bytes=4000000 -P -t "$(topic submit)" -k "$1" \
        "$WORK/$1.bin" || fail "Kafka refused the $1 submission ($(stat -c %s "$WORK/$1.bin") bytes)"
}
raw "size-ok-$$" 999999            # just under 1 MiB: valid
raw "size-big-$$" 1100000          # over message.max.bytes
raw "size-edge-$$" 1048500         # fits, but its dispatch record would not

# axctl: the same sizes
head -c 999999 /dev/zero | tr '\0' x >"$WORK/p-ok"
head -c 1100000 /dev/zero | tr '\0' x >"$WORK/p-big"
head -c 1048500 /dev/zero | tr '\0' x >"$WORK/p-edge"
before=$(topic_count "$(topic submit)")
for f in big edge; do
    set +e
    axctl submit --trace-id "cli-$f-$$" --payload-file "$WORK/p-$f" -- wc -c >"$WORK/out" 2>"$WORK/err"
    rc=$?
    set -e
    cat "$WORK/err"
    [ "$rc" -eq 2 ] || fail "axctl submit of the $f payload: exit $rc, not 2"
    grep -q "message.max.bytes" "$WORK/err" || fail "axctl's refusal does not name message.max.bytes"
    [ "$(wc -l <"$WORK/err")" -eq 1 ] || fail "axctl's refusal is not one line"
done
[ "$(topic_count "$(topic submit)")" -eq "$before" ] || fail "axctl produced a refused submission"
axctl submit --trace-id "cli-ok-$$" --payload-file "$WORK/p-ok" -- wc -c >/dev/null \
    || fail "axctl refused a 999,999-byte payload"

# The valid ones run, their payload whole.
for tr in "size-ok-$$" "cli-ok-$$"; do
    wait_for 60 "$tr finished" finished "$tr"
    [ "$(field "$tr" outcome)" = SUCCESS ] || fail "$tr: $(field "$tr" "outcome || ' ' || coalesce(error, '')")"
    [ "$(field "$tr" "trim(output)")" = 999999 ] || fail "$tr: payload not whole: $(field "$tr" output)"
done
log "both 999,999-byte submissions ran"

# The oversized ones are dead letters with their reason; no instance.
wait_for 30 "two dead letters" bash -c "[ \$(kc -C -t $(topic dlq) -X fetch.message.max.bytes=4000000 -o beginning -e -q -f 'x\n' | wc -l) -ge 2 ]"
kc -C -t "$(topic dlq)" -o beginning -e -q -f '%k %h\n' >"$WORK/dlq"
cat "$WORK/dlq"
grep "^size-big-$$ " "$WORK/dlq" | grep -q "ax.reason=message of 1100[0-9]* bytes exceeds message.max.bytes 1048576" \
    || fail "the 1,100,000-byte submission is not dead-lettered with its reason"
grep "^size-edge-$$ " "$WORK/dlq" | grep -q "ax.reason=too large: its dispatch record would take up to" \
    || fail "the submission whose dispatch would be too large is not dead-lettered with its reason"
for tr in "size-big-$$" "size-edge-$$" "cli-big-$$" "cli-edge-$$"; do
    [ -z "$(field "$tr" id)" ] || fail "$tr became an instance"
done

# A topic that accepts less than ax carries (made with a smaller limit, as
# a topic made by hand may be): the broker refuses the dispatch record; the
# leader aborts that transaction (the ingest's window: its instances go
# back to the due scan, whose own transaction fails on the record again),
# holds the instance with the reason and goes on with the rest.
axctl --set message.max.bytes=1000 topics create --partitions 1 --group tiny >/dev/null 2>&1 \
    || fail "topics create --group tiny failed"
axctl job create "${JOBP}tiny" --group tiny -- wc -c >/dev/null || fail "job create --group tiny failed"
head -c 100000 /dev/zero | tr '\0' x >"$WORK/p-100k"
axctl submit --job "${JOBP}tiny" --trace-id "tiny-$$" --payload-file "$WORK/p-100k" >/dev/null \
    || fail "submit of the tiny job failed"
held_tiny() { field "tiny-$$" "(SELECT reason FROM instance_hold h WHERE h.instance_id = job_instance.id)" | grep -q "Kafka refused"; }
wait_for 60 "the refused instance held" held_tiny
axctl instance show "$(field "tiny-$$" id)" | grep -q '"held_reason":"Kafka refused its dispatch record of [0-9]* bytes (Broker: Message size too large)' \
    || fail "the refused instance does not show why: $(axctl instance show "$(field "tiny-$$" id)")"
grep -q "Kafka transaction not committed: .*Message size too large.*(aborted)" "$WORK/ax-trigger.log" \
    || fail "the refused transaction's abort is not logged"

# Then a normal job succeeds within 5 s.
axctl submit --trace-id "after-$$" --wait --wait-timeout 5 -- true >/dev/null \
    || fail "a normal job did not succeed within 5 s after the large submissions"

# An output over message.max.bytes (executor.output.cap is larger) is cut to
# fit: the result arrives, SUCCESS.
axctl submit --trace-id "out-$$" --wait --wait-timeout 60 -- seq 1 300000 >/dev/null \
    || fail "a job with 1.9 MB of output did not succeed: $(field "out-$$" "state || ' ' || coalesce(error, '')")"
olen=$(field "out-$$" "octet_length(output)")
log "1.9 MB of output kept as $olen bytes"
[ "$olen" -gt 900000 ] && [ "$olen" -le 1048576 ] || fail "output kept as $olen bytes"
grep -q "output cut to [0-9]* bytes to fit message.max.bytes 1048576" "$WORK/ax-executor.log" \
    || fail "the cut is not logged"

# (librdkafka logs the refused produce "failed in state InTransaction" when
# it lands in the ingest's open window: that transaction is then aborted)
! grep -q "aborting what is open" "$WORK/ax-trigger.log" || fail "a Kafka transaction was left open"
! grep -q "giving up leadership" "$WORK/ax-trigger.log" || fail "the leader gave up leadership"
for s in trigger executor callback; do
    kill -0 "${SVC_PID[$s]}" || fail "ax-$s died"
done
log "ok"
