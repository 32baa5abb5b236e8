package model

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
)

// TestLeakyBucketRemainingMaxDelay: with MaxDelay, Remaining is the number
// of unit requests that would still be admitted at the same instant, never
// a fraction of one; 0 once the queue ahead is longer than MaxDelay.
func TestLeakyBucketRemainingMaxDelay(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		maxDelay time.Duration
		taken    int
		want     float64
	}{
		{500 * ms, 0, 3}, // 0, 200, 400 ms pass; 600 ms does not
		{500 * ms, 1, 2},
		{500 * ms, 2, 1},
		{500 * ms, 3, 0}, // 600 ms ahead: it was 0.5 before
		{400 * ms, 2, 1}, // a wait of exactly MaxDelay passes
		{400 * ms, 3, 0},
		{199 * ms, 0, 1},
		{199 * ms, 1, 0},
		{time.Minute, 0, 10}, // the queue's depth bounds it first
		{time.Minute, 4, 6},
	}
	for _, c := range cases {
		l := algLimit(t, LeakyBucket, "5/s", 10, c.maxDelay)
		var s State
		var d Decision
		for i := 0; i < c.taken; i++ {
			if s, d = l.Decide(s, testclock.Epoch, 1); !d.Allowed {
				t.Fatalf("MaxDelay %v: request %d rejected", c.maxDelay, i+1)
			}
		}
		if c.taken == 0 {
			_, d = l.Decide(s, testclock.Epoch, 100) // rejected (cost above capacity); reports the empty queue
		}
		if d.Remaining != c.want {
			t.Errorf("MaxDelay %v, %d taken: Remaining %v, want %v", c.maxDelay, c.taken, d.Remaining, c.want)
		}
		// Remaining is exact: that many unit requests pass now, one more does not.
		n := 0
		for n <= 20 {
			next, e := l.Decide(s, testclock.Epoch, 1)
			if !e.Allowed {
				break
			}
			s = next
			n++
		}
		if float64(n) != c.want {
			t.Errorf("MaxDelay %v, %d taken: %d more admitted, Remaining said %v", c.maxDelay, c.taken, n, c.want)
		}
	}
	// Without MaxDelay only the queue's depth counts, fractions included.
	l := algLimit(t, LeakyBucket, "5/s", 2.5, 0)
	if _, d := l.Decide(State{}, testclock.Epoch, 1); d.Remaining != 1.5 {
		t.Errorf("burst 2.5 after one request: Remaining %v, want 1.5", d.Remaining)
	}
}
