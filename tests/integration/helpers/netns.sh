# Sourced by integration tests after lib.sh: test hosts of their own.
#
# netns_host NAME puts a "host" in a network namespace of its own, joined to
# this machine by a veth pair on the project's test addresses 10.231.X.0/30
# (X: a third octet no other interface uses, one /24 per test run; the host
# side .4k+1, the namespace .4k+2). The suite's servers listen on 127.0.0.1,
# which a namespace cannot reach, so two relays (helpers/relay.py) carry
# their ports across the pair: one in the namespace on its own 127.0.0.1
# (so services started there use AX_CONFIG unchanged, Kafka's advertised
# 127.0.0.1 listeners included) to the host side of the pair, one on the
# host side of the pair to the servers' 127.0.0.1. Every byte between a
# service in the namespace and PostgreSQL or Kafka crosses the veth pair,
# where nft rules inside the namespace cut it:
#   netns_cut NAME pg|kafka|all   drop (no reset) every packet to and from
#                                 those ports, as a partition does
#   netns_heal NAME               remove the cuts
#   netns_isolate NAME OTHER      drop everything between two test hosts
#   netns_reaches NAME IP PORT    a TCP connection from NAME opens
#   start_svc_in NAME SVC[@TAG] [--set k=v]...   start_svc inside NAME
# Namespaces, veth pairs and relays are removed at exit (IT_ON_EXIT).
# Needs root, iproute2 and nftables (infra installs them); elsewhere the
# test is skipped (exit 77, reported by ctest as skipped).

NETNS_HOSTS=()
declare -A NETNS_IP=() NETNS_HOSTIP=() NETNS_VETH=()
NETNS_PIDS=()
NETNS_OCTET=
NETNS_PG_PORTS=
NETNS_KAFKA_PORTS=

netns_require() {
    [ "$(id -u)" = 0 ] || it_skip "network namespaces need root (CI runs the suite as root)"
    command -v ip >/dev/null || it_skip "ip (iproute2) is not installed"
    command -v nft >/dev/null || it_skip "nft (nftables) is not installed"
    command -v python3 >/dev/null || it_skip "python3 is not installed"
    local probe="axp$$"
    ip netns add "$probe" 2>/dev/null || it_skip "ip netns add fails here (no CAP_SYS_ADMIN?)"
    ip netns exec "$probe" nft list tables >/dev/null 2>&1 ||
        { ip netns del "$probe"; it_skip "nft does not work inside a namespace here"; }
    ip netns del "$probe"
    # the ports to carry: PostgreSQL's, and every broker's as Kafka advertises it
    NETNS_PG_PORTS=$PGPORT
    NETNS_KAFKA_PORTS=$(kc -L 2>/dev/null | sed -n 's/.*broker [0-9]* at [^:]*:\([0-9]*\).*/\1/p' |
                        sort -u | tr '\n' ' ')
    [ -n "$NETNS_KAFKA_PORTS" ] || fail "no broker in the metadata of $BOOTSTRAP"
    for p in $NETNS_KAFKA_PORTS; do
        kc -L 2>/dev/null | grep -q "broker [0-9]* at 127.0.0.1:$p" ||
            fail "a broker is advertised elsewhere than 127.0.0.1 ($(kc -L | grep broker))"
    done
    IT_ON_EXIT+=(netns_cleanup)
}

# A free 10.231.X.0/24 (under a lock, so two runs do not pick the same one).
netns_octet() {
    local x
    for x in $(seq 1 254); do
        ip -4 -o addr show | grep -q " 10\.231\.$x\." || { echo "$x"; return 0; }
    done
    return 1
}

# netns_host NAME: the namespace, its veth pair and its relays.
netns_host() {
    local name=$1 k=${#NETNS_HOSTS[@]}
    local ns="ax$$${name}" veth="axh$$${k}"
    exec 9>/run/lock/ax-netns.lock
    flock 9
    [ -n "$NETNS_OCTET" ] || NETNS_OCTET=$(netns_octet) || fail "no free 10.231.X.0/24"
    local hip="10.231.$NETNS_OCTET.$((4 * k + 1))" nip="10.231.$NETNS_OCTET.$((4 * k + 2))"
    ip netns add "$ns"
    NETNS_HOSTS+=("$name")
    NETNS_VETH[$name]=$veth
    ip link add "$veth" type veth peer name "axn$$${k}"
    ip link set "axn$$${k}" netns "$ns"
    ip addr add "$hip/30" dev "$veth"
    ip link set "$veth" up
    flock -u 9
    exec 9>&-
    ip -n "$ns" addr add "$nip/30" dev "axn$$${k}"
    ip -n "$ns" link set "axn$$${k}" up
    ip -n "$ns" link set lo up
    # the other test hosts' pairs through this machine (it does not forward:
    # a test host reaches the host side of another's pair, not the other)
    ip -n "$ns" route add "10.231.$NETNS_OCTET.0/24" via "$hip"
    NETNS_IP[$name]=$nip
    NETNS_HOSTIP[$name]=$hip
    local p inner=() outer=()
    for p in $NETNS_PG_PORTS $NETNS_KAFKA_PORTS; do
        inner+=("127.0.0.1:$p=$hip:$p")
        outer+=("$hip:$p=127.0.0.1:$p")
    done
    netns_relay "" "$WORK/relay-$name-host.log" "${outer[@]}"
    netns_relay "$ns" "$WORK/relay-$name-ns.log" "${inner[@]}"
    local i why up=0
    for i in $(seq 1 30); do
        why=$(ip netns exec "$ns" pg_isready -h 127.0.0.1 -p "$PGPORT" -t 5 2>&1) && { up=1; break; }
        sleep 1
    done
    [ "$up" = 1 ] || fail "host $name cannot reach PostgreSQL through its veth pair: $why
relay on the host: $(cat "$WORK/relay-$name-host.log")
relay in the namespace: $(cat "$WORK/relay-$name-ns.log")"
    log "test host $name: namespace $ns, $nip <-> $hip (ports $NETNS_PG_PORTS $NETNS_KAFKA_PORTS)"
}

# netns_relay NS|"" LOG PAIR...: a relay, in NS or on the host; waits for "ready".
netns_relay() {
    local ns=$1 out=$2; shift 2
    if [ -n "$ns" ]; then
        ip netns exec "$ns" python3 "$AX_SRC/tests/integration/helpers/relay.py" "$@" >"$out" 2>&1 &
    else
        python3 "$AX_SRC/tests/integration/helpers/relay.py" "$@" >"$out" 2>&1 &
    fi
    NETNS_PIDS+=($!)
    local i
    for i in $(seq 1 50); do grep -q ready "$out" && return 0; sleep 0.1; done
    fail "relay did not start: $(cat "$out")"
}

netns_ns() { echo "ax$$$1"; }
netns_exec() { local ns; ns=$(netns_ns "$1"); shift; ip netns exec "$ns" "$@"; }

start_svc_in() { # start_svc_in HOST trigger|executor|callback[@TAG] [--set k=v ...]
    local host=$1 name=$2 bin=${2%%@*}; shift 2
    ip netns exec "$(netns_ns "$host")" "$AX_BIN/services/$bin/ax-$bin" "$@" \
        >>"$WORK/ax-$name.log" 2>&1 &
    SVC_PID[$name]=$!
    log "started ax-$name in host $host (pid ${SVC_PID[$name]})"
}

# The nft table of a host's cuts (created on first use).
netns_table() {
    netns_exec "$1" nft list table inet ax_cut >/dev/null 2>&1 && return 0
    netns_exec "$1" nft -f - <<EOF
table inet ax_cut {
    chain out { type filter hook output priority 0; policy accept; }
    chain in { type filter hook input priority 0; policy accept; }
}
EOF
}

# netns_cut HOST pg|kafka|all: drop that traffic on the host's veth pair.
netns_cut() {
    local host=$1 what=$2 ports
    case $what in
        pg) ports=$NETNS_PG_PORTS ;;
        kafka) ports=$NETNS_KAFKA_PORTS ;;
        all) ports="$NETNS_PG_PORTS $NETNS_KAFKA_PORTS" ;;
        *) fail "netns_cut: pg, kafka or all, not $what" ;;
    esac
    local set
    set=$(echo $ports | tr ' ' ',')
    netns_table "$host"
    local hip=${NETNS_HOSTIP[$host]}
    netns_exec "$host" nft add rule inet ax_cut out ip daddr "$hip" tcp dport "{ $set }" drop
    netns_exec "$host" nft add rule inet ax_cut in ip saddr "$hip" tcp sport "{ $set }" drop
    log "cut host $host from $what (ports $set dropped on its veth pair)"
}

# netns_isolate HOST OTHER: nothing between the two test hosts (either's
# address, either side of its pair), either way.
netns_isolate() {
    local a=$1 b=$2 x y
    for x in "$a" "$b"; do
        y=$([ "$x" = "$a" ] && echo "$b" || echo "$a")
        netns_table "$x"
        netns_exec "$x" nft add rule inet ax_cut out ip daddr "{ ${NETNS_IP[$y]}, ${NETNS_HOSTIP[$y]} }" drop
        netns_exec "$x" nft add rule inet ax_cut in ip saddr "{ ${NETNS_IP[$y]}, ${NETNS_HOSTIP[$y]} }" drop
    done
    log "partitioned hosts $a and $b from each other"
}

# netns_reaches HOST IP PORT: a TCP connection from HOST opens within 2 s.
netns_reaches() { netns_exec "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null; }

netns_heal() {
    netns_exec "$1" nft delete table inet ax_cut 2>/dev/null || true
    log "healed host $1"
}

netns_cleanup() {
    local p h
    for p in "${NETNS_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${NETNS_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    for h in "${NETNS_HOSTS[@]}"; do
        ip netns del "$(netns_ns "$h")" 2>/dev/null || true # takes its veth pair with it
        ip link del "${NETNS_VETH[$h]}" 2>/dev/null || true
    done
}
