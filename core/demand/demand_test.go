package demand

import (
	"hash/maphash"
	"math"
	"math/rand"
	"net/url"
	"runtime"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
)

// exactQuantile is the value of rank q·(n−1) of sorted, as Sketch.Quantile
// defines it.
func exactQuantile(sorted []float64, q float64) float64 {
	if q >= 1 {
		return sorted[len(sorted)-1]
	}
	return sorted[int(q*float64(len(sorted)-1))]
}

func within(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*want+1e-9
}

func TestSketchQuantiles(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var s Sketch
	var all []float64
	for i := 0; i < 20000; i++ {
		v := math.Exp(rng.Float64()*18 - 4) // 0.018 … 1.2e6, log-uniform
		if i%7 == 0 {
			v = float64(1 + rng.Intn(5)) // many equal small integers
		}
		s.Add(v)
		all = append(all, v)
	}
	sort.Float64s(all)
	for _, q := range []float64{0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1} {
		want := exactQuantile(all, q)
		if got := s.Quantile(q); !within(got, want, RelativeError) {
			t.Errorf("Quantile(%v) = %v, want %v within %v", q, got, want, RelativeError)
		}
	}
	if s.Count() != uint64(len(all)) {
		t.Errorf("Count = %d, want %d", s.Count(), len(all))
	}
}

func TestSketchMerge(t *testing.T) {
	var a, b, whole Sketch
	for i := 1; i <= 1000; i++ {
		v := float64(i) * 0.37
		whole.Add(v)
		if i%3 == 0 {
			a.Add(v)
		} else {
			b.Add(v)
		}
	}
	var m Sketch
	m.Merge(&a)
	m.Merge(&b)
	if m.Count() != whole.Count() || m.max != whole.max || math.Abs(m.Sum()-whole.Sum()) > 1e-6 {
		t.Fatalf("merged count/max/sum %d/%v/%v, want %d/%v/%v", m.Count(), m.max, m.Sum(), whole.Count(), whole.max, whole.Sum())
	}
	count := func(s *Sketch, i int) uint64 {
		if j := i - s.offset; j >= 0 && j < len(s.counts) {
			return s.counts[j]
		}
		return 0
	}
	for i := 0; i < nBuckets; i++ {
		if count(&m, i) != count(&whole, i) {
			t.Fatalf("bucket %d: merged %d, whole %d", i, count(&m, i), count(&whole, i))
		}
	}
	var wide Sketch
	wide.Add(minValue / 2)
	wide.Add(maxValue * 2)
	if len(wide.counts)*8 > 4700 || len(wide.counts) != nBuckets {
		t.Errorf("a sketch of the whole range holds %d buckets, %d bytes: want all %d, within the stated 4.6 KB", len(wide.counts), len(wide.counts)*8, nBuckets)
	}
}

// TestSketchBeyondRange: values above the range are counted in its last
// bucket, whose bounds reach the largest value; a quantile there reports
// the largest.
func TestSketchBeyondRange(t *testing.T) {
	var s Sketch
	s.Add(5e8)
	s.Add(6e8)
	s.Add(1)
	n, ex := s.Over(2e8)
	if n.Value != 2 || n.Low > 2 || n.High < 2 || ex.Low > 7e8 || ex.High < 7e8 {
		t.Errorf("Over(2e8) with 5e8 and 6e8 recorded: count %+v, excess %+v; want 2, bounds holding an excess of 7e8", n, ex)
	}
	if q := s.Quantile(0.99); q != 6e8 {
		t.Errorf("Quantile(0.99) = %v, want the largest, 6e8", q)
	}
}

// minute is the recorders' period in these tests.
const minute = int64(time.Minute)

func TestRecorderFoldsKeyPeriods(t *testing.T) {
	r := NewRecorder(minute, 0, 0)
	r.Add(1e9, "a", 1)
	r.Add(2e9, "a", 2)
	r.Add(3e9, "b", 1)
	r.Add(minute+1, "a", 5) // a's first period is over: folded now
	r.Add(minute+2, "a", 0) // no cost, no record
	s := r.Snapshot(minute + 3)
	if s.Periods.Count() != 2 || s.Periods.Sum() != 4 {
		t.Fatalf("in the second period: %d key-periods of sum %v, want a's and b's first (2, 4)", s.Periods.Count(), s.Periods.Sum())
	}
	s = r.Snapshot(2*minute + 1)
	if s.Periods.Count() != 3 || s.Periods.Sum() != 9 || s.Followed != 2 {
		t.Fatalf("in the third period: %d key-periods of sum %v, %d keys followed; want 3, 9, 2", s.Periods.Count(), s.Periods.Sum(), s.Followed)
	}
	if s.Keys.Count() != 2 || s.Keys.max != 5 {
		t.Fatalf("keys %d, largest peak %v; want 2 keys, a's peak 5", s.Keys.Count(), s.Keys.max)
	}
	// Idle past the horizon (an hour), the keys are retired, their peaks kept.
	s = r.Snapshot(62 * minute)
	if s.Followed != 0 || s.Keys.Count() != 2 || s.Periods.Count() != 3 {
		t.Fatalf("after retirement: %d followed, %d keys, %d key-periods; want 0, 2, 3", s.Followed, s.Keys.Count(), s.Periods.Count())
	}
	r.Reset(63 * minute)
	if s = r.Snapshot(63 * minute); s.Periods.Count() != 0 || s.Keys.Count() != 0 || s.Since != 63*minute {
		t.Fatalf("after Reset: %+v", s)
	}
}

func TestRecorderBoundsMemory(t *testing.T) {
	r := NewRecorder(minute, 64, 0)
	for i := 0; i < 10000; i++ {
		r.Add(int64(i), strconv.Itoa(i), 1)
	}
	s := r.Snapshot(1000)
	if s.Followed > 64 {
		t.Fatalf("%d keys followed, bound 64", s.Followed)
	}
	if s.Partial == 0 || s.Periods.Count() != s.Partial {
		t.Fatalf("evicted keys' periods: %d folded, %d partial; want all folded partial", s.Periods.Count(), s.Partial)
	}
	if got := s.Periods.Count() + uint64(s.Followed); got != 10000 {
		t.Fatalf("folded + followed = %d, want every key, 10000", got)
	}
}

// TestRecorderEvictsWholePeriods: a key evicted before a sweep has folded
// its period folds it whole if the period is over, partial if not.
func TestRecorderEvictsWholePeriods(t *testing.T) {
	r := NewRecorder(minute, 1, 0) // one key a shard
	shardOf := func(k string) uint64 { return maphash.String(r.seed, k) % numShards }
	// keys returns n keys of the shard of "a", other than "a".
	keys := func(n int) []string {
		var out []string
		for i := 0; len(out) < n; i++ {
			if k := strconv.Itoa(i); shardOf(k) == shardOf("a") {
				out = append(out, k)
			}
		}
		return out
	}
	ks := keys(2)
	r.Add(minute-2, "a", 3)   // sweeps (the first Add), next due half a minute later
	r.Add(minute+1, ks[0], 1) // evicts a, whose period is over: whole
	r.Add(minute+2, ks[1], 1) // evicts ks[0], whose period is not: partial
	s := r.Snapshot(minute + 3)
	if s.Periods.Count() != 2 || s.Partial != 1 || s.Periods.Sum() != 4 {
		t.Fatalf("%d key-periods of sum %v, %d partial; want a's whole (3) and ks[0]'s partial (1)", s.Periods.Count(), s.Periods.Sum(), s.Partial)
	}
}

// TestRecorderLateAsks: an ask stamped before the key's last (hosts stamp
// asks as they decide them, concurrently) is counted in the key's current
// period: it neither splits nor reopens one.
func TestRecorderLateAsks(t *testing.T) {
	r := NewRecorder(int64(time.Second), 0, 0)
	for _, at := range []float64{0.1, 1.1, 0.9, 1.2} {
		r.Add(int64(at*1e9), "a", 1)
	}
	s := r.Snapshot(int64(2.5e9))
	if s.Periods.Count() != 2 || s.Periods.Sum() != 4 {
		t.Fatalf("%d key-periods of sum %v, want 2 of 4", s.Periods.Count(), s.Periods.Sum())
	}
	r.Add(int64(2.9e9), "a", 1) // a key-period of its own, period 2
	r.Add(int64(1.9e9), "a", 1) // late, into a's current period, 2
	if s = r.Snapshot(int64(3.5e9)); s.Periods.Count() != 3 || s.Periods.Sum() != 6 {
		t.Fatalf("%d key-periods of sum %v, want 3 of 6", s.Periods.Count(), s.Periods.Sum())
	}
}

func TestRecorderConcurrent(t *testing.T) {
	r := NewRecorder(minute, 0, 0)
	const workers, each = 8, 500
	done := make(chan bool)
	for w := 0; w < workers; w++ {
		go func(w int) {
			for i := 0; i < each; i++ {
				r.Add(int64(i), strconv.Itoa(i%50), 0.5)
			}
			done <- true
		}(w)
	}
	for w := 0; w < workers; w++ {
		<-done
	}
	s := r.Snapshot(minute)
	if s.Periods.Count() != 50 || s.Periods.Sum() != workers*each*0.5 {
		t.Fatalf("%d key-periods of sum %v, want 50 of %v", s.Periods.Count(), s.Periods.Sum(), workers*each*0.5)
	}
}

// TestAdviceZipf checks Advise against the exact answers computed from the
// trace: 200,000 requests of 50,000 clients whose frequencies follow Zipf's
// law, over 20 periods.
func TestAdviceZipf(t *testing.T) {
	const clients, requests, periods = 50000, 200000, 20
	n := requests
	if testing.Short() {
		n = requests / 10
	}
	rng := rand.New(rand.NewSource(3))
	zipf := rand.NewZipf(rng, 1.1, 4, clients-1)
	l := &model.Limit{Name: "api", Rate: model.Rate{Quota: 100, Period: time.Minute}, Burst: 20}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	r := NewRecorder(minute, 1<<16, 0) // every client followed
	type kp struct {
		key    uint64
		period int64
	}
	exact := make(map[kp]float64)
	for i := 0; i < n; i++ {
		now := int64(i) * (periods * minute / int64(n))
		k := zipf.Uint64()
		cost := 1.0
		if i%10 == 0 {
			cost = 2.5
		}
		r.Add(now, strconv.FormatUint(k, 10), cost)
		exact[kp{k, now / minute}] += cost
	}
	s := r.Snapshot(periods*minute + 1)
	asked, err := ParseCandidates(url.Values{"candidate": {"10/1m", "1/s"}, "burst": {"5"}})
	if err != nil {
		t.Fatal(err)
	}
	a := Advise("api", l, &s, asked)

	var all []float64
	var total float64
	peak := make(map[uint64]float64)
	for k, v := range exact {
		all = append(all, v)
		total += v
		if v > peak[k.key] {
			peak[k.key] = v
		}
	}
	sort.Float64s(all)
	if a.KeyPeriods != uint64(len(all)) || a.Keys != uint64(len(peak)) || a.PartialKeyPeriods != 0 {
		t.Fatalf("advice counts %d key-periods, %d keys, %d partial; exact %d, %d, 0", a.KeyPeriods, a.Keys, a.PartialKeyPeriods, len(all), len(peak))
	}
	for _, c := range []struct {
		q   float64
		got float64
	}{{0.5, a.Demand.P50}, {0.9, a.Demand.P90}, {0.95, a.Demand.P95}, {0.99, a.Demand.P99}, {1, a.Demand.Max}} {
		if want := exactQuantile(all, c.q); !within(c.got, want, RelativeError+0.0005) {
			t.Errorf("quantile %v: advice %v, exact %v (relative error %v)", c.q, c.got, want, RelativeError)
		}
	}
	if len(a.Candidates) != 6 {
		t.Fatalf("%d candidates, want configured, half, double, p99x1.2 and the 2 asked", len(a.Candidates))
	}
	for _, v := range a.Candidates {
		var periodsOver, keysOver, excess float64
		for _, d := range all {
			if d > v.Allowance {
				periodsOver++
				excess += d - v.Allowance
			}
		}
		for _, p := range peak {
			if p > v.Allowance {
				keysOver++
			}
		}
		check := func(what string, e Estimate, exact float64) {
			if exact < e.Low-0.00005 || exact > e.High+0.00005 { // bounds to 0.01 %
				t.Errorf("%s %s: exact %.5f outside the bounds [%.5f, %.5f]", v.Name, what, exact, e.Low, e.High)
			}
			if math.Abs(e.Value-exact) > 0.01 {
				t.Errorf("%s %s: estimate %.5f, exact %.5f: more than 1 percentage point apart", v.Name, what, e.Value, exact)
			}
		}
		check("key-periods", v.KeyPeriods, periodsOver/float64(len(all)))
		check("keys", v.Keys, keysOver/float64(len(peak)))
		check("cost", v.Cost, excess/total)
	}
	if c := a.Candidates[0]; c.Name != "configured" || c.Allowance != 120 {
		t.Errorf("configured candidate %+v, want allowance 120 (burst 20 + 100 a minute)", c)
	}
	if c := a.Candidates[5]; c.Name != "asked" || c.Allowance != 61 {
		t.Errorf("asked 1/s: %+v, want allowance 61 (a burst of 1 + 60 a minute)", c)
	}
}

func TestAllowance(t *testing.T) {
	for _, c := range []struct {
		alg  model.Algorithm
		cand Candidate
		want float64
	}{
		{model.FixedWindow, Candidate{Rate: model.Rate{Quota: 100, Period: time.Minute}}, 100},
		{model.SlidingWindowCounter, Candidate{Rate: model.Rate{Quota: 10, Period: time.Second}}, 600},
		{model.TokenBucket, Candidate{Rate: model.Rate{Quota: 100, Period: time.Minute}}, 200},
		{model.LeakyBucket, Candidate{Rate: model.Rate{Quota: 100, Period: time.Minute}, Burst: 5}, 105},
		{"", Candidate{Rate: model.Rate{Quota: 0.5, Period: time.Minute}}, 1.5},
		// A window longer than the period: its quota, met once.
		{model.FixedWindow, Candidate{Rate: model.Rate{Quota: 600, Period: time.Hour}}, 600},
		// Windows of 7s in a minute: ceil(60/7) = 9 met, one more unaligned.
		{model.SlidingWindowLog, Candidate{Rate: model.Rate{Quota: 1, Period: 7 * time.Second}}, 10},
		// A token_bucket lends what it refills in MaxDelay; a leaky_bucket's
		// MaxDelay only bounds its queue's wait.
		{model.TokenBucket, Candidate{Rate: model.Rate{Quota: 60, Period: time.Minute}, Burst: 5, MaxDelay: 10 * time.Second}, 75},
		{model.LeakyBucket, Candidate{Rate: model.Rate{Quota: 60, Period: time.Minute}, Burst: 5, MaxDelay: 10 * time.Second}, 65},
	} {
		if got := c.cand.Allowance(c.alg, minute); got != c.want {
			t.Errorf("%s %v burst %v: allowance %v, want %v", c.alg, c.cand.Rate, c.cand.Burst, got, c.want)
		}
	}
}

func TestParseCandidatesErrors(t *testing.T) {
	for _, c := range []struct {
		q     url.Values
		field string
	}{
		{url.Values{"candidate": {"100"}}, "candidate"},
		{url.Values{"candidate": {"x/m"}}, "candidate"},
		{url.Values{"candidate": {"100/m"}, "burst": {"0"}}, "burst"},
		{url.Values{"candidate": {"100/m"}, "burst": {"1", "2"}}, "burst"},
		{url.Values{"burst": {"3"}}, "burst"},
		{url.Values{"candidate": make([]string, maxAsked+1)}, "candidate"},
	} {
		_, err := ParseCandidates(c.q)
		if fe := model.FieldOf(err); fe == nil || fe.Field != c.field {
			t.Errorf("ParseCandidates(%v) = %v, want an error on %s", c.q, err, c.field)
		}
	}
	if got, err := ParseCandidates(url.Values{}); err != nil || got != nil {
		t.Errorf("no candidates: %v, %v", got, err)
	}
}

// TestRecorderMemory states a recorder's memory: its two sketches are
// fixed in size, and a followed key costs about 95 bytes.
func TestRecorderMemory(t *testing.T) {
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	r := NewRecorder(minute, 0, 0)
	for i := 0; i < DefaultMaxKeys; i++ {
		r.Add(int64(i), "client-"+strconv.Itoa(i), 1)
	}
	per := float64(heap()-before) / DefaultMaxKeys
	runtime.KeepAlive(r)
	t.Logf("%d keys followed: %.0f bytes a key", DefaultMaxKeys, per)
	if per > 120 {
		t.Errorf("a followed key takes %.0f bytes, the doc says about 95", per)
	}
}

// BenchmarkAddHot is what recording costs a request of one hot key.
func BenchmarkAddHot(b *testing.B) {
	r := NewRecorder(minute, 0, 0)
	for i := 0; i < b.N; i++ {
		r.Add(int64(i), "203.0.113.7", 1)
	}
}

// BenchmarkAddKeys is what recording costs requests of 100,000 keys.
func BenchmarkAddKeys(b *testing.B) {
	keys := make([]string, 100000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	r := NewRecorder(minute, 1<<17, 0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Add(int64(i), keys[i%len(keys)], 1)
	}
}

func TestAdviseQuery(t *testing.T) {
	l := &model.Limit{Name: "api", Rate: model.Rate{Quota: 2, Period: time.Minute}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	r := NewRecorder(minute, 0, 0)
	r.Add(1, "a", 3)
	a, err := AdviseQuery(r, "api", l, minute, url.Values{"candidate": {"3/m"}})
	if err != nil || a.KeyPeriods != 1 || len(a.Candidates) != 5 || a.Candidates[4].Name != "asked" || a.Candidates[4].KeyPeriods.Value != 0 {
		t.Fatalf("AdviseQuery: %+v, %v; want 1 key-period, the asked 3/m (allowance 6) refusing none", a, err)
	}
	if _, err := AdviseQuery(r, "api", l, minute, url.Values{"burst": {"1"}}); model.FieldOf(err) == nil {
		t.Fatalf("a burst without a candidate: %v, want a FieldError", err)
	}
	if _, err := AdviseQuery(r, "api", l, minute, url.Values{"candidate": {"1e300/1ns"}}); model.FieldOf(err) == nil {
		t.Fatalf("a candidate admitting more than a float holds: %v, want a FieldError", err)
	}
}

func TestDigits(t *testing.T) {
	for _, c := range []struct {
		v    float64
		n    int
		want float64
	}{{45.40000001, 3, 45.4}, {37.83333, 3, 37.8}, {0.012345, 3, 0.0123}, {2.990348561777203, 4, 2.99}, {93.30267, 4, 93.3}, {123456, 3, 123000}, {0, 3, 0}} {
		if got := digits(c.v, c.n); got != c.want {
			t.Errorf("digits(%v, %d) = %v, want %v", c.v, c.n, got, c.want)
		}
	}
}

// TestRecorderFolded: the metrics' read folds the periods over once a
// sweep is due, even when no request comes.
func TestRecorderFolded(t *testing.T) {
	r := NewRecorder(int64(time.Second), 0, 0)
	r.Add(1, "a", 2)
	r.Add(2, "b", 1)
	if s := r.Folded(int64(1500 * time.Millisecond)); s.Count() != 0 {
		t.Fatalf("before a sweep is due: %d key-periods folded, want 0", s.Count())
	}
	if s := r.Folded(int64(11 * time.Second)); s.Count() != 2 || s.Sum() != 3 {
		t.Fatalf("at the sweep: %d key-periods of sum %v folded, want 2 of 3", s.Count(), s.Sum())
	}
}

// TestSketchOf: a sketch rebuilt from its values' buckets, as Bucketing
// says, is the sketch of those values.
func TestSketchOf(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	var direct Sketch
	counts := map[int]uint64{}
	sum, largest := 0.0, 0.0
	lo, lnG, last := Bucketing()
	for i := 0; i < 5000; i++ {
		v := math.Exp(rng.Float64()*30 - 8) // 3e-4 to 4e9: both ends of the range
		direct.Add(v)
		b := 0
		if v > lo {
			b = int(math.Ceil(math.Log(v/lo) / lnG))
			if b > last {
				b = last
			}
		}
		counts[b]++
		sum += v
		largest = math.Max(largest, v)
	}
	got := SketchOf(counts, sum, largest)
	if got.Count() != direct.Count() || got.Sum() != direct.Sum() {
		t.Fatalf("%d values of sum %v, want %d of %v", got.Count(), got.Sum(), direct.Count(), direct.Sum())
	}
	for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 1} {
		if g, w := got.Quantile(q), direct.Quantile(q); g != w {
			t.Errorf("quantile %v: %v, want %v", q, g, w)
		}
	}
}

// TestAdviceOpenKeyPeriods: before a key's period is over, an advice
// counts no key and no cost; it says how many key-periods are open and
// when the first completes, and stops saying so once they count.
func TestAdviceOpenKeyPeriods(t *testing.T) {
	l := &model.Limit{Name: "api", Rate: model.Rate{Quota: 10, Period: time.Minute}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	r := NewRecorder(minute, 0, 0)
	for i, key := range []string{"a", "b", "c"} {
		r.Add(int64(10+i)*int64(time.Second), key, 1)
	}
	a, err := AdviseQuery(r, "api", l, 30*int64(time.Second), nil)
	if err != nil || a.Keys != 0 || a.Cost != 0 || a.FollowedKeys != 3 || a.OpenKeyPeriods != 3 || a.FirstComplete == nil || !a.FirstComplete.Equal(time.Unix(60, 0)) {
		t.Errorf("mid-period: %d keys, cost %v, %d followed, %d open, first complete %v (%v); want 0, 0, 3, 3 and the period's end, %v",
			a.Keys, a.Cost, a.FollowedKeys, a.OpenKeyPeriods, a.FirstComplete, err, time.Unix(60, 0).UTC())
	}
	a, err = AdviseQuery(r, "api", l, minute, nil)
	if err != nil || a.KeyPeriods != 3 || a.OpenKeyPeriods != 0 || a.FirstComplete != nil {
		t.Errorf("at the period's end: %d key-periods, %d open, first complete %v (%v); want 3, 0 and none", a.KeyPeriods, a.OpenKeyPeriods, a.FirstComplete, err)
	}
}

// TestAdviceSteadyClients: clients asking steadily, some above the
// candidate's rate, are refused, when the candidate is enforced, a share of
// their cost between the advice's two figures: at least the refusal at
// its allowance, which assumes every period starts with a full bucket and
// understates what a steady heavy client meets, and at most the sustained
// refusal, at the rate alone. The candidate is 30/10s with a burst of 30,
// as asked of a zone of 10 s periods.
func TestAdviceSteadyClients(t *testing.T) {
	zone := &model.Limit{Name: "api", Rate: model.Rate{Quota: 10, Period: 10 * time.Second}}
	cand := &model.Limit{Name: "cand", Rate: model.Rate{Quota: 30, Period: 10 * time.Second}, Burst: 30}
	for _, l := range []*model.Limit{zone, cand} {
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	period := zone.PeriodNanos()
	r := NewRecorder(period, 0, 0)
	const span = int64(600 * time.Second)
	var asked, refused float64
	perPeriod := map[[2]int64]float64{} // client and period → demand
	for i, perSecond := range []float64{0.5, 1, 2, 3.5, 4, 5, 8, 12} {
		key := "steady-" + strconv.Itoa(i)
		gap := int64(float64(time.Second) / perSecond)
		var st model.State
		for now := int64(i) * int64(time.Millisecond) * 37; now < span; now += gap {
			r.Add(now, key, 1)
			perPeriod[[2]int64{int64(i), now / period}]++
			var d model.Decision
			model.Step(cand, &st, now, 1, &d)
			asked++
			if !d.Allowed {
				refused++
			}
		}
	}
	q := url.Values{"candidate": {"30/10s"}, "burst": {"30"}}
	a, err := AdviseQuery(r, "api", zone, span, q)
	if err != nil {
		t.Fatal(err)
	}
	v := a.Candidates[len(a.Candidates)-1]
	if v.Allowance != 60 || v.Sustained.Allowance != 30 {
		t.Fatalf("allowances %v and %v, want 60 (burst 30 + 30 a period) and 30 (the rate's)", v.Allowance, v.Sustained.Allowance)
	}
	// The two figures exactly, from the trace: each key-period's excess.
	var least, most float64
	for _, d := range perPeriod {
		least += math.Max(0, d-v.Allowance)
		most += math.Max(0, d-v.Sustained.Allowance)
	}
	least, most = least/asked, most/asked
	measured := refused / asked
	t.Logf("enforced, refused %.4f of the cost; the advice: at least %.4f (exact %.4f), sustained %.4f (exact %.4f)", measured, v.Cost.Value, least, v.Sustained.Cost.Value, most)
	if least < v.Cost.Low || least > v.Cost.High || most < v.Sustained.Cost.Low || most > v.Sustained.Cost.High {
		t.Errorf("exact figures %.4f and %.4f outside the advice's bounds [%.4f, %.4f] and [%.4f, %.4f]", least, most, v.Cost.Low, v.Cost.High, v.Sustained.Cost.Low, v.Sustained.Cost.High)
	}
	if measured < least || measured > most {
		t.Errorf("enforced, the candidate refused %.4f of the cost, outside the advice's figures, %.4f to %.4f", measured, least, most)
	}
	if measured <= v.Cost.High {
		t.Errorf("refused %.4f, within the figure at the full allowance (%.4f): the test's clients should show what it understates", measured, v.Cost.High)
	}
}
