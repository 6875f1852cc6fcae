#!/usr/bin/env python3
# hop_probes/analyse.py: join the probe lines ($AX_PROBE.<pid>, probes.diff) by instance id and print
# each hop of fire-to-start at p50/p90/p99 over the last 14,000 instances, what the slowest 1 % spent in
# each hop, and the callback loop's time in its finish statements (F), its results publishing (P) and
# the Kafka commit inside it (K) (BENCHMARKS.md, "Issue #13: Nagle's delay" and "Issue #13: the
# twentieth session").
#
# probes.diff applies to 747c813 (git apply; the lines of the twentieth session, and the window
# flush's W line of the thirtieth: its commit, its settle, whether the next window was begun ahead).
# Copy probe.h to services/trigger/ and services/executor/, build, run bench_exec with
# AX_PROBE=/tmp/pr against that build, then: python3 analyse.py [PREFIX] (default /tmp/pr; reads
# PREFIX.*). It also sets each window flush beside the first ingest batch after it (BENCHMARKS.md,
# "Issue #13: the thirtieth session").
#
# Lines that do not parse (threads of one process writing at once) and hops outside -1 s .. 100 s
# (a warm-up record, a timestamp the broker did not set) are left out.
import collections
import glob
import sys

prefix = sys.argv[1] if len(sys.argv) > 1 else '/tmp/pr'
want = {'T': 8, 'E': 4, 'C': 5, 'R': 3, 'F': 4, 'P': 3, 'K': 4, 'W': 5}
T, E, C, R = {}, {}, {}, {}
loop = []
flushes = []
for f in glob.glob(prefix + '.*'):
    for line in open(f, errors='replace'):
        a = line.split()
        if not a or a[0] not in want or len(a) != want[a[0]]:
            continue
        try:
            if a[0] in 'FPK':
                loop.append((a[0], float(a[1]), float(a[2])))
                continue
            if a[0] == 'W':
                flushes.append(tuple(float(x) for x in a[1:]))
                continue
            i = int(a[1])
            v = [float(x) for x in a[2:]]
        except ValueError:
            continue
        {'T': T, 'E': E, 'C': C, 'R': R}[a[0]].setdefault(i, v)

names = ['ingest stmt', 'produce call', 'produced->kafka ts', 'kts->exec take', 'take->claim',
         'claim', 'claimed->R start', 'TOTAL']
rows = []
for i in sorted(set(T) & set(E) & set(C) & set(R))[-14000:]:
    b0, b1, b2, pc, pp, n = T[i]
    er, kts = E[i]
    c0, c1, cn = C[i]
    r0 = R[i][0]
    h = [b2 - b1, pp - pc, kts - pc, er - kts, c0 - er, c1 - c0, r0 - c1, r0 - b1]
    if all(-1e3 < x < 1e5 for x in h):
        rows.append(h + [n, cn])


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


if rows:
    rows.sort(key=lambda r: r[7])
    tail = rows[int(0.99 * len(rows)):]
    print(len(rows), 'jobs; the slowest 1 %:', len(tail))
    print('%-20s %7s %7s %7s %12s' % ('hop (ms)', 'p50', 'p90', 'p99', 'tail median'))
    for j, nm in enumerate(names):
        v = [r[j] for r in rows]
        print('%-20s %7.2f %7.2f %7.2f %12.2f' % (nm, pct(v, .5), pct(v, .9), pct(v, .99),
                                                  pct([r[j] for r in tail], .5)))
    top = collections.Counter(names[max(range(7), key=lambda j: r[j])] for r in tail)
    print('the largest hop of each of the slowest 1 %:', dict(top.most_common()))
    print('ingest batch p50', pct([r[8] for r in rows], .5), 'claim batch p50',
          pct([r[9] for r in rows], .5))
if loop:
    loop.sort(key=lambda x: x[1])
    span = loop[-1][1] + loop[-1][2] - loop[0][1]
    for k, what in (('F', 'finish statements'), ('P', 'results publishing'),
                    ('K', 'of which the Kafka commit')):
        v = [x[2] for x in loop if x[0] == k]
        if v:
            print('callback %-26s %4d calls, %8.1f ms (%4.1f %% of %.0f ms), p50 %.1f ms' %
                  (what, len(v), sum(v), 100 * sum(v) / span, span, pct(v, .5)))
if flushes and rows:
    # each ingest batch (by its statement's start) and its slowest produce -> append
    batch = collections.defaultdict(float)
    for i in sorted(set(T) & set(E)):
        b0, b1, b2, pc, pp, n = T[i]
        d = E[i][1] - pc
        if -1e3 < d < 1e5:
            batch[b1] = max(batch[b1], d)
    starts = sorted(batch)
    first = []
    for q0, commit, settle, ahead in sorted(flushes):
        nxt = [b for b in starts if 0 < b - q0 < 30]
        if nxt:
            first.append(batch[nxt[0]])
    print('window flushes %d (begun ahead %d): commit p50 %.2f ms, settle p50 %.2f ms' %
          (len(flushes), sum(1 for f in flushes if f[3]), pct([f[1] for f in flushes], .5),
           pct([f[2] for f in flushes], .5)))
    if first:
        print('first batch within 30 ms after a flush: %d, its slowest produce->append p50 %.2f ms '
              '(every batch: p50 %.2f ms)' % (len(first), pct(first, .5), pct(list(batch.values()), .5)))
