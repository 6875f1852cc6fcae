#!/usr/bin/env bash
# Routing keys, executor groups, SIGHUP reload and `axctl workers`.
# (a) A job with --routing-key order: the dispatch of an instance whose
#     payload has "order" is keyed by its value — all of one value on one
#     partition, the one Java's murmur2 partitioner picks (computed here by an
#     independent python3 murmur2, checked against Kafka's own test vectors)
#     — and instances without the field are keyed by their id and spread.
# (b) A job with --group orders goes to <prefix>dispatch.orders (made by
#     `axctl topics create --group orders`) and is run only by the executor
#     serving that group; a default job by either executor.
# (c) SIGHUP: executor.slots 1 -> 3 in the executor's --config file shows in
#     its worker row; an invalid value (0) is refused, logged, and the
#     executor keeps running with 3.
# (d) `axctl workers` lists both executors as running, hides a worker
#     silent for over a minute unless --all (which shows it lost), and shows a
#     stopped one as stopped after SIGTERM.
source "$(dirname "$0")/lib.sh"

E1="${JOBP}e1"
E2="${JOBP}e2"
E3="${JOBP}e3"
# The worker rows of this test go too (after the executors stopped writing them).
on_exit() {
    local rc=$? n
    for n in "${!SVC_PID[@]}"; do stop_svc "$n" KILL; done
    sql "DELETE FROM worker WHERE id LIKE '${JOBP}%'" >/dev/null 2>&1 || true
    (exit "$rc")
    cleanup
}
trap on_exit EXIT

# (wait_for runs a command again and again: the check is evaluated each time)
check() { eval "$1"; }
# expect RC PATTERN COMMAND...: exit status RC and PATTERN (grep -E) in stdout+stderr.
expect() {
    local want=$1 pat=$2; shift 2
    set +e; "$@" >"$WORK/out" 2>&1; local rc=$?; set -e
    [ "$rc" -eq "$want" ] || { cat "$WORK/out"; fail "expected exit $want from '$*', got $rc"; }
    grep -qE -- "$pat" "$WORK/out" || { cat "$WORK/out"; fail "output of '$*' lacks /$pat/"; }
}

# ---- topics, with the orders group's dispatch topic ----------------------------------
expect 2 "--group" axctl topics create --group 'no/slash'
axctl topics create --partitions 4 --group orders >/dev/null 2>&1 || fail "topics create --group orders failed"
parts() { kc -L -t "$1" 2>/dev/null | grep -cE '^ +partition [0-9]+'; }
[ "$(parts "$(topic dispatch)")" = 4 ] || fail "$(topic dispatch) does not have 4 partitions"
[ "$(parts "$(topic dispatch.orders)")" = 4 ] || fail "$(topic dispatch.orders) was not created with 4 partitions"
# the topics the services read in one place: at most 2 partitions unless asked
for t in submit callback results dlq; do
    [ "$(parts "$(topic $t)")" = 2 ] || fail "$(topic $t) does not have the default 2 partitions"
done
expect 2 "--service-partitions must be 1..100000" axctl topics create --service-partitions 0

# ---- (a) routing keys ----------------------------------------------------------------------
R="${JOBP}routed"
expect 2 "--routing-key" axctl job create "$R" --routing-key "$(printf 'x%.0s' $(seq 300))" -- true
axctl job create "$R" --routing-key order -- true >/dev/null || fail "job create --routing-key failed"
[ "$(sql "SELECT routing_key FROM job WHERE name = '$R'")" = order ] || fail "routing_key not stored"
axctl job list >"$WORK/list" || fail "job list failed"
grep -qE "^$R .* routing-key=order$" "$WORK/list" || fail "job list does not show the routing key"

start_svc trigger
axctl submit --job "$R" --payload '{"order":"A-17","n":1}' --count 10 >/dev/null || fail "submit A failed"
axctl submit --job "$R" --payload '{"n":2,"order":"B-3"}' --count 10 >/dev/null || fail "submit B failed"
axctl submit --job "$R" --payload '{"customer":"C-1"}' --count 10 >/dev/null || fail "submit without the field failed"
axctl submit --job "$R" --count 10 >/dev/null || fail "submit without a payload failed"
# (the trigger's partition primers, key ax-primer, left out: no instance)
dispatched() { kc -C -t "$(topic dispatch)" -o beginning -e -q -f '%p %k\n' 2>/dev/null | { grep -v ' ax-primer$' || true; }; }
wait_for 30 "40 dispatches on $(topic dispatch)" check '[ "$(dispatched | wc -l)" -ge 40 ]'
dispatched >"$WORK/dispatched"
# The keys the instances without the field must have: their ids.
sql "SELECT id FROM job_instance WHERE job_name = '$R'
     AND convert_from(payload, 'UTF8') NOT LIKE '%\"order\"%' ORDER BY id" >"$WORK/keyless-ids"
[ "$(wc -l <"$WORK/keyless-ids")" = 20 ] || fail "$(wc -l <"$WORK/keyless-ids") instances without the field, expected 20"

cat >"$WORK/check_keys.py" <<'EOF'
# Independent of ax: Kafka's Java Utils.murmur2 and the default partitioner
# (toPositive(murmur2(key)) % partitions), checked against the vectors of
# Kafka's UtilsTest.testMurmur2.
import sys

def murmur2(data):
    m, r = 0x5bd1e995, 24
    n = len(data)
    h = (0x9747b28c ^ n) & 0xffffffff
    for i in range(0, n - n % 4, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & 0xffffffff
        k ^= k >> r
        k = (k * m) & 0xffffffff
        h = ((h * m) & 0xffffffff) ^ k
    t = n - n % 4
    if n % 4 >= 3:
        h ^= data[t + 2] << 16
    if n % 4 >= 2:
        h ^= data[t + 1] << 8
    if n % 4 >= 1:
        h ^= data[t]
        h = (h * m) & 0xffffffff
    h ^= h >> 13
    h = (h * m) & 0xffffffff
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h  # a Java int

VECTORS = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
           b"a-little-bit-longer-string": -1486304829,
           b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
for k, v in VECTORS.items():
    assert murmur2(k) == v, "murmur2(%r) = %d, Kafka says %d" % (k, murmur2(k), v)

def partition(key, n):
    return (murmur2(key) & 0x7fffffff) % n

lines = [l.split(" ", 1) for l in open(sys.argv[1]).read().splitlines()]
keyless = set(open(sys.argv[2]).read().split())
errors = []
by_key = {}
for p, k in lines:
    by_key.setdefault(k, []).append(int(p))
for k in ("A-17", "B-3"):
    ps = by_key.get(k, [])
    if len(ps) != 10:
        errors.append("key %s: %d messages, expected 10" % (k, len(ps)))
    if len(set(ps)) != 1:
        errors.append("key %s on several partitions: %s" % (k, sorted(set(ps))))
    want = partition(k.encode(), 4)
    if any(p != want for p in ps):
        errors.append("key %s on partition(s) %s, murmur2 says %d" % (k, sorted(set(ps)), want))
others = {k: ps for k, ps in by_key.items() if k not in ("A-17", "B-3")}
if set(others) != keyless:
    errors.append("keys of the instances without the field %s are not their ids %s"
                  % (sorted(others), sorted(keyless)))
if sum(len(ps) for ps in others.values()) != 20:
    errors.append("%d messages without the field, expected 20" % sum(len(ps) for ps in others.values()))
for k, ps in others.items():
    want = partition(k.encode(), 4)
    if any(p != want for p in ps):
        errors.append("key %s on partition %s, murmur2 says %d" % (k, ps, want))
spread = {p for ps in others.values() for p in ps}
if len(spread) < 2:
    errors.append("instances without the field all on partition(s) %s" % sorted(spread))
print("A-17 -> %s, B-3 -> %s, keyless over partitions %s"
      % (sorted(set(by_key.get("A-17", []))), sorted(set(by_key.get("B-3", []))), sorted(spread)))
for e in errors:
    print("ERROR: " + e)
sys.exit(1 if errors else 0)
EOF
out=$(python3 "$WORK/check_keys.py" "$WORK/dispatched" "$WORK/keyless-ids") \
    || { cat "$WORK/dispatched"; fail "routing keys: $out"; }
log "routing: $out"

# ---- (b) executor groups ------------------------------------------------------------------
O="${JOBP}orders"
D="${JOBP}plain"
expect 2 "--group" axctl job create "$O" --group 'bad group' -- true
expect 2 "--group" axctl job create "$O" --group "$(printf 'g%.0s' $(seq 65))" -- true
axctl job create "$O" --group orders -- true >/dev/null || fail "job create --group failed"
axctl job create "$D" -- true >/dev/null || fail "job create failed"
[ "$(sql "SELECT executor_group FROM job WHERE name = '$O'")" = orders ] || fail "executor_group not stored"
axctl job list >"$WORK/list" || fail "job list failed"
grep -qE "^$O .* group=orders$" "$WORK/list" || fail "job list does not show the group"

start_svc executor@1 --set worker.id="$E1" --set executor.slots=8
start_svc executor@2 --set worker.id="$E2" --set executor.slots=8 --set executor.groups=default,orders
start_svc callback
axctl submit --job "$O" --count 20 >/dev/null || fail "submit $O failed"
axctl submit --job "$D" --count 20 >/dev/null || fail "submit $D failed"
n_done() { sql "SELECT count(*) FROM job_instance WHERE job_name = '$1' AND state = 'FINISHED'"; }
wait_for 45 "20 instances of $O to finish" check '[ "$(n_done "$O")" -ge 20 ]'
wait_for 30 "20 instances of $D to finish" check '[ "$(n_done "$D")" -ge 20 ]'
wait_for 30 "the 40 routed instances to finish" check '[ "$(n_done "$R")" -ge 40 ]'
got=$(sql "SELECT count(*) || '|' || count(*) FILTER (WHERE outcome = 'SUCCESS') || '|' ||
                  count(*) FILTER (WHERE worker = '$E2') || '|' ||
                  count(*) FILTER (WHERE executor_group = 'orders')
           FROM job_instance WHERE job_name = '$O'")
[ "$got" = "20|20|20|20" ] || fail "$O: instances|SUCCESS|run by $E2|group orders = $got, expected 20|20|20|20
$(sql "SELECT worker, count(*) FROM job_instance WHERE job_name = '$O' GROUP BY 1")"
got=$(sql "SELECT count(*) || '|' || count(*) FILTER (WHERE outcome = 'SUCCESS') || '|' ||
                  count(*) FILTER (WHERE worker IN ('$E1', '$E2'))
           FROM job_instance WHERE job_name = '$D'")
[ "$got" = "20|20|20" ] || fail "$D: instances|SUCCESS|run by $E1 or $E2 = $got, expected 20|20|20"
log "$D run by: $(sql "SELECT string_agg(w || ' ' || n, ', ') FROM (SELECT worker AS w, count(*) AS n
                    FROM job_instance WHERE job_name = '$D' GROUP BY 1 ORDER BY 1) x")"
# And on the wire: the orders job's dispatches are on dispatch.orders only.
kc -C -t "$(topic dispatch.orders)" -o beginning -e -q -f '%k\n' 2>/dev/null | no_primers | sort -n >"$WORK/orders-keys"
sql "SELECT id FROM job_instance WHERE job_name = '$O' ORDER BY id" >"$WORK/orders-ids"
[ "$(sort -nu "$WORK/orders-keys")" = "$(cat "$WORK/orders-ids")" ] \
    || fail "$(topic dispatch.orders) holds keys $(tr '\n' ' ' <"$WORK/orders-keys"), not the $O instances"
dispatched | awk '{ print $2 }' >"$WORK/default-keys"
grep -qxFf "$WORK/orders-ids" "$WORK/default-keys" \
    && fail "an instance of $O was dispatched on $(topic dispatch)"

# ---- (d) axctl workers, both running --------------------------------------------------------
sql "INSERT INTO worker (id, groups, heartbeat_at, state)
     VALUES ('${JOBP}stale', '{default}', now() - interval '2 minutes', 'running')" >/dev/null
axctl workers >"$WORK/workers" || fail "axctl workers failed"
pool_re='command [0-9]+/8\+[0-9]+/64'
hb_re='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z'
grep -qE "^$E1 +running +[0-9]+\.[0-9] +default +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+ +yes +$hb_re +$pool_re" \
    "$WORK/workers" || { cat "$WORK/workers"; fail "axctl workers: no running line for $E1"; }
grep -qE "^$E2 +running +[0-9]+\.[0-9] +default,orders +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+ +yes +$hb_re +$pool_re" \
    "$WORK/workers" || { cat "$WORK/workers"; fail "axctl workers: no running line for $E2"; }
grep -q "^${JOBP}stale " "$WORK/workers" && { cat "$WORK/workers"; fail "axctl workers shows a worker silent for 2 minutes"; }
axctl workers --all >"$WORK/workers-all" || fail "axctl workers --all failed"
# silent for 2 minutes without saying "stopped": lost (its heartbeat stopped)
grep -qE "^${JOBP}stale +lost +1[2-9][0-9]\.[0-9] " "$WORK/workers-all" \
    || { cat "$WORK/workers-all"; fail "axctl workers --all does not show the silent worker"; }
expect 2 "unknown" axctl workers --bogus

# ---- (c) SIGHUP ------------------------------------------------------------------------------
cp "$AX_CONFIG" "$WORK/ax.conf"
echo "executor.slots = 1" >>"$WORK/ax.conf"
start_svc executor@3 --config "$WORK/ax.conf" --set worker.id="$E3"
slots() { sql "SELECT pools->'command'->>'slots' FROM worker WHERE id = '$E3'"; }
wait_for 20 "$E3's worker row with 1 command slot" check '[ "$(slots)" = 1 ]'
sed -i 's/^executor.slots = 1$/executor.slots = 3/' "$WORK/ax.conf"
grep -qx "executor.slots = 3" "$WORK/ax.conf" || fail "could not edit the configuration copy"
kill -HUP "${SVC_PID[executor@3]}"
wait_for 10 "$E3's worker row with 3 command slots after SIGHUP" check '[ "$(slots)" = 3 ]'
grep -q "SIGHUP: configuration reloaded" "$WORK/ax-executor@3.log" || fail "no reload logged"
sed -i 's/^executor.slots = 3$/executor.slots = 0/' "$WORK/ax.conf"
t_hup=$(sql "SELECT now()")
kill -HUP "${SVC_PID[executor@3]}"
wait_for 10 "the refused reload to be logged" grep -q "configuration not reloaded" "$WORK/ax-executor@3.log"
log "logged: $(grep "configuration not reloaded" "$WORK/ax-executor@3.log" | tail -n 1)"
hb_after_hup() { sql "SELECT heartbeat_at > '$t_hup'::timestamptz + interval '100 ms' FROM worker WHERE id = '$E3'"; }
wait_for 10 "a heartbeat of $E3 after the refused reload" check '[ "$(hb_after_hup)" = t ]'
kill -0 "${SVC_PID[executor@3]}" 2>/dev/null || fail "the executor exited after an invalid reload"
[ "$(slots)" = 3 ] || fail "command slots are $(slots) after an invalid reload, expected 3"
[ "$(sql "SELECT state FROM worker WHERE id = '$E3'")" = running ] || fail "$E3 is not running"
stop_svc executor@3

# ---- (d) after SIGTERM ------------------------------------------------------------------------
stop_svc executor@1 TERM
axctl workers >"$WORK/workers" || fail "axctl workers failed"
grep -qE "^$E1 +stopped " "$WORK/workers" || { cat "$WORK/workers"; fail "axctl workers: $E1 not stopped after SIGTERM"; }
grep -qE "^$E2 +running " "$WORK/workers" || { cat "$WORK/workers"; fail "axctl workers: $E2 not running"; }
grep -qE "^$E1 .* no +$hb_re +command " "$WORK/workers" || { cat "$WORK/workers"; fail "axctl workers: a stopped executor still fetching"; }

log "ok"
