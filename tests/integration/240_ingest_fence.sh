#!/usr/bin/env bash
# The leader's fence inside the ingest statement (dispatch.ingest re-reads
# and locks its lease itself, committed on its own on the trigger's ingest
# connection, no BEGIN/COMMIT around it),
# through the store's own call (helpers/it_ingest.c with IT_LEASE), no
# services, on a lease row of its own:
# 1. the lease held: the batch's instances are marked dispatched, with one
#    dispatch_batch row under the epoch; not fenced;
# 2. a stale epoch, and then an expired lease: nothing marked, no
#    dispatch_batch row, the instances made as a standby's (left for the
#    due scan), fenced;
# 3. a takeover under way (a session has updated the lease row, not yet
#    committed): the ingest waits for it (FOR SHARE: pg_blocking_pids), and
#    once the takeover commits with a new epoch, it is fenced and marks
#    nothing;
# 4. the other way round: an ingest that read the lease and has not yet
#    committed (run inside BEGIN here, IT_HOLD_MS) makes a takeover wait
#    for its commit, so the successor finds its dispatch_batch row.
source "$(dirname "$0")/lib.sh"
D="it240.$$.$RANDOM."
TOPIC="${D}s"
J="it240-$$"
R="it240-role-$$"
fence_cleanup() {
    sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE '$D%'" \
        >/dev/null 2>&1 || true
    sql "DELETE FROM instance_def WHERE id IN (SELECT id FROM instance_state WHERE deployment = '$D');
         DELETE FROM instance_state WHERE deployment = '$D';
         DELETE FROM dispatch_batch WHERE deployment = '$D';
         DELETE FROM submit_offset WHERE topic LIKE '$D%';
         DELETE FROM ax_leader WHERE role = '$R';
         DELETE FROM job WHERE name = '$J'" >/dev/null 2>&1 || true
}
IT_ON_EXIT+=(fence_cleanup)
sql "INSERT INTO job (name, handler_kind, command) VALUES ('$J', 'command', ARRAY['echo', 'x'])" >/dev/null \
    || fail "cannot create job $J"
sql "INSERT INTO ax_leader (role, holder, epoch, expires_at, acquired_at)
     VALUES ('$R', 'h1', 7, now() + interval '1 hour', now())" >/dev/null || fail "cannot create the lease"

ingest() { # EPOCH OFFSET...: one batch of positions of partition 0 as holder h1
    local e=$1; shift
    local o
    for o in "$@"; do echo "$J kafka:$TOPIC:0:$o"; done |
        IT_LEASE="$R h1 $e" IT_APPNAME="${D}ingest" "$AX_BIN/tests/it_ingest" "$AX_CONFIG" "$D"
}
blocks() { # WAITER BLOCKER (application names): BLOCKER is among WAITER's blockers
    [ "$(sql "SELECT count(*) FROM pg_stat_activity w, pg_stat_activity b
              WHERE w.application_name = '$1' AND b.application_name = '$2'
              AND b.pid = ANY(pg_blocking_pids(w.pid))")" = 1 ]
}
marked() { # OFFSET: the instance's dispatched_at is set (t/f)
    sql "SELECT s.dispatched_at IS NOT NULL FROM instance_state s JOIN instance_def d USING (id)
         WHERE s.deployment = '$D' AND d.submit_key = 'kafka:$TOPIC:0:$1'"
}
batches() { sql "SELECT count(*) FROM dispatch_batch WHERE deployment = '$D' AND epoch = $1"; }
raced() { # STEP WHAT EXPECT: wait for the ingest ($ING, output $WORK/STEP.out) and the
          # other session ($TK); the ingest's lease line must be EXPECT
    wait "$ING" || fail "it_ingest failed: $(cat "$WORK/$1.out")"
    wait "$TK" || fail "the takeover session failed"
    out=$(cat "$WORK/$1.out")
    log "$2: $(echo "$out" | tr '\n' ' ')"
    [ "$(echo "$out" | sed -n 2p)" = "$3" ] || fail "$2: $out"
}

# 1. held
out=$(ingest 7 0 1) || fail "it_ingest failed: $out"
log "held: $(echo "$out" | tr '\n' ' ')"
[ "$out" = "$(printf 'batch 1: 2\nlease: fenced=0 dispatched=2\nkafka:%s:0:0\nkafka:%s:0:1' "$TOPIC" "$TOPIC")" ] \
    || fail "with the lease held: $out"
[ "$(marked 0)$(marked 1)" = tt ] || fail "with the lease held, not marked dispatched"
[ "$(batches 7)" = 1 ] || fail "with the lease held, $(batches 7) dispatch_batch rows under epoch 7, not 1"

# 2. a stale epoch, then an expired lease
fenced_alone() { # WHAT EPOCH OFFSET: the batch is fenced, its instance not marked
    out=$(ingest "$2" "$3") || fail "it_ingest failed: $out"
    log "$1: $(echo "$out" | tr '\n' ' ')"
    [ "$(echo "$out" | sed -n 2p)" = "lease: fenced=1 dispatched=0" ] || fail "$1: $out"
    [ "$(marked "$3")" = f ] || fail "$1: its instance was marked dispatched"
}
fenced_alone "a stale epoch" 6 2
[ "$(batches 6)" = 0 ] || fail "a stale epoch wrote a dispatch_batch row"
sql "UPDATE ax_leader SET expires_at = now() - interval '1 second' WHERE role = '$R'" >/dev/null
fenced_alone "an expired lease" 7 3
[ "$(batches 7)" = 1 ] || fail "an expired lease wrote a dispatch_batch row"
sql "UPDATE ax_leader SET expires_at = now() + interval '1 hour' WHERE role = '$R'" >/dev/null

# 3. a takeover under way: the ingest waits for it, then is fenced
PGAPPNAME="${D}takeover" psql -X -q -v ON_ERROR_STOP=1 -c "BEGIN" \
    -c "UPDATE ax_leader SET holder = 'h2', epoch = 8 WHERE role = '$R'" \
    -c "SELECT pg_sleep(3)" -c "COMMIT" >/dev/null 2>&1 &
TK=$!
takeover_holds() {
    [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE application_name = '${D}takeover'
              AND query LIKE '%pg_sleep%'")" = 1 ]
}
wait_for 10 "the takeover session holding the lease row" takeover_holds
ingest 7 4 > "$WORK/ing3.out" 2>&1 &
ING=$!
ingest_waits_takeover() { blocks "${D}ingest" "${D}takeover"; }
wait_for 10 "the ingest waiting for the takeover" ingest_waits_takeover
raced ing3 "during a takeover" "lease: fenced=1 dispatched=0"
[ "$(marked 4)" = f ] || fail "an instance was marked dispatched under the taken-over epoch"

# 4. an ingest that read the lease, not yet committed: a takeover waits
sql "UPDATE ax_leader SET holder = 'h1', epoch = 9 WHERE role = '$R'" >/dev/null
# (the session's idle-in-transaction timeout, 2.5 s by default, off for it)
IT_HOLD_MS=4000 AXCONF_PG_OPTIONS="-c idle_in_transaction_session_timeout=0" \
    ingest 9 5 > "$WORK/ing4.out" 2>&1 &
ING=$!
ingest_holds() {
    [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE application_name = '${D}ingest'
              AND state = 'idle in transaction'")" = 1 ]
}
wait_for 10 "the ingest's transaction open after its statement" ingest_holds
PGAPPNAME="${D}takeover2" psql -X -q -v ON_ERROR_STOP=1 \
    -c "UPDATE ax_leader SET holder = 'h2', epoch = 10 WHERE role = '$R'" >/dev/null 2>&1 &
TK=$!
takeover_waits() { blocks "${D}takeover2" "${D}ingest"; }
wait_for 10 "the takeover waiting for the ingest's commit" takeover_waits
raced ing4 "a takeover behind an ingest" "lease: fenced=0 dispatched=1"
[ "$(marked 5)" = t ] || fail "the ingest before the takeover did not mark its instance"
[ "$(batches 9)" = 1 ] || fail "the ingest before the takeover left no dispatch_batch row under epoch 9"
[ "$(sql "SELECT epoch FROM ax_leader WHERE role = '$R'")" = 10 ] || fail "the takeover did not land"
log "ok"
