#!/usr/bin/env bash
# axctl instance cancel of a RUNNING instance and of a claimed one waiting
# in its pool (LOCKED, the pool's one slot taken): the executor's cancel
# poll (services/executor/lease.c, every 200 ms among the runs claimed or
# started at least 200 ms ago) stops the running command and reports the
# waiting claim, each CANCELLED within two seconds of the request — long
# before the lease renewal (executor.lease.min.ms/3; a minute for a queued
# claim) would have delivered it — and the job's next instance runs.
source "$(dirname "$0")/lib.sh"
create_topics 2
start_svc trigger --set trigger.scan.interval.ms=100
# one command slot: the second instance waits claimed in the pool's queue;
# lease renewals far away (a minute), so only the poll can deliver a cancel
start_svc executor --set executor.slots=1 --set executor.lease.min.ms=180000
start_svc callback

tag="cx$$"
axctl submit --trace-id "$tag-run" -- sleep 60 >/dev/null || fail "submit run"
wait_for 30 "the first RUNNING" state_is "$tag-run" RUNNING
axctl submit --trace-id "$tag-wait" -- sleep 60 >/dev/null || fail "submit wait"
wait_for 30 "the second claimed (LOCKED)" state_is "$tag-wait" LOCKED
sleep 0.5 # both older than one poll interval, and younger ones too below

id_of() { field "$1" id; }
cancelled_in() { # cancelled_in TRACE: CANCELLED within 2 s of the request
    local id t0
    id=$(id_of "$1")
    t0=$(date +%s%N)
    axctl instance cancel "$id" >/dev/null || fail "instance cancel $id ($1)"
    wait_for 10 "$1 FINISHED" state_is "$1" FINISHED
    local ms=$((($(date +%s%N) - t0) / 1000000))
    [ "$(field "$1" outcome)" = CANCELLED ] || fail "$1: outcome $(field "$1" outcome)"
    log "$1: CANCELLED after $ms ms"
    [ "$ms" -lt 2000 ] || fail "$1: CANCELLED only after $ms ms (the poll looks every 200 ms)"
}
log "1. the claimed instance waiting in the pool"
cancelled_in "$tag-wait"
log "2. the running command"
cancelled_in "$tag-run"
[ "$(field "$tag-run" error_class)" = cancelled ] || fail "the run's error class: $(field "$tag-run" error_class)"

log "3. the slot is free again: a next instance runs to its end"
axctl submit --trace-id "$tag-next" -- true >/dev/null || fail "submit next"
wait_for 30 "the next FINISHED" state_is "$tag-next" FINISHED
[ "$(field "$tag-next" outcome)" = SUCCESS ] || fail "next: $(field "$tag-next" outcome)"
log "ok"
