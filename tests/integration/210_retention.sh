#!/usr/bin/env bash
# The leader's retention sweep (services/trigger/retention.c): FINISHED and
# published instances older than retention.finished.ms disappear with their
# state rows, attempts and submission keys; unpublished, unfinished ones and
# the finished child of a live parent stay; fire-ledger rows older than
# retention.ledger.ms go except each job's latest (a deleted job's latest
# too); a submission key inside its window (its instance still kept) still
# deduplicates, one whose instance was deleted does not (the documented
# window); a submit-topic watermark that did not move for
# retention.finished.ms goes. Old rows are made
# by moving finished_at / decided_at back an hour, so nothing here depends
# on how fast the sweep runs.
source "$(dirname "$0")/lib.sh"
create_topics 3
start_all --set retention.finished.ms=1800000 --set retention.ledger.ms=1800000 \
          --set retention.batch=50 --set retention.interval.ms=200

P="ret-$$-$RANDOM"
# A live parent (SCHEDULED, an hour away) with a finished, published child
# created and finished an hour ago (first: ids grow with creation time).
parent=$(sql "INSERT INTO job_instance (state, due_at, timeout_ms, trace_id, idempotency_key, command)
              VALUES ('SCHEDULED', now() + interval '1 hour', 1000, '$P-parent', '$P-parent', '{true}')
              RETURNING id")
sql "INSERT INTO job_instance (state, outcome, due_at, finished_at, result_published_at, timeout_ms,
                               trace_id, idempotency_key, command, parent_id, scheduled_at)
     VALUES ('FINISHED', 'SUCCESS', now() - interval '2 hours', now() - interval '1 hour',
             now() - interval '1 hour', 1000, '$P-child', '$P-child', '{true}', $parent, now() - interval '2 hours')" >/dev/null

# kold first, ingested before the 300: the sweep walks ids in order and
# starts over at the first young row (ids grow with creation time), so an
# instance made old by hand must have a lower id than the young ones (in
# one batch of the ingest, ids follow the batch's order).
axctl submit --idempotency-key "$P-kold" --trace-id "$P-kold" -- true >/dev/null
kold_in() { [ -n "$(sql "SELECT id FROM instance_def WHERE trace_id = '$P-kold'")" ]; }
wait_for 30 "the instance of kold" kold_in
axctl submit --count 300 --trace-id "$P" -- true >/dev/null
axctl submit --idempotency-key "$P-knew" --trace-id "$P-knew" -- true >/dev/null
done_count() { sql "SELECT count(*) FROM instance WHERE trace_id LIKE '$P%'
                    AND state = 'FINISHED' AND result_published_at IS NOT NULL"; }
all_done() { [ "$(done_count)" = 303 ]; } # and the child
wait_for 120 "the 302 instances finished and published" all_done
# Unfinished: due in an hour.
axctl submit --delay 3600000 --trace-id "$P-later" -- true >/dev/null
later_in() { [ -n "$(sql "SELECT id FROM instance WHERE trace_id = '$P-later'")" ]; }
wait_for 30 "the delayed instance" later_in
# The first 200 of the 300 and kold finished an hour ago; of those, the
# first 20 are not published yet.
ids=$(sql "SELECT string_agg(id::text, ',' ORDER BY id) FROM (SELECT id FROM instance_def
           WHERE trace_id LIKE '$P-%' AND trace_id ~ '^$P-[0-9]+\$' ORDER BY id LIMIT 200) x")
unpub=$(sql "SELECT string_agg(id::text, ',' ORDER BY id) FROM (SELECT id FROM instance_def
             WHERE id IN ($ids) ORDER BY id LIMIT 20) x")
kold=$(sql "SELECT id FROM instance_def WHERE trace_id = '$P-kold'")
old="$ids,$kold"
[ "$(sql "SELECT count(*) FROM job_attempt WHERE instance_id IN ($old)")" = 201 ] \
    || fail "expected one attempt per old instance"
# (unpublished: neither marked alone nor in a results batch marked
# published, 023_publish_per_batch)
sql "UPDATE instance_state SET finished_at = now() - interval '1 hour',
        result_published_at = CASE WHEN id IN ($unpub) THEN NULL ELSE now() - interval '1 hour' END,
        result_batch = CASE WHEN id IN ($unpub) THEN NULL ELSE result_batch END
     WHERE id IN ($old)" >/dev/null
sql "UPDATE instance_def SET scheduled_at = now() - interval '2 hours' WHERE id IN ($old)" >/dev/null
# The results batches marked published that hold old instances
# (023_publish_per_batch): each goes with the last instance naming it.
batches() { sql "SELECT count(*) FROM ax_result_batch b WHERE b.published_at IS NOT NULL
                 AND b.ids && '{$old}'::bigint[] ${1:-}"; }
[ "$(batches)" -ge 1 ] || fail "no published results batch holds the old instances"

# The ledger: job a has six rows, five an hour old; job b three, all old.
ja="${JOBP}a" jb="${JOBP}b"
axctl job create "$ja" -- true >/dev/null
axctl job create "$jb" -- true >/dev/null
for j in "$ja" "$jb"; do
    sql "INSERT INTO job_fire (job_id, nominal_time, decision, epoch, decided_at)
         SELECT j.id, now() - interval '2 hours' + g * interval '1 minute', 'skipped_misfire', 1,
                CASE WHEN j.name = '$ja' AND g = 6 THEN now() ELSE now() - interval '1 hour' END
         FROM job j, generate_series(1, CASE WHEN j.name = '$ja' THEN 6 ELSE 3 END) g
         WHERE j.name = '$j'" >/dev/null
done
# Job c, deleted, with three old ledger rows: a deleted job's rows
# (026_job_delete_keeps_history: its delete leaves them) all go once old,
# its latest too; and one young row of it stays until it is old.
# The job is deleted first and its rows written after, with their final
# times in one statement, so no sweep sees them while the job exists (the
# young row's nominal time is the earliest: the latest is an old one).
jc="${JOBP}c"
axctl job create "$jc" -- true >/dev/null
jcid=$(sql "SELECT id FROM job WHERE name = '$jc'")
axctl job delete "$jc" >/dev/null || fail "job delete $jc"
sql "INSERT INTO job_fire (job_id, nominal_time, decision, epoch, decided_at)
     SELECT $jcid, CASE WHEN g = 4 THEN now() - interval '3 hours'
                        ELSE now() - interval '2 hours' + g * interval '1 minute' END,
            'skipped_misfire', 1,
            CASE WHEN g = 4 THEN now() ELSE now() - interval '1 hour' END
     FROM generate_series(1, 4) g" >/dev/null

gone() { [ "$(sql "SELECT count(*) FROM instance_def WHERE id IN ($old) AND id NOT IN ($unpub)")" = 0 ]; }
wait_for 60 "the old published instances deleted" gone
# A submit-topic watermark (018_hot_writes) that stood still for the
# retention goes like a submission key; one that moved stays.
wm() { sql "SELECT count(*) FROM submit_offset WHERE topic = '$(topic submit)'"; }
[ "$(wm)" -ge 1 ] || fail "no consumed-offset watermark for $(topic submit)"
still=$(sql "SELECT min(partition) FROM submit_offset WHERE topic = '$(topic submit)'")
moved=$(($(wm) - 1))
sql "UPDATE submit_offset SET updated_at = now() - interval '1 hour'
     WHERE topic = '$(topic submit)' AND partition = $still" >/dev/null
wm_gone() { [ "$(wm)" = $moved ]; }
wait_for 60 "the watermark that stood still deleted" wm_gone
fires() { [ "$(sql "SELECT count(*) FROM job_fire f JOIN job j ON j.id = f.job_id WHERE j.name IN ('$ja', '$jb')")" = 2 ] &&
          [ "$(sql "SELECT count(*) FROM job_fire WHERE job_id = $jcid")" = 1 ]; }
wait_for 60 "the old ledger rows deleted" fires
[ "$(sql "SELECT count(*) FROM job_fire WHERE job_id = $jcid AND decided_at > now() - interval '10 minutes'")" = 1 ] \
    || fail "the deleted job's young ledger row is not the one kept"

# Everything of a deleted instance went with it.
[ "$(sql "SELECT count(*) FROM instance_state WHERE id IN ($old) AND id NOT IN ($unpub)")" = 0 ] \
    || fail "state rows of deleted instances remain"
[ "$(sql "SELECT count(*) FROM job_attempt WHERE instance_id IN ($old) AND instance_id NOT IN ($unpub)")" = 0 ] \
    || fail "attempts of deleted instances remain"
[ "$(sql "SELECT count(*) FROM submission WHERE submit_key = 'idem:$P-kold'")" = 0 ] \
    || fail "the deleted instance's submission key remains"
orphans() { [ "$(batches "AND NOT EXISTS (SELECT 1 FROM instance_state s
                     WHERE s.id = ANY(b.ids) AND s.result_batch = b.id)")" = 0 ]; }
wait_for 30 "the published results batches of deleted instances deleted" orphans
# What must stay, stayed; the views show it.
[ "$(sql "SELECT count(*) FROM instance WHERE id IN ($unpub)")" = 20 ] || fail "unpublished instances deleted"
[ "$(sql "SELECT count(*) FROM job_attempt WHERE instance_id IN ($unpub)")" = 20 ] || fail "their attempts deleted"
[ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id ~ '^$P-[0-9]+\$'")" = 120 ] \
    || fail "expected the 100 recent and 20 unpublished of the 300 in job_instance"
[ "$(sql "SELECT count(*) FROM instance WHERE trace_id IN ('$P-later', '$P-parent', '$P-child', '$P-knew')")" = 4 ] \
    || fail "an unfinished instance, a live parent's child or a recent instance was deleted"
[ "$(sql "SELECT count(*) FROM job_fire f JOIN job j ON j.id = f.job_id WHERE j.name = '$ja' AND f.decided_at > now() - interval '10 minutes'")" = 1 ] \
    || fail "job a's recent ledger row is not the one kept"
[ "$(sql "SELECT count(*) FROM job_fire f JOIN job j ON j.id = f.job_id WHERE j.name = '$jb'
          AND f.nominal_time = (SELECT max(nominal_time) FROM job_fire WHERE job_id = j.id)")" = 1 ] \
    || fail "job b's latest ledger row is not kept"

# Inside its window a key still deduplicates; after it, it is new again.
out=$(axctl submit --idempotency-key "$P-knew" --trace-id "$P-knew-2" --wait --wait-timeout 5 -- true 2>/dev/null) || true
[ -z "$out" ] || fail "a duplicate submission inside its window ran: $out"
[ "$(sql "SELECT count(*) FROM instance WHERE idempotency_key = '$P-knew'")" = 1 ] || fail "the kept key made a second instance"
axctl submit --idempotency-key "$P-kold" --trace-id "$P-kold-2" --wait --wait-timeout 60 -- true >/dev/null \
    || fail "a key whose instance was deleted did not run again"
# The live parent's child goes once the parent is gone.
sql "DELETE FROM job_instance WHERE id = $parent" >/dev/null
child_gone() { [ -z "$(sql "SELECT id FROM instance_def WHERE trace_id = '$P-child'")" ]; }
wait_for 30 "the orphaned old child deleted" child_gone
sql "DELETE FROM job_fire WHERE job_id = $jcid" >/dev/null # the deleted job's young row
log "ok"
