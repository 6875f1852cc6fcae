#!/usr/bin/env bash
# Backpressure driven by real Kafka lag, and the backlog cap.
#
# Trigger and callback run, no executor: dispatches pile up unconsumed, so
# the executor group's lag of lane P2 grows. With trigger.lag.high=30 and
# low=10: 40 submissions take the lane over its high mark (lane_status says
# deferring, axctl status shows it); 25 more are then deferred — kept
# SCHEDULED with deferred_at set and not produced (the lane's lag and the
# dispatch topic stay where they were for 3 s). An executor starts: the lag
# drains below the low mark, the lane releases, and all 65 instances end
# SUCCESS with one attempt each, each produced exactly once.
#
# Backlog cap: a job with --backlog-max 5 gets 12 submissions while nothing
# runs it: the 7 newest end FAILED with error class backlog_full (finished
# through ax-callback, with a published result), the 5 oldest stay waiting
# and later succeed.
source "$(dirname "$0")/lib.sh"
create_topics 2

J="${JOBP}bulk"
C="${JOBP}capped"
axctl job create "$J" -- true >/dev/null || fail "job create failed"
axctl job create "$C" --backlog-max 5 -- true >/dev/null || fail "job create --backlog-max failed"
[ "$(sql "SELECT backlog_max FROM job WHERE name = '$C'")" = 5 ] || fail "backlog_max not stored"
expect_rc() { local want=$1; shift; "$@" >/dev/null 2>&1; [ $? -eq "$want" ]; }
expect_rc 2 axctl job create "${JOBP}bad" --backlog-max -1 -- true || fail "--backlog-max -1 accepted"

LAG="--set trigger.lag.high=30 --set trigger.lag.low=10 --set trigger.lag.interval.ms=200"
start_svc trigger $LAG
start_svc callback

lane_state() { sql "SELECT over FROM lane_status WHERE deployment = '$AXCONF_TOPIC_PREFIX' AND lane = 2"; }
over() { [ "$(lane_state)" = t ]; }
flowing() { [ "$(lane_state)" = f ]; }

axctl submit --job "$J" --count 40 >/dev/null || fail "submit failed"
wait_for 30 "lane P2 over its high mark" over
axctl status >"$WORK/status" || fail "axctl status failed"
grep -qE '^P2 +[0-9]+ +deferring' "$WORK/status" || fail "status does not show P2 deferring: $(cat "$WORK/status")"

axctl submit --job "$J" --count 25 >/dev/null || fail "submit failed"
deferred() { sql "SELECT count(*) FROM job_instance WHERE job_name = '$J' AND state = 'SCHEDULED'
                  AND dispatched_at IS NULL AND deferred_at IS NOT NULL"; }
all_deferred() { [ "$(deferred)" = 25 ]; }
wait_for 20 "25 instances deferred" all_deferred
before=$(topic_count "$(topic dispatch)")
sleep 3
[ "$(deferred)" = 25 ] || fail "deferred instances were released while the lane is over: $(deferred) left"
after=$(topic_count "$(topic dispatch)")
[ "$before" = "$after" ] || fail "the dispatch topic grew from $before to $after while deferring"
[ "$after" -ge 40 ] || fail "only $after dispatches for the first 40"
grep -qE '^P2 +[0-9]+ +deferring +[^ ]+ +25 ' <(axctl status) || fail "status does not count 25 deferred: $(axctl status)"

# The backlog cap, while nothing runs: 12 waiting for a cap of 5.
axctl submit --job "$C" --count 12 >/dev/null || fail "submit failed"
capped() { [ "$(sql "SELECT count(*) FROM job_instance WHERE job_name = '$C' AND state = 'FINISHED'
                     AND outcome = 'FAILED' AND error_class = 'backlog_full'
                     AND result_published_at IS NOT NULL")" = 7 ]; }
wait_for 30 "7 instances failed as backlog_full" capped
newest=$(sql "SELECT count(*) FROM (SELECT id, state FROM job_instance WHERE job_name = '$C'
              ORDER BY id DESC LIMIT 7) x WHERE state = 'FINISHED'")
[ "$newest" = 7 ] || fail "the failed ones are not the 7 newest"
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_name = '$C' AND state = 'SCHEDULED'")" = 5 ] \
    || fail "the 5 oldest are not waiting"

start_svc executor
wait_for 60 "lane P2 released" flowing
done_all() { [ "$(sql "SELECT count(*) FROM job_instance WHERE job_name IN ('$J', '$C')
                      AND state = 'FINISHED' AND result_published_at IS NOT NULL")" = 77 ]; }
wait_for 60 "all 77 instances finished" done_all
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_name = '$J' AND outcome = 'SUCCESS'
          AND attempt = 1")" = 65 ] || fail "not all 65 succeeded on their first attempt"
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_name = '$C' AND outcome = 'SUCCESS'")" = 5 ] \
    || fail "the 5 capped survivors did not succeed"
[ "$(sql "SELECT count(*) FROM job_attempt a JOIN job_instance i ON i.id = a.instance_id
          WHERE i.job_name = '$J'")" = 65 ] || fail "an instance ran more than once"
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_name = '$J' AND deferred_at IS NOT NULL
          AND dispatched_at >= deferred_at")" = 25 ] || fail "deferred instances not dispatched after deferral"
total=$(topic_count "$(topic dispatch)")
[ "$total" = 70 ] || fail "dispatch topic holds $total messages, want 70 (65 + 5 survivors)"
log "deferred 25 while over, released on drain; backlog cap failed the 7 newest"
