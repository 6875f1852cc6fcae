#!/usr/bin/env bash
# Fencing of an executor cut off from PostgreSQL (docs/ARCHITECTURE.md,
# "Fencing"). Two executors on test hosts of their own (network namespaces,
# helpers/netns.sh), executor.lease.min.ms = max = 4000, share 200 sleeping
# commands (sh -c 'sleep 15; true', two processes per process group). Once
# every instance is RUNNING, host a is cut off from PostgreSQL (its packets
# dropped, not refused: its executor's statements hang) but not from Kafka,
# for 2 x the lease; then healed. Asserted:
# - host a's handlers were stopped, process groups and all, before the
#   earliest lease of its instances (as PostgreSQL held it after the cut)
#   expired: the first moment none of those groups has a process left comes
#   before that expiry;
# - so no instance was RUNNING on two hosts at once: every later attempt of
#   an instance host a ran started (job_attempt.started_at, wherever it
#   ran) after host a's handlers were gone; and no two attempts of one
#   instance overlap in job_attempt;
# - every instance ends once: FINISHED SUCCESS, published, its attempts
#   numbered 1..n without a gap.
# Without the fence (the executor before it stopped nothing while its loop
# waited for PostgreSQL) the first assertion fails: the groups live on
# until the partition heals.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/helpers/netns.sh"
netns_require

N=${N:-200}
LEASE=4000
SLEEP=15
create_topics 4
netns_host a
netns_host b

EX=(--set executor.lease.min.ms=$LEASE --set executor.lease.max.ms=$LEASE
    --set executor.heartbeat.ms=500 --set executor.slots=$N --set executor.queue=$N)
start_svc trigger --set trigger.sweep.interval.ms=500 --set trigger.sweep.grace.ms=1000
start_svc callback
start_svc_in a executor@a "${EX[@]}" --set worker.id=ex-a
start_svc_in b executor@b "${EX[@]}" --set worker.id=ex-b
PA=${SVC_PID[executor@a]}

held() { # lane partitions an executor holds now (from its log)
    awk '/kafka: [0-9]+ partition\(s\) assigned/ { for (i = 1; i <= NF; i++) if ($i == "kafka:") n += $(i + 1) }
         /kafka: [0-9]+ partition\(s\) revoked/  { for (i = 1; i <= NF; i++) if ($i == "kafka:") n -= $(i + 1) }
         END { print n + 0 }' "$WORK/ax-$1.log" 2>/dev/null || echo 0
}
both_hold() { [ "$(held executor@a)" -gt 0 ] && [ "$(held executor@b)" -gt 0 ] &&
              [ $(( $(held executor@a) + $(held executor@b) )) -eq 20 ]; }
wait_for 60 "both executors hold partitions" both_hold

axctl job create "${JOBP}sleep" --no-schedule --retries 3 --retry-initial 200 --timeout 120000 \
    -- sh -c "sleep $SLEEP; true" >/dev/null
JID=$(sql "SELECT id FROM job WHERE name = '${JOBP}sleep'")
axctl submit --job "${JOBP}sleep" --count "$N" >/dev/null || fail "submit failed"
running() { [ "$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID AND state = 'RUNNING'")" = "$N" ]; }
wait_for 60 "all $N instances RUNNING" running

groups_of() { ps -e -o pgid=,ppid=,pid= | awk -v p="$1" '$2 == p { print $1 }' | sort -u; }
live_pgids() { ps -e -o pgid=,stat= | awk '$2 !~ /^Z/ { print $1 }' | sort -u; }
alive() { # how many of the process groups in $1 (a file) have a live process left
    # (a killed leader stays a zombie until its executor's loop reaps it)
    live_pgids | grep -cxFf "$1" || true
}
held_a=$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID AND worker = 'ex-a' AND state = 'RUNNING'")
[ "$held_a" -gt 0 ] || fail "host a holds no instance"
# (an instance is RUNNING in PostgreSQL just before its command is spawned)
spawned() { groups_of "$PA" >"$WORK/groups-a"; [ "$(wc -l <"$WORK/groups-a")" = "$held_a" ]; }
wait_for 30 "host a runs a process group for each of its $held_a instances" spawned
NA=$(wc -l <"$WORK/groups-a")
log "host a runs $NA process groups, $held_a instances"
[ "$(alive "$WORK/groups-a")" = "$NA" ] || fail "host a's groups are not all alive"
sql "SELECT id || ' ' || attempt FROM job_instance WHERE job_id = $JID AND worker = 'ex-a'" >"$WORK/inst-a"

netns_cut a pg
T_CUT=$(date +%s%3N)
sleep 0.5 # what the relays had carried before the cut has arrived
# the leases of host a's instances as PostgreSQL holds them: no renewal can come
E_MIN=$(sql "SELECT (extract(epoch FROM min(lease_expires_at)) * 1000)::bigint FROM job_instance
             WHERE job_id = $JID AND worker = 'ex-a' AND state = 'RUNNING'")
log "earliest lease of host a's instances expires $((E_MIN - T_CUT)) ms after the cut"

T_GONE=
until [ "$(date +%s%3N)" -ge $((T_CUT + 2 * LEASE)) ]; do
    if [ -z "$T_GONE" ] && [ "$(alive "$WORK/groups-a")" = 0 ]; then
        T_GONE=$(date +%s%3N)
        log "host a's process groups all gone $((T_GONE - T_CUT)) ms after the cut"
    fi
    sleep 0.05
done
left=$(alive "$WORK/groups-a")
netns_heal a
T_HEAL=$(date +%s%3N)
[ -n "$T_GONE" ] || fail "$left of host a's $NA process groups still ran after 2 x the lease cut off from PostgreSQL"
[ "$T_GONE" -lt "$E_MIN" ] ||
    fail "host a's handlers were gone $((T_GONE - E_MIN)) ms after its earliest lease expired"
grep -q "process group .* killed" "$WORK/ax-executor@a.log" || fail "no fence kill logged on host a"

done_all() { [ "$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID AND state = 'FINISHED'
                        AND result_published_at IS NOT NULL")" = "$N" ]; }
wait_for 120 "all $N instances finished" done_all
# the partition healed: when host a's executor started a command again
T_BACK=$(sql "SELECT coalesce((extract(epoch FROM min(started_at)) * 1000)::bigint, 0) FROM job_attempt t
              JOIN job_instance i ON i.id = t.instance_id
              WHERE i.job_id = $JID AND t.worker = 'ex-a' AND t.started_at > to_timestamp($T_HEAL / 1000.0)")
[ "$T_BACK" -gt 0 ] && back="host a started commands again $((T_BACK - T_HEAL)) ms after the heal" ||
    back="host a started no command after the heal"
log "$back"

log "no attempt of host a's instances began before host a's handlers were gone"
awk '{ print "(" $1 "," $2 ")" }' "$WORK/inst-a" | paste -sd, >"$WORK/inst-a.sql"
early=$(sql "SELECT count(*) FROM job_attempt t JOIN (VALUES $(cat "$WORK/inst-a.sql")) AS a(id, att)
             ON t.instance_id = a.id AND t.attempt > a.att
             WHERE t.started_at < to_timestamp($T_GONE / 1000.0)")
[ "$early" = 0 ] || fail "$early attempt(s) began elsewhere while host a's handlers still ran"
later=$(sql "SELECT count(DISTINCT t.instance_id) FROM job_attempt t JOIN (VALUES $(cat "$WORK/inst-a.sql")) AS a(id, att)
             ON t.instance_id = a.id AND t.attempt > a.att")
[ "$later" = "$held_a" ] || fail "only $later of host a's $held_a instances ran again"
overlap=$(sql "SELECT count(*) FROM job_attempt x JOIN job_attempt y ON x.instance_id = y.instance_id
               AND x.attempt < y.attempt JOIN job_instance i ON i.id = x.instance_id
               WHERE i.job_id = $JID AND y.started_at < x.finished_at")
[ "$overlap" = 0 ] || fail "$overlap pair(s) of attempts of one instance overlap"

log "every instance ended once"
bad=$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID AND (outcome IS DISTINCT FROM 'SUCCESS'
           OR attempt <> (SELECT count(*) FROM job_attempt t WHERE t.instance_id = job_instance.id)
           OR attempt <> (SELECT max(attempt) FROM job_attempt t WHERE t.instance_id = job_instance.id))")
[ "$bad" = 0 ] || fail "$bad instance(s) did not end once in SUCCESS with attempts 1..n"
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_id = $JID")" = "$N" ] || fail "instance count"
sw=$(sql "SELECT count(*) FROM job_attempt t JOIN job_instance i ON i.id = t.instance_id
          WHERE i.job_id = $JID AND t.error_class = 'worker_lost'")
log "OK: $NA groups on host a stopped $((T_GONE - T_CUT)) ms after the cut, $((E_MIN - T_GONE)) ms before the first lease expired; $sw attempts swept (worker_lost), all $N instances SUCCESS once; $back"
