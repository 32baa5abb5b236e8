package yaegibench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/resp"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestYaegiCostReport prints, for every case, the time and allocations of
// one request as Traefik pays them, beside the trivial plugin measured in
// the same run, and for the Redis store the round trip of the same
// decision made by compiled code. It asserts nothing about time. With
// SLUICE_COST_REPORT set it measures 7 rounds of 4,000 requests per case
// and prints the table:
//
//	SLUICE_COST_REPORT=1 go test -count=1 -run TestYaegiCostReport ./bench/yaegi
//
// Without it (as in CI, under -race) one short round checks that every
// case runs, and -v shows its rough figures.
func TestYaegiCostReport(t *testing.T) {
	rounds, n := 1, 200
	if os.Getenv("SLUICE_COST_REPORT") != "" {
		rounds, n = 7, 4000
	}
	var lines []string
	out := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		lines = append(lines, line)
		t.Log(line)
	}
	out("%-40s %9s %8s %9s", "case (Yaegi v0.16.1, called from compiled code)", "µs/req", "allocs", "× trivial")
	var trivial float64
	for i, c := range memoryCases {
		h, nx, req := build(t, c, 1000+i)
		m := measure(h, nx, req, n/10, rounds, n)
		if c.trivial {
			trivial = m.ns
		}
		out("%-40s %9.2f %8.0f %9.1f", c.name, m.ns/1e3, m.allocs, m.ns/trivial)
	}
	redisReport(t, rounds, n/4, out)
	memoryReport(t, out)
	if os.Getenv("SLUICE_COST_REPORT") != "" {
		fmt.Println(strings.Join(lines, "\n"))
	}
}

// redisReport measures an allowed token_bucket request on a real
// redis-server through the plugin, and the same decision through the
// compiled RedisStore and RESP client: their difference is what the
// interpreter adds to the round trip.
func redisReport(t *testing.T, rounds, n int, out func(string, ...any)) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := with(open, "redis", map[string]any{"endpoints": []any{srv.Addr}})
	h, nx, req := build(t, pluginCase{name: "redis", config: cfg, remote: ipv4}, 2000)
	m := measure(h, nx, req, n/10, rounds, n)

	ctx := context.Background()
	client, err := resp.New(ctx, resp.Options{Addr: srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	store, err := core.NewRedisStore(core.RedisConfig{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	l := &core.Limit{Name: "default", Rate: core.Rate{Quota: 1e9, Period: time.Second}, Burst: 1e9}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	asks := []core.Ask{{Limit: l, Key: "compiled\x00192.0.2.1", Cost: 1}}
	dec := make([]core.Decision, 1)
	var best time.Duration
	for r := 0; r < rounds; r++ {
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if err := store.Take(ctx, asks, dec); err != nil || !dec[0].Allowed {
				t.Fatalf("compiled Redis decision: %v %+v", err, dec[0])
			}
		}
		if el := time.Since(t0) / time.Duration(n); r == 0 || el < best {
			best = el
		}
	}
	rtt := float64(best.Nanoseconds())
	out("%-40s %9.2f %8.0f", "redis token_bucket allowed (plugin)", m.ns/1e3, m.allocs)
	out("%-40s %9.2f %8s", "  same decision, compiled store", rtt/1e3, "")
	out("%-40s %9.2f %8s", "  interpreter's share", (m.ns-rtt)/1e3, "")
}

// memoryReport measures the heap that an interpreter holds, after a
// collection, once it has imported the trivial plugin and then sluice's
// plugin and built one middleware, as Traefik does at start-up: the memory
// the interpreted code itself costs an idle Traefik, whatever the traffic.
func memoryReport(t *testing.T, out func(string, ...any)) {
	dir := gopath(t)
	h0 := liveHeapMB()
	trivial := load(t, dir, trivialImport)
	h1 := liveHeapMB()
	p := load(t, dir, pluginImport)
	h := p.handler(t, open, "api@file", &next{})
	h2 := liveHeapMB()
	out("live heap of the interpreted code (MB): trivial plugin %.1f, sluice %.1f (imported, one New)", h1-h0, h2-h1)
	runtime.KeepAlive(trivial)
	runtime.KeepAlive(h)
}

// liveHeapMB is the heap in use after a full collection, in MB.
func liveHeapMB() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}
