#!/usr/bin/env bash
# A rolling upgrade under load (docs/DEPLOYMENT.md, "Rolling restart"), on
# a database of this test's own holding the previous commit's schema: the
# previous commit's binaries (two triggers, two executors, two callbacks)
# run, this build's `axctl migrate apply` brings the schema up to date
# under them (migrations are additive: they keep working), then they are
# replaced one process at a time by this build's, in the documented order
# — executors one at a time, then callbacks, then the triggers, standby
# first — while inline instances are submitted in waves and a job fires
# every second. At the end: every instance FINISHED SUCCESS once,
# none SUCCESS twice, every result on the results topic once
# (read_committed), nothing dead-lettered (the two versions read each
# other's records), and the job's nominal times were each fired once, none
# skipped, across the leader's handover. Across a migration marked
# "-- ax: stop-the-world" (not additive) the upgrade is instead: stop every
# service, migrate, start the new ones, checked for the same things.
#
# The previous binaries: AX_PREV_BIN (a build directory of the previous
# commit) and AX_PREV_SRC (its source tree), else built here from
# `git archive HEAD~1` of AX_SRC (Debug, no sanitizers, the four programs
# only) into ${AX_CACHE:-$AX_SRC/.cache}/prev-build/<commit>, kept for the
# next run.
source "$(dirname "$0")/lib.sh"
: "${AX_SRC:?needs AX_SRC (the source tree)}"

prev_build() { # prints the build directory of HEAD~1's binaries
    local sha dir lockfd
    sha=$(git -C "$AX_SRC" rev-parse --verify -q 'HEAD~1^{commit}') \
        || fail "no previous commit in $AX_SRC (set AX_PREV_BIN to a build of it)"
    dir=${AX_CACHE:-$AX_SRC/.cache}/prev-build/$sha
    mkdir -p "$(dirname "$dir")"
    exec {lockfd}>"$(dirname "$dir")/lock"
    flock -w 600 "$lockfd" || fail "timed out waiting for $(dirname "$dir")/lock"
    if [ ! -f "$dir/.complete" ]; then
        rm -rf "$dir"
        mkdir -p "$dir/src"
        git -C "$AX_SRC" archive "$sha" | tar -x -C "$dir/src"
        { cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Debug \
            && cmake --build "$dir/build" -j2 --target ax-trigger ax-executor ax-callback axctl; } \
            >"$WORK/prev-build.log" 2>&1 || { tail -30 "$WORK/prev-build.log"; fail "cannot build $sha"; }
        : >"$dir/.complete"
    fi
    exec {lockfd}>&-
    echo "$dir/build"
}
PREV=${AX_PREV_BIN:-$(prev_build)}
PREV_SRC=${AX_PREV_SRC:-$(dirname "$PREV")/src}
for s in trigger executor callback; do
    [ -x "$PREV/services/$s/ax-$s" ] || fail "no previous ax-$s in $PREV"
done
[ -d "$PREV_SRC/infra/migrations" ] || fail "no $PREV_SRC/infra/migrations (set AX_PREV_SRC)"
log "previous binaries: $PREV"

# ---- a database of its own with the previous schema (applied as the
# previous infra did: each file with its row, in one transaction)
db="ax_it_roll_$$"
psql -X -q -d postgres -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db" >/dev/null || fail "cannot create $db"
finish_test() {
    local rc=$?
    set +e
    for n in "${!SVC_PID[@]}"; do stop_svc "$n" KILL; done
    psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
    rc_is() { return "$1"; }
    rc_is "$rc"
    cleanup
}
trap finish_test EXIT
export PGDATABASE=$db
(umask 077 && { grep -v '^[[:space:]]*pg\.dbname' "$AX_CONFIG"; echo "pg.dbname = $db"; } >"$WORK/ax.conf")
export AX_CONFIG=$WORK/ax.conf
sql "CREATE TABLE ax_schema_migrations (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())" >/dev/null
for f in $(find "$PREV_SRC/infra/migrations" -maxdepth 1 -name '*.sql' | LC_ALL=C sort); do
    v=$(basename "$f" .sql)
    PGOPTIONS="$PGOPTIONS -c client_min_messages=warning" psql -X -q -1 -v ON_ERROR_STOP=1 -f "$f" \
        -c "INSERT INTO ax_schema_migrations (version) VALUES ('$v')" >/dev/null \
        || fail "previous migration $v failed"
done
log "previous schema: $(sql "SELECT max(version) FROM ax_schema_migrations")"

run_svc() { # run_svc NAME BUILD [--set k=v ...]: NAME is the log's and SVC_PID's
    local name=$1 build=$2 bin=${1%%@*}; shift 2
    "$build/services/$bin/ax-$bin" "$@" >>"$WORK/ax-$name.log" 2>&1 &
    SVC_PID[$name]=$!
    log "started ax-$name from $build (pid ${SVC_PID[$name]})"
}
heartbeat() { # the worker row of worker.id $1 beat after $2 (epoch s)
    [ -n "$(sql "SELECT 1 FROM worker WHERE id = '$1' AND heartbeat_at > to_timestamp($2)")" ]
}
ROLE=$(topic trigger)
leader() { sql "SELECT split_part(holder, '/', 1) FROM ax_leader WHERE role = '$ROLE' AND expires_at > now()"; }
leader_is() { [ "$(leader)" = "$1" ]; }

create_topics 3
COMMON=(--set backoff.max.ms=1000)
run_svc trigger@a "$PREV" "${COMMON[@]}" --set worker.id=trig-a
wait_for 30 "trig-a leads" leader_is trig-a
run_svc trigger@b "$PREV" "${COMMON[@]}" --set worker.id=trig-b
for e in 1 2; do run_svc executor@$e "$PREV" "${COMMON[@]}" --set worker.id=exec-$e --set executor.slots=16; done
for c in 1 2; do run_svc callback@$c "$PREV" "${COMMON[@]}" --set worker.id=cb-$c; done

J="${JOBP}tick"
axctl job create "$J" --fixed-rate 1000 --timeout 10000 -- /bin/true >/dev/null || fail "cannot create $J"
JID=$(sql "SELECT id FROM job WHERE name = '$J'")

tag="roll$$"
WAVE=150 WAVES=12
N=$((WAVE * WAVES)) w=0
wave() {
    w=$((w + 1))
    axctl submit --count "$WAVE" --trace-id "$tag-w$w" -- /bin/true >/dev/null 2>>"$WORK/submit.err" \
        || echo "wave $w: submit failed" >>"$WORK/submit.err"
}
finished_n() { sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND state = 'FINISHED'"; }
at_least() { [ "$(finished_n)" -ge "$1" ]; }
wave; wave
wait_for 60 "the first instances finished by the previous release" at_least 50

# A migration that is not additive (its file has a line "-- ax: stop-the-world")
# is applied with every service stopped (docs/DEPLOYMENT.md): the upgrade
# across it is stop all, migrate, start all, checked for the same things.
stop_the_world=
for f in "$AX_SRC"/infra/migrations/*.sql; do
    [ -f "$PREV_SRC/infra/migrations/$(basename "$f")" ] && continue
    grep -q '^-- ax: stop-the-world' "$f" && stop_the_world=$(basename "$f" .sql)
done
if [ -n "$stop_the_world" ]; then
    log "$stop_the_world is not additive: stop all, migrate, start all"
    wave
    for n in executor@1 executor@2 callback@1 callback@2 trigger@b trigger@a; do stop_svc "$n" TERM; done
    axctl migrate apply >"$WORK/migrate.log" 2>&1 || fail "migrate apply: $(cat "$WORK/migrate.log")"
    log "schema now: $(sql "SELECT max(version) FROM ax_schema_migrations")"
    run_svc trigger@a "$AX_BIN" "${COMMON[@]}" --set worker.id=trig-a-new
    new_leads() { case $(leader) in *-new) return 0 ;; esac; return 1; }
    wait_for 30 "an upgraded trigger leads" new_leads
    run_svc trigger@b "$AX_BIN" "${COMMON[@]}" --set worker.id=trig-b-new
    for e in 1 2; do run_svc executor@$e "$AX_BIN" "${COMMON[@]}" --set worker.id=exec-$e-new --set executor.slots=16; done
    for c in 1 2; do run_svc callback@$c "$AX_BIN" "${COMMON[@]}" --set worker.id=cb-$c-new; done
    while [ "$w" -lt "$WAVES" ]; do wave; done
else
# ---- 0. the schema, under the running previous release
axctl migrate apply >"$WORK/migrate.log" 2>&1 || fail "migrate apply: $(cat "$WORK/migrate.log")"
log "schema now: $(sql "SELECT max(version) FROM ax_schema_migrations") ($(grep -c '^applied ' "$WORK/migrate.log" || true) applied under load)"
wave
wait_for 60 "the previous release works on the new schema" at_least $((WAVE * 2))
# ---- 1. executors, one at a time
for e in 1 2; do
    wave
    stop_svc executor@$e TERM
    t=$(date +%s)
    run_svc executor@$e "$AX_BIN" "${COMMON[@]}" --set worker.id=exec-$e-new --set executor.slots=16
    wait_for 60 "the new exec-$e beats" heartbeat "exec-$e-new" "$t"
done
# ---- 2. callbacks, one at a time
for c in 1 2; do
    wave
    stop_svc callback@$c TERM
    run_svc callback@$c "$AX_BIN" "${COMMON[@]}" --set worker.id=cb-$c-new
    sleep 2
done
# ---- 3. triggers: the standby first, then the leader (a loaded leader may
# also step down by itself, trigger.starve.ms: leadership may move more
# than once, never to nobody for long)
wave
L=$(leader)
[ "$L" = trig-a ] || [ "$L" = trig-b ] || fail "no previous trigger leads (leader: '$L')"
S=$([ "$L" = trig-a ] && echo trig-b || echo trig-a)
stop_svc "trigger@${S#trig-}" TERM
run_svc "trigger@${S#trig-}" "$AX_BIN" "${COMMON[@]}" --set worker.id="$S-new"
sleep 3
wave
stop_svc "trigger@${L#trig-}" TERM
upgraded_leads() { case $(leader) in *-new) return 0 ;; esac; return 1; }
wait_for 30 "an upgraded trigger leads" upgraded_leads
run_svc "trigger@${L#trig-}" "$AX_BIN" "${COMMON[@]}" --set worker.id="$L-new"
while [ "$w" -lt "$WAVES" ]; do wave; done
fi
[ ! -s "$WORK/submit.err" ] || fail "submissions failed: $(cat "$WORK/submit.err")"

all_published() {
    [ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND state = 'FINISHED'
              AND result_published_at IS NOT NULL")" = "$N" ]
}
# On a timeout, where the instances are: by state, outcome and whether
# published; waves short of or over their count; trace ids with more than
# one instance (a submission ingested twice), with their submit keys; the
# submit topic's watermarks.
published_diag() {
    log "instances: $(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%'") of $N"
    log "by state: $(sql "SELECT string_agg(format('%s/%s/%s=%s', state, coalesce(outcome, '-'),
         CASE WHEN published THEN 'published' ELSE 'unpublished' END, n), ' ')
         FROM (SELECT state, outcome::text AS outcome, result_published_at IS NOT NULL AS published, count(*) AS n
               FROM job_instance WHERE trace_id LIKE '$tag-%' GROUP BY 1, 2, 3) x")"
    log "waves not at $WAVE: $(sql "SELECT string_agg(format('%s=%s', wv, n), ' ') FROM
         (SELECT split_part(trace_id, '-', 2) AS wv, count(*) AS n FROM job_instance
          WHERE trace_id LIKE '$tag-%' GROUP BY 1 HAVING count(*) <> $WAVE) x")"
    log "trace ids twice: $(sql "SELECT string_agg(format('%s: %s', trace_id, keys), '; ') FROM
         (SELECT trace_id, string_agg(format('%s %s %s', id, submit_key, state), ', ' ORDER BY id) AS keys
          FROM job_instance WHERE trace_id LIKE '$tag-%' GROUP BY 1 HAVING count(*) > 1
          ORDER BY 1 LIMIT 20) x")"
    log "watermarks: $(sql "SELECT string_agg(format('%s/%s prev %s next %s at %s', topic, partition,
         prev_offset, next_offset, updated_at), '; ' ORDER BY topic, partition) FROM submit_offset")"
}
WAIT_DIAG=published_diag wait_for 180 "all $N instances finished and published" all_published
sleep 2   # a tick or two fired by the new leader
sql "UPDATE job SET enabled = false WHERE id = $JID" >/dev/null

# ---- nothing lost, nothing doubled
[ "$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%'")" = "$N" ] || fail "not $N instances"
n_bad=$(sql "SELECT count(*) FROM job_instance WHERE trace_id LIKE '$tag-%' AND outcome IS DISTINCT FROM 'SUCCESS'")
[ "$n_bad" = 0 ] || fail "$n_bad instance(s) did not end SUCCESS"
twice=$(sql "SELECT count(*) FROM (SELECT a.instance_id FROM job_attempt a JOIN job_instance i ON i.id = a.instance_id
             WHERE i.trace_id LIKE '$tag-%' AND a.outcome = 'SUCCESS' GROUP BY 1 HAVING count(*) > 1) d")
[ "$twice" = 0 ] || fail "$twice instance(s) SUCCESS more than once"
sql "SELECT id FROM job_instance WHERE trace_id LIKE '$tag-%'" | sort >"$WORK/ids"
kc -X isolation.level=read_committed -C -t "$(topic results)" -o beginning -e -q -f '%k\n' 2>/dev/null \
    | sort >"$WORK/result_keys"
comm -12 "$WORK/ids" "$WORK/result_keys" >"$WORK/ours"
dups=$(uniq -d "$WORK/ours" | wc -l)
missing=$(comm -23 "$WORK/ids" <(uniq "$WORK/ours") | wc -l)
log "results topic: $(wc -l <"$WORK/ours") records for $N instances ($dups duplicated, $missing missing)"
[ "$missing" = 0 ] || fail "$missing instance(s) have no result on the topic"
[ "$dups" = 0 ] || fail "results published more than once: $(uniq -d "$WORK/ours" | head -5 | tr '\n' ' ')"
n_dlq=$(topic_count "$(topic dlq)")
[ "$n_dlq" = 0 ] || fail "$n_dlq record(s) dead-lettered between the two versions: $(kc -C -t "$(topic dlq)" -o beginning -e -q -f '%h\n' | head -3)"
# the job: every nominal time decided once, none skipped, across the handover
fires=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $JID")
epochs=$(sql "SELECT count(DISTINCT epoch) FROM job_fire WHERE job_id = $JID")
[ "$fires" -ge 10 ] && [ "$epochs" -ge 2 ] || fail "the job fired $fires time(s) under $epochs epoch(s): no handover seen"
gaps=$(sql "SELECT count(*) FROM (SELECT nominal_time - lag(nominal_time) OVER (ORDER BY nominal_time) d
            FROM job_fire WHERE job_id = $JID) x WHERE d IS NOT NULL AND d <> interval '1000 ms'")
[ "$gaps" = 0 ] || fail "$gaps nominal time(s) skipped or doubled in the ledger"
dup_nominal=$(sql "SELECT count(*) FROM (SELECT nominal_time FROM job_instance WHERE job_id = $JID
                   GROUP BY 1 HAVING count(*) > 1) d")
[ "$dup_nominal" = 0 ] || fail "$dup_nominal nominal time(s) with more than one instance"
for s in "${!SVC_PID[@]}"; do kill -0 "${SVC_PID[$s]}" || fail "ax-$s died"; done
log "ok ($fires fires under $epochs epochs)"
