#!/bin/bash
# A statement that blocks the leader's loop (issue #11, defect 2): a psql
# session holds lane_status locked, so the leader's lag-sample write (about
# once a second, a statement of its own outside the fenced transactions)
# waits.
#
# 1. db.statement.timeout.ms=500: the statement is cancelled after 500 ms,
#    logged and retried; the loop goes on, t1 keeps leading (same epoch).
# 2. t1 restarted with no statement timeout (0): its loop stays blocked past
#    trigger.starve.ms (2 s of a 3 s lease); its lease thread logs that it
#    starved and gives the lease back, and t2 takes over — while the lock is
#    still held, i.e. without waiting for the lease to run out. Once the
#    lock goes, t1 logs that it lost leadership and stays a standby.
# t2 runs with db.statement.timeout.ms=500 throughout, so the lock never
# starves it when it leads.
. "$(dirname "$0")/lib.sh"
create_topics 2
COMMON=(--set trigger.lease.ms=3000)
T2=(--set worker.id=t2 --set db.statement.timeout.ms=500) # t2 always outlasts the lock
lock_for() { # lock_for SECONDS: hold lane_status locked in the background
    psql -X -q -v ON_ERROR_STOP=1 -c "BEGIN; LOCK TABLE lane_status IN ACCESS EXCLUSIVE MODE;
         SELECT pg_sleep($1); COMMIT;" >/dev/null 2>&1 &
    LOCKER=$!
}

start_svc trigger@1 "${COMMON[@]}" --set worker.id=t1 --set db.statement.timeout.ms=500
wait_for 20 "t1 leads" leader_is t1
# t1's start-up done (its consumer in the group) before t2 starts: the two
# starting at once on a busy machine (the sanitizer build) once held t1's
# loop 2 s before the lock was even taken, and it stepped down (CI,
# 2026-12-02)
wait_for 20 "t1's consumer joined" grep -q "partition(s) assigned" "$WORK/ax-trigger@1.log"
start_svc trigger@2 "${COMMON[@]}" "${T2[@]}"
e1=$(leader_holder | cut -d' ' -f2)
sleep 1

log "1. lock for 5 s, t1 cancels its statements after 500 ms"
lock_for 5
wait_for 10 "t1 logs a cancelled statement" grep -q "canceling statement due to statement timeout" "$WORK/ax-trigger@1.log"
wait "$LOCKER"
sleep 1
leader_is t1 || fail "t1 lost leadership: $(leader_holder)"
[ "$(leader_holder | cut -d' ' -f2)" = "$e1" ] || fail "epoch changed from $e1"
grep -E "leadership lost|starved" "$WORK/ax-trigger@1.log" && fail "t1 stepped down"

log "2. t1 without a statement timeout, lock for 10 s"
stop_svc trigger@1 TERM
wait_for 20 "t2 leads" leader_is t2
stop_svc trigger@2 TERM
start_svc trigger@1 "${COMMON[@]}" --set worker.id=t1 --set db.statement.timeout.ms=0
wait_for 20 "t1 leads again" leader_is t1
start_svc trigger@2 "${COMMON[@]}" "${T2[@]}"
e2=$(leader_holder | cut -d' ' -f2)
sleep 1
lock_for 10
wait_for 8 "t1's lease thread notices the starved loop" grep -q "starved: the event loop did not come round" "$WORK/ax-trigger@1.log"
wait_for 5 "t2 takes over while the lock is held" leader_is t2
kill -0 "$LOCKER" 2>/dev/null || fail "the lock was released before t2 took over"
e3=$(leader_holder | cut -d' ' -f2)
[ "$e3" -gt "$e2" ] || fail "epoch did not increase ($e2 -> $e3)"
wait "$LOCKER"
wait_for 10 "t1 drops leadership once its loop runs" grep -q "leadership lost (epoch $e2)" "$WORK/ax-trigger@1.log"
sleep 4
leader_is t2 || fail "t2 no longer leads: $(leader_holder)"
log "OK"
