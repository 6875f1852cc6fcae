#!/usr/bin/env bash
# broker_requests.sh — what one benchmark costs the Kafka broker: requests by
# API key and the broker's CPU, as deltas of its JMX counters over the run of
# COMMAND, per second and per 1,000 jobs. BENCHMARKS.md, "Issue #13: Kafka
# requests per job".
#
#   tests/bench/broker_requests.sh [--jmx HOST:PORT] [--jobs N] [--idle S]
#       [--out FILE] -- COMMAND [ARG...]
#
#   --jmx HOST:PORT  the broker's JMX (default 127.0.0.1:$AX_KAFKA_JMX_PORT,
#                    else 127.0.0.1:39999: infra's AX_KAFKA_JMX_PORT, see
#                    infra/lib.sh ax_kafka_java_opts)
#   --jobs N         jobs the command runs: adds the per-1,000-jobs column
#                    (N = 0 or absent: none)
#   --idle S         first sample the broker for S seconds with COMMAND not
#                    running: the background (other clients of a shared
#                    broker, its own controller heartbeats) per second, shown
#                    as a column of its own and subtracted (scaled to the
#                    run's length) in the "net" columns
#   --out FILE       also write the table there
#
# COMMAND's output goes where it would without this script; its exit status is
# this script's (the table is printed either way). The counters are
# kafka.network:type=RequestMetrics,name=RequestsPerSec,request=* (every
# version summed), BrokerTopicMetrics MessagesInPerSec/BytesInPerSec/BytesOutPerSec and
# java.lang:type=OperatingSystem ProcessCpuTime, and the responses with an
# error (RequestMetrics ErrorsPerSec, error != NONE: rows "error API:ERROR",
# not in "all requests"), read by AxJmxSnap.java
# (beside this script), compiled with javac into a scratch directory at
# every run. The window is the whole command, its start-up and clean-up
# included: per-job figures of a short run are upper bounds.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
jmx=127.0.0.1:${AX_KAFKA_JMX_PORT:-39999} jobs=0 idle=0 out=
usage() { sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case $1 in
    --jmx) jmx=${2:?--jmx needs HOST:PORT}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs N}; shift 2 ;;
    --idle) idle=${2:?--idle needs S}; shift 2 ;;
    --out) out=${2:?--out needs FILE}; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "broker_requests.sh: unknown option $1" >&2; usage ;;
  esac
done
[[ $jobs =~ ^[0-9]+$ ]] || { echo "broker_requests.sh: --jobs: not a count: $jobs" >&2; exit 2; }
[[ $idle =~ ^[0-9]+$ ]] || { echo "broker_requests.sh: --idle: not seconds: $idle" >&2; exit 2; }
(($#)) || { echo "broker_requests.sh: no COMMAND" >&2; usage; }
command -v javac >/dev/null || { echo "broker_requests.sh: javac not found (JDK 17)" >&2; exit 2; }

scratch=$(mktemp -d /tmp/broker_requests.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
javac -d "$scratch" "$here/AxJmxSnap.java"
snap() { java -cp "$scratch" AxJmxSnap "$jmx" >"$scratch/$1" || { echo "broker_requests.sh: cannot read JMX at $jmx" >&2; exit 1; }; }

if ((idle > 0)); then
  snap i0; sleep "$idle"; snap i1
fi
snap s0
set +e
"$@"
rc=$?
set -e
snap s1

files=("$scratch/s0" "$scratch/s1")
((idle > 0)) && files=("$scratch/i0" "$scratch/i1" "${files[@]}")
# table: key, run delta, per s, per 1,000 jobs, idle per s, net per 1,000 jobs
awk -v jobs="$jobs" -v idle="$idle" '
  FNR == 1 { f++ }
  { key = ($1 == "req" || $1 == "err") ? $2 : $1; val = ($1 == "req" || $1 == "err") ? $3 : $2
    if ($1 == "err") { key = "error " key; iserr[key] = 1 }
    if ($1 == "req") isreq[key] = 1
    v[f, key] = val; keys[key] = 1 }
  END {
    fi0 = idle ? 1 : 0; base = idle ? 2 : 0
    secs = (v[base + 2, "mono_ns"] - v[base + 1, "mono_ns"]) / 1e9
    isecs = idle ? (v[2, "mono_ns"] - v[1, "mono_ns"]) / 1e9 : 0
    printf "| counter | over the run | per s | per 1,000 jobs | idle per s | net per 1,000 jobs |\n"
    printf "|---|---:|---:|---:|---:|---:|\n"
    n = 0
    for (k in keys) if (isreq[k]) names[++n] = k
    # sort by run delta, largest first
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) {
      di = v[base + 2, names[i]] - v[base + 1, names[i]]
      dj = v[base + 2, names[j]] - v[base + 1, names[j]]
      if (dj > di) { t = names[i]; names[i] = names[j]; names[j] = t } }
    for (k in keys) if (iserr[k]) names[++n] = k
    names[++n] = "all requests"; names[++n] = "msgs_in"; names[++n] = "bytes_in"; names[++n] = "bytes_out"; names[++n] = "cpu_s"
    # FetchConsumer and FetchFollower are sub-meters of Fetch (the same
    # requests again): listed, not summed
    for (k in keys) if (isreq[k] && k != "FetchConsumer" && k != "FetchFollower") {
      v[base + 2, "all requests"] += v[base + 2, k]; v[base + 1, "all requests"] += v[base + 1, k]
      if (idle) { v[2, "all requests"] += v[2, k]; v[1, "all requests"] += v[1, k] } }
    for (g = 1; g <= base + 2; g++) v[g, "cpu_s"] = v[g, "cpu_ns"] / 1e9
    for (i = 1; i <= n; i++) {
      k = names[i]; d = v[base + 2, k] - v[base + 1, k]
      if (d == 0 && k != "cpu_s" && k != "msgs_in") continue
      ir = idle && isecs > 0 ? (v[2, k] - v[1, k]) / isecs : 0
      pj = jobs ? sprintf("%.1f", d * 1000 / jobs) : "-"
      nj = jobs && idle ? sprintf("%.1f", (d - ir * secs) * 1000 / jobs) : "-"
      fmt = (k == "cpu_s") ? "| %s | %.2f | %.3f | %s | %s | %s |\n" : "| %s | %d | %.1f | %s | %s | %s |\n"
      printf fmt, k, d, d / secs, pj, idle ? sprintf(k == "cpu_s" ? "%.3f" : "%.1f", ir) : "-", nj
    }
    printf "\nwindow %.1f s, jobs %d%s\n", secs, jobs, idle ? sprintf(", idle sample %.1f s", isecs) : ""
    if (secs > 0) printf "broker CPU %.1f %% of a core over the window\n", 100 * (v[base + 2, "cpu_s"] - v[base + 1, "cpu_s"]) / secs
  }' "${files[@]}" | tee ${out:+"$out"}
exit $rc
