# shellcheck shell=bash
# infra/lib.sh -- shared functions of infra/up, infra/down and infra/test.
#
# Source it from bash running with `set -euo pipefail`:
#
#     source "$(dirname "$0")/lib.sh"
#
# Every setting below has a default and can be overridden from the environment
# (set it before sourcing).  Functions report with an "infra:" prefix and fail
# with a message (and the tail of the relevant log) instead of hanging: every
# wait has a timeout.
#
# Settings
#   AX_ROOT                   repository root (default: parent of this file)
#   AX_STATE                  state directory (default: $AX_ROOT/var)
#   AX_BUILD                  CMake build directory (default: $AX_ROOT/build)
#   AX_CACHE                  download cache (default: $AX_ROOT/.cache)
#   AX_KAFKA_PORT             Kafka client listener (default: 19092)
#   AX_KAFKA_CONTROLLER_PORT  KRaft controller listener (default: 19093)
#   AX_KAFKA_BROKERS          Kafka nodes (broker+controller each; default 1, 3 for
#                             a replicated cluster); node i listens on
#                             AX_KAFKA_PORT + 10*(i-1) and AX_KAFKA_CONTROLLER_PORT
#                             + 10*(i-1); changing it needs a fresh $AX_STATE/kafka*
#   AX_KAFKA_JMX_PORT         broker JMX on 127.0.0.1 for benchmarks (default: off)
#   AX_PG_PORT                PostgreSQL TCP port (default: 15432)
#   AX_PG_SHARED_BUFFERS      PostgreSQL shared_buffers (default: a quarter of the
#                             machine's or the cgroup's memory, 128MB to 4GB;
#                             docs/DEPLOYMENT.md)
#   AX_PARTITIONS             partitions per dispatch lane (default: 6; submit,
#                             callback, results and dlq get at most 2: axctl
#                             topics create --service-partitions)
#   AX_KAFKA_VERSIONS         Kafka versions to try, preferred first
#   AX_JAVA                   java binary for the broker (default: Java 17)
#   AX_TLS                    1: Kafka SASL_SSL and PostgreSQL hostssl only, ax.conf
#                             with sslmode=verify-full (default 0; "TLS" below)
#   AX_TLS_DIR                the throwaway CA and certificate (default: $AX_STATE/tls)
#   AX_TLS_DAYS               validity of the server certificate (default: 365)
#
# Privileges (docs/SECURITY.md)
#   Every server and service runs as the unprivileged system user ax (created
#   if missing), never as root.  The Kafka client listener requires
#   SASL/SCRAM-SHA-512 (user ax, random password); the controller listener
#   requires SASL/PLAIN with a password regenerated on every start; both are
#   on 127.0.0.1 only.  State and data directories are 0700, logs 0640,
#   files holding a password 0600; passwords are never printed.
#
# State layout ($AX_STATE, mode 0700, owner ax)
#   ax.conf          configuration read by every ax program (ax:ax, mode 0600)
#   pg.password      PostgreSQL password of user ax (root, mode 0600, never printed)
#   kafka.password   Kafka SCRAM password of user ax (root, mode 0600, never printed)
#   kafka.client.conf  librdkafka/kcat properties with those credentials (root, 0600)
#   pg/              PostgreSQL 15 cluster, owned by system user ax
#   kafka/           server.properties (0600), log4j.properties, data/ (KRaft logs);
#                    owned by ax, mode 0700 (node 1; node i of AX_KAFKA_BROKERS
#                    in kafka-<i>/, its pid in run/kafka-<i>.pid, log kafka-<i>.log)
#   kafka.cluster.id the KRaft cluster id all nodes are formatted with
#   kafka.controller.password  with several nodes: their controllers' password
#                    (root, mode 0600, never printed)
#   log/             postgres.log, kafka.log, ax-<service>.log (0640, owner ax)
#   run/             kafka.pid, ax-<service>.pid, pg/ (unix socket)
#   tls/             with AX_TLS=1: the throwaway CA and server certificate ("TLS" below)

if [[ -n ${AX_LIB_SOURCED:-} ]]; then
  return 0
fi
AX_LIB_SOURCED=1

AX_ROOT=${AX_ROOT:-$(cd -P "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
AX_STATE=${AX_STATE:-$AX_ROOT/var}
AX_BUILD=${AX_BUILD:-$AX_ROOT/build}
AX_CACHE=${AX_CACHE:-$AX_ROOT/.cache}
AX_KAFKA_PORT=${AX_KAFKA_PORT:-19092}
AX_KAFKA_CONTROLLER_PORT=${AX_KAFKA_CONTROLLER_PORT:-19093}
AX_PG_PORT=${AX_PG_PORT:-15432}
AX_API_PORT=${AX_API_PORT:-8480}
AX_PARTITIONS=${AX_PARTITIONS:-6}
AX_KAFKA_VERSIONS=${AX_KAFKA_VERSIONS:-3.9.2 3.9.1 3.9.0}
AX_PG_BIN=${AX_PG_BIN:-/usr/lib/postgresql/15/bin}
# The broker's log cleaner (compacting __consumer_offsets and
# __transaction_state, ax's only compacted topics) keeps a dedupe buffer of
# this many bytes on its Java heap for good. Kafka's default, 128 MiB, was
# a quarter of the 512 MiB heap (ax_kafka_java_opts): the old generation
# stayed at G1's marking threshold, 12 concurrent cycles in six benchmark
# runs against none with 16 MiB (BENCHMARKS.md, "Issue #13: the
# twenty-seventh session"). 16 MiB holds ~630,000 distinct keys per
# cleaning pass: ax's consumer groups' offsets and transactional ids.
AX_KAFKA_DEDUPE_BYTES=${AX_KAFKA_DEDUPE_BYTES:-16777216}

# Fixed names.
AX_PG_USER=ax        # system user running PostgreSQL, also the database role
AX_USER=ax           # system user running Kafka and the ax services
AX_KAFKA_USER=ax     # Kafka SASL user (a super user of the broker)
AX_KAFKA_MECHANISM=SCRAM-SHA-512
AX_PG_DB=ax
AX_SERVICES=(trigger executor callback api)
AX_APT_PACKAGES=(build-essential cmake pkg-config librdkafka-dev libpq-dev
                 libavro-dev libevent-dev libjansson-dev libcmocka-dev
                 postgresql-15 postgresql-client-15 openjdk-17-jre-headless
                 maven kcat procps iproute2 nftables tzdata libfaketime
                 prometheus jq curl libssl-dev openssl python3 python3-jsonschema
                 systemd)   # systemd-analyze verify of infra/systemd (tests/deploy)
# The web console's browser test (tests/integration/207_console.sh) and the
# console's charts (ax-api serves /usr/share/javascript at /javascript/).
AX_APT_PACKAGES+=(chromium chromium-driver python3-selenium libjs-chart.js)

# Set by ax_kafka_fetch.
AX_KAFKA_VERSION=${AX_KAFKA_VERSION:-}
AX_KAFKA_LIBS=${AX_KAFKA_LIBS:-}

# ---------------------------------------------------------------- messages

ax_log()  { printf 'infra: %s\n' "$*"; }
ax_warn() { printf 'infra: warning: %s\n' "$*" >&2; }
ax_die()  { printf 'infra: error: %s\n' "$*" >&2; exit 1; }

# ax_tail_log FILE [LINES] -- show the end of a log on stderr.
ax_tail_log() {
  local file=$1 n=${2:-40}
  if [[ -s $file ]]; then
    printf 'infra: ---- last %s lines of %s ----\n' "$n" "$file" >&2
    tail -n "$n" "$file" >&2 || true
    printf 'infra: ---- end of %s ----\n' "$file" >&2
  else
    printf 'infra: (%s is empty or missing)\n' "$file" >&2
  fi
}

# ax_now_ms -- milliseconds since the epoch.
ax_now_ms() { local t; t=$(date +%s%N); echo $((t / 1000000)); }

# ax_timed LABEL CMD... -- run CMD in this shell, print and record its duration.
AX_TIMINGS=()
ax_timed() {
  local label=$1 t0 t1 ms
  shift
  t0=$(ax_now_ms)
  "$@"
  t1=$(ax_now_ms)
  ms=$((t1 - t0))
  AX_TIMINGS+=("$(printf '%-12s %4d.%01ds' "$label" $((ms / 1000)) $((ms % 1000 / 100)))")
  ax_log "$label: done in $((ms / 1000)).$((ms % 1000 / 100))s"
}

ax_print_timings() {
  local t
  ((${#AX_TIMINGS[@]})) || return 0
  ax_log "timings:"
  for t in "${AX_TIMINGS[@]}"; do ax_log "  $t"; done
}

# ---------------------------------------------------------------- state

# ax_state_init -- create $AX_STATE/{log,run} (mode 0700; owned by ax once
# that user exists, see ax_state_secure).
ax_state_init() {
  (umask 077 && mkdir -p "$AX_STATE/log" "$AX_STATE/run")
  if ((EUID == 0)) && id -u "$AX_USER" >/dev/null 2>&1; then
    ax_state_secure
  fi
}

# ax_state_secure -- $AX_STATE, log/ and run/: owner ax, mode 0700, so that
# no other local user can read logs, pid files or configuration.
ax_state_secure() {
  local d
  for d in "$AX_STATE" "$AX_STATE/log" "$AX_STATE/run"; do
    [[ -d $d ]] || continue
    chown "$AX_USER:$AX_USER" "$d"
    chmod 700 "$d"
  done
}

# ax_log_file FILE -- create FILE if missing; owner ax, mode 0640.
ax_log_file() {
  [[ -e $1 ]] || (umask 027 && : >>"$1")
  chown "$AX_USER:$AX_USER" "$1"
  chmod 640 "$1"
}

# ax_as_ax_argv -- print, one per line, the command prefix that runs a
# command as user ax (setpriv execs without forking, so a pid recorded right
# before it is the pid of the command).
ax_as_ax_argv() {
  printf '%s\n' setpriv "--reuid=$AX_USER" "--regid=$AX_USER" --init-groups --
}

# ax_secret_new FILE -- a random password in FILE (root, mode 0600) unless
# FILE exists; never printed.
ax_secret_new() {
  local f=$1 pw
  if [[ ! -s $f ]]; then
    pw=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
    (umask 077 && printf '%s\n' "$pw" >"$f.tmp" && mv -f "$f.tmp" "$f")
    pw=
  fi
  chmod 600 "$f"
}

# ax_secret_read FILE -- print the secret in FILE (for command substitution only).
ax_secret_read() {
  [[ -s $1 ]] || ax_die "$1 is missing"
  local pw
  read -r pw <"$1"
  printf '%s' "$pw"
}

# ---------------------------------------------------------------- processes

# ax_pid_read PIDFILE -- print the pid stored in PIDFILE (nothing if none).
ax_pid_read() {
  local pid=
  [[ -s $1 ]] && read -r pid <"$1" || true
  [[ $pid =~ ^[0-9]+$ ]] && echo "$pid"
  return 0
}

# ax_pid_alive PIDFILE [PATTERN] -- true if the process in PIDFILE runs (not a
# zombie) and, when PATTERN is given, its command line contains PATTERN.
ax_pid_alive() {
  local pid cmd state
  pid=$(ax_pid_read "$1")
  [[ -n $pid ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
  [[ -n $state && $state != Z ]] || return 1
  if [[ -n ${2:-} ]]; then
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
    [[ $cmd == *"$2"* ]] || return 1
  fi
  return 0
}

# ax_spawn PIDFILE LOG DIR CMD... -- run CMD detached (own session, stdin from
# /dev/null, stdout+stderr appended to LOG, working directory DIR) and store
# its pid in PIDFILE.  The pid is written by the process itself right before
# it execs CMD, so it is the pid of CMD.
ax_spawn() {
  local pidfile=$1 log=$2 dir=$3 i
  shift 3
  rm -f "$pidfile"
  (
    cd "$dir" || exit 1
    umask 027   # logs 0640, data files never readable by others
    # shellcheck disable=SC2016  # $$ and $@ are for the inner bash
    exec setsid bash -c 'echo $$ >"$0.tmp" && mv -f "$0.tmp" "$0" && exec "$@"' "$pidfile" "$@"
  ) </dev/null >>"$log" 2>&1 &
  for ((i = 0; i < 100; i++)); do
    [[ -s $pidfile ]] && return 0
    sleep 0.05
  done
  ax_tail_log "$log"
  ax_die "could not start $1 (no pid file after 5 s)"
}

# ax_stop_pidfile NAME PIDFILE TIMEOUT [PATTERN] -- SIGTERM the process, wait up
# to TIMEOUT seconds, then SIGKILL it (and its process group, if it leads
# one).  No-op when it does not run.
ax_stop_pidfile() {
  local name=$1 pidfile=$2 timeout=$3 pat=${4:-} pid i pgid
  if ! ax_pid_alive "$pidfile" "$pat"; then
    rm -f "$pidfile"
    return 0
  fi
  pid=$(ax_pid_read "$pidfile")
  ax_log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < timeout * 10; i++)); do
    ax_pid_alive "$pidfile" "$pat" || { rm -f "$pidfile"; return 0; }
    sleep 0.1
  done
  ax_warn "$name (pid $pid) did not stop within ${timeout}s; sending SIGKILL"
  pgid=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ' || true)
  if [[ $pgid == "$pid" ]]; then
    kill -KILL -- "-$pid" 2>/dev/null || true
  else
    kill -KILL "$pid" 2>/dev/null || true
  fi
  for ((i = 0; i < 50; i++)); do
    ax_pid_alive "$pidfile" "$pat" || break
    sleep 0.1
  done
  rm -f "$pidfile"
}

# ax_port_busy PORT -- true if something listens on TCP PORT.
ax_port_busy() {
  [[ -n $(ss -Hltn "( sport = :$1 )" 2>/dev/null) ]]
}

# ax_wait_until TIMEOUT WHAT LOG PIDFILE|'' CMD... -- poll CMD until it
# succeeds.  Fails (tail of LOG) after TIMEOUT seconds, or as soon as the
# process in PIDFILE has died.
ax_wait_until() {
  local timeout=$1 what=$2 log=$3 pidfile=$4 deadline
  shift 4
  deadline=$(($(ax_now_ms) + timeout * 1000))
  while :; do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    if [[ -n $pidfile ]] && ! ax_pid_alive "$pidfile"; then
      ax_tail_log "$log"
      ax_die "$what: the process exited (see $log)"
    fi
    if (($(ax_now_ms) >= deadline)); then
      ax_tail_log "$log"
      ax_die "$what: timed out after ${timeout}s (see $log)"
    fi
    sleep 0.5
  done
}

# ---------------------------------------------------------------- packages

# ax_install_deps -- apt-get install whatever of AX_APT_PACKAGES is missing.
ax_install_deps() {
  local -A have=()
  local missing=() pkg status
  while read -r pkg status; do
    [[ $status == installed ]] && have[$pkg]=1
  done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${AX_APT_PACKAGES[@]}" 2>/dev/null || true)
  for pkg in "${AX_APT_PACKAGES[@]}"; do
    [[ -n ${have[$pkg]:-} ]] || missing+=("$pkg")
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  ((EUID == 0)) || ax_die "missing packages (${missing[*]}); run as root or install them"
  ax_log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # Debian's prometheus starts a system-wide server on :9090 where systemd
  # runs; the metrics test (tests/integration/195_prometheus.sh) starts its
  # own on loopback, so the packaged one is not left running.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null &&
     systemctl is-active -q prometheus 2>/dev/null; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
}

# ---------------------------------------------------------------- build

# ax_build [CMAKE-ARGS...] -- configure and build $AX_BUILD.
ax_build() {
  cmake -S "$AX_ROOT" -B "$AX_BUILD" "$@"
  cmake --build "$AX_BUILD" -j2
}

# ---------------------------------------------------------------- java / Kafka

# ax_java -- print the java binary used for Kafka (Java 17 preferred).
ax_java() {
  local j
  for j in "${AX_JAVA:-}" /usr/lib/jvm/java-17-openjdk-*/bin/java; do
    if [[ -n $j && -x $j ]]; then
      echo "$j"
      return 0
    fi
  done
  j=$(command -v java) || ax_die "no java found (install openjdk-17-jre-headless)"
  ax_warn "Java 17 not found under /usr/lib/jvm; using $j"
  echo "$j"
}

# ax_kafka_libs_ok DIR VERSION -- the jars needed by the broker and the
# storage tool are in DIR.
ax_kafka_libs_ok() {
  local dir=$1 v=$2 g
  for g in "kafka_2.13-$v.jar" "kafka-clients-$v.jar" "kafka-raft-$v.jar" \
           "kafka-metadata-$v.jar" "kafka-server-common-$v.jar" \
           "kafka-storage-$v.jar" 'scala-library-*.jar' 'argparse4j-*.jar' \
           'slf4j-api-*.jar' 'slf4j-reload4j-*.jar' 'reload4j-*.jar'; do
    compgen -G "$dir/$g" >/dev/null || return 1
  done
}

# ax_kafka_cache_ok VERSION -- the cache of VERSION is complete (marker written
# after a successful fetch, and the jar count still matches).
ax_kafka_cache_ok() {
  local v=$1 base=$AX_CACHE/kafka-$1 want n
  [[ -f $base/.complete ]] || return 1
  want=$(sed -n 's/^jars=//p' "$base/.complete")
  n=$(compgen -G "$base/libs/*.jar" | wc -l)
  [[ -n $want && $n -eq $want ]] || return 1
  ax_kafka_libs_ok "$base/libs" "$v"
}

# ax_kafka_fetch -- make sure the jars of a Kafka 3.9.x broker are in
# $AX_CACHE/kafka-<version>/libs; sets AX_KAFKA_VERSION and AX_KAFKA_LIBS.
# A complete cache is used without running Maven.
ax_kafka_fetch() {
  local v base tmp mlog lockfd n
  mkdir -p "$AX_CACHE"
  for v in $AX_KAFKA_VERSIONS; do
    if ax_kafka_cache_ok "$v"; then
      AX_KAFKA_VERSION=$v AX_KAFKA_LIBS=$AX_CACHE/kafka-$v/libs
      return 0
    fi
  done
  # Serialize concurrent fetches (infra/up and infra/test share the cache).
  exec {lockfd}>"$AX_CACHE/kafka.lock"
  flock -w 900 "$lockfd" || ax_die "timed out waiting for $AX_CACHE/kafka.lock"
  for v in $AX_KAFKA_VERSIONS; do
    base=$AX_CACHE/kafka-$v
    if ax_kafka_cache_ok "$v"; then   # fetched by someone else meanwhile
      AX_KAFKA_VERSION=$v AX_KAFKA_LIBS=$base/libs
      exec {lockfd}>&-
      return 0
    fi
    ax_log "fetching Kafka $v and its runtime dependencies with Maven (first run only)"
    tmp=$base.tmp.$$
    mlog=$AX_CACHE/kafka-$v.mvn.log
    rm -rf "$tmp"
    if (cd "$AX_CACHE" && JAVA_HOME=$(dirname "$(dirname "$(readlink -f "$(ax_java)")")") \
          timeout 900 mvn -B -q -f "$AX_ROOT/infra/kafka/pom.xml" \
            -Dkafka.version="$v" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$tmp/libs") >"$mlog" 2>&1 \
       && ax_kafka_libs_ok "$tmp/libs" "$v"; then
      n=$(compgen -G "$tmp/libs/*.jar" | wc -l)
      rm -rf "$base"
      mv "$tmp" "$base"
      printf 'version=%s\njars=%s\nfetched=%s\n' "$v" "$n" "$(date -u +%FT%TZ)" >"$base/.complete"
      rm -f "$mlog"
      AX_KAFKA_VERSION=$v AX_KAFKA_LIBS=$base/libs
      ax_log "Kafka $v: $n jars, $(du -sh "$base/libs" | cut -f1) in $base/libs"
      exec {lockfd}>&-
      return 0
    fi
    rm -rf "$tmp"
    ax_warn "could not fetch Kafka $v (Maven log: $mlog)"
    tail -n 15 "$mlog" >&2 || true
  done
  exec {lockfd}>&-
  ax_die "no Kafka version of [$AX_KAFKA_VERSIONS] could be fetched from Maven Central"
}

# ---- the nodes of the cluster (AX_KAFKA_BROKERS, default 1)
#
# Node i (1..AX_KAFKA_BROKERS) is a combined broker+controller (KRaft; every
# node a voter): client listener AX_KAFKA_PORT + 10*(i-1), controller
# listener AX_KAFKA_CONTROLLER_PORT + 10*(i-1), state in $AX_STATE/kafka
# (node 1, as with one broker) or $AX_STATE/kafka-<i>, pid in
# run/kafka.pid or run/kafka-<i>.pid, log in log/kafka.log or
# log/kafka-<i>.log.  The nodes share one cluster id
# ($AX_STATE/kafka.cluster.id) and, with more than one node, one controller
# password ($AX_STATE/kafka.controller.password, root, 0600: the controllers
# talk to each other, so it survives a node's restart).

ax_kafka_n() {
  local n=${AX_KAFKA_BROKERS:-1}
  [[ $n =~ ^[1-9]$ ]] || ax_die "AX_KAFKA_BROKERS must be 1..9, not '$n'"
  echo "$n"
}
ax_kafka_node_port()  { echo $((AX_KAFKA_PORT + 10 * ($1 - 1))); }
ax_kafka_node_cport() { echo $((AX_KAFKA_CONTROLLER_PORT + 10 * ($1 - 1))); }
ax_kafka_node_dir()   { if (($1 == 1)); then echo "$AX_STATE/kafka"; else echo "$AX_STATE/kafka-$1"; fi; }
ax_kafka_node_sfx()   { if (($1 == 1)); then echo ""; else echo "-$1"; fi; }
ax_kafka_node_pidfile() { echo "$AX_STATE/run/kafka$(ax_kafka_node_sfx "$1").pid"; }
ax_kafka_node_log()   { echo "$AX_STATE/log/kafka$(ax_kafka_node_sfx "$1").log"; }

# ax_kafka_bootstrap -- every node's client address, comma-separated.
ax_kafka_bootstrap() {
  local i n out=
  n=$(ax_kafka_n)
  for ((i = 1; i <= n; i++)); do out+=${out:+,}127.0.0.1:$(ax_kafka_node_port "$i"); done
  echo "$out"
}

# ax_kafka_voters -- controller.quorum.voters of the cluster.
ax_kafka_voters() {
  local i n out=
  n=$(ax_kafka_n)
  for ((i = 1; i <= n; i++)); do out+=${out:+,}$i@127.0.0.1:$(ax_kafka_node_cport "$i"); done
  echo "$out"
}

# ax_kafka_configure [NODE] -- (re)write server.properties and
# log4j.properties of NODE (default 1) from the current settings.  The
# client listener requires SASL/SCRAM (user ax, password in
# $AX_STATE/kafka.password); the inter-broker traffic uses it too.  The
# controller listener requires SASL/PLAIN: with one node its password is
# regenerated here on every start (only this node talks to it), with more
# it is the cluster's ($AX_STATE/kafka.controller.password).  Replication
# factors of the internal topics are min(3, nodes); with 3 nodes or more
# min.insync.replicas is 2.  The StandardAuthorizer denies everything to
# any principal but the super user ax.  server.properties holds both
# passwords: owner ax, mode 0600.
ax_kafka_configure() {
  local node=${1:-1} kdir pw cpw tmp mech_lc n rf isr port cport
  n=$(ax_kafka_n)
  kdir=$(ax_kafka_node_dir "$node")
  port=$(ax_kafka_node_port "$node")
  cport=$(ax_kafka_node_cport "$node")
  rf=$((n < 3 ? n : 3))
  isr=$((n >= 3 ? 2 : 1))
  (umask 077 && mkdir -p "$kdir/data")
  ax_tls_ensure
  if [[ -f $kdir/data/.ax-scram && ! -s $AX_STATE/kafka.password ]]; then
    ax_die "$AX_STATE/kafka.password is missing but $kdir/data holds its SCRAM credential; restore it, or stop Kafka and remove $kdir to re-initialize"
  fi
  ax_secret_new "$AX_STATE/kafka.password"
  pw=$(ax_secret_read "$AX_STATE/kafka.password")
  if ((n > 1)); then
    ax_secret_new "$AX_STATE/kafka.controller.password"
    cpw=$(ax_secret_read "$AX_STATE/kafka.controller.password")
  else
    cpw=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
  fi
  mech_lc=$(tr 'A-Z' 'a-z' <<<"$AX_KAFKA_MECHANISM")
  tmp=$kdir/server.properties.tmp.$$
  (
    umask 077
    cat >"$tmp" <<EOF
# written by infra (lib.sh ax_kafka_configure); regenerated on every start
# (holds passwords: owner $AX_USER, mode 0600)
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$(ax_kafka_voters)
listeners=CLIENT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=CLIENT://127.0.0.1:$port
inter.broker.listener.name=CLIENT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CLIENT:$(ax_kafka_client_protocol),CONTROLLER:SASL_PLAINTEXT
listener.name.client.sasl.enabled.mechanisms=$AX_KAFKA_MECHANISM
listener.name.client.$mech_lc.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$AX_KAFKA_USER" password="$pw";
sasl.mechanism.inter.broker.protocol=$AX_KAFKA_MECHANISM
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="$AX_KAFKA_USER" password="$cpw" user_$AX_KAFKA_USER="$cpw";
sasl.mechanism.controller.protocol=PLAIN
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:$AX_KAFKA_USER
allow.everyone.if.no.acl.found=false
log.dirs=$kdir/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=8
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
num.network.threads=2
num.io.threads=4
log.cleaner.dedupe.buffer.size=$AX_KAFKA_DEDUPE_BYTES
EOF
    ax_kafka_tls_props >>"$tmp"
  )
  pw= cpw=
  mv -f "$tmp" "$kdir/server.properties"
  cat >"$kdir/log4j.properties" <<'EOF'
# written by infra; the broker's stdout is appended to $AX_STATE/log/kafka.log
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.network.RequestChannel$=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
log4j.logger.org.apache.kafka.storage.internals.log=WARN
EOF
  # Data written by a broker that ran as root before (older infra) becomes ax's.
  chown -R "$AX_USER:$AX_USER" "$kdir"
  chmod 700 "$kdir" "$kdir/data"
  chmod 600 "$kdir/server.properties"
  chmod 644 "$kdir/log4j.properties"
  ax_kafka_client_conf
}

# ax_kafka_client_conf -- $AX_STATE/kafka.client.conf: the librdkafka
# properties of a client (kcat -F), root only (mode 0600).
ax_kafka_client_conf() {
  local f=$AX_STATE/kafka.client.conf pw
  pw=$(ax_secret_read "$AX_STATE/kafka.password")
  (
    umask 077
    {
      printf 'bootstrap.servers=%s\nsecurity.protocol=%s\nsasl.mechanisms=%s\nsasl.username=%s\nsasl.password=%s\n' \
        "$(ax_kafka_bootstrap)" "$(ax_kafka_client_protocol)" "$AX_KAFKA_MECHANISM" "$AX_KAFKA_USER" "$pw"
      ax_kafka_tls_client_props =
    } >"$f.tmp.$$"
  )
  pw=
  mv -f "$f.tmp.$$" "$f"
}

# ax_kafka_java_opts [NODE] -- JVM flags of the broker and the storage tool.
ax_kafka_java_opts() {
  local node=${1:-1} heap=512m
  # three JVMs on one machine: a smaller heap each
  (($(ax_kafka_n) > 1)) && heap=384m
  printf '%s\n' "-Xmx$heap" -Xms256m -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    "-Dlog4j.configuration=file:$(ax_kafka_node_dir "$node")/log4j.properties"
  # AX_KAFKA_JMX_PORT=N: the broker's JMX on 127.0.0.1:N only, for benchmark
  # programs that read its request metrics (kafka.tools.JmxTool); off by
  # default; node 1's only.
  if [[ -n ${AX_KAFKA_JMX_PORT:-} ]] && ((node == 1)); then
    printf '%s\n' -Dcom.sun.management.jmxremote \
      "-Dcom.sun.management.jmxremote.port=$AX_KAFKA_JMX_PORT" \
      "-Dcom.sun.management.jmxremote.rmi.port=$AX_KAFKA_JMX_PORT" \
      -Dcom.sun.management.jmxremote.host=127.0.0.1 -Djava.rmi.server.hostname=127.0.0.1 \
      -Dcom.sun.management.jmxremote.authenticate=false -Dcom.sun.management.jmxremote.ssl=false \
      -Dcom.sun.management.jmxremote.local.only=true
  fi
}

# ax_kafka_cluster_id -- the cluster's id ($AX_STATE/kafka.cluster.id,
# created once): a Kafka Uuid, 16 random bytes, base64url without padding
# (22 chars), not starting with '-' so that it cannot be taken for an option.
ax_kafka_cluster_id() {
  local f=$AX_STATE/kafka.cluster.id id=-
  if [[ ! -s $f && -f $AX_STATE/kafka/data/meta.properties ]]; then
    # node 1 formatted by an older infra (one broker): its id is the cluster's
    id=$(sed -n 's/^cluster\.id=//p' "$AX_STATE/kafka/data/meta.properties")
    (umask 077 && printf '%s\n' "$id" >"$f")
  fi
  if [[ ! -s $f ]]; then
    while [[ $id == -* ]]; do
      id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    done
    (umask 077 && printf '%s\n' "$id" >"$f.tmp" && mv -f "$f.tmp" "$f")
  fi
  cat "$f"
}

# ax_kafka_format [NODE] -- format NODE's KRaft storage once (meta.properties
# exists after), as user ax, with the SCRAM credential of user ax in the
# initial metadata.  The storage tool gets its arguments from a java
# @argfile (owner ax, 0600, removed right after) so that the password never
# appears in a command line that other users could read in /proc.
ax_kafka_format() {
  local node=${1:-1} kdir log id opts argf pw as_ax
  kdir=$(ax_kafka_node_dir "$node")
  log=$(ax_kafka_node_log "$node")
  if [[ -f $kdir/data/meta.properties ]]; then
    [[ -f $kdir/data/.ax-scram ]] && return 0
    ax_die "$kdir/data was formatted without SASL credentials (by an older infra); stop Kafka and remove $kdir to re-initialize"
  fi
  id=$(ax_kafka_cluster_id)
  mapfile -t opts < <(ax_kafka_java_opts "$node")
  mapfile -t as_ax < <(ax_as_ax_argv)
  argf=$kdir/format.args
  pw=$(ax_secret_read "$AX_STATE/kafka.password")
  (
    umask 077
    printf '%s\n' kafka.tools.StorageTool format --ignore-formatted -t "$id" \
      -c "$kdir/server.properties" \
      --add-scram "$AX_KAFKA_MECHANISM=[name=$AX_KAFKA_USER,password=$pw]" >"$argf"
  )
  pw=
  chown "$AX_USER:$AX_USER" "$argf"
  ax_log "formatting Kafka storage of node $node (cluster id $id, SASL user $AX_KAFKA_USER)"
  if ! (cd "$kdir" && umask 077 && "${as_ax[@]}" "$(ax_java)" "${opts[@]}" -cp "$AX_KAFKA_LIBS/*" "@$argf") >>"$log" 2>&1; then
    rm -f "$argf"
    ax_tail_log "$log"
    ax_die "Kafka storage format failed"
  fi
  rm -f "$argf"
  (umask 077 && : >"$kdir/data/.ax-scram")
  chown "$AX_USER:$AX_USER" "$kdir/data/.ax-scram"
}

# ax_kafka_ready -- every node answers an authenticated metadata request
# itself (asked alone) that lists every node.
ax_kafka_ready() {
  local md i k n
  n=$(ax_kafka_n)
  for ((k = 1; k <= n; k++)); do
    md=$(kcat -F "$AX_STATE/kafka.client.conf" -X "bootstrap.servers=127.0.0.1:$(ax_kafka_node_port "$k")" \
           -L -t __ax_probe -m 2 2>/dev/null) || return 1
    for ((i = 1; i <= n; i++)); do
      grep -q "broker $i at 127.0.0.1:$(ax_kafka_node_port "$i")" <<<"$md" || return 1
    done
  done
}

# ax_kafka_node_start NODE -- configure, format (once) and spawn NODE unless
# it runs; true if it was started.
ax_kafka_node_start() {
  local node=$1 pidfile log opts as_ax p port
  pidfile=$(ax_kafka_node_pidfile "$node")
  log=$(ax_kafka_node_log "$node")
  port=$(ax_kafka_node_port "$node")
  if ax_pid_alive "$pidfile" kafka.Kafka; then
    ax_log "Kafka node $node already running (pid $(ax_pid_read "$pidfile"))"
    return 1
  fi
  for p in "$port" "$(ax_kafka_node_cport "$node")"; do
    ! ax_port_busy "$p" || ax_die "port $p is already in use (set AX_KAFKA_PORT / AX_KAFKA_CONTROLLER_PORT)"
  done
  ax_log_file "$log"
  ax_kafka_configure "$node"
  ax_kafka_format "$node"
  mapfile -t opts < <(ax_kafka_java_opts "$node")
  mapfile -t as_ax < <(ax_as_ax_argv)
  ax_log "starting Kafka $AX_KAFKA_VERSION node $node on 127.0.0.1:$port as user $AX_USER, SASL $AX_KAFKA_MECHANISM (log: $log)"
  printf '\n===== infra: starting Kafka %s node %s at %s =====\n' "$AX_KAFKA_VERSION" "$node" "$(date -u +%FT%TZ)" >>"$log"
  ax_spawn "$pidfile" "$log" "$(ax_kafka_node_dir "$node")" "${as_ax[@]}" \
    "$(ax_java)" "${opts[@]}" -cp "$AX_KAFKA_LIBS/*" kafka.Kafka "$(ax_kafka_node_dir "$node")/server.properties"
}

# ax_kafka_start -- fetch (if needed), configure, format (once), start every
# node of the cluster that does not run (AX_KAFKA_BROKERS, default 1) and
# wait until all of them answer (90 s).  No-op if all run.
ax_kafka_start() {
  local i n started=0 what
  n=$(ax_kafka_n)
  ax_state_init
  for ((i = 1; i <= n; i++)); do
    ax_pid_alive "$(ax_kafka_node_pidfile "$i")" kafka.Kafka || started=1
  done
  if ((started)); then
    ax_kafka_fetch
    ax_pg_user
    ax_state_secure
    ax_make_traversable "$AX_KAFKA_LIBS" "$AX_STATE"
    for ((i = 1; i <= n; i++)); do ax_kafka_node_start "$i" || true; done
  else
    ax_log "Kafka already running ($n node(s))"
    [[ -s $AX_STATE/kafka.client.conf ]] || ax_kafka_client_conf
  fi
  what="Kafka on $(ax_kafka_bootstrap)"
  # the wait fails early if a node dies (node 1's log and pid, or the
  # cluster's answer)
  ax_wait_until 90 "$what" "$(ax_kafka_node_log 1)" "$(ax_kafka_node_pidfile 1)" ax_kafka_ready
  ax_log "Kafka ready on $(ax_kafka_bootstrap) ($n node(s))"
}

# ax_kafka_stop -- SIGTERM every node at once (a node that shuts down alone
# waits for the quorum of the others), SIGKILL after 30 s.
ax_kafka_stop() {
  local i n pids=()
  n=$(ax_kafka_n)
  for ((i = n; i >= 1; i--)); do
    ax_stop_pidfile "Kafka node $i" "$(ax_kafka_node_pidfile "$i")" 30 kafka.Kafka &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || true; done
}

# ---------------------------------------------------------------- PostgreSQL

# ax_as_pg CMD... -- run CMD as the system user ax (from /, so that an
# unreadable working directory does not matter).
ax_as_pg() {
  (cd / && runuser -u "$AX_PG_USER" -- "$@")
}

# ax_pg_user -- create the system user ax if missing.
ax_pg_user() {
  id -u "$AX_PG_USER" >/dev/null 2>&1 && return 0
  ((EUID == 0)) || ax_die "user $AX_PG_USER is missing; run as root"
  ax_log "creating system user $AX_PG_USER"
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
          --shell /usr/sbin/nologin "$AX_PG_USER"
}

# ax_make_traversable DIR... -- make sure user ax can reach each DIR: walking
# down from /, add o+x to every directory that ax cannot traverse (DIR itself
# included, unless ax owns it).
ax_make_traversable() {
  local target d rest part
  for target in "$@"; do
    ax_as_pg test -x "$target" 2>/dev/null && continue
    d=
    rest=${target#/}
    while [[ -n $rest ]]; do
      part=${rest%%/*}
      [[ $rest == */* ]] && rest=${rest#*/} || rest=
      [[ -z $part ]] && continue
      d=$d/$part
      if ! ax_as_pg test -x "$d" 2>/dev/null; then
        ax_log "chmod o+x $d (so that user $AX_PG_USER can reach $target)"
        chmod o+x "$d"
      fi
    done
    ax_as_pg test -x "$target" || ax_die "user $AX_PG_USER cannot reach $target"
  done
}

# ax_pg_sockdir -- unix socket directory (in the state dir unless that path
# is too long for a unix socket).
ax_pg_sockdir() {
  local d=$AX_STATE/run/pg
  if ((${#d} + 16 > 100)); then
    d=/tmp/ax-pg-$(printf '%s' "$AX_STATE" | cksum | cut -d' ' -f1)
  fi
  echo "$d"
}

# ax_pg_password -- print the password (for command substitution only).
ax_pg_password() {
  [[ -s $AX_STATE/pg.password ]] || ax_die "$AX_STATE/pg.password is missing"
  local pw
  read -r pw <"$AX_STATE/pg.password"
  printf '%s' "$pw"
}

# ax_psql_db DB PSQL-ARGS... -- psql over TCP as ax; the password is passed in
# the environment of psql only.
ax_psql_db() {
  local db=$1 pw tlsenv
  shift
  pw=$(ax_pg_password)
  mapfile -t tlsenv < <(ax_pg_tls_env)
  env "${tlsenv[@]}" PGPASSWORD="$pw" PGOPTIONS='-c client_min_messages=warning' \
    psql -X -q -h 127.0.0.1 -p "$AX_PG_PORT" -U "$AX_PG_USER" -d "$db" -v ON_ERROR_STOP=1 "$@"
}

# ax_psql PSQL-ARGS... -- psql on database ax.
ax_psql() { ax_psql_db "$AX_PG_DB" "$@"; }

# ax_pg_running -- the cluster in $AX_STATE/pg runs.
ax_pg_running() {
  [[ -f $AX_STATE/pg/PG_VERSION ]] || return 1
  id -u "$AX_PG_USER" >/dev/null 2>&1 || return 1
  ax_as_pg "$AX_PG_BIN/pg_ctl" status -D "$AX_STATE/pg" >/dev/null 2>&1
}

# ax_pg_init -- initdb the private cluster once (password generated into
# $AX_STATE/pg.password).
ax_pg_init() {
  local pgdata=$AX_STATE/pg pwf=$AX_STATE/pg.password tmpd pw
  [[ -f $pgdata/PG_VERSION ]] && return 0
  if [[ -d $pgdata ]] && [[ -n $(ls -A "$pgdata") ]]; then
    ax_die "$pgdata exists but holds no cluster; remove it to re-initialize"
  fi
  ax_secret_new "$pwf"
  mkdir -p "$pgdata"
  chown "$AX_PG_USER:$AX_PG_USER" "$pgdata"
  chmod 700 "$pgdata"
  ax_make_traversable "$pgdata"
  # initdb runs as ax and cannot read the root-owned password file: hand it
  # a private copy, removed right after.
  tmpd=$(mktemp -d)
  chown "$AX_PG_USER:$AX_PG_USER" "$tmpd"
  install -m 600 -o "$AX_PG_USER" -g "$AX_PG_USER" "$pwf" "$tmpd/pw"
  ax_log "initializing PostgreSQL cluster in $pgdata"
  ax_log_file "$AX_STATE/log/initdb.log"
  if ! ax_as_pg "$AX_PG_BIN/initdb" -D "$pgdata" --auth=scram-sha-256 -U "$AX_PG_USER" \
         --pwfile="$tmpd/pw" -E UTF8 --locale=C >"$AX_STATE/log/initdb.log" 2>&1; then
    rm -rf "$tmpd"
    ax_tail_log "$AX_STATE/log/initdb.log"
    ax_die "initdb failed"
  fi
  rm -rf "$tmpd"
  printf "\n# added by infra: settings regenerated on every start\ninclude_if_exists 'ax-server.conf'\n" \
    >>"$pgdata/postgresql.conf"
}

# ax_pg_shared_buffers -- $AX_PG_SHARED_BUFFERS, else a quarter of the
# machine's memory (or of the cgroup's limit, in a container) within
# 128MB..4GB.
ax_pg_shared_buffers() {
  local kb lim f
  if [[ -n ${AX_PG_SHARED_BUFFERS:-} ]]; then
    printf '%s' "$AX_PG_SHARED_BUFFERS"
    return 0
  fi
  kb=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo 2>/dev/null)
  kb=${kb:-0}
  for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes; do
    [[ -r $f ]] || continue
    read -r lim <"$f" || continue
    [[ $lim =~ ^[0-9]+$ ]] && ((lim / 1024 < kb)) && kb=$((lim / 1024))
  done
  kb=$((kb / 4 / 1024))
  ((kb < 128)) && kb=128
  ((kb > 4096)) && kb=4096
  printf '%sMB' "$kb"
}

# ax_pg_configure -- (re)write $AX_STATE/pg/ax-server.conf from the settings.
ax_pg_configure() {
  local pgdata=$AX_STATE/pg sock
  ax_tls_ensure
  sock=$(ax_pg_sockdir)
  mkdir -p "$sock"
  chown "$AX_PG_USER:$AX_PG_USER" "$sock"
  chmod 755 "$sock"
  cat >"$pgdata/ax-server.conf" <<EOF
# written by infra (lib.sh ax_pg_configure); regenerated on every start
listen_addresses = '127.0.0.1'
port = $AX_PG_PORT
unix_socket_directories = '${sock//\'/\'\'}'
max_connections = 100
shared_buffers = $(ax_pg_shared_buffers)
fsync = on
synchronous_commit = on
# Checkpoints (docs/DEPLOYMENT.md, "Sizing"): ax writes ~2.5 kB of WAL per
# job, which reached the default max_wal_size (1GB) every ~60 s at 3,000-
# 4,500 jobs/s; after each checkpoint every page's first change writes a
# full-page image (compressed here).
max_wal_size = 8GB
min_wal_size = 1GB
checkpoint_timeout = 15min
checkpoint_completion_target = 0.9
wal_compression = lz4
# Autovacuum: retention deletes and the hot path's updates leave dead rows
# at the job rate; per-table thresholds are set by 022_autovacuum.
autovacuum_naptime = 15s
log_checkpoints = on
log_autovacuum_min_duration = 10s
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
EOF
  ax_pg_tls_conf >>"$pgdata/ax-server.conf"
  ax_pg_hba
  chown "$AX_PG_USER:$AX_PG_USER" "$pgdata/ax-server.conf"
  chmod 600 "$pgdata/ax-server.conf"
}

# ax_pg_start -- create user ax, initdb once, start the cluster, wait for it
# and create database ax.  No-op (apart from the checks) if it runs.
ax_pg_start() {
  local log=$AX_STATE/log/postgres.log
  ax_state_init
  ax_pg_user
  ax_state_secure
  ax_pg_init
  if ax_pg_running; then
    ax_log "PostgreSQL already running on 127.0.0.1:$AX_PG_PORT"
  else
    ! ax_port_busy "$AX_PG_PORT" || ax_die "port $AX_PG_PORT is already in use (set AX_PG_PORT)"
    ax_pg_configure
    ax_make_traversable "$AX_STATE/pg" "$AX_STATE/log" "$(ax_pg_sockdir)"
    ax_log_file "$log"
    ax_log "starting PostgreSQL on 127.0.0.1:$AX_PG_PORT (log: $log)"
    if ! ax_as_pg "$AX_PG_BIN/pg_ctl" start -D "$AX_STATE/pg" -l "$log" -w -t 60 -s; then
      ax_tail_log "$log"
      ax_die "PostgreSQL did not start"
    fi
  fi
  ax_wait_until 60 "PostgreSQL on 127.0.0.1:$AX_PG_PORT" "$log" '' \
    "$AX_PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$AX_PG_PORT" -d postgres -t 2
  if [[ -z $(ax_psql_db postgres -tA -c "SELECT 1 FROM pg_database WHERE datname = '$AX_PG_DB'") ]]; then
    ax_log "creating database $AX_PG_DB"
    ax_psql_db postgres -c "CREATE DATABASE $AX_PG_DB OWNER $AX_PG_USER"
  fi
  ax_log "PostgreSQL ready on 127.0.0.1:$AX_PG_PORT"
}

# ax_pg_stop -- pg_ctl stop -m fast (immediate if that times out).
ax_pg_stop() {
  ax_pg_running || return 0
  ax_log "stopping PostgreSQL"
  if ! ax_as_pg "$AX_PG_BIN/pg_ctl" stop -D "$AX_STATE/pg" -m fast -w -t 60 -s; then
    ax_warn "fast shutdown failed; trying immediate"
    ax_as_pg "$AX_PG_BIN/pg_ctl" stop -D "$AX_STATE/pg" -m immediate -w -t 30 -s || true
  fi
}

# ax_migrate [DIR] -- bring the schema of database ax up to date.  With no
# DIR, a built axctl and $AX_STATE/ax.conf: `axctl migrate apply` (the
# migrations that build carries, which are infra/migrations at build time;
# one transaction each, under the appliers' advisory lock).  Otherwise psql
# applies DIR/*.sql (default infra/migrations) in lexical order, each in one
# transaction together with its row in ax_schema_migrations, holding the
# same advisory lock for that transaction; versions already recorded are
# skipped.  Both record the same versions in the same table.
ax_migrate() {
  local dir=${1:-$AX_ROOT/infra/migrations} applied f v n=0 files=()
  local lock="SELECT pg_advisory_xact_lock(hashtextextended('ax.schema_migrations', 0))"
  if (($# == 0)) && [[ -x $AX_BUILD/axctl/axctl && -s $AX_STATE/ax.conf ]]; then
    ax_log "migrations: $AX_BUILD/axctl/axctl migrate apply"
    ax_axctl migrate apply || ax_die "axctl migrate apply failed"
    return 0
  fi
  ax_psql -c "CREATE TABLE IF NOT EXISTS ax_schema_migrations (
                version    text PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now())"
  applied=$(ax_psql -tA -c "SELECT version FROM ax_schema_migrations")
  if [[ -d $dir ]]; then
    mapfile -t files < <(find "$dir" -maxdepth 1 -type f -name '*.sql' | LC_ALL=C sort)
  fi
  for f in "${files[@]}"; do
    v=$(basename "$f" .sql)
    grep -Fxq -- "$v" <<<"$applied" && continue
    ax_log "migration $v"
    if ! ax_psql -1 -c "$lock" -f "$f" \
           -c "INSERT INTO ax_schema_migrations (version) VALUES ('${v//\'/\'\'}')"; then
      ax_die "migration $v failed (rolled back): $f"
    fi
    n=$((n + 1))
  done
  ax_log "migrations: $n applied, $(($(grep -c . <<<"$applied" || true))) already there"
}

# ---------------------------------------------------------------- TLS

# AX_TLS=1: Kafka's client listener speaks SASL_SSL instead of
# SASL_PLAINTEXT (the same port, SCRAM as before; the brokers talk to each
# other through it too), PostgreSQL has ssl = on and accepts TCP only over
# TLS (hostssl, anything else rejected), and ax.conf carries
# kafka.security.protocol = SASL_SSL, kafka.ssl.ca.location, pg.sslmode =
# verify-full and pg.sslrootcert.  The certificates are throwaway ones made
# with openssl in AX_TLS_DIR (default $AX_STATE/tls): a CA, and one server
# certificate for 127.0.0.1, ::1 and localhost that both servers present.
# The KRaft controller listener stays SASL_PLAINTEXT on 127.0.0.1 (no ax
# traffic crosses it).
#
# AX_TLS_DIR layout (owner ax, mode 0700)
#   ca.pem              the CA certificate (what clients trust; 0644)
#   ca.key              its private key (root, 0600; signs server certificates only)
#   server.pem          server certificate (0644), valid AX_TLS_DAYS days
#   server.key          its private key, PKCS#8 (owner ax, 0600; PostgreSQL's ssl_key_file)
#   server.keystore.pem server.key + server.pem (owner ax, 0600; Kafka's PEM keystore)

AX_TLS_DAYS=${AX_TLS_DAYS:-365}

# ax_tls_on -- true when AX_TLS=1 (0 or unset: plaintext; anything else dies).
ax_tls_on() {
  case ${AX_TLS:-0} in
    1) return 0 ;;
    0) return 1 ;;
    *) ax_die "AX_TLS must be 0 or 1, not '$AX_TLS'" ;;
  esac
}

ax_tls_dir() { echo "${AX_TLS_DIR:-$AX_STATE/tls}"; }

# ax_tls_openssl LOG ARGS... -- openssl, its output to LOG (shown on failure).
ax_tls_openssl() {
  local log=$1
  shift
  if ! openssl "$@" >>"$log" 2>&1; then
    ax_tail_log "$log"
    ax_die "openssl $1 failed (see $log)"
  fi
}

# ax_tls_ca DIR LOG -- make the throwaway CA in DIR once.
ax_tls_ca() {
  local d=$1 log=$2
  [[ -s $d/ca.pem && -s $d/ca.key ]] && return 0
  ax_log "making a throwaway TLS CA in $d"
  cat >"$d/ca.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = ax throwaway CA (infra)
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
CNF
  (umask 077 && ax_tls_openssl "$log" req -x509 -config "$d/ca.cnf" -newkey rsa:2048 -nodes \
     -keyout "$d/ca.key.tmp" -out "$d/ca.pem.tmp" -days $((AX_TLS_DAYS * 2)))
  mv -f "$d/ca.key.tmp" "$d/ca.key"
  mv -f "$d/ca.pem.tmp" "$d/ca.pem"
  chmod 600 "$d/ca.key"
  chmod 644 "$d/ca.pem"
  rm -f "$d/server.pem"   # signed by another CA, if any
}

# ax_tls_server_cert DIR LOG -- (re)make the server certificate unless it
# exists, is signed by DIR's CA and is valid for 7 more days.
ax_tls_server_cert() {
  local d=$1 log=$2
  if [[ -s $d/server.pem && -s $d/server.key && -s $d/server.keystore.pem ]] &&
     openssl verify -CAfile "$d/ca.pem" "$d/server.pem" >/dev/null 2>&1 &&
     openssl x509 -in "$d/server.pem" -noout -checkend 604800 >/dev/null 2>&1; then
    return 0
  fi
  ax_log "making a TLS server certificate for 127.0.0.1, ::1, localhost (valid $AX_TLS_DAYS days)"
  cat >"$d/server.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = localhost
[srv]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:localhost, IP:127.0.0.1, IP:::1
authorityKeyIdentifier = keyid
CNF
  (
    umask 077
    ax_tls_openssl "$log" req -new -config "$d/server.cnf" -newkey rsa:2048 -nodes \
      -keyout "$d/server.key.tmp" -out "$d/server.csr"
    ax_tls_openssl "$log" x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" \
      -set_serial "0x$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" -days "$AX_TLS_DAYS" \
      -extfile "$d/server.cnf" -extensions srv -out "$d/server.pem.tmp"
    # Kafka's PEM keystore: the key (unencrypted PKCS#8, no ssl.key.password)
    # followed by the certificate
    cat "$d/server.key.tmp" "$d/server.pem.tmp" >"$d/server.keystore.pem.tmp"
  )
  rm -f "$d/server.csr"
  chmod 644 "$d/server.pem.tmp"
  chown "$AX_USER:$AX_USER" "$d/server.key.tmp" "$d/server.keystore.pem.tmp"
  mv -f "$d/server.key.tmp" "$d/server.key"
  mv -f "$d/server.keystore.pem.tmp" "$d/server.keystore.pem"
  mv -f "$d/server.pem.tmp" "$d/server.pem"
}

# ax_tls_ensure -- with AX_TLS=1, the CA and a valid server certificate in
# AX_TLS_DIR (made once; the server certificate is renewed when it expires
# within 7 days -- servers pick it up when infra next starts them).  No
# private key is ever printed.  Needs the system user ax.
ax_tls_ensure() {
  ax_tls_on || return 0
  local d log
  d=$(ax_tls_dir)
  command -v openssl >/dev/null || ax_die "AX_TLS=1 needs openssl"
  ax_state_init
  (umask 077 && mkdir -p "$d")
  log=$AX_STATE/log/tls.log
  ax_log_file "$log"
  ax_tls_ca "$d" "$log"
  ax_tls_server_cert "$d" "$log"
  chown "$AX_USER:$AX_USER" "$d"
  chmod 700 "$d"
  ax_make_traversable "$d"
}

# ax_kafka_client_protocol -- security.protocol of the client listener.
ax_kafka_client_protocol() {
  if ax_tls_on; then echo SASL_SSL; else echo SASL_PLAINTEXT; fi
}

# ax_kafka_tls_props -- server.properties lines of the TLS listener (none
# without AX_TLS=1).  The brokers verify each other's certificate and name
# (inter-broker traffic is on the client listener).
ax_kafka_tls_props() {
  ax_tls_on || return 0
  local d
  d=$(ax_tls_dir)
  cat <<EOF
# AX_TLS=1 (lib.sh ax_kafka_tls_props): the client listener is SASL_SSL
ssl.keystore.type=PEM
ssl.keystore.location=$d/server.keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$d/ca.pem
ssl.endpoint.identification.algorithm=https
ssl.enabled.protocols=TLSv1.3,TLSv1.2
ssl.client.auth=none
EOF
}

# ax_kafka_tls_client_props SEP -- the client's TLS properties (none without
# AX_TLS=1), "key SEP value" per line: '=' for kcat, ' = ' for ax.conf.
ax_kafka_tls_client_props() {
  ax_tls_on || return 0
  printf 'ssl.ca.location%s%s\n' "$1" "$(ax_tls_dir)/ca.pem"
  printf 'ssl.endpoint.identification.algorithm%shttps\n' "$1"
}

# ax_pg_tls_conf -- PostgreSQL settings of AX_TLS=1 (none without).
ax_pg_tls_conf() {
  ax_tls_on || return 0
  local d
  d=$(ax_tls_dir)
  cat <<EOF
# AX_TLS=1 (lib.sh ax_pg_tls_conf); pg_hba.conf accepts TCP over TLS only
ssl = on
ssl_cert_file = '${d//\'/\'\'}/server.pem'
ssl_key_file = '${d//\'/\'\'}/server.key'
ssl_min_protocol_version = 'TLSv1.2'
EOF
}

# ax_pg_hba -- rewrite pg_hba.conf: with AX_TLS=1 TCP connections must use
# TLS (hostssl; hostnossl rejected), otherwise initdb's own rules (host).
# A pg_hba.conf not written here (initdb's) is left alone without AX_TLS=1.
ax_pg_hba() {
  local f=$AX_STATE/pg/pg_hba.conf h=host
  if ax_tls_on; then
    h=hostssl
  elif ! grep -q '^# written by infra' "$f" 2>/dev/null; then
    return 0
  fi
  {
    printf '# written by infra (lib.sh ax_pg_hba); regenerated on every start\n'
    printf 'local      all          all                 scram-sha-256\n'
    printf 'local      replication  all                 scram-sha-256\n'
    printf '%-10s all          all  127.0.0.1/32   scram-sha-256\n' "$h"
    printf '%-10s all          all  ::1/128        scram-sha-256\n' "$h"
    printf '%-10s replication  all  127.0.0.1/32   scram-sha-256\n' "$h"
    printf '%-10s replication  all  ::1/128        scram-sha-256\n' "$h"
    if [[ $h == hostssl ]]; then
      printf 'hostnossl  all          all  0.0.0.0/0      reject\n'
      printf 'hostnossl  all          all  ::/0           reject\n'
    fi
  } >"$f.tmp"
  chown "$AX_PG_USER:$AX_PG_USER" "$f.tmp"
  chmod 600 "$f.tmp"
  mv -f "$f.tmp" "$f"
}

# ax_pg_tls_env -- libpq environment of infra's own psql (NAME=VALUE per
# line; none without AX_TLS=1): verify-full against the CA.
ax_pg_tls_env() {
  ax_tls_on || return 0
  printf '%s\n' PGSSLMODE=verify-full "PGSSLROOTCERT=$(ax_tls_dir)/ca.pem"
}

# ---------------------------------------------------------------- ax config

# ax_write_config FILE -- write the ax configuration (owner ax, mode 0600:
# the services running as ax read it, root reads it anyway).  With
# $AX_STATE/kafka.password (a broker set up by ax_kafka_start) it carries the
# Kafka SASL credentials as kafka.* keys for librdkafka.
ax_write_config() {
  local file=$1 pw kpw= tmp
  pw=$(ax_pg_password)
  if [[ -s $AX_STATE/kafka.password ]]; then
    kpw=$(ax_secret_read "$AX_STATE/kafka.password")
  fi
  tmp=$file.tmp.$$
  mkdir -p "$(dirname "$file")"
  (
    umask 077
    {
      printf '# written by infra/up; every ax program reads this file when given no --config\n'
      printf 'log.level = info\n'
      printf 'topic.prefix = ax.\n'
      printf 'kafka.bootstrap.servers = %s\n' "$(ax_kafka_bootstrap)"
      if [[ -n $kpw ]]; then
        printf 'kafka.security.protocol = %s\n' "$(ax_kafka_client_protocol)"
        ax_kafka_tls_client_props ' = ' | sed 's/^/kafka./'
        printf 'kafka.sasl.mechanisms = %s\n' "$AX_KAFKA_MECHANISM"
        printf 'kafka.sasl.username = %s\n' "$AX_KAFKA_USER"
        printf 'kafka.sasl.password = %s\n' "$kpw"
      fi
      printf 'pg.host = 127.0.0.1\n'
      printf 'pg.port = %s\n' "$AX_PG_PORT"
      printf 'pg.dbname = %s\n' "$AX_PG_DB"
      printf 'pg.user = %s\n' "$AX_PG_USER"
      printf 'pg.password = %s\n' "$pw"
      ax_pg_tls_env | sed -n 's/^PGSSLMODE=/pg.sslmode = /p; s/^PGSSLROOTCERT=/pg.sslrootcert = /p'
      printf 'api.listen = 127.0.0.1:%s\n' "$AX_API_PORT"
      if [[ -s $AX_STATE/api.tokens ]]; then
        printf 'api.tokens = %s\n' "$(cat "$AX_STATE/api.tokens")"
      fi
      if [[ -d $AX_ROOT/web/console ]]; then
        printf 'api.console.dir = %s\n' "$AX_ROOT/web/console"
      fi
    } >"$tmp"
  )
  pw= kpw=
  chmod 600 "$tmp"
  if ((EUID == 0)) && id -u "$AX_USER" >/dev/null 2>&1; then
    chown "$AX_USER:$AX_USER" "$tmp"
  fi
  mv -f "$tmp" "$file"
}

# ---------------------------------------------------------------- ax services

# ax_api_token_ensure -- an admin bearer token for ax-api unless one exists:
# the token in $AX_STATE/api.token and its api.tokens entry (a SHA-256, no
# secret) in $AX_STATE/api.tokens, both root 0600 like the other secrets;
# ax_write_config puts the entry in ax.conf. Never printed here.
ax_api_token_ensure() {
  local out
  if [[ -s $AX_STATE/api.token && -s $AX_STATE/api.tokens ]]; then
    return 0
  fi
  out=$("$AX_BUILD/axctl/axctl" api token create admin --scope admin) || ax_die "axctl api token create failed"
  (
    umask 077
    awk '/^token:/ { print $2 }' <<<"$out" >"$AX_STATE/api.token.tmp"
    awk '/entry:/ { print $3 }' <<<"$out" >"$AX_STATE/api.tokens.tmp"
  )
  out=
  mv -f "$AX_STATE/api.token.tmp" "$AX_STATE/api.token"
  mv -f "$AX_STATE/api.tokens.tmp" "$AX_STATE/api.tokens"
  chmod 600 "$AX_STATE/api.token" "$AX_STATE/api.tokens"
  ax_log "made an admin token for ax-api ($AX_STATE/api.token, mode 0600)"
}

# ax_axctl ARGS... -- run the built axctl with $AX_STATE/ax.conf.
ax_axctl() {
  "$AX_BUILD/axctl/axctl" --config "$AX_STATE/ax.conf" "$@"
}

# ax_create_topics -- axctl topics create --partitions $AX_PARTITIONS.
ax_create_topics() {
  ax_axctl topics create --partitions "$AX_PARTITIONS"
}

# ax_service_start SVC -- start ax-SVC in the background unless it runs, as
# user ax (so the executor runs commands as ax, never as root).
ax_service_start() {
  local svc=$1 bin=$AX_BUILD/services/$1/ax-$1 as_ax
  local pidfile=$AX_STATE/run/ax-$1.pid log=$AX_STATE/log/ax-$1.log
  [[ -x $bin ]] || ax_die "$bin is not built"
  if ax_pid_alive "$pidfile" "ax-$svc"; then
    ax_log "ax-$svc already running (pid $(ax_pid_read "$pidfile"))"
    return 0
  fi
  ax_make_traversable "$AX_BUILD/services/$svc"
  ax_log_file "$log"
  mapfile -t as_ax < <(ax_as_ax_argv)
  printf '\n===== infra: starting ax-%s at %s =====\n' "$svc" "$(date -u +%FT%TZ)" >>"$log"
  # HOME of user ax, not root's: libpq looks for ~/.postgresql/postgresql.crt
  # when it speaks TLS, and fails on a home it may not enter
  ax_spawn "$pidfile" "$log" "$AX_STATE" "${as_ax[@]}" env "HOME=$(ax_user_home)" \
    "$bin" --config "$AX_STATE/ax.conf"
  ax_log "started ax-$svc as user $AX_USER (pid $(ax_pid_read "$pidfile"), log: $log)"
}

# ax_user_home -- the home directory of user ax (/nonexistent as infra makes it).
ax_user_home() {
  local h
  h=$(getent passwd "$AX_USER" | cut -d: -f6)
  echo "${h:-/nonexistent}"
}

# ax_services_start -- start all services, then check they are still alive.
ax_services_start() {
  local svc started=0
  ax_state_init
  for svc in "${AX_SERVICES[@]}"; do
    ax_pid_alive "$AX_STATE/run/ax-$svc.pid" "ax-$svc" || started=1
    ax_service_start "$svc"
  done
  ((started)) || return 0
  sleep 1
  for svc in "${AX_SERVICES[@]}"; do
    if ! ax_pid_alive "$AX_STATE/run/ax-$svc.pid" "ax-$svc"; then
      ax_tail_log "$AX_STATE/log/ax-$svc.log"
      ax_die "ax-$svc exited right after start (see $AX_STATE/log/ax-$svc.log)"
    fi
  done
}

# ax_services_stop -- SIGTERM each service, SIGKILL after 15 s.
ax_services_stop() {
  local svc
  for svc in "${AX_SERVICES[@]}"; do
    ax_stop_pidfile "ax-$svc" "$AX_STATE/run/ax-$svc.pid" 15 "ax-$svc"
  done
}

ax_state_init
