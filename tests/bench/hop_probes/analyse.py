#!/usr/bin/env python3
# hop_probes/analyse.py: join the probe lines ($AX_PROBE.<pid>, probes.diff) by instance id and print
# each hop of fire-to-start at p50/p90/p99 over the last 14,000 instances (BENCHMARKS.md,
# "Issue #13: Nagle's delay"). The patch was made on 627b282: apply it to that commit's
# services (git apply), copy probe.h to services/trigger/ and services/executor/, build,
# run bench_exec with AX_PROBE=/tmp/pr, then: python3 analyse.py (reads /tmp/pr.*).
import glob,collections,sys
T={};E={};C={};R={}
for f in glob.glob('/tmp/pr.*'):
    for l in open(f):
        a=l.split()
        if not a: continue
        k=a[0]
        try: i=int(a[1])
        except Exception: continue
        try:
            if k=='T': T[i]=list(map(float,a[2:7]))+[int(a[7])]
            elif k=='E': E.setdefault(i,(float(a[2]),int(a[3])))
            elif k=='C': C.setdefault(i,(float(a[2]),float(a[3]),int(a[4])))
            elif k=='R': R.setdefault(i,float(a[2]))
        except Exception: pass
ids=sorted(set(T)&set(E)&set(C)&set(R))[-14000:]
hops=collections.OrderedDict()
names=['begin+lease','ingest stmt','pg commit','produce call','produced->kafka ts','kts->exec take','take->claim','claim','claimed->R start','TOTAL']
rows=[]
for i in ids:
    b0,b1,b2,pc,pp,n=T[i]; er,kts=E[i]; c0,c1,cn=C[i]; r0=R[i]
    h=[b1-b0,b2-b1,pc-b2,pp-pc,kts-pc,er-kts,c0-er,c1-c0,r0-c1,r0-b0]
    rows.append(h)
def pct(v,p):
    v=sorted(v); return v[min(len(v)-1,int(p*len(v)))]
tot=[r[-1] for r in rows]; p99=pct(tot,0.99)
tail=[r for r in rows if r[-1]>=p99]
print(len(rows),'jobs')
print('%-22s %7s %7s %7s %9s'%('hop','p50','p90','p99','tailmean'))
for j,nm in enumerate(names):
    v=[r[j] for r in rows]
    print('%-22s %7.2f %7.2f %7.2f %9.2f'%(nm,pct(v,.5),pct(v,.9),pct(v,.99),sum(r[j] for r in tail)/len(tail)))
ns=[T[i][5] for i in ids]; print('batch size p50',pct(ns,.5),'claim n p50',pct([C[i][2] for i in ids],.5))
