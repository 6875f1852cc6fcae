#!/usr/bin/env bash
# axctl job: create/update/enable/disable/delete write what was asked (and
# only that); list/show/next print the fire times the trigger will use
# (real times, across DST, after the last ledger entry); history reads the
# fire ledger; invalid input exits 2 before anything is written; a schedule
# change bumps schedule_from (the database trigger). Needs PostgreSQL only:
# the ledger rows are inserted here with psql.
source "$(dirname "$0")/lib.sh"

P="jc-$$-$RANDOM"   # every job of this test starts with this
drop_jobs() { # the ledger rows first: a job's delete leaves them (026)
    sql "DELETE FROM job_fire WHERE job_id IN (SELECT id FROM job WHERE name LIKE '$P-%')" \
        >/dev/null 2>&1 || true
    sql "DELETE FROM job WHERE name LIKE '$P-%'" >/dev/null 2>&1 || true
}
trap 'rc=$?; drop_jobs; (exit $rc); cleanup' EXIT

# expect RC PATTERN COMMAND...: exit status RC and PATTERN (grep -E) in stdout+stderr.
expect() {
    local want=$1 pat=$2; shift 2
    set +e; "$@" >"$WORK/out" 2>&1; local rc=$?; set -e
    [ "$rc" -eq "$want" ] || { cat "$WORK/out"; fail "expected exit $want from '$*', got $rc"; }
    grep -qE -- "$pat" "$WORK/out" || { cat "$WORK/out"; fail "output of '$*' lacks /$pat/"; }
}
# same TEXT COMMAND...: stdout of COMMAND is exactly TEXT.
same() {
    local want=$1; shift
    local got; got=$("$@") || fail "'$*' failed"
    [ "$got" = "$want" ] || fail "'$*' printed:
$got
--- expected:
$want"
}
col() { sql "SELECT $2 FROM job WHERE name = '$1'"; }

# ---- create; cron next across the 2027 spring-forward in New York ------------
ny="$P-ny"
expect 0 "^created job $ny" axctl job create "$ny" --cron '30 2 * * *' --tz America/New_York \
    --misfire skip --overlap queue --priority 1 -- sh -c "echo 'it''s' \"\$HOME\""
[ "$(col "$ny" "schedule_kind || '|' || schedule_expr || '|' || time_zone || '|' || misfire_policy
     || '|' || overlap_policy || '|' || priority || '|' || enabled")" = \
  "cron|30 2 * * *|America/New_York|skip|queue|1|true" ] || fail "stored columns: $(axctl job show "$ny")"
[ "$(col "$ny" "command[3]")" = "echo 'it''s' \"\$HOME\"" ] || fail "command not stored verbatim: $(col "$ny" command)"
same "2027-03-13T02:30:00-05:00
2027-03-14T03:30:00-04:00 # DST: shifted
2027-03-15T02:30:00-04:00
2027-03-16T02:30:00-04:00" axctl job next "$ny" --from 2027-03-12T12:00:00Z -n 4
expect 1 "already exists" axctl job create "$ny" -- true
[ "$(col "$ny" version)" = 1 ] || fail "a failed create changed the existing job"

# ---- validation: exit 2, nothing written ------------------------------------
expect 2 "invalid cron expression '0 2 \* 13 \*': position 7:" \
    axctl job create "$P-bad" --cron '0 2 * 13 *' -- true
expect 2 "Mars/Base" axctl job create "$P-bad" --cron '0 2 * * *' --tz Mars/Base -- true
expect 2 "--misfire" axctl job create "$P-bad" --misfire sometimes -- true
expect 2 "--overlap" axctl job create "$P-bad" --overlap maybe -- true
expect 2 "--dst-gap" axctl job create "$P-bad" --cron '0 2 * * *' --dst-gap jump -- true
expect 2 "--priority" axctl job create "$P-bad" --priority 7 -- true
expect 2 "one schedule" axctl job create "$P-bad" --cron '0 2 * * *' --fixed-rate 10 -- true
[ "$(sql "SELECT count(*) FROM job WHERE name = '$P-bad'")" = 0 ] || fail "an invalid create wrote a job"
expect 2 "invalid cron expression '61 \* \* \* \*': position 1:" axctl job update "$ny" --cron '61 * * * *'
expect 2 "--start" axctl job update "$ny" --start 2030-01-01T00:00:00Z
[ "$(col "$ny" "schedule_expr || '|' || version")" = "30 2 * * *|1" ] || fail "an invalid update wrote"

# ---- update: only the given options; schedule changes bump schedule_from -----
sf0=$(col "$ny" schedule_from)
expect 0 "^updated job $ny" axctl job update "$ny" --timeout 4321 --payload "a'b"
[ "$(col "$ny" "timeout_ms || '|' || priority || '|' || misfire_policy || '|' || schedule_expr
     || '|' || convert_from(payload, 'UTF8') || '|' || version || '|' || (schedule_from = '$sf0')")" = \
  "4321|1|skip|30 2 * * *|a'b|2|true" ] || fail "update changed more or less than asked: $(axctl job show "$ny")"
sleep 0.05
axctl job update "$ny" --cron '30 1 * * *' --dst-overlap twice >/dev/null || fail "update --cron failed"
[ "$(col "$ny" "schedule_from > '$sf0'::timestamptz")" = t ] || fail "schedule change did not bump schedule_from"
[ "$(col "$ny" "schedule_expr || '|' || dst_overlap || '|' || timeout_ms || '|' || time_zone")" = \
  "30 1 * * *|twice|4321|America/New_York" ] || fail "update --cron: $(axctl job show "$ny")"
same "2027-11-07T01:30:00-04:00
2027-11-07T01:30:00-05:00 # DST: repeated hour
2027-11-08T01:30:00-05:00" axctl job next "$ny" --from 2027-11-06T12:00:00Z -n 3
axctl job update "$ny" --cron '30 2 * * *' --dst-gap skip >/dev/null || fail "update --dst-gap failed"
same "2027-03-13T02:30:00-05:00
2027-03-15T02:30:00-04:00
2027-03-16T02:30:00-04:00" axctl job next "$ny" --from 2027-03-12T12:00:00Z -n 3

# ---- fixed rate with --start, shown in the job's zone -----------------------
rate="$P-rate"
axctl job create "$rate" --fixed-rate 90000 --start 2030-01-01T00:00:00Z --tz Asia/Kolkata \
    -- true >/dev/null || fail "create fixed-rate failed"
same "2030-01-01T05:30:00+05:30
2030-01-01T05:31:30+05:30
2030-01-01T05:33:00+05:30" axctl job next "$rate" -n 3
same "2030-01-01T05:33:00+05:30
2030-01-01T05:34:30+05:30" axctl job next "$rate" --from 2030-01-01T00:01:30Z -n 2
axctl job show "$rate" >"$WORK/show" || fail "job show failed"
for want in "schedule_kind: fixed_rate" "interval_ms: 90000" "time_zone: Asia/Kolkata" \
            "start_at: 2030-01-01T05:30:00+05:30" "enabled: true" "command: \[\"true\"\]"; do
    grep -qx -- "$want" "$WORK/show" || { cat "$WORK/show"; fail "job show lacks '$want'"; }
done
[ "$(grep -c '^next_fire: ' "$WORK/show")" = 5 ] || { cat "$WORK/show"; fail "job show: not 5 next fires"; }
[ "$(grep '^next_fire: ' "$WORK/show" | tail -n 1)" = "next_fire: 2030-01-01T05:36:00+05:30" ] \
    || { cat "$WORK/show"; fail "job show: wrong 5th fire"; }
sf0=$(col "$rate" schedule_from); sleep 0.05
axctl job update "$rate" --start 2030-01-02T00:00:00Z >/dev/null || fail "update --start failed"
[ "$(col "$rate" "interval_ms || '|' || (schedule_from > '$sf0'::timestamptz)")" = "90000|true" ] \
    || fail "update --start: interval changed or schedule_from not bumped"
same "2030-01-02T05:30:00+05:30" axctl job next "$rate" -n 1

# ---- once, fixed delay, none ---------------------------------------------------
axctl job create "$P-once" --after 3600000 -- true >/dev/null || fail "create --after failed"
[ "$(col "$P-once" "schedule_kind || '|' || (start_at - schedule_from = interval '3600000 ms')")" = "once|true" ] \
    || fail "--after: start_at is not schedule_from + 3600000 ms"
# Due right away: the first fire is the instant the schedule was set.
axctl job update "$P-once" --after 0 >/dev/null || fail "update --after 0 failed"
out=$(axctl job next "$P-once") || fail "job next failed"
[ "$(col "$P-once" "'$out'::timestamptz = date_trunc('milliseconds', start_at)
     AND start_at = schedule_from")" = t ] || fail "--after 0: job next printed '$out', not start_at"
axctl job update "$P-once" --at 2031-05-05T10:00:00Z >/dev/null || fail "update --at failed"
same "2031-05-05T10:00:00+00:00" axctl job next "$P-once"
axctl job update "$P-once" --at 2020-01-01T00:00:00Z >/dev/null || fail "update --at (past) failed"
same "" axctl job next "$P-once"
axctl job create "$P-delay" --fixed-delay 5000 --start 2030-01-01T00:00:00Z -- true >/dev/null \
    || fail "create fixed-delay failed"
same "2030-01-01T00:00:00+00:00
# then every run starts 5000 ms after the previous one finished" axctl job next "$P-delay"
axctl job create "$P-none" -- true >/dev/null || fail "create without schedule failed"
[ "$(col "$P-none" "schedule_kind || '|' || (start_at IS NULL)")" = "none|true" ] || fail "default schedule is not none"
axctl job update "$P-delay" --no-schedule >/dev/null || fail "update --no-schedule failed"
[ "$(col "$P-delay" "schedule_kind || '|' || (interval_ms IS NULL) || '|' || (start_at IS NULL)")" = "none|true|true" ] \
    || fail "--no-schedule left schedule columns behind"

# ---- settings that can be cleared: kept by other updates, cleared when asked --
clr="$P-clr"
axctl job create "$clr" --routing-key order --concurrency 3 --backlog-max 7 \
    --retry-rules '[{"class":"exit","action":"fail"}]' -- true >/dev/null || fail "create $clr failed"
axctl job update "$clr" --priority 3 >/dev/null || fail "update --priority failed"
[ "$(col "$clr" "routing_key || '|' || concurrency_limit || '|' || backlog_max || '|' || (retry_rules IS NOT NULL)
     || '|' || priority")" = "order|3|7|true|3" ] || fail "an update cleared settings it was not given: $(axctl job show "$clr")"
axctl job update "$clr" --routing-key '' --concurrency 0 --backlog-max none --retry-rules '' >/dev/null \
    || fail "update clearing settings failed"
[ "$(col "$clr" "(routing_key IS NULL) || '|' || (concurrency_limit IS NULL) || '|' || (backlog_max IS NULL)
     || '|' || (retry_rules IS NULL) || '|' || priority")" = "true|true|true|true|3" ] \
    || fail "update did not clear: $(axctl job show "$clr")"
axctl job delete "$clr" >/dev/null || fail "delete $clr failed"
# axctl counters: "NAME VALUE" lines, by name.
sql "INSERT INTO ax_counter (name, value) VALUES ('$P.b', 5), ('$P.a', 2)
     ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value" >/dev/null
[ "$(axctl counters | grep "^$P\.")" = "$P.a 2
$P.b 5" ] || fail "counters: $(axctl counters)"
sql "DELETE FROM ax_counter WHERE name LIKE '$P.%'" >/dev/null

# ---- list, disable, enable ---------------------------------------------------------
axctl job list >"$WORK/list" || fail "job list failed"
grep -qE "^$ny +enabled +cron '30 2 \* \* \*' America/New_York dst-gap=skip dst-overlap=twice +[0-9]{4}-[0-9]{2}-[0-9]{2}T02:30:00-0[45]:00$" \
    "$WORK/list" || { cat "$WORK/list"; fail "job list: wrong line for $ny"; }
grep -qE "^$rate +enabled +fixed_rate 90000ms start 2030-01-02T05:30:00\+05:30 +2030-01-02T05:30:00\+05:30$" \
    "$WORK/list" || { cat "$WORK/list"; fail "job list: wrong line for $rate"; }
grep -qE "^$P-once +enabled +once 2020-01-01T00:00:00\+00:00 +-$" "$WORK/list" \
    || { cat "$WORK/list"; fail "job list: a past once job shows a next fire"; }
[ "$(grep -c "^$P-" "$WORK/list")" = 5 ] || { cat "$WORK/list"; fail "job list: not one line per job"; }

sf0=$(col "$rate" schedule_from)
expect 0 "disabled job $rate" axctl job disable "$rate"
[ "$(col "$rate" "enabled || '|' || (schedule_from = '$sf0')")" = "false|true" ] || fail "disable: enabled/schedule_from"
axctl job list | grep -qE "^$rate +disabled .* -$" || fail "job list does not show $rate disabled"
sleep 0.05
expect 0 "enabled job $rate" axctl job enable "$rate"
[ "$(col "$rate" "enabled || '|' || (schedule_from > '$sf0'::timestamptz)")" = "true|true" ] \
    || fail "enable: not enabled or schedule_from not bumped"
expect 1 "no job named $P-nope" axctl job enable "$P-nope"
expect 1 "no job named $P-nope" axctl job disable "$P-nope"
expect 1 "no job named $P-nope" axctl job update "$P-nope" --priority 1

# ---- history: the fire ledger, newest first ----------------------------------------
hist="$P-hist"
axctl job create "$hist" --cron '30 2 * * *' --tz Europe/Berlin --disabled -- true >/dev/null \
    || fail "create $hist failed"
jid=$(col "$hist" id)
inst=$(sql "INSERT INTO job_instance (job_id, job_name, state, outcome, timeout_ms, due_at, finished_at,
              trace_id, idempotency_key, nominal_time)
            VALUES ($jid, '$hist', 'FINISHED', 'SUCCESS', 1000, '2030-03-30 01:30Z', '2030-03-30 01:31Z',
              '$P-t1', '$P-k1', '2030-03-30 01:30Z') RETURNING id" | head -n 1)
run=$(sql "INSERT INTO job_instance (job_id, job_name, state, timeout_ms, due_at, trace_id, idempotency_key)
           VALUES ($jid, '$hist', 'RUNNING', 1000, '2030-04-01 00:30Z', '$P-t2', '$P-k2') RETURNING id" | head -n 1)
sql "INSERT INTO job_fire (job_id, nominal_time, decision, instance_id, epoch, detail) VALUES
       ($jid, '2030-03-30 01:30Z', 'fired', $inst, 1, NULL),
       ($jid, '2030-03-31 01:30Z', 'skipped_misfire', NULL, 1, 'late by 7200000 ms (DST shifted)'),
       ($jid, '2030-04-01 00:30Z', 'queued', $run, 1, 'waits for $inst'),
       ($jid, '2030-04-02 00:30Z', 'deferred', NULL, 2, 'backpressure')" >/dev/null
axctl job history "$hist" >"$WORK/hist" || fail "job history failed"
h() { sed -n "${1}p" "$WORK/hist"; }
[ "$(wc -l <"$WORK/hist")" = 4 ] || { cat "$WORK/hist"; fail "history: not 4 rows"; }
echo "$(h 1)" | grep -qE "^2030-04-02T02:30:00\+02:00 +deferred +- +- +backpressure$" \
    || { cat "$WORK/hist"; fail "history row 1"; }
echo "$(h 2)" | grep -qE "^2030-04-01T02:30:00\+02:00 +queued +$run +RUNNING +waits for $inst$" \
    || { cat "$WORK/hist"; fail "history row 2"; }
echo "$(h 3)" | grep -qE "^2030-03-31T03:30:00\+02:00 +skipped_misfire +- +- +late by 7200000 ms \(DST shifted\)$" \
    || { cat "$WORK/hist"; fail "history row 3"; }
echo "$(h 4)" | grep -qE "^2030-03-30T02:30:00\+01:00 +fired +$inst +FINISHED/SUCCESS$" \
    || { cat "$WORK/hist"; fail "history row 4"; }
[ "$(axctl job history "$hist" --limit 2 | wc -l)" = 2 ] || fail "history --limit 2"
[ "$(axctl job history "$hist" --since 2030-03-31T01:30:00Z | wc -l)" = 3 ] || fail "history --since"
# The next fire follows the last ledger entry (the trigger's rule).
same "2030-04-03T02:30:00+02:00
2030-04-04T02:30:00+02:00" axctl job next "$hist" -n 2
axctl job show "$hist" | grep -qx "last_fire: 2030-04-02T02:30:00+02:00 deferred" \
    || fail "job show: wrong last_fire"
expect 1 "no job named $P-nope" axctl job history "$P-nope"

# ---- delete ----------------------------------------------------------------------------
# Refused while an instance is unfinished (naming it), then done.
expect 1 "job $hist has 1 unfinished instance\(s\) \($run\): not deleted" axctl job delete "$hist"
sql "UPDATE job_instance SET state = 'FINISHED', outcome = 'SUCCESS', finished_at = now()
     WHERE id = $run" >/dev/null
fires_before=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $jid")
[ "$fires_before" -ge 3 ] || fail "job $hist has $fires_before ledger rows, expected its history's"
expect 0 "deleted job $hist" axctl job delete "$hist"
# The delete is the job's row alone (026_job_delete_keeps_history): its
# instances keep its id and its ledger rows stay, until the retention sweep
# takes them (210_retention). Rewriting them in the delete's statement could
# not finish within the statement timeout for a busy job.
[ "$(sql "SELECT job_id FROM instance_state WHERE id = $run")" = "$jid" ] \
    || fail "the job's delete rewrote its instance's job_id"
[ "$(sql "SELECT job_id FROM instance_def WHERE id = $run")" = "$jid" ] \
    || fail "the job's delete rewrote its instance definition's job_id"
[ "$(sql "SELECT count(*) FROM job_fire WHERE job_id = $jid")" = "$fires_before" ] \
    || fail "the job's delete deleted its ledger rows in its own statement"
expect 1 "no job named $hist" axctl job show "$hist"
expect 1 "no job named $hist" axctl job delete "$hist"
sql "DELETE FROM job_fire WHERE job_id = $jid" >/dev/null
log "ok"
