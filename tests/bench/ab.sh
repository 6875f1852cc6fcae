#!/usr/bin/env bash
# ab.sh — every benchmark of BENCHMARKS.md, run with its documented command
# on two builds in one session, alternating (old, new, old, new, ...), and a
# markdown table of the headline figures: each run's value, the medians and
# new/old. BENCHMARKS.md, "Comparing two builds (tests/bench/ab.sh)".
#
#   AX_CONFIG=/path/ax.conf tests/bench/ab.sh OLD_SRC OLD_BUILD NEW_SRC NEW_BUILD \
#       [--only NAME,...] [--rounds 3] [--all] [--quick] [--driver new|own] \
#       [--out DIR] [--list] [--dry-run]
#
# OLD_SRC/NEW_SRC are source trees, OLD_BUILD/NEW_BUILD their release build
# directories (cmake -DCMAKE_BUILD_TYPE=Release or RelWithDebInfo). Against
# the running PostgreSQL and Kafka of AX_CONFIG (the file every command gets
# with --config, as in BENCHMARKS.md; its database is used, and every
# benchmark runs on a topic prefix of its own: bench.<pid>., it.<name>.<pid>.
# of tests/integration/lib.sh, or ab.<pid>.e2e.<n>. for bench_e2e).
#
#   --only NAME,...  these benchmarks (a name, or a prefix of names: "exec"
#                    is every exec_*; see --list); default: the default set
#   --all            every benchmark, the default set and the variants
#   --rounds R       R runs per build (default 3: the medians of 3)
#   --quick          tiny sizes (each run a few seconds): checks that the
#                    script, the builds and the parsing work; the figures
#                    mean nothing
#   --driver new     (default) see "Which build each program comes from"
#   --driver own     every program from its own build and source tree
#   --out DIR        logs, runs.tsv and table.md (default /tmp/ab.<time>)
#   --list           the benchmarks, their commands and estimates, and exit
#   --dry-run        print the plan and the time estimate, run nothing
#   --table DIR      print the table of an earlier (or interrupted) run's DIR
#
# Which build each program comes from. The services under test (ax-trigger,
# ax-executor, ax-callback), axctl and the plugins always come from the
# side's own build. The benchmark programs are measuring instruments:
#   - drivers that talk to the services only through PostgreSQL tables and
#     Submit records (bench_e2e, bench_trigger, bench_exec, bench_flood,
#     bench_burst) and the scripts burst.sh, overlap_cancel.sh with
#     tests/integration/lib.sh come from NEW for both sides (--driver new):
#     the same instrument measures both builds, also when NEW changed the
#     program (to the store API, say). bench_exec and bench_flood get the
#     side's build directory as BUILD_DIR (services and plugins); burst.sh
#     and overlap_cancel.sh get AX_BIN = a directory of links (services,
#     axctl, plugins: the side's build; tests: NEW's, for bench_burst);
#   - bench_wheel is the code under test itself (the timing wheel of libax
#     linked into it): the side's own build;
#   - bench_callback encodes the Attempt records the callback decodes (issue
#     #12 adds a field to that schema): the side's own build, so that each
#     callback reads records of its own codec;
#   - explain_leader.sh measures the statements copied into it, on a schema:
#     the side's own script, on a scratch database per side (<db>_abx_old,
#     <db>_abx_new: created when missing and migrated with the side's
#     infra/migrations; the script truncates instance_def and instance_state there).
# --driver own takes every program from its own side. Before the runs the
# script says which programs differ between OLD_SRC and NEW_SRC.
#
# Each run is one invocation of the documented command (burst.sh with
# RUNS=1), limited to max(600 s, 5 x its estimate) (SIGTERM, SIGKILL 60 s
# later; the benchmarks clean up on SIGTERM).
# A run that fails, prints no figure, or whose first figure is a rate of 0
# (it measured nothing) counts as "fail" and is left out of the median; its log is kept in DIR. Output: the table on stdout and in
# DIR/table.md, each run's figures in DIR/runs.tsv, each run's output in
# DIR/<bench>.<side>.<round>.log.
set -uo pipefail
ME=ab.sh
HERE=$(cd "$(dirname "$0")" && pwd)
SELF="$HERE/$(basename "$0")"

die() { echo "$ME: $*" >&2; exit 2; }

# ---- the benchmarks ----------------------------------------------------------
# name|set|estimate of one run at the documented size, s|estimate with --quick, s|section
# set d = the default set (every section of BENCHMARKS.md at its headline
# command), a = only with --all or --only. Estimates: from the figures in
# BENCHMARKS.md plus start-up, warm-up and cleanup (not measured at these
# sizes: the machine was shared when this script was written); the quick
# ones measured (2026-12-01, busy machine).
REGISTRY="
e2e|d|20|7|End to end (bench_e2e)
wheel|d|65|11|Timing wheel (bench_wheel)
trigger10k|a|40|9|Trigger, offered 10,000/s (bench_trigger)
trigger20k|d|50|9|Trigger, offered 20,000/s (bench_trigger)
trigger40k|d|70|9|Trigger, offered 40,000/s (bench_trigger)
cron0|a|35|6|100,000 cron jobs at rest: baseline (bench_trigger --cron)
cron100k|d|45|6|100,000 cron jobs at rest (bench_trigger --cron)
tol0|d|30|9|Mixed precision: precise (bench_trigger --tolerance 0)
tol100|d|30|9|Mixed precision: tolerant (bench_trigger --tolerance 100)
exec_noop1|d|25|6|Executor: noop, 1 executor (bench_exec)
exec_noop2|d|25|9|Executor: noop, 2 executors (bench_exec)
exec_noop4|a|30|8|Executor: noop, 4 executors (bench_exec)
exec_sleep1|a|20|7|Executor: sleep10, 1 executor (bench_exec)
exec_sleep2|d|22|7|Executor: sleep10, 2 executors (bench_exec)
exec_sleep4|a|28|6|Executor: sleep10, 4 executors (bench_exec)
exec_lat|d|20|7|Executor: fire-to-start at 1,000 jobs/s (bench_exec)
cb1|d|45|10|Callback: 1 process, batch 1000 (bench_callback)
cb5000|a|45|10|Callback: 1 process, batch 5000 (bench_callback)
cb2|d|60|14|Callback: 2 processes, batch 1000 (bench_callback)
cb_fail10|a|45|10|Callback: 10 % FAILED, retried (bench_callback --fail-pct)
cb_live10k|a|50|10|Callback: live at 10,000/s offered (bench_callback --live)
flood|d|140|12|Flood: backpressure and priorities (bench_flood)
overlap|d|40|9|overlap=cancel: request to CANCELLED (overlap_cancel.sh)
burst50k|d|45|10|The burst end to end, 50,000 (burst.sh)
burst500k|a|215|11|The burst end to end, 500,000 (burst.sh)
explain10k|d|35|5|Leader's statements at 10k undispatched rows (explain_leader.sh)
explain100k|a|140|5|Leader's statements at 100k undispatched rows (explain_leader.sh)
explain1m|a|230|5|Leader's statements at 1M undispatched rows (explain_leader.sh)
"
reg_names() { awk -F'|' 'NF > 1 { print $1 }' <<<"$REGISTRY"; }
reg_field() { awk -F'|' -v n="$1" -v f="$2" '$1 == n { print $f }' <<<"$REGISTRY"; }

# ---- configuration -----------------------------------------------------------
for a in "$@"; do
    case $a in
        -h|--help) sed -n '2,/^set -uo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        --list) : "${AX_CONFIG:=C}"; [[ -r $AX_CONFIG ]] || AX_CONFIG=/dev/null ;;
    esac
done
: "${AX_CONFIG:?$ME: set AX_CONFIG (the configuration of the running servers)}"
[[ -r $AX_CONFIG ]] || die "AX_CONFIG=$AX_CONFIG: not readable"
export AX_CONFIG
conf_get() { awk -F' *= *' -v k="$1" '$1 == k { print $2 }' "$AX_CONFIG" | tail -n 1; }
export PGHOST=$(conf_get pg.host) PGPORT=$(conf_get pg.port) PGDATABASE=$(conf_get pg.dbname) \
       PGUSER=$(conf_get pg.user) PGPASSWORD=$(conf_get pg.password)
: "${PGDATABASE:=ax}"
# The executor refuses to run as root unless told so (docs/SECURITY.md).
((EUID == 0)) && export AXCONF_EXECUTOR_ALLOW_ROOT=true
q() { psql -X -q -t -A -v ON_ERROR_STOP=1 "$@"; }

# ---- internal: one bench_e2e run (services started here) ---------------------
# ab.sh __e2e BUILD DRIVER_BUILD N: the set-up of BENCHMARKS.md (topics with
# 6 partitions, the three services with log.level=warn), then bench_e2e N;
# the services are stopped and the run's rows deleted on every way out.
if [[ ${1:-} == __e2e ]]; then
    B=$2 D=$3 N=$4
    P="ab.$PPID.e2e.$$."
    export AXCONF_TOPIC_PREFIX=$P
    unset AXCONF_WORKER_ID
    pids=()
    e2e_end() {
        local p
        for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
        for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
        q -c "DELETE FROM job_instance WHERE deployment = '$P'" \
          -c "DELETE FROM dispatch_pending WHERE deployment = '$P'" \
          -c "DELETE FROM dispatch_batch WHERE deployment = '$P'" \
          -c "DELETE FROM submit_offset WHERE left(topic, length('$P')) = '$P'" \
          -c "DELETE FROM ax_leader WHERE role LIKE '$P%'" \
          -c "DELETE FROM worker WHERE id LIKE 'ab-$$-%'" >/dev/null 2>&1
    }
    trap e2e_end EXIT
    trap 'exit 130' INT TERM
    "$B/axctl/axctl" --config "$AX_CONFIG" topics create --partitions 6 >/dev/null || exit 1
    for s in trigger executor callback; do
        "$B/services/$s/ax-$s" --config "$AX_CONFIG" --set log.level=warn \
            --set "worker.id=ab-$$-$s" >"${AB_OUT:-/tmp}/ab_e2e.$$.$s.log" 2>&1 &
        pids+=($!)
    done
    for _ in $(seq 1 300); do
        [[ -n $(q -c "SELECT 1 FROM ax_leader WHERE role = '${P}trigger' AND expires_at > now()") &&
           -n $(q -c "SELECT 1 FROM worker WHERE id = 'ab-$$-executor' AND state = 'running'") ]] && break
        sleep 0.2
    done
    sleep 2
    echo "ab: services of $B on prefix $P; logs ${AB_OUT:-/tmp}/ab_e2e.$$.*.log" >&2
    "$D/tests/bench_e2e" --config "$AX_CONFIG" "$N"
    rc=$?
    exit $rc
fi

# ---- options -----------------------------------------------------------------
ONLY="" ROUNDS=3 ALL=0 QUICK=0 DRIVER=new OUT="" LIST=0 DRY=0 TABLE=""
POS=()
while (($#)); do
    case $1 in
        --only) ONLY=${2:?--only NAME,...}; shift 2 ;;
        --only=*) ONLY=${1#*=}; shift ;;
        --rounds) ROUNDS=${2:?--rounds R}; shift 2 ;;
        --rounds=*) ROUNDS=${1#*=}; shift ;;
        --all) ALL=1; shift ;;
        --quick) QUICK=1; shift ;;
        --driver) DRIVER=${2:?--driver new|own}; shift 2 ;;
        --driver=*) DRIVER=${1#*=}; shift ;;
        --out) OUT=${2:?--out DIR}; shift 2 ;;
        --list) LIST=1; shift ;;
        --dry-run) DRY=1; shift ;;
        --table) TABLE=${2:?--table DIR}; shift 2 ;;
        --*) die "unknown option $1 (see --help)" ;;
        *) POS+=("$1"); shift ;;
    esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds: a positive number, not '$ROUNDS'"
[[ $DRIVER == new || $DRIVER == own ]] || die "--driver: new or own, not '$DRIVER'"

# The selection.
SEL=()
if [[ -n $ONLY ]]; then
    IFS=, read -ra want <<<"$ONLY"
    for w in "${want[@]}"; do
        found=0
        for n in $(reg_names); do
            if [[ $n == "$w" || $n == "$w"* ]]; then
                [[ " ${SEL[*]} " == *" $n "* ]] || SEL+=("$n")
                found=1
            fi
        done
        ((found)) || die "--only: no benchmark named $w (see --list)"
    done
else
    for n in $(reg_names); do
        [[ $ALL == 1 || $(reg_field "$n" 2) == d ]] && SEL+=("$n")
    done
fi

# ---- the commands ------------------------------------------------------------
# full QUICK: the documented value, or the tiny one with --quick.
sz() { if ((QUICK)); then echo "$2"; else echo "$1"; fi; }
# cmd NAME SIDE: sets CMD (argv), ENVV (extra environment, name=value) and
# DOC (the command as the table shows it: B = the side's build, C =
# AX_CONFIG, NEW = NEW's build). SIDE is old or new.
cmd() {
    local n=$1 side=$2 b s d ds bin
    if [[ $side == old ]]; then b=$OLD_BUILD s=$OLD_SRC; else b=$NEW_BUILD s=$NEW_SRC; fi
    if [[ $DRIVER == new ]]; then d=$NEW_BUILD ds=$NEW_SRC; else d=$b ds=$s; fi
    bin=$OUT/bin-$side
    local C=$AX_CONFIG trig=$b/services/trigger/ax-trigger cbk=$b/services/callback/ax-callback
    local dly=() dlyd=""
    ((QUICK)) && dly=(--delay-ms 3000) && dlyd="--delay-ms 3000 "
    local Dd; [[ $DRIVER == new ]] && Dd=NEW || Dd=B
    ENVV=()
    case $n in
    e2e)
        CMD=("$SELF" __e2e "$b" "$d" "$(sz 2000 60)")
        DOC="$Dd/tests/bench_e2e --config C $(sz 2000 60) (B's three services, 6 partitions)" ;;
    wheel)
        CMD=("$b/tests/bench_wheel" $(sz "" 1))
        DOC="B/tests/bench_wheel $(sz "" 1)" ;;
    trigger10k|trigger20k|trigger40k)
        local j=${n#trigger}; j=${j%k}000
        CMD=("$d/tests/bench_trigger" --config "$C" "${dly[@]}" "$trig" "$(sz "$j" 300)" 1000 "$(sz 20 3)")
        DOC="$Dd/tests/bench_trigger --config C ${dlyd}B/services/trigger/ax-trigger $(sz "$j" 300) 1000 $(sz 20 3)" ;;
    cron0|cron100k)
        local j; [[ $n == cron0 ]] && j=0 || j=$(sz 100000 2000)
        CMD=("$d/tests/bench_trigger" --config "$C" --cron "$trig" "$j" "$(sz 30 3)")
        DOC="$Dd/tests/bench_trigger --config C --cron B/services/trigger/ax-trigger $j $(sz 30 3)" ;;
    tol0|tol100)
        local t=${n#tol}
        CMD=("$d/tests/bench_trigger" --config "$C" --set trigger.coalesce.load=0 "${dly[@]}"
             --tolerance "$t" "$trig" "$(sz 2000 200)" 1000 "$(sz 15 3)")
        DOC="$Dd/tests/bench_trigger --config C --set trigger.coalesce.load=0 ${dlyd}--tolerance $t B/services/trigger/ax-trigger $(sz 2000 200) 1000 $(sz 15 3)" ;;
    exec_noop[124])
        local k=${n#exec_noop} w=(); ((QUICK)) && w=(--warmup 50)
        CMD=("$d/tests/bench_exec" --config "$C" "${w[@]}" "$b" noop "$k" "$(sz 20000 400)")
        DOC="$Dd/tests/bench_exec --config C ${w[*]}${w:+ }B noop $k $(sz 20000 400)" ;;
    exec_sleep[124])
        local k=${n#exec_sleep} w=(); ((QUICK)) && w=(--warmup 50)
        CMD=("$d/tests/bench_exec" --config "$C" "${w[@]}" --set executor.pools=plugin:8:4096 "$b"
             sleep10 "$k" "$(sz $((4000 * k)) $((150 * k)))")
        DOC="$Dd/tests/bench_exec --config C ${w[*]}${w:+ }--set executor.pools=plugin:8:4096 B sleep10 $k $(sz $((4000 * k)) $((150 * k)))" ;;
    exec_lat)
        local w=(); ((QUICK)) && w=(--warmup 50)
        CMD=("$d/tests/bench_exec" --config "$C" "${w[@]}" "$b" noop 1 "$(sz 10000 300)" "$(sz 1000 100)")
        DOC="$Dd/tests/bench_exec --config C ${w[*]}${w:+ }B noop 1 $(sz 10000 300) $(sz 1000 100)" ;;
    cb1|cb5000|cb2|cb_fail10|cb_live10k)
        local k=1 nn=200000 bt=1000 x=() qn=20000
        case $n in
            cb5000) bt=5000 ;;
            cb2) k=2 nn=400000 qn=30000 ;;
            cb_fail10) x=(--fail-pct 10) ;;
            cb_live10k) x=(--live "$(sz 10000 2000)") ;;
        esac
        CMD=("$b/tests/bench_callback" --config "$C" "${x[@]}" --callbacks "$k" "$cbk" "$(sz $nn $qn)" "$bt")
        DOC="B/tests/bench_callback --config C ${x[*]}${x:+ }--callbacks $k B/services/callback/ax-callback $(sz $nn $qn) $bt" ;;
    flood)
        local x=(--seconds 10); ((QUICK)) && x=(--seconds 2 --warmup 200 --factor 2 --p0-rate 5)
        CMD=("$d/tests/bench_flood" --config "$C" "${x[@]}" "$b")
        DOC="$Dd/tests/bench_flood --config C ${x[*]} B" ;;
    overlap)
        ENVV=(AX_BIN="$bin" AX_SRC="$ds" SECS="$(sz 30 8)")
        CMD=(bash "$ds/tests/bench/overlap_cancel.sh")
        DOC="AX_BIN=B AX_SRC=$([[ $DRIVER == new ]] && echo NEW_SRC || echo SRC) SECS=$(sz 30 8) bash tests/bench/overlap_cancel.sh" ;;
    burst50k|burst500k)
        local nn=${n#burst}; nn=${nn%k}000
        ENVV=(AX_BIN="$bin" AX_SRC="$ds")
        ((QUICK)) && ENVV+=(HISTORY=1000)
        CMD=(bash "$ds/tests/bench/burst.sh" "$(sz "$nn" 3000)" 1)
        DOC="AX_BIN=B $( ((QUICK)) && echo "HISTORY=1000 ")tests/bench/burst.sh $(sz "$nn" 3000) 1" ;;
    explain10k|explain100k|explain1m)
        local nn=${n#explain}; nn=${nn/k/000}; nn=${nn/1m/1000000}
        nn=$(sz "$nn" 1000)
        ENVV=(EXPLAIN_TIMEOUT="$(sz 60s 10s)" PGOPTIONS='-c client_min_messages=warning'
              PSQL="psql -X -q -h $PGHOST -p $PGPORT -U $PGUSER -d ${PGDATABASE}_abx_$side")
        CMD=(bash "$s/tests/bench/explain_leader.sh" "$nn" stale)
        DOC="EXPLAIN_TIMEOUT=$(sz 60s 10s) PSQL=\"psql ... -d ${PGDATABASE}_abx_<side>\" SRC/tests/bench/explain_leader.sh $nn stale" ;;
    *) die "no command for $n" ;;
    esac
}

# ---- the figures -------------------------------------------------------------
# figures NAME LOG: "figure<TAB>value" lines of the headline figures in LOG
# (the run's stdout and stderr). A figure's name ends in (↑) when higher is
# better, (↓) when lower is.
kv() { # kv KEY LOG: the value of the last KEY=value token
    grep -oE "(^|[ ])$1=[^ ]*" "$2" | tail -n 1 | sed 's/^ //; s/^[^=]*=//'
}
part() { # part VALUE I SEP: the I-th (1-based) field of VALUE split at SEP
    awk -v v="$1" -v i="$2" -v s="$3" 'BEGIN { gsub(/[{}]/, "", v); split(v, a, s); print a[i] }'
}
fig() { [[ -n $2 ]] && printf '%s\t%s\n' "$1" "$2"; }
figures() {
    local n=$1 f=$2 v
    case $n in
    e2e)
        fig "completed/s (↑)" "$(kv completed_per_s "$f")"
        v=$(kv latency_ms_p50_p99 "$f")
        fig "latency p50 ms (↓)" "$(part "$v" 1 ,)"
        fig "latency p99 ms (↓)" "$(part "$v" 2 ,)" ;;
    wheel)
        fig "insert+cancel cold, M ops/s (↑)" "$(sed -n 's/^RESULT insert+cancel median (cold.*= \([0-9.]*\) ops\/s.*/\1/p' "$f" | awk '{ printf "%.2f", $1 / 1e6 }')"
        fig "insert+cancel warm, M ops/s (↑)" "$(sed -n 's/^RESULT insert+cancel median (hot.*= \([0-9.]*\) ops\/s.*/\1/p' "$f" | awk '{ printf "%.2f", $1 / 1e6 }')"
        fig "bytes/timer, one array (↓)" "$(sed -n 's/^RESULT bytes per armed timer median (structs in one array): //p' "$f")"
        fig "bytes/timer, malloc'd (↓)" "$(sed -n "s/^RESULT bytes per armed timer median (each struct malloc'd): //p" "$f")"
        v=$(sed -n 's/^RESULT lateness median of [0-9]* runs: //p' "$f")
        fig "lateness p50 µs (↓)" "$(sed -n 's/.*p50 \([0-9.]*\) us.*/\1/p' <<<"$v")"
        fig "lateness p99 µs (↓)" "$(sed -n 's/.*p99 \([0-9.]*\) us.*/\1/p' <<<"$v")"
        fig "lateness max µs (↓)" "$(sed -n 's/.*max \([0-9.]*\) us.*/\1/p' <<<"$v")" ;;
    trigger*|tol*)
        fig "fired/s overall (↑)" "$(kv fired_per_s_overall "$f")"
        fig "fired/s per-second median (↑)" "$(kv fired_per_s_median "$f")"
        fig "dispatched/s overall (↑)" "$(kv dispatched_per_s_overall "$f")"
        v=$(kv decided_late_ms_p50_p99_max "$f")
        fig "decided late p50 ms (↓)" "$(part "$v" 1 /)"
        fig "decided late p99 ms (↓)" "$(part "$v" 2 /)"
        fig "trigger CPU % (↓)" "$(kv trigger_cpu_pct "$f")"
        fig "PostgreSQL CPU % (↓)" "$(kv postgres_cpu_pct "$f")"
        fig "leadership lost (↓)" "$(kv leadership_lost "$f")" ;;
    cron*)
        fig "load ms (↓)" "$(kv load_ms "$f")"
        fig "RSS after load MB (↓)" "$(kv trigger_rss_kb "$f" | awk 'NF { printf "%.1f", $1 / 1024 }')"
        fig "CPU at rest % (↓)" "$(kv trigger_cpu_pct_at_rest "$f")" ;;
    exec_*)
        fig "completed/s (↑)" "$(kv completed_per_s "$f")"
        v=$(kv fire_start_ms_p50_p99_max "$f")
        fig "fire-to-start p50 ms (↓)" "$(part "$v" 1 /)"
        fig "fire-to-start p99 ms (↓)" "$(part "$v" 2 /)"
        [[ $n == exec_lat ]] && fig "fire-to-start max ms (↓)" "$(part "$v" 3 /)"
        fig "commits/job (↓)" "$(kv pg_commits_per_job "$f")"
        fig "WAL records/job (↓)" "$(kv pg_wal_records_per_job "$f")"
        fig "executor CPU µs/job (↓)" "$(kv cpu_us_per_job_executors "$f")"
        fig "trigger CPU µs/job (↓)" "$(kv cpu_us_per_job_trigger "$f")"
        fig "callback CPU µs/job (↓)" "$(kv cpu_us_per_job_callback "$f")" ;;
    cb*)
        fig "persisted/s overall (↑)" "$(kv persisted_per_s_overall "$f")"
        fig "persisted/s per-second median (↑)" "$(kv persisted_per_s_median "$f")"
        if [[ $n == cb_live10k ]]; then
            v=$(kv produced_to_persisted_ms_p50_p99_max "$f")
            fig "produced→persisted p50 ms (↓)" "$(part "$v" 1 /)"
            fig "produced→persisted p99 ms (↓)" "$(part "$v" 2 /)"
        fi
        fig "commits/result (↓)" "$(kv pg_commits_per_result "$f")"
        fig "WAL records/result (↓)" "$(kv pg_wal_records_per_result "$f")" ;;
    flood)
        v=$(kv p0_fire_start_ms_p50_p99_max "$f")
        fig "P0 fire-to-start p50 ms (↓)" "$(part "$v" 1 /)"
        fig "P0 fire-to-start p99 ms (↓)" "$(part "$v" 2 /)"
        fig "P0 fire-to-start max ms (↓)" "$(part "$v" 3 /)"
        v=$(kv p0_submit_start_ms_p50_p99_max "$f")
        fig "P0 submit-to-start p99 ms (↓)" "$(part "$v" 2 /)"
        fig "P3 deferred % (↑)" "$(sed -n 's/^p3_deferred=[0-9]* of [0-9]* (\([0-9.]*\) %).*/\1/p' "$f")"
        fig "drain after flood s (↓)" "$(kv drain_after_flood_s "$f")"
        fig "capacity/s (↑)" "$(kv capacity_per_s "$f" | tr -dc '0-9.')"
        fig "trigger RSS max MB (↓)" "$(grep '^rss_mb_trigger ' "$f" | tail -n 1 | grep -oE 'max=[0-9.]+' | cut -d= -f2)"
        fig "executor RSS max MB (↓)" "$(grep '^rss_mb_executor ' "$f" | tail -n 1 | grep -oE 'max=[0-9.]+' | cut -d= -f2)" ;;
    overlap)
        # overlap_cancel.sh prints "count|mean|max|min" (ms), then each one.
        v=$(grep -E '^[0-9]+\|[0-9]*\|[0-9]*\|[0-9]*$' "$f" | tail -n 1)
        fig "cancelled (count)" "$(part "$v" 1 '|')"
        fig "request→CANCELLED mean ms (↓)" "$(part "$v" 2 '|')"
        fig "request→CANCELLED max ms (↓)" "$(part "$v" 3 '|')"
        fig "request→CANCELLED min ms (↓)" "$(part "$v" 4 '|')" ;;
    burst*)
        local l; l=$(grep '^run=.*drain_ms=' "$f" | tail -n 1)
        [[ -n $l ]] || return 0
        printf '%s\n' "$l" >"$f.line"
        fig "drain s (↓)" "$(kv drain_ms "$f.line" | awk 'NF { printf "%.1f", $1 / 1000 }')"
        fig "first finish s (↓)" "$(kv first_finish_ms "$f.line" | awk 'NF { printf "%.2f", $1 / 1000 }')"
        fig "produce s (↓)" "$(kv produce_ms "$f.line" | awk 'NF { printf "%.1f", $1 / 1000 }')"
        fig "leader changes (↓)" "$(kv leader_changes "$f.line")"
        fig "statements cancelled (↓)" "$(kv statements_cancelled "$f.line")"
        fig "peak RSS trigger MB (↓)" "$(kv trigger1 "$f.line")"
        fig "peak RSS executor MB (↓)" "$(kv executor "$f.line")"
        rm -f "$f.line" ;;
    explain*)
        # Per "=== name (N=..., ...)" block: its (last) Execution Time;
        # "timeout" when the statement was cancelled by EXPLAIN_TIMEOUT,
        # "error" when it failed otherwise.
        awk 'function out() { if (name != "") print name "\t" (t != "" ? t : to ? "timeout" : "error") }
             /^=== / { out()
                       name = $0; sub(/^=== /, "", name); sub(/ \(N=[0-9]+, [a-z]+ statistics\)$/, "", name)
                       name = name " ms (↓)"; t = ""; to = 0; next }
             /canceling statement due to statement timeout/ { to = 1 }
             /Execution Time: / { t = $0; sub(/.*Execution Time: /, "", t); sub(/ ms.*/, "", t) }
             END { out() }' "$f" ;;
    esac
}

# ---- the table ---------------------------------------------------------------
# table DIR: the markdown table of DIR/runs.tsv (DIR/docs.tsv: each
# benchmark's command, DIR/head.md: the heading). Figures in the order they
# were first printed; runs in round order, "fail" for a run without the
# figure; the median of the numeric runs; new/old of the medians.
table() {
    local dir=$1 n doc
    cat "$dir/head.md"
    echo
    echo "| benchmark | command | figure | old runs | old median | new runs | new median | new/old |"
    echo "|---|---|---|---|---|---|---|---|"
    while IFS=$'\t' read -r n doc; do
        awk -F'\t' -v n="$n" -v doc="$doc" '
            function isnum(x) { return x ~ /^-?[0-9]+(\.[0-9]+)?$/ }
            function med(list,   a, k, i, j, t, m) {
                k = 0
                m = split(list, a, " ")
                for (i = 1; i <= m; i++) if (isnum(a[i])) v[++k] = a[i] + 0
                if (k == 0) return ""
                for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
            }
            function fmt(x,   a) {
                if (x == "") return "—"
                if (!isnum(x)) return x
                x += 0
                a = x < 0 ? -x : x
                return x == int(x) ? sprintf("%d", x) : a >= 100 ? sprintf("%.0f", x) : a >= 10 ? sprintf("%.1f", x) : a >= 1 ? sprintf("%.2f", x) : sprintf("%.2g", x)
            }
            NR > 1 && $1 == n {
                if ($3 > R) R = $3
                if ($4 == "(run)") next
                if (!($4 in seen)) { seen[$4] = 1; order[++nf] = $4 }
                val[$4, $2, $3] = $5
            }
            END {
                if (R == 0) exit
                if (nf == 0) order[++nf] = "(every run failed)"
                for (i = 1; i <= nf; i++) {
                    f = order[i]
                    for (s = 1; s <= 2; s++) {
                        side = s == 1 ? "old" : "new"; runs[s] = ""; raw = ""
                        for (r = 1; r <= R; r++) {
                            x = ((f, side, r) in val) ? val[f, side, r] : "fail"
                            raw = raw " " x
                            runs[s] = runs[s] (r > 1 ? ", " : "") fmt(x)
                        }
                        m[s] = med(raw)
                    }
                    ratio = (m[1] != "" && m[2] != "" && m[1] != 0) ? sprintf("%.3f", m[2] / m[1]) : "—"
                    printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", i == 1 ? n : "", i == 1 ? "`" doc "`" : "",
                        f, runs[1], fmt(m[1]), runs[2], fmt(m[2]), ratio
                }
            }' "$dir/runs.tsv"
    done <"$dir/docs.tsv"
}

# ---- list / plan -------------------------------------------------------------
est_of() { if ((QUICK)); then reg_field "$1" 4; else reg_field "$1" 3; fi; }
fmt_s() { printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); }
if [[ -n $TABLE ]]; then
    [[ -r $TABLE/runs.tsv && -r $TABLE/docs.tsv && -r $TABLE/head.md ]] || die "--table $TABLE: no runs.tsv, docs.tsv, head.md there"
    table "$TABLE"
    exit 0
fi
if ((LIST)); then
    OLD_BUILD=OLD_BUILD NEW_BUILD=NEW_BUILD OLD_SRC=OLD_SRC NEW_SRC=NEW_SRC OUT=DIR
    printf '| name | set | one run (s) | --quick (s) | what | command |\n|---|---|---|---|---|---|\n'
    for n in $(reg_names); do
        cmd "$n" new
        printf '| %s | %s | %s | %s | %s | `%s` |\n' "$n" "$(reg_field "$n" 2 | sed 's/d/default/; s/^a$/--all/')" \
            "$(reg_field "$n" 3)" "$(reg_field "$n" 4)" "$(reg_field "$n" 5)" "$DOC"
    done
    exit 0
fi

((${#POS[@]} == 4)) || die "usage: ab.sh OLD_SRC OLD_BUILD NEW_SRC NEW_BUILD [--only NAME,...] [--rounds 3] [--all] [--quick] (see --help)"
OLD_SRC=$(cd "${POS[0]}" && pwd) || die "${POS[0]}: no such directory"
OLD_BUILD=$(cd "${POS[1]}" && pwd) || die "${POS[1]}: no such directory"
NEW_SRC=$(cd "${POS[2]}" && pwd) || die "${POS[2]}: no such directory"
NEW_BUILD=$(cd "${POS[3]}" && pwd) || die "${POS[3]}: no such directory"
for b in "$OLD_BUILD" "$NEW_BUILD"; do
    for p in services/trigger/ax-trigger services/executor/ax-executor services/callback/ax-callback \
             axctl/axctl plugins/ax-noop.so tests/bench_e2e tests/bench_wheel tests/bench_trigger \
             tests/bench_exec tests/bench_callback tests/bench_flood tests/bench_burst; do
        [[ -e $b/$p ]] || die "$b/$p is missing (build it: cmake --build $b -j2)"
    done
    bt=$(awk -F= '/^CMAKE_BUILD_TYPE:/ { print $2 }' "$b/CMakeCache.txt" 2>/dev/null)
    [[ $bt == Release || $bt == RelWithDebInfo ]] ||
        echo "$ME: warning: $b is a '${bt:-unknown}' build; BENCHMARKS.md figures are release builds" >&2
done
OUT=${OUT:-/tmp/ab.$(date +%Y%m%d-%H%M%S)}

total=0
for n in "${SEL[@]}"; do total=$((total + 2 * ROUNDS * $(est_of "$n"))); done
echo "ab: OLD $OLD_SRC ($(git -C "$OLD_SRC" rev-parse --short HEAD 2>/dev/null || echo '?')), build $OLD_BUILD"
echo "ab: NEW $NEW_SRC ($(git -C "$NEW_SRC" rev-parse --short HEAD 2>/dev/null || echo '?')), build $NEW_BUILD"
echo "ab: database $PGDATABASE on $PGHOST:$PGPORT (AX_CONFIG=$AX_CONFIG); drivers: $DRIVER; out: $OUT"
((QUICK)) && echo "ab: --quick: tiny sizes; the figures mean nothing"
# What differs between the two trees' benchmark programs and schema.
for p in bench_e2e.c bench_trigger.c bench_exec.c bench_callback.c bench_flood.c bench_burst.c \
         bench_wheel.c bench_common.h burst.sh overlap_cancel.sh explain_leader.sh; do
    cmp -s "$OLD_SRC/tests/bench/$p" "$NEW_SRC/tests/bench/$p" || echo "ab: tests/bench/$p differs between OLD and NEW"
done
cmp -s "$OLD_SRC/tests/integration/lib.sh" "$NEW_SRC/tests/integration/lib.sh" ||
    echo "ab: tests/integration/lib.sh differs between OLD and NEW"
diff -rq "$OLD_SRC/infra/migrations" "$NEW_SRC/infra/migrations" >/dev/null ||
    echo "ab: infra/migrations differ between OLD and NEW: both run on the database of AX_CONFIG as it is migrated (explain: each side's own)"
echo "ab: ${#SEL[@]} benchmark(s) x $ROUNDS round(s) x 2 builds; estimated $(fmt_s "$total")$( ((QUICK)) || echo " (documented sizes, quiet machine)"):"
for n in "${SEL[@]}"; do
    printf 'ab:   %-12s %4d s x %d = %s\n' "$n" "$(est_of "$n")" $((2 * ROUNDS)) "$(fmt_s $((2 * ROUNDS * $(est_of "$n"))))"
done
((DRY)) && exit 0

mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
export AB_OUT=$OUT
# AX_BIN of burst.sh and overlap_cancel.sh: the side's services, axctl and
# plugins; tests/ (bench_burst) of the driver build.
for side in old new; do
    [[ $side == old ]] && b=$OLD_BUILD || b=$NEW_BUILD
    [[ $DRIVER == new ]] && d=$NEW_BUILD || d=$b
    rm -rf "$OUT/bin-$side" && mkdir -p "$OUT/bin-$side"
    for x in services axctl plugins; do ln -s "$b/$x" "$OUT/bin-$side/$x"; done
    ln -s "$d/tests" "$OUT/bin-$side/tests"
done

# ---- scratch databases of explain_leader.sh ----------------------------------
migrate_db() { # migrate_db DB MIGRATIONS_DIR (as infra/lib.sh ax_migrate)
    local db=$1 dir=$2 f v applied
    [[ -n $(q -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$db'") ]] ||
        q -d postgres -c "CREATE DATABASE $db" || return 1
    q -d "$db" -c "CREATE TABLE IF NOT EXISTS ax_schema_migrations (version text PRIMARY KEY,
                   applied_at timestamptz NOT NULL DEFAULT now())" 2>/dev/null || return 1
    applied=$(q -d "$db" -c "SELECT version FROM ax_schema_migrations")
    for f in $(find "$dir" -maxdepth 1 -type f -name '*.sql' | LC_ALL=C sort); do
        v=$(basename "$f" .sql)
        grep -Fxq -- "$v" <<<"$applied" && continue
        PGOPTIONS='-c client_min_messages=warning' q -d "$db" -1 -f "$f" \
            -c "INSERT INTO ax_schema_migrations (version) VALUES ('$v')" >/dev/null || return 1
    done
}
if [[ " ${SEL[*]} " == *" explain"* ]]; then
    migrate_db "${PGDATABASE}_abx_old" "$OLD_SRC/infra/migrations" &&
        migrate_db "${PGDATABASE}_abx_new" "$NEW_SRC/infra/migrations" ||
        die "cannot create or migrate the scratch databases ${PGDATABASE}_abx_old/_new"
fi

# ---- the runs ----------------------------------------------------------------
RUNS=$OUT/runs.tsv
printf 'bench\tside\tround\tfigure\tvalue\n' >"$RUNS"
t_start=$(date +%s)
head_md() {
    echo "## ab.sh: OLD $(git -C "$OLD_SRC" rev-parse --short HEAD 2>/dev/null) vs NEW $(git -C "$NEW_SRC" rev-parse --short HEAD 2>/dev/null), $(date -u +%F), $ROUNDS round(s)$( ((QUICK)) && echo ', --quick (figures mean nothing)')"
    echo
    echo "B = the side's build, C = AX_CONFIG, NEW = NEW's build; (↑) higher is better, (↓) lower is better. Runs $(date -u -d "@$t_start" +%H:%M)–$(date -u +%H:%M) UTC; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)."
}
: >"$OUT/docs.tsv"
for n in "${SEL[@]}"; do
    cmd "$n" new
    printf '%s\t%s\n' "$n" "$(sed "s|$AX_CONFIG|C|g; s|$NEW_BUILD|NEW|g" <<<"$DOC")" >>"$OUT/docs.tsv"
done
head_md >"$OUT/head.md"
CUR=""
# leftovers NAME: burst.sh and overlap_cancel.sh (tests/integration/lib.sh)
# delete their jobs but leave instances (all of them when interrupted),
# leader rows and lane rows of their prefix it.<script>.<pid>.<n>. behind;
# no such run is active now, so every row of those prefixes goes.
leftovers() {
    local t
    case $1 in burst*) t=burst ;; overlap) t=overlap_cancel ;; *) return 0 ;; esac
    q -c "DELETE FROM job_instance WHERE deployment LIKE 'it.$t.%'" \
      -c "DELETE FROM dispatch_pending WHERE deployment LIKE 'it.$t.%'" \
      -c "DELETE FROM dispatch_batch WHERE deployment LIKE 'it.$t.%'" \
      -c "DELETE FROM submit_offset WHERE topic LIKE 'it.$t.%'" \
      -c "DELETE FROM lane_status WHERE deployment LIKE 'it.$t.%'" \
      -c "DELETE FROM ax_leader WHERE role LIKE 'it.$t.%'" >/dev/null 2>&1 ||
        echo "$ME: could not delete the rows left by $1 (deployment it.$t.*)" >&2
}
on_signal() {
    echo "$ME: interrupted; stopping the current run" >&2
    # TERM, not INT: the run is an asynchronous command, which ignores SIGINT
    # (a shell script such as burst.sh could not trap it); timeout passes
    # TERM on to the run's process group.
    [[ -n $CUR ]] && kill -TERM "$CUR" 2>/dev/null && wait "$CUR" 2>/dev/null
    [[ -n ${n:-} ]] && leftovers "$n"
    head_md >"$OUT/head.md"
    table "$OUT" | tee "$OUT/table.md"
    echo "$ME: the runs so far; logs, runs.tsv and table.md in $OUT" >&2
    exit 130
}
trap on_signal INT TERM
# servers_up: PostgreSQL answers and the Kafka bootstrap server accepts a
# connection; else wait for them up to 5 minutes (a restart of the shared
# servers would otherwise fail every run in a row).
KAFKA_HP=$(conf_get kafka.bootstrap.servers | cut -d, -f1)
servers_up() {
    local i
    for i in $(seq 1 60); do
        q -c "SELECT 1" >/dev/null 2>&1 &&
            (exec 3<>"/dev/tcp/${KAFKA_HP%:*}/${KAFKA_HP##*:}") 2>/dev/null && return 0
        ((i == 1)) && echo "$ME: PostgreSQL or Kafka does not answer; waiting up to 5 min" >&2
        sleep 5
    done
    echo "$ME: still no PostgreSQL or Kafka; running anyway" >&2
}
done_est=0
for n in "${SEL[@]}"; do
    est=$(est_of "$n")
    limit=$((5 * est > 600 ? 5 * est : 600))
    for r in $(seq 1 "$ROUNDS"); do
        for side in old new; do
            cmd "$n" "$side"
            servers_up
            log=$OUT/$n.$side.$r.log
            {
                echo "# ab: $n $side round $r, $(date -u +%FT%TZ), loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
                echo "# ${ENVV[*]} ${CMD[*]}"
            } >"$log"
            t0=$(date +%s)
            (cd "$([[ $side == old ]] && echo "$OLD_SRC" || echo "$NEW_SRC")" &&
                exec env "${ENVV[@]}" timeout -s TERM -k 60 "$limit" "${CMD[@]}") >>"$log" 2>&1 &
            CUR=$!
            wait "$CUR"
            rc=$?
            CUR=""
            leftovers "$n"
            dt=$(($(date +%s) - t0))
            figs=$(figures "$n" "$log")
            # A run whose first figure is a rate (↑) of 0 or less measured
            # nothing (bench_trigger exits 0 when PostgreSQL went away).
            first=$(head -n 1 <<<"$figs")
            if ((rc != 0)) || [[ -z $figs ]] ||
                { [[ ${first%%$'\t'*} == *"(↑)" ]] && awk -v v="${first#*$'\t'}" 'BEGIN { exit !(v + 0 <= 0) }'; }; then
                printf '%s\t%s\t%s\t%s\t%s\n' "$n" "$side" "$r" "(run)" "fail" >>"$RUNS"
                if ((rc != 0)); then status="FAILED (exit $rc; see $log)"
                elif [[ -z $figs ]]; then status="FAILED (no figure in the output; see $log)"
                else status="FAILED (${first/$'\t'/ }: measured nothing; see $log)"; fi
            else
                while IFS=$'\t' read -r k v; do
                    printf '%s\t%s\t%s\t%s\t%s\n' "$n" "$side" "$r" "$k" "$v" >>"$RUNS"
                done <<<"$figs"
                status="ok, $(head -n 1 <<<"$figs" | tr '\t' ' ')"
            fi
            done_est=$((done_est + est))
            left=$((total - done_est))
            ((left < 0)) && left=0
            printf '[%s] %-12s %s %d/%d: %ds, %s; about %s left\n' "$(date +%H:%M:%S)" "$n" "$side" "$r" \
                "$ROUNDS" "$dt" "$status" "$(fmt_s "$left")" >&2
        done
    done
done
trap - INT TERM

head_md >"$OUT/head.md"
table "$OUT" | tee "$OUT/table.md"
echo "ab: logs, runs.tsv and table.md in $OUT" >&2
