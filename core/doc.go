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
// the queue, a heavier previous window).//
// # Request path
//
// One engine serves every host. A host turns a request into [Ask]s (a limit,
// the request's key for it, a cost) and hands them to [Gate.Serve]:
//
//	Caddy      caddymodule.Handler.ServeHTTP ─┐
//	Go service sluicehttp handler           ─┼─> Gate.Serve(w, r, asks)
//	Traefik    ServeLane (any other config) ─┘     │
//	                                               ├ decide: breaker ─> Store.Take within the timeout
//	                                               │         (MemoryStore or RedisStore), or the
//	                                               │         fallback / failure policy when it fails
//	                                               ├ in-flight slots (serveFlight), dry run
//	                                               ├ classify: the outcome and the decision reported
//	                                               └ answer: Responder.SetHeaders, or Responder.Reject
//	                                                 (429), or wait out a shaping delay
//
// Traefik runs the plugin in the Yaegi interpreter, where every function
// entered costs about a microsecond plus tens of nanoseconds for each value
// of its body. So [ServeLane] (lane.go) fuses the commonest configurations
// into single functions: one token_bucket limit in memory (serveLaneTB), one
// limit of any algorithm in memory (serveLaneOne), several limits in memory
// (laneMany) and one limit on Redis (serveLaneRedis). Each names the engine
// functions it copies and is proved equal to them by the differential tests
// (TestServeLaneMatchesGate and its kin); everything else goes to
// Gate.Serve. That file and the algorithm kernel it shares with the stores
// are the only places written in the interpreter's dialect (variables passed
// as trailing parameters, standard-library functions held in package
// variables); yaegicheck -dialect enforces it in CI.
//
// # Packages and files by concern
//
//   - the typed errors of a refused configuration, which every package
//     returns: package model
//   - client addresses: package clientip; request keys: package keyspec
//   - model and algorithms, pure functions of (state, now, cost):
//     limit.go, decision.go, algorithm.go, tokenbucket.go, leakybucket.go,
//     window.go
//   - configuration checked once: config.go
//   - stores: store.go, memory.go; redis.go, redis_lua.go (the scripts
//     mirror the algorithms), redis_inflight.go, with the RESP client and
//     its reconnecting client (resp.Lazy) in package resp; share.go names
//     keys shared across hosts
//   - answers (headers, 429 bodies): answer.go
//   - the engine: gate.go (decide, fallback, dry run, wait), breaker.go,
//     inflight.go (in-flight slots)
//   - the Traefik lane: lane.go
//   - hooks for package inspect (peek.go), which holds what only Caddy's
//     admin API uses, key inspection and the heavy-hitter sketch, outside
//     everything the Traefik plugin loads
package core
