package model

import (
	"testing"
	"time"
)

// costLimit is a validated limit of alg at 10 a second (capacity 10)
// that takes its cost from the response header X-Cost.
func costLimit(t *testing.T, alg Algorithm, maxDelay time.Duration) *Limit {
	t.Helper()
	l := &Limit{Name: "cost", Algorithm: alg, Rate: Rate{Quota: 10, Period: time.Second}, MaxDelay: maxDelay, CostHeader: "X-Cost"}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestResponseCost: a header's number is the cost, at most the capacity;
// anything but a finite number that is not negative states none.
func TestResponseCost(t *testing.T) {
	l := costLimit(t, TokenBucket, 0)
	for _, c := range []struct {
		value string
		cost  float64
		ok    bool
	}{
		{"7", 7, true}, {" 7 ", 7, true}, {"2.5", 2.5, true}, {"0", 0, true}, {"1e308", 10, true}, {"10.5", 10, true},
		{"-5", 0, false}, {"NaN", 0, false}, {"Inf", 0, false}, {"-Inf", 0, false}, {"1e400", 0, false},
		{"0x10", 0, false}, {"", 0, false}, {"12abc", 0, false}, {"7 7", 0, false},
	} {
		cost, ok := ResponseCost(l, c.value)
		if cost != c.cost || ok != c.ok {
			t.Errorf("ResponseCost(%q) = %v, %v; want %v, %v", c.value, cost, ok, c.cost, c.ok)
		}
	}
}

// TestChargeDebt: on every algorithm, a state charged 15 beyond the 5 it
// holds (capacity 10) is in debt: a request of cost 0 or 1 is refused,
// with nothing remaining, until its RetryAfter, which the state outlives,
// and admitted then; a cost of 0 charges nothing, on a sliding log no
// entry.
func TestChargeDebt(t *testing.T) {
	const now = int64(1000 * time.Second)
	for _, alg := range Algorithms {
		l := costLimit(t, alg, 0)
		s, d := l.Decide(State{}, now, 5)
		if !d.Allowed {
			t.Fatalf("%s: 5 of 10 refused", alg)
		}
		if z, d := l.Decide(s, now, 0); !d.Allowed || len(z.Log) != len(s.Log) || z.A != s.A {
			t.Errorf("%s: cost 0: %+v, %+v; want admitted, charging nothing", alg, d, z)
		}
		s = l.Charge(s, now, 15)
		if z, d := l.Decide(s, now, 0); d.Allowed || len(z.Log) != len(s.Log) {
			t.Errorf("%s: cost 0 in debt: %+v, log of %d, want refused and no entry", alg, d, len(z.Log))
		}
		for _, cost := range []float64{0, 1} {
			_, d := l.Decide(s, now, cost)
			if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter == Never || d.Reset < d.RetryAfter {
				t.Fatalf("%s: cost %v in debt: %+v", alg, cost, d)
			}
			if exp := l.Expiry(s); exp < now+int64(d.RetryAfter) {
				t.Errorf("%s: cost %v: the state expires %v before its RetryAfter %v", alg, cost, time.Duration(exp-now), d.RetryAfter)
			}
			if _, e := l.Decide(s, now+int64(d.RetryAfter)-int64(time.Millisecond), cost); e.Allowed {
				t.Errorf("%s: cost %v admitted 1 ms before RetryAfter %v", alg, cost, d.RetryAfter)
			}
			if _, e := l.Decide(s, now+int64(d.RetryAfter), cost); !e.Allowed {
				t.Errorf("%s: cost %v refused after RetryAfter %v: %+v", alg, cost, d.RetryAfter, e)
			}
		}
	}
	// The token bucket's and leaky bucket's waits, exactly: 10 beyond the
	// capacity at 10 a second is a second, and a cost of 1 a tenth more.
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		l := costLimit(t, alg, 0)
		s := l.Charge(State{}, now, 20)
		if _, d := l.Decide(s, now, 1); d.RetryAfter != 1100*time.Millisecond || d.Reset != 2*time.Second {
			t.Errorf("%s: 20 charged, cost 1: %+v, want RetryAfter 1.1 s and Reset 2 s", alg, d)
		}
	}
}

// TestChargeDelayed: a token bucket with MaxDelay delays, within it, a
// request that its debt would otherwise refuse; a leaky bucket's debt
// beyond MaxDelay refuses until the wait is within it.
func TestChargeDelayed(t *testing.T) {
	const now = int64(1000 * time.Second)
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		l := costLimit(t, alg, 300*time.Millisecond)
		s := l.Charge(State{}, now, 14) // 1.4 s to repay
		_, d := l.Decide(s, now, 0)
		if d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("%s: %+v, want refused", alg, d)
		}
		if _, e := l.Decide(s, now+int64(d.RetryAfter), 0); !e.Allowed || e.Delay > l.MaxDelay || e.Delay == 0 {
			t.Errorf("%s: after RetryAfter %v: %+v, want admitted with a delay within 300 ms", alg, d.RetryAfter, e)
		}
	}
}

// TestChargeBounded: however much is charged, a bucket's debt stays
// within what the rate repays in MaxSpan, so that no instant overflows;
// a limit without a response cost is never in debt.
func TestChargeBounded(t *testing.T) {
	const now = int64(1000 * time.Second)
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		l := costLimit(t, alg, 0)
		s := State{}
		for i := 0; i < 5; i++ {
			s = l.Charge(s, now, 1e300)
		}
		if exp := l.Expiry(s); exp <= now || exp > now+int64(MaxSpan)+1 {
			t.Errorf("%s: expiry %d after charging 5e300, want within MaxSpan of %d", alg, exp, now)
		}
	}
	plain := &Limit{Name: "plain", Rate: Rate{Quota: 10, Period: time.Second}}
	if err := plain.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, d := plain.Decide(plain.Charge(State{}, now, 100), now, 1); d.RetryAfter != 100*time.Millisecond {
		t.Errorf("a limit without a response cost charged 100: %+v, want empty, not in debt", d)
	}
}

// TestSettle: a settlement below the estimate gives back what Refund
// gives back, one above charges the difference, and a charge that was
// not marked is left alone.
func TestSettle(t *testing.T) {
	const now = int64(1000 * time.Second)
	for _, alg := range Algorithms {
		l := costLimit(t, alg, 0)
		s, d := l.Decide(State{}, now, 4)
		less, want := s, l.Refund(s, now, 3, d)
		less.Log = append([]LogEntry(nil), s.Log...)
		Settle(l, &less, now, 4, 1, &d.Mark)
		if _, a := l.Decide(less, now, 9); !a.Allowed {
			t.Errorf("%s: 4 settled at 1: 9 more refused", alg)
		}
		if _, a := l.Decide(want, now, 9); !a.Allowed {
			t.Errorf("%s: 3 of 4 refunded: 9 more refused", alg)
		}
		more := s
		more.Log = append([]LogEntry(nil), s.Log...)
		Settle(l, &more, now, 4, 10, &d.Mark)
		if _, a := l.Decide(more, now, 1); a.Allowed {
			t.Errorf("%s: 4 settled at 10 is 10 charged: a cost of 1 admitted", alg)
		}
		none := s
		none.Log = append([]LogEntry(nil), s.Log...)
		Settle(l, &none, now, 4, 10, &Mark{})
		if _, a := l.Decide(none, now, 6); !a.Allowed {
			t.Errorf("%s: an unmarked charge settled", alg)
		}
	}
}
