#!/bin/bash
# Clock safety: the trigger's wall clock (libfaketime, changed while it runs)
# jumps 2 hours forward and then back. The trigger keeps PostgreSQL's clock
# carried by CLOCK_MONOTONIC, notices the jumps, and a fixed-rate job goes on
# firing every nominal time exactly once: no burst of two hours of misfires,
# no repeated times after the jump back.
. "$(dirname "$0")/lib.sh"
FT=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
[ -f "$FT" ] || fail "libfaketime missing (infra/test installs it)"
create_topics 2
echo "+0" > "$WORK/faketime"
LD_PRELOAD=$FT FAKETIME_TIMESTAMP_FILE="$WORK/faketime" FAKETIME_NO_CACHE=1 \
FAKETIME_DONT_FAKE_MONOTONIC=1 ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0" \
    start_svc trigger
start_svc executor
start_svc callback
# The job starts once the trigger leads: fires decided late because the
# trigger was still starting (a loaded machine: seconds) are not the clock's.
wait_for 30 "the trigger to lead" grep -q "leader (epoch" "$WORK/ax-trigger.log"
tick_job 250
wait_for 20 "fires" more_than 8

log "trigger's wall clock +2 h"
echo "+2h" > "$WORK/faketime"
wait_for 15 "jump noticed" grep -q "local wall clock jumped by +" "$WORK/ax-trigger.log"
n=$(fired); wait_for 20 "fires after the forward jump" more_than $((n + 8))
log "trigger's wall clock back to real time"
echo "+0" > "$WORK/faketime"
wait_for 15 "backward jump noticed" grep -q "local wall clock jumped by -" "$WORK/ax-trigger.log"
n=$(fired); wait_for 20 "fires after the backward jump" more_than $((n + 8))
sql "UPDATE job SET enabled = false WHERE id = $JID"
sleep 1

gaps=$(sql "SELECT count(*) FROM (SELECT nominal_time - lag(nominal_time) OVER (ORDER BY nominal_time) AS d
            FROM job_fire WHERE job_id = $JID) x WHERE d IS NOT NULL AND d <> interval '250 ms'")
[ "$gaps" = 0 ] || fail "$gaps gap(s) in the fixed-rate sequence"
future=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $JID AND nominal_time > now()")
[ "$future" = 0 ] || fail "$future fire(s) at nominal times in the future (the jumped clock was used)"
skipped=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $JID AND decision <> 'fired'")
[ "$skipped" = 0 ] || fail "$skipped time(s) skipped"
late=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $JID AND decided_at - nominal_time > interval '2 s'")
[ "$late" = 0 ] || fail "$late fire(s) decided more than 2 s late"
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID")" = "$(fired)" ] || fail "instances != fires"
log ok
