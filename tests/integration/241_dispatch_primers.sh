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
# 5. A window whose commit fails while the next is begun ahead: a command
#    runs in a window that then takes a record the broker refuses (a topic
#    made with a smaller limit, as in 160_size_limits), so its commit
#    fails; the next window's transaction, begun and primed on the other
#    producer, is aborted (logged), the next transaction begins on the
#    producer that failed to commit, the refused instance is held with its
#    reason, the command ran once, a command after runs, the leader neither
#    gave up nor left a transaction open, and
#    ax_trigger_kafka_transactions_total counts exactly the three aborted.
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

log "5. a window's commit fails while the next is begun ahead"
stop_svc trigger@3
# max.message.bytes 1000 + 64 KiB: a 100,000-byte payload's record is refused
axctl --set message.max.bytes=1000 topics create --partitions 1 --group tiny >/dev/null 2>&1 \
    || fail "topics create --group tiny failed"
axctl job create "${JOBP}tiny" --group tiny -- true >/dev/null || fail "job create --group tiny failed"
head -c 100000 /dev/zero | tr '\0' x >"$WORK/p-100k"
# a long window: the command runs (its record delivered: a partition to
# prime) and the refused record joins the window well before its end
start_svc trigger@4 --set dispatch.transaction.ms=6000 --set log.level=debug \
    --set metrics.listen=127.0.0.1:0
wait_for 30 "a leader" leads
axctl submit --trace-id "$TR-9" -- sh -c "echo ran >> $marks" >/dev/null || fail "submit 9 failed"
ran9() { [ "$(wc -l <"$marks")" = 9 ]; }
wait_for 30 "command 9 ran" ran9
axctl submit --job "${JOBP}tiny" --trace-id "$TR-tiny" --payload-file "$WORK/p-100k" >/dev/null \
    || fail "submit of the tiny job failed"
DROP="the next window's transaction, begun ahead on"
dropped() { grep -q "$DROP" "$WORK/ax-trigger@4.log"; }
# if not: was the refused record in the window that ran command 9?
window_diag() {
    log "trigger@4's windows and transactions:"
    grep -E "dispatch window|Kafka transaction|refused|not committed" "$WORK/ax-trigger@4.log" | tail -n 20
    log "$TR-9: $(field "$TR-9" "state || ' dispatched ' || coalesce(dispatched_at::text, '-')")"
    log "$TR-tiny: $(field "$TR-tiny" "state || ' scheduled ' || scheduled_at::text")"
}
WAIT_DIAG=window_diag wait_for 30 "the next window's transaction aborted with the failed commit" dropped
grep "$DROP" "$WORK/ax-trigger@4.log"
held_tiny() { field "$TR-tiny" "(SELECT reason FROM instance_hold h WHERE h.instance_id = job_instance.id)" | grep -q "Kafka refused"; }
wait_for 60 "the refused instance held" held_tiny
# the producer that failed to commit begins the next transaction
failed_on=$(grep -m1 "$DROP" "$WORK/ax-trigger@4.log" | sed -E 's/.*the next begins on ([^ ]+)$/\1/')
began_on=$(sed -n "/$DROP/,\$p" "$WORK/ax-trigger@4.log" | grep -m1 "Kafka transaction begun on" |
    sed -E 's/.*begun on ([^ ]+)$/\1/')
[ -n "$failed_on" ] && [ "$began_on" = "$failed_on" ] ||
    fail "after the abort the next transaction began on '$began_on', not on '$failed_on'"
out=$(axctl submit --wait --wait-timeout 30 --trace-id "$TR-10" -- sh -c "echo ran >> $marks") ||
    fail "submit 10 after the failed commit failed: $out"
[ "$(wc -l <"$marks")" = 10 ] || fail "commands ran $(wc -l <"$marks") times, expected 10"
for i in 9 10; do
    [ "$(field "$TR-$i" "state || '/' || outcome || '/' || attempt")" = "FINISHED/SUCCESS/1" ] ||
        fail "$TR-$i: $(field "$TR-$i" "state || '/' || outcome || '/' || attempt")"
done
! grep -q "giving up leadership" "$WORK/ax-trigger@4.log" || fail "the leader gave up leadership"
! grep -q "aborting what is open" "$WORK/ax-trigger@4.log" || fail "a Kafka transaction was left open"
# ax_trigger_kafka_transactions_total: exactly three aborted (the window,
# the one begun ahead, the due scan's that the broker refused again); the
# commits since counted too
[ -n "$(metrics_port trigger@4)" ] || fail "ax-trigger@4 serves no metrics"
txns() { metric trigger@4 "ax_trigger_kafka_transactions_total{result=\"$1\"}"; }
counted() { local c; c=$(txns committed); [ "${c:-0}" -ge 1 ]; }
wait_for 10 "a committed transaction counted" counted
[ "$(txns aborted)" = 3 ] || fail "$(txns aborted) aborted transactions counted, not 3"
log "transactions: $(txns aborted) aborted, $(txns committed) committed"
log "ok"
