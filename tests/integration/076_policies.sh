#!/bin/bash
# Misfire and overlap policies through the real services: a trigger outage
# longer than the misfire threshold is recorded as skipped (policy skip) or
# run once (fire_once); overlap=skip never runs two instances of a job at
# once, overlap=queue runs the queued one after its predecessor finished,
# overlap=cancel kills the running instance when the next one starts.
. "$(dirname "$0")/lib.sh"
create_topics 2
start_all

jid() { sql "SELECT id FROM job WHERE name = '$JOBP$1'"; }
count() { sql "SELECT count(*) FROM job_fire WHERE job_id = $(jid "$1") AND decision = '$2'"; }
at_least() { [ "$(count "$1" "$2")" -ge "$3" ]; }

axctl job create "${JOBP}skip" --fixed-rate 400 --misfire skip --misfire-threshold 1000 -- true >/dev/null
axctl job create "${JOBP}once" --fixed-rate 400 --misfire fire_once --misfire-threshold 1000 -- true >/dev/null
axctl job create "${JOBP}catch" --fixed-rate 400 --misfire catch_up --catchup-max 3 --misfire-threshold 1000 -- true >/dev/null
axctl job create "${JOBP}ovskip" --fixed-rate 300 --overlap skip -- sleep 1 >/dev/null
axctl job create "${JOBP}ovqueue" --fixed-rate 300 --overlap queue -- sleep 1 >/dev/null
axctl job create "${JOBP}ovcancel" --fixed-rate 1500 --overlap cancel -- sleep 30 >/dev/null

wait_for 20 "skip job fires" at_least skip fired 3
log "trigger down for 4 s (misfire threshold 1 s)"
stop_svc trigger TERM
past=$(( $(date +%s%3N) - 5000 ))
axctl job create "${JOBP}oncelate" --at "$past" --misfire fire_once --misfire-threshold 1000 -- true >/dev/null
axctl job create "${JOBP}onceskip" --at "$past" --misfire skip --misfire-threshold 1000 -- true >/dev/null
sleep 4
start_svc trigger
wait_for 20 "skipped misfires recorded" at_least skip skipped_misfire 5
wait_for 20 "fire_once misfires recorded" at_least once skipped_misfire 5
wait_for 20 "fires after the outage" at_least skip fired 6
wait_for 20 "overlap skip" at_least ovskip skipped_overlap 3
wait_for 20 "overlap queue: queued" at_least ovqueue queued 2
cancelled() { [ "$(sql "SELECT count(*) FROM job_instance WHERE job_id = $(jid ovcancel) AND outcome = 'CANCELLED'")" -ge 2 ]; }
wait_for 30 "overlap cancel: cancelled instances" cancelled
sql "UPDATE job SET enabled = false WHERE name LIKE '${JOBP}%'"
sleep 1.5

log "misfire skip: outage times skipped, no time both skipped and fired, instances only for fired"
for j in skip once; do
    id=$(jid $j)
    inst=$(sql "SELECT count(*) FROM job_instance WHERE job_id = $id")
    fired=$(count $j fired)
    [ "$inst" = "$fired" ] || fail "$j: $inst instances for $fired fired times"
    late=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $id AND decision = 'skipped_misfire'
                AND (detail NOT LIKE 'misfire: late by %' OR decided_at - nominal_time <= interval '1 s')")
    [ "$late" = 0 ] || fail "$j: $late skipped_misfire row(s) not explained or not late"
done
log "fire_once: of the outage's missed times at most the latest runs, and only if no on-time time runs"
b=$(sql "SELECT min(decided_at) FROM job_fire WHERE job_id = $(jid once) AND decision = 'skipped_misfire'")
late_ran=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $(jid once) AND decided_at = '$b' AND decision = 'fired' AND detail LIKE 'misfire:%'")
ontime_ran=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $(jid once) AND decided_at = '$b' AND decision = 'fired' AND (detail IS NULL OR detail NOT LIKE 'misfire:%')")
log "outage batch: $late_ran late time(s) ran, $ontime_ran on-time"
if [ "$ontime_ran" -gt 0 ]; then
    [ "$late_ran" = 0 ] || fail "fire_once ran $late_ran missed time(s) besides on-time ones"
else
    [ "$late_ran" = 1 ] || fail "fire_once ran $late_ran missed times, expected 1"
fi
latest=$(sql "SELECT decision FROM job_fire WHERE job_id = $(jid once) AND decided_at = '$b' ORDER BY nominal_time DESC LIMIT 1")
[ "$latest" = fired ] || fail "fire_once: the time that ran is not the latest of the outage"
log "once jobs created 5 s in the past: fire_once runs it late, skip records it skipped"
[ "$(sql "SELECT decision || ' ' || (detail LIKE 'misfire: late by %') FROM job_fire WHERE job_id = $(jid oncelate)")" = "fired true" ] \
    || fail "once + fire_once: not fired late exactly once"
[ "$(sql "SELECT decision FROM job_fire WHERE job_id = $(jid onceskip)")" = skipped_misfire ] || fail "once + skip: not skipped"
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_id = $(jid onceskip)")" = 0 ] || fail "once + skip: has an instance"

log "catch_up: exactly catchup-max (3) missed times ran, the newest of the missed ones"
b=$(sql "SELECT min(decided_at) FROM job_fire WHERE job_id = $(jid catch) AND decision = 'skipped_misfire'")
[ -n "$b" ] || fail "catch_up: no skipped_misfire (outage of 4 s, 400 ms rate, at most 3 caught up)"
cu=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $(jid catch) AND decided_at = '$b' AND decision = 'fired' AND detail LIKE 'misfire:%'")
[ "$cu" = 3 ] || fail "catch_up ran $cu missed times, expected 3"
inv=$(sql "SELECT count(*) FROM job_fire s, job_fire f WHERE s.job_id = $(jid catch) AND f.job_id = s.job_id
           AND s.decided_at = '$b' AND f.decided_at = '$b' AND s.decision = 'skipped_misfire'
           AND f.detail LIKE 'misfire:%' AND f.decision = 'fired' AND s.nominal_time > f.nominal_time")
[ "$inv" = 0 ] || fail "catch_up skipped a missed time newer than one it ran"

log "skip: nothing late beyond the threshold ran"
sk=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $(jid skip) AND decision = 'fired' AND detail LIKE 'misfire:%'")
[ "$sk" = 0 ] || fail "policy skip ran $sk missed time(s)"

log "overlap skip: never two runs at once"
both=$(sql "SELECT count(*) FROM job_instance a, job_instance b WHERE a.job_id = $(jid ovskip) AND b.job_id = a.job_id
            AND a.id < b.id AND b.running_at < a.finished_at")
[ "$both" = 0 ] || fail "overlap=skip: $both pair(s) of instances ran at the same time"

log "overlap queue: a queued run starts after its predecessor finished"
early=$(sql "SELECT count(*) FROM job_instance q JOIN job_instance p ON p.id = q.wait_for
             WHERE q.job_id = $(jid ovqueue) AND q.running_at < p.finished_at")
[ "$early" = 0 ] || fail "overlap=queue: $early queued run(s) started before the predecessor finished"
queued=$(sql "SELECT count(*) FROM job_instance WHERE job_id = $(jid ovqueue) AND wait_for IS NOT NULL")
[ "$queued" -ge 2 ] || fail "overlap=queue: no queued instances"
waiting=$(sql "SELECT count(*) FROM job_instance WHERE job_id = $(jid ovqueue) AND wait_for IS NOT NULL AND state = 'SCHEDULED'")
[ "$waiting" -le 1 ] || fail "overlap=queue: $waiting queued instances waiting at once (at most one)"

log "overlap cancel: the cancelled run was killed, not left running"
c=$(sql "SELECT count(*) FROM job_instance WHERE job_id = $(jid ovcancel) AND outcome = 'CANCELLED'
         AND error_class = 'cancelled' AND finished_at - running_at < interval '10 s'")
[ "$c" -ge 1 ] || fail "overlap=cancel: no instance cancelled (killed) within 10 s"
log ok
