package core

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// breakerStep is one call on a Breaker at an instant (milliseconds from 0)
// and what it must observe.
type breakerStep struct {
	at    int64  // instant, ms
	op    string // "allow"; "ok", "fail", "skip" by the last call allowed; "late ok", "late fail" by a call admitted while closed; "lost ok", "lost skip" by the call allowed before the last
	allow bool   // for "allow": the expected result
	state BreakerState
}

func TestBreaker(t *testing.T) {
	tests := []struct {
		name     string
		failures int
		backoff  time.Duration
		steps    []breakerStep
	}{
		{
			name: "defaults: five failures open it for one second",
			steps: []breakerStep{
				{0, "allow", true, BreakerClosed},
				{0, "fail", false, BreakerClosed},
				{1, "fail", false, BreakerClosed},
				{2, "fail", false, BreakerClosed},
				{3, "fail", false, BreakerClosed},
				{4, "fail", false, BreakerOpen},
				{5, "allow", false, BreakerOpen},
				{1003, "allow", false, BreakerOpen},
				{1004, "allow", true, BreakerHalfOpen},
				{1004, "allow", false, BreakerHalfOpen},
				{1005, "ok", false, BreakerClosed},
				{1005, "allow", true, BreakerClosed},
			},
		},
		{
			name:     "a success resets the count of consecutive failures",
			failures: 2, backoff: 100 * time.Millisecond,
			steps: []breakerStep{
				{0, "fail", false, BreakerClosed},
				{1, "ok", false, BreakerClosed},
				{2, "fail", false, BreakerClosed},
				{3, "ok", false, BreakerClosed},
				{4, "fail", false, BreakerClosed},
				{5, "fail", false, BreakerOpen},
				{6, "allow", false, BreakerOpen},
			},
		},
		{
			name:     "a failed probe opens it for another backoff",
			failures: 1, backoff: 100 * time.Millisecond,
			steps: []breakerStep{
				{0, "fail", false, BreakerOpen},
				{100, "allow", true, BreakerHalfOpen},
				{150, "fail", false, BreakerOpen},
				{200, "allow", false, BreakerOpen},
				{249, "allow", false, BreakerOpen},
				{250, "allow", true, BreakerHalfOpen},
				{251, "ok", false, BreakerClosed},
			},
		},
		{
			name:     "a probe that never reports is replaced after backoff",
			failures: 1, backoff: 100 * time.Millisecond,
			steps: []breakerStep{
				{0, "fail", false, BreakerOpen},
				{100, "allow", true, BreakerHalfOpen},
				{199, "allow", false, BreakerHalfOpen},
				{200, "allow", true, BreakerHalfOpen},
				{201, "allow", false, BreakerHalfOpen},
			},
		},
		{
			name:     "only the probe's outcome decides a half-open breaker",
			failures: 1, backoff: 100 * time.Millisecond,
			steps: []breakerStep{
				{0, "allow", true, BreakerClosed},
				{0, "fail", false, BreakerOpen},
				{100, "allow", true, BreakerHalfOpen},
				// Calls admitted before it opened report late.
				{110, "late ok", false, BreakerHalfOpen},
				{120, "allow", false, BreakerHalfOpen},
				{130, "late fail", false, BreakerHalfOpen},
				{140, "allow", false, BreakerHalfOpen},
				{150, "ok", false, BreakerClosed},
			},
		},
		{
			name:     "a probe presumed lost does not decide for its successor",
			failures: 1, backoff: 100 * time.Millisecond,
			steps: []breakerStep{
				{0, "fail", false, BreakerOpen},
				{100, "allow", true, BreakerHalfOpen},
				{200, "allow", true, BreakerHalfOpen},
				{210, "lost ok", false, BreakerHalfOpen},
				{220, "fail", false, BreakerOpen},
			},
		},
		{
			name:     "a probe answered without the store lets the next call probe at once",
			failures: 1, backoff: 100 * time.Millisecond,
			steps: []breakerStep{
				{0, "fail", false, BreakerOpen},
				{100, "allow", true, BreakerHalfOpen},
				{110, "skip", false, BreakerHalfOpen},
				{110, "allow", true, BreakerHalfOpen},
				{111, "allow", false, BreakerHalfOpen},
				{112, "lost skip", false, BreakerHalfOpen}, // its ticket is no longer the probe's
				{113, "allow", false, BreakerHalfOpen},
				{120, "fail", false, BreakerOpen},
				{219, "allow", false, BreakerOpen},
				{220, "allow", true, BreakerHalfOpen},
				{230, "ok", false, BreakerClosed},
			},
		},
		{
			name:     "a call answered without the store keeps the failure count",
			failures: 2, backoff: 100 * time.Millisecond,
			steps: []breakerStep{
				{0, "fail", false, BreakerClosed},
				{1, "skip", false, BreakerClosed},
				{2, "fail", false, BreakerOpen},
			},
		},
		{
			name:     "late outcomes of calls admitted before it opened are ignored",
			failures: 1, backoff: 100 * time.Millisecond,
			steps: []breakerStep{
				{0, "fail", false, BreakerOpen},
				{10, "late ok", false, BreakerOpen},
				{90, "late fail", false, BreakerOpen},
				{100, "allow", true, BreakerHalfOpen}, // not extended by the late failure
			},
		},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			b := &Breaker{Failures: tt.failures, Backoff: tt.backoff}
			var probe, lost uint64 // the last call's ticket, and the one before
			for i, s := range tt.steps {
				now := s.at * int64(time.Millisecond)
				switch s.op {
				case "allow":
					got, p := b.Allow(now)
					if got != s.allow {
						t.Fatalf("step %d: Allow(%d ms) = %v, want %v", i, s.at, got, s.allow)
					}
					if got {
						lost, probe = probe, p
					}
				case "ok":
					b.Success(probe)
				case "fail":
					b.Failure(now, probe)
				case "late ok":
					b.Success(0)
				case "late fail":
					b.Failure(now, 0)
				case "lost ok":
					b.Success(lost)
				case "skip":
					b.Skipped(probe)
				case "lost skip":
					b.Skipped(lost)
				default:
					t.Fatalf("step %d: unknown op %q", i, s.op)
				}
				if got := b.State(); got != s.state {
					t.Fatalf("step %d (%s at %d ms): state %v, want %v", i, s.op, s.at, got, s.state)
				}
			}
		})
	}
}

// TestBreakerOneProbe checks that of many concurrent callers, exactly one
// gets the half-open probe.
func TestBreakerOneProbe(t *testing.T) {
	for trial := 0; trial < 20; trial++ {
		b := &Breaker{Failures: 1, Backoff: time.Second}
		b.Failure(0, 0)
		var admitted int32
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if ok, _ := b.Allow(int64(time.Second)); ok {
					atomic.AddInt32(&admitted, 1)
				}
			}()
		}
		wg.Wait()
		if admitted != 1 {
			t.Fatalf("trial %d: %d probes admitted, want 1", trial, admitted)
		}
	}
}
