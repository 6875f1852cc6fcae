#!/usr/bin/env bash
# The http and plugin handlers through the real services.
# http: a python3 http.server fixture answers 200 (SUCCESS; the POST carries
# the instance as JSON plus the Idempotency-Key and X-Ax-Trace-Id headers),
# 500 (FAILED, class http, exit code 500), 404 (FAILED, 404), never answers
# (TIMEOUT at the job's timeout); a closed port is a network failure and
# https:// is refused with a clear reason.
# plugin: ax-noop.so succeeds, ax-sleep.so with a short timeout is TIMEOUT
# (and the executor keeps serving), ax-sleep.so MS succeeds with its output,
# a missing .so fails with the loader's reason, and ax-idem_example.so claims
# a business key once: a second instance with the same key is told it is
# taken (a real claim in PostgreSQL).
# Jobs use retry_max 0, so each test case is one attempt.
source "$(dirname "$0")/lib.sh"
create_topics 2

PLUGDIR=$(cd "$AX_BIN/plugins" 2>/dev/null && pwd) || fail "no $AX_BIN/plugins (build the plugins)"
[ -f "$PLUGDIR/ax-noop.so" ] || fail "$PLUGDIR/ax-noop.so is not built"

# ---- the HTTP fixture ----------------------------------------------------------------
cat >"$WORK/httpd.py" <<'EOF'
import http.server, json, sys, time

REQS = sys.argv[1]

class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write("httpd: " + (fmt % args) + "\n")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode("utf-8", "replace")
        with open(REQS, "a") as f:
            f.write(json.dumps({"path": self.path,
                                "idem": self.headers.get("Idempotency-Key"),
                                "trace": self.headers.get("X-Ax-Trace-Id"),
                                "ctype": self.headers.get("Content-Type"),
                                "body": body}) + "\n")
        if self.path == "/slow":
            time.sleep(30)
            return
        code = {"/ok": 200, "/fail": 500}.get(self.path, 404)
        out = ("answer %d to %s\n" % (code, self.path)).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
with open(REQS + ".port", "w") as f:
    f.write(str(s.server_address[1]))
s.serve_forever()
EOF
REQS="$WORK/requests.jsonl"
python3 "$WORK/httpd.py" "$REQS" >>"$WORK/httpd.log" 2>&1 &
SVC_PID[httpd]=$!   # cleanup stops it with the services
wait_for 10 "the HTTP fixture" test -s "$REQS.port"
PORT=$(cat "$REQS.port")
log "HTTP fixture on port $PORT"

# A closed port for the network failure.
DEAD=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

mkjob() { # mkjob NAME KIND TIMEOUT_MS ELEMENT...
    local name=$1 kind=$2 timeout=$3; shift 3
    local arr="" e
    for e in "$@"; do arr+="${arr:+,}'$e'"; done
    sql "INSERT INTO job (name, handler_kind, command, timeout_ms, retry_max)
         VALUES ('$JOBP$name', '$kind', ARRAY[$arr]::text[], $timeout, 0)" >/dev/null
}
mkjob http-ok     http 10000 "http://127.0.0.1:$PORT/ok"
mkjob http-fail   http 10000 "http://127.0.0.1:$PORT/fail"
mkjob http-404    http 10000 "http://127.0.0.1:$PORT/missing"
mkjob http-slow   http 1500  "http://127.0.0.1:$PORT/slow"
mkjob http-dead   http 10000 "http://127.0.0.1:$DEAD/x"
mkjob http-tls    http 10000 "https://127.0.0.1:$PORT/ok"
mkjob pl-noop     plugin 10000 "$PLUGDIR/ax-noop.so"
mkjob pl-sleep    plugin 300   "$PLUGDIR/ax-sleep.so" 60000
mkjob pl-nap      plugin 10000 "$PLUGDIR/ax-sleep.so" 50
mkjob pl-missing  plugin 10000 "$PLUGDIR/ax-no-such-plugin.so"
mkjob pl-idem     plugin 10000 "$PLUGDIR/ax-idem_example.so"

start_all

# submit NAME [axctl submit options]: prints the final JSON (never fails)
submit() { local n=$1; shift; axctl submit --job "$JOBP$n" --wait --wait-timeout 60 "$@" || true; }
jf() { echo "$1" | jq -r ".$2 // empty"; }
expect() { # expect JSON FIELD VALUE
    [ "$(jf "$1" "$2")" = "$3" ] || fail "$2 is '$(jf "$1" "$2")', expected '$3' in: $1"
}

# ---- http ------------------------------------------------------------------------
key="order-$$-$RANDOM"
out=$(submit http-ok --payload '{"amount": 5}' --idempotency-key "$key")
log "http ok: $out"
expect "$out" outcome SUCCESS
expect "$out" exit_code 200
echo "$out" | jq -r .output | grep -q "answer 200 to /ok" || fail "response body not kept as output: $out"
trace=$(jf "$out" trace_id)
id=$(jf "$out" id)
req=$(grep '"/ok"' "$REQS" | tail -n 1)
[ "$(echo "$req" | jq -r .idem)" = "$key" ] || fail "Idempotency-Key not received: $req"
[ "$(echo "$req" | jq -r .trace)" = "$trace" ] || fail "X-Ax-Trace-Id not received: $req"
[ "$(echo "$req" | jq -r .ctype)" = "application/json" ] || fail "Content-Type not JSON: $req"
body=$(echo "$req" | jq -r .body)
[ "$(echo "$body" | jq -r .instance_id)" = "$id" ] || fail "instance_id not in the body: $body"
[ "$(echo "$body" | jq -r .attempt)" = 1 ] || fail "attempt not in the body: $body"
[ "$(echo "$body" | jq -r .job)" = "${JOBP}http-ok" ] || fail "job not in the body: $body"
[ "$(echo "$body" | jq -r .payload)" = '{"amount": 5}' ] || fail "payload not in the body: $body"
[ "$(echo "$body" | jq -r .idempotency_key)" = "$key" ] || fail "key not in the body: $body"

out=$(submit http-fail)
log "http 500: $out"
expect "$out" outcome FAILED
expect "$out" error_class http
expect "$out" exit_code 500

out=$(submit http-404)
log "http 404: $out"
expect "$out" outcome FAILED
expect "$out" error_class http
expect "$out" exit_code 404

t0=$(date +%s%3N)
out=$(submit http-slow)
t1=$(date +%s%3N)
log "http slow: $out ($((t1 - t0)) ms)"
expect "$out" outcome TIMEOUT
expect "$out" error_class timeout
[ $((t1 - t0)) -ge 1500 ] || fail "timed out after $((t1 - t0)) ms (< 1500)"

out=$(submit http-dead)
log "http closed port: $out"
expect "$out" outcome FAILED
expect "$out" error_class network

out=$(submit http-tls)
log "https: $out"
expect "$out" outcome FAILED
echo "$out" | grep -q "https is not supported" || fail "https refusal unclear: $out"

# ---- plugins ------------------------------------------------------------------
out=$(submit pl-noop)
log "noop: $out"
expect "$out" outcome SUCCESS

t0=$(date +%s%3N)
out=$(submit pl-sleep)
t1=$(date +%s%3N)
log "sleep 60 s with a 300 ms timeout: $out ($((t1 - t0)) ms)"
expect "$out" outcome TIMEOUT
expect "$out" error_class timeout
[ $((t1 - t0)) -lt 30000 ] || fail "the plugin timeout took $((t1 - t0)) ms"

out=$(submit pl-nap)
log "sleep 50 ms: $out"
expect "$out" outcome SUCCESS
echo "$out" | jq -r .output | grep -q "slept 50 ms" || fail "plugin output missing: $out"

out=$(submit pl-missing)
log "missing plugin: $out"
expect "$out" outcome FAILED
expect "$out" error_class plugin
echo "$out" | grep -q "cannot load plugin" || fail "load failure unclear: $out"

biz="invoice-$$-$RANDOM"
out=$(submit pl-idem --payload "$biz")
log "idem first: $out"
expect "$out" outcome SUCCESS
echo "$out" | jq -r .output | grep -qx "claimed $biz" || fail "first claim not new: $out"
first=$(jf "$out" id)
out=$(submit pl-idem --payload "$biz")
log "idem second: $out"
expect "$out" outcome SUCCESS
echo "$out" | jq -r .output | grep -q "already claimed" || fail "second claim not taken: $out"
owner=$(sql "SELECT instance_id FROM idempotency_claim WHERE scope = '${JOBP}pl-idem' AND key = '$biz'")
[ "$owner" = "$first" ] || fail "claim owner is '$owner', expected $first"
sql "DELETE FROM idempotency_claim WHERE scope LIKE '${JOBP}%'" >/dev/null

log "ok"
