package model

import "time"

// Eps absorbs float rounding in comparisons of costs: a bucket refilled to
// 2.9999999999999996 tokens still admits a cost of 3.
const Eps = 1e-9

// Step applies the limit's algorithm to *s at instant now (nanoseconds)
// for the given cost: it moves *s to the next state in place, overwrites
// *d with the decision, and returns the next state's Expires. When the
// decision rejects, the next state charges nothing (it may differ from *s
// only by bookkeeping that changes no future decision, such as dropped
// expired log entries). A full sliding_window_log merges its newest entry
// in place, in the backing array that s.Log shares with any copy. Step
// does not mark the charge (Decision.Mark): the stores do.
//
// The limit must have passed Validate; cost must be positive, or zero to
// read *s: a zero cost charges nothing, and the decision reports what *s
// leaves at now (Remaining, Reset, Next). A state in debt (charged beyond
// the capacity by Settle) refuses even a zero cost until the rate has
// repaid the debt and the cost.
//
// It takes pointers because under Yaegi every struct passed or returned by
// value is copied through reflection, and every interpreted call costs
// about a microsecond: the in-memory store's hot path (take1) calls one
// algorithm only, which computes the expiry from what it has at hand.
//
// The algorithms are written for Yaegi, which runs the Traefik plugin's
// decisions: an interpreted call costs a frame, a copy of each argument
// and a value for every parameter, variable and intermediate result of
// the callee's whole body, so the helpers DurationOf, NextUnits, mod and
// NonNegative are written out where a decision calls them every time
// (Go's compiler inlines them anyway), as is leakyEnd. And since := (or
// var) allocates its variable again each time it runs, the algorithms
// take their variables as trailing parameters, which callers pass as zero
// values: a constant argument costs nothing.
func Step(l *Limit, s *State, now int64, cost float64, d *Decision) int64 {
	switch l.Algorithm {
	case TokenBucket:
		return TokenBucketStep(l, s, now, cost, d, 0, 0, 0)
	case LeakyBucket:
		return LeakyBucketStep(l, s, now, cost, d, 0, 0, 0, 0, 0, 0, 0, false)
	case FixedWindow:
		return FixedWindowStep(l, s, now, cost, d, 0, 0, 0)
	case SlidingWindowLog:
		return SlidingLogStep(l, s, now, cost, d, 0, 0, 0, nil)
	default:
		return SlidingCounterStep(l, s, now, cost, d, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	}
}

// refund gives back cost, at now, of the charge on *s that m marks (see
// Settle).
func refund(l *Limit, s *State, now int64, cost float64, m *Mark) {
	if !m.OK {
		return
	}
	last := s.T == m.T && s.A == m.A // no admission since
	switch l.Algorithm {
	case LeakyBucket:
		if last {
			leakyRefund(l, s, now, cost)
		}
	case TokenBucket:
		if !last && l.MaxDelay > 0 {
			return
		}
		// The deficit the admission left, refilled until now: what a
		// bucket that did not take it would hold more, at most.
		left := m.A
		if now > m.T {
			left -= float64(now-m.T) * l.Rate.Quota / float64(l.period)
		}
		if left < cost {
			cost = left
		}
		if cost > 0 {
			s.A = NonNegative(s.A - cost)
		}
	case FixedWindow, SlidingWindowCounter:
		if s.T == m.T {
			s.A = NonNegative(s.A - cost)
		} else if s.T == m.T+l.period && l.Algorithm == SlidingWindowCounter {
			s.B = NonNegative(s.B - cost) // now the previous window
		}
	case SlidingWindowLog:
		refundLog(s, m.T, cost)
	}
}

// Expires returns the instant from which *s is equivalent to the zero
// State, so that a store may forget it: the bucket is full, the queue
// drained, the windows over, the log empty (see Step, whose algorithms
// return the same instant).
func Expires(l *Limit, s *State) int64 {
	switch l.Algorithm {
	case TokenBucket:
		// Rounded up: at the truncated instant up to one nanosecond's
		// refill would still be missing.
		return s.T + int64(DurationOf(s.A*l.unit))
	case LeakyBucket:
		return leakyEnd(s)
	case FixedWindow:
		return s.T + l.period
	case SlidingWindowLog:
		if len(s.Log) == 0 {
			return 0
		}
		return s.Log[len(s.Log)-1].T + l.period
	default: // SlidingWindowCounter
		if s.A > 0 {
			return s.T + 2*l.period
		}
		return s.T + l.period
	}
}

// NextUnits is how many cost units a limit with rem units remaining, used
// units short of whole, must regain for rem floored to whole units to
// grow: the rest of rem's fractional unit, or used if less (a limit whose
// capacity is not whole becomes whole first). Decision.Next is that many
// units' worth of time.
func NextUnits(rem, used float64) float64 {
	need := 1.0
	if rem < 1<<53 { // larger doubles are whole; int64 truncates as Floor (rem >= 0), for less under Yaegi
		need -= rem - float64(int64(rem))
	}
	if need > used {
		need = used
	}
	return need
}

// DurationOf converts nanoseconds to a Duration, rounding up, so that waiting
// RetryAfter is always enough. Of a whole number of nanoseconds in
// (0, Never) it is the conversion alone (nanos).
func DurationOf(ns float64) time.Duration {
	if ns <= 0 {
		return 0
	}
	if ns >= float64(Never) {
		return Never
	}
	d := time.Duration(ns)
	if float64(d) < ns {
		d++
	}
	return d
}

// nanos is time.Duration under a name of this package, for the
// algorithms' conversions: under Yaegi the selector time.Duration is a
// value allocated on each call, a name of the package none.
type nanos = time.Duration

func NonNegative(x float64) float64 {
	if x < 0 {
		return 0
	}
	return x
}
