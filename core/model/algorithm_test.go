package model

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
)

// algLimit returns a validated limit.
func algLimit(t testing.TB, alg Algorithm, rate string, burst float64, maxDelay time.Duration) *Limit {
	t.Helper()
	r, err := ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	l := &Limit{Name: "t", Algorithm: alg, Rate: r, Burst: burst, MaxDelay: maxDelay}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLimitValidateErrors(t *testing.T) {
	perMin := Rate{Quota: 10, Period: time.Minute}
	cases := []struct {
		name  string
		limit Limit
		field string // the FieldError's, which the error names
	}{
		{"empty name", Limit{Rate: perMin}, "name"},
		{"colon in name", Limit{Name: "a:b", Rate: perMin}, "name"},
		{"zero quota", Limit{Name: "x", Rate: Rate{Period: time.Second}}, "rate.quota"},
		{"negative quota", Limit{Name: "x", Rate: Rate{Quota: -1, Period: time.Second}}, "rate.quota"},
		{"NaN quota", Limit{Name: "x", Rate: Rate{Quota: math.NaN(), Period: time.Second}}, "rate.quota"},
		{"infinite quota", Limit{Name: "x", Rate: Rate{Quota: math.Inf(1), Period: time.Second}}, "rate.quota"},
		{"zero period", Limit{Name: "x", Rate: Rate{Quota: 1}}, "rate.period"},
		{"unknown algorithm", Limit{Name: "x", Algorithm: "gcra", Rate: perMin}, "algorithm"},
		{"negative burst", Limit{Name: "x", Rate: perMin, Burst: -1}, "burst"},
		{"NaN burst", Limit{Name: "x", Rate: perMin, Burst: math.NaN()}, "burst"},
		{"burst on fixed_window", Limit{Name: "x", Algorithm: FixedWindow, Rate: perMin, Burst: 5}, "burst"},
		{"burst on sliding_window_log", Limit{Name: "x", Algorithm: SlidingWindowLog, Rate: perMin, Burst: 5}, "burst"},
		{"burst on sliding_window_counter", Limit{Name: "x", Algorithm: SlidingWindowCounter, Rate: perMin, Burst: 5}, "burst"},
		{"max_delay on sliding_window_log", Limit{Name: "x", Algorithm: SlidingWindowLog, Rate: perMin, MaxDelay: time.Second}, "max_delay"},
		{"max_delay on fixed_window", Limit{Name: "x", Algorithm: FixedWindow, Rate: perMin, MaxDelay: time.Second}, "max_delay"},
		{"negative max_delay", Limit{Name: "x", Algorithm: LeakyBucket, Rate: perMin, MaxDelay: -time.Second}, "max_delay"},
		{"log quota above MaxLogQuota", Limit{Name: "x", Algorithm: SlidingWindowLog, Rate: Rate{Quota: MaxLogQuota + 1, Period: time.Hour}}, "rate.quota"},
		{"period above MaxSpan", Limit{Name: "x", Algorithm: FixedWindow, Rate: Rate{Quota: 1, Period: MaxSpan + time.Hour}}, "rate.period"},
		{"period not whole microseconds", Limit{Name: "x", Rate: Rate{Quota: 1, Period: 1500 * time.Nanosecond}}, "rate.period"},
		{"refill longer than MaxSpan", Limit{Name: "x", Rate: Rate{Quota: 1, Period: 24 * time.Hour}, Burst: 1e6}, "burst"},
		{"vanishing quota", Limit{Name: "x", Rate: Rate{Quota: 1e-300, Period: time.Second}}, "burst"},
		{"fixed_window quota below 1", Limit{Name: "x", Algorithm: FixedWindow, Rate: Rate{Quota: 0.5, Period: time.Second}}, "rate"},
		{"sliding_window_log quota below 1", Limit{Name: "x", Algorithm: SlidingWindowLog, Rate: Rate{Quota: 0.25, Period: time.Minute}}, "rate"},
		{"sliding_window_counter quota below 1", Limit{Name: "x", Algorithm: SlidingWindowCounter, Rate: Rate{Quota: 0.5, Period: time.Second}}, "rate"},
	}
	for _, c := range cases {
		l := c.limit
		err := l.Validate()
		if err == nil {
			t.Errorf("%s: Validate accepted %+v", c.name, c.limit)
			continue
		}
		if fe := FieldOf(err); fe == nil || fe.Field != c.field || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %q (%#v) does not name %q", c.name, err, fe, c.field)
		}
		if c.limit.Name != "" && !strings.Contains(err.Error(), `limit "`+c.limit.Name+`"`) {
			t.Errorf("%s: error %q does not name the limit", c.name, err)
		}
	}
	// A window's quota below 1 is refused with the rate to write instead.
	for _, c := range []struct {
		limit Limit
		want  string
	}{
		{Limit{Name: "x", Algorithm: FixedWindow, Rate: Rate{Quota: 0.5, Period: time.Second}}, "write it as 1/2s"},
		{Limit{Name: "x", Algorithm: SlidingWindowLog, Rate: Rate{Quota: 0.25, Period: time.Minute}}, "write it as 1/4m"},
		{Limit{Name: "x", Algorithm: SlidingWindowCounter, Rate: Rate{Quota: 0.5, Period: time.Second}}, `rate "0.5/1s"`},
	} {
		l := c.limit
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one containing %q", c.limit.Rate, err, c.want)
		}
	}
}

func TestLimitValidateDefaults(t *testing.T) {
	cases := []struct {
		limit    Limit
		alg      Algorithm
		capacity float64
	}{
		{Limit{Name: "a", Rate: Rate{Quota: 10, Period: time.Second}}, TokenBucket, 10},
		{Limit{Name: "a", Rate: Rate{Quota: 10, Period: time.Second}, Burst: 3}, TokenBucket, 3},
		{Limit{Name: "a", Algorithm: LeakyBucket, Rate: Rate{Quota: 10, Period: time.Second}, Burst: 2.5, MaxDelay: time.Second}, LeakyBucket, 2.5},
		{Limit{Name: "a", Algorithm: FixedWindow, Rate: Rate{Quota: 7, Period: time.Minute}}, FixedWindow, 7},
		{Limit{Name: "a", Algorithm: SlidingWindowLog, Rate: Rate{Quota: MaxLogQuota, Period: time.Minute}}, SlidingWindowLog, MaxLogQuota},
		{Limit{Name: "a", Algorithm: SlidingWindowCounter, Rate: Rate{Quota: 1e9, Period: time.Minute}}, SlidingWindowCounter, 1e9},
		// A quota below 1 is one request every so often, not none.
		{Limit{Name: "a", Rate: Rate{Quota: 0.5, Period: time.Second}}, TokenBucket, 1},
		{Limit{Name: "a", Algorithm: LeakyBucket, Rate: Rate{Quota: 0.5, Period: time.Second}}, LeakyBucket, 1},
		{Limit{Name: "a", Rate: Rate{Quota: 0.5, Period: time.Second}, Burst: 0.5}, TokenBucket, 0.5},
	}
	for _, c := range cases {
		l := c.limit
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", c.limit, err)
			continue
		}
		if l.Algorithm != c.alg || l.Capacity() != c.capacity || l.Namespace() != "a:"+string(c.alg) {
			t.Errorf("%+v: algorithm %q, capacity %v, namespace %q; want %q, %v, %q",
				c.limit, l.Algorithm, l.Capacity(), l.Namespace(), c.alg, c.capacity, "a:"+string(c.alg))
		}
		again := l
		if err := again.Validate(); err != nil || !reflect.DeepEqual(again, l) {
			t.Errorf("%+v: Validate is not idempotent: %v", c.limit, err)
		}
	}
}

// TestQuotaBelowOne: rate 0.5/s with the default burst admits one request
// every two seconds, for both buckets, and never rejects for good.
func TestQuotaBelowOne(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		l := algLimit(t, alg, "0.5/s", 0, 0)
		var s State
		now := testclock.Epoch
		for i := 0; i < 5; i++ {
			var d Decision
			s, d = l.Decide(s, now, 1)
			if !d.Allowed || d.Delay != 0 {
				t.Fatalf("%s, request %d at +%v: %+v, want admitted at once", alg, i, time.Duration(now-testclock.Epoch), d)
			}
			if _, d = l.Decide(s, now+int64(time.Second), 1); d.Allowed || d.RetryAfter != time.Second {
				t.Fatalf("%s, one second after request %d: %+v, want rejected, retry in 1s", alg, i, d)
			}
			now += int64(2 * time.Second)
		}
	}
}

func TestParseRate(t *testing.T) {
	cases := []struct {
		in     string
		want   Rate
		errHas string // non-empty: an error containing it is expected
	}{
		{"100/m", Rate{100, time.Minute}, ""},
		{"5/s", Rate{5, time.Second}, ""},
		{"1000/h", Rate{1000, time.Hour}, ""},
		{"10/1m30s", Rate{10, 90 * time.Second}, ""},
		{"2.5/s", Rate{2.5, time.Second}, ""},
		{"3/d", Rate{3, 24 * time.Hour}, ""},
		{"50/ms", Rate{50, time.Millisecond}, ""},
		{"1/min", Rate{1, time.Minute}, ""},
		{" 7 / 10s ", Rate{7, 10 * time.Second}, ""},
		{"100/x", Rate{}, "unknown unit"},
		{"100/", Rate{}, "unknown unit"},
		{"100/-1s", Rate{}, "unknown unit"},
		{"100/1x", Rate{}, "unknown unit or bad duration"},
		{"100", Rate{}, "<quota>/<period>"},
		{"abc/s", Rate{}, "not a number"},
		{"NaN/s", Rate{}, "not a number"},
		{"Inf/s", Rate{}, "not a number"},
		{"0/s", Rate{}, "quota must be positive"},
		{"-1/s", Rate{}, "quota must be positive"},
		{"1/0s", Rate{}, "period must be positive"},
		{"1000/1d", Rate{1000, 24 * time.Hour}, ""},
		{"1000/2days", Rate{1000, 48 * time.Hour}, ""},
		{"1000/1 day", Rate{1000, 24 * time.Hour}, ""},
		{"1/1.5d", Rate{1, 36 * time.Hour}, ""},
		{"10/90sec", Rate{10, 90 * time.Second}, ""},
		{"1/1.5h", Rate{1, 90 * time.Minute}, ""},
		{"1/1500ms", Rate{1, 1500 * time.Millisecond}, ""},
		{"1/1h15m", Rate{1, 75 * time.Minute}, ""},
		{"1/0d", Rate{}, "period must be positive"},
		{"1/1w", Rate{}, "unknown unit or bad duration"},
		{"1/1d12h", Rate{}, "unknown unit or bad duration"},
		{"1/1Day", Rate{}, "unknown unit or bad duration"},
		{"1/Day", Rate{}, "unknown unit"},
		{"1/1..5d", Rate{}, "unknown unit or bad duration"},
		{"1/999999999999d", Rate{}, "unknown unit or bad duration"},
		{"1/days ago", Rate{}, "unknown unit"},
	}
	for _, c := range cases {
		got, err := ParseRate(c.in)
		if c.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), c.errHas) {
				t.Errorf("ParseRate(%q) = %v, %v; want an error containing %q", c.in, got, err, c.errHas)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", c.in, got, err, c.want)
			continue
		}
		if back, err := ParseRate(got.String()); err != nil || back != got {
			t.Errorf("ParseRate(%q.String() = %q) = %v, %v; want %v", c.in, got.String(), back, err, got)
		}
	}
}

// TestParseRateUnits: every name of a unit that ParseRate's comment
// lists reads as one of the unit alone, and as a count of it after a
// whole or decimal count, with or without a space; and ParseRate knows no
// name that the list lacks.
func TestParseRateUnits(t *testing.T) {
	units := []struct {
		unit  time.Duration
		names []string
	}{
		{time.Millisecond, []string{"ms", "msec", "msecs", "millisecond", "milliseconds"}},
		{time.Second, []string{"s", "sec", "secs", "second", "seconds"}},
		{time.Minute, []string{"m", "min", "mins", "minute", "minutes"}},
		{time.Hour, []string{"h", "hr", "hrs", "hour", "hours"}},
		{24 * time.Hour, []string{"d", "day", "days"}},
	}
	listed := map[string]bool{}
	for _, u := range units {
		for _, name := range u.names {
			listed[name] = true
			for _, c := range []struct {
				period string
				want   time.Duration
			}{
				{name, u.unit},
				{"1" + name, u.unit},
				{"2" + name, 2 * u.unit},
				{"2 " + name, 2 * u.unit},
				{"10" + name, 10 * u.unit},
				{"0.5" + name, u.unit / 2},
			} {
				got, err := ParseRate("7/" + c.period)
				if err != nil || got != (Rate{7, c.want}) {
					t.Errorf("ParseRate(%q) = %v, %v; want 7 per %v", "7/"+c.period, got, err, c.want)
				}
			}
		}
	}
	for name := range periodUnits {
		if !listed[name] {
			t.Errorf("ParseRate reads the unit %q, which its comment does not list", name)
		}
	}
}

// algStep is one request of a trace: at testclock.Epoch+at, for cost.
type algStep struct {
	at   time.Duration
	cost float64
}

// algTraces builds states for the Expiry tests: each trace is applied from
// the zero State, keeping the states of admitted requests.
var algTraces = []struct {
	alg   Algorithm
	rate  string
	burst float64
	steps []algStep
}{
	{TokenBucket, "6/s", 0, []algStep{{0, 1}}}, // 1/6 s is not a whole number of ns
	{TokenBucket, "7/s", 3, []algStep{{0, 2.5}, {100 * time.Millisecond, 0.25}}},
	{TokenBucket, "100/m", 0, []algStep{{0, 100}}},
	{LeakyBucket, "5/s", 5, []algStep{{0, 1}, {0, 1}, {10 * time.Millisecond, 2.5}}},
	{LeakyBucket, "6/s", 0, []algStep{{0, 1}}},
	{FixedWindow, "10/m", 0, []algStep{{59 * time.Second, 3}}},
	{FixedWindow, "10/m", 0, []algStep{{0, 10}}},
	{SlidingWindowLog, "10/m", 0, []algStep{{0, 1}, {30 * time.Second, 2.5}, {59 * time.Second, 1}}},
	{SlidingWindowCounter, "10/m", 0, []algStep{{30 * time.Second, 4}}},
	{SlidingWindowCounter, "10/m", 0, []algStep{{30 * time.Second, 4}, {70 * time.Second, 1}}},
	{SlidingWindowCounter, "10/m", 0, []algStep{{30 * time.Second, 4}, {70 * time.Second, 1}, {130 * time.Second, 1}}},
}

// TestExpiry: a state at its Expiry, or later, decides exactly like the
// zero State, so a store may forget it.
func TestExpiry(t *testing.T) {
	for i, tr := range algTraces {
		l := algLimit(t, tr.alg, tr.rate, tr.burst, 0)
		var s State
		last := testclock.Epoch
		for _, st := range tr.steps {
			last = testclock.Epoch + int64(st.at)
			next, d := l.Decide(s, last, st.cost)
			if !d.Allowed {
				t.Fatalf("trace %d (%s): step %+v rejected", i, tr.alg, st)
			}
			s = next
		}
		exp := l.Expiry(s)
		if exp <= last {
			t.Errorf("trace %d (%s): Expiry %d not after the last request %d", i, tr.alg, exp-testclock.Epoch, last-testclock.Epoch)
		}
		for _, at := range []int64{exp, exp + 1, exp + int64(time.Hour)} {
			for _, cost := range []float64{1, 2.5, l.Capacity()} {
				gotS, got := l.Decide(s, at, cost)
				wantS, want := l.Decide(State{}, at, cost)
				if got != want || !reflect.DeepEqual(gotS, wantS) {
					t.Errorf("trace %d (%s %s), Expiry+%d, cost %v:\n got  %+v %+v\n want %+v %+v (the zero State's)",
						i, tr.alg, tr.rate, at-exp, cost, gotS, got, wantS, want)
				}
			}
		}
	}
	l := algLimit(t, SlidingWindowLog, "1/s", 0, 0)
	if e := l.Expiry(State{}); e != 0 {
		t.Errorf("sliding_window_log: Expiry of the empty state %d, want 0", e)
	}
}

// TestDecidePure: Decide leaves its argument intact, and a rejection
// charges nothing: deciding again from the returned state decides alike.
func TestDecidePure(t *testing.T) {
	for i, tr := range algTraces {
		l := algLimit(t, tr.alg, tr.rate, tr.burst, 0)
		var s State
		for _, st := range tr.steps {
			s, _ = l.Decide(s, testclock.Epoch+int64(st.at), st.cost)
		}
		now := testclock.Epoch + int64(tr.steps[len(tr.steps)-1].at)
		before := copyState(s)
		for _, cost := range []float64{0.5, 1, 2.5, 100} {
			s1, d1 := l.Decide(s, now, cost)
			if !reflect.DeepEqual(s, before) {
				t.Fatalf("trace %d (%s): Decide(cost %v) modified its argument: %+v, was %+v", i, tr.alg, cost, s, before)
			}
			if d1.Limit != l || d1.Quota != l.Rate.Quota || d1.Remaining < 0 || d1.Reset < 0 || d1.Delay < 0 {
				t.Errorf("trace %d (%s): cost %v: malformed decision %+v", i, tr.alg, cost, d1)
			}
			if d1.Allowed != (d1.RetryAfter == 0) || (tr.alg != LeakyBucket && d1.Delay != 0) {
				t.Errorf("trace %d (%s): cost %v: inconsistent decision %+v", i, tr.alg, cost, d1)
			}
			if d1.Allowed {
				continue
			}
			_, d2 := l.Decide(s1, now, cost)
			if d2 != d1 {
				t.Errorf("trace %d (%s): cost %v rejected, then decided differently from the returned state:\n %+v\n %+v", i, tr.alg, cost, d1, d2)
			}
		}
	}
}

func copyState(s State) State {
	if s.Log != nil {
		s.Log = append([]LogEntry(nil), s.Log...)
	}
	return s
}

// TestSlidingLogBoundedByMaxLogQuota: fractional costs cannot make a log
// longer than MaxLogQuota entries, and merging entries never admits more
// than the quota in any period. The trace fills the log with one large and
// MaxLogQuota−1 small entries, asks for more until the quota is reached
// (each admission merges into the newest entry), then asks again once the
// large entry has expired.
func TestSlidingLogBoundedByMaxLogQuota(t *testing.T) {
	l := algLimit(t, SlidingWindowLog, "10000/m", 0, 0)
	var s State
	var admitted []LogEntry
	now := testclock.Epoch
	ask := func(cost float64) bool {
		next, d := l.Decide(s, now, cost)
		if !d.Allowed {
			return false
		}
		s = next
		admitted = append(admitted, LogEntry{T: now, Cost: cost})
		if len(s.Log) > MaxLogQuota || s.A > l.Capacity()+Eps {
			t.Fatalf("at +%v: log of %d entries, sum %v", time.Duration(now-testclock.Epoch), len(s.Log), s.A)
		}
		return true
	}
	ask(4990)
	for i := 0; i < MaxLogQuota+200; i++ {
		now += int64(time.Millisecond)
		ask(0.5)
	}
	// 4990 + 0.5·k ≤ 10000: k = 10020 small requests pass, MaxLogQuota−1
	// as entries of their own and 21 merged into the newest.
	if len(admitted) != 1+10020 || len(s.Log) != MaxLogQuota {
		t.Errorf("%d admitted, log of %d entries; want %d, %d", len(admitted), len(s.Log), 1+10020, MaxLogQuota)
	}
	now = testclock.Epoch + l.PeriodNanos() // the large entry expires
	for i := 0; i < 500; i++ {
		if !ask(0.5) {
			t.Fatalf("request %d after the large entry expired: rejected", i)
		}
		now += int64(time.Millisecond)
	}
	if w := maxWindowSum(admitted, l.PeriodNanos()); w > l.Capacity()+1e-6 {
		t.Errorf("%v admitted within one period, above the quota %v", w, l.Capacity())
	}
}

// maxWindowSum is the largest total cost of entries within any half-open
// interval [t, t+period); entries must be in time order.
func maxWindowSum(es []LogEntry, period int64) float64 {
	best, sum := 0.0, 0.0
	i := 0
	for j := range es {
		sum += es[j].Cost
		for es[i].T+period <= es[j].T {
			sum -= es[i].Cost
			i++
		}
		if sum > best {
			best = sum
		}
	}
	return best
}

// TestLeakyBucketRefundExact: a request refunded right after it was
// admitted leaves no trace, even when the rate's unit is not a whole number
// of nanoseconds.
func TestLeakyBucketRefundExact(t *testing.T) {
	for _, rate := range []string{"6/s", "7/s", "3/s", "1000/h"} {
		l := algLimit(t, LeakyBucket, rate, 0, 0)
		s, d1 := l.Decide(State{}, testclock.Epoch, 1)
		s2, d := l.Decide(s, testclock.Epoch, 1.5)
		if !d.Allowed {
			t.Fatalf("%s: second request rejected", rate)
		}
		// The queue's end, T + A, as before, to float precision.
		if r := l.Refund(s2, testclock.Epoch, 1.5, d); math.Abs(float64(r.T-s.T)+r.A-s.A) > 1e-6 || r.A < 0 || r.A >= 1 {
			t.Errorf("%s: refunding 1.5 gives %+v, want the state before it %+v", rate, r, s)
		}
		if r := l.Refund(s, testclock.Epoch, 1, d1); l.Expiry(r) > testclock.Epoch {
			t.Errorf("%s: refunding the only request leaves it draining until +%dns", rate, l.Expiry(r)-testclock.Epoch)
		}
	}
}

// TestDecideDurationsRoundUp: RetryAfter, Delay and Reset round up to
// the nanosecond, so that waiting them is always enough.
func TestDecideDurationsRoundUp(t *testing.T) {
	l := algLimit(t, TokenBucket, "3/s", 1, 0)
	s, _ := l.Decide(State{}, testclock.Epoch, 1)
	_, d := l.Decide(s, testclock.Epoch, 1)
	if want := time.Duration(333333334); d.RetryAfter != want || d.Reset != want {
		t.Errorf("3/s exhausted: RetryAfter %v, Reset %v; want %v (1/3 s rounded up)", d.RetryAfter, d.Reset, want)
	}
	if _, d := l.Decide(s, testclock.Epoch+int64(d.RetryAfter), 1); !d.Allowed {
		t.Errorf("rejected after waiting RetryAfter: %+v", d)
	}
	if DurationOf(0.5) != 1 || DurationOf(-3) != 0 || DurationOf(2) != 2 || DurationOf(1e300) != Never {
		t.Errorf("duration rounding: %v %v %v %v", DurationOf(0.5), DurationOf(-3), DurationOf(2), DurationOf(1e300))
	}
}

// TestRateString: a rate prints as it is written, without a period's zero
// trailing units, and reads back.
func TestRateString(t *testing.T) {
	for _, c := range []struct {
		r    Rate
		want string
	}{
		{Rate{30, time.Minute}, "30/1m"},
		{Rate{1000, time.Hour}, "1000/1h"},
		{Rate{3, 24 * time.Hour}, "3/24h"},
		{Rate{5, 90 * time.Minute}, "5/1h30m"},
		{Rate{5, time.Hour + 5*time.Second}, "5/1h0m5s"},
		{Rate{10, 90 * time.Second}, "10/1m30s"},
		{Rate{2.5, time.Second}, "2.5/1s"},
		{Rate{10, 100 * time.Millisecond}, "10/100ms"},
		{Rate{1, 1500 * time.Millisecond}, "1/1.5s"},
	} {
		got := c.r.String()
		if got != c.want {
			t.Errorf("%v/%v: String() = %q, want %q", c.r.Quota, time.Duration(c.r.Period), got, c.want)
		}
		if back, err := ParseRate(got); err != nil || back != c.r {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", got, back, err, c.r)
		}
	}
}
