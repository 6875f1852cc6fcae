#!/usr/bin/env bash
# Triggers on test hosts of their own (network namespaces, helpers/netns.sh),
# trigger.lease.ms = 4000: t1 leads on host a, t2 stands by on host b; a
# fixed-rate job fires every 200 ms (executor and callback on this host).
# 1. Hosts a and b are partitioned from each other (everything between them
#    dropped) for 2 x the lease, both still reaching PostgreSQL and Kafka:
#    triggers only meet through the lease row, so fires go on (and the
#    leadership stays where it is, unless a loop starved: logged).
# 2. The leader's host is cut off from PostgreSQL (packets dropped; Kafka
#    still reachable): the standby takes over once the lease expired; the
#    old leader stops dispatching (it notices once its loop runs again, at
#    the latest when the partition heals) and records nothing under its
#    epoch after the takeover.
# Across both, asserted from the job_fire ledger and the dispatch topic: no
# nominal time fired twice, one instance per fired time, every instance on
# the dispatch topic and none committed there twice (lib.sh, dispatch_once),
# no instance run twice, no gap.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/helpers/netns.sh"
netns_require

LEASE=4000
create_topics 2
netns_host a
netns_host b
ROLE=$(topic trigger)

start_svc_in a trigger@1 --set trigger.lease.ms=$LEASE --set worker.id=t1
wait_for 30 "t1 leads" leader_is t1
start_svc_in b trigger@2 --set trigger.lease.ms=$LEASE --set worker.id=t2
start_svc executor
start_svc callback
tick_job
wait_for 30 "fires under t1" more_than 10
e1=$(leader_holder | cut -d' ' -f2)

log "1. hosts a and b partitioned from each other"
# (the relays listen on each pair's host side)
netns_reaches a "${NETNS_HOSTIP[b]}" "$PGPORT" || fail "host a cannot reach host b's pair"
netns_isolate a b
netns_reaches a "${NETNS_HOSTIP[b]}" "$PGPORT" && fail "host a still reaches host b's pair"
netns_reaches b "${NETNS_HOSTIP[a]}" "$PGPORT" && fail "host b still reaches host a's pair"
n=$(fired)
sleep $((2 * LEASE / 1000))
[ "$(leader_holder)" = "t1 $e1" ] || log "leadership moved while only the triggers' hosts were partitioned: $(leader_holder) (a starved loop steps down)"
more_than $((n + 10)) || fail "fires stopped while the triggers' hosts were partitioned"
netns_heal a
netns_heal b

has_leader() { [ -n "$(leader_holder)" ]; }
wait_for 30 "a leader" has_leader
read -r L e1 <<<"$(leader_holder)"
[ "$L" = t1 ] && { LH=a SH=b S=t2 LN=1; } || { LH=b SH=a S=t1 LN=2; }
log "2. host $LH (the leader $L's) cut off from PostgreSQL, not from Kafka"
netns_cut "$LH" pg
T_CUT=$(date +%s%3N)
wait_for 30 "$S takes over" leader_is "$S"
e2=$(leader_holder | cut -d' ' -f2)
[ "$e2" -gt "$e1" ] || fail "epoch did not increase ($e1 -> $e2)"
took=$(sql "SELECT acquired_at FROM ax_leader WHERE role = '$ROLE'")
T_TOOK=$(sql "SELECT (extract(epoch FROM acquired_at) * 1000)::bigint FROM ax_leader WHERE role = '$ROLE'")
n=$(fired)
wait_for 30 "fires under $S" more_than $((n + 10))
T_FIRST=$(sql "SELECT (extract(epoch FROM min(decided_at)) * 1000)::bigint FROM job_fire WHERE job_id = $JID AND epoch = $e2")
netns_heal "$LH"
lost_after() { awk -v t="$(date -u -d @"$((T_CUT / 1000))" +%Y-%m-%dT%H:%M:%S)" '$1 >= t && /leadership lost/' "$WORK/ax-trigger@$LN.log"; }
has_lost() { [ -n "$(lost_after)" ]; }
wait_for 30 "$L notices it lost the lease" has_lost
lost_line=$(lost_after | head -n 1)
T_LOST=$(date -d "$(echo "$lost_line" | cut -d' ' -f1)" +%s%3N)
log "$L: $(echo "$lost_line" | sed 's/.*leadership lost/leadership lost/'), $((T_LOST - T_CUT)) ms after the cut"
n=$(fired)
wait_for 30 "fires go on" more_than $((n + 5))
sql "UPDATE job SET enabled = false WHERE id = $JID"
sleep 1

log "no nominal time fired twice, nothing under the stale epoch after the takeover"
stale=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $JID AND epoch = $e1 AND decided_at >= '$took'")
[ "$stale" = 0 ] || fail "$stale fire(s) recorded under the stale epoch $e1 after the takeover"
gaps=$(sql "SELECT count(*) FROM (SELECT nominal_time - lag(nominal_time) OVER (ORDER BY nominal_time) AS d
            FROM job_fire WHERE job_id = $JID) x WHERE d IS NOT NULL AND d <> interval '200 ms'")
[ "$gaps" = 0 ] || fail "$gaps gap(s) or repeat(s) in the fixed-rate sequence"
[ "$(sql "SELECT count(*) FROM job_fire WHERE job_id = $JID AND decision <> 'fired'")" = 0 ] ||
    fail "times skipped across the failover (all within the 60 s misfire threshold)"
inst=$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID")
[ "$inst" = "$(fired)" ] || fail "$inst instances for $(fired) fired times"
dup=$(sql "SELECT count(*) FROM (SELECT nominal_time FROM job_instance WHERE job_id = $JID
           GROUP BY nominal_time HAVING count(*) > 1) x")
[ "$dup" = 0 ] || fail "$dup nominal time(s) with more than one instance"
all_done() { [ "$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID AND (state <> 'FINISHED' OR outcome <> 'SUCCESS')")" = 0 ]; }
wait_for 60 "every instance finished SUCCESS" all_done
twice=$(sql "SELECT count(*) FROM (SELECT instance_id FROM job_attempt a JOIN job_instance i ON i.id = a.instance_id
             WHERE i.job_id = $JID GROUP BY instance_id HAVING count(*) > 1) x")
[ "$twice" = 0 ] || fail "$twice instance(s) ran more than once"
dispatch_once "$(topic dispatch)" "$inst"
log "OK: $inst times fired once each over epochs $e1 -> $e2; $S took over $((T_TOOK - T_CUT)) ms after the cut (lease $LEASE ms), first fire under it $((T_FIRST - T_CUT)) ms after the cut"
