package core

// tokenBucket: a bucket of Capacity tokens, full when first seen, refilled
// continuously at Quota per Period. The state stores the deficit (tokens
// missing from a full bucket) so that the zero State is a full bucket.
//
// Refill is computed as elapsed·Quota/Period rather than elapsed·rate so that
// whole numbers stay whole: 0.5 s at 2/s refills exactly 1 token.
//
// It works on locals (t, deficit, c) and writes the state once: under
// Yaegi every field read is a value the interpreter allocates on each call.
func tokenBucket(l *Limit, s *State, now int64, cost float64, d *Decision) int64 {
	t, deficit, c := s.T, s.A, l.capacity
	if now < t {
		now = t // a clock step back mints nothing
	}
	if deficit > c {
		deficit = c // the capacity shrank: the bucket was empty, not in debt
	}
	if deficit > 0 {
		deficit -= float64(now-t) * l.Rate.Quota / float64(l.period)
		if deficit < eps {
			deficit = 0
		}
	}
	*d = Decision{Limit: l, Quota: l.Rate.Quota}
	switch {
	case cost > c+eps:
		d.RetryAfter = Never
	case c-deficit+eps >= cost: // the bucket holds c − deficit tokens
		d.Allowed = true
		deficit += cost
		if deficit > c {
			deficit = c
		}
	default:
		d.RetryAfter = duration((cost - (c - deficit)) * l.unit)
	}
	s.T = now
	s.A = deficit
	if c > deficit {
		d.Remaining = c - deficit
	}
	d.Reset = duration(deficit * l.unit)
	if deficit > 0 {
		d.Next = duration(nextUnits(c-deficit, deficit) * l.unit)
	}
	return now + int64(d.Reset) // Expiry
}
