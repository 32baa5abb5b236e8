// Package core is sluice's request engine, the one that every host runs,
// with the in-memory store and the Traefik plugin's fused paths. The
// model and the algorithms are in package model, request keys in keyspec,
// client addresses in clientip, the answers in answer, the Redis store in
// redisstore.
//
// It imports the standard library only, so that Traefik's Yaegi interpreter can
// run it unchanged; it therefore avoids generics, the min/max/clear builtins,
// range-over-int, atomic.Pointer, sync.OnceValue and unsafe.
//
// # Request path
//
// One engine serves every host. A host turns a request into [model.Ask]s (a limit,
// the request's key for it, a cost) and hands them to [Gate.Serve]:
//
//	Caddy      caddymodule.Handler.ServeHTTP ─┐
//	Go service sluicehttp handler           ─┼─> Gate.Serve(w, r, asks)
//	Traefik    ServeLane (any other config) ─┘     │
//	                                               ├ decide: breaker ─> Store.Take within the timeout
//	                                               │         (MemoryStore or redisstore.Store), or the
//	                                               │         fallback / failure policy when it fails
//	                                               ├ in-flight slots (serveFlight), dry run
//	                                               ├ classify: the outcome and the decision reported
//	                                               └ answer: answer.Responder's SetHeaders, or Reject
//	                                                 (429), or wait out a shaping delay
//
// Traefik runs the plugin in the Yaegi interpreter, where every function
// entered costs about a microsecond plus tens of nanoseconds for each value
// of its body. So [ServeLane] (lane.go) fuses the commonest configurations
// into single functions: one token_bucket limit in memory (serveLaneTB), one
// limit of any algorithm in memory (serveLaneOne), several limits in memory
// (laneMany), one limit on Redis (serveLaneRedis) and an admission from a
// lease of Redis's capacity (serveLaneLease). [ServeLaneMetered], for a
// host that counts every verdict in a [Meter], decides one limit in memory
// as serveLaneOne does and anything else by Gate.Serve. Each names the engine
// functions it copies and is proved equal to them by the differential tests
// (TestServeLaneMatchesGate and its kin); everything else goes to
// Gate.Serve. That file and the algorithm kernel it shares with the stores
// are the only places written in the interpreter's dialect (variables passed
// as trailing parameters, standard-library functions held in package
// variables); yaegicheck -dialect enforces it in CI.
//
// # Packages and files by concern
//
//   - package model: the model and the algorithms, pure functions of
//     (state, now, cost) (limit.go, decision.go, algorithm.go,
//     tokenbucket.go, leakybucket.go, window.go); the Store and SlotStore
//     interfaces (store.go); configuration checked once, with typed field
//     errors (config.go, fielderror.go); the limit of a key's requests in
//     flight (flightlimit.go)
//   - package clientip: client addresses; package keyspec: request keys
//   - package answer: headers and 429 bodies (answer.Responder)
//   - package redisstore: the Redis store, its Lua scripts, its leases of
//     requests in flight, its capacity leases for hot keys (lease.go) and
//     its inspection hooks, with the RESP client and its reconnecting
//     client (resp.Lazy) in package resp
//   - package await: waits without select, which Yaegi v0.16.1 mixes up
//     when several goroutines run one select on different channels
//   - this package: the engine, gate.go (decide, fallback, dry run,
//     wait), breaker.go, inflight.go (in-flight slots), clock.go,
//     meter.go (the verdicts a host counts and times for its metrics); the
//     memory store, memory.go, with its inspection hooks, peek.go; and
//     the Traefik lane, lane.go, which fuses the engine, the memory
//     store, the answers and the Redis store's direct path
//   - package hostkey: the keys that the Caddy module and sluicehttp
//     build themselves, and the prefixes of keys shared across hosts,
//     outside everything the Traefik plugin loads
//   - package inspect: what only Caddy's admin API uses, key inspection
//     and the heavy-hitter sketch, outside everything the Traefik plugin
//     loads
//   - package demand: each key's demand per period of a limit, in a
//     fixed-size sketch, and the advice on candidate limits it gives
//     (both hosts)
//   - package telemetry: the names and meanings of the metrics both
//     hosts export
//
// The memory store and the engine share this package with the lane
// because the lane's fused paths read their internals (the store's
// shards, slots and logs, the gate's state) on every request: in packages
// of their own those would be exported, and under Yaegi every constant,
// table element or function of another package that a request reads
// costs a value of the frame that reads it (which is why lane.go holds
// copies of the other packages' constants).
package core
