#!/usr/bin/env bash
# Operator errors fail at once and clearly (issue #11, defect 7):
# (a) every invalid value exits 2 with one line naming the option, before
#     anything is written (no job row, nothing on the submit topic, no raw
#     PostgreSQL error or row dump): submit --job TYPO, --delay -5, a
#     non-UTF-8 argv (and no leak on that path, checked by LeakSanitizer),
#     job create --misfire-threshold 500 and other bounds of the job table's
#     CHECKs; librdkafka's own log lines never reach axctl's stderr.
# (b) submit --wait on a submission the trigger dead-letters returns the
#     DLQ's reason (exit 1) instead of waiting out --wait-timeout.
# (c) --payload-file - reads standard input.
# (d) dlq list: newest first, ISO-8601 times, the job and trace id of a
#     rejected submission that decoded, --limit, --since, --reason;
#     dlq replay of one record twice makes one instance (the second call
#     says so); dlq replay 99:99 exits 2 with one line.
# (e) instance list --job --state; instance cancel of a SCHEDULED instance
#     finishes it CANCELLED (result published), of one claimed and waiting
#     for a slot and of a RUNNING one stops it (CANCELLED), of a FINISHED one
#     exits 1.
# (f) job delete refuses while instances are unfinished and names them;
#     --cancel-pending cancels them, then deletes. It never waits for
#     Kafka inside a PostgreSQL transaction: with a broker that does not
#     answer, the cancel request is committed and the job's and its
#     instance's rows stay unlocked while axctl waits; it then fails (exit
#     1) and the job stays.
# (g) workers: an executor whose heartbeat stopped is shown lost, with the
#     time of its last heartbeat.
source "$(dirname "$0")/lib.sh"

on_exit() {
    local rc=$?
    for n in "${!SVC_PID[@]}"; do stop_svc "$n" KILL; done
    sql "DELETE FROM worker WHERE id LIKE '${JOBP}%'" >/dev/null 2>&1 || true
    (exit "$rc")
    cleanup
}
trap on_exit EXIT

# expect RC PATTERN COMMAND...: exit status RC, PATTERN (grep -E) in stdout+stderr.
expect() {
    local want=$1 pat=$2; shift 2
    set +e; "$@" >"$WORK/out" 2>"$WORK/err"; local rc=$?; set -e
    cat "$WORK/err" >>"$WORK/out"
    [ "$rc" -eq "$want" ] || { cat "$WORK/out"; fail "expected exit $want from '$*', got $rc"; }
    grep -qE -- "$pat" "$WORK/out" || { cat "$WORK/out"; fail "output of '$*' lacks /$pat/"; }
}
# usage_error PATTERN COMMAND...: exit 2, exactly one line on stderr, naming PATTERN,
# no PostgreSQL row dump, no raw librdkafka line.
usage_error() {
    local pat=$1; shift
    expect 2 "$pat" "$@"
    [ "$(wc -l <"$WORK/err")" = 1 ] || { cat "$WORK/err"; fail "'$*' printed more than one line"; }
    ! grep -qE "Failing row|DETAIL|^%[0-9]\||rdkafka" "$WORK/err" || { cat "$WORK/err"; fail "'$*' dumped internals"; }
}
check() { eval "$1"; }

create_topics 2
J="${JOBP}j"
CAT="${JOBP}cat"
SLOW="${JOBP}slow"
axctl job create "$J" -- true >/dev/null || fail "job create $J"
axctl job create "$CAT" -- cat >/dev/null || fail "job create $CAT"
axctl job create "$SLOW" -- sleep 30 >/dev/null || fail "job create $SLOW"
jobs_before=$(sql "SELECT count(*) FROM job WHERE name LIKE '${JOBP}%'")

# ---- (a) invalid values: exit 2, one line naming the option, nothing written ----------------
usage_error "--job: no job named '${JOBP}TYPO'" axctl submit --job "${JOBP}TYPO"
usage_error "--job: no job named" axctl submit --job "${JOBP}TYPO" --wait
usage_error "--delay must be" axctl submit --delay -5 -- true
usage_error "--timeout must be" axctl submit --timeout 0 -- true
usage_error "--priority must be" axctl submit --priority 7 -- true
usage_error "--at: .* out of range" axctl submit --at 99999999999999999 -- true
usage_error "not valid UTF-8" axctl submit -- true $'\xff\xfe'
usage_error "--trace-id is not valid UTF-8" axctl submit --trace-id $'\xc3\x28' -- true
usage_error "--idempotency-key must be" axctl submit --idempotency-key "$(head -c 600 /dev/zero | tr '\0' k)" -- true
usage_error "--wait-timeout must be" axctl submit --wait --wait-timeout 0 -- true
usage_error "cannot read" axctl submit --payload-file "$WORK/no-such-file" -- true
# The paths that leaked (axctl/main.c, "cannot encode the submission"): no leak now.
for args in "--delay -5 -- true" "-- true $(printf '\xff')"; do
    set +e; ASAN_OPTIONS=detect_leaks=1 "$AX_BIN/axctl/axctl" submit $args >/dev/null 2>"$WORK/asan"; rc=$?; set -e
    [ "$rc" = 2 ] || { cat "$WORK/asan"; fail "axctl submit $args: exit $rc (a leak report exits 23)"; }
    ! grep -q "LeakSanitizer" "$WORK/asan" || { cat "$WORK/asan"; fail "axctl submit $args leaks"; }
done
usage_error "--misfire-threshold must be >= 1000" axctl job create "${JOBP}bad" --misfire-threshold 500 -- true
usage_error "--misfire-threshold must be >= 1000" axctl job update "$J" --misfire-threshold 999
usage_error "--catchup-max must be" axctl job create "${JOBP}bad" --catchup-max 0 -- true
usage_error "--timeout must be" axctl job create "${JOBP}bad" --timeout 0 -- true
usage_error "--after must be" axctl job create "${JOBP}bad" --after 99999999999999999 -- true
usage_error "--start: .* out of range" axctl job create "${JOBP}bad" --fixed-rate 1000 --start 99999999999999999 -- true
usage_error "--fixed-rate must be" axctl job create "${JOBP}bad" --fixed-rate 0 -- true
usage_error "--tolerance must be" axctl job create "${JOBP}bad" --tolerance 3600001 -- true
usage_error "--retry-multiplier must be" axctl job create "${JOBP}bad" --retry-multiplier 0.5 -- true
usage_error "not valid UTF-8" axctl job create "${JOBP}bad" -- echo $'\xff'
usage_error "--tz is not valid UTF-8" axctl job create "${JOBP}bad" --cron '* * * * *' --tz $'\xff' -- true
usage_error "invalid flow name 'bad name'" axctl flow create 'bad name' --stage "a=$J"
usage_error "--stage is not valid UTF-8" axctl flow create "${JOBP}f" --stage a=$'\xff'
usage_error "idem: argument 2 is not valid UTF-8" axctl idem claim $'\xff' --instance 1
usage_error "--state must be" axctl instance list --state bogus
usage_error "unknown option" axctl instance list --bogus 1
usage_error "--limit must be" axctl dlq list --limit 0
usage_error "no such record" axctl dlq replay 99:99
usage_error "no such record" axctl dlq replay 0:-3
usage_error "dlq replay PARTITION:OFFSET" axctl dlq replay nonsense
[ "$(sql "SELECT count(*) FROM job WHERE name LIKE '${JOBP}%'")" = "$jobs_before" ] || fail "an invalid job option wrote a job"
[ "$(sql "SELECT misfire_threshold_ms FROM job WHERE name = '$J'")" = 60000 ] || fail "job update with an invalid value changed the job"
[ "$(topic_count "$(topic submit)")" = 0 ] || fail "an invalid submission reached $(topic submit)"
expect 1 "no record at .* \(partition 0 is empty\)" axctl dlq replay 0:99
# librdkafka's own lines: none raw on stderr, even when Kafka is unreachable.
set +e
axctl --set kafka.bootstrap.servers=127.0.0.1:1 --set kafka.message.timeout.ms=1500 \
    submit -- true >"$WORK/out" 2>"$WORK/err"; rc=$?
set -e
[ "$rc" = 1 ] || { cat "$WORK/err"; fail "submit to an unreachable Kafka: exit $rc"; }
[ "$(wc -l <"$WORK/err")" = 1 ] && grep -q "not acknowledged by Kafka" "$WORK/err" \
    || { cat "$WORK/err"; fail "submit to an unreachable Kafka: not one clear line"; }
log "invalid values: exit 2, one line each, nothing written"

# ---- (b) --wait learns a dead-lettered submission at once ------------------------------------
# The trigger is down: the job exists when axctl checks it, and is gone when
# the trigger ingests the submission, which it dead-letters (unknown job).
GONE="${JOBP}gone"
axctl job create "$GONE" -- true >/dev/null
"$AX_BIN/axctl/axctl" submit --job "$GONE" --trace-id "gone-$$" --wait --wait-timeout 120 \
    >"$WORK/wait.out" 2>"$WORK/wait.err" &
wait_pid=$!
# once axctl checked the job and produced the submission (it waits in Kafka)
wait_for 30 "the submission on $(topic submit)" check '[ "$(topic_count "$(topic submit)")" = 1 ]'
axctl job delete "$GONE" >/dev/null || fail "job delete $GONE"
start_svc trigger
wait_for 60 "the dead-lettered submission's --wait to return" bash -c "! kill -0 $wait_pid 2>/dev/null"
set +e; wait "$wait_pid"; rc=$?; set -e
t_exit=$(date +%s%3N)
[ "$rc" = 1 ] || { cat "$WORK/wait.err"; fail "--wait on a dead-lettered submission: exit $rc"; }
grep -q "submission gone-$$ was dead-lettered: unknown job '$GONE'" "$WORK/wait.err" \
    || { cat "$WORK/wait.err"; fail "--wait did not give the DLQ's reason"; }
t_dlq=$(kc -C -t "$(topic dlq)" -o beginning -e -q -f '%T\n' 2>/dev/null | tail -n 1)
log "--wait returned the DLQ reason $(( t_exit - t_dlq )) ms after the DLQ record"

start_svc executor --set executor.slots=1   # one at a time: a second slow one waits claimed
start_svc callback

# ---- (c) --payload-file - -------------------------------------------------------------------
echo "from-stdin-$$" | axctl submit --job "$CAT" --payload-file - --wait --wait-timeout 60 >"$WORK/cat.out" \
    || { cat "$WORK/cat.out"; fail "submit --payload-file - failed"; }
grep -q "from-stdin-$$" "$WORK/cat.out" || { cat "$WORK/cat.out"; fail "the payload from stdin did not reach the command"; }

# ---- (d) dlq list and replay ------------------------------------------------------------------
printf 'this is not avro' | kc -P -t "$(topic submit)" -k garbage
wait_for 30 "2 dead letters" check '[ "$(topic_count "$(topic dlq)")" -ge 2 ]'
axctl dlq list >"$WORK/dlq" 2>"$WORK/dlq.err" || { cat "$WORK/dlq.err"; fail "dlq list failed"; }
cat "$WORK/dlq"
[ "$(wc -l <"$WORK/dlq")" = 2 ] || fail "dlq list: $(wc -l <"$WORK/dlq") lines, expected 2"
[ ! -s "$WORK/dlq.err" ] || { cat "$WORK/dlq.err"; fail "dlq list printed on stderr"; }
grep -qvE '^[0-9]+:[0-9]+  [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z  ' "$WORK/dlq" \
    && fail "dlq list: a line without P:O and an ISO-8601 time"
head -n 1 "$WORK/dlq" | grep -qE "rejected  from $(topic submit) \[[0-9]\] @[0-9]+  magic byte" \
    || fail "dlq list: the newest record (the garbage) is not first"
# the rejected submission decoded: its line names its job and trace id
tail -n 1 "$WORK/dlq" | grep -qE "rejected  from $(topic submit) \[[0-9]\] @[0-9]+ \(job $GONE, trace gone-$$\)  unknown job '$GONE'" \
    || fail "dlq list: the oldest record (unknown job, with its job and trace id) is not last"
awk '{ print $2 }' "$WORK/dlq" >"$WORK/times"
sort -r "$WORK/times" | cmp -s - "$WORK/times" || fail "dlq list: times not newest first"
axctl dlq list --limit 1 >"$WORK/dlq1"
[ "$(cat "$WORK/dlq1")" = "$(head -n 1 "$WORK/dlq")" ] || { cat "$WORK/dlq1"; fail "dlq list --limit 1 is not the newest"; }
axctl dlq list --reason "unknown JOB" >"$WORK/dlqr"
[ "$(wc -l <"$WORK/dlqr")" = 1 ] && grep -q "unknown job '$GONE'" "$WORK/dlqr" || { cat "$WORK/dlqr"; fail "dlq list --reason"; }
axctl dlq list --since 2999-01-01T00:00:00Z >"$WORK/dlqs"
[ ! -s "$WORK/dlqs" ] || { cat "$WORK/dlqs"; fail "dlq list --since the future is not empty"; }
[ "$(axctl dlq list --since 2000-01-01T00:00:00Z | wc -l)" = 2 ] || fail "dlq list --since the past"
# Replay the rejected submission twice, once its job exists again: one instance.
rec=$(awk '{ print $1 }' "$WORK/dlqr")
axctl job create "$GONE" -- true >/dev/null
expect 0 "record $rec produced again to $(topic submit)" axctl dlq replay "$rec"
key="dlq-replay:$(topic dlq):$rec"
replayed() { [ "$(sql "SELECT count(*) FROM job_instance WHERE idempotency_key = '$key' AND state = 'FINISHED'")" = 1 ]; }
wait_for 30 "the replayed instance to finish" replayed
expect 0 "record $rec was already replayed: instance [0-9]+" axctl dlq replay "$rec"
sleep 2
[ "$(sql "SELECT count(*) FROM job_instance WHERE idempotency_key = '$key'")" = 1 ] || fail "replaying twice made two instances"
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_name = '$GONE'")" = 1 ] || fail "replaying twice made two instances of $GONE"

# ---- (e) instance list and cancel --------------------------------------------------------------
axctl submit --job "$J" --delay 600000 --trace-id "later-$$" >/dev/null
wait_for 20 "the delayed instance" state_is "later-$$" SCHEDULED
axctl instance list --job "$J" --state scheduled >"$WORK/il"
[ "$(wc -l <"$WORK/il")" = 1 ] && grep -q "\"trace_id\":\"later-$$\"" "$WORK/il" || { cat "$WORK/il"; fail "instance list --job --state"; }
[ -z "$(axctl instance list --job "$J" --state RUNNING)" ] || fail "instance list --state RUNNING lists a scheduled instance"
later=$(field "later-$$" id)
expect 0 "instance $later cancelled before it started" axctl instance cancel "$later"
wait_for 20 "the cancelled instance to finish and be published" finished "later-$$"
[ "$(field "later-$$" outcome)" = CANCELLED ] || fail "instance cancel of a SCHEDULED instance: outcome $(field "later-$$" outcome)"
expect 1 "instance $later already finished \(CANCELLED\)" axctl instance cancel "$later"
expect 1 "no instance 999999999999" axctl instance cancel 999999999999
axctl submit --job "$SLOW" --trace-id "slow-$$" >/dev/null
wait_for 30 "the slow instance to run" state_is "slow-$$" RUNNING
# claimed by the executor but waiting for its one slot (LOCKED): cancelled at once
axctl submit --job "$SLOW" --trace-id "slowq-$$" >/dev/null
wait_for 30 "the second slow instance to be claimed" state_is "slowq-$$" LOCKED
expect 0 "its executor was asked to stop it" axctl instance cancel "$(field "slowq-$$" id)"
wait_for 20 "the claimed instance to be cancelled" finished "slowq-$$"
[ "$(field "slowq-$$" outcome)/$(field "slowq-$$" error_class)" = CANCELLED/cancelled ] \
    || fail "instance cancel of a claimed instance: $(field "slowq-$$" outcome)/$(field "slowq-$$" error_class)"
state_is "slow-$$" RUNNING || fail "cancelling the waiting instance disturbed the running one"
expect 0 "its executor was asked to stop it" axctl instance cancel "$(field "slow-$$" id)"
wait_for 20 "the running instance to be cancelled" finished "slow-$$"
[ "$(field "slow-$$" outcome)" = CANCELLED ] || fail "instance cancel of a RUNNING instance: outcome $(field "slow-$$" outcome)"

# ---- (f) job delete with unfinished instances ---------------------------------------------------
DL="${JOBP}dellock"
axctl job create "$DL" -- true >/dev/null || fail "job create $DL"
axctl submit --job "$DL" --delay 600000 --trace-id "dl-$$" >/dev/null
wait_for 20 "the pending instance" check '[ -n "$(field "dl-$$" id)" ]'
dl=$(field "dl-$$" id)
axctl --set kafka.bootstrap.servers=127.0.0.1:1 --set kafka.message.timeout.ms=5000 \
    job delete "$DL" --cancel-pending >"$WORK/dl" 2>&1 &
DLPID=$!
wait_for 10 "the cancel request committed before Kafka answers" \
    check '[ -n "$(sql "SELECT 1 FROM job_instance WHERE id = $dl AND cancel_requested_at IS NOT NULL")" ]'
kill -0 "$DLPID" 2>/dev/null || { cat "$WORK/dl"; fail "job delete ended before its rows were checked"; }
sql "BEGIN; SET LOCAL lock_timeout = '1s';
     SELECT 1 FROM job WHERE name = '$DL' FOR UPDATE; SELECT 1 FROM job_instance WHERE id = $dl FOR UPDATE;
     COMMIT" >/dev/null || fail "job delete --cancel-pending holds row locks while it waits for Kafka"
kill -0 "$DLPID" 2>/dev/null || { cat "$WORK/dl"; fail "job delete ended before its rows were checked"; }
set +e; wait "$DLPID"; rc=$?; set -e
cat "$WORK/dl"
[ "$rc" = 1 ] && grep -q "not acknowledged by Kafka" "$WORK/dl" || fail "job delete with Kafka down: exit $rc"
[ "$(sql "SELECT count(*) FROM job WHERE name = '$DL'")" = 1 ] || fail "job delete deleted a job whose cancellations were not sent"
expect 0 "deleted job $DL" axctl job delete "$DL" --cancel-pending
wait_for 20 "the pending instance to be cancelled" state_is "dl-$$" FINISHED
[ "$(field "dl-$$" outcome)" = CANCELLED ] || fail "the pending instance of $DL: $(field "dl-$$" outcome)"

axctl submit --job "$J" --delay 600000 --trace-id "pend1-$$" >/dev/null
axctl submit --job "$J" --delay 600000 --trace-id "pend2-$$" >/dev/null
axctl submit --job "$SLOW" --trace-id "slow2-$$" >/dev/null
wait_for 20 "two pending instances" check '[ -n "$(field "pend2-$$" id)" ] && [ -n "$(field "pend1-$$" id)" ]'
wait_for 30 "the second slow instance to run" state_is "slow2-$$" RUNNING
p1=$(field "pend1-$$" id); p2=$(field "pend2-$$" id)
expect 1 "job $J has 2 unfinished instance\(s\) \($p1, $p2\): not deleted" axctl job delete "$J"
[ "$(sql "SELECT count(*) FROM job WHERE name = '$J'")" = 1 ] || fail "a refused job delete deleted the job"
expect 0 "cancelled 2 instance\(s\) not started yet" axctl job delete "$J" --cancel-pending
grep -q "deleted job $J" "$WORK/out" || fail "job delete --cancel-pending did not delete"
[ "$(sql "SELECT count(*) FROM job WHERE name = '$J'")" = 0 ] || fail "job delete --cancel-pending left the job"
wait_for 20 "the pending instances to be cancelled and published" check 'finished "pend1-$$" && finished "pend2-$$"'
[ "$(field "pend1-$$" outcome)/$(field "pend2-$$" outcome)" = CANCELLED/CANCELLED ] || fail "pending instances not CANCELLED"
expect 0 "deleted job $SLOW" axctl job delete "$SLOW" --cancel-pending
wait_for 20 "the running instance of a deleted job to be cancelled" finished "slow2-$$"
[ "$(field "slow2-$$" outcome)" = CANCELLED ] || fail "the running instance of the deleted job: $(field "slow2-$$" outcome)"

# ---- (g) workers: lost executors -----------------------------------------------------------------
sql "INSERT INTO worker (id, groups, heartbeat_at, state)
     VALUES ('${JOBP}gone', '{default}', now() - interval '20 minutes', 'running')" >/dev/null
axctl workers --all >"$WORK/w"
grep -qE "^${JOBP}gone +lost +1[12][0-9]{2}\.[0-9] .* [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z " "$WORK/w" \
    || { cat "$WORK/w"; fail "workers --all: an executor silent for 20 minutes is not lost"; }
E=$(sql "SELECT id FROM worker WHERE state = 'running' AND heartbeat_at > now() - interval '10 seconds' AND id LIKE '%:${SVC_PID[executor]}'")
[ -n "$E" ] || fail "no worker row of the executor"
axctl workers >"$WORK/w"
grep -qE "^$E +running " "$WORK/w" || { cat "$WORK/w"; fail "the live executor is not running"; }
stop_svc executor KILL
wait_for 30 "the killed executor to show as lost" bash -c "'$AX_BIN/axctl/axctl' workers | grep -qE '^$E +lost '"
log "ok"
