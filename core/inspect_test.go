package core

import (
	"context"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// inspectLimits are limits of every algorithm, with and without delays.
func inspectLimits(t *testing.T) []*Limit {
	return []*Limit{
		redisTestLimit(t, "tb", TokenBucket, "10/s", 5, 0),
		redisTestLimit(t, "tbd", TokenBucket, "7/s", 3, 500*time.Millisecond),
		redisTestLimit(t, "lb", LeakyBucket, "5/s", 5, 0),
		redisTestLimit(t, "lbd", LeakyBucket, "3/s", 4, 500*time.Millisecond),
		redisTestLimit(t, "fw", FixedWindow, "5/s", 0, 0),
		redisTestLimit(t, "swc", SlidingWindowCounter, "4/s", 0, 0),
		redisTestLimit(t, "swl", SlidingWindowLog, "3/s", 0, 0),
	}
}

// testInspector drives a store with random requests and clock steps and
// checks after each that Peek reports, without charging, what the
// decision reported (remaining, reset, next), and that Delete makes the
// limit whole.
func testInspector(t *testing.T, newStore func(t *testing.T, clock *fakeClock) Store) {
	ctx := context.Background()
	for _, l := range inspectLimits(t) {
		t.Run(string(l.Algorithm)+"/"+l.Name, func(t *testing.T) {
			clock := &fakeClock{now: confEpoch}
			st := newStore(t, clock)
			in := st.(Inspector)
			key := redisNonce + "/" + t.Name()
			if ks, err := in.Peek(ctx, l, key); err != nil || ks != (KeyState{Remaining: l.Capacity()}) {
				t.Fatalf("a key never seen: %+v, %v; want absent and whole", ks, err)
			}
			rnd := rand.New(rand.NewSource(3))
			costs := []float64{0.5, 1, 1, 2}
			for op := 0; op < 200; op++ {
				clock.Advance(time.Duration(rnd.Intn(300)) * time.Millisecond)
				d := redisTestTake(t, st, l, key, costs[rnd.Intn(len(costs))])
				ks, err := in.Peek(ctx, l, key)
				if err != nil {
					t.Fatal(err)
				}
				again, _ := in.Peek(ctx, l, key)
				if again != ks {
					t.Fatalf("op %d: a second Peek %+v differs from the first %+v: Peek charged", op, again, ks)
				}
				if !ks.Present {
					if d.Remaining != l.Capacity() {
						t.Fatalf("op %d: absent after %+v", op, d)
					}
					continue
				}
				if ks.Remaining != d.Remaining || ks.Reset != d.Reset || ks.Next != d.Next {
					t.Fatalf("op %d at +%v: Peek %+v, decision %+v", op, time.Duration(clock.Now()-confEpoch), ks, d)
				}
				delays := l.Algorithm == LeakyBucket || l.MaxDelay > 0
				if ks.InFlight < 0 || ks.InFlight > 0 && !delays {
					t.Fatalf("op %d: in flight %v for %s", op, ks.InFlight, l.Name)
				}
			}
			// Spend the limit, then delete it: whole again.
			for redisTestTake(t, st, l, key, 1).Allowed {
			}
			held, err := in.Delete(ctx, l, key)
			if err != nil || !held {
				t.Fatalf("Delete of a spent key: %v, %v; want true", held, err)
			}
			if ks, err := in.Peek(ctx, l, key); err != nil || ks != (KeyState{Remaining: l.Capacity()}) {
				t.Fatalf("after Delete: %+v, %v; want absent and whole", ks, err)
			}
			if d := redisTestTake(t, st, l, key, 1); !d.Allowed {
				t.Fatalf("after Delete, a request is rejected: %+v", d)
			}
			if held, err := in.Delete(ctx, l, key+"/other"); err != nil || held {
				t.Fatalf("Delete of a key never seen: %v, %v; want false", held, err)
			}
			clock.Advance(time.Hour)
			if ks, _ := in.Peek(ctx, l, key); ks.Present {
				t.Fatalf("an hour later: %+v, want absent (expired)", ks)
			}
		})
	}
}

func TestMemoryStoreInspector(t *testing.T) {
	testInspector(t, func(t *testing.T, clock *fakeClock) Store {
		s, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestRedisStoreInspector(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := newRespClient(t, srv.Addr, 2)
	for _, readable := range []bool{false, true} {
		testInspector(t, func(t *testing.T, clock *fakeClock) Store {
			s, err := NewRedisStore(RedisConfig{Client: client, ReadableKeys: readable})
			if err != nil {
				t.Fatal(err)
			}
			s.clock = clock.Now
			return s
		})
	}
}

// TestInspectorInFlight checks the cost a leaky bucket queues and a token
// bucket lends, in memory and in Redis.
func TestInspectorInFlight(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	clock := &fakeClock{now: confEpoch}
	rs := newTestRedisStore(t, newRespClient(t, srv.Addr, 1), false)
	rs.clock = clock.Now
	ms, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	lb := redisTestLimit(t, "lbq", LeakyBucket, "10/s", 5, 0)
	tb := redisTestLimit(t, "tbq", TokenBucket, "10/s", 2, time.Second)
	ctx := context.Background()
	for _, st := range []Store{ms, rs} {
		key := redisNonce + "/inflight"
		for i := 0; i < 3; i++ {
			redisTestTake(t, st, lb, key, 1)
		}
		for i := 0; i < 5; i++ { // two from the bucket, three lent
			redisTestTake(t, st, tb, key, 1)
		}
		in := st.(Inspector)
		if ks, _ := in.Peek(ctx, lb, key); ks.InFlight != 3 || ks.Reset != 300*time.Millisecond {
			t.Errorf("%T: leaky bucket %+v, want 3 in flight, reset 300ms", st, ks)
		}
		if ks, _ := in.Peek(ctx, tb, key); ks.InFlight != 3 || ks.Remaining != 0 {
			t.Errorf("%T: token bucket %+v, want 3 in flight, none remaining", st, ks)
		}
	}
}

// TestRedisStoreCountKeys counts a limit's states, the log lists left out.
func TestRedisStoreCountKeys(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := newRespClient(t, srv.Addr, 1)
	s, err := NewRedisStore(RedisConfig{Client: client, Prefix: "count*[x]:"})
	if err != nil {
		t.Fatal(err)
	}
	// An hour, so that no key expires while the test runs.
	l := redisTestLimit(t, "swl", SlidingWindowLog, "3/h", 0, 0)
	other := redisTestLimit(t, "swl", FixedWindow, "3/h", 0, 0)
	for i := 0; i < 2500; i++ {
		redisTestTake(t, s, l, "k"+strings.Repeat("x", i%7)+strconv.Itoa(i), 1)
	}
	redisTestTake(t, s, other, "k", 1)
	ctx := context.Background()
	if n, complete, err := s.CountKeys(ctx, l, 1000000); err != nil || !complete || n != 2500 {
		t.Errorf("CountKeys: %d, %v, %v; want 2500, complete", n, complete, err)
	}
	if n, complete, err := s.CountKeys(ctx, l, 1000); err != nil || complete || n > 2500 {
		t.Errorf("CountKeys with a budget of 1000 keys: %d, %v, %v; want incomplete", n, complete, err)
	}
}

// TestRedisStoreInspectorCluster inspects and deletes states on a Redis
// Cluster, where a state's keys share a slot; counting is refused.
func TestRedisStoreInspectorCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cs := newClusterScripter(t, cluster)
	testInspector(t, func(t *testing.T, clock *fakeClock) Store {
		s := newTestRedisStore(t, cs, true)
		s.clock = clock.Now
		return s
	})
	s := newTestRedisStore(t, cs, true)
	if _, _, err := s.CountKeys(context.Background(), inspectLimits(t)[0], 1000); err == nil {
		t.Error("CountKeys on a Cluster: no error")
	}
}
