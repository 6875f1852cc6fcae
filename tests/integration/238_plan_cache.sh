#!/usr/bin/env bash
# Plan modes on one session (store/stmt.c AX_STMT_GENERIC, adapters/pg.c
# ax_pg_plan; tests/integration/helpers/it_plan.c): a session starts with
# force_custom_plan (the connection's option); a SET outside a transaction
# lasts; a switch inside a transaction is a SET LOCAL that its ROLLBACK or
# COMMIT undoes, and the store knows it (the next switch is not skipped);
# dispatch.ingest, declared generic, runs twice on its cached generic plan
# (no custom plan), and dispatch.settle after it, an ordinary statement,
# on a custom plan with the session back on force_custom_plan. The session
# has JIT compilation off.
source "$(dirname "$0")/lib.sh"
D="it238.$$.$RANDOM."
J="it238-$$"
cleanup() {
    sql "DELETE FROM instance_def WHERE id IN (SELECT id FROM instance_state WHERE deployment = '$D');
         DELETE FROM submission WHERE submit_key LIKE 'idem:$D%';
         DELETE FROM dispatch_batch WHERE deployment = '$D';
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
log "PASS"
