package core

import "math"

// leakyBucket shapes traffic the way NGINX's limit_req does without nodelay,
// in the GCRA formulation: the state's T is the instant at which every
// admitted request will have left (the theoretical arrival time). Each unit
// of cost occupies Period/Quota of the outlet. A request arriving at now
// waits delay = max(T, now) − now for the requests ahead of it, which amount
// to backlog = delay·Quota/Period units. It is admitted iff
//
//	backlog + cost ≤ Capacity   (the queue, including the request, fits)
//	delay ≤ MaxDelay            (when MaxDelay is set)
//
// and then proceeds after delay; T moves to max(T, now) + cost·Period/Quota.
// With Capacity 5 at 5/s, five simultaneous requests are admitted with
// delays 0, 200, 400, 600 and 800 ms; the sixth is rejected.
//
// Remaining counts what the queue still holds, Capacity − ahead·Quota/Period
// for the ahead nanoseconds of requests already queued; with MaxDelay it is
// also at most the number of unit requests that could still be admitted
// one after another, ⌊(MaxDelay − ahead)·Quota/Period⌋ + 1, and 0 once
// ahead exceeds MaxDelay.
func leakyBucket(l *Limit, s *State, now int64, cost float64, d *Decision) int64 {
	start := s.T
	if start < now {
		start = now
	}
	delay := float64(start - now)
	backlog := delay / l.unit
	*d = Decision{Limit: l, Quota: l.Rate.Quota}
	switch {
	case cost > l.capacity+eps:
		d.RetryAfter = Never
	case backlog+cost <= l.capacity+eps && (l.MaxDelay == 0 || delay <= float64(l.MaxDelay)):
		d.Allowed = true
		d.Delay = duration(delay)
		s.T = start + int64(cost*l.unit+0.5)
	default:
		// The backlog drains at one unit per l.unit: wait until the
		// request fits the queue and, with MaxDelay, until its own wait
		// is short enough.
		wait := (backlog + cost - l.capacity) * l.unit
		if l.MaxDelay > 0 && delay-float64(l.MaxDelay) > wait {
			wait = delay - float64(l.MaxDelay)
		}
		d.RetryAfter = duration(wait)
		if d.RetryAfter == 0 {
			d.RetryAfter = 1
		}
	}
	ahead := float64(s.T - now)
	if ahead < 0 {
		ahead = 0
	}
	d.Remaining = nonNegative(l.capacity - ahead/l.unit)
	if l.MaxDelay > 0 {
		// The next unit request would wait ahead, the one after it
		// ahead + Period/Quota, and so on; none may wait past MaxDelay.
		byDelay := 0.0
		if ahead <= float64(l.MaxDelay) {
			byDelay = math.Floor((float64(l.MaxDelay)-ahead)/l.unit+eps) + 1
		}
		if byDelay < d.Remaining {
			d.Remaining = byDelay
		}
	}
	d.Reset = duration(ahead)
	return s.T // Expiry
}
