// Package core is sluice's rate-limiting engine: the algorithms, request keys,
// the stores that hold per-key state, and the writer of standard 429 answers.
//
// It imports the standard library only, so that Traefik's Yaegi interpreter can
// run it unchanged; it therefore avoids generics, the min/max/clear builtins,
// range-over-int, atomic.Pointer, sync.OnceValue and unsafe.
//
// # Model
//
// A [Limit] names an [Algorithm], a [Rate] (a quota per period), a burst and,
// for shaping, a maximum delay. Each algorithm is a pure state transition
//
//	(State, now, cost) -> (State, Decision)
//
// on nanosecond instants supplied by the caller ([Limit.Decide]); nothing in
// an algorithm reads a clock. A [Store] keeps one State per (limit, key) and
// applies transitions atomically; a request subject to several limits is
// decided all-or-nothing by [Store.Take]: if any limit rejects it, no limit
// is charged.
//
// Costs are positive real numbers (2.5 is a valid cost). An instant earlier
// than one already decided at (a clock stepped back) never mints capacity
// and never panics. token_bucket and sliding_window_log states keep the
// latest instant they have seen, and an earlier instant is clamped to it.
// fixed_window and sliding_window_counter states keep only the start of
// their window, and leaky_bucket states the instant their queue drains: an
// earlier instant is clamped to the window's start or taken as it is, which
// can only make decisions stricter (a longer wait for the window's end or
// the queue, a heavier previous window).
package core
