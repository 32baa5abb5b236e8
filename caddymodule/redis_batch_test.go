package caddymodule

import (
	"context"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkRedisBatching measures the module's Redis decisions (one
// token_bucket ask, never rejected) from 1, 8 and 64 concurrent callers,
// each as one round trip ("direct"), all through go-redis's automatic
// pipelining ("pipelined"), and as the module sends them ("module": the
// first directDecisions in flight direct, the others pipelined), and
// reports the 99th percentile of a decision's latency.
//
//	go test -run - -bench RedisBatching -benchtime 20000x -count 3 ./caddymodule
func BenchmarkRedisBatching(b *testing.B) {
	rs := redistest.Start(b, redistest.Options{})
	limit := &model.Limit{Name: "bench", Rate: model.Rate{Quota: 1e9, Period: time.Second}}
	if err := limit.Validate(); err != nil {
		b.Fatal(err)
	}
	asks := []model.Ask{{Limit: limit, Key: "bench", Cost: 1}}
	modes := []struct {
		name   string
		direct int64
	}{{"direct", math.MaxInt64}, {"pipelined", 0}, {"module", directDecisions}}
	for _, callers := range []int{1, 8, 64} {
		for _, m := range modes {
			b.Run(m.name+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
				p, err := newRedisStore(&RedisStoreConfig{Address: rs.Addr, Timeout: caddy.Duration(time.Second)}, m.direct)
				if err != nil {
					b.Fatal(err)
				}
				defer p.Destruct()
				decide(b, p.store.(*redisstore.Store), asks, callers)
			})
		}
	}
}

// decide runs b.N decisions of asks on st from callers goroutines and
// reports the p99 of their latencies.
func decide(b *testing.B, st *redisstore.Store, asks []model.Ask, callers int) {
	ctx := context.Background()
	if err := st.Take(ctx, asks, make([]model.Decision, len(asks))); err != nil {
		b.Fatal(err)
	}
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := 0; g < callers; g++ {
		n := b.N / callers
		if g < b.N%callers {
			n++
		}
		wg.Add(1)
		go func(g, n int) {
			defer wg.Done()
			out := make([]model.Decision, len(asks))
			l := make([]time.Duration, 0, n)
			for i := 0; i < n; i++ {
				t0 := time.Now()
				if err := st.Take(ctx, asks, out); err != nil {
					b.Error(err)
					return
				}
				l = append(l, time.Since(t0))
			}
			lat[g] = l
		}(g, n)
	}
	wg.Wait()
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) > 0 {
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
}

// TestRedisPipelinedLastTokens races 64 callers, each for the tokens of
// 8 keys of burst 10 that never refill, through the module's store with
// every decision pipelined and as the module sends them, on a server and
// on a three-master Cluster (where each batch is split by node): exactly
// 10 admissions per key, each decision answered to its own caller.
func TestRedisPipelinedLastTokens(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	cl := redistest.StartCluster(t, 3)
	limit := &model.Limit{Name: "race", Rate: model.Rate{Quota: 1, Period: time.Hour}, Burst: 10}
	if err := limit.Validate(); err != nil {
		t.Fatal(err)
	}
	stores := []struct {
		name string
		cfg  RedisStoreConfig
	}{
		{"server", RedisStoreConfig{Address: rs.Addr, Timeout: caddy.Duration(2 * time.Second)}},
		{"cluster", RedisStoreConfig{Addresses: cl.Addrs, Timeout: caddy.Duration(2 * time.Second)}},
	}
	for _, s := range stores {
		for _, direct := range []int64{0, directDecisions} {
			cfg := s.cfg
			cfg.Prefix = "race" + strconv.FormatInt(direct, 10) + ":"
			p, err := newRedisStore(&cfg, direct)
			if err != nil {
				t.Fatal(err)
			}
			admitted := make([]int64, 8)
			var wg sync.WaitGroup
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for i := 0; i < 8; i++ {
						k := (g + i) % 8
						asks := []model.Ask{{Limit: limit, Key: "k" + strconv.Itoa(k), Cost: 1}}
						out := make([]model.Decision, 1)
						if err := p.store.Take(context.Background(), asks, out); err != nil {
							t.Error(err)
							return
						}
						if out[0].Allowed {
							atomic.AddInt64(&admitted[k], 1)
						}
					}
				}(g)
			}
			wg.Wait()
			p.Destruct()
			for k, n := range admitted {
				if n != 10 {
					t.Errorf("%s, %d direct: key %d admitted %d times, want 10", s.name, direct, k, n)
				}
			}
		}
	}
}
