#!/usr/bin/env bash
# A replicated Kafka cluster survives a broker's death (issue #15, part 1):
# three KRaft nodes of this test's own (infra's AX_KAFKA_BROKERS=3, in its
# scratch directory, on its own ports, the jars from AX_CACHE), topics
# created by axctl topics create with the cluster's defaults (replication
# factor 3, min.insync.replicas 2: checked). 5,000 instances of a no-op
# plugin job (inline commands run too slowly here for a test) are submitted
# in waves; once 1,000 have finished, the broker leading the results
# topic's partition 0 is killed with SIGKILL, more waves are submitted while
# it is gone, then it is started again: it rejoins (back in the in-sync
# replicas of every partition of every ax topic) and the load goes on.
# At the end every instance is FINISHED exactly once with one SUCCESS
# attempt (none SUCCESS twice), and every instance's key is on the results
# topic exactly once (read_committed).
#
# PostgreSQL is the suite's; the shared broker is never touched.
source "$(dirname "$0")/lib.sh"
: "${AX_SRC:?needs AX_SRC (the source tree)}"
command -v kcat >/dev/null || fail "kcat is needed"
PLUGDIR=$(cd "$AX_BIN/plugins" 2>/dev/null && pwd) || fail "no $AX_BIN/plugins (build the plugins)"

# ---- a private three-node cluster, and a config pointing at it
PRIV_STATE=$WORK/state
mkdir -p "$PRIV_STATE"
ports_free() { # ports_free BASE: BASE, BASE+1 and the same +10, +20 unused
    local p
    for p in "$1" $(($1 + 1)) $(($1 + 10)) $(($1 + 11)) $(($1 + 20)) $(($1 + 21)); do
        ! ss -Htan "( sport = :$p )" 2>/dev/null | grep -q . || return 1
    done
}
kport=$((20000 + RANDOM % 8900))
until ports_free "$kport"; do kport=$((kport + 2)); done
kafka_priv() {
    (export AX_STATE=$PRIV_STATE AX_KAFKA_PORT=$kport AX_KAFKA_CONTROLLER_PORT=$((kport + 1)) AX_KAFKA_BROKERS=3
     source "$AX_SRC/infra/lib.sh"; "$@") >>"$WORK/kafka-setup.log" 2>&1
}
kafka_priv ax_kafka_start || { cat "$WORK/kafka-setup.log"; fail "cannot start a private 3-node Kafka"; }
(umask 077
 { grep -v '^[[:space:]]*kafka\.' "$AX_CONFIG"; sed 's/^/kafka./; s/=/ = /' "$PRIV_STATE/kafka.client.conf"; } >"$WORK/ax.conf")
export AX_CONFIG=$WORK/ax.conf
kk() { kcat -F "$PRIV_STATE/kafka.client.conf" "$@"; }
node_pidfile() { if [ "$1" = 1 ]; then echo "$PRIV_STATE/run/kafka.pid"; else echo "$PRIV_STATE/run/kafka-$1.pid"; fi; }
finish_test() {
    local rc=$?
    set +e
    for n in "${!SVC_PID[@]}"; do stop_svc "$n" KILL; done
    kafka_priv ax_kafka_stop
    [ -z "${AX_IT_KEEP:-}" ] || cp "$WORK"/*.log "$PRIV_STATE"/log/*.log "$AX_IT_KEEP"/ 2>/dev/null
    rc_is() { return "$1"; }
    rc_is "$rc"
    cleanup
}
trap finish_test EXIT

axctl --set log.level=info topics create --partitions 3 --service-partitions 3 >"$WORK/topics.log" 2>&1 \
    || fail "cannot create topics: $(cat "$WORK/topics.log")"
grep -q "3 partition(s) per dispatch lane, 3 per submit, callback, results and dlq" "$WORK/topics.log" \
    || fail "topics create did not take --service-partitions 3: $(cat "$WORK/topics.log")"
grep -q "replication factor 3, min.insync.replicas 2 (3 broker(s))" "$WORK/topics.log" \
    || fail "topics create did not choose RF 3 / min.insync 2 on 3 brokers: $(cat "$WORK/topics.log")"
# A broker learns of a new topic from the controller a moment after it is
# created: wait until the one answering knows all three partitions.
replicated3() {
    kk -L -t "$(topic results)" >"$WORK/md0" 2>/dev/null
    [ "$(grep -c 'replicas: [0-9],[0-9],[0-9],' "$WORK/md0")" = 3 ]
}
wait_for 30 "the results topic's 3 partitions replicated 3 times" replicated3

J="${JOBP}noop"
sql "INSERT INTO job (name, handler_kind, command, timeout_ms, retry_max)
     VALUES ('$J', 'plugin', ARRAY['$PLUGDIR/ax-noop.so'], 60000, 0)" >/dev/null
start_svc trigger --set backoff.max.ms=1000
start_svc executor --set backoff.max.ms=1000 --set executor.slots=64
start_svc callback --set backoff.max.ms=1000

tag="repl$$"
N=5000 WAVES=10
finished_n() { sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND state = 'FINISHED'"; }
at_least() { [ "$(finished_n)" -ge "$1" ]; }
submit_wave() {
    axctl submit --job "$J" --count $((N / WAVES)) --trace-id "$tag-w$1" >/dev/null 2>>"$WORK/submit.err" \
        || echo "wave $1: submit failed" >>"$WORK/submit.err"
}
for w in 1 2 3; do submit_wave "$w"; done
wait_for 120 "1,000 instances finished" at_least 1000

# ---- kill -9 of the broker leading results partition 0
victim=$(kk -L -t "$(topic results)" 2>/dev/null | sed -n 's/.*partition 0, leader \([0-9]*\),.*/\1/p')
[ -n "$victim" ] || fail "no leader of the results topic's partition 0"
log "kill -9 of Kafka node $victim (at $(finished_n) finished)"
kill -KILL "$(cat "$(node_pidfile "$victim")")"
for w in 4 5 6; do submit_wave "$w"; done
sleep 5
log "starting Kafka node $victim again (at $(finished_n) finished)"
kafka_priv ax_kafka_start || fail "cannot start Kafka node $victim again"
n_restart=$(finished_n)
rejoined() { # the node is in the ISR of every partition of every ax topic
    local t md
    for t in submit callback results dlq dispatch.p0 dispatch; do
        md=$(kk -L -t "$(topic "$t")" 2>/dev/null | grep 'partition ') || return 1
        [ -n "$md" ] || return 1
        if echo "$md" | grep -v "isrs: \(.*,\)\?$victim\(,.*\)\?\$" | grep -q .; then return 1; fi
    done
}
for w in 7 8 9 10; do submit_wave "$w"; done
wait_for 90 "node $victim back in every in-sync replica set" rejoined
log "node $victim rejoined (at $(finished_n) finished)"
[ ! -s "$WORK/submit.err" ] || fail "submissions failed: $(cat "$WORK/submit.err")"

all_published() {
    [ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND state = 'FINISHED'
              AND result_published_at IS NOT NULL")" = "$N" ]
}
wait_for 240 "all $N instances finished and published" all_published
[ "$n_restart" -lt "$N" ] || fail "the load was over before the broker came back: nothing shows it goes on"

# ---- every instance once, one SUCCESS each, every result once
[ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%'")" = "$N" ] \
    || fail "not $N instances: $(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%'")"
n_bad=$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND outcome IS DISTINCT FROM 'SUCCESS'")
[ "$n_bad" = 0 ] || fail "$n_bad instance(s) did not end SUCCESS"
twice=$(sql "SELECT count(*) FROM (SELECT a.instance_id FROM job_attempt a JOIN job_instance i ON i.id = a.instance_id
             WHERE i.trace_id LIKE '$tag-%' AND a.outcome = 'SUCCESS' GROUP BY 1 HAVING count(*) > 1) d")
[ "$twice" = 0 ] || fail "$twice instance(s) SUCCESS more than once"
once=$(sql "SELECT count(DISTINCT a.instance_id) FROM job_attempt a JOIN job_instance i ON i.id = a.instance_id
            WHERE i.trace_id LIKE '$tag-%' AND a.outcome = 'SUCCESS'")
[ "$once" = "$N" ] || fail "$once instance(s) with a SUCCESS attempt, not $N"
sql "SELECT id FROM job_instance WHERE trace_id LIKE '$tag-%'" | sort >"$WORK/ids"
kk -X isolation.level=read_committed -C -t "$(topic results)" -o beginning -e -q -f '%k\n' 2>/dev/null \
    | sort >"$WORK/result_keys"
n_results=$(wc -l <"$WORK/result_keys")
dup_results=$(uniq -d "$WORK/result_keys" | wc -l)
missing_results=$(comm -23 "$WORK/ids" <(uniq "$WORK/result_keys") | wc -l)
log "results topic: $n_results records for $N instances ($dup_results duplicated, $missing_results missing)"
[ "$missing_results" = 0 ] || fail "$missing_results instance(s) have no result on the topic"
[ "$dup_results" = 0 ] && [ "$n_results" = "$N" ] \
    || fail "results published more than once: $(uniq -d "$WORK/result_keys" | head -5 | tr '\n' ' ')"
for s in trigger executor callback; do
    kill -0 "${SVC_PID[$s]}" || fail "ax-$s died"
done
log "ok"
