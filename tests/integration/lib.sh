# Sourced by every integration test. Runs against the real Kafka broker and
# PostgreSQL that infra/test started (AX_CONFIG points at their settings).
# Each test gets its own topic prefix (so its own topics and consumer
# groups) and its own scratch directory; services are started per test and
# always stopped on exit, with their logs printed when the test fails.
set -euo pipefail

: "${AX_CONFIG:?integration tests need AX_CONFIG (run them through infra/test)}"
: "${AX_BIN:?AX_BIN (the build directory) is set by ctest}"

T=$(basename "$0" .sh)
export AXCONF_TOPIC_PREFIX="it.${T}.$$.$RANDOM."
# Services run under ASan in the test build; their leak report at exit is
# not what these tests check (unit tests run with leak detection on).
export ASAN_OPTIONS="detect_leaks=0"
# The test harness runs as root and starts the services itself: the executor
# refuses to run as root without executor.allow.root (docs/SECURITY.md), so
# the harness says it knowingly. 180_security.sh checks the refusal without it.
export AXCONF_EXECUTOR_ALLOW_ROOT=true
WORK=$(mktemp -d "/tmp/ax-it.${T}.XXXXXX")
chmod 755 "$WORK"
# What a test keeps after it ends (screenshots, ...): $IT_ARTIFACTS/$T, not
# removed with $WORK (AX_IT_ARTIFACTS, default <build dir>/it-artifacts).
IT_ARTIFACTS=${AX_IT_ARTIFACTS:-$AX_BIN/it-artifacts}
declare -A SVC_PID=()

conf_get() { awk -F' *= *' -v k="$1" '$1 == k { print $2 }' "$AX_CONFIG" | tail -n 1; }
export PGHOST=$(conf_get pg.host) PGPORT=$(conf_get pg.port) PGDATABASE=$(conf_get pg.dbname) \
       PGUSER=$(conf_get pg.user) PGPASSWORD=$(conf_get pg.password)
# Over TLS (infra AX_TLS=1) the tests' psql verifies the server as the
# services do (pg.sslmode = verify-full, pg.sslrootcert).
PGSSLMODE=$(conf_get pg.sslmode) PGSSLROOTCERT=$(conf_get pg.sslrootcert)
[ -z "$PGSSLMODE" ] || export PGSSLMODE
[ -z "$PGSSLROOTCERT" ] || export PGSSLROOTCERT
BOOTSTRAP=$(conf_get kafka.bootstrap.servers)
# The broker requires SASL (infra, docs/SECURITY.md): kc is kcat with the
# librdkafka properties of AX_CONFIG (every kafka.* key: bootstrap servers,
# security.protocol, sasl.*) from a 0600 file, never on a command line.
# Use kc, not kcat -b, in tests. KCAT_CONFIG makes a plain kcat use them too.
KCAT_CONF=$WORK/kcat.conf
(umask 077 && awk '/^[ \t]*kafka\./ { line = $0; sub(/^[ \t]*kafka\./, "", line);
                    k = line; sub(/[ \t]*=.*/, "", k); v = line; sub(/^[^=]*=[ \t]*/, "", v);
                    print k "=" v }' "$AX_CONFIG" >"$KCAT_CONF")
export KCAT_CONF KCAT_CONFIG=$KCAT_CONF
kc() { kcat -F "$KCAT_CONF" "$@"; }
export -f kc
# Rows this test's psql creates belong to its deployment (as axctl's do).
export PGOPTIONS="-c ax.deployment=${AXCONF_TOPIC_PREFIX}"

axctl() { "$AX_BIN/axctl/axctl" "$@"; }
sql() { psql -X -q -t -A -v ON_ERROR_STOP=1 -c "$1"; }
topic() { echo "${AXCONF_TOPIC_PREFIX}$1"; }

log() { echo "[$T $(date +%H:%M:%S.%3N)] $*"; }
fail() { log "FAIL: $*"; exit 1; }
# A test that cannot run here (root, a kernel feature, a tool missing): exit
# 77, which ctest reports as skipped (SKIP_RETURN_CODE), never as passed.
it_skip() { log "SKIP: $*"; exit 77; }

start_svc() { # start_svc trigger|executor|callback[@TAG] [--set k=v ...]
    local name=$1 bin=${1%%@*}; shift
    "$AX_BIN/services/$bin/ax-$bin" "$@" >>"$WORK/ax-$name.log" 2>&1 &
    SVC_PID[$name]=$!
    log "started ax-$name (pid ${SVC_PID[$name]})"
}

stop_svc() { # stop_svc NAME [SIGNAL]: waits for the exit
    local name=$1 sig=${2:-TERM} pid=${SVC_PID[$1]:-}
    [ -n "$pid" ] || return 0
    kill "-$sig" "$pid" 2>/dev/null || true
    local i
    for i in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        log "ax-$name did not stop in 30 s; killing"; kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    unset "SVC_PID[$name]"
    log "stopped ax-$name ($sig)"
}

start_all() { start_svc trigger "$@"; start_svc executor "$@"; start_svc callback "$@"; }

# Jobs are global (not per topic prefix): a test names its jobs with JOBP
# and they are deleted on exit, so no other test's trigger fires them.
JOBP="it-${T}-$$-"

# The trigger leader of this test's deployment: "worker epoch" of the
# unexpired lease (empty when none), and whether worker $1 holds it.
leader_holder() {
    sql "SELECT split_part(holder, '/', 1) || ' ' || epoch FROM ax_leader
         WHERE role = '$(topic trigger)' AND expires_at > now()"
}
leader_is() { [ "$(leader_holder | cut -d' ' -f1)" = "$1" ]; }
# tick_job [MS]: a job firing `true` every MS ms (200), its id in JID;
# fired: its fires so far, more_than N: more than N of them.
tick_job() {
    axctl job create "${JOBP}tick" --fixed-rate "${1:-200}" -- true >/dev/null
    JID=$(sql "SELECT id FROM job WHERE name = '${JOBP}tick'")
}
fired() { sql "SELECT count(*) FROM job_fire WHERE job_id = $JID"; }
more_than() { [ "$(fired)" -gt "$1" ]; }

# Functions run at exit after the services stopped (helpers/netns.sh adds
# the removal of its namespaces and relays).
IT_ON_EXIT=()

cleanup() {
    local rc=$?
    for n in "${!SVC_PID[@]}"; do stop_svc "$n" KILL; done
    local h
    for h in "${IT_ON_EXIT[@]}"; do "$h" || true; done
    # this test's topics, so that a broker that outlives the tests does not
    # keep every run's (helpers/it_topics_delete.c); never fatal (errexit
    # holds in this trap): a broker that is gone costs at most the
    # helper's own bounds, 5 s of metadata request
    if [ -x "$AX_BIN/tests/it_topics_delete" ]; then
        timeout 30 "$AX_BIN/tests/it_topics_delete" "$KCAT_CONF" "$AXCONF_TOPIC_PREFIX" \
            >>"$WORK/topics-delete.log" 2>&1 || true
    fi
    # the ledger rows first: a job's delete leaves them to the retention (026)
    sql "DELETE FROM job_fire WHERE job_id IN (SELECT id FROM job WHERE name LIKE '${JOBP}%')" \
        >/dev/null 2>&1 || true
    sql "DELETE FROM job WHERE name LIKE '${JOBP}%'" >/dev/null 2>&1 || true
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then # 77: skipped (it_skip)
        for f in "$WORK"/*.log; do
            [ -f "$f" ] || continue
            echo "----- $(basename "$f") (last 60 lines)"; tail -n 60 "$f"
        done
    fi
    # AX_IT_KEEP=DIR: keep the services' logs there (for a failure seen once)
    if [ -n "${AX_IT_KEEP:-}" ]; then cp "$WORK"/*.log "$AX_IT_KEEP"/ 2>/dev/null || true; fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT

# wait_for SECONDS DESCRIPTION COMMAND...: poll until COMMAND succeeds, else
# fail naming DESCRIPTION after SECONDS. With
# WAIT_DIAG=FUNCTION, FUNCTION runs before the failure (what the test knows
# about why: counts by state, ...).
wait_for() {
    local secs=$1 what=$2; shift 2
    local deadline=$(( $(date +%s) + secs ))
    until "$@" >/dev/null 2>&1; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            [ -z "${WAIT_DIAG:-}" ] || "$WAIT_DIAG" || true
            fail "timed out after ${secs}s waiting for: $what"
        fi
        sleep 0.2
    done
}

# A service's metrics (started with --set metrics.listen=127.0.0.1:0):
# metrics_port NAME, the port it logged; metric NAME 'series{labels}', the
# value of that series now (empty when not served).
metrics_port() { sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$WORK/ax-$1.log" | tail -n 1; }
metric() {
    local port; port=$(metrics_port "$1")
    [ -n "$port" ] || return 0
    curl -sf "http://127.0.0.1:$port/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}

create_topics() { axctl topics create --partitions "${1:-3}" >/dev/null 2>&1 || fail "cannot create topics"; }

# Instance field by trace id.
field() { sql "SELECT $2 FROM job_instance WHERE trace_id = '$1' ORDER BY id DESC LIMIT 1"; }
# trace_time_first TRACE T0 T1: TRACE is a trace id ax generated (migration
# 028, ax_trace_id_new): 32 lowercase hex digits whose first 12 are the time
# in ms since the epoch, here within [T0, T1] (epoch ms, this machine's clock).
trace_time_first() {
    [[ $1 =~ ^[0-9a-f]{32}$ ]] || fail "trace id '$1' is not 32 lowercase hex digits"
    local ms=$((16#${1:0:12}))
    ((ms >= $2 && ms <= $3)) || fail "trace id $1 starts with $ms ms, not within [$2, $3]"
}
# traces_time_first WHERE: every instance the condition selects, and at least
# one, has a trace id ax generated, whose time is within 10 s of the
# instance's scheduled_at (both made by the statement that created it), and
# no two of them the same one.
traces_time_first() {
    local r n
    # one statement: instances that are still being made (fires) change
    # nothing between the counts
    r=$(sql "SELECT count(*), count(DISTINCT trace_id), count(*) FILTER (WHERE NOT (trace_id ~ '^[0-9a-f]{32}\$'
                 AND abs(('x' || left(trace_id, 12))::bit(48)::bigint
                   - (extract(epoch FROM scheduled_at) * 1000)::bigint) < 10000)),
               string_agg(trace_id || ' ' || scheduled_at, ', ') FILTER (WHERE NOT (trace_id ~ '^[0-9a-f]{32}\$'
                 AND abs(('x' || left(trace_id, 12))::bit(48)::bigint
                   - (extract(epoch FROM scheduled_at) * 1000)::bigint) < 10000))
             FROM instance WHERE $1")
    n=${r%%|*}
    [ "$n" -gt 0 ] || fail "no instance where $1"
    [ "$(cut -d'|' -f3 <<<"$r")" = 0 ] \
        || fail "trace ids not generated time first (trace, scheduled_at): $(cut -d'|' -f4- <<<"$r")"
    # one id per instance, also for the rows of one statement (the fires')
    [ "$(cut -d'|' -f2 <<<"$r")" = "$n" ] || fail "instances where $1 share trace ids: $r"
    log "$n instance(s) where $1: trace ids time first, all different"
}
state_is() { [ "$(field "$1" state)" = "$2" ]; }
finished() { [ "$(field "$1" "state || '/' || (result_published_at IS NOT NULL)")" = "FINISHED/true" ]; }

# topic_read TOPIC FORMAT [kcat option...]: every message of a topic (all
# partitions), read to its end, printed with kcat's FORMAT.
topic_read() { local t=$1 f=$2; shift 2; kc "$@" -C -t "$t" -o beginning -e -q -f "$f" 2>/dev/null; }
# Count messages on a topic: committed ones, and (topic_count_all) with the
# records of open and aborted transactions too, what an executor reads
# (dispatch.transaction.ms). The trigger's partition primers on dispatch
# topics (dispatch.prime: key ax-primer, no value, no instance) are not
# counted; primer_count counts them alone (uncommitted ones too).
no_primers() { grep -vx 'ax-primer' || true; }
topic_count() {
    case ${1#"$AXCONF_TOPIC_PREFIX"} in
        dispatch | dispatch.*) # a primer: that key and no value (kcat's %S: -1)
            topic_read "$1" '%k %S\n' "${@:2}" | { grep -vxE 'ax-primer (-1|0)' || true; } | wc -l ;;
        *) topic_read "$1" 'x\n' "${@:2}" | wc -l ;;
    esac
}
topic_count_all() { topic_count "$1" -X isolation.level=read_uncommitted; }
primer_count() {
    topic_read "$1" '%k %S\n' -X isolation.level=read_uncommitted | { grep -cxE 'ax-primer (0|-1)' || true; }
}

# dispatch_once TOPIC INSTANCES: across failovers, every instance is on the
# dispatch topic, none is committed there twice, and all but a few have a
# committed record. Executors read dispatch records uncommitted
# (dispatch.transaction.ms > 0), so the record an instance ran from can
# belong to a transaction a failover aborted, and then no committed record
# of it follows (it is not due again): the instances are counted with the
# aborted records (the executor's view), the duplicates among the committed
# ones, and at most 8 instances may lack a committed record (a leader whose
# transactions never commit fails). A record's key is its instance id (jobs
# without a routing field).
dispatch_once() {
    local com unc c cd ud
    com=$(topic_read "$1" '%k\n' | no_primers) || fail "cannot read $1"
    unc=$(topic_read "$1" '%k\n' -X isolation.level=read_uncommitted | no_primers) ||
        fail "cannot read $1 uncommitted"
    c=$(grep -c . <<<"$com" || true)
    cd=$({ grep . <<<"$com" || true; } | sort -u | wc -l)
    ud=$({ grep . <<<"$unc" || true; } | sort -u | wc -l)
    log "$1: $c committed message(s) of $cd instance(s); $ud instance(s) counting aborted records; $2 instance(s)"
    [ "$ud" = "$2" ] || fail "$ud instance(s) on $1 for $2 instances"
    [ "$c" = "$cd" ] || fail "an instance committed twice on $1 ($c messages, $cd instances)"
    [ $((ud - cd)) -le 8 ] || fail "$((ud - cd)) of $2 instances have no committed record on $1"
}

# A run over TLS (infra/test's TLS pass, AX_TLS=1) never falls back to
# plaintext unseen: the configuration must name TLS for both (the servers
# accept nothing else; 220_tls.sh checks that they really speak TLS).
if [ "${AX_TLS:-0}" = 1 ]; then
    [ "$(conf_get kafka.security.protocol)" = SASL_SSL ] \
        || fail "AX_TLS=1 but $AX_CONFIG has kafka.security.protocol '$(conf_get kafka.security.protocol)', not SASL_SSL"
    [ "$PGSSLMODE" = verify-full ] \
        || fail "AX_TLS=1 but $AX_CONFIG has pg.sslmode '$PGSSLMODE', not verify-full"
fi
