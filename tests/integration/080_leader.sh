#!/bin/bash
# Leader election with fencing: two triggers, one leads. The leader is paused
# (SIGSTOP) past its lease: the standby takes over with a higher epoch, the
# paused one, resumed, records nothing more under its stale epoch and its
# Kafka producer is fenced. Then the new leader is killed (SIGKILL) and the
# first one takes over again. Across both failovers every nominal time of a
# fixed-rate job is decided once, runs once, appears on the dispatch
# topic (counting records of transactions a failover aborted,
# which executors read: dispatch.transaction.ms), and is committed there
# at most once.
. "$(dirname "$0")/lib.sh"
create_topics 2
LEASE=(--set trigger.lease.ms=3000)
ROLE=$(topic trigger)

start_svc trigger@1 "${LEASE[@]}" --set worker.id=t1
wait_for 20 "t1 leads" leader_is t1
start_svc trigger@2 "${LEASE[@]}" --set worker.id=t2
start_svc executor
start_svc callback
tick_job
wait_for 20 "fires under t1" more_than 10
e1=$(leader_holder | cut -d' ' -f2)

log "pausing leader t1 (epoch $e1)"
kill -STOP "${SVC_PID[trigger@1]}"
wait_for 20 "t2 takes over" leader_is t2
e2=$(leader_holder | cut -d' ' -f2)
[ "$e2" -gt "$e1" ] || fail "epoch did not increase ($e1 -> $e2)"
took=$(sql "SELECT acquired_at FROM ax_leader WHERE role = '$ROLE'")
n=$(fired); wait_for 20 "fires under t2" more_than $((n + 10))
log "resuming t1"
kill -CONT "${SVC_PID[trigger@1]}"
wait_for 15 "t1 notices it lost the lease" grep -q "leadership lost" "$WORK/ax-trigger@1.log"
n=$(fired); wait_for 20 "fires go on" more_than $((n + 5))
stale=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $JID AND epoch = $e1 AND decided_at >= '$took'")
[ "$stale" = 0 ] || fail "$stale fire(s) recorded under the stale epoch $e1 after the takeover"

log "killing leader t2 (SIGKILL)"
stop_svc trigger@2 KILL
wait_for 20 "t1 takes over again" leader_is t1
e3=$(leader_holder | cut -d' ' -f2)
[ "$e3" -gt "$e2" ] || fail "epoch did not increase ($e2 -> $e3)"
n=$(fired); wait_for 20 "fires under t1 again" more_than $((n + 10))
sql "UPDATE job SET enabled = false WHERE id = $JID"
sleep 1

log "every nominal time once, in order, no gap"
gaps=$(sql "SELECT count(*) FROM (SELECT nominal_time - lag(nominal_time) OVER (ORDER BY nominal_time) AS d
            FROM job_fire WHERE job_id = $JID) x WHERE d IS NOT NULL AND d <> interval '200 ms'")
[ "$gaps" = 0 ] || fail "$gaps gap(s) in the fixed-rate sequence"
[ "$(sql "SELECT count(*) FROM job_fire WHERE job_id = $JID AND decision <> 'fired'")" = 0 ] \
    || fail "times skipped across failover (all within the 60 s misfire threshold)"
epochs=$(sql "SELECT string_agg(DISTINCT epoch::text, ',') FROM job_fire WHERE job_id = $JID")
log "epochs that recorded fires: $epochs"
[ "$(sql "SELECT count(DISTINCT epoch) FROM job_fire WHERE job_id = $JID")" -ge 3 ] || fail "expected fires from 3 epochs"
inst=$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID")
[ "$inst" = "$(fired)" ] || fail "$inst instances for $(fired) fired times"

all_done() { [ "$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID AND (state <> 'FINISHED' OR outcome <> 'SUCCESS')")" = 0 ]; }
wait_for 60 "every instance finished SUCCESS" all_done
twice=$(sql "SELECT count(*) FROM (SELECT instance_id FROM job_attempt a JOIN job_instance i ON i.id = a.instance_id
             WHERE i.job_id = $JID GROUP BY instance_id HAVING count(*) > 1) x")
[ "$twice" = 0 ] || fail "$twice instance(s) ran more than once"
dispatch_once "$(topic dispatch)" "$inst"
log ok
