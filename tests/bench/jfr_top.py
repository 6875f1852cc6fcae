#!/usr/bin/env python3
"""jfr_top.py — summarise `jfr print --json --events jdk.ExecutionSample`:
the top methods by self samples (the top frame), by inclusive samples (any
frame of the stack, counted once per sample), the threads, and the share of
samples whose stack passes through a few named areas of the Kafka broker
(request handling by API, log append, record validation, network I/O, the
transaction coordinator, SASL/SSL). Used by broker_profile.sh.

    jfr_top.py [--top N] [--threads THREADS.json] SAMPLES.json

THREADS.json (`jfr print --json --events jdk.ThreadCPULoad`): every thread's
mean CPU over the recording, in % of one core (JFR reports each thread's
share of the whole machine; times the CPU count), pools summed.
"""
import argparse
import collections
import json
import os
import sys

# Areas: a sample counts toward the first whose substring any frame has.
AREAS = [
    ("produce: record validation", "LogValidator"),
    ("produce: log append", "kafka.log.UnifiedLog.append"),
    ("produce: other", "KafkaApis.handleProduceRequest"),
    ("fetch: reading the log", "ReplicaManager.readFromLog"),
    ("fetch: other", "KafkaApis.handleFetchRequest"),
    ("txn: markers", "WriteTxnMarkers"),
    ("txn: coordinator", "kafka.coordinator.transaction"),
    ("group coordinator", "kafka.coordinator.group"),
    ("group coordinator (new)", "org.apache.kafka.coordinator.group"),
    ("delayed operations (purgatory)", "DelayedOperation"),
    ("network: SSL", "SslTransportLayer"),
    ("network: SASL", "Sasl"),
    ("network: selector", "org.apache.kafka.common.network.Selector"),
    ("network: processor", "kafka.network.Processor"),
    ("request metrics/logging", "RequestChannel"),
    ("KRaft controller/metadata", "kafka.server.metadata"),
    ("raft", "org.apache.kafka.raft"),
    ("JIT/GC/VM (no Java frame)", None),
]


def frame_name(f):
    m = f.get("method") or {}
    t = (m.get("type") or {}).get("name", "?")
    return t.replace("/", ".") + "." + m.get("name", "?")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--threads")
    ap.add_argument("samples")
    a = ap.parse_args()
    with open(a.samples) as fh:
        events = json.load(fh)["recording"]["events"]
    n = len(events)
    if n == 0:
        print("no execution samples")
        return 1
    self_c, incl_c, threads, areas = (collections.Counter() for _ in range(4))
    for e in events:
        v = e["values"]
        frames = [frame_name(f) for f in ((v.get("stackTrace") or {}).get("frames") or [])]
        th = (v.get("sampledThread") or {}).get("javaName") or (v.get("sampledThread") or {}).get("osName") or "?"
        # thread pools: strip trailing numbers so a pool is one row
        threads[th.rstrip("0123456789-")] += 1
        if frames:
            self_c[frames[0]] += 1
            for name in set(frames):
                incl_c[name] += 1
        joined = "\n".join(frames)
        for label, sub in AREAS:
            if sub is None:
                if not frames:
                    areas[label] += 1
                    break
                continue
            if sub in joined:
                areas[label] += 1
                break
        else:
            areas["other"] += 1

    def table(title, c, k):
        print(f"\n{title} (of {n} samples)")
        for name, v in c.most_common(k):
            print(f"{100.0 * v / n:6.1f} %  {v:7d}  {name}")

    if a.threads:
        with open(a.threads) as fh:
            loads = json.load(fh)["recording"]["events"]
        per = collections.defaultdict(list)
        for e in loads:
            v = e["values"]
            th = (v.get("eventThread") or {}).get("javaName") or (v.get("eventThread") or {}).get("osName") or "?"
            per[th].append(float(v.get("user", 0)) + float(v.get("system", 0)))
        pools = collections.Counter()
        for th, xs in per.items():
            pools[th.rstrip("0123456789-")] += 100.0 * os.cpu_count() * sum(xs) / len(xs)
        total = sum(pools.values())
        print(f"thread CPU, mean % of one core over the recording (total {total:.1f} %)")
        for name, v in pools.most_common(25):
            print(f"{v:7.1f} %  {name}")

    table("areas (first match from the top of this list)", areas, len(AREAS) + 1)
    table("threads", threads, 20)
    table("self", self_c, a.top)
    table("inclusive", incl_c, a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
