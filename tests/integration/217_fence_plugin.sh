#!/usr/bin/env bash
# Fencing of the in-process handlers of an executor cut off from PostgreSQL
# (docs/ARCHITECTURE.md, "Fencing under partitions"), built like 215: two
# executors on test hosts of their own (helpers/netns.sh), lease 4000 ms,
# default executor.fence.margin.ms (1000).
#
# Part 1: they share NP plugin runs (ax-sleep.so 15000, which polls
# should_stop()) and NH http runs (a POST to a slow HTTP server on each
# host's own 127.0.0.1, answering after 15 s unless the client goes away).
# Once every instance is RUNNING, host a is cut off from PostgreSQL (packets
# dropped: its executor's loop waits in libpq until the heal) for 2 x the
# lease. Asserted:
# - host a's plugin runs all returned (the executor's log line "returned ...
#   after the fence raised its stop flag", written by the plugin's worker)
#   and its http requests' connections were all closed by the executor (the
#   server's record), before the earliest lease of host a's instances (as
#   PostgreSQL held it after the cut) expired;
# - no later attempt of those instances began before host a's handlers were
#   all stopped, and no two attempts of one instance overlap (job_attempt);
# - every instance ends once: FINISHED SUCCESS, published, attempts 1..n.
# (and the executor's PostgreSQL connections have keepalives on: the TCP
# settings of ax_pg_tcp_defaults.)
# Part 2: a plugin that ignores should_stop() (ax-sleep.so 15000
# ignore-stop): host a, cut off again, exits with status 3 (the log says
# why) before the earliest lease of its instances expired; every instance
# still ends once in SUCCESS (on host b), no two attempts overlap.
# Without the fence thread's part for in-process handlers (the executor
# before it stopped them only when its loop ran) every one of these fails:
# the plugins and requests run on until the partition heals, and the
# executor never exits.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/helpers/netns.sh"
netns_require
PLUGDIR=$(cd "$AX_BIN/plugins" 2>/dev/null && pwd) || fail "no $AX_BIN/plugins (build the plugins)"

NP=${NP:-40}
NH=${NH:-40}
N=$((NP + NH))
LEASE=4000
SLEEP_MS=15000
HPORT=18217
create_topics 4
netns_host a
netns_host b
for p in $NETNS_PG_PORTS $NETNS_KAFKA_PORTS; do
    [ "$p" != "$HPORT" ] || fail "the HTTP fixture's port $HPORT is a relayed port"
done

# ---- the slow HTTP server, one on each host's own 127.0.0.1 ----------------------
cat >"$WORK/slowd.py" <<'EOF'
import http.server, json, select, socket, sys, threading, time

HOST, PORT, OUT, SLOW = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
lock = threading.Lock()

def ms():
    return int(time.time() * 1000)

class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        rec = {"host": HOST, "instance": body.get("instance_id"),
               "attempt": body.get("attempt"), "start": ms()}
        how, until = "answered", time.time() + SLOW
        while time.time() < until:  # the client going away ends the wait
            r, _, _ = select.select([self.connection], [], [], 0.02)
            if r:
                try:
                    gone = self.connection.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    gone = True
                if gone:
                    how = "closed"
                    break
        rec["end"], rec["how"] = ms(), how
        with lock, open(OUT, "a") as f:
            f.write(json.dumps(rec) + "\n")
        if how == "answered":
            out = b"slept\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

s = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), H)
s.daemon_threads = True
print("ready", flush=True)
s.serve_forever()
EOF
for h in a b; do
    # ip netns exec execs the server, so $! is the server itself (through
    # the netns_exec function it was a subshell: killing it at the end left
    # the server running)
    ip netns exec "$(netns_ns "$h")" python3 "$WORK/slowd.py" "$h" "$HPORT" "$WORK/http.jsonl" \
        "$((SLEEP_MS / 1000))" >"$WORK/slowd-$h.log" 2>&1 &
    SVC_PID[slowd@$h]=$!
done
wait_for 10 "the slow HTTP servers" bash -c "grep -q ready '$WORK/slowd-a.log' && grep -q ready '$WORK/slowd-b.log'"

EX=(--set executor.lease.min.ms=$LEASE --set executor.lease.max.ms=$LEASE
    --set executor.heartbeat.ms=500 --set executor.slots=$N --set executor.queue=$N
    --set executor.pools=http:$N:$N,plugin:$N:$N)
start_svc trigger --set trigger.sweep.interval.ms=500 --set trigger.sweep.grace.ms=1000
start_svc callback
start_svc_in a executor@a "${EX[@]}" --set worker.id=ex-a
start_svc_in b executor@b "${EX[@]}" --set worker.id=ex-b
PA=${SVC_PID[executor@a]}

held() { # lane partitions an executor holds now (from its log)
    awk '/kafka: [0-9]+ partition\(s\) assigned/ { for (i = 1; i <= NF; i++) if ($i == "kafka:") n += $(i + 1) }
         /kafka: [0-9]+ partition\(s\) revoked/  { for (i = 1; i <= NF; i++) if ($i == "kafka:") n -= $(i + 1) }
         END { print n + 0 }' "$WORK/ax-$1.log" 2>/dev/null || echo 0
}
both_hold() { [ "$(held executor@a)" -gt 0 ] && [ "$(held executor@b)" -gt 0 ] &&
              [ $(( $(held executor@a) + $(held executor@b) )) -eq 20 ]; }
wait_for 60 "both executors hold partitions" both_hold

JOBS=("${JOBP}plug" "${JOBP}http")
axctl job create "${JOBS[0]}" --handler plugin --no-schedule --retries 3 --retry-initial 200 \
    --timeout 120000 -- "$PLUGDIR/ax-sleep.so" "$SLEEP_MS" >/dev/null
axctl job create "${JOBS[1]}" --handler http --no-schedule --retries 3 --retry-initial 200 \
    --timeout 120000 -- "http://127.0.0.1:$HPORT/slow" >/dev/null
JIDS=$(sql "SELECT string_agg(id::text, ',') FROM job WHERE name IN ('${JOBS[0]}', '${JOBS[1]}')")
axctl submit --job "${JOBS[0]}" --count "$NP" >/dev/null || fail "submit failed"
axctl submit --job "${JOBS[1]}" --count "$NH" >/dev/null || fail "submit failed"
count() { sql "SELECT count(*) FROM job_instance WHERE job_id IN ($JIDS) AND $1"; }
running() { [ "$(count "state = 'RUNNING'")" = "$N" ]; }
wait_for 60 "all $N instances RUNNING" running

kind_a() { sql "SELECT count(*) FROM job_instance i JOIN job j ON j.id = i.job_id
                WHERE i.job_id IN ($JIDS) AND i.worker = 'ex-a' AND i.state = 'RUNNING'
                AND j.handler_kind = '$1'"; }
PL_A=$(kind_a plugin)
HT_A=$(kind_a http)
[ "$PL_A" -gt 0 ] && [ "$HT_A" -gt 0 ] || fail "host a runs $PL_A plugin and $HT_A http instances: want both"
# every request host a runs has reached its server (the record comes at its end)
reached() { [ "$(netns_exec a ss -Htn state established "( sport = :$HPORT )" | wc -l)" -ge "$HT_A" ]; }
wait_for 30 "host a's $HT_A requests reach its server" reached
sql "SELECT id || ' ' || attempt FROM job_instance WHERE job_id IN ($JIDS) AND worker = 'ex-a'" >"$WORK/inst-a"
log "host a runs $PL_A plugin and $HT_A http instances"
# the executor's PostgreSQL connections have keepalives every second or so
# by default (ax_pg_tcp_defaults; the system's own default, which libpq
# alone gets, is a first probe after 2 hours). Here they reach the relay on
# the host's own loopback, so only the fence thread can stop the handlers.
# (ss shows the keepalive timer only while nothing is in flight: polled)
pg_keepalive() {
    local n
    n=$(netns_exec a ss -Htnop state established "( dport = :$PGPORT )" | grep '"ax-executor"' |
        grep -cE 'timer:\(keepalive,[0-9.]+(ms|sec),' || true)
    [ "$n" -gt 0 ]
}
wait_for 10 "a PostgreSQL connection of host a's executor with the default keepalives" pg_keepalive

# cut_a: cut host a from PostgreSQL; E_MIN: the earliest lease of its
# instances as PostgreSQL holds it (no renewal can come after the cut).
cut_a() {
    netns_cut a pg
    T_CUT=$(date +%s%3N)
    sleep 0.5 # what the relays had carried before the cut has arrived
    E_MIN=$(sql "SELECT (extract(epoch FROM min(lease_expires_at)) * 1000)::bigint FROM job_instance
                 WHERE job_id IN ($JIDS) AND worker = 'ex-a' AND state = 'RUNNING'")
    log "earliest lease of host a's instances expires $((E_MIN - T_CUT)) ms after the cut"
}
# attempts_ok WHEN: no later attempt of the instances in $WORK/inst-a began
# before WHEN (epoch ms), each ran again, and no two attempts overlap.
attempts_ok() {
    awk '{ print "(" $1 "," $2 ")" }' "$WORK/inst-a" | paste -sd, >"$WORK/inst-a.sql"
    local early later overlap n
    n=$(wc -l <"$WORK/inst-a")
    early=$(sql "SELECT count(*) FROM job_attempt t JOIN (VALUES $(cat "$WORK/inst-a.sql")) AS a(id, att)
                 ON t.instance_id = a.id AND t.attempt > a.att
                 WHERE t.started_at < to_timestamp($1 / 1000.0)")
    [ "$early" = 0 ] || fail "$early attempt(s) began elsewhere while host a's handlers still ran"
    later=$(sql "SELECT count(DISTINCT t.instance_id) FROM job_attempt t JOIN (VALUES $(cat "$WORK/inst-a.sql")) AS a(id, att)
                 ON t.instance_id = a.id AND t.attempt > a.att")
    [ "$later" = "$n" ] || fail "only $later of host a's $n instances ran again"
    overlap=$(sql "SELECT count(*) FROM job_attempt x JOIN job_attempt y ON x.instance_id = y.instance_id
                   AND x.attempt < y.attempt WHERE x.instance_id IN
                   (SELECT id FROM job_instance WHERE job_id IN ($JIDS)) AND y.started_at < x.finished_at")
    [ "$overlap" = 0 ] || fail "$overlap pair(s) of attempts of one instance overlap"
}
ended_once() { # every instance of the jobs FINISHED SUCCESS once, attempts 1..n
    local bad
    bad=$(sql "SELECT count(*) FROM job_instance WHERE job_id IN ($JIDS) AND (outcome IS DISTINCT FROM 'SUCCESS'
               OR attempt <> (SELECT count(*) FROM job_attempt t WHERE t.instance_id = job_instance.id)
               OR attempt <> (SELECT max(attempt) FROM job_attempt t WHERE t.instance_id = job_instance.id))")
    [ "$bad" = 0 ] || fail "$bad instance(s) did not end once in SUCCESS with attempts 1..n"
    [ "$(count true)" = "$1" ] || fail "instance count is not $1"
}
done_all() { [ "$(count "state = 'FINISHED' AND result_published_at IS NOT NULL")" = "$1" ]; }

# plugin runs host a's executor logged as returned after the fence: "epoch_ms instance" lines
fenced_returns() {
    python3 - "$WORK/ax-executor@a.log" <<'EOF'
import datetime, re, sys
pat = re.compile(r"^(\S+) \S+ \S+: instance (\d+): plugin \S+ returned \d+ ms after the fence")
for line in open(sys.argv[1], errors="replace"):
    m = pat.match(line)
    if m:
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ")
        t = t.replace(tzinfo=datetime.timezone.utc)
        print(int(t.timestamp() * 1000), m.group(2))
EOF
}
# http requests of host a its server saw closed: "end_ms instance" lines
closed_a() { jq -r 'select(.host == "a" and .how == "closed") | "\(.end) \(.instance)"' "$WORK/http.jsonl" 2>/dev/null || true; }

# ---- part 1: cooperative plugins and http requests -------------------------------
cut_a
T_STOP=
until [ "$(date +%s%3N)" -ge $((T_CUT + 2 * LEASE)) ]; do
    if [ -z "$T_STOP" ] && [ "$(fenced_returns | wc -l)" -ge "$PL_A" ] &&
       [ "$(closed_a | wc -l)" -ge "$HT_A" ]; then
        T_STOP=$(date +%s%3N)
    fi
    sleep 0.1
done
netns_heal a
np=$(fenced_returns | wc -l)
nh=$(closed_a | wc -l)
[ -n "$T_STOP" ] ||
    fail "after 2 x the lease cut off from PostgreSQL, $np of host a's $PL_A plugin runs had returned and $nh of its $HT_A requests were closed"
[ "$np" = "$PL_A" ] || fail "$np plugin runs returned after the fence on host a, it ran $PL_A"
[ "$nh" = "$HT_A" ] || fail "$nh requests of host a closed, it ran $HT_A"
LAST_P=$(fenced_returns | sort -n | tail -n 1 | cut -d' ' -f1)
LAST_H=$(closed_a | sort -n | tail -n 1 | cut -d' ' -f1)
[ "$LAST_P" -lt "$E_MIN" ] ||
    fail "host a's last plugin run returned $((LAST_P - E_MIN)) ms after its earliest lease expired"
[ "$LAST_H" -lt "$E_MIN" ] ||
    fail "host a's last request was closed $((LAST_H - E_MIN)) ms after its earliest lease expired"
# the instances are the ones host a ran
awk '{ print $1 }' "$WORK/inst-a" | sort >"$WORK/ids-a"
cat <(fenced_returns) <(closed_a) | awk '{ print $2 }' | sort | comm -13 "$WORK/ids-a" - >"$WORK/stray"
[ ! -s "$WORK/stray" ] || fail "fenced instances host a did not run: $(paste -sd' ' "$WORK/stray")"
grep -q "plugin sleep told to stop (should_stop)" "$WORK/ax-executor@a.log" || fail "no plugin fence logged on host a"
grep -q "http request aborted (connection shut down)" "$WORK/ax-executor@a.log" || fail "no http fence logged on host a"
T_GONE=$(( LAST_P > LAST_H ? LAST_P : LAST_H ))
log "host a's plugin runs returned $((LAST_P - T_CUT)) ms and its requests were closed $((LAST_H - T_CUT)) ms after the cut, $((E_MIN - T_GONE)) ms before the first lease expired"

wait_for 120 "all $N instances finished" done_all "$N"
attempts_ok "$T_GONE"
ended_once "$N"
log "part 1: every instance ended once, none ran on two hosts at once"

# ---- part 2: a plugin that ignores should_stop() ----------------------------------
NI=${NI:-20}
sql "DELETE FROM job WHERE name IN ('${JOBS[0]}', '${JOBS[1]}')" >/dev/null
axctl job create "${JOBP}deaf" --handler plugin --no-schedule --retries 3 --retry-initial 200 \
    --timeout 120000 -- "$PLUGDIR/ax-sleep.so" "$SLEEP_MS" ignore-stop >/dev/null
JIDS=$(sql "SELECT id FROM job WHERE name = '${JOBP}deaf'")
axctl submit --job "${JOBP}deaf" --count "$NI" >/dev/null || fail "submit failed"
running_ni() { [ "$(count "state = 'RUNNING'")" = "$NI" ]; }
wait_for 60 "all $NI instances RUNNING" running_ni
DEAF_A=$(count "worker = 'ex-a' AND state = 'RUNNING'")
[ "$DEAF_A" -gt 0 ] || fail "host a runs none of the $NI instances"
sleep 1 # on a worker, inside run()
sql "SELECT id || ' ' || attempt FROM job_instance WHERE job_id = $JIDS AND worker = 'ex-a'" >"$WORK/inst-a"
log "host a runs $DEAF_A of $NI instances of a plugin that ignores should_stop()"

cut_a
# (a child of this shell that exited stays a zombie until waited for)
alive_pid() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [ "${s:0:1}" != Z ]; }
T_EXIT=
until [ "$(date +%s%3N)" -ge $((T_CUT + 2 * LEASE)) ]; do
    if [ -z "$T_EXIT" ] && ! alive_pid "$PA"; then
        T_EXIT=$(date +%s%3N)
    fi
    sleep 0.05
done
netns_heal a
[ -n "$T_EXIT" ] || fail "host a's executor still ran 2 x the lease after the cut, its plugin inside run()"
rc=0
wait "$PA" || rc=$?
unset "SVC_PID[executor@a]"
[ "$rc" = 3 ] || fail "host a's executor exited with status $rc, not 3"
[ "$T_EXIT" -lt "$E_MIN" ] || fail "host a's executor exited $((T_EXIT - E_MIN)) ms after its earliest lease expired"
grep -q "a plugin is still inside run() after its stop flag was raised.*exiting (status 3" \
    "$WORK/ax-executor@a.log" || fail "the exit's reason is not logged on host a"
log "host a's executor exited (status 3) $((T_EXIT - T_CUT)) ms after the cut, $((E_MIN - T_EXIT)) ms before the first lease expired"
# as its supervisor would
start_svc_in a executor@a "${EX[@]}" --set worker.id=ex-a

wait_for 120 "all $NI instances finished" done_all "$NI"
attempts_ok "$T_EXIT"
ended_once "$NI"
sw=$(sql "SELECT count(*) FROM job_attempt t JOIN job_instance i ON i.id = t.instance_id
          WHERE i.job_id = $JIDS AND t.error_class = 'worker_lost'")
log "OK: part 1: $PL_A plugin runs and $HT_A requests on host a stopped before their leases expired; part 2: the executor exited $((E_MIN - T_EXIT)) ms before the first lease expired ($sw attempts swept); every instance SUCCESS once"
