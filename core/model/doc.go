// Package model is the model of sluice's engine and its algorithms, which
// every other package of the engine shares: limits, rates, states and
// decisions, the Store interface, and the typed errors of a configuration
// that core refuses. Each host names the field at fault in its own words
// (Caddyfile subdirective, JSON path, Traefik option) from a FieldError's
// Field, Value and Reason, never from the error's text.
//
// It imports the standard library only, so that Traefik's Yaegi interpreter
// can run it unchanged.
//
// # Model
//
// A [Limit] names an [Algorithm], a [Rate] (a quota per period), a burst and,
// for shaping, a maximum delay. Each algorithm is a pure state transition
//
//	(State, now, cost) -> (State, Decision)
//
// on nanosecond instants supplied by the caller ([Step]); nothing in
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
//
// # The kernel
//
// The Step functions (Step, TokenBucketStep, LeakyBucketStep, ...) are the
// algorithms in the form the stores and the Traefik lane call: on a State
// and a Decision in place, with the variables of their bodies passed as
// trailing zero parameters, which the Yaegi interpreter enters faster
// than it declares them. With the Traefik lane (core/lane.go) they are
// the only code written in that dialect.
package model
