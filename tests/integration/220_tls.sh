#!/usr/bin/env bash
# Over TLS (infra/test's TLS pass, AX_TLS=1; skipped otherwise, exit 77):
# the configuration names TLS for Kafka (SASL_SSL, the throwaway CA) and
# PostgreSQL (sslmode=verify-full); every broker address in it answers a
# verified TLS handshake, refuses SASL over plaintext, and fails
# verification against a CA that is not the throwaway one; PostgreSQL
# refuses a plaintext connection and one that trusts another CA; a job runs
# end to end through the three services, and then every TCP session of the
# database is TLS (pg_stat_ssl) -- the services' among them -- and the
# services' connections to Kafka go only to the TLS ports.
source "$(dirname "$0")/lib.sh"
if [ "${AX_TLS:-0}" != 1 ]; then
    log "skipped: not a TLS run (infra/test runs it in its TLS pass, AX_TLS=1)"
    exit 77
fi
command -v openssl >/dev/null || fail "openssl is needed"

# ---- the configuration names TLS (lib.sh checked protocol and sslmode)
ca=$(conf_get kafka.ssl.ca.location)
[ -n "$ca" ] && [ -s "$ca" ] || fail "kafka.ssl.ca.location '$ca' is not a readable CA file"
[ "$(conf_get pg.sslrootcert)" = "$ca" ] || fail "pg.sslrootcert is not the throwaway CA ($ca)"
# A CA bundle that does not hold the throwaway CA: the system's, or none.
other_ca=/etc/ssl/certs/ca-certificates.crt
[ -s "$other_ca" ] || { other_ca=$WORK/empty-ca.pem; : >"$other_ca"; }

# ---- Kafka: every bootstrap address speaks TLS, and only TLS
IFS=, read -ra brokers <<<"$BOOTSTRAP"
[ "${#brokers[@]}" -ge 1 ] || fail "no kafka.bootstrap.servers"
for b in "${brokers[@]}"; do
    host=${b%:*} port=${b##*:}
    [ "$port" != "${AX_KAFKA_CONTROLLER_PORT:-}" ] || fail "$b is the controller's (plaintext) port"
    openssl s_client -connect "$b" -CAfile "$ca" -verify_return_error -verify_ip "$host" \
        </dev/null >"$WORK/s_client.out" 2>&1 || { cat "$WORK/s_client.out"; fail "no verified TLS handshake with the broker at $b"; }
    grep -q 'Verify return code: 0 (ok)' "$WORK/s_client.out" || { cat "$WORK/s_client.out"; fail "$b: certificate not verified"; }
    if kc -X "bootstrap.servers=$b" -X security.protocol=SASL_PLAINTEXT -X socket.timeout.ms=5000 \
           -L -m 5 >"$WORK/plain.out" 2>&1; then
        cat "$WORK/plain.out"; fail "the broker at $b answered SASL over plaintext"
    fi
    if kc -X "bootstrap.servers=$b" -X "ssl.ca.location=$other_ca" -L -m 5 >"$WORK/other.out" 2>&1; then
        cat "$WORK/other.out"; fail "a client trusting another CA reached the broker at $b (no verification)"
    fi
    kc -X "bootstrap.servers=$b" -L -m 10 >"$WORK/md.out" 2>&1 || { cat "$WORK/md.out"; fail "no metadata over SASL_SSL from $b"; }
done
log "Kafka: ${#brokers[@]} broker address(es) speak verified TLS only"

# ---- PostgreSQL: TLS only, verified
if PGSSLMODE=disable psql -X -q -t -A -c 'SELECT 1' >"$WORK/pgplain.out" 2>&1; then
    fail "PostgreSQL accepted a plaintext connection"
fi
grep -q 'no encryption\|pg_hba.conf rejects' "$WORK/pgplain.out" \
    || { cat "$WORK/pgplain.out"; fail "the plaintext connection failed for another reason than the server refusing it"; }
if PGSSLROOTCERT=$other_ca psql -X -q -t -A -c 'SELECT 1' >"$WORK/pgother.out" 2>&1; then
    fail "psql verified PostgreSQL's certificate against another CA (no verification)"
fi
[ "$(sql "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")" = t ] || fail "the test's own session is not TLS"

# ---- a job end to end through the three services
create_topics 3
start_all
out=$(axctl submit --wait --wait-timeout 60 -- echo over tls) || fail "submit over TLS did not succeed: $out"
trace=$(echo "$out" | sed -n 's/.*"trace_id":"\([0-9a-f]*\)".*/\1/p')
[ -n "$trace" ] || fail "no trace id in $out"
[ "$(field "$trace" outcome)" = SUCCESS ] || fail "outcome is not SUCCESS: $out"
id=$(field "$trace" id)
wait_for 30 "result event for instance $id" \
    bash -c "kc -C -t $(topic results) -o beginning -e -q -f '%k\n' | grep -qx $id"
wait_for 30 "the instance's result marked published" finished "$trace"

# Every service holds a session, and every TCP session of the server is TLS.
for s in trigger executor callback; do
    n=$(sql "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.datname = current_database() AND a.application_name = 'ax-$s' AND s.ssl")
    [ "$n" -ge 1 ] || fail "ax-$s has no TLS session to PostgreSQL: $(sql "SELECT application_name, ssl FROM pg_stat_activity JOIN pg_stat_ssl USING (pid)")"
done
plain=$(sql "SELECT string_agg(coalesce(a.application_name, '') || '@' || host(a.client_addr), ', ')
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.backend_type = 'client backend' AND a.client_addr IS NOT NULL AND NOT s.ssl")
[ -z "$plain" ] || fail "TCP sessions without TLS: $plain"
# The services' Kafka connections go to the broker addresses above only
# (each shown to speak TLS only); at least one each.
for s in trigger executor callback; do
    pid=${SVC_PID[$s]}
    conns=$(ss -Htnp state established 2>/dev/null | awk -v p="pid=$pid," 'index($0, p) { print $4 }')
    kafka_conns=0
    for peer in $conns; do
        for b in "${brokers[@]}"; do
            [ "$peer" = "$b" ] && kafka_conns=$((kafka_conns + 1))
        done
        pgport=$(conf_get pg.port)
        case $peer in
            *:"$pgport") ;;
            *) printf '%s\n' "${brokers[@]}" | grep -qx "$peer" || fail "ax-$s is connected to $peer, neither a TLS broker nor PostgreSQL" ;;
        esac
    done
    [ "$kafka_conns" -ge 1 ] || fail "ax-$s has no connection to a broker: $conns"
done
log "ok: PostgreSQL and Kafka sessions of the services are TLS; job $trace ran end to end"
