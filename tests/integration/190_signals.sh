#!/usr/bin/env bash
# Signals an operator sends to every service (issue #11, defect 6):
# (a) SIGHUP re-reads the configuration file: each service stays up and logs
#     what changed, key old → new; a reloadable key (log.level, a trigger
#     interval, the callback's retry budget) is applied — a changed
#     log.level takes effect at once (DEBUG lines appear) — a key that needs
#     a restart is logged as such, and a secret's value is never logged,
#     nor the path or query of a URL (alert.webhook.url: only
#     scheme://host:port, in the SIGHUP diff and in config print).
# (b) A configuration that is refused (trigger.lag.low >= trigger.lag.high,
#     a bad value) changes nothing and is logged; the service lives.
# (c) SIGUSR1, SIGUSR2 and SIGPIPE kill nothing (USR1/USR2 are logged).
# (d) SIGTERM (and SIGQUIT, SIGINT) drain: logged, exit status 0 — also
#     while a service still waits for PostgreSQL.
# (e) SIGTERM to an executor with a backlog (one slot, claimed instances
#     waiting, more fetched): it exits 0 — it used to hang at exit in
#     librdkafka, which waits for every message it handed out, until its
#     supervisor's SIGKILL — and what it handed back runs on the next
#     executor: every instance finishes once, with one attempt.
source "$(dirname "$0")/lib.sh"

create_topics
CONF="$WORK/ax.conf"
cp "$AX_CONFIG" "$CONF"
J="${JOBP}sig"
axctl job create "$J" -- true >/dev/null || fail "job create failed"

alive() { kill -0 "${SVC_PID[$1]}" 2>/dev/null || fail "ax-$1 died (see its log)"; }
logs() { cat "$WORK/ax-$1.log"; }
count() { grep -c -- "$2" "$WORK/ax-$1.log" || true; }

for s in trigger executor callback; do start_svc "$s" --config "$CONF"; done
wait_for 30 "the trigger to consume" grep -q "consuming" "$WORK/ax-trigger.log"
wait_for 30 "the callback to consume" grep -q "consuming" "$WORK/ax-callback.log"
wait_for 30 "the executor to start" grep -q "executing" "$WORK/ax-executor.log"
for s in trigger executor callback; do
    [ "$(count "$s" " DEBUG ")" = 0 ] || fail "ax-$s logs DEBUG lines at log.level info"
done

# ---- (a) SIGHUP applies and logs ----------------------------------------------------------
cat >>"$CONF" <<'CFG'
log.level = debug
trigger.scan.interval.ms = 700
callback.retry.budget = 777
executor.slots = 5
trigger.lease.ms = 20000
message.max.bytes = 2000000
alert.webhook.secret = sEcReT-never-logged-42
alert.webhook.url = http://127.0.0.1:9/hooks/T0K3N-in-path?token=T0K3N-in-query
CFG
for s in trigger executor callback; do kill -HUP "${SVC_PID[$s]}"; done
for s in trigger executor callback; do
    wait_for 10 "ax-$s to log the reload" grep -q "SIGHUP: configuration reloaded" "$WORK/ax-$s.log"
    sleep 0.2; alive "$s"
    grep -q "SIGHUP: log.level: info → debug" "$WORK/ax-$s.log" || { logs "$s"; fail "ax-$s did not log log.level info → debug"; }
    grep -q "SIGHUP: message.max.bytes: 1048576 → 2000000 needs a restart" "$WORK/ax-$s.log" ||
        { logs "$s"; fail "ax-$s did not log that message.max.bytes needs a restart"; }
    grep -q "alert.webhook.secret changed (value not shown)" "$WORK/ax-$s.log" ||
        { logs "$s"; fail "ax-$s did not log the secret's change"; }
    ! grep -q "sEcReT-never-logged-42" "$WORK/ax-$s.log" || fail "ax-$s logged a secret's value"
    ! grep -q "T0K3N" "$WORK/ax-$s.log" || { grep T0K3N "$WORK/ax-$s.log"; fail "ax-$s logged a URL's path or query"; }
done
grep -q "SIGHUP: alert.webhook.url: (unset) → http://127.0.0.1:9$" "$WORK/ax-trigger.log" \
    || fail "the trigger did not log alert.webhook.url as scheme://host:port"
AX_CONFIG="$CONF" axctl config print >"$WORK/printed"
grep -q "^alert.webhook.url = http://127.0.0.1:9$" "$WORK/printed" && ! grep -q T0K3N "$WORK/printed" \
    || { grep webhook "$WORK/printed"; fail "config print shows the URL's path or query"; }
grep -q "SIGHUP: trigger.scan.interval.ms: 1000 → 700$" "$WORK/ax-trigger.log" || fail "trigger.scan.interval.ms not applied"
grep -q "SIGHUP: trigger.lease.ms: 10000 → 20000 needs a restart" "$WORK/ax-trigger.log" || fail "trigger.lease.ms not logged as needing a restart"
grep -q "SIGHUP: callback.retry.budget: 10000 → 777$" "$WORK/ax-callback.log" || fail "callback.retry.budget not applied"
grep -q "SIGHUP: executor.slots: 8 → 5$" "$WORK/ax-executor.log" || fail "executor.slots not applied"
grep -q "pool command: 5 slots" "$WORK/ax-executor.log" || fail "the executor's pool was not resized"
# The new level takes effect: work now logs DEBUG lines in every service.
TR="sig-$$-$RANDOM"
axctl submit --job "$J" --trace-id "$TR" >/dev/null || fail "submit failed"
wait_for 30 "the instance to finish" finished "$TR"
wait_for 10 "a DEBUG line of the trigger's work" grep -q "DEBUG ax-trigger: .*scheduled\|DEBUG ax-trigger: batch of" "$WORK/ax-trigger.log"
wait_for 10 "a DEBUG line of the callback's work" grep -q "DEBUG ax-callback: batch of" "$WORK/ax-callback.log"
wait_for 10 "a DEBUG line of the executor" grep -q " DEBUG ax-executor: " "$WORK/ax-executor.log"

# ---- (b) a refused configuration changes nothing --------------------------------------------
echo "trigger.lag.low = 99999999" >>"$CONF"
kill -HUP "${SVC_PID[trigger]}"
wait_for 10 "the refused reload" grep -q "SIGHUP: configuration not reloaded: trigger.lag.low" "$WORK/ax-trigger.log"
sed -i '/^trigger.lag.low = 99999999$/d' "$CONF"
echo "callback.batch = 0" >>"$CONF"
kill -HUP "${SVC_PID[callback]}"
wait_for 10 "the refused reload" grep -q "SIGHUP: configuration not reloaded: .*callback.batch" "$WORK/ax-callback.log"
sed -i '/^callback.batch = 0$/d' "$CONF"
sleep 0.3; alive trigger; alive callback

# ---- (c) USR1, USR2, PIPE ------------------------------------------------------------------
for s in trigger executor callback; do
    for sig in USR1 USR2 PIPE; do kill "-$sig" "${SVC_PID[$s]}"; done
done
for s in trigger executor callback; do
    wait_for 10 "ax-$s to log SIGUSR2" grep -q "(SIGUSR2): ignored" "$WORK/ax-$s.log"
    grep -q "(SIGUSR1): ignored" "$WORK/ax-$s.log" || fail "ax-$s did not log SIGUSR1"
    alive "$s"
done
# The services still work after all that.
TR2="sig2-$$-$RANDOM"
axctl submit --job "$J" --trace-id "$TR2" >/dev/null || fail "submit failed"
wait_for 30 "the second instance to finish" finished "$TR2"

# ---- (d) SIGTERM, SIGQUIT, SIGINT: logged, exit 0 --------------------------------------------
term() { # term NAME SIGNAL
    local pid=${SVC_PID[$1]} rc
    kill "-$2" "$pid"
    set +e; wait "$pid"; rc=$?; set -e
    unset "SVC_PID[$1]"
    [ "$rc" = 0 ] || { logs "$1"; fail "ax-$1 exited $rc on SIG$2 (expected 0)"; }
    grep -q "(SIG$2): stopping" "$WORK/ax-$1.log" || { logs "$1"; fail "ax-$1 did not log SIG$2"; }
    log "ax-$1: SIG$2 logged, exit 0"
}
for s in trigger executor callback; do term "$s" TERM; done
start_svc trigger@q --config "$CONF"
start_svc callback@i --config "$CONF"
wait_for 30 "the second trigger to consume" grep -q "consuming" "$WORK/ax-trigger@q.log"
wait_for 30 "the second callback to consume" grep -q "consuming" "$WORK/ax-callback@i.log"
term trigger@q QUIT
term callback@i INT
# Also while PostgreSQL is unreachable (the service waits for it).
start_svc executor@pg --config "$CONF" --set pg.port=1 --set backoff.max.ms=2000
wait_for 30 "the executor to wait for PostgreSQL" grep -q "retrying in" "$WORK/ax-executor@pg.log"
term executor@pg TERM

# ---- (e) SIGTERM with a backlog: exits, and nothing is lost ----------------------------------
JS="${JOBP}sigq"
axctl job create "$JS" -- sleep 1 >/dev/null || fail "job create failed"
start_svc trigger@e --config "$CONF"
start_svc callback@e --config "$CONF"
start_svc executor@e --config "$CONF" --set executor.slots=1 --set executor.shutdown.grace.ms=5000
wait_for 30 "the executor to start" grep -q "executing" "$WORK/ax-executor@e.log"
TRQ="sigq-$$-$RANDOM"
for i in $(seq 1 12); do
    axctl submit --job "$JS" --trace-id "$TRQ-$i" >/dev/null || fail "submit $i failed"
done
inst() { sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$TRQ-%' AND $1"; }
claimed_behind() { [ "$(inst "state = 'LOCKED'")" -ge 2 ]; }
all_finished() { [ "$(inst "state = 'FINISHED' AND result_published_at IS NOT NULL")" = 12 ]; }
wait_for 30 "instances claimed behind the running one" claimed_behind
pid=${SVC_PID[executor@e]}
kill -TERM "$pid"
for ((i = 0; i < 60; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
if kill -0 "$pid" 2>/dev/null; then
    gdb -p "$pid" -batch -ex 'thread apply all bt 8' 2>/dev/null | grep -E '^#|^Thread' | head -40 || true
    kill -KILL "$pid"
    fail "ax-executor did not exit 60 s after SIGTERM (backlog of claimed instances)"
fi
set +e; wait "$pid"; rc=$?; set -e
unset "SVC_PID[executor@e]"
[ "$rc" = 0 ] || { logs executor@e; fail "ax-executor exited $rc on SIGTERM with a backlog"; }
grep -q "handed back" "$WORK/ax-executor@e.log" || { logs executor@e; fail "nothing was handed back"; }
log "ax-executor: SIGTERM with a backlog: exit 0 ($(grep -o '[0-9]* claimed instance(s) that had not started handed back' "$WORK/ax-executor@e.log"))"
start_svc executor@f --config "$CONF"
wait_for 90 "all 12 instances to finish" all_finished
[ "$(inst "outcome = 'SUCCESS'")" = 12 ] || fail "not every instance SUCCESS: $(inst "outcome <> 'SUCCESS'") other"
twice=$(sql "SELECT count(*) FROM (SELECT a.instance_id FROM job_attempt a JOIN job_instance i ON i.id = a.instance_id
             WHERE i.trace_id LIKE '$TRQ-%' GROUP BY a.instance_id HAVING count(*) > 1) x")
[ "$twice" = 0 ] || fail "$twice instance(s) ran more than once"
log "the handed-back instances ran on the next executor, each once"
log "PASS"
