#!/usr/bin/env bash
# The callback's batch transaction with its BEGIN sent with the finish
# statement and its COMMIT with the job rows' statement, one libpq pipeline
# each (ax_store_outcome_finish_begin, ax_store_outcome_jobs_commit;
# helpers/it_finish.c), no services, on four RUNNING instances of a job of
# its own:
# 1. two results: the transaction is open after the first round trip and
#    closed after the second; both instances FINISHED, the job's runs 2;
# 2. a result the statement refuses (output not UTF-8): the transaction
#    is left aborted for the caller's rollback; the instance untouched;
# 3. the session's prepared statements dropped behind the store's back:
#    the finish prepares again and succeeds in the same call;
# 3b. a stale plan inside the caller's transaction (the statements dropped
#    after its BEGIN), for the job rows' statement with its COMMIT and for
#    the finish alone: the call fails as retriable (-3, AX_ERR_IO, not bad
#    data: the callback would send good results to the dead-letter topic)
#    and the session is closed; the instance untouched and finished in the
#    next step on a new session;
# 4. a COMMIT that fails (a deferred unique violation in the transaction):
#    the call fails as a conflict naming the COMMIT, the transaction is
#    gone, and the instance finished in it is untouched;
# 5. the job rows' statement fails (a slot given back that its job does
#    not count: running_count would go below 0): the COMMIT is not run, the
#    transaction is left aborted for the rollback, the instance untouched.
source "$(dirname "$0")/lib.sh"
D="it242.$$.$RANDOM."
J="it242-$$"
cleanup() {
    sql "DELETE FROM instance_def WHERE id IN (SELECT id FROM instance_state WHERE deployment = '$D');
         DELETE FROM instance_state WHERE deployment = '$D';
         DELETE FROM ax_result_batch WHERE deployment = '$D';
         DELETE FROM job WHERE name = '$J'" >/dev/null 2>&1 || true
}
IT_ON_EXIT+=(cleanup)
JID=$(sql "INSERT INTO job (name, command) VALUES ('$J', '{true}') RETURNING id" | head -1)
[ -n "$JID" ] || fail "cannot create job $J"
ids=$(sql "WITH d AS (INSERT INTO instance_def (job_id, job_name, command, timeout_ms, trace_id,
             idempotency_key)
           SELECT $JID, '$J', '{true}', 60000, '$D' || g, '$D' || g FROM generate_series(1, 5) g
           RETURNING id)
         INSERT INTO instance_state (id, job_id, deployment, attempt, state, due_at, worker,
           lease_expires_at, dispatched_at, locked_at, running_at)
         SELECT id, $JID, '$D', 1, 'RUNNING', now(), 'it-finish', now() + interval '1 hour',
           now(), now(), now() FROM d RETURNING id" | sort -n)
set -- $ids
[ $# = 5 ] || fail "expected 5 instances, got: $ids"
# the fifth holds a concurrency slot its job does not count (running_count 0)
sql "UPDATE instance_state SET holds_slot = true WHERE id = $5" >/dev/null
out=$("$AX_BIN/tests/it_finish" "$AX_CONFIG" "$D" "$@" 2>"$WORK/it_finish.err") \
    || fail "it_finish failed: $out $(cat "$WORK/it_finish.err")"
log "it_finish: $(echo "$out" | tr '\n' ';')"
expect() { # expect LINE
    grep -qxF "$1" <<<"$out" || fail "expected '$1' in: $(echo "$out" | tr '\n' ';')"
}
state() { sql "SELECT state || coalesce('/' || outcome, '') FROM instance_state WHERE id = $1"; }

log "1. two results, two round trips"
expect "ok.begin rc=0 txn=intrans ended=2 jobs=1"
expect "ok.commit rc=0 txn=idle"
[ "$(state "$1")" = FINISHED/SUCCESS ] || fail "instance $1: $(state "$1")"
[ "$(state "$2")" = FINISHED/SUCCESS ] || fail "instance $2: $(state "$2")"

log "2. refused data: aborted for the caller's rollback"
expect "bad.begin rc=-1 txn=inerror ended=0 jobs=0"
expect "bad.rollback txn=idle"
grep -q "UTF8" "$WORK/it_finish.err" || fail "the refusal's reason: $(cat "$WORK/it_finish.err")"

log "3. prepared statements gone: prepared again in the call"
expect "stale.begin rc=0 txn=intrans ended=1 jobs=1"
expect "stale.commit rc=0 txn=idle"
[ "$(state "$3")" = FINISHED/SUCCESS ] || fail "instance $3: $(state "$3")"

log "3b. a stale plan in the caller's transaction: retriable, the session closed"
expect "stalejobs.begin rc=0 txn=intrans ended=1 jobs=1"
expect "stalejobs.commit rc=-3 txn=closed"
grep -q "^stalejobs.commit.error PostgreSQL (outcome.jobs, stale plan in a transaction): " <<<"$out" \
    || fail "the stale job rows' error: $(grep '^stalejobs.commit.error' <<<"$out")"
expect "stalefin rc=-3 txn=closed"
grep -q "^stalefin.error PostgreSQL (outcome.finish, stale plan in a transaction): " <<<"$out" \
    || fail "the stale finish's error: $(grep '^stalefin.error' <<<"$out")"

log "4. the COMMIT fails: nothing of the transaction stays"
expect "commit.begin rc=0 txn=intrans ended=1 jobs=1"
expect "commit.commit rc=-5 txn=idle"
grep -q "^commit.commit.error PostgreSQL (outcome.jobs, commit): " <<<"$out" \
    || fail "the failed COMMIT's error: $(grep '^commit.commit.error' <<<"$out")"
expect "commit.rollback txn=idle"
[ "$(state "$4")" = RUNNING ] || fail "instance $4: $(state "$4") (its transaction's COMMIT failed)"

log "5. the job rows' statement fails: the COMMIT is not run"
expect "jobs.begin rc=0 txn=intrans ended=1 jobs=1"
expect "jobs.commit rc=-1 txn=inerror"
grep -q "^jobs.commit.error PostgreSQL (outcome.jobs): .*running_count" <<<"$out" \
    || grep -q "^jobs.commit.error PostgreSQL (outcome.jobs): .*check constraint" <<<"$out" \
    || fail "the job rows' error: $(grep '^jobs.commit.error' <<<"$out")"
expect "jobs.rollback txn=idle"
[ "$(state "$5")" = RUNNING ] || fail "instance $5: $(state "$5") (its job rows' statement failed)"

[ "$(sql "SELECT runs FROM job WHERE id = $JID")" = 3 ] \
    || fail "the job's runs: $(sql "SELECT runs FROM job WHERE id = $JID"), expected 3 (the committed batches')"
log "ok"
