package inspect

import (
	"context"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// inspectScale stretches the periods of inspectLimits and testInspector's
// clock steps: 1, or 60 with -short (under Yaegi, where a request can take
// longer than a second of real time, in which Redis would expire a state
// the fake clock still holds).
func inspectScale() time.Duration {
	if testing.Short() {
		return 60
	}
	return 1
}

// inspectLimits are limits of every algorithm, with and without delays.
func inspectLimits(t *testing.T) []*model.Limit {
	unit := "/" + (inspectScale() * time.Second).String()
	delay := inspectScale() * 500 * time.Millisecond
	return []*model.Limit{
		testLimit(t, "tb", model.TokenBucket, "10"+unit, 5, 0),
		testLimit(t, "tbd", model.TokenBucket, "7"+unit, 3, delay),
		testLimit(t, "lb", model.LeakyBucket, "5"+unit, 5, 0),
		testLimit(t, "lbd", model.LeakyBucket, "3"+unit, 4, delay),
		testLimit(t, "fw", model.FixedWindow, "5"+unit, 0, 0),
		testLimit(t, "swc", model.SlidingWindowCounter, "4"+unit, 0, 0),
		testLimit(t, "swl", model.SlidingWindowLog, "3"+unit, 0, 0),
	}
}

// testInspector drives a store with random requests and clock steps and
// checks after each that Peek reports, without charging, what the
// decision reported (remaining, reset, next), and that Delete makes the
// limit whole.
func testInspector(t *testing.T, newStore func(t *testing.T, clock *testclock.Clock) model.Store) {
	ctx := context.Background()
	for _, l := range inspectLimits(t) {
		t.Run(string(l.Algorithm)+"/"+l.Name, func(t *testing.T) {
			clock := testclock.New(testclock.Epoch)
			st := newStore(t, clock)
			in := inspectorOf(t, st)
			key := redisNonce + "/" + t.Name()
			if ks, err := in.Peek(ctx, l, key); err != nil || ks != (KeyState{Remaining: l.Capacity()}) {
				t.Fatalf("a key never seen: %+v, %v; want absent and whole", ks, err)
			}
			rnd := rand.New(rand.NewSource(3))
			costs := []float64{0.5, 1, 1, 2}
			for op := 0; op < 200; op++ {
				clock.Advance(time.Duration(rnd.Intn(300)) * inspectScale() * time.Millisecond)
				d := testTake(t, st, l, key, costs[rnd.Intn(len(costs))])
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
					t.Fatalf("op %d at +%v: Peek %+v, decision %+v", op, time.Duration(clock.Now()-testclock.Epoch), ks, d)
				}
				delays := l.Algorithm == model.LeakyBucket || l.MaxDelay > 0
				if ks.Queued < 0 || ks.Queued > 0 && !delays {
					t.Fatalf("op %d: in flight %v for %s", op, ks.Queued, l.Name)
				}
			}
			// Spend the limit, then delete it: whole again.
			for testTake(t, st, l, key, 1).Allowed {
			}
			held, err := in.Delete(ctx, l, key)
			if err != nil || !held {
				t.Fatalf("Delete of a spent key: %v, %v; want true", held, err)
			}
			if ks, err := in.Peek(ctx, l, key); err != nil || ks != (KeyState{Remaining: l.Capacity()}) {
				t.Fatalf("after Delete: %+v, %v; want absent and whole", ks, err)
			}
			if d := testTake(t, st, l, key, 1); !d.Allowed {
				t.Fatalf("after Delete, a request is rejected: %+v", d)
			}
			if held, err := in.Delete(ctx, l, key+"/other"); err != nil || held {
				t.Fatalf("Delete of a key never seen: %v, %v; want false", held, err)
			}
			clock.Advance(inspectScale() * time.Hour)
			if ks, _ := in.Peek(ctx, l, key); ks.Present {
				t.Fatalf("%v later: %+v, want absent (expired)", inspectScale()*time.Hour, ks)
			}
		})
	}
}

func TestMemoryStoreInspector(t *testing.T) {
	testInspector(t, func(t *testing.T, clock *testclock.Clock) model.Store {
		s, err := core.NewMemoryStore(core.MemoryConfig{Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestRedisStoreInspector(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 2)
	for _, readable := range []bool{false, true} {
		testInspector(t, func(t *testing.T, clock *testclock.Clock) model.Store {
			s, err := redisstore.New(redisstore.Config{Client: client, ReadableKeys: readable, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	}
}

// clockedStores returns a clock at testclock.Epoch and two stores on it:
// one in memory and one on a new Redis server.
func clockedStores(t *testing.T) (*testclock.Clock, []model.Store) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	clock := testclock.New(testclock.Epoch)
	rs := newTestRedisStore(t, resptest.Client(t, srv.Addr, 1), false, clock.Now)
	ms, err := core.NewMemoryStore(core.MemoryConfig{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return clock, []model.Store{ms, rs}
}

// TestInspectorQueued checks the cost a leaky bucket queues and a token
// bucket lends, in memory and in Redis.
func TestInspectorQueued(t *testing.T) {
	_, stores := clockedStores(t)
	lb := testLimit(t, "lbq", model.LeakyBucket, "10/s", 5, 0)
	tb := testLimit(t, "tbq", model.TokenBucket, "10/s", 2, time.Second)
	ctx := context.Background()
	for _, st := range stores {
		key := redisNonce + "/queued"
		for i := 0; i < 3; i++ {
			testTake(t, st, lb, key, 1)
		}
		for i := 0; i < 5; i++ { // two from the bucket, three lent
			testTake(t, st, tb, key, 1)
		}
		in := inspectorOf(t, st)
		if ks, _ := in.Peek(ctx, lb, key); ks.Queued != 3 || ks.Reset != 300*time.Millisecond {
			t.Errorf("%T: leaky bucket %+v, want 3 queued, reset 300ms", st, ks)
		}
		if ks, _ := in.Peek(ctx, tb, key); ks.Queued != 3 || ks.Remaining != 0 {
			t.Errorf("%T: token bucket %+v, want 3 lent, none remaining", st, ks)
		}
	}
}

// TestRedisStoreCountKeys counts a limit's states, the log lists left out.
func TestRedisStoreCountKeys(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 1)
	s, err := redisstore.New(redisstore.Config{Client: client, Prefix: "count*[x]:"})
	if err != nil {
		t.Fatal(err)
	}
	// An hour, so that no key expires while the test runs.
	l := testLimit(t, "swl", model.SlidingWindowLog, "3/h", 0, 0)
	other := testLimit(t, "swl", model.FixedWindow, "3/h", 0, 0)
	for i := 0; i < 2500; i++ {
		testTake(t, s, l, "k"+strings.Repeat("x", i%7)+strconv.Itoa(i), 1)
	}
	testTake(t, s, other, "k", 1)
	ctx := context.Background()
	if n, complete, err := CountKeys(ctx, s, l, 1000000); err != nil || !complete || n != 2500 {
		t.Errorf("CountKeys: %d, %v, %v; want 2500, complete", n, complete, err)
	}
	if n, complete, err := CountKeys(ctx, s, l, 1000); err != nil || complete || n > 2500 {
		t.Errorf("CountKeys with a budget of 1000 keys: %d, %v, %v; want incomplete", n, complete, err)
	}
}

// TestRedisStoreInspectorCluster inspects and deletes states on a Redis
// Cluster, where a state's keys share a slot; counting is refused.
func TestRedisStoreInspectorCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cs := resptest.NewClusterScripter(t, cluster.Addrs)
	testInspector(t, func(t *testing.T, clock *testclock.Clock) model.Store {
		return newTestRedisStore(t, cs, true, clock.Now)
	})
	s := newTestRedisStore(t, cs, true, nil)
	if _, _, err := CountKeys(context.Background(), s, inspectLimits(t)[0], 1000); err == nil {
		t.Error("CountKeys on a Cluster: no error")
	}
}

// TestInspectorInFlight checks the requests in flight Peek reports for a
// limit with a rate and max_in_flight and for one of requests in flight
// only, in memory and in Redis, and that Delete leaves their slots.
func TestInspectorInFlight(t *testing.T) {
	ms, err := core.NewMemoryStore(core.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	rs := newTestRedisStore(t, resptest.Client(t, srv.Addr, 16), false, nil)
	for _, st := range []model.Store{ms, rs} {
		rated := validLimit(t, model.Limit{Name: "peekrated", Rate: testRate(t, "100/h"), MaxInFlight: 3}) // refills 0.03 a second
		only := validLimit(t, model.Limit{Name: "peekonly", MaxInFlight: 3})
		g := flightGate(t, st, time.Minute, rated, only)
		key := redisNonce + "/flight"
		asks := []model.Ask{{Limit: rated, Key: key, Cost: 1}, {Limit: only, Key: key, Cost: 1}}
		var held []*core.Slots
		for i := 0; i < 2; i++ {
			v := g.Decide(ctx, asks)
			if v.Slots == nil {
				t.Fatalf("%T: request %d holds no slot: %+v", st, i, v)
			}
			held = append(held, v.Slots)
		}
		in := inspectorOf(t, st)
		if ks, err := in.Peek(ctx, rated, key); err != nil || !ks.Present || ks.InFlight != 2 || ks.Remaining < 98 || ks.Remaining > 98.1 {
			t.Errorf("%T: rated %+v, %v; want present, 2 in flight, 98 remaining", st, ks, err)
		}
		if ks, err := in.Peek(ctx, only, key); err != nil || !ks.Present || ks.InFlight != 2 || ks.Remaining != 1 {
			t.Errorf("%T: in flight only %+v, %v; want present, 2 in flight, 1 remaining", st, ks, err)
		}
		if ok, err := in.Delete(ctx, only, key); ok || err != nil {
			t.Errorf("%T: Delete of a limit of requests in flight only = %v, %v; want false, nil", st, ok, err)
		}
		if ok, err := in.Delete(ctx, rated, key); !ok || err != nil {
			t.Errorf("%T: Delete = %v, %v; want true, nil", st, ok, err)
		}
		if ks, _ := in.Peek(ctx, rated, key); ks.Present || ks.InFlight != 2 || ks.Remaining != 100 {
			t.Errorf("%T: after Delete %+v; want the rate whole and the 2 slots held", st, ks)
		}
		for _, s := range held {
			s.Release()
		}
		if ks, _ := in.Peek(ctx, only, key); ks.Present || ks.InFlight != 0 || ks.Remaining != 3 {
			t.Errorf("%T: after the releases %+v; want none in flight, 3 remaining", st, ks)
		}
	}
}

// TestInspectorWholeIsAbsent: a key whose limit is whole again reads as
// absent, as a key never seen does, although the store may still hold its
// state: a rejected request keeps a memory state alive past the instant
// its limit is whole. The limits of every algorithm are spent, asked once
// more (rejected) and then read as the clock steps until the state
// expires: Present is whether the limit is short of whole (Reset > 0).
func TestInspectorWholeIsAbsent(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 1)
	ctx := context.Background()
	for _, l := range inspectLimits(t) {
		for _, store := range []string{"memory", "redis"} {
			clock := testclock.New(testclock.Epoch + 100*int64(time.Millisecond))
			var st model.Store
			if store == "memory" {
				ms, err := core.NewMemoryStore(core.MemoryConfig{Clock: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				st = ms
			} else {
				st = newTestRedisStore(t, client, false, clock.Now)
			}
			in := inspectorOf(t, st)
			key := redisNonce + "/whole/" + l.Name
			for testTake(t, st, l, key, 1).Allowed {
			}
			clock.Advance(inspectScale() * 100 * time.Millisecond)
			testTake(t, st, l, key, 1) // rejected, or admitted after a refill
			whole := false
			for step := 0; step < 100; step++ {
				ks, err := in.Peek(ctx, l, key)
				if err != nil {
					t.Fatal(err)
				}
				if ks.Present != (ks.Reset > 0) || !ks.Present && ks != (KeyState{Remaining: l.Capacity()}) {
					t.Fatalf("%s %s at +%v: %+v; want present exactly while the limit is short of whole, else absent and whole",
						store, l.Name, time.Duration(clock.Now()-testclock.Epoch), ks)
				}
				if !ks.Present {
					whole = true
					break
				}
				clock.Advance(inspectScale() * 50 * time.Millisecond)
			}
			if !whole {
				t.Fatalf("%s %s: never whole again", store, l.Name)
			}
		}
	}
}

// TestInspectorPenalty: a key held out reads as present, with nothing
// remaining and the penalty's time left, in memory and on Redis; Delete
// lets it in again.
func TestInspectorPenalty(t *testing.T) {
	clock, stores := clockedStores(t)
	l := validLimit(t, model.Limit{Name: "pen", Rate: testRate(t, "2/s"), Penalty: time.Minute})
	ctx := context.Background()
	for _, st := range stores {
		clock.Set(testclock.Epoch)
		key := redisNonce + "/penalty"
		for i := 0; i < 3; i++ {
			testTake(t, st, l, key, 1)
		}
		clock.Advance(10 * time.Second)
		in := inspectorOf(t, st)
		want := KeyState{Present: true, Penalty: 50 * time.Second, Reset: 50 * time.Second, Next: 50 * time.Second}
		if ks, err := in.Peek(ctx, l, key); err != nil || ks != want {
			t.Errorf("%T: %+v, %v, want %+v", st, ks, err, want)
		}
		if held, err := in.Delete(ctx, l, key); err != nil || !held {
			t.Errorf("%T: Delete: %v, %v, want a state held", st, held, err)
		}
		if ks, _ := in.Peek(ctx, l, key); ks.Present || ks.Penalty != 0 {
			t.Errorf("%T: after Delete: %+v, want absent", st, ks)
		}
		if d := testTake(t, st, l, key, 1); !d.Allowed {
			t.Errorf("%T: after Delete: %+v, want admitted", st, d)
		}
	}
}
