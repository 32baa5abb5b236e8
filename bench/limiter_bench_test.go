package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/model"
)

// Both limiters are token buckets of 10⁹ tokens refilled at one per 1.8 s,
// on the real clock: no request is ever rejected, so the benchmarks measure
// keyed lookup and bookkeeping only, and no state expires within a run (a
// charged key is whole again 1.8 s later), so sluice's store
// (which recycles the slots of expired states) holds every key, as the
// baseline's map does.
const (
	benchBurst  = 1e9
	benchPeriod = 1800 * time.Millisecond // per token
)

// limiter decides requests by key.
type limiter interface {
	// caller returns a function that decides one request for key; each
	// goroutine gets its own, so that per-call buffers are not shared.
	caller() func(key string) bool
}

// sluiceLimiter is sluice's MemoryStore with one token_bucket limit.
type sluiceLimiter struct {
	store *core.MemoryStore
	limit *model.Limit
}

func newSluice(b *testing.B) limiter {
	s, err := core.NewMemoryStore(core.MemoryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	l := &model.Limit{Name: "bench", Rate: model.Rate{Quota: 1, Period: benchPeriod}, Burst: benchBurst}
	if err := l.Validate(); err != nil {
		b.Fatal(err)
	}
	return &sluiceLimiter{store: s, limit: l}
}

func (l *sluiceLimiter) caller() func(string) bool {
	asks := []model.Ask{{Limit: l.limit, Cost: 1}}
	out := make([]model.Decision, 1)
	ctx := context.Background()
	return func(key string) bool {
		asks[0].Key = key
		return l.store.Take(ctx, asks, out) == nil && out[0].Allowed
	}
}

// baselineLimiter keys x/time/rate limiters the way Traefik's built-in
// rateLimit middleware does: look the key up under a mutex, create its
// limiter on a miss, unlock, then ask the limiter (which has a mutex of
// its own). It never forgets a key.
type baselineLimiter struct {
	mu       sync.Mutex
	limiters map[string]*rate.Limiter
}

func newBaseline(b *testing.B) limiter {
	return &baselineLimiter{limiters: make(map[string]*rate.Limiter)}
}

func (l *baselineLimiter) caller() func(string) bool {
	return func(key string) bool {
		l.mu.Lock()
		lim, ok := l.limiters[key]
		if !ok {
			lim = rate.NewLimiter(rate.Every(benchPeriod), benchBurst)
			l.limiters[key] = lim
		}
		l.mu.Unlock()
		return lim.Allow()
	}
}

var contenders = []struct {
	name string
	new  func(b *testing.B) limiter
}{
	{"sluice", newSluice},
	{"baseline", newBaseline},
}

// keys returns n distinct keys shaped like client addresses.
func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "198.51." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&0xff)
	}
	return ks
}

// xorshift is a per-goroutine random index generator without shared state.
type xorshift uint64

func (r *xorshift) intn(n int) int {
	x := uint64(*r)
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*r = xorshift(x)
	return int(x % uint64(n))
}

// warm decides one request per key, so that every key's state exists
// before timing starts.
func warm(l limiter, ks []string) {
	allow := l.caller()
	for _, k := range ks {
		allow(k)
	}
}

// BenchmarkHotKey: every request from one client.
func BenchmarkHotKey(b *testing.B) {
	for _, c := range contenders {
		c := c
		b.Run(c.name, func(b *testing.B) {
			allow := c.new(b).caller()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if !allow("203.0.113.7") {
					b.Fatal("rejected")
				}
			}
		})
	}
}

// Benchmark100kKeys: requests from 100,000 clients in random order.
func Benchmark100kKeys(b *testing.B) {
	ks := keys(100000)
	for _, c := range contenders {
		c := c
		b.Run(c.name, func(b *testing.B) {
			l := c.new(b)
			warm(l, ks)
			allow := l.caller()
			r := xorshift(88172645463325252)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				allow(ks[r.intn(len(ks))])
			}
		})
	}
}

// BenchmarkParallel: requests from 100,000 clients in random order, from
// GOMAXPROCS goroutines at once.
func BenchmarkParallel(b *testing.B) {
	ks := keys(100000)
	for _, c := range contenders {
		c := c
		b.Run(c.name, func(b *testing.B) {
			l := c.new(b)
			warm(l, ks)
			var seed uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				allow := l.caller()
				r := xorshift(atomic.AddUint64(&seed, 0x9e3779b97f4a7c15))
				for pb.Next() {
					allow(ks[r.intn(len(ks))])
				}
			})
		})
	}
}
