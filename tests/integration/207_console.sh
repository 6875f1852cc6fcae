#!/usr/bin/env bash
# The web console in real headless Chromium against the real stack and
# ax-api (console_browser.py drives it with Selenium): a wrong token is
# refused; log in; a job created in the form and run reaches FINISHED on
# its instance page without a reload; a sleeping command cancelled on its
# page ends CANCELLED and its process is gone; a DLQ record (a malformed
# submission) is replayed; the overview names the standby trigger.
# Screenshots of every page (light, dark, phone
# width) are kept under $IT_ARTIFACTS/207_console and their paths printed.
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
for p in /usr/bin/chromium /usr/bin/chromedriver; do
    [ -x "$p" ] || fail "$p missing (infra installs chromium and chromium-driver)"
done
/usr/bin/python3 -c 'import selenium' 2>/dev/null || fail "python3-selenium missing (infra installs it)"

# The flow this test makes goes too (lib.sh's cleanup deletes the jobs);
# set +e so that handing cleanup the exit status does not end the trap.
trap 'rc=$?; set +e; sql "DELETE FROM flow WHERE name LIKE '"'${JOBP}%'"'" >/dev/null 2>&1; (exit $rc); cleanup' EXIT
create_topics 1
start_all
# a second trigger: the overview names it as the standby
start_svc trigger@standby
STANDBY=
standby_seen() { # exactly one trigger heard from that does not hold the lease, while one does
    STANDBY=$(sql "SELECT m.holder FROM trigger_member m WHERE m.role = '$(topic trigger)'
        AND m.heartbeat_at > now() - interval '5 seconds'
        AND EXISTS (SELECT 1 FROM ax_leader l WHERE l.role = m.role AND l.expires_at > now())
        AND NOT EXISTS (SELECT 1 FROM ax_leader l WHERE l.role = m.role AND l.holder = m.holder
                        AND l.expires_at > now())")
    [ -n "$STANDBY" ] && [ "$(wc -l <<<"$STANDBY")" = 1 ]; }

# An admin and a read token for this test only: ax-api keeps their SHA-256,
# the browser gets them from the environment (never a command line).
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
READ_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
BASE="http://127.0.0.1:$PORT"
AXCONF_API_TOKENS="console:admin:$(sha "$TOKEN"),viewer:read:$(sha "$READ_TOKEN")" start_svc api --set "api.listen=127.0.0.1:$PORT" \
    --set "api.console.dir=$ROOT/web/console"
wait_for 120 "ax-api ready" curl -sf "$BASE/readyz"
curl -sfL "$BASE/" | grep -q '<title>ax console</title>' || fail "/ does not serve the console"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer nope" "$BASE/api/v1/whoami")
[ "$code" = 401 ] || fail "a wrong token got $code, not 401"

# A dead letter to replay: a malformed submission (as 040_dlq does).
printf 'this is not avro' | kc -P -t "$(topic submit)"
wait_for 60 "a dead letter" bash -c "[ \$(kc -C -t $(topic dlq) -o beginning -e -q -f 'x\n' | wc -l) -ge 1 ]"

wait_for 30 "a standby trigger's heartbeat" standby_seen
OUT="$IT_ARTIFACTS/$T"
rm -rf "$OUT"; mkdir -p "$OUT"
SLEEP_S=$(( 3000 + RANDOM % 5000 ))
MARKER="console-$$-$RANDOM"
AX_CONSOLE_TOKEN=$TOKEN AX_CONSOLE_READ_TOKEN=$READ_TOKEN /usr/bin/python3 "$(dirname "$0")/console_browser.py" --base "$BASE" --out "$OUT" \
    --job-prefix "$JOBP" --sleep-seconds "$SLEEP_S" --marker "$MARKER" --profile "$WORK/chromium" --standby "$STANDBY" 2>&1 | tee "$WORK/browser.log" \
    || fail "the browser run failed (screenshots in $OUT)"

# What the browser saw is what PostgreSQL holds.
id_of() { awk -F= -v k="$1" '$1 == k { print $2 }' "$OUT/ids"; }
echo_id=$(id_of echo_instance) sleep_id=$(id_of sleep_instance)
[ -n "$echo_id" ] && [ -n "$sleep_id" ] || fail "the browser did not report its instances"
got=$(sql "SELECT state || '/' || outcome || '/' || job_name FROM job_instance WHERE id = $echo_id")
[ "$got" = "FINISHED/SUCCESS/$(id_of job)" ] || fail "instance $echo_id is $got"
sql "SELECT output FROM job_instance WHERE id = $echo_id" | grep -q "$MARKER" || fail "output lacks $MARKER"
retry_id=$(id_of retry_instance)
got=$(sql "SELECT state || '/' || outcome || '/' || job_name FROM job_instance WHERE id = $retry_id")
[ "$got" = "FINISHED/SUCCESS/$(id_of job)" ] || fail "the retry, instance $retry_id, is $got"
got=$(sql "SELECT state || '/' || outcome FROM job_instance WHERE id = $sleep_id")
[ "$got" = "FINISHED/CANCELLED" ] || fail "instance $sleep_id is $got, not FINISHED/CANCELLED"
# (the browser script saw the process run before the cancel and end after it)
wait_for 30 "the cancelled sleep's process gone" bash -c "! pgrep -f '^/bin/sleep $SLEEP_S\$'"
# The replayed record went back to the submit topic, where it is still not
# Avro: ax-trigger dead-letters it a second time.
[ "$(id_of replay_action)" = produced ] || fail "the DLQ replay answered '$(id_of replay_action)', not produced"
wait_for 60 "the replayed record dead-lettered again" \
    bash -c "[ \$(kc -C -t $(topic dlq) -o beginning -e -q -f 'x\n' | wc -l) -ge 2 ]"
n=$(ls "$OUT"/*.png | wc -l)
[ "$n" -ge 25 ] || fail "only $n screenshots"
log "ok: $n screenshots in $OUT"
