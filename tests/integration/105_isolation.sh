#!/usr/bin/env bash
# Isolation between jobs on one executor.
#
# "A hung handler times out and its process group is gone" is
# 030_failures.sh (a command that forks and sleeps, timeout 1 s: TIMEOUT,
# error_class timeout, no live member of its process group afterwards);
# 090_handlers.sh does the same for the http and plugin handlers' timeouts.
#
# Here, "a full pool of a slow job does not delay another job's handler".
# The partitions of a dispatch topic are shared by every job of its executor
# group, and a full pool pauses the partitions feeding it, so a backlogged
# slow job is isolated by giving it an executor group (its own dispatch
# topic, <prefix>dispatch.slow) and its own pool (executor.pools,
# executor.pool.routes): 10 instances of a 3 s job go to a pool of 1 slot
# and a queue of 1, which fills and pauses dispatch.slow; 30 instances of a
# fast job (default group, command pool) submitted behind them all finish
# within a few seconds while most slow ones still wait; the slow ones all
# finish, one at a time (their commands' own start/end marks never overlap).
#
# Then a regression: a full pool whose waiting runs are all dropped (here
# duplicate dispatches whose claim is lost) resumes the partitions it
# paused; the executor used to keep them paused for good when no run ended
# (nothing ever called maybe_resume), so the group's next dispatch never ran.
source "$(dirname "$0")/lib.sh"

NSLOW=10 NFAST=30 SLOW_S=3
axctl topics create --partitions 2 --group slow >/dev/null 2>&1 ||
    fail "cannot create topics (with <prefix>dispatch.slow)"

marks="$WORK/slow-marks"
sql "INSERT INTO job (name, handler_kind, command, timeout_ms, retry_max, executor_group)
     VALUES ('${JOBP}slow', 'command', ARRAY['sh', '-c',
             'echo b \$(date +%s%3N) >> $marks; sleep $SLOW_S; echo e \$(date +%s%3N) >> $marks'],
             60000, 0, 'slow'),
            ('${JOBP}fast', 'command', ARRAY['true'], 60000, 0, 'default')" >/dev/null
SLOW_ID=$(sql "SELECT id FROM job WHERE name = '${JOBP}slow'")
FAST_ID=$(sql "SELECT id FROM job WHERE name = '${JOBP}fast'")

start_svc trigger
start_svc callback
XS=(--set log.level=info --set executor.groups=default,slow --set executor.pools=slow:1:1
    --set "executor.pool.routes=${JOBP}slow=slow")
start_svc executor "${XS[@]}"
held() { # partitions the executor holds (cooperative: assigned minus revoked)
    awk '/kafka: [0-9]+ partition\(s\) assigned/ { for (i = 1; i <= NF; i++) if ($i == "kafka:") n += $(i + 1) }
         /kafka: [0-9]+ partition\(s\) revoked/  { for (i = 1; i <= NF; i++) if ($i == "kafka:") n -= $(i + 1) }
         END { print n + 0 }' "$WORK/ax-executor.log"
}
holds_all() { [ "$(held)" -eq 20 ]; } # 2 partitions x 5 lanes of dispatch and of dispatch.slow
wait_for 60 "the executor holding dispatch and dispatch.slow" holds_all

count() { # count JOB_ID [CONDITION]
    sql "SELECT count(*) FROM job_instance WHERE job_id = $1 AND ${2:-true}"
}
done_cond="state = 'FINISHED' AND result_published_at IS NOT NULL"

# One inline run first, so that the fast job's latency below is not the
# first message's (connections, metadata).
axctl submit --wait --wait-timeout 60 -- true >/dev/null || fail "the warm-up run failed"
axctl submit --job "${JOBP}slow" --count $NSLOW >/dev/null || fail "submit failed"
slow_full() { grep -q "pool slow full" "$WORK/ax-executor.log"; }
wait_for 30 "the slow pool full" slow_full
slow_running() { [ "$(count "$SLOW_ID" "state = 'RUNNING'")" = 1 ]; }
wait_for 30 "a slow instance running" slow_running
log "slow pool full: $(grep -m 1 "pool slow full" "$WORK/ax-executor.log" | sed 's/.*ax-executor: //')"

t0=$(date +%s%3N)
axctl submit --job "${JOBP}fast" --count $NFAST >/dev/null || fail "submit failed"
fast_done() { [ "$(count "$FAST_ID" "$done_cond")" = $NFAST ]; }
wait_for 15 "$NFAST fast instances finished" fast_done
fast_ms=$(($(date +%s%3N) - t0))
slow_left=$(count "$SLOW_ID" "state <> 'FINISHED'")
log "$NFAST fast instances done in $fast_ms ms; $slow_left of $NSLOW slow ones not finished yet"
worst=$(sql "SELECT max(extract(epoch FROM finished_at - scheduled_at) * 1000)::bigint
             FROM job_instance WHERE job_id = $FAST_ID")
log "slowest fast instance: $worst ms from scheduled to finished"
[ "$worst" -le 5000 ] || fail "a fast instance took $worst ms behind the slow job's full pool"
[ "$(count "$FAST_ID" "outcome = 'SUCCESS'")" = $NFAST ] || fail "fast instances did not all succeed"
# They ran while the slow pool was still full: most of the backlog is left.
[ "$slow_left" -ge $((NSLOW / 2)) ] ||
    fail "only $slow_left slow instance(s) left when the fast ones were done: not behind a full pool"
# The workers table says so too (heartbeats every executor.heartbeat.ms).
EPID=${SVC_PID[executor]}
slow_full_row() {
    [ "$(sql "SELECT pools->'slow'->>'full' FROM worker WHERE pid = $EPID
              ORDER BY heartbeat_at DESC LIMIT 1")" = true ]
}
wait_for 10 "the workers table showing the slow pool full" slow_full_row

slow_done() { [ "$(count "$SLOW_ID" "$done_cond")" = $NSLOW ]; }
wait_for $((NSLOW * SLOW_S + 60)) "$NSLOW slow instances finished" slow_done
[ "$(count "$SLOW_ID" "outcome = 'SUCCESS'")" = $NSLOW ] || fail "slow instances did not all succeed"
# One at a time: the marks alternate b, e, b, e... and each run took its time.
awk -v n=$NSLOW -v ms=$((SLOW_S * 1000)) '
    { want = (NR % 2 == 1) ? "b" : "e"
      if ($1 != want) { print "mark " NR " is " $1 ", expected " want " (overlap)"; bad = 1; exit }
      if ($1 == "e" && $2 - last < ms) { print "a run took " $2 - last " ms"; bad = 1; exit }
      if ($1 == "b" && NR > 1 && $2 < last) { print "started before the previous end"; bad = 1; exit }
      last = $2 }
    END { if (!bad && NR != 2 * n) { print NR " marks, expected " 2 * n; bad = 1 }
          exit bad }' "$marks" || fail "slow runs overlapped or were cut short: $(tr '\n' ' ' <"$marks")"
log "the $NSLOW slow instances ran one at a time"

# ---- regression: a full pool drained by dropped runs resumes ------------------------
stop_svc executor
# Three copies of an old (finished) dispatch on each dispatch.slow partition:
# restarted, the executor takes each partition's copies in one batch, the
# slow pool fills (and pauses the partition), every claim is lost.
# The old dispatch is taken from a partition that has one: with chunked
# partitioning (dispatch.partition.chunk) the ten may all be on one.
for p in 0 1; do
    kc -C -t "$(topic dispatch.slow)" -p $p -o beginning -c 1 -e -q -f '%k' >"$WORK/key"
    kc -C -t "$(topic dispatch.slow)" -p $p -o beginning -c 1 -e -q -f '%s' >"$WORK/msg"
    [ -s "$WORK/msg" ] && break
done
[ -s "$WORK/msg" ] || fail "no dispatch message on dispatch.slow"
for p in 0 1; do
    for i in 1 2 3; do
        kc -P -t "$(topic dispatch.slow)" -p $p -k "$(cat "$WORK/key")" "$WORK/msg"
    done
done
: >"$WORK/ax-executor.log"
start_svc executor "${XS[@]}"
wait_for 60 "the executor holding dispatch and dispatch.slow" holds_all
lost() { [ "$(grep -c "claim lost" "$WORK/ax-executor.log")" -ge 6 ]; }
wait_for 30 "six duplicate dispatches dropped" lost
slow_full || fail "the duplicates did not fill the slow pool (the regression is not exercised)"
axctl submit --job "${JOBP}slow" >/dev/null || fail "submit failed"
slow_again() { [ "$(count "$SLOW_ID" "$done_cond")" = $((NSLOW + 1)) ]; }
wait_for $((SLOW_S + 20)) "a new slow instance run after the pool drained by dropped duplicates" \
    slow_again
log "ok"
