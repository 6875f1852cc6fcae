#!/usr/bin/env bash
# Least privilege (docs/SECURITY.md): a local user without the Kafka
# credentials cannot get a command run (no SASL, or a wrong password: the
# produce fails, nothing reaches the submit topic, no instance, no marker),
# while the very same message produced with the credentials runs; the
# executor refuses to start as root without executor.allow.root; with
# executor.run.user=nobody commands run as nobody; the services infra starts
# run as user ax (and so do their commands); infra's state is 0700, logs
# 0640, secrets 0600 and never printed.
source "$(dirname "$0")/lib.sh"
# This test starts its own executors with what they need, explicitly: not
# with the harness's blanket permission to run as root.
unset AXCONF_EXECUTOR_ALLOW_ROOT
AX_SRC=${AX_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
[ "$(id -u)" = 0 ] || fail "this test runs as root (it switches to nobody and ax)"
id -u nobody >/dev/null 2>&1 || fail "no user nobody"
NOBODY_UID=$(id -u nobody)
as_nobody() { (cd / && env -u KCAT_CONFIG -u KCAT_CONF -u PGPASSWORD runuser -u nobody -- "$@"); }
EXE=$AX_BIN/services/executor/ax-executor

# ---- the executor refuses root ---------------------------------------------
set +e
out=$(timeout 30 "$EXE" 2>&1); rc=$?
set -e
log "executor as root: exit $rc: $out"
[ "$rc" = 2 ] || fail "ax-executor as root without executor.allow.root exited $rc, not 2"
echo "$out" | grep -q "refusing to run as root" || fail "no refusal line: $out"
echo "$out" | grep -q "executor.allow.root" || fail "the refusal does not name executor.allow.root"
set +e
out=$(timeout 30 "$EXE" --set executor.allow.root=true --set executor.run.user=ax-no-such-user-180 2>&1); rc=$?
set -e
[ "$rc" = 2 ] && echo "$out" | grep -q "executor.run.user: unknown user 'ax-no-such-user-180'" \
    || fail "an unknown executor.run.user: exit $rc, $out"
set +e
out=$(cd / && timeout 30 runuser -u nobody -- "$EXE" --config /dev/null --set executor.run.user=root 2>&1); rc=$?
set -e
[ "$rc" = 2 ] && echo "$out" | grep -q "needs an executor running as root" \
    || fail "an unprivileged executor accepted executor.run.user=root: exit $rc, $out"

# ---- the configuration is not for everyone, and its secrets never print ---
! as_nobody cat "$AX_CONFIG" >/dev/null 2>&1 || fail "user nobody can read $AX_CONFIG"
kpw=$(conf_get kafka.sasl.password)
[ -n "$kpw" ] || fail "$AX_CONFIG has no kafka.sasl.password: the broker set-up has no SASL credentials"
axctl --print-config >"$WORK/printed" 2>&1 || fail "axctl --print-config failed"
grep -qx "kafka.sasl.password = <redacted>" "$WORK/printed" || fail "kafka.sasl.password not redacted"
! grep -qF "$kpw" "$WORK/printed" || fail "the Kafka password is printed by --print-config"

# ---- services: commands run as nobody ---------------------------------------
create_topics 1
mkdir "$WORK/drop"
chown nobody "$WORK/drop"
chmod 700 "$WORK/drop"
start_svc trigger
start_svc callback
start_svc executor --set executor.allow.root=true --set executor.run.user=nobody

# A genuine submission, made by axctl for a prefix nobody serves (so it does
# not run), then copied byte for byte: the attacker's message.
cap="${AXCONF_TOPIC_PREFIX}cap."
AXCONF_TOPIC_PREFIX=$cap axctl topics create --partitions 1 >/dev/null 2>&1 || fail "cannot create the capture topics"
trace=$(AXCONF_TOPIC_PREFIX=$cap axctl submit -- /usr/bin/touch "$WORK/drop/marker") || fail "capture submit failed"
kc -C -t "${cap}submit" -o beginning -c 1 -e -q -f '%s' >"$WORK/submit.bin"
[ -s "$WORK/submit.bin" ] || fail "no captured submission"
chmod 644 "$WORK/submit.bin"

# Without SASL, and with a wrong password: the produce fails. Over TLS
# (infra AX_TLS=1) both speak TLS, trusting the CA (a copy nobody can read).
tlsx=() proto=$(conf_get kafka.security.protocol)
if [ "$proto" = SASL_SSL ]; then
    install -m 644 "$(conf_get kafka.ssl.ca.location)" "$WORK/ca.pem"
    tlsx=(-X "ssl.ca.location=$WORK/ca.pem")
fi
set +e
as_nobody kcat -P -b "$BOOTSTRAP" -t "$(topic submit)" -k "$trace" "${tlsx[@]}" \
    ${tlsx[0]:+-X security.protocol=SSL} \
    -X message.timeout.ms=5000 "$WORK/submit.bin" >"$WORK/nosasl.out" 2>&1; rc1=$?
as_nobody kcat -P -b "$BOOTSTRAP" -t "$(topic submit)" -k "$trace" -X message.timeout.ms=5000 \
    -X security.protocol="$proto" "${tlsx[@]}" -X sasl.mechanisms="$(conf_get kafka.sasl.mechanisms)" \
    -X sasl.username="$(conf_get kafka.sasl.username)" -X sasl.password=not-the-password \
    "$WORK/submit.bin" >"$WORK/wrongpw.out" 2>&1; rc2=$?
rc3=1
if [ -n "${AX_KAFKA_CONTROLLER_PORT:-}" ]; then   # the controller listener: no way in either
    as_nobody kcat -P -b "127.0.0.1:$AX_KAFKA_CONTROLLER_PORT" -t "$(topic submit)" -k "$trace" \
        -X message.timeout.ms=5000 "$WORK/submit.bin" >"$WORK/ctrl.out" 2>&1; rc3=$?
fi
set -e
log "no SASL: exit $rc1: $(tail -n 1 "$WORK/nosasl.out")"
log "wrong password: exit $rc2: $(tail -n 1 "$WORK/wrongpw.out")"
[ "$rc1" != 0 ] || fail "user nobody produced to the submit topic without credentials"
[ "$rc2" != 0 ] || fail "user nobody produced to the submit topic with a wrong password"
[ "$rc3" != 0 ] || fail "user nobody produced through the controller listener"
grep -qi "authentication" "$WORK/wrongpw.out" || fail "wrong password not refused as an authentication failure"
sleep 5
[ ! -e "$WORK/drop/marker" ] || fail "the command of an unauthenticated submission ran"
[ "$(topic_count "$(topic submit)")" = 0 ] || fail "an unauthenticated message reached the submit topic"
[ -z "$(field "$trace" id)" ] || fail "an instance exists for the unauthenticated submission"

# The same bytes with the credentials run, as nobody.
kc -P -t "$(topic submit)" -k "$trace" "$WORK/submit.bin"
wait_for 60 "the marker of the authenticated submission" test -e "$WORK/drop/marker"
[ "$(stat -c %U "$WORK/drop/marker")" = nobody ] || fail "the command did not run as nobody"
wait_for 30 "instance $trace finished" finished "$trace"

out=$(axctl submit --wait --wait-timeout 60 -- id -u) || fail "id -u failed: $out"
trace2=$(echo "$out" | sed -n 's/.*"trace_id":"\([0-9a-f]*\)".*/\1/p')
got=$(field "$trace2" output | tr -d '\n')
[ "$got" = "$NOBODY_UID" ] || fail "id -u printed '$got', not nobody's uid $NOBODY_UID"
grep -q "commands run as uid $NOBODY_UID" "$WORK/ax-executor.log" || fail "the executor does not say as whom commands run"
log "commands run as nobody (uid $got)"
stop_svc executor
stop_svc trigger
stop_svc callback

# ---- infra: what infra/test started, and services started the infra way ---
if [ -z "${AX_STATE:-}" ] || [ ! -f "$AX_STATE/kafka/server.properties" ]; then
    log "SKIP infra checks: no AX_STATE of an infra set-up"
    exit 0
fi
mode() { stat -c %a "$1"; }
for d in "$AX_STATE" "$AX_STATE/log" "$AX_STATE/run" "$AX_STATE/kafka" "$AX_STATE/kafka/data" "$AX_STATE/pg"; do
    [ "$(mode "$d")" = 700 ] || fail "$d has mode $(mode "$d"), not 0700"
    [ "$(stat -c %U "$d")" = ax ] || fail "$d is owned by $(stat -c %U "$d"), not ax"
done
for f in "$AX_STATE"/log/*.log; do
    [ "$(mode "$f")" = 640 ] || fail "$f has mode $(mode "$f"), not 0640"
done
for f in "$AX_STATE/ax.conf" "$AX_STATE/pg.password" "$AX_STATE/kafka.password" "$AX_STATE/kafka/server.properties"; do
    [ "$(mode "$f")" = 600 ] || fail "$f has mode $(mode "$f"), not 0600"
done
if [ -d "$AX_STATE/tls" ]; then # AX_TLS=1: the throwaway CA's and the servers' keys
    [ "$(mode "$AX_STATE/tls")" = 700 ] && [ "$(stat -c %U "$AX_STATE/tls")" = ax ] \
        || fail "$AX_STATE/tls is not mode 0700, owner ax"
    for f in ca.key server.key server.keystore.pem; do
        [ "$(mode "$AX_STATE/tls/$f")" = 600 ] || fail "$AX_STATE/tls/$f has mode $(mode "$AX_STATE/tls/$f"), not 0600"
    done
    ! grep -rq "PRIVATE KEY" "$AX_STATE/log" || fail "a private key is in a log"
fi
[ -z "$(find "$AX_STATE/kafka/data" -perm /o=rwx | head -n 1)" ] || fail "Kafka data readable by others"
! grep -rqF "$kpw" "$AX_STATE/log" || fail "the Kafka password is in a log"
kpid=$(cat "$AX_STATE/run/kafka.pid")
[ "$(stat -c %U "/proc/$kpid")" = ax ] || fail "the Kafka broker runs as $(stat -c %U "/proc/$kpid"), not ax"
grep -q "super.users=User:ax" "$AX_STATE/kafka/server.properties" || fail "no super user ax"
! grep -q "PLAINTEXT://\|:PLAINTEXT" "$AX_STATE/kafka/server.properties" || fail "a listener without SASL"
log "infra/test's state: modes and owners as documented; Kafka runs as ax"

# The services as infra/up starts them (infra/lib.sh ax_service_start), in
# a state directory of their own, with this test's topic prefix.
ISTATE=$WORK/state
infra() { (export AX_STATE=$ISTATE AX_BUILD=$AX_BIN; source "$AX_SRC/infra/lib.sh"; "$@"); }
infra ax_state_init
install -m 600 -o ax -g ax "$AX_CONFIG" "$ISTATE/ax.conf"
api_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "api.listen = 127.0.0.1:$api_port" >>"$ISTATE/ax.conf"
infra ax_services_start
for svc in trigger executor callback api; do
    pid=$(cat "$ISTATE/run/ax-$svc.pid")
    SVC_PID[infra-$svc]=$pid   # killed by the cleanup if we fail
    ln -s "$ISTATE/log/ax-$svc.log" "$WORK/infra-$svc.log"
    [ "$(stat -c %U "/proc/$pid")" = ax ] || fail "ax-$svc started by infra runs as $(stat -c %U "/proc/$pid")"
    [ "$(mode "$ISTATE/log/ax-$svc.log")" = 640 ] || fail "ax-$svc.log has mode $(mode "$ISTATE/log/ax-$svc.log")"
done
[ "$(mode "$ISTATE")" = 700 ] && [ "$(mode "$ISTATE/log")" = 700 ] || fail "infra's state directory is not 0700"
out=$(axctl submit --wait --wait-timeout 60 -- id -u) || fail "id -u on the infra services failed: $out"
trace3=$(echo "$out" | sed -n 's/.*"trace_id":"\([0-9a-f]*\)".*/\1/p')
got=$(field "$trace3" output | tr -d '\n')
[ "$got" = "$(id -u ax)" ] || fail "a command of the infra-started executor ran as uid '$got', not ax ($(id -u ax))"
log "services started by infra run as ax, and so do their commands (uid $got)"
curl -sf "http://127.0.0.1:$api_port/healthz" >/dev/null || fail "ax-api started by infra does not answer"
infra ax_services_stop
for svc in trigger executor callback api; do unset "SVC_PID[infra-$svc]"; done
log "OK"
