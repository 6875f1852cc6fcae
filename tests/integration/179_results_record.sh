#!/usr/bin/env bash
# Every published Result record equals its instance's row: a mix of
# successes with output, final failures (exit code, error class, stderr),
# retries that end in a failure and retries that end in a success, an
# idempotency key, a job name and inline commands, published by one
# callback (services/callback/publish.c, the records read by
# outbox.pending), is on the results topic exactly once per instance, and each record's fields (job, outcome, attempts, exit code,
# error class, error, output, trace id, idempotency key, and the nominal,
# scheduled, locked, running and finished times in ms) are the row's as
# outbox.pending reads it.
source "$(dirname "$0")/lib.sh"
create_topics 2
start_all --set trigger.scan.interval.ms=100

tag="rec$$"
axctl job create "${JOBP}ok" -- sh -c 'echo "out put"; printf "tab\there|pipe\n"' >/dev/null
axctl job create "${JOBP}bad" --retries 2 --retry-initial 100 --retry-jitter 0 \
    -- sh -c 'echo partial; echo "to stderr" >&2; exit 3' >/dev/null
# fails its first attempt, succeeds its second (a single instance)
axctl job create "${JOBP}again" --retries 2 --retry-initial 100 --retry-jitter 0 \
    -- sh -c "test -e '$WORK/again' && echo second || { touch '$WORK/again'; exit 1; }" >/dev/null

axctl submit --job "${JOBP}ok" --count 30 --trace-id "$tag-ok" >/dev/null
axctl submit --job "${JOBP}bad" --count 5 --trace-id "$tag-bad" >/dev/null
axctl submit --job "${JOBP}again" --trace-id "$tag-again" >/dev/null
axctl submit --job "${JOBP}ok" --idempotency-key "$tag-key" --trace-id "$tag-idem" >/dev/null
axctl submit --count 20 --trace-id "$tag-inok" -- sh -c 'echo inline' >/dev/null
axctl submit --count 10 --trace-id "$tag-inbad" -- sh -c 'exit 7' >/dev/null
axctl submit --count 5 --trace-id "$tag-spawn" -- "$WORK/no-such-program" >/dev/null
N=72

published() { sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%'
                   AND state = 'FINISHED' AND result_published_at IS NOT NULL"; }
all_published() { [ "$(published)" = $N ]; }
wait_for 90 "$N results published" all_published
[ "$(field "$tag-again" "outcome || '/' || attempt")" = "SUCCESS/2" ] \
    || fail "$tag-again: $(field "$tag-again" "outcome || '/' || attempt"), expected SUCCESS/2"
[ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-bad-%'
          AND outcome = 'FAILED' AND attempt = 3")" = 5 ] || fail "$tag-bad: not 5 FAILED after 3 attempts"

# the rows, in the form of it_results, with outbox.pending's expressions
hx() { echo "coalesce(encode(convert_to($1, 'UTF8'), 'hex'), '')"; }
ms() { echo "coalesce((extract(epoch FROM $1) * 1000)::bigint, 0)"; }
sql "SELECT i.id || '|' || coalesce(i.job_name, '') || '|' || i.outcome || '|' || i.attempt
       || '|' || coalesce(i.exit_code::text, 'N') || '|' || $(hx i.error_class)
       || '|' || $(hx i.error) || '|' || $(hx "coalesce(i.output, '')") || '|' || $(hx i.trace_id)
       || '|' || $(hx i.idempotency_key) || '|' || $(ms i.nominal_time) || '|' || $(ms i.scheduled_at)
       || '|' || $(ms i.locked_at) || '|' || $(ms i.running_at) || '|' || $(ms i.finished_at)
     FROM job_instance i WHERE i.trace_id LIKE '$tag-%'" | sort >"$WORK/rows"
[ "$(wc -l <"$WORK/rows")" = $N ] || fail "$(wc -l <"$WORK/rows") rows, expected $N"
ids=$(cut -d'|' -f1 "$WORK/rows" | paste -sd'|')
kc -C -t "$(topic results)" -o beginning -e -q -X isolation.level=read_committed -f '%R%s' \
    | "$AX_BIN/tests/it_results" >"$WORK/records.all" || fail "a record does not decode"
grep -E "^($ids)\|" "$WORK/records.all" | sort >"$WORK/records"
[ "$(wc -l <"$WORK/records")" = $N ] || fail "$(wc -l <"$WORK/records") records of the $N instances (exactly once each expected)"
if ! diff "$WORK/rows" "$WORK/records" >"$WORK/diff"; then
    cat "$WORK/diff"
    fail "published Result records differ from the instances' rows"
fi
grep -q "|SUCCESS|2|0|" "$WORK/records" || fail "no SUCCESS record of attempt 2"
log "$N Result records equal their rows"
