package core

// tokenBucket: a bucket of Capacity tokens, full when first seen, refilled
// continuously at Quota per Period. The state stores the deficit (tokens
// missing from a full bucket) so that the zero State is a full bucket.
//
// Refill is computed as elapsed·Quota/Period rather than elapsed·rate so that
// whole numbers stay whole: 0.5 s at 2/s refills exactly 1 token.
func (l *Limit) tokenBucket(s State, now int64, cost float64) (State, Decision) {
	if now < s.T {
		now = s.T // a clock step back mints nothing
	}
	deficit := s.A
	if deficit > 0 {
		deficit -= float64(now-s.T) * l.Rate.Quota / float64(l.period)
		if deficit < eps {
			deficit = 0
		}
	}
	s.T, s.A = now, deficit
	d := Decision{Limit: l, Quota: l.Rate.Quota}
	tokens := l.capacity - deficit
	switch {
	case cost > l.capacity+eps:
		d.RetryAfter = Never
	case tokens+eps >= cost:
		d.Allowed = true
		s.A = deficit + cost
		if s.A > l.capacity {
			s.A = l.capacity
		}
	default:
		d.RetryAfter = duration((cost - tokens) * l.unit)
	}
	d.Remaining = nonNegative(l.capacity - s.A)
	d.Reset = duration(s.A * l.unit)
	return s, d
}
