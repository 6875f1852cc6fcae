#!/usr/bin/env bash
# The retention sweep does not hold up the leader's dispatching
# (services/trigger/retention.c): its statements run on a connection and a
# thread of their own. A session here holds a lock every retention.instances
# statement needs (flow_run, which nothing on a plain job's path reads: no
# flow, no schedule here), so the sweep's next statement waits for
# it, up to db.statement.timeout.ms (60 s here); while it waits, a submitted
# job is still ingested, dispatched, run and published. When the sweep ran
# on the loop, the loop waited with it and the job did not run until the
# lock was gone. SIGTERM then stops the trigger at once: the statement
# under way is cancelled, not waited for. Then the lock is released, a
# trigger started again, and the sweep goes on: an instance made old by
# hand is deleted.
source "$(dirname "$0")/lib.sh"
create_topics 3
# the statement timeout above the waits below together (so the waiting
# statement is not cancelled meanwhile), and below trigger.starve.ms (two
# thirds of the lease): the waiting statement must not starve anything
ARGS=(--set retention.finished.ms=1800000 --set retention.interval.ms=200
      --set db.statement.timeout.ms=60000 --set trigger.lease.ms=120000)
start_all "${ARGS[@]}"

P="retloop-$$-$RANDOM"
axctl submit --trace-id "$P-old" -- true >/dev/null
wait_for 60 "the first instance finished and published" finished "$P-old"

# The lock, held by a session of its own for up to 120 s (ended below).
PGAPPNAME="$P-locker" psql -X -q -v ON_ERROR_STOP=1 -c "BEGIN" -c "LOCK TABLE flow_run IN ACCESS EXCLUSIVE MODE" \
     -c "SELECT pg_sleep(120)" -c "COMMIT" >/dev/null 2>&1 &
LOCKER=$!
# (a psql killed leaves its backend asleep, the lock held: ended by the server)
unlock() {
    sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '$P-locker'" \
        >/dev/null 2>&1 || true
    wait "$LOCKER" 2>/dev/null || true
}
IT_ON_EXIT+=(unlock)
# (a trigger's session: ax-trigger-retention since the sweep has its own,
# ax-trigger when it ran on the loop's)
sweep_waits() {
    [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
              AND application_name LIKE 'ax-trigger%' AND query LIKE 'WITH walk AS%'
              AND wait_event_type = 'Lock'")" -ge 1 ]
}
wait_for 20 "a retention statement waiting for the lock on flow_run" sweep_waits

axctl submit --trace-id "$P-new" -- true >/dev/null
wait_for 15 "a job submitted while the sweep waits, finished and published" finished "$P-new"
sweep_waits || fail "the sweep stopped waiting before the job finished: the test proved nothing"
log "the job ran while the retention sweep waited for its lock"

# SIGTERM while the sweep waits: the trigger exits without waiting for the
# statement (its timeout is 60 s).
tpid=${SVC_PID[trigger]}
kill -TERM "$tpid"
exited() { ! kill -0 "$tpid" 2>/dev/null; }
wait_for 15 "ax-trigger to exit on SIGTERM while its sweep waits for a lock" exited
wait "$tpid" 2>/dev/null || true
unset "SVC_PID[trigger]"
no_sweep_waits() { ! sweep_waits; }
wait_for 5 "the sweep's statement gone with its trigger" no_sweep_waits
log "ax-trigger exited on SIGTERM with its sweep's statement cancelled"

unlock
start_svc trigger "${ARGS[@]}"
# The sweep goes on: the first instance, made an hour old, is deleted.
sql "UPDATE instance_state SET finished_at = now() - interval '1 hour',
        result_published_at = coalesce(result_published_at, now() - interval '1 hour')
     WHERE id = (SELECT id FROM instance_def WHERE trace_id = '$P-old')" >/dev/null
sql "UPDATE instance_def SET scheduled_at = now() - interval '2 hours' WHERE trace_id = '$P-old'" >/dev/null
gone() { [ "$(sql "SELECT count(*) FROM instance_def WHERE trace_id = '$P-old'")" = 0 ]; }
wait_for 30 "the old instance deleted once the lock was released" gone
[ "$(sql "SELECT count(*) FROM instance_def WHERE trace_id = '$P-new'")" = 1 ] \
    || fail "the young instance was deleted"
log "PASS"
