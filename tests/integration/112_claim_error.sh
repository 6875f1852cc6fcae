#!/usr/bin/env bash
# A claim that fails in PostgreSQL with a data error is retried, not taken
# for a duplicate. A job with a concurrency limit is claimed one instance at
# a time (its own transaction); a temporary trigger on instance_state (the
# row each claim updates) makes that claim raise data_exception (SQLSTATE 22000: AX_ERR_INVALID, the
# same code "not claimable" had before issue #12) for this job's instances
# during the first 4 seconds after the submit. The instance still finishes
# SUCCESS exactly once, with one attempt; the executor logged the failed
# claim as kept for a retry and never as a lost claim (duplicate), and
# executor.claims_lost did not move. Before the fix the dispatch was
# dropped as a duplicate and the instance stayed SCHEDULED until the
# trigger's redispatch (10 minutes).
source "$(dirname "$0")/lib.sh"
create_topics 2

L="${JOBP}limited"
FN="ax_it_claim_error_$$"
axctl job create "$L" --concurrency 1 -- echo claimed-after-retry >/dev/null || fail "job create failed"
job_id=$(sql "SELECT id FROM job WHERE name = '$L'")

drop_trigger() {
    sql "DROP TRIGGER IF EXISTS $FN ON instance_state; DROP FUNCTION IF EXISTS $FN()" >/dev/null 2>&1 || true
}
trap 'rc=$?; set +e; drop_trigger; (exit $rc); cleanup' EXIT

lost0=$(sql "SELECT coalesce(sum(value), 0) FROM ax_counter WHERE name = 'executor.claims_lost'" 2>/dev/null || echo 0)

start_svc trigger
start_svc executor --set backoff.initial.ms=200 --set backoff.max.ms=1000
start_svc callback

# Fail every claim of this job's instances until 4 s from now.
sql "CREATE FUNCTION $FN() RETURNS trigger LANGUAGE plpgsql AS \$\$
     BEGIN
       IF NEW.job_id = $job_id AND NEW.state = 'LOCKED' AND OLD.state = 'SCHEDULED'
          AND clock_timestamp() < '$(date -u -d '+4 seconds' '+%Y-%m-%d %H:%M:%S.%N')+00'::timestamptz THEN
         RAISE EXCEPTION 'ax-it: injected claim error' USING ERRCODE = 'data_exception';
       END IF;
       RETURN NEW;
     END \$\$;
     CREATE TRIGGER $FN BEFORE UPDATE ON instance_state FOR EACH ROW EXECUTE FUNCTION $FN()" >/dev/null \
    || fail "cannot create the trigger"
axctl submit --job "$L" >"$WORK/submit" 2>&1 || fail "submit failed: $(cat "$WORK/submit")"
log "submitted one instance of $L; its claims fail for 4 s"

n_done() { sql "SELECT count(*) FROM job_instance WHERE job_name = '$L' AND state = 'FINISHED'"; }
check() { eval "$1"; }
wait_for 60 "the instance of $L to finish" check '[ "$(n_done)" -ge 1 ]'
drop_trigger

got=$(sql "SELECT count(*) || '|' || count(*) FILTER (WHERE outcome = 'SUCCESS' AND attempt = 1)
           FROM job_instance WHERE job_name = '$L'")
[ "$got" = "1|1" ] || fail "instances|SUCCESS at attempt 1 of $L: $got (expected 1|1)"
att=$(sql "SELECT count(*) FROM job_attempt a JOIN job_instance i ON i.id = a.instance_id
           WHERE i.job_name = '$L'")
[ "$att" = 1 ] || fail "$att job_attempt rows (expected exactly 1)"
[ "$(sql "SELECT running_count FROM job WHERE name = '$L'")" = 0 ] \
    || fail "job.running_count is not 0 at the end (a failed claim kept its slot)"
grep -q 'injected claim error' "$WORK/ax-executor.log" \
    || fail "the executor did not log the failed claim"
grep -qE 'claim: .*injected claim error.*kept: claimed again after a backoff' "$WORK/ax-executor.log" \
    || fail "the executor did not say it keeps the dispatch for a retry"
if grep -q 'claim lost' "$WORK/ax-executor.log"; then
    fail "a failed claim was counted as a lost claim (duplicate): $(grep 'claim lost' "$WORK/ax-executor.log")"
fi
lost1=$(sql "SELECT coalesce(sum(value), 0) FROM ax_counter WHERE name = 'executor.claims_lost'" 2>/dev/null || echo 0)
[ "$lost1" = "$lost0" ] || fail "executor.claims_lost moved from $lost0 to $lost1"
tries=$(grep -c 'injected claim error' "$WORK/ax-executor.log")
log "claimed after $tries failed claim(s); SUCCESS once"
log "ok"
