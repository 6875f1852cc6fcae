#!/usr/bin/env bash
# Services restarted mid-run lose nothing: results wait in Kafka for a
# stopped callback, submissions wait for a stopped trigger, and the
# instances of a killed executor end TIMEOUT (worker lost) once its lease
# expires.
source "$(dirname "$0")/lib.sh"
create_topics 2
fast=(--set executor.lease.min.ms=1000 --set trigger.sweep.interval.ms=300)
start_all "${fast[@]}"

# 1. Callback down while a command runs and finishes.
trace=$(axctl submit -- sh -c 'sleep 2; echo done')
wait_for 30 "instance running" state_is "$trace" RUNNING
stop_svc callback TERM
sleep 3
[ "$(field "$trace" state)" = RUNNING ] || fail "instance finished without a callback service"
start_svc callback "${fast[@]}"
wait_for 60 "instance finished after callback restart" finished "$trace"
[ "$(field "$trace" outcome)" = SUCCESS ] || fail "outcome $(field "$trace" outcome)"

# 2. Trigger down while submissions arrive.
stop_svc trigger TERM
t1=$(axctl submit -- echo one); t2=$(axctl submit --delay 500 -- echo two)
sleep 1
[ -z "$(field "$t1" state)" ] || fail "submission persisted without a trigger"
start_svc trigger "${fast[@]}"
both_finished() { finished "$t1" && finished "$t2"; }
wait_for 60 "both submissions finished" both_finished

# 3. Executor killed (SIGKILL) mid-run: the lease expires, the sweep reports
#    the attempt lost, and the instance ends TIMEOUT with that reason.
trace=$(axctl submit --timeout 3000 -- sleep 47)
wait_for 30 "instance running" state_is "$trace" RUNNING
stop_svc executor KILL
wait_for 60 "lost instance finished" finished "$trace"
[ "$(field "$trace" outcome)" = TIMEOUT ] || fail "outcome $(field "$trace" outcome)"
[ "$(field "$trace" error_class)" = worker_lost ] || fail "error class $(field "$trace" error_class)"

# 4. A new executor picks up work again; every instance has exactly one
#    terminal outcome and one published result.
start_svc executor "${fast[@]}"
axctl submit --wait --wait-timeout 60 -- true >/dev/null || fail "no progress after executor restart"
[ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id IN ('$t1', '$t2') AND outcome = 'SUCCESS'")" = 2 ] \
    || fail "restarted trigger lost a submission"
pkill -x -f 'sleep 47' || true  # the orphan of the killed executor
log "ok"
