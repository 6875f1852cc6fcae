#!/usr/bin/env bash
# A leader that cannot complete its Kafka transactions gives up leadership
# instead of keeping a lease it cannot use (issue #11, defect 1). The
# leader's transactional producer is fenced from outside (another producer
# of the same transactional.id runs init_transactions, taking no lease):
# its next commit fails fatally, it logs that it gives up, releases the
# lease, and the standby takes over at once — well before the 30 s lease
# would have expired (before, the leader only dropped leadership and the
# standby waited for the lease to run out). Then the new leader's second
# transactional id (<role>.1, dispatch.producers) is fenced the same way,
# and the first trigger leads again. A fixed-rate job's every nominal time
# is still fired once and runs once. t1's metrics count the transaction
# the fence ended as aborted (ax_trigger_kafka_transactions_total).
source "$(dirname "$0")/lib.sh"
create_topics 2
LEASE=(--set trigger.lease.ms=30000)
ROLE=$(topic trigger)

start_svc trigger@1 "${LEASE[@]}" --set worker.id=t1 --set metrics.listen=127.0.0.1:0
wait_for 20 "t1 leads" leader_is t1
start_svc trigger@2 "${LEASE[@]}" --set worker.id=t2
start_svc executor
start_svc callback
tick_job 300
wait_for 20 "fires under t1" more_than 5

log "fencing t1's transactional producer ($ROLE)"
fenced_at=$(date +%s.%N)
"$AX_BIN/tests/it_fence" "$KCAT_CONF" "$ROLE" || fail "it_fence failed"
wait_for 15 "t1 gives up leadership" grep -q "giving up leadership" "$WORK/ax-trigger@1.log"
grep "giving up leadership" "$WORK/ax-trigger@1.log"
grep -q "lease released" "$WORK/ax-trigger@1.log" || fail "t1 did not release the lease"
wait_for 10 "t2 takes over" leader_is t2
# t1's transaction that the fence ended is counted aborted: the failed
# commit, or the window open when its producers went (with the next one
# begun ahead on the other id, two)
aborted_t1() { metric trigger@1 'ax_trigger_kafka_transactions_total{result="aborted"}'; }
t1_counted() { local a; a=$(aborted_t1); [ "${a:-0}" -ge 1 ]; }
wait_for 10 "t1's aborted transaction counted" t1_counted
[ "$(aborted_t1)" -le 2 ] || fail "t1 counted $(aborted_t1) aborted transactions for one fence"
log "t1: $(aborted_t1) aborted, $(metric trigger@1 'ax_trigger_kafka_transactions_total{result="committed"}') committed"
took=$(echo "$(date +%s.%N) - $fenced_at" | bc)
log "t2 leads ${took}s after the fence (the lease is 30 s)"
n=$(fired); wait_for 20 "fires under t2" more_than $((n + 5))

# The leader's second transactional id (dispatch.producers = 2, the
# default: its transactions take turns between <role> and <role>.1) is
# used and fenced the same way: t2 gives up, t1 leads again.
log "fencing t2's second transactional producer ($ROLE.1)"
"$AX_BIN/tests/it_fence" "$KCAT_CONF" "$ROLE.1" || fail "it_fence failed"
wait_for 15 "t2 gives up leadership" grep -q "giving up leadership" "$WORK/ax-trigger@2.log"
grep "giving up leadership" "$WORK/ax-trigger@2.log"
wait_for 30 "t1 leads again" leader_is t1
n=$(fired); wait_for 20 "fires under t1 again" more_than $((n + 5))
sql "UPDATE job SET enabled = false WHERE id = $JID"
sleep 2

gaps=$(sql "SELECT count(*) FROM (SELECT nominal_time - lag(nominal_time) OVER (ORDER BY nominal_time) AS d
            FROM job_fire WHERE job_id = $JID) x WHERE d IS NOT NULL AND d <> interval '300 ms'")
[ "$gaps" = 0 ] || fail "$gaps gap(s) in the fixed-rate sequence"
[ "$(sql "SELECT count(*) FROM job_fire WHERE job_id = $JID AND decision <> 'fired'")" = 0 ] \
    || fail "nominal times not fired across the change of leader"
done_all() { [ "$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID AND state <> 'FINISHED'")" = 0 ]; }
wait_for 60 "every fire's instance finished" done_all
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID AND outcome = 'SUCCESS'")" = "$(fired)" ] \
    || fail "not every fire ran once"
for s in trigger@1 trigger@2 executor callback; do
    kill -0 "${SVC_PID[$s]}" || fail "ax-$s died"
done
log "ok"
