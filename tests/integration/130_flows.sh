#!/bin/bash
# Flows through the real services: a diamond (A -> B, A -> C, B + C -> D)
# runs every stage once, D only after both B and C succeeded; a failing
# stage stops its flow (policy stop: what has not started is skipped, the
# run fails) or, with policy continue, only its downstream is skipped;
# cycles and unknown stages are rejected when the flow is defined; flow
# show/list/delete print the stages, the runs with their stages' states.
. "$(dirname "$0")/lib.sh"
create_topics 2
start_all --set trigger.scan.interval.ms=100
M="$WORK/marks"
mkdir -p "$M"
job() { # job NAME SECONDS: a job that marks its start and end
    axctl job create "$JOBP$1" -- sh -c "date +%s%N > $M/$1.start; sleep $2; date +%s%N > $M/$1.end" >/dev/null
}
job a 0.3; job b 0.5; job c 0.2; job d 0.1
axctl job create "${JOBP}bad" -- false >/dev/null
axctl job update "${JOBP}bad" --retries 0 >/dev/null 2>&1 || \
    sql "UPDATE job SET retry_max = 0 WHERE name = '${JOBP}bad'"

log "definitions: a cycle and an unknown upstream are refused"
if axctl flow create "${JOBP}cyc" --stage "x=${JOBP}a:z" --stage "y=${JOBP}b:x" --stage "z=${JOBP}c:y" 2>"$WORK/err"; then
    fail "a cyclic flow was accepted"
fi
grep -q "cycle" "$WORK/err" || fail "cycle error does not say so: $(cat "$WORK/err")"
if axctl flow create "${JOBP}unk" --stage "x=${JOBP}a:nope" 2>/dev/null; then fail "unknown upstream accepted"; fi
[ "$(sql "SELECT count(*) FROM flow WHERE name LIKE '${JOBP}%'")" = 0 ] || fail "a refused flow was stored"

log "diamond"
axctl flow create "${JOBP}dia" --stage "A=${JOBP}a" --stage "B=${JOBP}b:A" --stage "C=${JOBP}c:A" \
    --stage "D=${JOBP}d:B,C" >/dev/null
run=$(axctl flow run "${JOBP}dia")
state() { sql "SELECT state FROM flow_run WHERE id = $run"; }
done_() { [ "$(state)" != running ]; }
wait_for 60 "diamond run finished" done_
[ "$(state)" = succeeded ] || fail "diamond run ended $(state): $(axctl flow show "${JOBP}dia")"
[ "$(sql "SELECT count(*) FROM flow_stage_run WHERE run_id = $run AND state = 'succeeded'")" = 4 ] \
    || fail "not all 4 stages succeeded"
[ "$(sql "SELECT count(*) FROM job_instance WHERE flow_run_id = $run")" = 4 ] || fail "not one instance per stage"
traces_time_first "flow_run_id = $run" # made by ax_flow_advance
ts() { cat "$M/$1.$2"; }
[ "$(ts b start)" -ge "$(ts a end)" ] || fail "B started before A ended"
[ "$(ts c start)" -ge "$(ts a end)" ] || fail "C started before A ended"
[ "$(ts d start)" -ge "$(ts b end)" ] || fail "D started before B ended"
[ "$(ts d start)" -ge "$(ts c end)" ] || fail "D started before C ended"
axctl flow show "${JOBP}dia" | grep -q "run $run: succeeded" || fail "flow show does not show the run"
axctl flow show "${JOBP}dia" >"$WORK/show"
grep -qx "  stage D: job ${JOBP}d after B,C" "$WORK/show" || fail "flow show, stage D: $(cat "$WORK/show")"
grep -qx "  stage A: job ${JOBP}a" "$WORK/show" || fail "flow show, stage A: $(cat "$WORK/show")"
[ "$(grep -cE "^  [ABCD]: succeeded \(instance [0-9]+\)$" "$WORK/show")" = 4 ] \
    || fail "flow show, the run's stages: $(cat "$WORK/show")"
[ "$(axctl flow show "${JOBP}dia" --run "$run" | grep -c "^run ")" = 1 ] || fail "flow show --run"
rc=0; axctl flow show "${JOBP}dia" --run x 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "flow show --run x: exit $rc, expected 2"
axctl flow list | grep -qx "${JOBP}dia  4 stages  on-failure=stop  last: succeeded (run $run)" \
    || fail "flow list: $(axctl flow list)"
rc=0; axctl flow create "${JOBP}dia" --stage "A=${JOBP}a" 2>"$WORK/err" || rc=$?
[ "$rc" = 1 ] && grep -q "already exists" "$WORK/err" || fail "a second ${JOBP}dia: exit $rc, $(cat "$WORK/err")"
[ "$(sql "SELECT count(*) FROM flow_stage s JOIN flow f ON f.id = s.flow_id WHERE f.name = '${JOBP}dia'")" = 4 ] \
    || fail "a refused second definition changed the flow's stages"
axctl flow delete "${JOBP}dia" | grep -qx "deleted flow ${JOBP}dia" || fail "flow delete"
rc=0; axctl flow delete "${JOBP}dia" 2>"$WORK/err" || rc=$?
[ "$rc" = 1 ] && grep -q "no flow named ${JOBP}dia" "$WORK/err" || fail "deleting a deleted flow: exit $rc"
rc=0; axctl flow show "${JOBP}dia" 2>/dev/null || rc=$?
[ "$rc" = 1 ] || fail "flow show of a deleted flow: exit $rc, expected 1"

log "a failing stage stops its flow"
rm -f "$M"/*
axctl flow create "${JOBP}stop" --stage "A=${JOBP}a" --stage "B=${JOBP}bad:A" --stage "C=${JOBP}c:A" \
    --stage "D=${JOBP}d:B,C" --on-failure stop >/dev/null
run=$(axctl flow run "${JOBP}stop")
wait_for 60 "stop run finished" done_
[ "$(state)" = failed ] || fail "stop run ended $(state)"
[ "$(sql "SELECT state FROM flow_stage_run WHERE run_id = $run AND stage = 'B'")" = failed ] || fail "B not failed"
[ "$(sql "SELECT state FROM flow_stage_run WHERE run_id = $run AND stage = 'D'")" = skipped ] || fail "D not skipped"
[ ! -e "$M/d.start" ] || fail "D ran although B failed"
[ "$(sql "SELECT count(*) FROM job_instance WHERE flow_run_id = $run AND flow_stage = 'D'")" = 0 ] \
    || fail "D got an instance"

log "policy continue: only the failed stage's downstream is skipped"
rm -f "$M"/*
axctl flow create "${JOBP}cont" --stage "A=${JOBP}bad" --stage "B=${JOBP}a:A" --stage "C=${JOBP}c" \
    --stage "D=${JOBP}d:C" --on-failure continue >/dev/null
run=$(axctl flow run "${JOBP}cont")
wait_for 60 "continue run finished" done_
[ "$(state)" = failed ] || fail "continue run ended $(state)"
[ "$(sql "SELECT string_agg(stage || '=' || state, ',' ORDER BY stage) FROM flow_stage_run WHERE run_id = $run")" \
  = "A=failed,B=skipped,C=succeeded,D=succeeded" ] || fail "continue: $(axctl flow show "${JOBP}cont" --run $run)"
sql "DELETE FROM flow WHERE name LIKE '${JOBP}%'" >/dev/null
log ok
