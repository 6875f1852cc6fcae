#!/usr/bin/env bash
# dispatch.transaction.ms: the leader's ingest batches share one Kafka
# transaction for the window, and executors read its records before it
# commits (isolation.level read_uncommitted).
# 1. Window 10 s: a submitted command has run (SUCCESS) while its dispatch
#    record is not committed yet (a read_committed reader sees none, a
#    read_uncommitted one sees it) and its dispatch mark is not settled
#    (its dispatch_batch row is there); once the window is over the record
#    is committed, once, and the mark settled.
# 2. The leader killed (SIGKILL) with a window open and no executor
#    running: that transaction never commits; the next leader produces the
#    instances again; an executor started then reads both records of each
#    (the aborted and the new), runs each command once and counts a lost
#    claim for each second record.
source "$(dirname "$0")/lib.sh"
create_topics 1
W=10000
LEASE=(--set trigger.lease.ms=3000)
DT=$(topic dispatch)
committed() { topic_count "$DT"; }
uncommitted() { topic_count_all "$DT"; }
committed_is() { [ "$(committed)" = "$1" ]; }
uncommitted_is() { [ "$(uncommitted)" = "$1" ]; }
lost() { sql "SELECT coalesce(sum(value), 0) FROM ax_counter WHERE name = 'executor.claims_lost'"; }
lost_at_least() { [ "$(lost)" -ge "$1" ]; }
batches() { sql "SELECT count(*) FROM dispatch_batch WHERE deployment = '$AXCONF_TOPIC_PREFIX'"; }
batches_are() { [ "$(batches)" = "$1" ]; }
leads() { [ -n "$(leader_holder)" ]; }

start_svc trigger "${LEASE[@]}" --set dispatch.transaction.ms=$W
start_svc executor --set dispatch.transaction.ms=$W
start_svc callback
wait_for 30 "a leader" leads

log "1. a run inside the window"
marks="$WORK/marks"
# a first job, so the executor has joined its group before the window of
# the job under test opens (the join takes seconds)
out=$(axctl submit --wait --wait-timeout 60 -- sh -c "echo ran >> $marks") || fail "submit failed: $out"
wait_for 30 "the first window committed" committed_is 1
out=$(axctl submit --wait --wait-timeout 60 -- sh -c "echo ran >> $marks") || fail "submit failed: $out"
c=$(committed)
u=$(uncommitted)
b=$(batches)
log "after the run: $c committed, $u dispatch record(s) in all, $b dispatch_batch row(s)"
[ "$c" = 1 ] || fail "the dispatch record was committed before the window ended ($c committed)"
[ "$u" = 2 ] || fail "$u dispatch record(s) in the topic, expected 2"
[ "$b" = 1 ] || fail "$b dispatch_batch rows while the window is open, expected 1"
wait_for 30 "the window committed" committed_is 2
wait_for 10 "the mark settled" batches_are 0
[ "$(wc -l <"$marks")" = 2 ] || fail "commands ran $(wc -l <"$marks") times, expected 2"

log "2. the leader killed with the window open"
stop_svc executor
before=$(lost)
N=5
axctl submit --count $N --trace-id win -- sh -c "echo \$AX_INSTANCE_ID >> $marks" >/dev/null ||
    fail "submit --count failed"
wait_for 30 "$N records produced into the window" uncommitted_is $((N + 2))
[ "$(committed)" = 2 ] || fail "the window's records were committed before the kill"
stop_svc trigger KILL
start_svc trigger@2 "${LEASE[@]}" --set dispatch.transaction.ms=$W
wait_for 60 "the $N instances produced again and committed" committed_is $((N + 2))
# the aborted records are still there (a retried transaction may add more)
[ "$(uncommitted)" -ge $((2 * N + 2)) ] || fail "$(uncommitted) dispatch records, expected $((2 * N + 2))"
start_svc executor@2 --set dispatch.transaction.ms=$W
for i in $(seq 1 $N); do
    wait_for 60 "win-$i finished" finished "win-$i"
    [ "$(field "win-$i" outcome)" = SUCCESS ] || fail "win-$i: $(field "win-$i" outcome)"
    [ "$(field "win-$i" attempt)" = 1 ] || fail "win-$i: attempt $(field "win-$i" attempt)"
done
wait_for 30 "$N lost claims counted" lost_at_least $((before + N))
sleep 1
runs=$(wc -l <"$marks")
[ "$runs" = $((N + 2)) ] || fail "commands ran $runs times, expected $((N + 2))"
dup=$(grep -v '^ran$' "$marks" | sort | uniq -d)
[ -z "$dup" ] || fail "instance(s) ran twice: $dup"
log "ok"
