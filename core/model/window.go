package model

import "time"

// FixedWindowStep counts cost per window [k·Period, (k+1)·Period) aligned to
// instant zero (the Unix epoch for SystemClock), so every server agrees on
// the boundaries. A request passes iff count + cost ≤ Quota. Its known flaw
// is deliberate and tested: Quota requests at the end of one window and
// Quota more at the start of the next all pass.
//
// Its parameters after d are its variables, which its callers pass as
// zero values, and mod, DurationOf and NonNegative are written out: see
// decide.
func FixedWindowStep(l *Limit, s *State, now int64, cost float64, d *Decision, t int64, a float64, reset time.Duration) int64 {
	if now < s.T {
		now = s.T
	}
	t = now % l.period // mod(now, l.period)
	if t < 0 {
		t += l.period
	}
	// duration of the rest of the window, a whole number of nanoseconds
	// in (0, Never), which it leaves as it is.
	reset = nanos(float64(l.period - t))
	t = now - t // the window's start
	a = s.A     // the window's count
	if t != s.T {
		s.T = t
		a = 0
	}
	*d = Decision{Limit: l, Quota: l.Rate.Quota}
	switch {
	case cost > l.capacity+Eps:
		d.RetryAfter = Never
	case a+cost <= l.capacity+Eps:
		d.Allowed = true
		a += cost
	default:
		d.RetryAfter = reset // the next window is empty and cost fits it
	}
	s.A = a
	d.Remaining = l.capacity - a
	if d.Remaining < 0 {
		d.Remaining = 0
	}
	if a > 0 {
		d.Reset = reset
		d.Next = reset
	}
	return t + l.period // Expires
}

// SlidingCounterStep approximates the count of the last Period by the current
// window's count plus the previous window's, weighted by how much of the
// previous window the last Period still overlaps:
//
//	estimate = prev·(1 − elapsed/Period) + cur
//
// (prev 80, cur 20, 30 % into the window: 80·0.7 + 20 = 76). A request
// passes iff estimate + cost ≤ Quota. Windows are aligned as in fixedWindow.
//
// Its parameters after d are its variables, which its callers pass as
// zero values, and mod, duration, nonNegative and nextUnits are written
// out: see decide.
func SlidingCounterStep(l *Limit, s *State, now int64, cost float64, d *Decision,
	start int64, a, b, c, p, elapsed, estimate, x, left float64) int64 {
	if now < s.T {
		now = s.T
	}
	start = now % l.period // mod(now, l.period)
	if start < 0 {
		start += l.period
	}
	start = now - start
	// a and b: the current and previous windows' counts, written back
	// below; c: the capacity.
	a = s.A
	b = s.B
	switch {
	case start == s.T:
	case start == s.T+l.period:
		b = a
		a = 0
	default:
		b = 0
		a = 0
	}
	s.T = start
	c = l.capacity
	p = float64(l.period)
	elapsed = float64(now - start)
	estimate = b*(1-elapsed/p) + a
	*d = Decision{Limit: l, Quota: l.Rate.Quota}
	switch {
	case cost > c+Eps:
		d.RetryAfter = Never
	case estimate+cost <= c+Eps:
		d.Allowed = true
		a += cost
		estimate += cost
	case a+cost <= c+Eps:
		// Passes later in this window, once enough of prev has slid out:
		// prev·(1 − f) + cur + cost ≤ Quota, f = x.
		x = 1 - (c-a-cost)/b
		x = x*p - elapsed
	default:
		// Passes in the next window, where cur becomes prev:
		// cur·(1 − g) + cost ≤ Quota, g = x.
		x = 1 - (c-cost)/a
		x = p - elapsed + x*p
	}
	s.A = a
	s.B = b
	if !d.Allowed && d.RetryAfter == 0 { // RetryAfter: duration(x), at least 1
		switch {
		case x <= 0:
			d.RetryAfter = 1
		case x >= float64(Never):
			d.RetryAfter = Never
		default:
			d.RetryAfter = nanos(x)
			if float64(d.RetryAfter) < x {
				d.RetryAfter++
			}
		}
	}
	d.Remaining = c - estimate
	if d.Remaining < 0 {
		d.Remaining = 0
	}
	// Reset: elapsed is in [0, p), so these are whole numbers of
	// nanoseconds in (0, Never), which duration leaves as they are.
	switch {
	case a > 0:
		d.Reset = nanos(2*p - elapsed)
	case b > 0:
		d.Reset = nanos(p - elapsed)
	}
	if estimate > 0 {
		// Next: the time until the estimate drops by the units that
		// floored Remaining needs to grow (x, nextUnits), as prev slides
		// out during this window, then cur during the next.
		x = 1
		if d.Remaining < 1<<53 {
			x -= d.Remaining - float64(int64(d.Remaining))
		}
		if x > estimate {
			x = estimate
		}
		left = p - elapsed
		estimate = left + p // whole when both windows are over
		if b > 0 && x <= b*left/p {
			estimate = x * p / b
		} else if x -= b * left / p; a > 0 && x < a {
			estimate = left + x*p/a
		}
		switch {
		case estimate <= 0:
		case estimate >= float64(Never):
			d.Next = Never
		default:
			d.Next = nanos(estimate)
			if float64(d.Next) < estimate {
				d.Next++
			}
		}
	}
	if a > 0 { // Expires
		return start + 2*l.period
	}
	return start + l.period
}

// SlidingLogStep keeps every admitted request of the last Period as an entry
// (instant, cost), oldest first, and their sum in s.A. An entry admitted at
// t stops counting at t + Period. A request passes iff sum + cost ≤ Quota:
// the moving count is exact.
//
// Memory is bounded: Validate refuses quotas above MaxLogQuota, and when
// fractional costs would make the log longer than that, the newest entry
// absorbs the one before it (the older cost then expires later than it
// would have: conservative, never admitting more than Quota).
//
// Its parameters after d are its variables, which its callers pass as
// zero values, and duration and nonNegative are written out: see decide.
func SlidingLogStep(l *Limit, s *State, now int64, cost float64, d *Decision,
	n int, t int64, need float64, log []LogEntry) int64 {
	if now < s.T {
		now = s.T
	}
	s.T = now
	trimLog(l, s, now)
	log = s.Log
	n = len(log)
	*d = Decision{Limit: l, Quota: l.Rate.Quota}
	switch {
	case cost > l.capacity+Eps:
		d.RetryAfter = Never
	case s.A+cost <= l.capacity+Eps:
		d.Allowed = true
		if cost == 0 {
			// Charges nothing: no entry.
		} else if n >= MaxLogQuota {
			// The log is full: merge into the newest entry, moved to
			// now, in place. That entry is the one element of the
			// original log that a decision overwrites (a caller keeping
			// it copies a full log first; takeMany restores the entry
			// when it does not save), so an admission costs O(1), not
			// a copy.
			log[n-1] = LogEntry{T: now, Cost: log[n-1].Cost + cost}
		} else {
			// Appending writes past the original log's length only,
			// so that log is intact too.
			log = append(log, LogEntry{T: now, Cost: cost})
			s.Log = log
			n++
		}
		s.A += cost
	default:
		// Wait until enough of the oldest entries expire.
		need = s.A + cost - l.capacity
		for _, e := range log {
			need -= e.Cost
			if need <= Eps {
				// duration of a whole number of nanoseconds in (0,
				// Never) (the entry still counts), which it leaves
				// as it is.
				d.RetryAfter = nanos(float64(e.T + l.period - now))
				break
			}
		}
		if d.RetryAfter == 0 {
			d.RetryAfter = 1
		}
	}
	d.Remaining = l.capacity - s.A
	if d.Remaining < 0 {
		d.Remaining = 0
	}
	if n == 0 {
		return 0 // Expires
	}
	// Reset, until the newest entry expires (t), and Next, until the
	// oldest does: whole numbers of nanoseconds in (0, Never), as above.
	t = log[n-1].T + l.period
	d.Reset = nanos(float64(t - now))
	d.Next = nanos(float64(log[0].T + l.period - now))
	return t
}

// trimLog drops the entries that no longer count at now, by reslicing (the
// original slice is left intact), and keeps the sum exact: it is recomputed
// whenever the log empties, so float error cannot accumulate.
func trimLog(l *Limit, s *State, now int64) {
	i := 0
	for i < len(s.Log) && s.Log[i].T+l.period <= now {
		s.A -= s.Log[i].Cost
		i++
	}
	if i > 0 {
		s.Log = s.Log[i:]
	}
	if len(s.Log) == 0 {
		// Two statements: Yaegi v0.16.1 panics on nil in a tuple assignment.
		s.Log = nil
		s.A = 0
	}
}

// refundLog removes cost from the entries of s admitted at or before t,
// newest first, in place: the admission refunded, at t, is among them
// (or, if a full log merged it into a later entry, an older cost stands
// in for it, which expires sooner: no capacity comes back sooner than
// without the admission). Entries after t belong to later admissions.
func refundLog(s *State, t int64, cost float64) {
	n := len(s.Log)
	i := n // entries [0, i) are at or before t
	for i > 0 && s.Log[i-1].T > t {
		i--
	}
	j := i // entries [j, i) are used up
	for j > 0 && cost > Eps {
		e := &s.Log[j-1]
		if e.Cost > cost+Eps {
			e.Cost -= cost
			s.A -= cost
			break
		}
		cost -= e.Cost
		s.A -= e.Cost
		j--
	}
	if j < i {
		s.Log = append(s.Log[:j], s.Log[i:]...)
	}
	if len(s.Log) == 0 {
		s.Log = nil // apart from s.A: see trimLog
		s.A = 0
	}
}
