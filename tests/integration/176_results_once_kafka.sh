#!/usr/bin/env bash
# Exactly one result per instance on the results topic (read_committed)
# across Kafka restarts: 1,000 inline instances (a fifth failing for good)
# with two callbacks, while the broker is stopped and started again, then
# killed with SIGKILL (commits in flight end aborted or of unknown outcome:
# the publisher replaces its producer and recovers from the topic) and
# started again. At the end every instance's key is on the results topic
# exactly once and every final failure's copy on the dead-letter topic
# exactly once. Before the restarts the broker is frozen (SIGSTOP) for 15 s
# while the publisher commits a result, longer than the lock session's
# idle_session_timeout (10 s): the publisher keeps its lock (the lock's
# own connection is kept alive during Kafka waits) and the result is
# published once.
#
# The broker restarted is a private one of this test (in its scratch
# directory, on its own ports, the jars from AX_CACHE), never the shared
# one; PostgreSQL is the one given.
source "$(dirname "$0")/lib.sh"
: "${AX_SRC:?needs AX_SRC (the source tree)}"
command -v kcat >/dev/null || fail "kcat is needed"

# ---- a private Kafka broker, and a config pointing at it
PRIV_STATE=$WORK/state
mkdir -p "$PRIV_STATE"
free_port() { # below the ephemeral range, unused in any state, not $1
    local p=$((20000 + RANDOM % 9000))
    while ss -Htan "( sport = :$p )" 2>/dev/null | grep -q . || [ "$p" = "${1:-}" ]; do p=$((p + 1)); done
    echo "$p"
}
kport=$(free_port)
cport=$(free_port "$kport")
kafka_priv() {
    (export AX_STATE=$PRIV_STATE AX_KAFKA_PORT=$kport AX_KAFKA_CONTROLLER_PORT=$cport AX_KAFKA_BROKERS=1
     source "$AX_SRC/infra/lib.sh"; "$@") >>"$WORK/kafka-setup.log" 2>&1
}
kafka_priv ax_kafka_start || { cat "$WORK/kafka-setup.log"; fail "cannot start a private Kafka"; }
BOOTSTRAP=127.0.0.1:$kport
# The private broker's address and SASL credentials (infra wrote them to
# its kafka.client.conf) replace the suite's kafka.* keys.
(umask 077
 { grep -v '^[[:space:]]*kafka\.' "$AX_CONFIG"; sed 's/^/kafka./; s/=/ = /' "$PRIV_STATE/kafka.client.conf"; } >"$WORK/ax.conf")
export AX_CONFIG=$WORK/ax.conf
kafka_pid() { cat "$PRIV_STATE/run/kafka.pid"; }
finish_test() {
    local rc=$?
    set +e
    for n in "${!SVC_PID[@]}"; do stop_svc "$n" KILL; done
    kafka_priv ax_kafka_stop
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

tag="oncek$$"
N_OK=800 N_BAD=200 WAVES=8
N=$((N_OK + N_BAD))
finished_n() { sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND state = 'FINISHED'"; }
submit_wave() {
    axctl submit --count $((N_OK / WAVES)) --trace-id "$tag-ok$1" -- /bin/true >/dev/null \
        || echo "wave $1 ok: submit failed" >>"$WORK/submit.err"
    axctl submit --count $((N_BAD / WAVES)) --trace-id "$tag-bad$1" -- /bin/sh -c 'exit 3' \
        >/dev/null || echo "wave $1 bad: submit failed" >>"$WORK/submit.err"
}
at_least() { [ "$(finished_n)" -ge "$1" ]; }

for w in 1 2; do submit_wave "$w"; done
wait_for 90 "first results" at_least 100
lost() { cat "$WORK"/ax-callback@*.log | grep -c -e "no longer publishing" -e "idle-session timeout"; }
lost_before=$(lost || true)
log "freezing the private Kafka for 15 s during a commit"
kill -STOP "$(kafka_pid)"
# a finished instance put in the outbox while the broker is frozen: the
# publisher's transaction for it waits on the broker
fid=$(sql "INSERT INTO job_instance (job_name, command, timeout_ms, due_at, state, outcome,
             finished_at, trace_id, idempotency_key, deployment)
           VALUES ('frozen', ARRAY['true'], 1000, now(), 'FINISHED', 'SUCCESS', now(),
             'frozen$$', 'frozen$$', '${AXCONF_TOPIC_PREFIX}') RETURNING id" | head -1)
sql "INSERT INTO ax_result_outbox (deployment, instance_id) VALUES ('${AXCONF_TOPIC_PREFIX}', $fid)" >/dev/null
sleep 15
kill -CONT "$(kafka_pid)"
frozen_published() { [ -n "$(sql "SELECT 1 FROM job_instance WHERE id = $fid AND result_published_at IS NOT NULL")" ]; }
wait_for 60 "the result committed during the freeze published" frozen_published
[ "$(lost || true)" = "$lost_before" ] \
    || fail "a publisher lost its lock session during the freeze: $(cat "$WORK"/ax-callback@*.log | grep -e "no longer publishing" -e "idle-session timeout" | tail -3)"
submit_wave 3
log "stopping the private Kafka"
kafka_priv ax_kafka_stop || fail "cannot stop the private Kafka"
sleep 1
kafka_priv ax_kafka_start || fail "cannot start the private Kafka"
for w in 4 5; do submit_wave "$w"; done
wait_for 120 "results after the Kafka restart" at_least 500
submit_wave 6
log "kill -9 of the private Kafka"
kill -KILL "$(kafka_pid)"
sleep 1
kafka_priv ax_kafka_start || fail "cannot start the private Kafka after kill -9"
for w in 7 8; do submit_wave "$w"; done
[ ! -s "$WORK/submit.err" ] || fail "submissions failed: $(cat "$WORK/submit.err")"

all_published() {
    [ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND state = 'FINISHED'
              AND result_published_at IS NOT NULL")" = "$N" ]
}
wait_for 150 "all $N instances finished and published" all_published
n_failed=$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND outcome <> 'SUCCESS'")
[ "$n_failed" = "$N_BAD" ] || fail "expected $N_BAD failures, have $n_failed"

# ---- count by key, read_committed, from the topics themselves
{ sql "SELECT id FROM job_instance WHERE trace_id LIKE '$tag-%'"; echo "$fid"; } | sort >"$WORK/ids"
sql "SELECT id FROM job_instance WHERE trace_id LIKE '$tag-%' AND outcome <> 'SUCCESS'" | sort >"$WORK/bad_ids"
read_keys() { # read_keys TOPIC: one key per line, read_committed, to the end
    kcat -F "$PRIV_STATE/kafka.client.conf" -X isolation.level=read_committed -C -t "$1" -o beginning -e -q \
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
log "results topic: $n_results records for $((N + 1)) instances ($dup_results duplicated, $missing_results missing);" \
    "final-failure copies: $n_dlq for $N_BAD ($dup_dlq duplicated, $missing_dlq missing)"
[ "$missing_results" = 0 ] || fail "$missing_results instance(s) have no result on the topic"
[ "$dup_results" = 0 ] && [ "$n_results" = "$((N + 1))" ] \
    || fail "results published more than once: $(uniq -d "$WORK/result_keys" | head -5 | tr '\n' ' ')"
[ "$missing_dlq" = 0 ] || fail "$missing_dlq final failure(s) have no dead-letter copy"
[ "$dup_dlq" = 0 ] && [ "$n_dlq" = "$N_BAD" ] \
    || fail "final-failure copies dead-lettered more than once: $(uniq -d "$WORK/dlq_keys" | head -5 | tr '\n' ' ')"
for s in trigger executor callback@1 callback@2; do
    kill -0 "${SVC_PID[$s]}" || fail "ax-$s died"
done
log "ok"
