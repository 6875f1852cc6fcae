#!/usr/bin/env bash
# ax-callback reads both Attempt schema ids on ax.callback (schemas/README.md):
# id 3, written by ax before the kind field (its kind inferred from the
# signals of that version), and id 5 with the kind, which decides alone (an
# instance cut by the backlog cap is finished from SCHEDULED whatever the
# record's worker says). A kind outside the enum and an unknown schema id are
# dead-lettered with the reason. No executor runs: the records are written
# here, byte by byte.
source "$(dirname "$0")/lib.sh"
create_topics 1
start_svc trigger
start_svc callback

# Avro binary: zig-zag varints, strings as length + bytes (printf escapes).
varint() {
    local n=$(( ($1 << 1) ^ ($1 >> 63) )) out=""
    while (( n > 127 )); do
        out+=$(printf '\\x%02x' $(( (n & 0x7f) | 0x80 )))
        n=$(( n >> 7 ))
    done
    printf '%s\\x%02x' "$out" "$n"
}
str() { varint ${#1}; printf '%s' "$1"; }
# attempt FILE SCHEMA_ID INSTANCE WORKER OUTCOME(0 SUCCESS, 1 FAILED) ERROR_CLASS|"" [KIND]
attempt() {
    local now f
    now=$(date +%s%3N)
    f="\\x00\\x00\\x00\\x00$(printf '\\x%02x' "$2")$(varint "$3")$(varint 1)$(str "$4")$(varint "$5")"
    f+='\x00'                                             # exit_code: null
    if [ -n "$6" ]; then f+="\\x02$(str "$6")"; else f+='\x00'; fi
    f+='\x00\x00'                                         # error: null; output: ""
    f+="$(varint "$now")$(varint "$now")"'\x00\x00'       # started, finished; trace ""; retryable
    if [ -n "${7:-}" ]; then f+=$(varint "$7"); fi
    printf "$f" >"$1"
}

ta=$(axctl submit -- true); tb=$(axctl submit -- true); tc=$(axctl submit -- true)
for t in "$ta" "$tb" "$tc"; do wait_for 30 "instance $t scheduled" state_is "$t" SCHEDULED; done
ia=$(field "$ta" id); ib=$(field "$tb" id); ic=$(field "$tc" id)
# a: as if an executor of the earlier version ran it
sql "UPDATE job_instance SET state = 'RUNNING', locked_at = now(), running_at = now() WHERE id = $ia"

attempt "$WORK/a3" 3 "$ia" "old-exec:1" 0 ""                     # id 3: a run
attempt "$WORK/b3" 3 "$ib" "ax-trigger" 1 "backlog_full"         # id 3: the backlog cap's signal
attempt "$WORK/c5" 5 "$ic" "lag-cap" 1 "backlog_full" 1          # id 5: kind BACKLOG_FULL
attempt "$WORK/d5" 5 "$ic" "w" 0 "" 3                            # kind index 3: not an AttemptKind
attempt "$WORK/e6" 6 "$ic" "w" 0 "" 0                            # schema id 6: not an Attempt
for f in a3 b3 c5 d5 e6; do kc -P -t "$(topic callback)" "$WORK/$f"; done

wait_for 30 "the id 3 run finished" finished "$ta"
[ "$(field "$ta" "outcome")" = SUCCESS ] || fail "id 3 run: outcome $(field "$ta" outcome)"
w=$(sql "SELECT worker FROM job_attempt WHERE instance_id = $ia")
[ "$w" = "old-exec:1" ] || fail "id 3 run: job_attempt worker '$w'"
wait_for 30 "the id 3 backlog cut finished" finished "$tb"
[ "$(field "$tb" "outcome || ' ' || error_class")" = "FAILED backlog_full" ] ||
    fail "id 3 backlog cut: $(field "$tb" "outcome || ' ' || error_class")"
wait_for 30 "the id 5 BACKLOG_FULL finished from SCHEDULED" finished "$tc"
[ "$(field "$tc" "outcome || ' ' || error_class")" = "FAILED backlog_full" ] ||
    fail "id 5 backlog cut: $(field "$tc" "outcome || ' ' || error_class")"

wait_for 30 "2 dead letters" bash -c "[ \$(kc -C -t $(topic dlq) -o beginning -e -q -f 'x\n' | wc -l) -ge 2 ]"
kc -C -t "$(topic dlq)" -o beginning -e -q -f '%h\n' >"$WORK/headers"
cat "$WORK/headers"
grep -q "out of range 0..2 (AttemptKind)" "$WORK/headers" || fail "bad kind: no reason"
grep -q "unknown schema id 6 .*expected 5" "$WORK/headers" || fail "schema id 6: no reason"
kill -0 "${SVC_PID[callback]}" || fail "ax-callback died"
log "ok"
