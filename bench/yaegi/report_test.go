package yaegibench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
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

// redisReport measures each of redisCases on a real redis-server through
// the plugin, and the same decision through the compiled redisstore.Store and
// RESP client, in alternating rounds: the median of the rounds'
// differences is what the interpreter adds to the round trip.
func redisReport(t *testing.T, rounds, n int, out func(string, ...any)) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	client, err := resp.New(ctx, resp.Options{Addr: srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.New(redisstore.Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range redisCases {
		h, nx, req := build(t, onRedis(c, srv.Addr), 2000+i)
		if c.redisFloor {
			m := measure(h, nx, req, n/10, rounds, n)
			out("%-40s %9.2f %8.0f", c.name, m.ns/1e3, m.allocs)
			continue
		}
		if c.callers != 0 {
			if !raceDetector {
				m := measureParallel(h, nx, req, c.callers, rounds, n/c.callers)
				out("%-40s %9.2f %8.0f", c.name+" (plugin, wall)", m.ns/1e3, m.allocs)
			}
			continue
		}
		measure(h, nx, req, n/10, 1, 1)
		l := &model.Limit{Name: "default", Rate: model.Rate{Quota: 1e9, Period: time.Second}, Burst: 1e9}
		if c.rejected {
			l = &model.Limit{Name: "default", Rate: model.Rate{Quota: 1, Period: time.Hour}, Burst: 1}
		}
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		asks := []model.Ask{{Limit: l, Key: "compiled\x00" + strconv.Itoa(i), Cost: 1}}
		dec := make([]model.Decision, 1)
		take := func() {
			if err := store.Take(ctx, asks, dec); err != nil || dec[0].Allowed == c.rejected {
				t.Fatalf("compiled Redis decision: %v %+v", err, dec[0])
			}
		}
		if c.rejected {
			_ = store.Take(ctx, asks, dec) // empties the bucket
		}
		for j := 0; j < n/10; j++ {
			take()
		}
		var plugin, compiled, share []float64
		allocs := 0.0
		for r := 0; r < rounds; r++ {
			m := measure(h, nx, req, 0, 1, n)
			t0 := time.Now()
			for j := 0; j < n; j++ {
				take()
			}
			el := float64(time.Since(t0).Nanoseconds()) / float64(n)
			plugin, compiled, share = append(plugin, m.ns), append(compiled, el), append(share, m.ns-el)
			if r == 0 || m.allocs < allocs {
				allocs = m.allocs
			}
		}
		out("%-40s %9.2f %8.0f", c.name+" (plugin)", median(plugin)/1e3, allocs)
		out("%-40s %9.2f %8s", "  same decision, compiled store", median(compiled)/1e3, "")
		out("%-40s %9.2f %8s", "  interpreter's share (median of rounds)", median(share)/1e3, "")
	}
}

// median returns the median of xs, which it sorts.
func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

// memoryReport measures the heap that an interpreter holds, after a
// collection, once it has imported the trivial plugin, the floor plugin
// and then sluice's plugin and built one middleware of each limiter, as
// Traefik does at start-up: the memory the interpreted code itself costs
// an idle Traefik, whatever the traffic.
func memoryReport(t *testing.T, out func(string, ...any)) {
	dir := gopath(t)
	h0 := liveHeapMB()
	trivial := load(t, dir, trivialImport)
	h1 := liveHeapMB()
	floor := load(t, dir, floorImport).handler(t, open, "api@file", &next{})
	h2 := liveHeapMB()
	sluice := load(t, dir, pluginImport).handler(t, open, "api@file", &next{})
	h3 := liveHeapMB()
	out("live heap of the interpreted code (MB): trivial plugin %.1f, floor %.1f, sluice %.1f (imported, one New)", h1-h0, h2-h1, h3-h2)
	runtime.KeepAlive(trivial)
	runtime.KeepAlive(floor)
	runtime.KeepAlive(sluice)
}

// liveHeapMB is the heap in use after a full collection, in MB.
func liveHeapMB() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}
