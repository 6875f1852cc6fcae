#!/usr/bin/env bash
# Plan modes on one session (store/stmt.c AX_STMT_GENERIC, adapters/pg.c
# ax_pg_plan; tests/integration/helpers/it_plan.c): a session starts with
# force_custom_plan (the connection's option); a SET outside a transaction
# lasts; a switch inside a transaction is a SET LOCAL that its ROLLBACK or
# COMMIT undoes, and the store knows it (the next switch is not skipped);
# dispatch.ingest, declared generic, runs twice on its cached generic plan
# (no custom plan), and dispatch.settle after it, an ordinary statement,
# on a custom plan with the session back on force_custom_plan. The session
# has JIT compilation off. db.replan.interval.ms: dispatch.ingest runs on
# the statement it prepared until it is that old, then (outside a
# transaction block, as the trigger's ingest connection runs it) on one
# prepared and planned again,
# the old one gone; with 0 on the same statement for good.
source "$(dirname "$0")/lib.sh"
D="it238.$$.$RANDOM."
J="it238-$$"
cleanup() {
    sql "DELETE FROM instance_def WHERE id IN (SELECT id FROM instance_state WHERE deployment LIKE '$D%');
         DELETE FROM submission WHERE submit_key LIKE 'idem:$D%';
         DELETE FROM dispatch_batch WHERE deployment LIKE '$D%';
         DELETE FROM job WHERE name = '$J'" >/dev/null 2>&1 || true
}
trap cleanup EXIT
sql "INSERT INTO job (name, handler_kind, command) VALUES ('$J', 'command', ARRAY['echo', 'x'])" >/dev/null \
    || fail "cannot create job $J"
out=$("$AX_BIN/tests/it_plan" "$AX_CONFIG" "$D" "$J") || fail "it_plan failed: $out"
log "it_plan: $(echo "$out" | tr '\n' ';')"
expect() { # expect LINE
    grep -qxF "$1" <<<"$out" || fail "expected '$1' in: $(echo "$out" | tr '\n' ';')"
}
expect "mode.start force_custom_plan"
expect "jit off"
expect "mode.generic force_generic_plan"
expect "mode.txn_custom force_custom_plan"
expect "mode.after_rollback force_generic_plan"
expect "mode.after_commit force_generic_plan"
expect "mode.custom force_custom_plan"
expect "mode.after_ingest force_generic_plan"
expect "mode.after_settle force_custom_plan"
expect "ingest generic=2 custom=0"
expect "settle generic=0 custom=1"
[[ $(sql "SELECT count(*) FROM instance_state WHERE deployment = '$D'") == 2 ]] \
    || fail "the two batches did not make two instances"

# replan: "replan.N prepared=T generic=G" after batch N
replan() { # replan INTERVAL_MS DEPLOYMENT -> the helper's lines
    AXCONF_DB_REPLAN_INTERVAL_MS=$1 "$AX_BIN/tests/it_plan" "$AX_CONFIG" "$2" "$J" replan 600
}
field() { # field OUTPUT LINE KEY
    sed -n "s/^$2 .*$3=\([0-9]*\).*/\1/p" <<<"$1"
}
out=$(replan 600 "${D}r") || fail "it_plan replan (db.replan.interval.ms=600) failed: $out"
log "it_plan replan 600: $(echo "$out" | tr '\n' ';')"
t1=$(field "$out" replan.1 prepared) t2=$(field "$out" replan.2 prepared) t3=$(field "$out" replan.3 prepared)
[[ -n $t1 && -n $t2 && -n $t3 ]] || fail "one prepared statement after each batch expected: $out"
[[ $(field "$out" replan.1 generic) == 1 && $(field "$out" replan.2 generic) == 2 ]] \
    || fail "the first two batches did not run on one generic plan: $out"
[[ $t2 == "$t1" ]] || fail "prepared again before db.replan.interval.ms: $out"
(( t3 > t1 )) || fail "not prepared again after db.replan.interval.ms: $out"
[[ $(field "$out" replan.3 generic) == 1 ]] || fail "the third batch did not plan anew: $out"
out=$(replan 0 "${D}n") || fail "it_plan replan (db.replan.interval.ms=0) failed: $out"
log "it_plan replan 0: $(echo "$out" | tr '\n' ';')"
t1=$(field "$out" replan.1 prepared) t3=$(field "$out" replan.3 prepared)
[[ -n $t1 && $t3 == "$t1" && $(field "$out" replan.3 generic) == 3 ]] \
    || fail "db.replan.interval.ms=0 prepared again: $out"
[[ $(sql "SELECT count(*) FROM instance_state WHERE deployment IN ('${D}r', '${D}n')") == 6 ]] \
    || fail "the six batches did not make six instances"
log "PASS"
