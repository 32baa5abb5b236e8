package core

import (
	"context"
	"math/rand"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// memStore returns a MemoryStore on a fake clock at testclock.Epoch.
func memStore(t testing.TB, maxKeys int) (*MemoryStore, *testclock.Clock) {
	t.Helper()
	clock := testclock.New(testclock.Epoch)
	s, err := NewMemoryStore(MemoryConfig{MaxKeys: maxKeys, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s, clock
}

func memTake(t testing.TB, s *MemoryStore, asks ...model.Ask) []model.Decision {
	t.Helper()
	out := make([]model.Decision, len(asks))
	if err := s.Take(context.Background(), asks, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestNewMemoryStore(t *testing.T) {
	if _, err := NewMemoryStore(MemoryConfig{MaxKeys: -1}); err == nil || !strings.Contains(err.Error(), "max_keys") {
		t.Errorf("MaxKeys -1: error %v, want one naming max_keys", err)
	}
	cases := []struct{ maxKeys, cap int }{
		{0, DefaultMaxKeys / memShards * memShards},
		{1, memShards}, // at least one state per shard
		{100000, 99968},
		{memShards * 3, memShards * 3},
	}
	for _, c := range cases {
		s, err := NewMemoryStore(MemoryConfig{MaxKeys: c.maxKeys})
		if err != nil {
			t.Fatal(err)
		}
		if s.Cap() != c.cap || s.Len() != 0 {
			t.Errorf("MaxKeys %d: Cap %d, Len %d; want %d, 0", c.maxKeys, s.Cap(), s.Len(), c.cap)
		}
	}
}

// memRaceTrials is how many times each race is run: many compiled, fewer
// with -short (and under Yaegi, where a goroutine costs far more).
func memRaceTrials() int {
	if testing.Short() {
		return 30
	}
	return 1000
}

// memRace releases n goroutines together, each taking asks once, and
// returns how many were admitted (by every ask).
func memRace(s *MemoryStore, n int, asks []model.Ask) int {
	var admitted int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]model.Decision, len(asks))
			<-start
			if s.Take(context.Background(), asks, out) != nil {
				return
			}
			for _, d := range out {
				if !d.Allowed {
					return
				}
			}
			atomic.AddInt64(&admitted, 1)
		}()
	}
	close(start)
	wg.Wait()
	return int(admitted)
}

// TestMemoryStoreRaceForLastToken: 32 requests released together for the
// last unit of capacity: exactly one wins, every time; 32 for 16 units:
// exactly 16 win.
func TestMemoryStoreRaceForLastToken(t *testing.T) {
	const racers, capacity = 32, 16
	trials := memRaceTrials()
	for _, alg := range model.Algorithms {
		alg := alg
		t.Run(string(alg), func(t *testing.T) {
			s, _ := memStore(t, 1<<16)
			l := coretest.Limit(t, "t", alg, strconv.Itoa(capacity)+"/h", 0, 0)
			for i := 0; i < trials; i++ {
				last := "last" + strconv.Itoa(i)
				if d := memTake(t, s, model.Ask{Limit: l, Key: last, Cost: capacity - 1}); !d[0].Allowed {
					t.Fatalf("trial %d: first request rejected", i)
				}
				if n := memRace(s, racers, []model.Ask{{Limit: l, Key: last, Cost: 1}}); n != 1 {
					t.Fatalf("trial %d: %d racers won the last unit, want 1", i, n)
				}
				if n := memRace(s, 2*capacity, []model.Ask{{Limit: l, Key: "half" + strconv.Itoa(i), Cost: 1}}); n != capacity {
					t.Fatalf("trial %d: %d of %d racers admitted for %d units, want %d", i, n, 2*capacity, capacity, capacity)
				}
			}
		})
	}
}

// TestMemoryStoreRaceMultiLimit: racing two-limit requests where the tight
// limit has one unit left: one wins, and the other limit is charged once.
func TestMemoryStoreRaceMultiLimit(t *testing.T) {
	s, _ := memStore(t, 1<<16)
	plenty := coretest.Limit(t, "t", model.SlidingWindowCounter, "1000/h", 0, 0)
	tight := coretest.Limit(t, "t", model.TokenBucket, "2/h", 0, 0)
	trials := memRaceTrials() / 4
	for i := 0; i < trials; i++ {
		k := "k" + strconv.Itoa(i)
		memTake(t, s, model.Ask{Limit: tight, Key: k, Cost: 1})
		if n := memRace(s, 32, []model.Ask{{Limit: plenty, Key: k, Cost: 1}, {Limit: tight, Key: k, Cost: 1}}); n != 1 {
			t.Fatalf("trial %d: %d racers admitted, want 1", i, n)
		}
		if d := memTake(t, s, model.Ask{Limit: plenty, Key: k, Cost: 1}); d[0].Remaining != 998 {
			t.Fatalf("trial %d: the plentiful limit has %v left, want 998 (charged once by the race)", i, d[0].Remaining)
		}
	}
}

// TestMemoryStoreKeyFlood: a million distinct keys never hold more states
// than MaxKeys.
func TestMemoryStoreKeyFlood(t *testing.T) {
	keys, maxKeys := 1000000, 100000
	if testing.Short() {
		keys, maxKeys = 10000, 1024
	}
	s, clock := memStore(t, maxKeys)
	ctx := context.Background()
	asks := []model.Ask{{Limit: coretest.Limit(t, "t", model.TokenBucket, "10/h", 0, 0), Cost: 1}}
	out := make([]model.Decision, 1)
	buf := make([]byte, 0, 32)
	for i := 0; i < keys; i++ {
		buf = strconv.AppendInt(append(buf[:0], "flood-"...), int64(i), 10)
		asks[0].Key = string(buf)
		s.Take(ctx, asks, out)
		if i%1024 == 0 {
			clock.Advance(time.Millisecond)
		}
	}
	if n, c := s.Len(), s.Cap(); n > c || c > maxKeys || n < c*99/100 {
		t.Errorf("after %d keys: Len %d, Cap %d, MaxKeys %d; want 0.99·Cap ≤ Len ≤ Cap ≤ MaxKeys", keys, n, c, maxKeys)
	}

	// The logs of sliding_window_log states go with their slots.
	asks[0].Limit = coretest.Limit(t, "t", model.SlidingWindowLog, "10/h", 0, 0)
	for i := 0; i < keys/5; i++ {
		buf = strconv.AppendInt(append(buf[:0], "logflood-"...), int64(i), 10)
		asks[0].Key = string(buf)
		s.Take(ctx, asks, out)
	}
	logs := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for h := range sh.logs {
			if _, held := sh.slots[h]; !held {
				t.Errorf("shard %d: a log without a slot", i)
			}
			logs++
		}
		sh.mu.Unlock()
	}
	if n := s.Len(); n > s.Cap() || logs > n {
		t.Errorf("after %d log keys: Len %d, Cap %d, %d logs", keys/5, n, s.Cap(), logs)
	}
}

// memKeysInShard returns n keys of l whose states fall in shard sh.
func memKeysInShard(s *MemoryStore, l *model.Limit, prefix string, sh, n int) []string {
	var keys []string
	for i := 0; len(keys) < n && i < 1000000; i++ {
		k := prefix + strconv.Itoa(i)
		if int(s.hash(l, k)>>memShardShift) == sh {
			keys = append(keys, k)
		}
	}
	return keys
}

func memHeld(s *MemoryStore, l *model.Limit, key string) bool {
	h := s.hash(l, key)
	sh := &s.shards[h>>memShardShift]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, held := sh.slots[h]
	return held
}

// TestMemoryStoreTakeManyCap: an ask of a Take that saves several states
// may forget, to make room for its own, the state a later ask of the same
// Take loaded as held, which that ask must then make room for anew: the
// shard never holds more than its share.
func TestMemoryStoreTakeManyCap(t *testing.T) {
	s, _ := memStore(t, memShards) // one state per shard
	l := coretest.Limit(t, "t", model.TokenBucket, "10/h", 0, 0)
	keys := memKeysInShard(s, l, "k", 5, 2)
	memTake(t, s, model.Ask{Limit: l, Key: keys[1], Cost: 1})
	if !memHeld(s, l, keys[1]) {
		t.Fatalf("%s's state is not held", keys[1])
	}
	d := memTake(t, s, model.Ask{Limit: l, Key: keys[0], Cost: 1}, model.Ask{Limit: l, Key: keys[1], Cost: 1})
	if !d[0].Allowed || !d[1].Allowed {
		t.Fatalf("decisions %+v, want both allowed", d)
	}
	if n := len(s.shards[5].slots); n > s.perShard {
		t.Errorf("shard 5 holds %d states, more than its %d", n, s.perShard)
	}
}

// TestMemoryStoreKeepsLiveStates: below the cap no live state is
// forgotten, however the keys fall into shards, and expired states make
// room for new keys as they arrive.
func TestMemoryStoreKeepsLiveStates(t *testing.T) {
	// Shards fill unevenly: at 75 % overall, the fullest of 64 shards of
	// 1000 (or 400, with -short) stays far below its share of the cap.
	perShard := 1000
	if testing.Short() {
		perShard = 400
	}
	s, clock := memStore(t, memShards*perShard)
	l := coretest.Limit(t, "t", model.TokenBucket, "1/h", 10, 0)
	n := s.Cap() * 3 / 4
	for i := 0; i < n; i++ {
		memTake(t, s, model.Ask{Limit: l, Key: "live" + strconv.Itoa(i), Cost: 1})
	}
	if got := s.Len(); got != n {
		t.Fatalf("%d live keys at 75%% of the cap: %d held", n, got)
	}
	for i := 0; i < n; i++ {
		if !memHeld(s, l, "live"+strconv.Itoa(i)) {
			t.Fatalf("live key %d forgotten below the cap", i)
		}
	}
	// Once they have expired, as many new keys drop them as they arrive.
	clock.Advance(2 * time.Hour)
	for i := 0; i < n; i++ {
		memTake(t, s, model.Ask{Limit: l, Key: "new" + strconv.Itoa(i), Cost: 1})
	}
	if got := s.Len(); got > n+n/5 {
		t.Errorf("%d expired and %d new keys: %d held, want about %d", n, n, got, n)
	}
}

// TestMemoryStoreEviction: with room for memWays states per shard, a new
// key at the cap takes the place of an expired state rather than a live
// one, and when every state is live, of the one that expires first.
func TestMemoryStoreEviction(t *testing.T) {
	const memWays = 8 // fewer than memSample: eviction examines them all
	s, clock := memStore(t, memShards*memWays)
	if s.perShard != memWays {
		t.Fatalf("%d states per shard, want %d", s.perShard, memWays)
	}
	live := coretest.Limit(t, "t", model.TokenBucket, "1/h", 10, 0) // cost c expires c·6 min later
	short := coretest.Limit(t, "t", model.TokenBucket, "1/s", 1, 0) // expires a second later
	const sh = 5
	liveKeys := memKeysInShard(s, live, "live", sh, memWays+1)
	shortKeys := memKeysInShard(s, short, "short", sh, 2)
	if len(liveKeys) != memWays+1 || len(shortKeys) != 2 {
		t.Fatal("not enough keys in one shard")
	}

	// Slots: live, short, live, live, short, live, live, live.
	order := []model.Ask{
		{Limit: live, Key: liveKeys[0], Cost: 1}, {Limit: short, Key: shortKeys[0], Cost: 1}, {Limit: live, Key: liveKeys[1], Cost: 1}, {Limit: live, Key: liveKeys[2], Cost: 1},
		{Limit: short, Key: shortKeys[1], Cost: 1}, {Limit: live, Key: liveKeys[3], Cost: 1}, {Limit: live, Key: liveKeys[4], Cost: 1}, {Limit: live, Key: liveKeys[5], Cost: 1},
	}
	for _, a := range order {
		memTake(t, s, a)
	}
	if n := s.Len(); n != memWays {
		t.Fatalf("Len %d after filling one shard, want %d", n, memWays)
	}
	clock.Advance(2 * time.Second) // both short states expire
	memTake(t, s, model.Ask{Limit: live, Key: liveKeys[6], Cost: 1})
	memTake(t, s, model.Ask{Limit: live, Key: liveKeys[7], Cost: 1})
	for i := 0; i < 8; i++ {
		if !memHeld(s, live, liveKeys[i]) {
			t.Errorf("live key %d evicted while expired states were held", i)
		}
	}
	for i, k := range shortKeys {
		if memHeld(s, short, k) {
			t.Errorf("expired key %d still held after two insertions", i)
		}
	}

	// All live now; the next key replaces the one expiring first. Give it
	// the most cost, so that it is not the oldest one: live key 3 (slot 5)
	// has cost 1 and every other one gets 1 more.
	for i := 0; i < 8; i++ {
		if i != 3 {
			memTake(t, s, model.Ask{Limit: live, Key: liveKeys[i], Cost: 1})
		}
	}
	memTake(t, s, model.Ask{Limit: live, Key: liveKeys[8], Cost: 1})
	for i := 0; i < 9; i++ {
		if held := memHeld(s, live, liveKeys[i]); held != (i != 3) {
			t.Errorf("live key %d: held %v, want %v (key 3 expires first)", i, held, i != 3)
		}
	}
	if n := s.Len(); n != memWays {
		t.Errorf("Len %d, want %d", n, memWays)
	}
}

// TestMemoryStoreMultiLimitNoDeadlock: requests asking [A, B] and [B, A],
// with A and B in different shards, race without deadlocking.
func TestMemoryStoreMultiLimitNoDeadlock(t *testing.T) {
	s, _ := memStore(t, 4096)
	a := coretest.Limit(t, "t", model.TokenBucket, "1000000/s", 0, 0)
	b := coretest.Limit(t, "t", model.FixedWindow, "1000000/s", 0, 0)
	ka := memKeysInShard(s, a, "a", 3, 1)
	kb := memKeysInShard(s, b, "b", 60, 1)
	iters := 2000
	if testing.Short() {
		iters = 100
	}
	ab := []model.Ask{{Limit: a, Key: ka[0], Cost: 1}, {Limit: b, Key: kb[0], Cost: 1}}
	ba := []model.Ask{{Limit: b, Key: kb[0], Cost: 1}, {Limit: a, Key: ka[0], Cost: 1}}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		asks := ab
		if g%2 == 1 {
			asks = ba
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]model.Decision, 2)
			for i := 0; i < iters; i++ {
				s.Take(context.Background(), asks, out)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("multi-limit requests in opposite orders deadlocked")
	}
}

// TestMemoryStoreManyAsks: more asks than Take handles without allocating
// are decided alike, all-or-nothing.
func TestMemoryStoreManyAsks(t *testing.T) {
	s, _ := memStore(t, 4096)
	var asks []model.Ask
	for i := 0; i < maxAsks+3; i++ {
		asks = append(asks, model.Ask{Limit: coretest.Limit(t, "t", model.TokenBucket, "10/h", 0, 0), Key: "k" + strconv.Itoa(i), Cost: 1})
	}
	tight := coretest.Limit(t, "t", model.FixedWindow, "1/h", 0, 0)
	asks = append(asks, model.Ask{Limit: tight, Key: "t", Cost: 1})
	if d := memTake(t, s, asks...); !d[len(d)-1].Allowed || !d[0].Allowed {
		t.Fatalf("first request: %+v", d)
	}
	d := memTake(t, s, asks...)
	if d[len(d)-1].Allowed || !d[0].Allowed || !d[maxAsks+2].Allowed {
		t.Fatalf("second request: tight %+v, first %+v, last plenty %+v", d[len(d)-1], d[0], d[maxAsks+2])
	}
	for i := 0; i < maxAsks+3; i++ {
		if r := memTake(t, s, asks[i])[0].Remaining; r != 8 {
			t.Errorf("ask %d: %v remaining after one admitted and one rejected request, want 8", i, r)
		}
	}
}

// TestMemoryStoreTakeAllocs: a decision allocates nothing (checked
// compiled only: under an interpreter every call allocates).
func TestMemoryStoreTakeAllocs(t *testing.T) {
	if coretest.Interpreted() {
		t.Skip("allocation counts are meaningless under an interpreter")
	}
	s, clock := memStore(t, 4096)
	tb := coretest.Limit(t, "t", model.TokenBucket, "1000000/s", 0, 0)
	fw := coretest.Limit(t, "t", model.FixedWindow, "1000000/s", 0, 0)
	one := []model.Ask{{Limit: tb, Key: "client", Cost: 1}}
	two := []model.Ask{{Limit: tb, Key: "client", Cost: 1}, {Limit: fw, Key: "client", Cost: 1}}
	out := make([]model.Decision, 2)
	ctx := context.Background()
	for _, asks := range [][]model.Ask{one, two} {
		asks := asks
		n := testing.AllocsPerRun(1000, func() {
			clock.Advance(time.Millisecond)
			s.Take(ctx, asks, out)
		})
		if n != 0 {
			t.Errorf("Take with %d asks: %v allocations, want 0", len(asks), n)
		}
	}
}

// TestShardOrder: the shards takeMany locks are every ask's shard, once
// each, ascending.
func TestShardOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for n := 0; n < 200; n++ {
		var order []int
		seen := map[int]bool{}
		for k := rng.Intn(10); k > 0; k-- {
			i := rng.Intn(memShards)
			order = shardOrder(order, i)
			seen[i] = true
		}
		if len(order) != len(seen) {
			t.Fatalf("order %v, want each of %v once", order, seen)
		}
		for j, i := range order {
			if !seen[i] || (j > 0 && order[j-1] >= i) {
				t.Fatalf("order %v is not the ascending distinct shards %v", order, seen)
			}
		}
	}
}

// TestMemoryStoreFullLog: once a sliding_window_log holds MaxLogQuota
// entries, an admission merges into the newest entry in place, without
// copying the log (no allocation), and a multi-limit request that another
// limit rejects leaves the stored log exactly as it was.
func TestMemoryStoreFullLog(t *testing.T) {
	s, clock := memStore(t, 4096)
	log := coretest.Limit(t, "t", model.SlidingWindowLog, "10000/h", 0, 0)
	for i := 0; i < model.MaxLogQuota; i++ {
		clock.Advance(time.Millisecond)
		if d := memTake(t, s, model.Ask{Limit: log, Key: "k", Cost: 0.5})[0]; !d.Allowed {
			t.Fatalf("request %d rejected: %+v", i+1, d)
		}
	}
	stored := func() []model.LogEntry {
		h := s.hash(log, "k")
		return append([]model.LogEntry(nil), s.shards[h>>memShardShift].logs[h]...)
	}
	if n := len(stored()); n != model.MaxLogQuota {
		t.Fatalf("log holds %d entries, want %d", n, model.MaxLogQuota)
	}
	closed := coretest.Limit(t, "t", model.TokenBucket, "1/h", 1, 0)
	memTake(t, s, model.Ask{Limit: closed, Key: "k", Cost: 1})
	before := stored()
	clock.Advance(time.Millisecond)
	if d := memTake(t, s, model.Ask{Limit: log, Key: "k", Cost: 1}, model.Ask{Limit: closed, Key: "k", Cost: 1}); d[0].Allowed != true || d[1].Allowed {
		t.Fatalf("want the log to admit and the bucket to reject: %+v", d)
	}
	if after := stored(); !reflect.DeepEqual(after, before) {
		t.Fatalf("a rejected multi-limit request changed the full log: newest entry %+v, was %+v", after[len(after)-1], before[len(before)-1])
	}
	clock.Advance(time.Millisecond)
	if d := memTake(t, s, model.Ask{Limit: log, Key: "k", Cost: 1})[0]; !d.Allowed || d.Remaining != log.Capacity()-model.MaxLogQuota*0.5-1 {
		t.Fatalf("admission into a full log: %+v", d)
	}
	if got := stored(); len(got) != model.MaxLogQuota || got[model.MaxLogQuota-1].T != clock.Now() || got[model.MaxLogQuota-1].Cost != 1.5 {
		t.Fatalf("full log after an admission: %d entries, newest %+v; want the newest merged at now with cost 1.5", len(got), got[len(got)-1])
	}
	if coretest.Interpreted() {
		return // allocation counts are meaningless under an interpreter
	}
	ctx, asks, out := context.Background(), []model.Ask{{Limit: log, Key: "k", Cost: 0.001}}, make([]model.Decision, 1)
	if n := testing.AllocsPerRun(100, func() {
		clock.Advance(time.Microsecond)
		s.Take(ctx, asks, out)
	}); n != 0 {
		t.Errorf("admission into a full log: %v allocations, want 0 (no copy)", n)
	}
}

// TestMemoryStoreKeepsLimitedKey: a key whose requests are being rejected
// keeps its state through a flood of new keys ten times the cap, even when
// its state would expire as soon as theirs (burst 1): each rejection keeps
// it as long as a state that has just spent the whole capacity. Alone
// (take1) and with a second limit (takeMany).
func TestMemoryStoreKeepsLimitedKey(t *testing.T) {
	perShard := 32
	if testing.Short() {
		perShard = 8 // the interpreter
	}
	for _, asks := range []int{1, 2} {
		s, clock := memStore(t, memShards*perShard)
		l := coretest.Limit(t, "t", model.TokenBucket, "11/h", 1, 0)
		global := coretest.Limit(t, "t", model.TokenBucket, "1000000/s", 1000000, 0)
		ask := func(key string) []model.Ask {
			a := []model.Ask{{Limit: l, Key: key, Cost: 1}}
			if asks == 2 {
				a = append(a, model.Ask{Limit: global, Key: "all", Cost: 1})
			}
			return a
		}
		if !memTake(t, s, ask("victim")...)[0].Allowed {
			t.Fatal("the victim's first request was rejected")
		}
		for i := 0; i < 10*s.Cap(); i++ {
			memTake(t, s, ask("k"+strconv.Itoa(i))...)
			if i%100 == 0 {
				clock.Advance(time.Millisecond)
			}
			if i%50 == 0 {
				if d := memTake(t, s, ask("victim")...); d[0].Allowed {
					t.Fatalf("%d asks: the limited victim admitted again after %d new keys (its state evicted)", asks, i)
				}
			}
		}
	}
}
