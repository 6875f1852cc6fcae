#!/bin/bash
# A leader stopped inside one of its transactions. Every leader transaction
# opens with the lease re-read FOR SHARE, so a trigger process stopped
# between two statements of a transaction (SIGSTOP here; a paused VM, a
# debugger or swap in production) keeps that share lock, and the standby's
# takeover (UPDATE ax_leader) waits behind it: the stopped process's TCP
# connection is healthy, keepalives answer. The server must end the session
# (idle_in_transaction_session_timeout, pg.c: half the shortest lease), and
# the standby then takes over. 080_leader stops its leader at a random
# moment, inside a transaction only sometimes; this test always does.
#
# The leader's fire transaction is held inside by a lock on job_fire (its
# INSERT waits, after the lease re-read), t1 is stopped while it waits, the
# lock is released: the INSERT completes and t1's session sits idle in its
# transaction, the lease row share-locked, its client stopped.
. "$(dirname "$0")/lib.sh"
create_topics 2
LEASE=(--set trigger.lease.ms=3000)
ROLE=$(topic trigger)
# a trigger's statement waiting for a lock on job_fire
fire_waits() {
    [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
              AND application_name = 'ax-trigger' AND wait_event_type = 'Lock'
              AND query ILIKE '%job_fire%'")" -ge 1 ]
}
# a trigger's session idle in its transaction
trigger_idle_in_txn() {
    [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
              AND application_name = 'ax-trigger' AND state LIKE 'idle in transaction%'")" -ge 1 ]
}
# ... for a second or more: a stalled one, not the new leader's own
# transaction between two of its statements (its first fires run at once
# after the takeover)
trigger_stalled_in_txn() {
    [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
              AND application_name = 'ax-trigger' AND state LIKE 'idle in transaction%'
              AND state_change < now() - interval '1 second'")" -ge 1 ]
}

start_svc trigger@1 "${LEASE[@]}" --set worker.id=t1
wait_for 20 "t1 leads" leader_is t1
start_svc trigger@2 "${LEASE[@]}" --set worker.id=t2
tick_job
wait_for 20 "fires under t1" more_than 3
e1=$(leader_holder | cut -d' ' -f2)

log "job_fire locked: t1's next fire transaction waits inside"
psql -X -q -v ON_ERROR_STOP=1 -c "BEGIN; LOCK TABLE job_fire IN EXCLUSIVE MODE;
     SELECT pg_sleep(3); COMMIT;" >/dev/null 2>&1 &
LOCKER=$!
wait_for 10 "t1's fire waits for the lock" fire_waits
kill -STOP "${SVC_PID[trigger@1]}"
log "t1 stopped (epoch $e1); the lock goes"
wait "$LOCKER"
stopped_at=$(date +%s)
wait_for 10 "t1's session idle in its transaction" trigger_idle_in_txn
wait_for 20 "t2 takes over" leader_is t2
log "t2 leads $(( $(date +%s) - stopped_at )) s after the lock went"
e2=$(leader_holder | cut -d' ' -f2)
[ "$e2" -gt "$e1" ] || fail "epoch did not increase ($e1 -> $e2)"
trigger_stalled_in_txn && fail "a trigger's session is still idle in a transaction (for a second or more)"
took=$(sql "SELECT acquired_at FROM ax_leader WHERE role = '$ROLE'")
n=$(fired); wait_for 20 "fires under t2" more_than $((n + 5))

log "resuming t1"
kill -CONT "${SVC_PID[trigger@1]}"
wait_for 15 "t1 notices it lost the lease" grep -q "leadership lost" "$WORK/ax-trigger@1.log"
leader_is t2 || fail "t2 lost the lead: $(leader_holder)"
stale=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $JID AND epoch = $e1 AND decided_at >= '$took'")
[ "$stale" = 0 ] || fail "$stale fire(s) recorded under the stale epoch $e1 after the takeover"
sql "UPDATE job SET enabled = false WHERE id = $JID" >/dev/null
log ok
