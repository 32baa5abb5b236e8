package model

import "math"

// LeakyBucketStep shapes traffic the way NGINX's limit_req does without nodelay,
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
//
// Its parameters after d are its variables, which its callers pass as
// zero values, and duration, nonNegative, nextUnits and leakyEnd are
// written out: see decide.
func LeakyBucketStep(l *Limit, s *State, now int64, cost float64, d *Decision,
	start, ahead int64, carry, delay, backlog, c, u float64, fits bool) int64 {
	// The queue ends at T + A, A a fraction of a nanosecond in [0, 1):
	// each admission adds cost·Period/Quota exactly, so that rounding
	// never costs a slot of the queue (7/s admits 7 at an instant).
	start = s.T
	carry = s.A
	if start < now {
		start = now
		carry = 0
	}
	c = l.capacity // and u is l.unit, as below
	u = l.unit
	ahead = start - now // the delay is ahead + carry
	delay = float64(ahead) + carry
	backlog = delay / u
	fits = true // the delay fits MaxDelay
	if l.MaxDelay > 0 {
		fits = leakyFits(l, ahead, carry)
	}
	*d = Decision{Limit: l, Quota: l.Rate.Quota}
	switch {
	case cost > c+Eps:
		d.RetryAfter = Never
	case backlog+cost <= c+Eps && fits:
		d.Allowed = true
		switch { // duration(delay)
		case delay <= 0:
		case delay >= float64(Never):
			d.Delay = Never
		default:
			d.Delay = nanos(delay)
			if float64(d.Delay) < delay {
				d.Delay++
			}
		}
		delay = carry + cost*u
		ahead = int64(delay) // whole nanoseconds of delay
		s.T = start + ahead
		s.A = delay - float64(ahead)
	default:
		// The backlog drains at one unit per l.unit: wait until the
		// request fits the queue and, with MaxDelay, until its own wait
		// is short enough (ahead: byDelay).
		delay = (backlog + cost - c) * u
		if !fits {
			delay = leakyOver(l, ahead, carry, delay)
		}
		switch { // duration(delay), at least 1
		case delay <= 0:
			d.RetryAfter = 1
		case delay >= float64(Never):
			d.RetryAfter = Never
		default:
			d.RetryAfter = nanos(delay)
			if float64(d.RetryAfter) < delay {
				d.RetryAfter++
			}
		}
	}
	// delay: queued, the nanoseconds that the queue holds; backlog: as
	// many units.
	delay = float64(s.T-now) + s.A
	if delay < 0 {
		delay = 0
	}
	backlog = delay / u
	d.Remaining = c - backlog
	if d.Remaining < 0 {
		d.Remaining = 0
	}
	if delay > 0 {
		switch { // duration(queued)
		case delay >= float64(Never):
			d.Reset = Never
		default:
			d.Reset = nanos(delay)
			if float64(d.Reset) < delay {
				d.Reset++
			}
		}
		// Next: nextUnits(Remaining, backlog) units, then duration.
		carry = 1
		if d.Remaining < 1<<53 {
			carry -= d.Remaining - float64(int64(d.Remaining))
		}
		if carry > backlog {
			carry = backlog
		}
		carry *= u
		switch {
		case carry <= 0:
		case carry >= float64(Never):
			d.Next = Never
		default:
			d.Next = nanos(carry)
			if float64(d.Next) < carry {
				d.Next++
			}
		}
	}
	if l.MaxDelay > 0 {
		leakyByDelay(l, delay, d)
	}
	if s.A > 0 { // Expires: leakyEnd
		return s.T + 1
	}
	return s.T
}

// leakyFits reports whether the delay of a request that l's queue holds
// ahead + carry ns of requests ahead of (carry a fraction of a nanosecond)
// fits l.MaxDelay, compared in whole nanoseconds. It and leakyOver are
// apart from leakyBucket so that limits without MaxDelay do not pay for
// them under Yaegi.
func leakyFits(l *Limit, ahead int64, carry float64) bool {
	most := int64(l.MaxDelay)
	return ahead < most || (ahead == most && carry == 0)
}

// leakyOver is the wait of a request that leakyBucket rejects, delay for
// the room in l's queue, when its own delay, ahead + carry ns, exceeds
// l.MaxDelay: at least until that delay is within MaxDelay.
func leakyOver(l *Limit, ahead int64, carry, delay float64) float64 {
	ahead -= int64(l.MaxDelay)
	if carry > 0 {
		ahead++
	}
	if float64(ahead) > delay {
		delay = float64(ahead)
	}
	return delay
}

// leakyByDelay bounds d.Remaining of a leaky bucket with a MaxDelay whose
// queue holds queued ns: the next unit request would wait queued, the one
// after it queued + Period/Quota, and so on; none may wait past MaxDelay.
// When that bound applies, one more is available once the queue drains to
// the next whole unit of room (d.Next). It is apart from leakyBucket so
// that limits without MaxDelay do not pay for it under Yaegi.
func leakyByDelay(l *Limit, queued float64, d *Decision) {
	byDelay, room := 0.0, (float64(l.MaxDelay)-queued)/l.unit+Eps
	if room >= 0 {
		byDelay = math.Floor(room) + 1
	}
	if byDelay >= d.Remaining {
		return
	}
	d.Remaining = byDelay
	if room >= 0 {
		d.Next = DurationOf((1 - (room - math.Floor(room))) * l.unit)
	} else {
		d.Next = DurationOf(-room * l.unit)
	}
}

// leakyEnd is the Expires of a leaky bucket's state: the first whole
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
