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
// delays 0, 200, 400, 600 and 800 ms; the sixth is rejected. T is kept in
// whole nanoseconds and A holds the fraction of one nanosecond by which
// the queue ends later, so that a Period/Quota that is not a whole number
// of nanoseconds accumulates no rounding.
//
// Remaining counts what the queue still holds, Capacity − ahead·Quota/Period
// for the ahead nanoseconds of requests already queued; with MaxDelay it is
// also at most the number of unit requests that could still be admitted
// one after another, ⌊(MaxDelay − ahead)·Quota/Period⌋ + 1, and 0 once
// ahead exceeds MaxDelay.
func leakyBucket(l *Limit, s *State, now int64, cost float64, d *Decision) int64 {
	// The queue ends at T + A, A a fraction of a nanosecond in [0, 1):
	// each admission adds cost·Period/Quota exactly, so that rounding
	// never costs a slot of the queue (7/s admits 7 at an instant).
	start, carry := s.T, s.A
	if start < now {
		start, carry = now, 0
	}
	ahead := start - now // the delay is ahead + carry
	delay := float64(ahead) + carry
	backlog := delay / l.unit
	// The delay fits MaxDelay, compared in whole nanoseconds.
	most := int64(l.MaxDelay)
	fits := most == 0 || ahead < most || (ahead == most && carry == 0)
	*d = Decision{Limit: l, Quota: l.Rate.Quota}
	switch {
	case cost > l.capacity+eps:
		d.RetryAfter = Never
	case backlog+cost <= l.capacity+eps && fits:
		d.Allowed = true
		d.Delay = duration(delay)
		x := carry + cost*l.unit
		whole := int64(x)
		s.T, s.A = start+whole, x-float64(whole)
	default:
		// The backlog drains at one unit per l.unit: wait until the
		// request fits the queue and, with MaxDelay, until its own wait
		// is short enough.
		wait := (backlog + cost - l.capacity) * l.unit
		if !fits {
			byDelay := ahead - most
			if carry > 0 {
				byDelay++
			}
			if float64(byDelay) > wait {
				wait = float64(byDelay)
			}
		}
		d.RetryAfter = duration(wait)
		if d.RetryAfter == 0 {
			d.RetryAfter = 1
		}
	}
	queued := float64(s.T-now) + s.A
	if queued < 0 {
		queued = 0
	}
	d.Remaining = nonNegative(l.capacity - queued/l.unit)
	d.Reset = duration(queued)
	if queued > 0 {
		d.Next = duration(nextUnits(d.Remaining, queued/l.unit) * l.unit)
	}
	if l.MaxDelay > 0 {
		leakyByDelay(l, queued, d)
	}
	return leakyEnd(s)
}

// leakyByDelay bounds d.Remaining of a leaky bucket with a MaxDelay whose
// queue holds queued ns: the next unit request would wait queued, the one
// after it queued + Period/Quota, and so on; none may wait past MaxDelay.
// When that bound applies, one more is available once the queue drains to
// the next whole unit of room (d.Next). It is apart from leakyBucket so
// that limits without MaxDelay do not pay for it under Yaegi.
func leakyByDelay(l *Limit, queued float64, d *Decision) {
	byDelay, room := 0.0, (float64(l.MaxDelay)-queued)/l.unit+eps
	if room >= 0 {
		byDelay = math.Floor(room) + 1
	}
	if byDelay >= d.Remaining {
		return
	}
	d.Remaining = byDelay
	if room >= 0 {
		d.Next = duration((1 - (room - math.Floor(room))) * l.unit)
	} else {
		d.Next = duration(-room * l.unit)
	}
}

// leakyEnd is the Expiry of a leaky bucket's state: the first whole
// nanosecond at which its queue, ending at T + A, has drained.
func leakyEnd(s *State) int64 {
	if s.A > 0 {
		return s.T + 1
	}
	return s.T
}

// leakyRefund gives cost back to a leaky bucket's queue at now, exactly as
// leakyBucket charged it, never below an empty queue.
func leakyRefund(l *Limit, s *State, now int64, cost float64) {
	if s.T < now || (s.T == now && s.A == 0) {
		return // drained
	}
	ahead := float64(s.T-now) + s.A - cost*l.unit
	if ahead <= 0 {
		s.T, s.A = now, 0
		return
	}
	whole := int64(ahead)
	s.T, s.A = now+whole, ahead-float64(whole)
}
