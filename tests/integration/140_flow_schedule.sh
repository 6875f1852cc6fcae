#!/bin/bash
# Flows started by a schedule, through the real services: a two-stage flow on
# a cron schedule firing every second starts exactly one run per fired
# nominal time (the ledger row names its run; no instance is dispatched for
# the fire itself), every run completes with all stages succeeded, and a
# trigger killed (SIGKILL) and one stopped (SIGTERM) mid-way start no run
# twice and lose no second. With overlap=skip no run starts while the
# flow's previous run is still running; those times are recorded
# skipped_overlap. Options that make no sense for a flow are refused.
. "$(dirname "$0")/lib.sh"
create_topics 2
TRIG=(--set trigger.lease.ms=3000 --set trigger.scan.interval.ms=100)
start_svc trigger "${TRIG[@]}"
start_svc executor
start_svc callback

# A flow's schedule job is named flow.NAME, outside lib.sh's JOBP cleanup:
# deleting the flows deletes their schedule jobs (and runs).
flow_cleanup() {
    local rc=$?
    sql "DELETE FROM flow WHERE name LIKE '${JOBP}%'" >/dev/null 2>&1 || true
    if [ "$rc" -eq 0 ]; then cleanup; else (exit "$rc") || cleanup; fi
}
trap flow_cleanup EXIT

F="${JOBP}f"
G="${JOBP}g"
axctl job create "${JOBP}a" -- sh -c 'echo a' >/dev/null
axctl job create "${JOBP}b" -- true >/dev/null
axctl job create "${JOBP}slow" -- sleep 2.5 >/dev/null

log "options that do not apply to a flow are refused, nothing is stored"
rc=0; axctl flow create "$F" --stage "A=${JOBP}a" --fixed-delay 1000 2>"$WORK/err" || rc=$?
[ "$rc" = 2 ] || fail "--fixed-delay: exit $rc, expected 2"
grep -q "fixed-delay" "$WORK/err" || fail "--fixed-delay refused without saying why: $(cat "$WORK/err")"
rc=0; axctl flow create "$F" --stage "A=${JOBP}a" --cron '* * * * * *' --overlap queue 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "--overlap queue: exit $rc, expected 2"
rc=0; axctl flow create "$F" --stage "A=${JOBP}a" --cron 'not cron' 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "bad cron: exit $rc, expected 2"
rc=0; axctl flow create "$F" --stage "A=${JOBP}a" --cron '* * * * * *' -- true 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "a command for a flow: exit $rc, expected 2"
[ "$(sql "SELECT count(*) FROM flow WHERE name LIKE '${JOBP}%'")" = 0 ] || fail "a refused flow was stored"
rc=0; axctl flow schedule "${JOBP}nope" --cron '* * * * * *' 2>/dev/null || rc=$?
[ "$rc" = 1 ] || fail "schedule of an unknown flow: exit $rc, expected 1"

log "a flow on a 1-second cron schedule"
axctl flow create "$F" --stage "A=${JOBP}a" --stage "B=${JOBP}b:A" --cron '* * * * * *' >"$WORK/out"
grep -q "^schedule: cron '\* \* \* \* \* \*' UTC (job flow.$F)" "$WORK/out" || fail "create output: $(cat "$WORK/out")"
grep -q "^next fire: 20" "$WORK/out" || fail "create does not print the next fire: $(cat "$WORK/out")"
FID=$(sql "SELECT id FROM flow WHERE name = '$F'")
JID=$(sql "SELECT id FROM job WHERE flow_id = $FID")
[ "$(sql "SELECT name || ' ' || handler_kind FROM job WHERE id = $JID")" = "flow.$F flow" ] || fail "schedule job"
axctl flow show "$F" >"$WORK/show"
grep -q "^schedule: cron '\* \* \* \* \* \*' UTC (job flow.$F; misfire fire_once, overlap allow)" "$WORK/show" \
    || fail "flow show: $(cat "$WORK/show")"
grep -q "^next fire: 20" "$WORK/show" || fail "flow show has no next fire: $(cat "$WORK/show")"
axctl flow list >"$WORK/list"
grep "^$F " "$WORK/list" | grep -q "schedule: cron '\* \* \* \* \* \*' UTC  next: 20" \
    || fail "flow list: $(cat "$WORK/list")"

fired() { sql "SELECT count(*) FROM job_fire WHERE job_id = $1 AND decision = 'fired'"; }
more_than() { [ "$(fired "$1")" -gt "$2" ]; }
wait_for 20 "3 fires" more_than "$JID" 2
n=$(fired "$JID")
log "$n fire(s); killing the trigger (SIGKILL)"
stop_svc trigger KILL
sleep 1
start_svc trigger "${TRIG[@]}"
wait_for 30 "fires after the kill" more_than "$JID" $((n + 2))
n=$(fired "$JID")
log "$n fire(s); restarting the trigger (SIGTERM)"
stop_svc trigger TERM
start_svc trigger "${TRIG[@]}"
wait_for 30 "fires after the restart" more_than "$JID" $((n + 2))
axctl flow schedule "$F" --no-schedule >"$WORK/out"
grep -q "^schedule: none" "$WORK/out" || fail "--no-schedule output: $(cat "$WORK/out")"
sleep 1.5
running() { sql "SELECT count(*) FROM flow_run WHERE flow_id = $1 AND state = 'running'"; }
all_done() { [ "$(running "$1")" = 0 ]; }
wait_for 60 "every run of $F finished" all_done "$FID"

log "every fired time started exactly one run; no time decided twice or skipped"
fired=$(fired "$JID")
runs=$(sql "SELECT count(*) FROM flow_run WHERE flow_id = $FID AND started_by = 'schedule'")
log "$fired fired, $runs scheduled runs"
[ "$fired" = "$runs" ] || fail "$fired fired times but $runs scheduled runs"
[ "$fired" -ge 7 ] || fail "only $fired fires"
linked=$(sql "SELECT count(DISTINCT f.flow_run_id) FROM job_fire f JOIN flow_run r ON r.id = f.flow_run_id
              WHERE f.job_id = $JID AND f.decision = 'fired' AND r.flow_id = $FID AND r.started_by = 'schedule'")
[ "$linked" = "$fired" ] || fail "$linked of $fired fired ledger rows name a run of their own"
[ "$(sql "SELECT count(*) FROM job_fire WHERE job_id = $JID AND decision <> 'fired'")" = 0 ] \
    || fail "times skipped: $(axctl job history "flow.$F" --limit 50)"
span=$(sql "SELECT extract(epoch FROM max(nominal_time) - min(nominal_time))::int + 1 FROM job_fire WHERE job_id = $JID")
[ "$span" = "$fired" ] || fail "$fired ledger rows for $span seconds: a second lost or doubled"
[ "$(sql "SELECT count(DISTINCT epoch) FROM job_fire WHERE job_id = $JID")" -ge 3 ] \
    || fail "fires not recorded by three leaders"
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID")" = 0 ] \
    || fail "an instance was created for a flow job's fire"
log "every run succeeded with every stage, one instance per stage"
[ "$(sql "SELECT count(*) FROM flow_run WHERE flow_id = $FID AND state <> 'succeeded'")" = 0 ] \
    || fail "runs not succeeded: $(axctl flow show "$F")"
[ "$(sql "SELECT count(*) FROM flow_stage_run s JOIN flow_run r ON r.id = s.run_id
          WHERE r.flow_id = $FID AND s.state = 'succeeded'")" = $((2 * runs)) ] || fail "stages not all succeeded"
[ "$(sql "SELECT count(*) || ' ' || count(DISTINCT (i.flow_run_id, i.flow_stage)) FROM job_instance i
          JOIN flow_run r ON r.id = i.flow_run_id WHERE r.flow_id = $FID")" = "$((2 * runs)) $((2 * runs))" ] \
    || fail "not exactly one instance per stage of each run"
axctl job history "flow.$F" --limit 3 | grep -q "fired .* flow run [0-9]" || fail "job history does not name the run"
axctl flow show "$F" | grep -q "^run [0-9]*: succeeded (schedule 20" || fail "flow show does not show scheduled runs"
axctl flow show "$F" | grep -q "^schedule: none" || fail "flow show after --no-schedule"

log "axctl flow run starts a run through the same function"
run=$(axctl flow run "$F")
state() { [ "$(sql "SELECT state FROM flow_run WHERE id = $run")" = succeeded ]; }
wait_for 30 "manual run succeeded" state
[ "$(sql "SELECT started_by FROM flow_run WHERE id = $run")" = manual ] || fail "manual run not marked manual"

log "overlap=skip: no run starts while the previous one runs"
axctl flow create "$G" --stage "S=${JOBP}slow" >"$WORK/out"
! grep -q "^schedule" "$WORK/out" || fail "a flow created without schedule printed one"
axctl flow schedule "$G" --cron '* * * * * *' --overlap skip >/dev/null
GID=$(sql "SELECT id FROM flow WHERE name = '$G'")
GJ=$(sql "SELECT id FROM job WHERE flow_id = $GID")
skipped() { [ "$(sql "SELECT count(*) FROM job_fire WHERE job_id = $GJ AND decision = 'skipped_overlap'")" -ge "$1" ]; }
wait_for 30 "skipped_overlap fires" skipped 4
wait_for 30 "two fired" more_than "$GJ" 1
axctl flow schedule "$G" --no-schedule >/dev/null
sleep 1.5
wait_for 60 "every run of $G finished" all_done "$GID"
gf=$(fired "$GJ")
gr=$(sql "SELECT count(*) FROM flow_run WHERE flow_id = $GID")
log "$gf fired, $gr runs, $(sql "SELECT count(*) FROM job_fire WHERE job_id = $GJ AND decision = 'skipped_overlap'") skipped"
[ "$gf" = "$gr" ] || fail "overlap: $gf fired times but $gr runs"
bad=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $GJ AND decision = 'skipped_overlap'
           AND (flow_run_id IS NOT NULL OR detail NOT LIKE 'overlap=skip: still unfinished: flow run %')")
[ "$bad" = 0 ] || fail "skipped_overlap rows with a run or without the reason: $(axctl job history "flow.$G")"
over=$(sql "SELECT count(*) FROM job_instance a JOIN job_instance b ON b.flow_run_id > a.flow_run_id
            JOIN flow_run ra ON ra.id = a.flow_run_id JOIN flow_run rb ON rb.id = b.flow_run_id
            WHERE ra.flow_id = $GID AND rb.flow_id = $GID AND b.running_at < a.finished_at")
[ "$over" = 0 ] || fail "$over pair(s) of runs overlapped"

log "deleting a flow deletes its schedule"
axctl flow delete "$G" >/dev/null
[ "$(sql "SELECT count(*) FROM job WHERE id = $GJ")" = 0 ] || fail "schedule job left after flow delete"
log ok
