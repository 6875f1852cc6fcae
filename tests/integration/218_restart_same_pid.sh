#!/usr/bin/env bash
# An executor with a fixed worker.id killed mid-run and restarted with the
# same pid (pid 1 of a pid namespace, as in a container): the sweep reports
# its lease lost once expired, since the process beating under the id
# started after the claim (its first heartbeat sets the worker row's
# started_at, whatever its pid). The heartbeat is made slow (20 s, stale
# after 60 s), so only that clause can sweep it within the wait here:
# without the first heartbeat's started_at (the row kept while the pid was
# the same) the instance stayed RUNNING until the 10-minute fallback.
source "$(dirname "$0")/lib.sh"
unshare --pid --fork --kill-child true 2>/dev/null || it_skip "no pid namespaces here (unshare --pid)"
create_topics 2
WID="it-${T}-$$-fixed"
fast=(--set executor.lease.min.ms=1000 --set trigger.sweep.interval.ms=300
      --set executor.heartbeat.ms=20000)
start_svc trigger "${fast[@]}"
start_svc callback "${fast[@]}"

# ax-executor as pid 1 of a pid namespace of its own (its commands die with it)
start_ex_pid1() {
    unshare --pid --fork --kill-child=KILL "$AX_BIN/services/executor/ax-executor" \
        "${fast[@]}" --set worker.id="$WID" >>"$WORK/ax-executor.log" 2>&1 &
    SVC_PID[executor]=$!
    log "started ax-executor as pid 1 of a pid namespace (unshare pid ${SVC_PID[executor]})"
}
beats() { [ "$(sql "SELECT pid || '/' || state FROM worker WHERE id = '$WID'")" = "1/running" ]; }

start_ex_pid1
wait_for 30 "the executor's heartbeat as pid 1" beats
trace=$(axctl submit --timeout 60000 -- sleep 47)
wait_for 30 "instance running" state_is "$trace" RUNNING
row() { sql "SELECT $1 FROM worker WHERE id = '$WID'"; }
started0=$(row started_at)

stop_svc executor KILL
beat0=$(row heartbeat_at)
start_ex_pid1
newbeat() { beats && [ "$(row heartbeat_at)" != "$beat0" ]; }
wait_for 30 "the restarted executor's first heartbeat (pid 1 again)" newbeat

wait_for 40 "the lost instance swept (not at the 10-minute fallback)" finished "$trace"
[ "$(row started_at)" != "$started0" ] || fail "the worker row's started_at is the killed process's"
[ "$(field "$trace" outcome)" = TIMEOUT ] || fail "outcome $(field "$trace" outcome)"
[ "$(field "$trace" error_class)" = worker_lost ] || fail "error class $(field "$trace" error_class)"
axctl submit --wait --wait-timeout 60 -- true >/dev/null || fail "no progress after the restart"
log "OK: restarted as pid 1 under the same worker.id, the old lease swept once expired"
