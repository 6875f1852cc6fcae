#!/bin/bash
# Sharding through the real services: static (N shards at dispatch) and
# dynamic (a size probe run with AX_SHARD_PROBE=1 prints the volume; a
# volume of 65 with shard_base 10 fans out into 7 shards), each shard with
# AX_SHARD_INDEX/AX_SHARD_TOTAL; the parent finishes when all shards have —
# SUCCESS if all did, FAILED if any failed (after its retries). A probe
# that finds no data (volume 0) finishes the parent at once, and its result
# is published on the results topic like any other. axctl instance cancel
# of a running parent (no executor runs it) cancels its running shards:
# they end CANCELLED, the parent FAILED.
. "$(dirname "$0")/lib.sh"
create_topics 2
start_all --set trigger.scan.interval.ms=100
M="$WORK/marks"; mkdir -p "$M"; chmod 777 "$M"
# a shard writes its index/total; the probe prints the volume
cat > "$WORK/shard.sh" <<SH
#!/bin/sh
if [ "\${AX_SHARD_PROBE:-}" = 1 ]; then [ -e "$M/empty" ] && echo 0 || echo 65; exit 0; fi
echo "\$AX_SHARD_INDEX/\$AX_SHARD_TOTAL" > "$M/\$AX_INSTANCE_ID"
[ -e "$M/fail-\$AX_SHARD_INDEX" ] && exit 1
[ -e "$M/slow" ] && sleep 60
exit 0
SH
chmod 755 "$WORK/shard.sh"
sql "INSERT INTO job (name, command, shard_base, max_shards, retry_max) VALUES
       ('${JOBP}dyn', ARRAY['$WORK/shard.sh'], 10, 100, 0);
     INSERT INTO job (name, command, shard_count, retry_max) VALUES
       ('${JOBP}static', ARRAY['$WORK/shard.sh'], 3, 0);
     INSERT INTO job (name, command, shard_base, max_shards, retry_max) VALUES
       ('${JOBP}capped', ARRAY['$WORK/shard.sh'], 10, 4, 0)"

parent_of() { sql "SELECT id FROM job_instance WHERE trace_id = '$1' AND parent_id IS NULL"; }
outcome_of() { sql "SELECT coalesce(outcome::text, state::text) FROM job_instance WHERE trace_id = '$1' AND parent_id IS NULL"; }
is_final() { [ "$(sql "SELECT state FROM job_instance WHERE trace_id = '$1' AND parent_id IS NULL")" = FINISHED ]; }

log "dynamic: volume 65, base 10 -> 7 shards"
t=$(axctl submit --job "${JOBP}dyn")
wait_for 60 "dynamic parent finished" is_final "$t"
p=$(parent_of "$t")
[ "$(outcome_of "$t")" = SUCCESS ] || fail "dynamic parent ended $(outcome_of "$t")"
[ "$(sql "SELECT count(*) FROM job_instance WHERE parent_id = $p")" = 7 ] \
    || fail "expected 7 shards, got $(sql "SELECT count(*) FROM job_instance WHERE parent_id = $p")"
[ "$(sql "SELECT string_agg(shard_index || '/' || shard_total, ',' ORDER BY shard_index) FROM job_instance WHERE parent_id = $p")" \
  = "0/7,1/7,2/7,3/7,4/7,5/7,6/7" ] || fail "shard indexes wrong"
for id in $(sql "SELECT id FROM job_instance WHERE parent_id = $p"); do
    [ "$(cat "$M/$id")" = "$(sql "SELECT shard_index || '/' || shard_total FROM job_instance WHERE id = $id")" ] \
        || fail "shard $id saw AX_SHARD_INDEX/TOTAL $(cat "$M/$id" 2>/dev/null)"
done
[ "$(sql "SELECT count(*) FROM job_instance WHERE parent_id = $p AND outcome = 'SUCCESS'")" = 7 ] || fail "not all shards succeeded"
fin_p=$(sql "SELECT finished_at FROM job_instance WHERE id = $p")
[ "$(sql "SELECT count(*) FROM job_instance WHERE parent_id = $p AND finished_at > '$fin_p'")" = 0 ] \
    || fail "the parent finished before a shard"
[ "$(sql "SELECT count(*) FROM job_attempt WHERE instance_id = $p AND error_class = 'probe'")" = 1 ] \
    || fail "the probe attempt is not recorded"
# ... and is the parent's only attempt (logged when it split; the shards
# end the parent, no attempt of its own is recorded again)
[ "$(sql "SELECT count(*) FROM job_attempt WHERE instance_id = $p")" = 1 ] \
    || fail "the parent has $(sql "SELECT count(*) FROM job_attempt WHERE instance_id = $p") attempts, not its probe's alone"
published() { [ -n "$(sql "SELECT 1 FROM job_instance WHERE id = $p AND result_published_at IS NOT NULL")" ]; }
wait_for 20 "parent result published" published

log "static: 3 shards"
t=$(axctl submit --job "${JOBP}static")
wait_for 60 "static parent finished" is_final "$t"
p=$(parent_of "$t")
[ "$(outcome_of "$t")" = SUCCESS ] || fail "static parent ended $(outcome_of "$t")"
[ "$(sql "SELECT string_agg(shard_index || '/' || shard_total, ',' ORDER BY shard_index) FROM job_instance WHERE parent_id = $p")" \
  = "0/3,1/3,2/3" ] || fail "static shards wrong"

log "capped by max_shards: 65 / 10 with max 4 -> 4"
t=$(axctl submit --job "${JOBP}capped")
wait_for 60 "capped parent finished" is_final "$t"
p=$(parent_of "$t")
[ "$(sql "SELECT count(*) FROM job_instance WHERE parent_id = $p")" = 4 ] || fail "cap not applied"

log "dynamic: a probe that finds no data (volume 0) -> finished, published"
touch "$M/empty"
t=$(axctl submit --job "${JOBP}dyn")
wait_for 60 "empty parent finished" is_final "$t"
p=$(parent_of "$t")
rm -f "$M/empty"
[ "$(outcome_of "$t")" = SUCCESS ] || fail "empty parent ended $(outcome_of "$t")"
[ "$(sql "SELECT count(*) FROM job_instance WHERE parent_id = $p")" = 0 ] || fail "empty parent has shards"
wait_for 20 "empty parent result published" published
on_topic() { kc -X isolation.level=read_committed -C -t "$(topic results)" -o beginning -e -q \
    -f '%k\n' 2>/dev/null | grep -qx "$p"; }
wait_for 20 "empty parent result on the results topic" on_topic

log "one failing shard fails the parent"
touch "$M/fail-1"
t=$(axctl submit --job "${JOBP}static")
wait_for 60 "failing parent finished" is_final "$t"
p=$(parent_of "$t")
[ "$(outcome_of "$t")" = FAILED ] || fail "parent with a failed shard ended $(outcome_of "$t")"
[ "$(sql "SELECT error FROM job_instance WHERE id = $p")" = "1 of 3 shards failed" ] \
    || fail "parent error: $(sql "SELECT error FROM job_instance WHERE id = $p")"

log "cancelling a running shard parent cancels its shards"
rm -f "$M/fail-1"; touch "$M/slow"
t=$(axctl submit --job "${JOBP}static")
shards_running() { [ "$(sql "SELECT count(*) FROM job_instance i JOIN job_instance s ON s.parent_id = i.id
                            WHERE i.trace_id = '$t' AND i.parent_id IS NULL AND i.worker = 'shards'
                            AND s.state = 'RUNNING'")" = 3 ]; }
wait_for 60 "3 shards running" shards_running
p=$(parent_of "$t")
axctl instance cancel "$p" >"$WORK/cancel.out" 2>&1 || { cat "$WORK/cancel.out"; fail "instance cancel of a shard parent failed"; }
cat "$WORK/cancel.out"
grep -q "instance $p is a shard parent .*asked executors to stop 3" "$WORK/cancel.out" \
    || fail "instance cancel of a shard parent does not say it stops its 3 shards"
wait_for 30 "the cancelled parent finished" is_final "$t"
[ "$(sql "SELECT string_agg(DISTINCT outcome::text, ',') FROM job_instance WHERE parent_id = $p")" = CANCELLED ] \
    || fail "shards of the cancelled parent: $(sql "SELECT string_agg(outcome::text, ',') FROM job_instance WHERE parent_id = $p")"
[ "$(outcome_of "$t")" = FAILED ] || fail "the cancelled parent ended $(outcome_of "$t")"
rm -f "$M/slow"
log ok
