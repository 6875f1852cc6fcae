// pg-boss's fire-to-start at a steady rate, for tests/bench/peers_latency.sh:
// RATE no-op jobs a second (inserted RATE/100 every 10 ms, each job due at
// its insert) worked by WORKERS workers (fetch batches of BATCH, polling at
// pg-boss's shortest interval, 0.5 s) until N are completed; then, from
// PostgreSQL, started_on - start_after per job (both the server's clock,
// as ax's running_at - due_at): p50 / p99 / max in ms.
// usage: node pgboss_latency.mjs DSN N RATE [WORKERS] [BATCH]  -> one JSON line
import PgBoss from "pg-boss";
const [dsn, N = "15000", RATE = "1000", W = "4", B = "100"] = process.argv.slice(2);
const n = +N, rate = +RATE;
const boss = new PgBoss({ connectionString: dsn, max: 10 });
boss.on("error", e => console.error(e.message));
await boss.start();
await boss.deleteQueue("lat").catch(() => {});
await boss.createQueue("lat");
let done = 0;
for (let w = 0; w < +W; w++)
  await boss.work("lat", { batchSize: +B, pollingIntervalSeconds: 0.5 }, async jobs => { done += jobs.length; });
const per = Math.max(1, Math.round(rate / 100));
const t0 = performance.now();
let sent = 0, tick = 0;
while (sent < n) {
  const jobs = [];
  for (let j = 0; j < per && sent < n; j++, sent++) jobs.push({ name: "lat", data: { j: sent } });
  await boss.insert(jobs);
  tick++;
  const wait = t0 + tick * 10 - performance.now();
  if (wait > 0) await new Promise(r => setTimeout(r, wait));
}
const offered = n / ((performance.now() - t0) / 1000);
while (done < n) await new Promise(r => setTimeout(r, 20));
while (true) {
  const r = await boss.getDb().executeSql("select count(*)::int n from pgboss.job where name='lat' and state <> 'completed'");
  if (r.rows[0].n === 0) break;
  await new Promise(r => setTimeout(r, 20));
}
const q = await boss.getDb().executeSql(
  `select percentile_cont(0.5) within group (order by d) p50, percentile_cont(0.99) within group (order by d) p99,
          max(d) mx, count(*)::int c
     from (select extract(epoch from started_on - start_after) * 1000 d from pgboss.job where name='lat') x`);
const row = q.rows[0];
await boss.stop({ graceful: false, wait: false });
console.log(JSON.stringify({ system: "pg-boss", version: "10", jobs: row.c, rate, offered_per_s: Math.round(offered),
  workers: +W, batch: +B, fire_start_ms_p50: +(+row.p50).toFixed(1), fire_start_ms_p99: +(+row.p99).toFixed(1),
  fire_start_ms_max: +(+row.mx).toFixed(1) }));
process.exit(0);
