package model

import "time"

// State is the per-key state of one limit. Its zero value is the state of a
// key never seen: a full bucket, an empty window, an empty log. The meaning
// of the fields depends on the algorithm:
//
//	token_bucket            T: last refill instant, A: tokens missing from a full bucket
//	leaky_bucket            T: instant at which the queue drains (theoretical arrival time), A: the fraction of a nanosecond it drains later, in [0, 1)
//	fixed_window            T: start of the current window, A: cost counted in it
//	sliding_window_counter  T: start of the current window, A: its count, B: the previous window's count
//	sliding_window_log      T: newest instant seen, A: sum of the costs in Log, Log: entries, oldest first
//
// Instants are nanoseconds on the caller's clock (see [Clock]).
type State struct {
	T    int64
	A, B float64
	Log  []LogEntry
}

// LogEntry is one admitted request in a sliding_window_log state.
type LogEntry struct {
	T    int64   // instant of admission, nanoseconds
	Cost float64 // cost admitted at T
}

// Decision is the outcome of asking one limit for some cost.
type Decision struct {
	// Limit is the limit that decided; nil for the zero Decision.
	Limit *Limit
	// Allowed reports whether the cost was (or, inside a rejected
	// multi-limit request, would have been) admitted.
	Allowed bool
	// Quota is the limit's quota per period, as advertised to clients.
	Quota float64
	// Remaining is the cost that could still be admitted now, after this
	// decision; never negative.
	Remaining float64
	// Reset is the time until the limit is whole again (bucket full, queue
	// drained, window reset or log empty).
	Reset time.Duration
	// Next is the time until more quota is available than Remaining, if
	// nothing else happens: until Remaining, floored to whole units, grows
	// (a bucket's next whole token, a window's end, the log's oldest entry
	// expiring), or until the limit is whole if that comes first; zero when
	// it is whole. It is the t of the IETF RateLimit field.
	Next time.Duration
	// RetryAfter is zero when Allowed; otherwise the time until the same
	// request would pass if nothing else happened, or Never when its cost
	// exceeds the limit's capacity.
	RetryAfter time.Duration
	// Delay is how long an admitted leaky_bucket request must wait before it
	// proceeds; zero for every other algorithm.
	Delay time.Duration
	// Mark is what the store charged for an admission, for Refund; set
	// by the stores.
	Mark Mark
}

// Mark identifies the charge of an admission: the State's T and A just
// after it, which the next admission on the same state changes (see
// Settle). A decision carries one when its store recorded it (OK):
// every admission that a Take charged, except that a redisstore.Store's call
// sent by its redisstore.Direct client or by a core.Lane marks only delayed ones.
type Mark struct {
	T  int64
	A  float64
	OK bool
}

// Clock returns the current instant in nanoseconds. sluice's algorithms need
// it to be monotonic and, for fixed windows to align with the calendar, close
// to Unix time; core.SystemClock is both.
type Clock func() int64
