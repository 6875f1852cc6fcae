#!/usr/bin/env bash
# The alert webhook (docs/ALERTS.md) through the real services.
# A python3 http.server fixture plays the receiver: it records every POST
# and verifies X-Ax-Signature on its own with python's hmac/hashlib (the
# verification docs/ALERTS.md describes), answering 500 to the first
# request of each path.
#  1. A job whose command fails with a retry rule {"class":"exit",
#     "action":"alert"} raises final_failure: the fixture gets it with a
#     valid signature, the right job, deployment and worker; the first POST
#     got 500 and the same alert (same id, signed again) came back about
#     1 s later and got 200. The same check with a wrong secret, a tampered
#     body or a stale timestamp fails.
#  2. A receiver that never answers in alert.webhook.timeout.ms: exactly
#     1 + 3 tries, then the alert is dropped with a WARN line.
#  3. Shutdown with an alert still held: logged, clean exit.
#  4. An https:// URL is a configuration error (exit 2); --print-config
#     redacts the secret; the secret is in no service log.
source "$(dirname "$0")/lib.sh"
create_topics 2

SECRET='s3cr3t#not-in-logs-'"$$$RANDOM"

# ---- the receiver ---------------------------------------------------------------------
cat >"$WORK/hook.py" <<'EOF'
import hashlib, hmac, http.server, json, sys, threading, time

def verify(secret, headers, body, now=None, tolerance=300):
    """What a receiver does (docs/ALERTS.md): recompute the HMAC over
    "<timestamp>.<raw body>", compare in constant time, refuse old or future
    timestamps."""
    ts = headers.get("X-Ax-Timestamp") or ""
    sig = headers.get("X-Ax-Signature") or ""
    if not ts.isdigit() or not sig.startswith("sha256="):
        return False
    now = time.time() if now is None else now
    if abs(now - int(ts)) > tolerance:
        return False
    want = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, sig[len("sha256="):])

if sys.argv[1] == "--check":
    # Re-verify a recorded request with the right secret (must pass) and with
    # a wrong secret, a tampered body and a stale timestamp (must fail).
    secret, rec = sys.argv[2], json.loads(sys.argv[3])
    h, body, at = rec["headers"], rec["body"].encode(), rec["at"]
    assert verify(secret, h, body, now=at), "the right secret must verify"
    assert not verify(secret + "x", h, body, now=at), "a wrong secret verified"
    assert not verify("", h, body, now=at), "an empty secret verified"
    assert not verify(secret, h, body.replace(b'"kind"', b'"kinD"'), now=at), "tampered body verified"
    assert not verify(secret, h, body, now=at + 301), "a stale timestamp verified"
    bad = dict(h, **{"X-Ax-Timestamp": str(int(h["X-Ax-Timestamp"]) + 1)})
    assert not verify(secret, bad, body, now=at), "a changed timestamp verified"
    print("verification checks ok")
    sys.exit(0)

REQS, SECRET = sys.argv[1], sys.argv[2]
seen = {}
lock = threading.Lock()

class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write("hook: " + (fmt % args) + "\n")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        with lock:
            k = seen[self.path] = seen.get(self.path, 0) + 1
        ok = verify(SECRET, self.headers, body)
        code = 500 if k == 1 else 200 if ok else 401
        with lock, open(REQS, "a") as f:
            f.write(json.dumps({"path": self.path, "n": k, "at": time.time(), "verified": ok,
                                "code": code, "body": body.decode("utf-8", "replace"),
                                "headers": {h: self.headers.get(h) for h in
                                            ("Content-Type", "X-Ax-Timestamp", "X-Ax-Signature",
                                             "X-Ax-Alert-Id")}}) + "\n")
        if self.path == "/slow":
            time.sleep(20)
            return
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
with open(REQS + ".port", "w") as f:
    f.write(str(s.server_address[1]))
s.serve_forever()
EOF
REQS="$WORK/requests.jsonl"
touch "$REQS"
python3 "$WORK/hook.py" "$REQS" "$SECRET" >>"$WORK/hook.txt" 2>&1 &
SVC_PID[hook]=$!   # cleanup stops it with the services
wait_for 10 "the webhook fixture" test -s "$REQS.port"
PORT=$(cat "$REQS.port")
log "webhook fixture on port $PORT"

# ---- 4 (first: needs no running service) ----------------------------------------------
CB="$AX_BIN/services/callback/ax-callback"
set +e
"$CB" --set "alert.webhook.url=https://127.0.0.1:$PORT/hook" >"$WORK/https.out" 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || { cat "$WORK/https.out"; fail "https URL: exit $rc, expected 2"; }
grep -q "alert.webhook.url: https is not supported" "$WORK/https.out" \
    || { cat "$WORK/https.out"; fail "https refusal unclear"; }
"$CB" --set "alert.webhook.secret=$SECRET" --print-config >"$WORK/print.out"
grep -q "^alert.webhook.secret = <redacted>$" "$WORK/print.out" || fail "secret not redacted"
! grep -qF -- "$SECRET" "$WORK/print.out" || fail "--print-config printed the secret"

# ---- 1 ------------------------------------------------------------------------------
sql "INSERT INTO job (name, command, retry_rules)
     VALUES ('${JOBP}x', '{false}', '[{\"class\":\"exit\",\"action\":\"alert\"}]')" >/dev/null
HOOK=(--set "alert.webhook.url=http://127.0.0.1:$PORT/hook" --set "alert.webhook.secret=$SECRET")
start_svc trigger
start_svc executor
start_svc callback "${HOOK[@]}"

if axctl submit --job "${JOBP}x" --wait --wait-timeout 30 >"$WORK/submit.out" 2>&1; then
    cat "$WORK/submit.out"; fail "the failing job succeeded"
fi
log "submit: $(tail -n 1 "$WORK/submit.out")"
hook_n() { [ "$(jq -s "[.[] | select(.path == \"$1\")] | length" "$REQS")" -ge "$2" ]; }
wait_for 20 "the alert and its retry on /hook" hook_n /hook 2
sleep 0.5
first=$(jq -c 'select(.path == "/hook" and .n == 1)' "$REQS")
second=$(jq -c 'select(.path == "/hook" and .n == 2)' "$REQS")
log "first:  $first"
log "second: $second"
[ "$(jq -s '[.[] | select(.path == "/hook")] | length' "$REQS")" -eq 2 ] \
    || fail "expected exactly 2 POSTs on /hook (500, then 200): $(cat "$REQS")"
for r in "$first" "$second"; do
    [ "$(echo "$r" | jq -r .verified)" = true ] || fail "signature did not verify: $r"
    [ "$(echo "$r" | jq -r '.headers["Content-Type"]')" = application/json ] || fail "Content-Type: $r"
done
[ "$(echo "$first" | jq -r .code)" = 500 ] && [ "$(echo "$second" | jq -r .code)" = 200 ] \
    || fail "expected 500 then 200"
gap=$(jq -n --argjson a "$first" --argjson b "$second" '$b.at - $a.at')
log "retry after ${gap} s"
[ "$(jq -n --argjson g "$gap" '$g >= 0.9 and $g < 5')" = true ] \
    || fail "retry came after $gap s, expected about 1 s"
body=$(echo "$second" | jq -r .body)
[ "$(echo "$first" | jq -r .body | jq -r .id)" = "$(echo "$body" | jq -r .id)" ] \
    || fail "the retry is not the same alert"
jb() { echo "$body" | jq -r "$1"; }
[ "$(jb .kind)" = final_failure ] || fail "kind: $body"
[ "$(jb .job)" = "${JOBP}x" ] || fail "job: $body"
[ "$(jb .deployment)" = "$AXCONF_TOPIC_PREFIX" ] || fail "deployment: $body"
[ -n "$(jb .worker)" ] && [ "$(jb .worker)" != null ] || fail "worker: $body"
jb .text | grep -q "failed for good" || fail "text: $body"
jb .id | grep -Eq '^[0-9a-f]{32}$' || fail "id: $body"
[ "$(echo "$second" | jq -r '.headers["X-Ax-Alert-Id"]')" = "$(jb .id)" ] || fail "X-Ax-Alert-Id"
now_ms=$(date +%s%3N)
[ $((now_ms - $(jb .time))) -lt 60000 ] && [ "$(jb .time)" -le "$now_ms" ] || fail "time: $body"
python3 "$WORK/hook.py" --check "$SECRET" "$second" || fail "verification self-check"
grep -q "alert $(jb .id) (final_failure): webhook http://127.0.0.1:$PORT try 1 failed (HTTP 500)" \
    "$WORK/ax-callback.log" || fail "the failed try is not logged"

# ---- 2 ------------------------------------------------------------------------------
stop_svc callback
start_svc callback --set "alert.webhook.url=http://127.0.0.1:$PORT/slow" \
    --set "alert.webhook.secret=$SECRET" --set alert.webhook.timeout.ms=300
axctl submit --job "${JOBP}x" --wait --wait-timeout 30 >/dev/null 2>&1 || true
# tries at 0, 1.3, 3.6, 7.9 s (300 ms each + 1, 2, 4 s)
wait_for 20 "the alert dropped after 4 tries" \
    grep -q "dropped: webhook http://127.0.0.1:$PORT failed 4 times, last: no response within 300 ms" \
    "$WORK/ax-callback.log"
sleep 0.5
n=$(jq -s '[.[] | select(.path == "/slow")] | length' "$REQS")
[ "$n" -eq 4 ] || fail "expected 4 tries on /slow, got $n"
[ "$(jq -s '[.[] | select(.path == "/slow") | .headers["X-Ax-Alert-Id"]] | unique | length' "$REQS")" -eq 1 ] \
    || fail "the 4 tries are not one alert"
log "4 tries on /slow, then dropped"

# ---- 3 ------------------------------------------------------------------------------
axctl submit --job "${JOBP}x" --wait --wait-timeout 30 >/dev/null 2>&1 || true
wait_for 10 "the third alert" hook_n /slow 5
stop_svc callback
grep -q "1 alert(s) not delivered to webhook http://127.0.0.1:$PORT at shutdown" \
    "$WORK/ax-callback.log" || fail "abandoned alert not logged at shutdown"
grep -q "stopped:" "$WORK/ax-callback.log" || fail "the callback did not stop cleanly"
! grep -q "AddressSanitizer\|runtime error" "$WORK"/ax-*.log || fail "sanitizer report"

# ---- the secret is in no service log ---------------------------------------------------
for f in "$WORK"/ax-*.log; do
    ! grep -qF -- "$SECRET" "$f" || fail "the secret is in $(basename "$f")"
done
grep -q "ALERT final_failure job ${JOBP}x" "$WORK/ax-callback.log" || fail "no ALERT line"
log "ok"
