#!/usr/bin/env bash
# dispatch.prime: when a dispatch window that carried dispatches commits,
# the leader begins the next at once with one partition primer (key
# ax-primer, no value) on each partition the window's records went to.
# 1. Commands submitted in a few windows run once each; primers are on the
#    dispatch topic, every one committed in the end; the executor skipped
#    every one of them (its count at exit) and dead-lettered none.
# 2. Idle, the trigger primes no more: a window of primers alone is
#    committed by its timer and begins no other.
# 3. dispatch.prime=0: no primer more, the commands still run.
# With two producers (dispatch.producers, default 2) the window after one
# that carried dispatches is begun on the other producer, and primed,
# before that one's commit (part 1 sees it in the trigger's debug log);
# with dispatch.producers=1 it never is, and windows are still primed
# (part 4).
source "$(dirname "$0")/lib.sh"
create_topics 2
W=500
DT=$(topic dispatch)
marks="$WORK/marks"
# trace ids of this run only: submit --wait finds an instance by its trace
# id, and a FINISHED one of an earlier run on the same database (CI's TLS
# pass after its plain pass) would end the wait before this run's ran
TR="prime.$$.$RANDOM"
primers() { primer_count "$DT"; }
primers_committed() { topic_read "$DT" '%k %S\n' | { grep -cxE 'ax-primer (0|-1)' || true; }; }
all_committed() { [ "$(primers_committed)" = "$(primers)" ]; }
leads() { [ -n "$(leader_holder)" ]; }

AHEAD='dispatch window: the next begun ahead'
ahead() { { grep -c "$AHEAD" "$WORK/ax-$1.log" || true; }; }
start_svc trigger --set dispatch.transaction.ms=$W --set log.level=debug
start_svc executor --set dispatch.transaction.ms=$W
start_svc callback
wait_for 30 "a leader" leads

log "1. commands in a few windows"
for i in 1 2 3; do
    out=$(axctl submit --wait --wait-timeout 60 --trace-id "$TR-$i" -- sh -c "echo ran >> $marks") ||
        fail "submit $i failed: $out"
    sleep 0.7 # past the window (the next command joins the primers' window, or a new one)
done
[ "$(wc -l <"$marks")" = 3 ] || fail "commands ran $(wc -l <"$marks") times, expected 3"
some_primers() { [ "$(primers)" -ge 1 ]; }
wait_for 10 "primers on $DT" some_primers
# windows 2 and 3 each follow one that carried a dispatch
[ "$(ahead trigger)" -ge 1 ] || fail "no window was primed ahead of its predecessor's commit"

log "2. idle: no more primers, all committed"
wait_for 10 "every primer committed" all_committed
p1=$(primers)
sleep $((4 * W / 1000 + 1))
p2=$(primers)
log "$p2 primer(s) on $DT ($p1 a while before)"
[ "$p2" = "$p1" ] || fail "primers went on while idle: $p1, then $p2"
[ "$(primers_committed)" = "$p2" ] || fail "$(primers_committed) of $p2 primers committed"
[ "$p2" -le 8 ] || fail "$p2 primers for 3 windows of one command each on 2 partitions"
# each primer on a partition a dispatch record went to
topic_read "$DT" '%p %k %S\n' -X isolation.level=read_uncommitted >"$WORK/dt"
used=$(awk '$2 != "ax-primer" { print $1 }' "$WORK/dt" | sort -u | tr '\n' ' ')
primed=$(awk '$2 == "ax-primer" { print $1 }' "$WORK/dt" | sort -u | tr '\n' ' ')
for p in $primed; do
    [[ " $used" == *" $p "* ]] || fail "a primer on partition $p, where no dispatch went (dispatches: $used)"
done
stop_svc executor
skipped=$({ grep -oE '[0-9]+ partition primers skipped' "$WORK/ax-executor.log" || true; } |
    tail -n 1 | cut -d' ' -f1)
[ "$skipped" = "$p2" ] || fail "the executor skipped '${skipped}' primers, $p2 on the topic"
n_dlq=$(topic_count "$(topic dlq)")
[ "$n_dlq" = 0 ] || fail "$n_dlq record(s) dead-lettered: $(topic_read "$(topic dlq)" '%k %h\n' | head -3)"

log "3. dispatch.prime=0"
stop_svc trigger
start_svc trigger@2 --set dispatch.transaction.ms=$W --set dispatch.prime=0
start_svc executor@2 --set dispatch.transaction.ms=$W
wait_for 30 "a leader" leads
for i in 4 5; do
    out=$(axctl submit --wait --wait-timeout 60 --trace-id "$TR-$i" -- sh -c "echo ran >> $marks") ||
        fail "submit $i failed: $out"
    sleep 0.7
done
[ "$(wc -l <"$marks")" = 5 ] || fail "commands ran $(wc -l <"$marks") times, expected 5"
sleep $((2 * W / 1000 + 1))
[ "$(primers)" = "$p2" ] || fail "primers with dispatch.prime=0: $p2, then $(primers)"

log "4. dispatch.producers=1: primers after each commit, none ahead"
stop_svc trigger@2
start_svc trigger@3 --set dispatch.transaction.ms=$W --set dispatch.producers=1 --set log.level=debug
wait_for 30 "a leader" leads
for i in 6 7 8; do
    out=$(axctl submit --wait --wait-timeout 60 --trace-id "$TR-$i" -- sh -c "echo ran >> $marks") ||
        fail "submit $i failed: $out"
    sleep 0.7
done
[ "$(wc -l <"$marks")" = 8 ] || fail "commands ran $(wc -l <"$marks") times, expected 8"
more_primers() { [ "$(primers)" -gt "$p2" ]; }
wait_for 10 "primers again on $DT" more_primers
[ "$(ahead trigger@3)" = 0 ] || fail "a window primed ahead with one producer"
wait_for 10 "every primer committed" all_committed
log "ok"
