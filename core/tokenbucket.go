package core

// tokenBucket: a bucket of Capacity tokens, full when first seen, refilled
// continuously at Quota per Period. The state stores the deficit (tokens
// missing from a full bucket) so that the zero State is a full bucket.
//
// Refill is computed as elapsed·Quota/Period rather than elapsed·rate so that
// whole numbers stay whole: 0.5 s at 2/s refills exactly 1 token.
//
// With MaxDelay, a request whose tokens would all be there within MaxDelay
// is admitted with that Delay, the bucket going into debt (a deficit above
// Capacity, at most MaxDelay's worth of refill), as Traefik's built-in
// rateLimit does with its bounded wait of 1/(2·rate).
//
// It works on locals (t, deficit, c) and writes the state once: under
// Yaegi every field read is a value the interpreter allocates on each call.
func tokenBucket(l *Limit, s *State, now int64, cost float64, d *Decision) int64 {
	t, deficit, c := s.T, s.A, l.capacity
	if now < t {
		now = t // a clock step back mints nothing
	}
	if most := c + l.owe; deficit > most {
		deficit = most // the capacity shrank: the bucket was empty, not in debt
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
	case deficit+cost <= c+l.owe+eps:
		// With MaxDelay the bucket lends the missing tokens: the request
		// waits until they are refilled, as golang.org/x/time/rate's
		// Reserve and Traefik's rateLimit do.
		d.Allowed = true
		d.Delay = duration((cost - (c - deficit)) * l.unit)
		deficit += cost
	default:
		// Until the tokens missing are within what MaxDelay lends.
		d.RetryAfter = duration((cost - (c - deficit) - l.owe) * l.unit)
	}
	s.T = now
	s.A = deficit
	if c > deficit {
		d.Remaining = c - deficit
	}
	// Reset: duration(deficit·unit), written out, as is nextUnits below
	// (see decide); c is reused for the nanoseconds.
	if deficit > 0 {
		c = deficit * l.unit
		switch {
		case c >= float64(Never):
			d.Reset = Never
		default:
			d.Reset = nanos(c)
			if float64(d.Reset) < c {
				d.Reset++
			}
		}
		c = l.capacity
	}
	if deficit > c { // in debt: more once the debt and a unit are refilled
		d.Next = duration((deficit - c + nextUnits(0, c)) * l.unit)
	} else if deficit > 0 {
		// nextUnits(c − deficit, deficit), c − deficit being Remaining.
		c = 1
		if d.Remaining < 1<<53 {
			c -= d.Remaining - float64(int64(d.Remaining))
		}
		if c > deficit {
			c = deficit
		}
		c *= l.unit
		switch {
		case c <= 0:
		case c >= float64(Never):
			d.Next = Never
		default:
			d.Next = nanos(c)
			if float64(d.Next) < c {
				d.Next++
			}
		}
	}
	return now + int64(d.Reset) // Expiry
}
