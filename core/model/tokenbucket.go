package model

// TokenBucketStep is token_bucket: a bucket of Capacity tokens, full when
// first seen, refilled continuously at Quota per Period. The state stores the deficit (tokens
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
// It works on variables (t, deficit, c) and writes the state once: under
// Yaegi every field read is a value the interpreter allocates on each call.
// Its parameters after d are its variables, which its callers pass as
// zero values (see decide), and the cases of a bucket short of tokens
// and in debt, which only MaxDelay and rejections reach, are tokenShort's
// and tokenDebt's: under Yaegi a function pays for its whole body on
// every call.
func TokenBucketStep(l *Limit, s *State, now int64, cost float64, d *Decision,
	t int64, deficit, c float64) int64 {
	t = s.T
	deficit = s.A
	c = l.capacity
	if now < t {
		now = t // a clock step back mints nothing
	}
	if deficit > l.most {
		deficit = l.most // the capacity shrank: the bucket was empty, not in debt
	}
	if deficit > 0 {
		deficit -= float64(now-t) * l.Rate.Quota / float64(l.period)
		if deficit < Eps {
			deficit = 0
		}
	}
	*d = Decision{Limit: l, Quota: l.Rate.Quota}
	switch {
	case cost > c+Eps:
		d.RetryAfter = Never
	case c-deficit+Eps >= cost: // the bucket holds c − deficit tokens
		d.Allowed = true
		deficit += cost
		if deficit > c {
			deficit = c
		}
	default:
		deficit = tokenShort(l, d, cost, deficit)
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
	if deficit > c {
		tokenDebt(l, d, deficit)
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
	return now + int64(d.Reset) // Expires
}

// tokenShort decides, for tokenBucket, a request of cost that l's bucket,
// short of deficit tokens, cannot serve at once, and returns the deficit
// after it: with MaxDelay the bucket lends the missing tokens when it
// can, and the request waits until they are refilled, as
// golang.org/x/time/rate's Reserve and Traefik's rateLimit do; otherwise
// the request is rejected until the tokens missing are within what
// MaxDelay lends.
func tokenShort(l *Limit, d *Decision, cost, deficit float64) float64 {
	if deficit+cost <= l.capacity+l.owe+Eps {
		d.Allowed = true
		d.Delay = DurationOf((cost - (l.capacity - deficit)) * l.unit)
		return deficit + cost
	}
	d.RetryAfter = DurationOf((cost - (l.capacity - deficit) - l.owe) * l.unit)
	return deficit
}

// tokenDebt sets d.Next for tokenBucket when l's bucket is in debt, its
// deficit above its capacity: more once the debt and a unit are refilled.
func tokenDebt(l *Limit, d *Decision, deficit float64) {
	d.Next = DurationOf((deficit - l.capacity + NextUnits(0, l.capacity)) * l.unit)
}
