package core

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
	"github.com/sluicehq/sluice/internal/testclock"
)

func newTestRedisStore(t *testing.T, client model.Scripter, cluster bool) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(redisstore.Config{Client: client, Cluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newClockedRedisStore returns a redisstore.Store of client whose scripts
// decide at clock's instants.
func newClockedRedisStore(t *testing.T, client model.Scripter, clock *testclock.Clock) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(redisstore.Config{Client: client, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRedisStoreMatchesMemoryStore drives a redisstore.Store and a MemoryStore
// with the same pseudo-random requests, refunds and clock steps (some
// backwards) and requires identical decisions: the scripts compute in the
// same nanoseconds and the same floating-point operations as Limit.Decide.
func TestRedisStoreMatchesMemoryStore(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	clock := testclock.New(testclock.Epoch)
	rs := newClockedRedisStore(t, resptest.Client(t, srv.Addr, 1), clock)
	ms, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	limits := []*model.Limit{
		coretest.Limit(t, "tb", model.TokenBucket, "10/s", 5, 0),
		coretest.Limit(t, "tb2", model.TokenBucket, "2/s", 0, 0),
		coretest.Limit(t, "lb", model.LeakyBucket, "5/s", 5, 0),
		coretest.Limit(t, "lbd", model.LeakyBucket, "10/s", 10, 300*time.Millisecond),
		coretest.Limit(t, "fw", model.FixedWindow, "10/m", 0, 0),
		coretest.Limit(t, "fw2", model.FixedWindow, "5/s", 0, 0),
		coretest.Limit(t, "swc", model.SlidingWindowCounter, "10/m", 0, 0),
		coretest.Limit(t, "swc2", model.SlidingWindowCounter, "4/s", 0, 0),
		coretest.Limit(t, "swl", model.SlidingWindowLog, "5/m", 0, 0),
		coretest.Limit(t, "swl2", model.SlidingWindowLog, "3/s", 0, 0),
		coretest.Limit(t, "tb3", model.TokenBucket, "3/s", 2, 0),
		coretest.Limit(t, "lb3", model.LeakyBucket, "3/s", 4, 500*time.Millisecond),
		coretest.Limit(t, "fw7", model.FixedWindow, "7/1500ms", 0, 0),
		coretest.Limit(t, "swc7", model.SlidingWindowCounter, "7/1500ms", 0, 0),
		coretest.Limit(t, "swl7", model.SlidingWindowLog, "7/1500ms", 0, 0),
		// Token buckets that lend (MaxDelay), as the Traefik plugin's are
		// by default, and leaky buckets with a fractional carry.
		coretest.Limit(t, "tbd", model.TokenBucket, "10/s", 1, 50*time.Millisecond),
		coretest.Limit(t, "tbd2", model.TokenBucket, "7/s", 3, 500*time.Millisecond),
		coretest.Limit(t, "lb7", model.LeakyBucket, "7/s", 0, 0),
	}
	costs := []float64{0.1, 0.5, 1, 1, 1, 2, 2.5}
	keys := []string{"a", "b"}
	rnd := rand.New(rand.NewSource(1))
	ctx := context.Background()
	admitted := map[string][]model.Decision{} // the last few admissions of each limit and key
	for op := 0; op < 3000; op++ {
		switch n := rnd.Intn(100); {
		case n < 5:
			clock.Advance(-time.Duration(rnd.Intn(2000)) * time.Millisecond)
		case n < 60:
			clock.Advance(time.Duration(rnd.Intn(400)) * time.Millisecond)
		}
		var asks []model.Ask
		used := map[string]bool{}
		for i := 1 + rnd.Intn(3); i > 0; i-- {
			l, k := limits[rnd.Intn(len(limits))], keys[rnd.Intn(len(keys))]
			if used[l.Name+k] {
				continue
			}
			used[l.Name+k] = true
			asks = append(asks, model.Ask{Limit: l, Key: coretest.Nonce + "/" + k, Cost: costs[rnd.Intn(len(costs))]})
		}
		if rnd.Intn(100) < 15 {
			// Each ask's last admission (of any cost), or an older
			// one, or none.
			charged := make([]model.Decision, len(asks))
			for i := range asks {
				if past := admitted[asks[i].Limit.Name+asks[i].Key]; len(past) > 0 {
					charged[i] = past[len(past)-1-rnd.Intn(len(past))]
				}
			}
			if err := rs.Refund(ctx, asks, charged); err != nil {
				t.Fatalf("op %d: Redis Refund: %v", op, err)
			}
			ms.Refund(ctx, asks, charged)
			continue
		}
		got, want := make([]model.Decision, len(asks)), make([]model.Decision, len(asks))
		if err := rs.Take(ctx, asks, got); err != nil {
			t.Fatalf("op %d: Redis Take: %v", op, err)
		}
		ms.Take(ctx, asks, want)
		for i := range asks {
			if got[i] != want[i] {
				t.Fatalf("op %d, ask %d (%s, key %s, cost %v) at +%v:\nredis:  %+v\nmemory: %+v", op, i,
					asks[i].Limit.Name, asks[i].Key, asks[i].Cost, time.Duration(clock.Now()-testclock.Epoch), got[i], want[i])
			}
			if k := asks[i].Limit.Name + asks[i].Key; got[i].Allowed {
				if admitted[k] = append(admitted[k], got[i]); len(admitted[k]) > 4 {
					admitted[k] = admitted[k][1:]
				}
			}
		}
	}
}

// TestRedisStoreRateChange: a limit whose rate changes from 10/m to 10/h
// under the same name and algorithm decides as a MemoryStore does, admits
// again once the new rate allows, and no key lives longer than two hours
// and a second. Windows were once stored as window numbers, which a longer
// period read as thousands of years ahead: every request rejected, for ever.
func TestRedisStoreRateChange(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 1)
	ctx := context.Background()
	const maxPTTL = int64(2*time.Hour/time.Millisecond) + 1000
	checkPTTL := func(t *testing.T, s *redisstore.Store, l *model.Limit, key string) {
		t.Helper()
		names := []string{s.StateKey(l, key)}
		if l.Algorithm == model.SlidingWindowLog {
			names = append(names, names[0]+":log")
		}
		for _, n := range names {
			v, err := client.Do(ctx, "PTTL", n)
			if ms, ok := v.(int64); err != nil || !ok || ms <= 0 || ms > maxPTTL {
				t.Errorf("PTTL %s = %v, %v; want in (0, %d]", n, v, err, maxPTTL)
			}
		}
	}
	for _, alg := range model.Algorithms {
		alg := alg
		perMinute := coretest.Limit(t, "rate", alg, "10/m", 0, 0)
		perHour := coretest.Limit(t, "rate", alg, "10/h", 0, 0)
		longest := time.Hour
		if alg == model.SlidingWindowCounter {
			longest = 2 * time.Hour // the count moves to the previous window
		}
		t.Run(string(alg)+"/memory", func(t *testing.T) {
			clock := testclock.New(testclock.Epoch)
			rs := newClockedRedisStore(t, client, clock)
			ms, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			key := coretest.Nonce + "/rate/" + string(alg)
			take := func(l *model.Limit) model.Decision {
				t.Helper()
				got, want := coretest.Take(t, rs, l, key, 1), coretest.Take(t, ms, l, key, 1)
				if got != want {
					t.Fatalf("%s at +%v:\nredis:  %+v\nmemory: %+v", l.Rate, time.Duration(clock.Now()-testclock.Epoch), got, want)
				}
				return got
			}
			for i := 0; i < 10; i++ {
				take(perMinute)
			}
			clock.Advance(30 * time.Second)
			for admitted := 0; admitted < 3; {
				d := take(perHour)
				checkPTTL(t, rs, perHour, key)
				if d.Allowed {
					admitted++
					continue
				}
				if d.RetryAfter > longest {
					t.Fatalf("10/h: RetryAfter %v, want at most %v", d.RetryAfter, longest)
				}
				clock.Advance(d.RetryAfter)
				if d := take(perHour); !d.Allowed {
					t.Fatalf("10/h: rejected after waiting RetryAfter: %+v", d)
				}
				admitted++
			}
		})
		t.Run(string(alg)+"/redis_clock", func(t *testing.T) {
			s := newTestRedisStore(t, client, false)
			key := coretest.Nonce + "/rate-clock/" + string(alg)
			for i := 0; i < 4; i++ {
				coretest.Take(t, s, perMinute, key, 1)
			}
			// However the hour and minute windows align, 4 of 10 are taken.
			if d := coretest.Take(t, s, perHour, key, 1); !d.Allowed || d.Reset > longest {
				t.Errorf("10/h after 4 at 10/m: %+v, want allowed with a Reset of at most %v", d, longest)
			}
			checkPTTL(t, s, perHour, key)
		})
	}
}
