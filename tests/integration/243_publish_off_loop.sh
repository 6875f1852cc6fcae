#!/usr/bin/env bash
# The results publisher runs on a thread of its own with its own PostgreSQL
# connection (services/callback/publish.c): while it waits — here its mark,
# the statement after a Kafka commit, held up by a table lock on
# ax_results_offset — the callback's event loop goes on persisting results.
# 1. 20 instances finished and published: the publisher is ready;
# 2. the mark held: 20 more, whose publisher's mark then waits on the lock;
# 3. while it still waits, 100 more are submitted and all become FINISHED
#    (a callback that published on its loop persisted nothing more until
#    the lock went), none of them published;
# 4. the lock released: all 140 published, each instance's key on the
#    results topic exactly once.
source "$(dirname "$0")/lib.sh"
create_topics 2
start_svc trigger --set trigger.scan.interval.ms=100
start_svc executor --set executor.slots=32
# the mark waits for the lock as long as the test holds it (85 s, more than
# the waits below; not cut at the default 5 s statement timeout, after
# which a loop that publishes would get its turn back)
start_svc callback --set db.statement.timeout.ms=90000

tag="off$$"
LOCKER=
release_marks() {
    sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = 'ax-it-locker-$$'" >/dev/null 2>&1 || true
    [ -z "$LOCKER" ] || wait "$LOCKER" 2>/dev/null || true
    LOCKER=
}
IT_ON_EXIT+=(release_marks)
count() { # count TRACE-PREFIX CONDITION
    sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-$1%' AND $2"
}
at_least() { [ "$(count "$1" "$2")" -ge "$3" ]; }
marks_waiting() {
    sql "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
         AND query LIKE '/* ax: results published */%'"
}
mark_waits() { [ "$(marks_waiting)" -ge 1 ]; }
locked() {
    [ "$(sql "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
              WHERE a.application_name = 'ax-it-locker-$$' AND l.granted
              AND l.relation = 'ax_results_offset'::regclass")" -ge 1 ]
}

log "1. the publisher ready"
axctl submit --count 20 --trace-id "$tag-a" -- /bin/true >/dev/null || fail "submit a"
wait_for 60 "20 published" at_least a "result_published_at IS NOT NULL" 20

log "2. the mark held up after a commit"
PGAPPNAME=ax-it-locker-$$ psql -X -q \
    -c "BEGIN; LOCK TABLE ax_results_offset IN EXCLUSIVE MODE; SELECT pg_sleep(85)" \
    >/dev/null 2>&1 &
LOCKER=$!
wait_for 10 "the table lock" locked
axctl submit --count 20 --trace-id "$tag-b" -- /bin/true >/dev/null || fail "submit b"
wait_for 20 "a mark waiting on the lock" mark_waits

log "3. results persisted while the mark waits"
axctl submit --count 100 --trace-id "$tag-c" -- /bin/true >/dev/null || fail "submit c"
wait_for 30 "100 more FINISHED while the publisher waits" at_least c "state = 'FINISHED'" 100
mark_waits || fail "the mark no longer waits: the lock was released early"
[ "$(count c "result_published_at IS NOT NULL")" = 0 ] \
    || fail "$(count c "result_published_at IS NOT NULL") published although every mark waits"

log "4. the lock released: everything published once"
release_marks
wait_for 60 "140 published" at_least "" "result_published_at IS NOT NULL" 140
sql "SELECT id FROM job_instance WHERE trace_id LIKE '$tag-%'" | sort >"$WORK/ids"
[ "$(wc -l <"$WORK/ids")" = 140 ] || fail "$(wc -l <"$WORK/ids") instances, expected 140"
topic_read "$(topic results)" '%k\n' | sort | grep -Fxf "$WORK/ids" >"$WORK/keys" || true
[ "$(wc -l <"$WORK/keys")" = 140 ] || fail "$(wc -l <"$WORK/keys") records of the 140 instances"
[ -z "$(uniq -d "$WORK/keys")" ] || fail "published twice: $(uniq -d "$WORK/keys" | head -5 | tr '\n' ' ')"
log "ok"
