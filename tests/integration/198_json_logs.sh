#!/usr/bin/env bash
# log.format = json: every line every service writes parses as a JSON
# object (jq, line by line) with time, level, service and message; a line
# about an instance carries its instance id, its job and its trace id as
# fields, and that trace id is the instance's in PostgreSQL. A job's
# instances (and inline ones), successes and failures, each get their
# executor line with the trace id they were submitted with. A bad value of
# log.format names the key and exits 2. Secrets (the Kafka and PostgreSQL
# passwords) appear in no line.
source "$(dirname "$0")/lib.sh"

set +e
out=$("$AX_BIN/services/trigger/ax-trigger" --set log.format=xml 2>&1); rc=$?
set -e
[ "$rc" = 2 ] || fail "log.format=xml: exit $rc, not 2"
echo "$out" | grep -q "log.format" || fail "log.format=xml: the key is not named: $out"

create_topics 2
start_all --set log.format=json
axctl job create "${JOBP}echo" -- sh -c 'echo hi' >/dev/null ||
    fail "job create failed"
axctl submit --job "${JOBP}echo" --count 5 --trace-id "jl-job-$$" >/dev/null || fail "submit failed"
axctl submit --count 3 --trace-id "jl-ok-$$" -- true >/dev/null || fail "submit failed"
axctl submit --count 2 --trace-id "jl-bad-$$" -- false >/dev/null || fail "submit failed"
done_all() {
    [ "$(sql "SELECT count(*) FROM job_instance WHERE deployment = '$AXCONF_TOPIC_PREFIX'
              AND state = 'FINISHED' AND result_published_at IS NOT NULL")" = 10 ]
}
wait_for 120 "10 instances finished" done_all
for s in trigger executor callback; do stop_svc "$s"; done

# Every line is a JSON object with the four fields.
for s in trigger executor callback; do
    f="$WORK/ax-$s.log"
    [ -s "$f" ] || fail "ax-$s wrote no log"
    jq -e -R 'fromjson | type == "object" and (.time | test("^[0-9T:.-]+Z$"))
              and (.level | IN("DEBUG", "INFO", "WARN", "ERROR")) and .service == "ax-'"$s"'"
              and (.message | type == "string")' "$f" >"$WORK/$s.checked" ||
        fail "ax-$s: a line is not a JSON log object"
    ! grep -qv '^true$' "$WORK/$s.checked" || fail "ax-$s: a line lacks time, level, service or message"
done

# Lines about an instance carry its trace id (as PostgreSQL has it).
sql "SELECT id || ' ' || trace_id FROM job_instance WHERE deployment = '$AXCONF_TOPIC_PREFIX'" \
    >"$WORK/traces"
cat "$WORK"/ax-*.log | jq -r -R 'fromjson | select(.instance) | "\(.instance) \(.trace // "-")"' |
    sort -u >"$WORK/mentioned"
[ -s "$WORK/mentioned" ] || fail "no line names an instance"
while read -r id trace; do
    grep -qx "$id $trace" "$WORK/traces" || fail "a line about instance $id carries trace '$trace'"
done <"$WORK/mentioned"
# Each instance has its executor line with its trace id, the job's with the job.
for k in 1 2 3 4 5; do
    jq -e -n -R --arg t "jl-job-$$-$k" --arg j "${JOBP}echo" '[inputs | fromjson
          | select(.trace == $t and .job == $j and (.message | test("attempt 1: SUCCESS")))]
          | length > 0' "$WORK/ax-executor.log" >/dev/null || fail "no executor line for jl-job-$$-$k"
done
for t in "jl-ok-$$-1" "jl-ok-$$-3" "jl-bad-$$-1" "jl-bad-$$-2"; do
    jq -e -n -R --arg t "$t" '[inputs | fromjson
          | select(.trace == $t and (.instance | type == "number"))] | length > 0' \
        "$WORK/ax-executor.log" >/dev/null || fail "no executor line for $t"
done

# No secret in any line.
for k in kafka.sasl.password pg.password; do
    v=$(conf_get "$k")
    [ -z "$v" ] || ! grep -qF -- "$v" "$WORK"/ax-*.log || fail "the value of $k is in a log"
done
log "ok"
