package inspect

import (
	"math/rand"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
)

// zipfTrace returns n keys drawn from a Zipf distribution of exponent s
// over keys distinct keys, seeded.
func zipfTrace(n, keys int, s float64) []string {
	rnd := rand.New(rand.NewSource(7))
	z := rand.NewZipf(rnd, s, 1, uint64(keys-1))
	out := make([]string, n)
	for i := range out {
		out[i] = "10.0." + strconv.Itoa(int(z.Uint64())) + ".1"
	}
	return out
}

// exactTop returns the keys of counts ranked by count, highest first.
func exactTop(counts map[string]float64) []string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// sketchAccuracy feeds trace into a sketch of counters counters, one
// window, and returns the recall of the exact top k among the sketch's top
// k, and the largest overestimate of a reported count relative to the
// trace's length.
func sketchAccuracy(t *testing.T, trace []string, counters, k int) (float64, float64) {
	t.Helper()
	h, err := NewHeavyHitters(counters, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	now := testclock.Epoch - mod(testclock.Epoch, int64(time.Minute))
	exact := map[string]float64{}
	maxOver := 0.0
	for _, key := range trace {
		h.Add(now, key, 1, 0, 0)
		exact[key]++
	}
	top := h.Top(now, WeightRejected, k)
	want := exactTop(exact)[:k]
	in := map[string]bool{}
	for _, hh := range top.Keys {
		in[hh.Key] = true
		if hh.Count < exact[hh.Key] {
			t.Errorf("key %s: count %v below the true %v", hh.Key, hh.Count, exact[hh.Key])
		}
		if hh.Count-hh.Error > exact[hh.Key] {
			t.Errorf("key %s: count %v − error %v above the true %v", hh.Key, hh.Count, hh.Error, exact[hh.Key])
		}
		if over := (hh.Count - exact[hh.Key]) / float64(len(trace)); over > maxOver {
			maxOver = over
		}
	}
	hits := 0
	for _, key := range want {
		if in[key] {
			hits++
		}
	}
	return float64(hits) / float64(k), maxOver
}

// TestHeavyHittersZipf compares the sketch's top keys with exact counts on
// a skewed trace: 200,000 requests from 50,000 clients, Zipf exponent 1.1.
func TestHeavyHittersZipf(t *testing.T) {
	n := 200000
	if testing.Short() {
		n = 100000
	}
	trace := zipfTrace(n, 50000, 1.1)
	for _, c := range []struct {
		counters, k int
		recall      float64
	}{{64, 10, 0.9}, {64, 20, 0.6}, {128, 20, 0.95}, {256, 50, 0.85}} {
		recall, over := sketchAccuracy(t, trace, c.counters, c.k)
		t.Logf("%d counters, top %d: recall %.2f, largest overestimate %.4f%% of the trace", c.counters, c.k, recall, 100*over)
		if recall < c.recall {
			t.Errorf("%d counters, top %d: recall %.2f, want at least %.2f", c.counters, c.k, recall, c.recall)
		}
		if bound := 1 / float64(c.counters); over > bound {
			t.Errorf("%d counters: overestimate %.4f of the trace, above Space-Saving's bound 1/%d", c.counters, over, c.counters)
		}
	}
}

// TestHeavyHittersWindows checks that counts cover the current and the
// previous window only, and that the weights rank apart.
func TestHeavyHittersWindows(t *testing.T) {
	h, err := NewHeavyHitters(8, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	clock := testclock.New(testclock.Epoch - mod(testclock.Epoch, int64(time.Minute)))
	h.Add(clock.Now(), "a", 3, 0, 0)
	h.Add(clock.Now(), "b", 0, 10, 1)
	clock.Advance(time.Minute) // a and b in the previous window
	h.Add(clock.Now(), "a", 1, 0, 0)
	h.Add(clock.Now(), "c", 2, 0, 0)
	top := h.Top(clock.Now(), WeightRejected, 10)
	want := []HeavyHitter{{Key: "a", Count: 4}, {Key: "c", Count: 2}}
	if !reflect.DeepEqual(top.Keys, want) {
		t.Errorf("rejected: %+v, want %+v", top.Keys, want)
	}
	if got := top.Since; got != clock.Now()-int64(time.Minute) {
		t.Errorf("since %d, want the previous window's start %d", got, clock.Now()-int64(time.Minute))
	}
	if got := h.Top(clock.Now(), WeightAdmitted, 10).Keys; !reflect.DeepEqual(got, []HeavyHitter{{Key: "b", Count: 10}}) {
		t.Errorf("admitted: %+v", got)
	}
	if got := h.Top(clock.Now(), WeightNearLimit, 10).Keys; !reflect.DeepEqual(got, []HeavyHitter{{Key: "b", Count: 1}}) {
		t.Errorf("near_limit: %+v", got)
	}
	clock.Advance(time.Minute) // the first window is forgotten
	if got := h.Top(clock.Now(), WeightRejected, 10).Keys; !reflect.DeepEqual(got, []HeavyHitter{{Key: "c", Count: 2}, {Key: "a", Count: 1}}) {
		t.Errorf("a window later: %+v, want c 2, a 1", got)
	}
	clock.Advance(2 * time.Minute) // both windows over
	if got := h.Top(clock.Now(), WeightRejected, 10).Keys; len(got) != 0 {
		t.Errorf("two windows later: %+v, want none", got)
	}
	clock.Advance(-time.Hour) // a clock stepped back counts in the current window
	h.Add(clock.Now(), "d", 1, 0, 0)
	if got := h.Top(clock.Now(), WeightRejected, 1).Keys; !reflect.DeepEqual(got, []HeavyHitter{{Key: "d", Count: 1}}) {
		t.Errorf("after a step back: %+v", got)
	}
}

// TestHeavyHittersEviction checks Space-Saving's replacement: a new key
// takes the smallest counter and inherits its count as its error.
func TestHeavyHittersEviction(t *testing.T) {
	h, err := NewHeavyHitters(8, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	now := testclock.Epoch
	for i := 0; i < 8; i++ {
		h.Add(now, "k"+strconv.Itoa(i), float64(i+2), 0, 0)
	}
	h.Add(now, "new", 1, 0, 0)
	top := h.Top(now, WeightRejected, -1).Keys
	if len(top) != 8 {
		t.Fatalf("%d keys held, want 8", len(top))
	}
	last := top[len(top)-1]
	if last.Key != "new" || last.Count != 3 || last.Error != 2 {
		// k0 (2) was replaced by new (2 + 1, error 2), which sorts
		// after k1 (3, error 0).
		t.Errorf("last: %+v, want new 3 (error 2)", last)
	}
	for _, hh := range top {
		if hh.Key == "k0" {
			t.Errorf("k0 still held: %+v", hh)
		}
	}
}

// TestHeavyHittersConcurrent adds from several goroutines at once; run
// with -race. Every addition is counted.
func TestHeavyHittersConcurrent(t *testing.T) {
	h, err := NewHeavyHitters(8, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				h.Add(testclock.Epoch, "hot", 1, 2, 0)
				h.Add(testclock.Epoch, "g"+strconv.Itoa(g), 0, 1, 0)
			}
		}(g)
	}
	wg.Wait()
	if top := h.Top(testclock.Epoch, WeightRejected, 1).Keys; !reflect.DeepEqual(top, []HeavyHitter{{Key: "hot", Count: 2000}}) {
		t.Errorf("rejected: %+v, want hot 2000", top)
	}
	if top := h.Top(testclock.Epoch, WeightAdmitted, 5).Keys; len(top) != 5 || top[0] != (HeavyHitter{Key: "hot", Count: 4000}) || top[1].Count != 500 {
		t.Errorf("admitted: %+v, want hot 4000, then 500 for each goroutine's key", top)
	}
}

func TestNewHeavyHittersBounds(t *testing.T) {
	for _, c := range []struct {
		counters int
		window   time.Duration
		ok       bool
	}{{0, 0, true}, {8, time.Second, true}, {1024, time.Hour, true}, {7, 0, false}, {1025, 0, false}, {0, time.Millisecond, false}, {0, 2 * time.Hour, false}} {
		h, err := NewHeavyHitters(c.counters, c.window)
		if (err == nil) != c.ok {
			t.Errorf("NewHeavyHitters(%d, %v): error %v, want ok %v", c.counters, c.window, err, c.ok)
		}
		if err == nil && c.counters == 0 && (h.Counters() != DefaultSketchCounters || h.Window() != DefaultSketchWindow) {
			t.Errorf("defaults: %d, %v", h.Counters(), h.Window())
		}
	}
	for _, w := range []Weight{WeightRejected, WeightAdmitted, WeightNearLimit} {
		if got, err := ParseWeight(w.String()); err != nil || got != w {
			t.Errorf("ParseWeight(%q) = %v, %v", w.String(), got, err)
		}
	}
	if _, err := ParseWeight("cost"); err == nil {
		t.Error("ParseWeight(cost): no error")
	}
}

// BenchmarkHeavyHittersAdd measures one Add of an admitted cost, as the
// Caddy handler makes for each zone of an admitted request, with the
// default 128 counters: for the keys of a Zipf trace (50,000 keys,
// exponent 1.1), for 256 keys in turn (every Add replaces a counter: the
// worst case) and for one key.
func BenchmarkHeavyHittersAdd(b *testing.B) {
	zipf := zipfTrace(1<<16, 50000, 1.1)
	turns := make([]string, 1<<16)
	for i := range turns {
		turns[i] = "203.0.113." + strconv.Itoa(i%256)
	}
	one := make([]string, 1<<16)
	for i := range one {
		one[i] = "203.0.113.1"
	}
	for _, bc := range []struct {
		name  string
		trace []string
	}{{"zipf", zipf}, {"256_in_turn", turns}, {"one_key", one}} {
		b.Run(bc.name, func(b *testing.B) {
			h, err := NewHeavyHitters(0, 0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h.Add(testclock.Epoch, bc.trace[i&(1<<16-1)], 0, 1, 0)
			}
		})
	}
}

// BenchmarkHeavyHittersMemory reports the bytes one zone's sketch holds
// with every counter of both windows and all three weights taken by keys
// the length of an IPv4 address, for 64 and 128 counters.
func BenchmarkHeavyHittersMemory(b *testing.B) {
	for _, counters := range []int{64, 128} {
		b.Run(strconv.Itoa(counters), func(b *testing.B) {
			var bytes float64
			for i := 0; i < b.N; i++ {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				h, _ := NewHeavyHitters(counters, time.Minute)
				now := int64(0)
				for w := 0; w < 2; w++ {
					for k := 0; k < 2*counters; k++ {
						h.Add(now, "203.0."+strconv.Itoa(k/256)+"."+strconv.Itoa(k%256), 1, 1, 1)
					}
					now += int64(time.Minute)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				bytes = float64(after.HeapAlloc - before.HeapAlloc)
				runtime.KeepAlive(h)
			}
			b.ReportMetric(bytes, "B/zone")
		})
	}
}
