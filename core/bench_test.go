package core

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/coretest"
)

// The MemoryStore benchmarks decide one request per operation on the real
// clock (SystemClock), for a token bucket of 10⁹ tokens refilled at one
// per 1.8 s: it never rejects within a benchmark, so they measure the store
// and not rejections, and its states stay live (a charged key is whole
// again 1.8 s later), so the store holds every key instead of recycling
// expired slots. bench/ runs the same workloads against a mutex-and-map
// baseline.

// benchKeys returns n distinct keys shaped like client addresses
// ("198.51.<i/256>.<i%256>").
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "198.51." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&0xff)
	}
	return keys
}

// benchRand is a xorshift generator: cheaper than math/rand and without
// shared state, so goroutines do not contend on it.
type benchRand uint64

func (r *benchRand) intn(n int) int {
	x := uint64(*r)
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*r = benchRand(x)
	return int(x % uint64(n))
}

// benchStore returns a store holding up to maxKeys states and a limit it
// never rejects.
func benchStore(b *testing.B, maxKeys int) (*MemoryStore, *model.Limit) {
	s, err := NewMemoryStore(MemoryConfig{MaxKeys: maxKeys})
	if err != nil {
		b.Fatal(err)
	}
	return s, coretest.Limit(b, "t", model.TokenBucket, "2000/h", 1e9, 0)
}

// benchFill decides one request for each key, so that every state exists.
func benchFill(s *MemoryStore, l *model.Limit, keys []string) {
	asks := []model.Ask{{Limit: l, Cost: 1}}
	out := make([]model.Decision, 1)
	for _, k := range keys {
		asks[0].Key = k
		s.Take(context.Background(), asks, out)
	}
}

// BenchmarkMemoryHotKey: every request from one client.
func BenchmarkMemoryHotKey(b *testing.B) {
	s, l := benchStore(b, 1<<17)
	asks := []model.Ask{{Limit: l, Key: "203.0.113.7", Cost: 1}}
	out := make([]model.Decision, 1)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Take(ctx, asks, out)
	}
	if !out[0].Allowed {
		b.Fatal("rejected")
	}
}

// BenchmarkMemory100kKeys: requests from 100,000 clients, in random order.
func BenchmarkMemory100kKeys(b *testing.B) {
	keys := benchKeys(100000)
	s, l := benchStore(b, 1<<18)
	benchFill(s, l, keys)
	asks := []model.Ask{{Limit: l, Cost: 1}}
	out := make([]model.Decision, 1)
	ctx := context.Background()
	r := benchRand(88172645463325252)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		asks[0].Key = keys[r.intn(len(keys))]
		s.Take(ctx, asks, out)
	}
}

// BenchmarkMemoryParallel: requests from 100,000 clients, in random order,
// from GOMAXPROCS goroutines.
func BenchmarkMemoryParallel(b *testing.B) {
	keys := benchKeys(100000)
	s, l := benchStore(b, 1<<18)
	benchFill(s, l, keys)
	var seed uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		asks := []model.Ask{{Limit: l, Cost: 1}}
		out := make([]model.Decision, 1)
		ctx := context.Background()
		r := benchRand(atomic.AddUint64(&seed, 0x9e3779b97f4a7c15))
		for pb.Next() {
			asks[0].Key = keys[r.intn(len(keys))]
			s.Take(ctx, asks, out)
		}
	})
}

// BenchmarkMemoryBytesPerKey fills a store of MaxKeys 1,000,000 with a
// million clients and reports the heap it holds per state ("B/key") and
// the share of the million it holds ("held"; a shard that fills before the
// others forgets some keys). Each operation is then a decision for
// one of the million, at random.
func BenchmarkMemoryBytesPerKey(b *testing.B) {
	const n = 1000000
	keys := benchKeys(n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, l := benchStore(b, n)
	benchFill(s, l, keys)
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := s.Len()
	asks := []model.Ask{{Limit: l, Cost: 1}}
	out := make([]model.Decision, 1)
	ctx := context.Background()
	r := benchRand(2463534242)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		asks[0].Key = keys[r.intn(n)]
		s.Take(ctx, asks, out)
	}
	// After the loop: ResetTimer discards metrics reported before it.
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(held), "B/key")
	b.ReportMetric(float64(held)/n, "held")
}

// BenchmarkMemoryFullLog: admissions into a sliding_window_log that holds
// MaxLogQuota entries, each merged into its newest one.
func BenchmarkMemoryFullLog(b *testing.B) {
	s, clock := memStore(b, 4096)
	l := coretest.Limit(b, "t", model.SlidingWindowLog, "10000/h", 0, 0)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 0.5}}
	out := make([]model.Decision, 1)
	ctx := context.Background()
	for i := 0; i < model.MaxLogQuota; i++ {
		clock.Advance(time.Millisecond)
		s.Take(ctx, asks, out)
	}
	asks[0].Cost = 1e-6
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clock.Advance(time.Microsecond)
		s.Take(ctx, asks, out)
	}
	if !out[0].Allowed {
		b.Fatal("rejected")
	}
}
