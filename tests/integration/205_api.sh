#!/usr/bin/env bash
# ax-api against the real stack (issue #14 parts 1, 2, 6), every endpoint
# with curl + jq:
# (a) /healthz, /readyz, the OpenAPI document; 401 without a token and
#     with a wrong one, 403 for a read token on every mutation, 404, 405,
#     400 naming the parameter or member at fault (never 500), 413 for a
#     body over api.body.max, 429 past the per-token rate;
# (b) jobs: create, list with a cursor, get, update, next fires with DST
#     marked, enable/disable, pause-all/resume-all (a job disabled before
#     stays disabled), history, circuit and reset, delete;
# (c) instances: submit through the submit topic (without a trace id: one
#     made by ax-api, starting with the time), list with filters, one
#     instance with attempts and timeline, retry once (a second retry makes
#     no second instance), cancel of a RUNNING command (its process group
#     is gone, the instance CANCELLED), cancel of a finished one is 409;
#     keyset pagination over 10,000 instances (every one seen once, in
#     order); only this deployment's instances (another deployment's ax-api
#     and axctl list none of them unless all_deployments / --all-deployments);
#     axctl instance list --outcome, instance retry, job
#     pause-all/resume-all;
# (d) flows (define, cycle and unknown job refused naming the stage, run,
#     runs with stage states, delete), executors, lanes, leader and
#     standbys (a second trigger listed, lost while paused, gone once
#     stopped), counters,
#     stats (the overview's aggregate, against the database),
#     DLQ (list newest first with job and trace id, also axctl dlq list,
#     show, replay once: the second replay makes no second instance);
# (e) every mutating call is logged with the token's name, never the token;
#     a DLQ request waiting on an unreachable Kafka holds up no other
#     request and ends in 503 + Retry-After; TLS when api.tls.cert/key are set;
# (f) every response recorded is checked against services/api/openapi.json
#     (helpers/openapi_check.py, python3-jsonschema), and every documented
#     operation was seen succeeding.
source "$(dirname "$0")/lib.sh"
create_topics 2
start_all --set executor.heartbeat.ms=1000

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
token() { axctl api token create "$1" --scope "$2" >"$WORK/tok.$1"; }
token ops admin
token viewer read
ADMIN=$(awk '/^token:/ { print $2 }' "$WORK/tok.ops")
READ=$(awk '/^token:/ { print $2 }' "$WORK/tok.viewer")
ENTRIES="$(awk '/entry:/ { print $3 }' "$WORK/tok.ops"),$(awk '/entry:/ { print $3 }' "$WORK/tok.viewer")"
[[ $ADMIN == axt_* && ${#ADMIN} == 68 ]] || fail "axctl api token create printed no token"
grep -q "$ADMIN" <<<"$ENTRIES" && fail "the api.tokens entry holds the token itself"
PORT=$(free_port)
start_svc api --set "api.listen=127.0.0.1:$PORT" --set "api.tokens=$ENTRIES" \
    --set api.body.max=4096 --set api.rate.limit=100000 --set api.rate.burst=100000 \
    --set "api.console.dir=$WORK"
BASE="http://127.0.0.1:$PORT"
wait_for 30 "ax-api to listen" curl -sf "$BASE/healthz"
rc=0
"$AX_BIN/services/api/ax-api" --set "api.listen=127.0.0.1:$(free_port)" --set api.threads=0 \
    >"$WORK/threads0.out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q 'api.threads' "$WORK/threads0.out" \
    || fail "api.threads=0: exit $rc, expected 2 naming the key: $(head -c 300 "$WORK/threads0.out")"

RESP=$WORK/responses.jsonl
: >"$RESP"
# call METHOD PATH [BODY] [TOKEN]: the status on stdout, the body in $WORK/body;
# each JSON response is recorded for the OpenAPI check.
call() {
    local m=$1 p=$2 body=${3:-} tok=${4-$ADMIN} args=(-s -o "$WORK/body" -w '%{http_code}' -X "$1")
    [ -n "$tok" ] && args+=(-H "Authorization: Bearer $tok")
    [ -n "$body" ] && args+=(-H 'Content-Type: application/json' --data-binary "$body")
    local code
    code=$(curl "${args[@]}" "$BASE$p")
    if jq -e . "$WORK/body" >/dev/null 2>&1; then
        jq -c -n --arg m "$m" --arg p "$p" --argjson s "$code" --slurpfile b "$WORK/body" \
            '{method: $m, path: $p, status: $s, body: $b[0]}' >>"$RESP"
    fi
    echo "$code"
}
# want CODE METHOD PATH [BODY] [TOKEN]: fails unless the status is CODE.
want() {
    local code=$1; shift
    local got; got=$(call "$@")
    [ "$got" = "$code" ] || fail "$1 $2: status $got, expected $code: $(head -c 600 "$WORK/body")"
}
# bad FIELD METHOD PATH [BODY]: 400 naming FIELD.
bad() {
    local field=$1; shift
    want 400 "$@"
    [ "$(jq -r .error.field "$WORK/body")" = "$field" ] \
        || fail "$1 $2: 400 names field $(jq -c .error.field "$WORK/body"), expected $field"
}
j() { jq -r "$1" "$WORK/body"; }

# ---- (a) meta, auth, limits --------------------------------------------------------------------
want 200 GET /healthz "" ""
ready() { [ "$(call GET /readyz "" "")" = 200 ]; }
wait_for 30 "ax-api to be ready (PostgreSQL and Kafka)" ready
[ "$(j .postgres)/$(j .kafka)" = "true/true" ] || fail "readyz: $(cat "$WORK/body")"
want 200 GET /api/v1/openapi.json "" ""
j '.openapi' | grep -q '^3\.' && [ "$(j '.paths["/api/v1/instances"].get|type')" = object ] \
    || fail "openapi.json is not the document"
want 401 GET /api/v1/jobs "" ""
[ "$(j .error.code)" = unauthorized ] || fail "401 code: $(cat "$WORK/body")"
curl -s -D - -o /dev/null "$BASE/api/v1/jobs" | grep -qi '^WWW-Authenticate: Bearer' || fail "no WWW-Authenticate"
want 401 GET /api/v1/jobs "" "axt_0000000000000000000000000000000000000000000000000000000000000000"
want 401 GET /api/v1/jobs "" "$ADMIN"x
want 200 GET /api/v1/whoami "" "$READ"
[ "$(j .name)/$(j .scope)" = "viewer/read" ] || fail "whoami: $(cat "$WORK/body")"
want 200 GET /api/v1/whoami
curl -s -D - -o /dev/null -H "Authorization: Bearer $ADMIN" "$BASE/api/v1/jobs" | grep -qi '^Set-Cookie' \
    && fail "ax-api sets a cookie"
want 404 GET /api/v1/nothing-here
want 404 GET /nowhere "" ""
want 405 PUT /api/v1/jobs
[ "$(j .error.code)" = method_not_allowed ] || fail "405 code"
bad limit GET "/api/v1/instances?limit=0"
bad limit GET "/api/v1/instances?limit=501"
bad bogus GET "/api/v1/instances?bogus=1"
bad since GET "/api/v1/instances?since=yesterday"
want 400 POST /api/v1/jobs '{not json'
[ "$(j .error.code)" = invalid_json ] || fail "invalid_json"
big=$(python3 -c 'import json; print(json.dumps({"name": "x", "payload": "y" * 5000}))')
want 413 POST /api/v1/jobs "$big"
[ "$(j .error.code)" = payload_too_large ] || fail "413 code"

# ---- (b) jobs --------------------------------------------------------------------------------------
J=${JOBP}nightly
spec=$(jq -c -n --arg n "$J" '{name: $n, schedule: {kind: "cron", expr: "30 2 * * *", time_zone: "Europe/Paris"},
                               command: ["/bin/true"], priority: 3, retry: {max: 0}}')
want 403 POST /api/v1/jobs "$spec" "$READ"
[ "$(j .error.code)" = forbidden ] || fail "403 code"
want 201 POST /api/v1/jobs "$spec"
[ "$(j .name)/$(j .priority)/$(j .schedule.time_zone)/$(j '.next_fires|length')" = "$J/3/Europe/Paris/5" ] \
    || fail "created job: $(cat "$WORK/body")"
want 409 POST /api/v1/jobs "$spec"
bad schedule.expr POST /api/v1/jobs "$(jq -c '.name += "x" | .schedule.expr = "61 2 * * *"' <<<"$spec")"
bad schedule.time_zone POST /api/v1/jobs "$(jq -c '.name += "x" | .schedule.time_zone = "Mars/Base"' <<<"$spec")"
bad priority POST /api/v1/jobs "$(jq -c '.name += "x" | .priority = 9' <<<"$spec")"
bad retry.multiplier POST /api/v1/jobs "$(jq -c '.name += "x" | .retry.multiplier = 0.5' <<<"$spec")"
bad command POST /api/v1/jobs "$(jq -c '.name += "x" | del(.command)' <<<"$spec")"
bad colour POST /api/v1/jobs "$(jq -c '.name += "x" | .colour = "red"' <<<"$spec")"
bad name POST /api/v1/jobs "$(jq -c '.name = "-bad"' <<<"$spec")"
[ "$(sql "SELECT count(*) FROM job WHERE name LIKE '${J}x%' OR name = '-bad'")" = 0 ] || fail "a refused job was written"
want 201 POST /api/v1/jobs "$(jq -c -n --arg n "${JOBP}b" '{name: $n, command: ["/bin/true"], enabled: false}')"
want 201 POST /api/v1/jobs "$(jq -c -n --arg n "${JOBP}c" '{name: $n, command: ["/bin/true"]}')"
want 200 GET "/api/v1/jobs?prefix=$JOBP&limit=2"
[ "$(j '.items|map(.name)|join(",")')" = "${JOBP}b,${JOBP}c" ] && [ "$(j .next_cursor)" = "${JOBP}c" ] \
    || fail "jobs page 1: $(cat "$WORK/body")"
want 200 GET "/api/v1/jobs?prefix=$JOBP&limit=2&cursor=${JOBP}c"
[ "$(j '.items|map(.name)|join(",")')" = "$J" ] && [ "$(j .next_cursor)" = null ] || fail "jobs page 2: $(cat "$WORK/body")"
want 200 GET "/api/v1/jobs?prefix=$JOBP&enabled=false"
[ "$(j '.items|map(.name)|join(",")')" = "${JOBP}b" ] || fail "jobs enabled=false"
bad enabled GET "/api/v1/jobs?enabled=maybe"
want 200 GET "/api/v1/jobs/$J"
want 404 GET "/api/v1/jobs/${JOBP}nope"
want 200 PATCH "/api/v1/jobs/$J" '{"priority": 1, "retry": {"multiplier": 1.5}}'
[ "$(j .priority)/$(j .retry.multiplier)/$(j .schedule.expr)" = "1/1.5/30 2 * * *" ] || fail "update: $(cat "$WORK/body")"
bad priority PATCH "/api/v1/jobs/$J" '{"priority": -1}'
bad name PATCH "/api/v1/jobs/$J" '{"name": "other"}'
want 403 PATCH "/api/v1/jobs/$J" '{"priority": 2}' "$READ"
want 200 GET "/api/v1/jobs/$J/next?n=3&from=2026-03-27T12:00:00Z"
[ "$(j '.fires|map(.time + "/" + (.dst // "-"))|join(" ")')" = \
  "2026-03-28T02:30:00+01:00/- 2026-03-29T03:30:00+02:00/shifted 2026-03-30T02:30:00+02:00/-" ] \
    || fail "next fires across the spring-forward gap: $(cat "$WORK/body")"
bad n GET "/api/v1/jobs/$J/next?n=0"
want 200 POST "/api/v1/jobs/$J/disable"
[ "$(j .enabled)/$(j .changed)" = "false/true" ] || fail "disable"
want 200 POST "/api/v1/jobs/$J/disable"
[ "$(j .changed)" = false ] || fail "disable twice changed"
want 200 POST "/api/v1/jobs/$J/enable"
want 403 POST "/api/v1/jobs/$J/enable" "" "$READ"
want 404 POST "/api/v1/jobs/${JOBP}nope/enable"
want 200 POST /api/v1/jobs/pause-all
j '.paused[]' | grep -qx "$J" || fail "pause-all did not pause $J"
j '.paused[]' | grep -qx "${JOBP}b" && fail "pause-all paused a disabled job"
[ "$(sql "SELECT enabled FROM job WHERE name = '$J'")" = f ] || fail "pause-all: $J still enabled"
want 200 POST /api/v1/jobs/resume-all
j '.resumed[]' | grep -qx "$J" || fail "resume-all did not resume $J"
[ "$(sql "SELECT enabled FROM job WHERE name IN ('$J', '${JOBP}b') ORDER BY name")" = "$(printf 'f\nt')" ] \
    || fail "resume-all: ${JOBP}b (disabled before) must stay disabled, $J enabled"
axctl job pause-all | grep -q "paused job $J" || fail "axctl job pause-all"
axctl job resume-all | grep -q "resumed job $J" || fail "axctl job resume-all"
want 200 GET "/api/v1/jobs/$J/history?limit=5"
want 200 GET "/api/v1/jobs/$J/circuit"
[ "$(j .state)" = closed ] || fail "circuit"
sql "UPDATE job SET circuit_state = 'open', consecutive_failures = 7, circuit_opened_at = now() WHERE name = '$J'"
want 200 POST "/api/v1/jobs/$J/circuit/reset"
[ "$(j .before.state)/$(j .before.consecutive_failures)/$(j .after.state)/$(j .after.consecutive_failures)" = "open/7/closed/0" ] \
    || fail "circuit reset: $(cat "$WORK/body")"
want 200 DELETE "/api/v1/jobs/${JOBP}c"
want 404 GET "/api/v1/jobs/${JOBP}c"
bad cancel_pending DELETE "/api/v1/jobs/${JOBP}b?cancel_pending=yes"

# ---- (c) instances ---------------------------------------------------------------------------------
TICK=${JOBP}tick
want 201 POST /api/v1/jobs "$(jq -c -n --arg n "$TICK" '{name: $n, schedule: {kind: "fixed_rate", interval_ms: 500}, command: ["/bin/true"]}')"
W=${JOBP}work
want 201 POST /api/v1/jobs "$(jq -c -n --arg n "$W" '{name: $n, command: ["/bin/sh", "-c", "cat; echo hello"], retry: {max: 0}}')"
bad job POST /api/v1/instances "$(jq -c -n --arg n "${JOBP}nope" '{job: $n}')"
bad command POST /api/v1/instances "$(jq -c -n --arg n "$W" '{job: $n, command: ["/bin/true"]}')"
bad priority POST /api/v1/instances "$(jq -c -n --arg n "$W" '{job: $n, priority: 7}')"
bad trace_id POST /api/v1/instances "$(jq -c -n --arg n "$W" '{job: $n, trace_id: ""}')"
bad colour POST /api/v1/instances "$(jq -c -n --arg n "$W" '{job: $n, colour: 1}')"
want 403 POST /api/v1/instances "$(jq -c -n --arg n "$W" '{job: $n}')" "$READ"
TR=api-$$-one
want 202 POST /api/v1/instances "$(jq -c -n --arg n "$W" --arg t "$TR" '{job: $n, trace_id: $t, payload: "in:"}')"
[ "$(j .trace_id)" = "$TR" ] || fail "submit: $(cat "$WORK/body")"
want 202 POST /api/v1/instances "$(jq -c -n --arg t "$TR-inline" '{command: ["/bin/echo", "inline"], trace_id: $t}')"
t0=$(date +%s%3N)
want 202 POST /api/v1/instances '{"command": ["/bin/true"]}'
GEN=$(j .trace_id)
trace_time_first "$GEN" "$t0" "$(date +%s%3N)" # ax-api made it
wait_for 60 "the submitted instance to finish" finished "$TR"
wait_for 60 "the instance without a trace id to finish" finished "$GEN"
wait_for 60 "the inline instance to finish" finished "$TR-inline"
want 200 GET "/api/v1/instances?trace_id=$TR"
ID=$(j '.items[0].id')
[ "$(j '.items|length')/$(j '.items[0].outcome')/$(j '.items[0].job')" = "1/SUCCESS/$W" ] || fail "list by trace: $(cat "$WORK/body")"
want 200 GET "/api/v1/instances/$ID"
[ "$(j '.attempts|length')/$(j '.attempts[0].outcome')/$(j '[.timeline[].state]|join(",")')" = \
  "1/SUCCESS/SCHEDULED,LOCKED,RUNNING,FINISHED" ] || fail "instance page: $(cat "$WORK/body")"
j .output | grep -q "in:hello" || fail "output not captured: $(j .output)"
[ "$(j .payload_base64 | base64 -d)" = "in:" ] || fail "payload"
[ "$(j '.timeline[0].duration_ms|type')/$(j '.timeline[3].duration_ms')" = "number/null" ] || fail "timeline durations"
bad id GET /api/v1/instances/abc
want 404 GET /api/v1/instances/999999999999
want 200 GET "/api/v1/instances?job=$W&state=finished&outcome=SUCCESS&priority=2&group=default&since=2000-01-01T00:00:00Z&until=2999-01-01T00:00:00Z"
[ "$(j '.items|map(.id)|join(",")')" = "$ID" ] || fail "filters: $(cat "$WORK/body")"
want 200 GET "/api/v1/instances?job=$W&outcome=FAILED"
[ "$(j '.items|length')" = 0 ] || fail "outcome filter"
want 200 GET "/api/v1/instances?idempotency_key=$(field "$TR" idempotency_key)"
[ "$(j '.items[0].id')" = "$ID" ] || fail "idempotency_key filter"
bad state GET "/api/v1/instances?state=bogus"
bad outcome GET "/api/v1/instances?outcome=MAYBE"
bad priority GET "/api/v1/instances?priority=9"
bad cursor GET "/api/v1/instances?cursor=x"
axctl instance list --job "$W" --outcome success --since 2000-01-01T00:00:00Z | jq -e --argjson id "$ID" 'select(.id == $id)' >/dev/null \
    || fail "axctl instance list --outcome --since"

# retry: once, idempotent
want 202 POST "/api/v1/instances/$ID/retry"
[ "$(j .duplicate)/$(j .idempotency_key)" = "false/retry:$ID" ] || fail "retry: $(cat "$WORK/body")"
retried() { [ "$(sql "SELECT count(*) FROM job_instance WHERE idempotency_key = 'retry:$ID' AND state = 'FINISHED'")" = 1 ]; }
wait_for 60 "the retried instance" retried
want 202 POST "/api/v1/instances/$ID/retry"
[ "$(j .duplicate)" = true ] && [ "$(j .instance_id)" != null ] || fail "second retry: $(cat "$WORK/body")"
axctl instance retry "$ID" | grep -q "already retried" || fail "axctl instance retry: not idempotent"
sleep 1
[ "$(sql "SELECT count(*) FROM job_instance WHERE idempotency_key = 'retry:$ID'")" = 1 ] || fail "retrying twice made two instances"
want 403 POST "/api/v1/instances/$ID/retry" "" "$READ"

# cancel a RUNNING command: its process group ends
R=${JOBP}sleeper
pgfile=$WORK/pgid
want 201 POST /api/v1/jobs "$(jq -c -n --arg n "$R" --arg f "$pgfile" \
    '{name: $n, command: ["/bin/sh", "-c", ("echo $$ > " + $f + "; sleep 300 & sleep 300")], retry: {max: 0}}')"
want 202 POST /api/v1/instances "$(jq -c -n --arg n "$R" --arg t "$TR-run" '{job: $n, trace_id: $t}')"
wait_for 60 "the sleeper to run" state_is "$TR-run" RUNNING
wait_for 10 "the sleeper's pgid" test -s "$pgfile"
RID=$(field "$TR-run" id)
want 403 POST "/api/v1/instances/$RID/cancel" "" "$READ"
want 202 POST "/api/v1/instances/$RID/cancel"
[ "$(j .state)/$(j .action)" = "RUNNING/stop_requested" ] || fail "cancel: $(cat "$WORK/body")"
wait_for 60 "the cancelled instance to finish" finished "$TR-run"
[ "$(field "$TR-run" outcome)" = CANCELLED ] || fail "cancelled instance ended $(field "$TR-run" outcome)"
pgid=$(cat "$pgfile")
group_alive() { ps -o stat= -g "$pgid" 2>/dev/null | grep -qv '^Z'; }
group_gone() { ! group_alive; }
wait_for 10 "process group $pgid gone" group_gone
want 409 POST "/api/v1/instances/$RID/cancel"
want 404 POST /api/v1/instances/999999999999/cancel
axctl instance list --job "$R" --outcome CANCELLED | grep -q "\"id\":$RID" || fail "axctl instance list --outcome CANCELLED"

# keyset pagination over 10,000 instances
P=${JOBP}bulk
want 201 POST /api/v1/jobs "$(jq -c -n --arg n "$P" '{name: $n, command: ["/bin/true"], enabled: false}')"
sql "INSERT INTO job_instance (job_id, job_name, state, outcome, timeout_ms, due_at, finished_at,
         result_published_at, trace_id, idempotency_key, deployment)
     SELECT j.id, j.name, 'FINISHED', 'SUCCESS', 1000, now(), now(), now(), 'bulk-$$-' || g,
            'bulk-$$-' || g, current_setting('ax.deployment')
     FROM job j, generate_series(1, 10000) g WHERE j.name = '$P'" >/dev/null
want 200 GET "/api/v1/instances?job=$P"
[ "$(j '.items|length')" = 50 ] || fail "default page is not 50"
: >"$WORK/ids"
cursor= pages=0
while :; do
    want 200 GET "/api/v1/instances?job=$P&limit=500${cursor:+&cursor=$cursor}"
    j '.items[].id' >>"$WORK/ids"
    cursor=$(j '.next_cursor // empty')
    pages=$((pages + 1))
    [ -n "$cursor" ] || break
    [ "$pages" -le 30 ] || fail "more than 30 pages"
done
[ "$(wc -l <"$WORK/ids")" = 10000 ] || fail "pagination saw $(wc -l <"$WORK/ids") instances, not 10000"
[ "$(sort -u "$WORK/ids" | wc -l)" = 10000 ] || fail "pagination repeated instances"
sort -rn "$WORK/ids" | cmp -s - "$WORK/ids" || fail "pagination is not newest first"
[ "$pages" = 20 ] || fail "$pages pages of 500 for 10000 instances"
# concurrent requests (api.threads handler threads, one connection each):
# 60 pages of 100 fetched 12 at a time, with whoami (a loop route) among
# them, each page exactly its slice of the sequential walk above
for k in $(seq 0 59); do
    c=$(sed -n "$(( (k % 20) * 500 + 1 ))p" "$WORK/ids")
    echo "$k $((c + 1))"
done >"$WORK/par.in"
par_one() { # K CURSOR: page K into par.K (whoami into who.K)
    curl -sf -H "Authorization: Bearer $READ" \
        "$BASE/api/v1/instances?job=$P&limit=100&cursor=$2" | jq -r '.items[].id' >"$WORK/par.$1"
    curl -sf -H "Authorization: Bearer $READ" "$BASE/api/v1/whoami" | jq -r .name >"$WORK/who.$1"
}
export -f par_one; export WORK BASE READ P
xargs -P 12 -n 2 bash -c 'par_one "$@"' _ <"$WORK/par.in" || fail "a concurrent request failed"
for k in $(seq 0 59); do
    from=$(( (k % 20) * 500 + 1 ))
    sed -n "${from},$((from + 99))p" "$WORK/ids" | cmp -s - "$WORK/par.$k" \
        || fail "concurrent page $k is not its slice of the sequential walk"
    [ "$(cat "$WORK/who.$k")" = viewer ] || fail "concurrent whoami $k: $(cat "$WORK/who.$k")"
done
# a page's cursor is stable while new instances arrive
want 200 GET "/api/v1/instances?job=$P&limit=4"
fourth=$(j '.items[3].id')
want 200 GET "/api/v1/instances?job=$P&limit=3"
c1=$(j .next_cursor)
sql "INSERT INTO job_instance (job_id, job_name, state, outcome, timeout_ms, due_at, finished_at,
         result_published_at, trace_id, idempotency_key, deployment)
     SELECT id, name, 'FINISHED', 'SUCCESS', 1000, now(), now(), now(), 'bulk-$$-new', 'bulk-$$-new',
            current_setting('ax.deployment') FROM job WHERE name = '$P'" >/dev/null
want 200 GET "/api/v1/instances?job=$P&limit=1&cursor=$c1"
[ "$(j '.items[0].id')" = "$fourth" ] || fail "the page after a cursor moved with a new instance"

# the fire ledger in keyset pages
fires() { [ "$(sql "SELECT count(*) FROM job_fire f JOIN job j ON j.id = f.job_id WHERE j.name = '$TICK'")" -ge 3 ]; }
wait_for 60 "three fires of $TICK" fires
want 200 POST "/api/v1/jobs/$TICK/disable"
want 200 GET "/api/v1/jobs/$TICK/history?limit=2"
[ "$(j '.items|length')" = 2 ] && [ "$(j .next_cursor)" != null ] || fail "history page 1: $(cat "$WORK/body")"
[ "$(j '.items[0].decision')" = fired ] || fail "history decision: $(cat "$WORK/body")"
h1=$(j '.items[1].nominal_time'); hc=$(j .next_cursor)
want 200 GET "/api/v1/jobs/$TICK/history?limit=2&cursor=$hc"
[ "$(j '.items|length')" -ge 1 ] && [[ "$(j '.items[0].nominal_time')" < "$h1" ]] || fail "history page 2: $(cat "$WORK/body")"
want 404 GET "/api/v1/jobs/${JOBP}nope/history"
bad cursor GET "/api/v1/jobs/$TICK/history?cursor=x"

# ---- (d) flows, fleet, DLQ ---------------------------------------------------------------------------
FL=${JOBP}flow
want 201 POST /api/v1/jobs "$(jq -c -n --arg n "${JOBP}s1" '{name: $n, command: ["/bin/true"]}')"
want 201 POST /api/v1/jobs "$(jq -c -n --arg n "${JOBP}s2" '{name: $n, command: ["/bin/true"]}')"
stages=$(jq -c -n --arg a "${JOBP}s1" --arg b "${JOBP}s2" '[{name: "extract", job: $a}, {name: "load", job: $b, after: ["extract"]}]')
bad stages POST /api/v1/flows "$(jq -c -n --arg n "$FL" '{name: $n, stages: [{name: "a", job: "x", after: ["b"]}, {name: "b", job: "x", after: ["a"]}]}')"
bad "stages[1].after" POST /api/v1/flows "$(jq -c -n --arg n "$FL" --argjson s "$stages" '{name: $n, stages: ($s | .[1].after = ["nope"])}')"
bad "stages[1].job" POST /api/v1/flows "$(jq -c -n --arg n "$FL" --argjson s "$stages" --arg x "${JOBP}nope" '{name: $n, stages: ($s | .[1].job = $x)}')"
bad on_failure POST /api/v1/flows "$(jq -c -n --arg n "$FL" --argjson s "$stages" '{name: $n, stages: $s, on_failure: "maybe"}')"
want 403 POST /api/v1/flows "$(jq -c -n --arg n "$FL" --argjson s "$stages" '{name: $n, stages: $s}')" "$READ"
want 201 POST /api/v1/flows "$(jq -c -n --arg n "$FL" --argjson s "$stages" '{name: $n, stages: $s}')"
[ "$(j '.stages|map(.name + ":" + (.after|join("+")))|join(",")')" = "extract:,load:extract" ] || fail "flow DAG: $(cat "$WORK/body")"
want 409 POST /api/v1/flows "$(jq -c -n --arg n "$FL" --argjson s "$stages" '{name: $n, stages: $s}')"
want 200 GET "/api/v1/flows?limit=500"
j '.items[].name' | grep -qx "$FL" || fail "flow list"
want 200 GET "/api/v1/flows/$FL"
want 201 POST "/api/v1/flows/$FL/runs"
RUN=$(j .run_id)
run_done() { call GET "/api/v1/flows/$FL/runs/$RUN" >/dev/null; [ "$(j .state)" = succeeded ]; }
wait_for 90 "the flow run to succeed" run_done
[ "$(j '.stages|map(.stage + "=" + .state)|join(",")')" = "extract=succeeded,load=succeeded" ] || fail "run stages: $(cat "$WORK/body")"
want 200 GET "/api/v1/flows/$FL/runs"
[ "$(j '.items[0].id')" = "$RUN" ] || fail "runs list"
want 404 GET "/api/v1/flows/$FL/runs/999999999"
bad run_id GET "/api/v1/flows/$FL/runs/x"
want 404 GET "/api/v1/flows/${JOBP}none"

want 200 GET /api/v1/executors
[ "$(j '.items|length')" -ge 1 ] && [ "$(j '.items[0].pools|type')" = array ] || fail "executors: $(cat "$WORK/body")"
want 200 GET "/api/v1/executors?all=true&limit=5"
want 200 GET /api/v1/lanes
[ "$(j '.items|map(.priority)|join(",")')" = "P0,P1,P2,P3,P4" ] || fail "lanes: $(cat "$WORK/body")"
has_leader() { call GET /api/v1/leader >/dev/null; [ "$(j '.leader.holder // empty')" != "" ]; }
wait_for 30 "a leader" has_leader
# Standbys: a second trigger shows up in the leader's standbys (its
# heartbeat row), with axctl status and the API naming the same holder; it
# is gone once it stopped.
LEADER=$(j .leader.holder)
[ "$(j '.standbys|length')" = 0 ] || fail "a standby before the second trigger: $(cat "$WORK/body")"
start_svc trigger@standby
one_standby() { call GET /api/v1/leader >/dev/null; [ "$(j '.standbys|length')" = 1 ]; }
wait_for 30 "the second trigger among the standbys" one_standby
SB=$(j '.standbys[0].holder')
[ "$SB" != "$LEADER" ] && [ "$(j .leader.holder)" = "$LEADER" ] && [ "$(j '.standbys[0].lost')" = false ] \
    && [ "$(j '.standbys[0].age_ms')" -ge 0 ] || fail "standbys: $(cat "$WORK/body")"
axctl status >"$WORK/status"
grep -qF "standby triggers: $SB (heard " "$WORK/status" || fail "axctl status: $(cat "$WORK/status")"
grep -qF "leader trigger $LEADER " "$WORK/status" || fail "axctl status: $(cat "$WORK/status")"
# a standby that stops beating (paused) is marked lost, and not once it beats again
kill -STOP "${SVC_PID[trigger@standby]}"
standby_lost() { call GET /api/v1/leader >/dev/null; [ "$(j '.standbys[0].lost')" = true ]; }
wait_for 30 "the paused standby marked lost" standby_lost
axctl status | grep -qF "standby triggers: $SB (lost: heard " || fail "axctl status, standby paused: $(axctl status)"
kill -CONT "${SVC_PID[trigger@standby]}"
standby_back() { call GET /api/v1/leader >/dev/null; [ "$(j '.standbys[0].lost')" = false ]; }
wait_for 30 "the standby beating again" standby_back
stop_svc trigger@standby
no_standby() { call GET /api/v1/leader >/dev/null; [ "$(j '.standbys|length')" = 0 ]; }
wait_for 30 "the stopped trigger gone from the standbys" no_standby
axctl status | grep -qx "standby triggers: none" || fail "axctl status after the standby stopped: $(axctl status)"
want 200 GET /api/v1/counters

FF=${JOBP}fails
want 201 POST /api/v1/jobs "$(jq -c -n --arg n "$FF" '{name: $n, command: ["/bin/false"], retry: {max: 0}}')"
want 202 POST /api/v1/instances "$(jq -c -n --arg n "$FF" --arg t "$TR-fail" '{job: $n, trace_id: $t}')"
wait_for 60 "the failing instance to finish" finished "$TR-fail"
FID=$(field "$TR-fail" id)
dlq_has() { call GET "/api/v1/dlq?limit=10" >/dev/null; [ "$(jq --argjson i "$FID" '[.items[] | select(.instance_id == $i)] | length' "$WORK/body")" = 1 ]; }
wait_for 60 "the final failure on the DLQ" dlq_has
REC=$(jq -r --argjson i "$FID" '.items[] | select(.instance_id == $i) | .id' "$WORK/body")
[ "$(jq -r '.items[0].kind' "$WORK/body")" = final_failure ] || fail "dlq list: $(cat "$WORK/body")"
# the dead letter names its job and trace id (headers ax.job, ax.trace.id)
[ "$(jq -r --argjson i "$FID" '.items[] | select(.instance_id == $i) | .job + "/" + .trace_id' "$WORK/body")" = "$FF/$TR-fail" ] \
    || fail "dlq list: no job/trace id: $(cat "$WORK/body")"
axctl dlq list --limit 10 | grep -qE "^$REC  [^ ]+  final_failure  instance $FID \(job $FF, trace $TR-fail\)  " \
    || fail "axctl dlq list: $(axctl dlq list --limit 10)"
want 200 GET "/api/v1/dlq?reason=exit&since=2000-01-01T00:00:00Z"
want 200 GET "/api/v1/dlq/$REC"
[ "$(j .kind)/$(j .instance_id)/$(j '.headers["ax.kind"]')" = "final_failure/$FID/final_failure" ] || fail "dlq show: $(cat "$WORK/body")"
[ "$(j .job)/$(j .trace_id)/$(j '.headers["ax.trace.id"]')" = "$FF/$TR-fail/$TR-fail" ] || fail "dlq show: $(cat "$WORK/body")"
bad id GET /api/v1/dlq/nonsense
want 404 GET /api/v1/dlq/0:99999999
want 403 POST "/api/v1/dlq/$REC/replay" "" "$READ"
want 200 POST "/api/v1/dlq/$REC/replay"
[ "$(j .action)" = resubmitted ] || fail "replay: $(cat "$WORK/body")"
key=$(j .idempotency_key)
replayed() { [ "$(sql "SELECT count(*) FROM job_instance WHERE idempotency_key = '$key' AND state = 'FINISHED'")" = 1 ]; }
wait_for 60 "the replayed instance" replayed
want 200 POST "/api/v1/dlq/$REC/replay"
[ "$(j .action)" = already_replayed ] && [ "$(j .instance_id)" != null ] || fail "second replay: $(cat "$WORK/body")"
sleep 1
[ "$(sql "SELECT count(*) FROM job_instance WHERE idempotency_key = '$key'")" = 1 ] || fail "replaying twice made two instances"

# delete with unfinished instances: refused, then cancel_pending
want 202 POST /api/v1/instances "$(jq -c -n --arg n "$W" --arg t "$TR-later" '{job: $n, trace_id: $t, delay_ms: 600000}')"
wait_for 30 "the delayed instance" state_is "$TR-later" SCHEDULED
# the overview's aggregate: this deployment's FAILED per minute (the two
# /bin/false runs above) and the backlog, as the database has them
want 200 GET "/api/v1/stats?minutes=60"
[ "$(j '.minutes|length')" = 60 ] || fail "stats: not 60 minutes: $(head -c 300 "$WORK/body")"
failed_db=$(sql "SELECT count(*) FROM job_instance WHERE deployment = '$AXCONF_TOPIC_PREFIX' AND outcome = 'FAILED' AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'")
[ "$failed_db" -ge 2 ] && [ "$(j '[.minutes[].finished.FAILED // 0] | add')" = "$failed_db" ] \
    || fail "stats: FAILED per minute $(j '[.minutes[].finished.FAILED // 0] | add'), the database $failed_db"
[ "$(j '.backlog.count')" -ge 1 ] && [ "$(j '.backlog.oldest_age_ms')" -ge 0 ] || fail "stats: backlog $(j .backlog)"
[ "$(j '[.minutes[] | select(.lateness_p99_ms != null)] | length')" -ge 1 ] || fail "stats: no fire lateness"
bad minutes GET "/api/v1/stats?minutes=0"
want 409 DELETE "/api/v1/jobs/$W"
[ "$(j .error.field)" = cancel_pending ] || fail "delete refusal names cancel_pending"
want 200 DELETE "/api/v1/jobs/$W?cancel_pending=true"
[ "$(j '.cancelled|length')" = 1 ] || fail "delete cancel_pending: $(cat "$WORK/body")"
want 200 DELETE "/api/v1/flows/$FL"
want 404 DELETE "/api/v1/flows/$FL"

# ---- (e) audit log, rate limit, TLS ------------------------------------------------------------------
grep -q "api: POST /api/v1/jobs by ops -> 201" "$WORK/ax-api.log" || fail "mutations not logged with the token name"
grep -q "api: POST /api/v1/instances/$RID/cancel by ops -> 202" "$WORK/ax-api.log" || fail "cancel not logged"
grep -qF "$ADMIN" "$WORK/ax-api.log" && fail "a token reached the log"
grep -qF "$READ" "$WORK/ax-api.log" && fail "a token reached the log"

P2=$(free_port)
start_svc api@slow --set "api.listen=127.0.0.1:$P2" --set "api.tokens=$ENTRIES" --set api.rate.limit=1 --set api.rate.burst=3
wait_for 30 "the second ax-api" curl -sf "http://127.0.0.1:$P2/healthz"
codes=$(for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' -H "Authorization: Bearer $READ" "http://127.0.0.1:$P2/api/v1/whoami"; done)
grep -q 429 <<<"$codes" || fail "no 429 past the rate: $codes"
[ "${codes%% *}" = 200 ] || fail "the first request was refused: $codes"
curl -s -D "$WORK/h429" -o "$WORK/b429" -H "Authorization: Bearer $READ" "http://127.0.0.1:$P2/api/v1/whoami" >/dev/null
grep -qi '^Retry-After: [1-9]' "$WORK/h429" && [ "$(jq -r .error.code "$WORK/b429")" = rate_limited ] \
    || fail "429 without Retry-After or rate_limited"
# the other token has a bucket of its own
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ADMIN" "http://127.0.0.1:$P2/api/v1/whoami")" = 200 ] \
    || fail "one token's rate limited another"
stop_svc api@slow

# Instances of this deployment only: an ax-api (and axctl) of another
# deployment (topic.prefix) lists none of this one's instances, unless
# asked for every deployment's.
OTHER="${AXCONF_TOPIC_PREFIX}other-"
P5=$(free_port)
start_svc api@other --set "api.listen=127.0.0.1:$P5" --set "api.tokens=$ENTRIES" --set "topic.prefix=$OTHER"
wait_for 30 "the other deployment's ax-api" curl -sf "http://127.0.0.1:$P5/healthz"
mine=$(call GET "/api/v1/instances?limit=500&trace_id=$TR-fail" >/dev/null; j '.items|length')
[ "$mine" -ge 1 ] || fail "this deployment lists no instance of $TR-fail"
olist() { curl -sf -H "Authorization: Bearer $READ" "http://127.0.0.1:$P5/api/v1/instances?limit=500&trace_id=$TR-fail$1" | jq '.items|length'; }
[ "$(olist '')" = 0 ] || fail "another deployment's ax-api lists this deployment's instances"
[ "$(olist '&all_deployments=true')" = "$mine" ] || fail "all_deployments=true does not list every deployment's"
bad all_deployments GET "/api/v1/instances?all_deployments=maybe"
[ "$(AXCONF_TOPIC_PREFIX=$OTHER axctl instance list --trace "$TR-fail" | wc -l)" = 0 ] || fail "axctl instance list of another deployment lists this one's"
[ "$(AXCONF_TOPIC_PREFIX=$OTHER axctl instance list --trace "$TR-fail" --all-deployments | wc -l)" = "$mine" ] \
    || fail "axctl instance list --all-deployments"
[ "$(axctl instance list --trace "$TR-fail" | wc -l)" = "$mine" ] || fail "axctl instance list of this deployment"
stop_svc api@other

# A DLQ request does not hold up the others: with Kafka unreachable for
# this ax-api, a DLQ list waits on Kafka's metadata (seconds) and ends in
# 503 + Retry-After, while /healthz and a store read sent during it are
# answered (each bounded by curl -m 2) before the DLQ list has ended.
P4=$(free_port)
DEAD=$(free_port)
start_svc api@nokafka --set "api.listen=127.0.0.1:$P4" --set "api.tokens=$ENTRIES" \
    --set "kafka.bootstrap.servers=127.0.0.1:$DEAD"
wait_for 30 "the ax-api without Kafka" curl -sf "http://127.0.0.1:$P4/healthz"
curl -s -D "$WORK/hdlq" -o "$WORK/bdlq" -w '%{http_code}' -H "Authorization: Bearer $READ" \
    "http://127.0.0.1:$P4/api/v1/dlq?limit=5" >"$WORK/cdlq" &
DLQ_PID=$!
sleep 0.5 # the DLQ list reaches ax-api first (ordering, not a speed check)
curl -sf -m 2 "http://127.0.0.1:$P4/healthz" >/dev/null || fail "/healthz waited for the DLQ request"
[ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $READ" "http://127.0.0.1:$P4/api/v1/jobs?limit=1")" = 200 ] \
    || fail "/api/v1/jobs waited for the DLQ request"
kill -0 "$DLQ_PID" 2>/dev/null || fail "the DLQ list had ended before the other requests were answered: $(cat "$WORK/cdlq")"
wait "$DLQ_PID" || true
[ "$(cat "$WORK/cdlq")" = 503 ] && [ "$(jq -r .error.code "$WORK/bdlq")" = unavailable ] \
    && grep -qi '^Retry-After: [1-9]' "$WORK/hdlq" || fail "DLQ with Kafka away: $(cat "$WORK/cdlq") $(cat "$WORK/bdlq")"
stop_svc api@nokafka

openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -days 1 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1
chmod 600 "$WORK/key.pem"
P3=$(free_port)
start_svc api@tls --set "api.listen=127.0.0.1:$P3" --set "api.tokens=$ENTRIES" \
    --set "api.tls.cert=$WORK/cert.pem" --set "api.tls.key=$WORK/key.pem"
wait_for 30 "ax-api over TLS" curl -sf --cacert "$WORK/cert.pem" "https://127.0.0.1:$P3/healthz"
[ "$(curl -s --cacert "$WORK/cert.pem" -H "Authorization: Bearer $READ" "https://127.0.0.1:$P3/api/v1/whoami" | jq -r .name)" = viewer ] \
    || fail "the API over TLS"
curl -s -m 5 "http://127.0.0.1:$P3/healthz" | grep -q '"ok"' && fail "plain HTTP answered on the TLS port"
stop_svc api@tls
set +e
"$AX_BIN/services/api/ax-api" --set "api.tls.cert=$WORK/cert.pem" >"$WORK/half.out" 2>&1; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "api.tls.key" "$WORK/half.out" || fail "a cert without a key: exit $rc, $(cat "$WORK/half.out")"
set +e
"$AX_BIN/services/api/ax-api" --set "api.tokens=ops:root:abc" >"$WORK/badtok.out" 2>&1; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "api.tokens" "$WORK/badtok.out" || fail "a bad api.tokens: exit $rc, $(cat "$WORK/badtok.out")"

# ---- (f) the OpenAPI document against every response seen ---------------------------------------------
curl -sf "$BASE/api/v1/openapi.json" >"$WORK/openapi.json"
cmp -s "$WORK/openapi.json" "$AX_SRC/services/api/openapi.json" || fail "openapi.json is not the repository's document"
python3 "$AX_SRC/tests/integration/helpers/openapi_check.py" "$WORK/openapi.json" "$RESP" \
    || fail "responses do not match the OpenAPI document"
kill -0 "${SVC_PID[api]}" || fail "ax-api died"
log "ok"
