#!/usr/bin/env bash
# Exactly one result per instance on the results topic, as a read_committed
# consumer sees it, across PostgreSQL restarts and kill -9 of callbacks
# (two callbacks running): 2,000 inline instances (a fifth of them failing
# for good) are submitted in waves while PostgreSQL is restarted twice and
# callbacks are killed with SIGKILL and started again. At the end every
# instance's key is on the results topic exactly once, and every final
# failure's copy (ax.kind=final_failure) is on the dead-letter topic exactly
# once. A publisher's mark is held up after its Kafka commit (a table lock)
# and then the publisher is killed, or PostgreSQL restarted; at the end the
# publisher is stopped (SIGSTOP) with work left, and continued.
#
# The PostgreSQL restarted is a private cluster of this test (in its
# scratch directory, on its own port), never the shared one.
source "$(dirname "$0")/lib.sh"
: "${AX_SRC:?needs AX_SRC (the source tree)}"
command -v kcat >/dev/null || fail "kcat is needed"

# ---- a private PostgreSQL, migrated, and a config pointing at it
PRIV_STATE=$WORK/state
mkdir -p "$PRIV_STATE"
port=$((20000 + RANDOM % 9000)) # below the ephemeral range, unused in any state
while ss -Htan "( sport = :$port )" 2>/dev/null | grep -q .; do port=$((port + 1)); done
(
    export AX_STATE=$PRIV_STATE AX_PG_PORT=$port
    source "$AX_SRC/infra/lib.sh"
    ax_pg_start >"$WORK/pg-setup.log" 2>&1 || { cat "$WORK/pg-setup.log"; exit 1; }
    ax_migrate "$AX_SRC/infra/migrations" >>"$WORK/pg-setup.log" 2>&1 \
        || { cat "$WORK/pg-setup.log"; exit 1; }
    ax_write_config "$WORK/ax.conf"
) || fail "cannot start a private PostgreSQL"
# The private PostgreSQL beside the shared broker: the broker's kafka.* keys
# (bootstrap, SASL credentials) come from the suite's configuration.
{ grep -v '^[[:space:]]*kafka\.' "$WORK/ax.conf"; grep '^[[:space:]]*kafka\.' "$AX_CONFIG"; } >"$WORK/ax.conf.new"
chmod 600 "$WORK/ax.conf.new" && mv -f "$WORK/ax.conf.new" "$WORK/ax.conf"
export AX_CONFIG=$WORK/ax.conf
export PGHOST=$(conf_get pg.host) PGPORT=$(conf_get pg.port) PGDATABASE=$(conf_get pg.dbname) \
       PGUSER=$(conf_get pg.user) PGPASSWORD=$(conf_get pg.password)
pg_priv() { (export AX_STATE=$PRIV_STATE AX_PG_PORT=$port; source "$AX_SRC/infra/lib.sh"; "$@") \
                >>"$WORK/pg-setup.log" 2>&1; }
pg_restart() {
    log "restarting the private PostgreSQL"
    pg_priv ax_pg_stop || fail "cannot stop the private PostgreSQL"
    sleep "${1:-2}"
    pg_priv ax_pg_start || fail "cannot start the private PostgreSQL"
}
finish_test() {
    local rc=$?
    set +e
    for n in "${!SVC_PID[@]}"; do stop_svc "$n" KILL; done
    pg_priv ax_pg_stop
    [ -z "${AX_IT_KEEP:-}" ] || cp "$WORK"/*.log "$AX_IT_KEEP"/ 2>/dev/null
    rc_is() { return "$1"; }
    rc_is "$rc"
    cleanup
}
trap finish_test EXIT

create_topics 3
start_svc trigger --set backoff.max.ms=1000
start_svc executor --set backoff.max.ms=1000 --set executor.slots=32
start_svc callback@1 --set backoff.max.ms=1000
start_svc callback@2 --set backoff.max.ms=1000

tag="once$$"
N_OK=1600 N_BAD=400 WAVES=10
N=$((N_OK + N_BAD))
finished_n() { sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND state = 'FINISHED'"; }
# a wave: N_OK/WAVES succeeding and N_BAD/WAVES failing (inline commands
# are not retried: final failures)
submit_wave() {
    axctl submit --count $((N_OK / WAVES)) --trace-id "$tag-ok$1" -- /bin/true >/dev/null \
        || echo "wave $1 ok: submit failed" >>"$WORK/submit.err"
    axctl submit --count $((N_BAD / WAVES)) --trace-id "$tag-bad$1" -- /bin/sh -c 'exit 3' \
        >/dev/null || echo "wave $1 bad: submit failed" >>"$WORK/submit.err"
}
# waves 1-6 in the background, a second apart; 7-10 below, each with work
# for the publisher at a chosen moment
(
    for w in $(seq 1 6); do submit_wave "$w"; sleep 1; done
) &
SUBMITTER=$!

at_least() { [ "$(finished_n)" -ge "$1" ]; }
restart_callback() { # restart_callback NAME: kill -9, start again
    log "kill -9 of $1"
    kill -KILL "${SVC_PID[$1]}"; wait "${SVC_PID[$1]}" 2>/dev/null || true
    unset "SVC_PID[$1]"
    start_svc "$1" --set backoff.max.ms=1000
}
# Hold the publisher's mark (the statement after its Kafka commit) on a
# table lock: the moment of the reported defect, made certain. hold_marks
# takes the lock; blocked_mark prints the callback (callback@1|2) whose mark
# waits and its backend's pid, nothing if none did in 20 s.
LOCKER=
hold_marks() {
    PGAPPNAME=ax-it-locker psql -X -q \
        -c "BEGIN; LOCK TABLE ax_results_offset IN EXCLUSIVE MODE; SELECT pg_sleep(60)" \
        >/dev/null 2>&1 &
    LOCKER=$!
}
blocked_mark() {
    local i cport bpid pid n
    for i in $(seq 1 100); do
        read -r cport bpid < <(sql "SELECT client_port, pid FROM pg_stat_activity
                     WHERE wait_event_type = 'Lock'
                     AND query LIKE '/* ax: results published */%' LIMIT 1" | tr '|' ' ') || true
        if [ -n "${cport:-}" ]; then
            pid=$(ss -Htnp "( sport = :$cport )" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
            for n in callback@1 callback@2; do
                [ "${SVC_PID[$n]:-}" = "$pid" ] && { echo "$n $bpid"; return 0; }
            done
        fi
        sleep 0.2
    done
}
release_marks() {
    sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'ax-it-locker'" \
        >/dev/null 2>&1 || true
    wait "$LOCKER" 2>/dev/null || true
}

held=0
wait_for 90 "first results" at_least 150
pg_restart 2
wait_for 90 "results after the first PostgreSQL restart" at_least 500
restart_callback callback@1
wait "$SUBMITTER" || true
# the publisher dies between its Kafka commit and its mark
hold_marks
submit_wave 7
read -r who bpid < <(blocked_mark) || true
if [ -n "${who:-}" ]; then
    log "the mark of $who waits after its commit"; held=$((held + 1))
    restart_callback "$who"
    # its session would still run the mark once the lock is gone
    sql "SELECT pg_terminate_backend($bpid)" >/dev/null
else
    log "no mark waited"; restart_callback callback@2
fi
release_marks
published_at_least() {
    [ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%'
              AND result_published_at IS NOT NULL")" -ge "$1" ]
}
wait_for 90 "waves 1-7 published" published_at_least $((7 * N / WAVES))
# PostgreSQL goes away between the publisher's Kafka commit and its mark
hold_marks
submit_wave 8
read -r who bpid < <(blocked_mark) || true
if [ -n "${who:-}" ]; then
    log "the mark of $who waits after its commit"; held=$((held + 1))
    # its session goes first: in the restart's fast shutdown the locker's
    # backend could end a moment before the mark's, which then took the
    # lock and committed before its own SIGTERM (the mark is then not
    # held up at all, and no recovery has anything to mark)
    sql "SELECT pg_terminate_backend($bpid)" >/dev/null
else
    log "no mark waited"
fi
pg_restart 1
release_marks

# The publisher stopped (SIGSTOP) with work left: its session ends after
# 10 s idle, another callback takes over (fencing it) and publishes the
# last waves; the stopped one, continued, publishes nothing twice.
holder_pid=
find_holder() {
    local port
    port=$(sql "SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE l.locktype = 'advisory' AND l.granted LIMIT 1")
    [ -n "$port" ] || return 1
    holder_pid=$(ss -Htnp "( sport = :$port )" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2) || true
    [ -n "$holder_pid" ]
}
for i in $(seq 1 100); do find_holder && break; sleep 0.2; done
if [ -n "$holder_pid" ]; then
    log "SIGSTOP of the publisher (pid $holder_pid)"
else
    holder_pid=${SVC_PID[callback@1]}
    log "no callback holds the publisher lock; SIGSTOP of callback@1 (pid $holder_pid)"
fi
kill -STOP "$holder_pid"
submit_wave 9
submit_wave 10
[ ! -s "$WORK/submit.err" ] || fail "submissions failed: $(cat "$WORK/submit.err")"

all_published() {
    [ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND state = 'FINISHED'
              AND result_published_at IS NOT NULL")" = "$N" ]
}
wait_for 150 "all $N instances finished and published" all_published
kill -CONT "$holder_pid"
sleep 2
n_failed=$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND outcome <> 'SUCCESS'")
[ "$n_failed" = "$N_BAD" ] || fail "expected $N_BAD failures, have $n_failed"

# ---- count by key, read_committed, from the topics themselves
sql "SELECT id FROM job_instance WHERE trace_id LIKE '$tag-%'" | sort >"$WORK/ids"
sql "SELECT id FROM job_instance WHERE trace_id LIKE '$tag-%' AND outcome <> 'SUCCESS'" | sort >"$WORK/bad_ids"
read_keys() { # read_keys TOPIC: one key per line, read_committed, to the end
    kc -X isolation.level=read_committed -C -t "$1" -o beginning -e -q \
        -f '%k\t%h\n' 2>/dev/null
}
read_keys "$(topic results)" | cut -f1 | sort >"$WORK/result_keys"
read_keys "$(topic dlq)" | grep 'ax.kind=final_failure' | cut -f1 | sort >"$WORK/dlq_keys"
n_results=$(wc -l <"$WORK/result_keys")
dup_results=$(uniq -d "$WORK/result_keys" | wc -l)
missing_results=$(comm -23 "$WORK/ids" <(uniq "$WORK/result_keys") | wc -l)
n_dlq=$(wc -l <"$WORK/dlq_keys")
dup_dlq=$(uniq -d "$WORK/dlq_keys" | wc -l)
missing_dlq=$(comm -23 "$WORK/bad_ids" <(uniq "$WORK/dlq_keys") | wc -l)
log "results topic: $n_results records for $N instances ($dup_results duplicated, $missing_results missing);" \
    "final-failure copies: $n_dlq for $N_BAD ($dup_dlq duplicated, $missing_dlq missing)"
[ "$missing_results" = 0 ] || fail "$missing_results instance(s) have no result on the topic"
[ "$dup_results" = 0 ] && [ "$n_results" = "$N" ] \
    || fail "results published more than once: $(uniq -d "$WORK/result_keys" | head -5 | tr '\n' ' ')"
[ "$missing_dlq" = 0 ] || fail "$missing_dlq final failure(s) have no dead-letter copy"
[ "$dup_dlq" = 0 ] && [ "$n_dlq" = "$N_BAD" ] \
    || fail "final-failure copies dead-lettered more than once: $(uniq -d "$WORK/dlq_keys" | head -5 | tr '\n' ' ')"
# the marks held up above were recovered from the topic
# (summed per save: a recovery cut short by the next kill has still logged
# what it marked)
recovered=$({ grep -ho 'results recovery: [0-9]* instance(s) found on .* marked published' \
                     "$WORK"/ax-callback@*.log || true; } | awk '{ print $3 }' \
                | awk '{ n += $1 } END { print n + 0 }')
log "marks held up after a commit: $held; instances marked only by a recovery from the topic: $recovered"
[ "$held" = 0 ] || [ "$recovered" -gt 0 ] || fail "no recovery from the topic marked anything"
for s in trigger executor callback@1 callback@2; do
    kill -0 "${SVC_PID[$s]}" || fail "ax-$s died"
done
log "ok"
