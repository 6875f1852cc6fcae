// River's fire-to-start at a steady rate, for tests/bench/peers_latency.sh:
// RATE no-op jobs a second (InsertManyFast of RATE/100 every 10 ms, each job
// due at its insert) worked by one client (MaxWorkers W, LISTEN/NOTIFY on,
// FetchCooldown COOLDOWN ms: River's shortest is 1, its default 100; the
// poll interval 50 ms or the cooldown if longer) until N
// are completed; then, from PostgreSQL, attempted_at - scheduled_at per job
// (both the server's clock, as ax's running_at - due_at): p50 / p99 / max in
// ms. usage: riverlatency DSN N RATE [W] [COOLDOWN_MS]  -> one JSON line
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type LatArgs struct{ J int `json:"j"` }

func (LatArgs) Kind() string { return "lat" }

type LatWorker struct {
	river.WorkerDefaults[LatArgs]
}

var done atomic.Int64

func (w *LatWorker) Work(ctx context.Context, job *river.Job[LatArgs]) error { done.Add(1); return nil }

func arg(i int, def int) int {
	if len(os.Args) <= i {
		return def
	}
	v, err := strconv.Atoi(os.Args[i])
	if err != nil || v < 1 {
		fmt.Fprintf(os.Stderr, "riverlatency: argument %d: '%s' is not a count from 1\n", i, os.Args[i])
		os.Exit(2)
	}
	return v
}

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: riverlatency DSN N RATE [WORKERS] [COOLDOWN_MS]")
		os.Exit(2)
	}
	dsn := os.Args[1]
	n, rate, workers, cool := arg(2, 0), arg(3, 0), arg(4, 100), arg(5, 1)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		panic(err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		panic(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		panic(err)
	}
	pool.Exec(ctx, "delete from river_job")
	ws := river.NewWorkers()
	river.AddWorker(ws, &LatWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:       ws,
		FetchCooldown: time.Duration(cool) * time.Millisecond,
		// at least the cooldown (River refuses less); its default is 1 s
		FetchPollInterval: time.Duration(max(cool, 50)) * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	per := rate / 100
	if per < 1 {
		per = 1
	}
	t0 := time.Now()
	for sent, tick := 0, 1; sent < n; tick++ {
		var ps []river.InsertManyParams
		for j := 0; j < per && sent < n; j, sent = j+1, sent+1 {
			ps = append(ps, river.InsertManyParams{Args: LatArgs{J: sent}})
		}
		if _, err := client.InsertManyFast(ctx, ps); err != nil {
			panic(err)
		}
		if wait := time.Until(t0.Add(time.Duration(tick) * 10 * time.Millisecond)); wait > 0 {
			time.Sleep(wait)
		}
	}
	offered := float64(n) / time.Since(t0).Seconds()
	for done.Load() < int64(n) {
		time.Sleep(10 * time.Millisecond)
	}
	for {
		var left int
		pool.QueryRow(ctx, "select count(*) from river_job where state <> 'completed'").Scan(&left)
		if left == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var p50, p99, mx float64
	var c int
	if err := pool.QueryRow(ctx, `select percentile_cont(0.5) within group (order by d),
	        percentile_cont(0.99) within group (order by d), max(d), count(*)
	   from (select extract(epoch from attempted_at - scheduled_at)::float8 * 1000 d from river_job) x`).
		Scan(&p50, &p99, &mx, &c); err != nil {
		panic(err)
	}
	client.Stop(ctx)
	out, _ := json.Marshal(map[string]any{"system": "river", "version": "0.51.2", "jobs": c, "rate": rate,
		"offered_per_s": int(offered), "workers": workers, "fetch_cooldown_ms": cool,
		"fire_start_ms_p50": float64(int(p50*10)) / 10, "fire_start_ms_p99": float64(int(p99*10)) / 10,
		"fire_start_ms_max": float64(int(mx*10)) / 10})
	fmt.Println(string(out))
}
