package model

// Penalise applies l's Penalty to d, the decision l's algorithm made at
// now (nanoseconds) for a key held out until the instant until (zero or
// past: not held out), and returns the instant the key is held out until
// after d: until, or now + Penalty when d is a refusal that starts a
// penalty. A key held out is refused, whatever its algorithm decided,
// with nothing remaining and RetryAfter, Next and Reset at least the
// penalty's remaining time (Next exactly that when the algorithm
// admitted: the key's state admits the request when the penalty ends);
// a store then charges nothing, as for any refusal (and d has no Mark). Reset is the
// remaining time or the state's own Reset, when longer, which for a
// request the algorithm admitted counts its cost: it is exact when the
// penalty outlasts the state's (a full refill, two windows). Stores call it for a limit with a Penalty, after its
// algorithm and before they save, and the Redis store's take script
// mirrors it (penalise in core/redisstore/lua.go).
func Penalise(l *Limit, d *Decision, until, now int64) int64 {
	if until <= now {
		if d.Allowed {
			return until
		}
		until = now + int64(l.Penalty)
	}
	left := nanos(until - now)
	if d.Allowed || d.Next < left {
		d.Next = left
	}
	d.Allowed = false
	d.Mark = Mark{}
	d.Remaining = 0
	d.Delay = 0
	if d.RetryAfter < left {
		d.RetryAfter = left
	}
	if d.Reset < left {
		d.Reset = left
	}
	return until
}
