#!/usr/bin/env bash
# Per-job concurrency limit, cluster-wide: a job with --concurrency 2 running
# `sleep 0.3`, 100 instances submitted at once, two executors with 8 slots
# each. Every instance ends SUCCESS with exactly one attempt; at no instant
# did more than 2 of them overlap in [running_at, finished_at] (the maximum
# overlap is computed in SQL), nor were more than 2 LOCKED/RUNNING or
# job.running_count above 2 whenever sampled; running_count is 0 at the end.
# A job without a limit, submitted at the same time, is not held back: all
# its instances finish while the limited job still has most of its backlog.
source "$(dirname "$0")/lib.sh"
create_topics 4

L="${JOBP}limited"
U="${JOBP}free"
axctl job create "$L" --concurrency 2 -- sleep 0.3 >/dev/null || fail "job create --concurrency failed"
axctl job create "$U" -- true >/dev/null || fail "job create failed"
[ "$(sql "SELECT concurrency_limit || '|' || running_count FROM job WHERE name = '$L'")" = "2|0" ] \
    || fail "concurrency_limit not stored: $(axctl job show "$L")"
[ "$(sql "SELECT concurrency_limit IS NULL FROM job WHERE name = '$U'")" = t ] \
    || fail "a job without --concurrency has a limit"
axctl job list >"$WORK/list" || fail "job list failed"
grep -qE "^$L .* concurrency=2 running=0$" "$WORK/list" \
    || fail "job list does not show the limit: $(axctl job list | grep "$L")"

start_svc trigger
start_svc executor@1 --set executor.slots=8
start_svc executor@2 --set executor.slots=8
start_svc callback

t0=$(date +%s)
axctl submit --job "$L" --count 100 >"$WORK/submit-L" 2>&1 &
sl=$!
axctl submit --job "$U" --count 30 >"$WORK/submit-U" 2>&1 &
su=$!
wait "$sl" || fail "submit --count 100 failed: $(cat "$WORK/submit-L")"
wait "$su" || fail "submit --count 30 failed: $(cat "$WORK/submit-U")"
log "submitted 100 instances of $L and 30 of $U"

# Sample while it runs: never more than 2 held, by either measure.
done_l=0
deadline=$((t0 + 80))
samples=0
while :; do
    s=$(sql "SELECT (SELECT running_count FROM job WHERE name = '$L') || '|' ||
                    count(*) FILTER (WHERE state IN ('LOCKED', 'RUNNING')) || '|' ||
                    count(*) FILTER (WHERE state = 'FINISHED')
             FROM job_instance WHERE job_name = '$L'")
    IFS='|' read -r rc_now held done_l <<<"$s"
    samples=$((samples + 1))
    [ "$rc_now" -le 2 ] || fail "job.running_count is $rc_now (> 2)"
    [ "$held" -le 2 ] || fail "$held instances of $L LOCKED/RUNNING at once (> 2)"
    [ "$done_l" -ge 100 ] && break
    [ "$(date +%s)" -lt "$deadline" ] || fail "only $done_l of 100 instances of $L finished in 80 s"
    sleep 0.2
done
log "all 100 finished after $(( $(date +%s) - t0 )) s ($samples samples, never more than 2 held)"
n_done() { sql "SELECT count(*) FROM job_instance WHERE job_name = '$1' AND state = 'FINISHED'"; }
# (wait_for runs a command again and again: the check is evaluated each time)
check() { eval "$1"; }
wait_for 20 "the 30 instances of $U to finish" check '[ "$(n_done "$U")" -ge 30 ]'

# ---- the limited job -----------------------------------------------------------------
got=$(sql "SELECT count(*) || '|' || count(*) FILTER (WHERE outcome = 'SUCCESS') || '|' ||
                  count(*) FILTER (WHERE running_at IS NULL OR finished_at IS NULL)
           FROM job_instance WHERE job_name = '$L'")
[ "$got" = "100|100|0" ] || fail "instances|SUCCESS|without running_at/finished_at of $L: $got (expected 100|100|0)"
bad=$(sql "SELECT count(*) FROM job_instance i WHERE i.job_name = '$L'
           AND (SELECT count(*) FROM job_attempt a WHERE a.instance_id = i.id) <> 1")
[ "$bad" = 0 ] || fail "$bad instances of $L do not have exactly one job_attempt row"
# The largest number of [running_at, finished_at] intervals covering one
# instant: +1 at each start, -1 at each end (an end sorts before a start at
# the same instant: touching intervals do not overlap).
overlap=$(sql "WITH ev AS (
                 SELECT running_at AS t, 1 AS d FROM job_instance WHERE job_name = '$L'
                 UNION ALL SELECT finished_at, -1 FROM job_instance WHERE job_name = '$L')
               SELECT max(s) FROM (SELECT sum(d) OVER (ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS s
                                   FROM ev) x")
log "max overlap of $L: $overlap"
[ "$overlap" -le 2 ] || fail "$overlap instances of $L ran at the same time (limit 2)"
[ "$overlap" -eq 2 ] || fail "instances of $L never ran 2 at a time (max overlap $overlap): the limit is 2, not 1"
[ "$(sql "SELECT running_count FROM job WHERE name = '$L'")" = 0 ] \
    || fail "job.running_count is $(sql "SELECT running_count FROM job WHERE name = '$L'") after every instance finished"
[ "$(sql "SELECT count(*) FROM job_instance WHERE job_name = '$L' AND holds_slot")" = 0 ] \
    || fail "finished instances still hold concurrency slots"

# ---- the job without a limit ------------------------------------------------------------
got=$(sql "SELECT count(*) || '|' || count(*) FILTER (WHERE outcome = 'SUCCESS')
           FROM job_instance WHERE job_name = '$U'")
[ "$got" = "30|30" ] || fail "instances|SUCCESS of $U: $got (expected 30|30)"
# How many of the limited job's instances were still unfinished when the
# last instance of the free job finished.
backlog=$(sql "SELECT count(*) FROM job_instance WHERE job_name = '$L' AND finished_at >
                 (SELECT max(finished_at) FROM job_instance WHERE job_name = '$U')")
log "when $U was done, $backlog instances of $L had not finished"
[ "$backlog" -ge 50 ] || fail "$U finished only when $((100 - backlog)) of 100 instances of $L had: held back by the limited job"

log "ok"
