#!/bin/bash
# Recovery from the results topic on an upgraded deployment and after a
# crash during recovery. 300,000 records are on the results topic (partition
# 0) before the first start: what the code before migration 015 published
# (their instances have result_published_at set). With ax_results_offset
# empty the first publisher stores the topic's current end and reads none
# of it. Then, the stored offsets put back to 0, a recovery reads the whole
# topic in slices and saves its position with every chunk: a publisher
# killed (SIGKILL) mid-way leaves a position between 0 and the end, and
# the next one resumes from it instead of starting again. Afterwards a new
# result is published exactly once.
. "$(dirname "$0")/lib.sh"
create_topics 2
R=$(topic results) N=300000 BASE=9000000000000 # keys no instance of this database has
seq $((BASE + 1)) $((BASE + N)) | sed 's/$/:x/' | kc -P -t "$R" -p 0 -K: -X linger.ms=50 \
    || fail "cannot fill $R"
pos() { sql "SELECT coalesce((SELECT next_offset FROM ax_results_offset WHERE topic = '$R' AND partition = $1), -1)"; }

log "upgrade: no stored offsets -> the current end, nothing read"
start_svc callback@1
wait_for 30 "the first recovery" grep -q "read to its end" "$WORK/ax-callback@1.log"
[ "$(pos 0)" = "$N" ] && [ "$(pos 1)" = 0 ] || fail "stored offsets $(pos 0)/$(pos 1), not the end $N/0"
grep -q "no reconciled offsets for $R yet: its current end stored" "$WORK/ax-callback@1.log" \
    || fail "the first recovery did not start at the end"
grep -q "read to its end (0 result(s) since" "$WORK/ax-callback@1.log" \
    || fail "the first recovery read records published before the upgrade: $(grep "read to its end" "$WORK/ax-callback@1.log")"
stop_svc callback@1

log "a recovery killed mid-way resumes from the position it saved"
sql "UPDATE ax_results_offset SET next_offset = 0 WHERE topic = '$R'" >/dev/null
start_svc callback@2
midway() { local p; p=$(pos 0); [ "$p" -gt 0 ] && [ "$p" -lt "$N" ]; }
until midway; do
    [ "$(pos 0)" = "$N" ] && fail "the recovery saved no position before its end"
    kill -0 "${SVC_PID[callback@2]}" 2>/dev/null || fail "ax-callback@2 exited"
    sleep 0.02
done
stop_svc callback@2 KILL
saved=$(pos 0)
log "killed with the position at $saved of $N"
start_svc callback@3
wait_for 60 "the resumed recovery" grep -q "read to its end" "$WORK/ax-callback@3.log"
[ "$(pos 0)" = "$N" ] || fail "stored offset $(pos 0) after the recovery, not $N"
read_n=$(sed -n 's/.*read to its end (\([0-9]*\) result(s) since.*/\1/p' "$WORK/ax-callback@3.log" | head -1)
[ "$read_n" -le $((N - saved)) ] || fail "the resumed recovery read $read_n records, more than the $((N - saved)) after $saved"

log "a new result: published once"
start_svc trigger --set trigger.scan.interval.ms=100
start_svc executor
t=$(axctl submit -- true)
wait_for 30 "finished and published" finished "$t"
id=$(field "$t" id)
[ "$(kc -X isolation.level=read_committed -C -t "$R" -o beginning -e -q -f '%k\n' 2>/dev/null | grep -cx "$id")" = 1 ] \
    || fail "instance $id is not on $R exactly once"
log ok
