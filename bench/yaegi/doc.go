// Package yaegibench measures the Traefik plugin the way Traefik runs it.
//
// Traefik interprets a plugin with Yaegi: it lays the plugin's source out in
// a GOPATH, imports it into an interpreter that knows the standard library
// (stdlib.Symbols), calls CreateConfig and New through the interpreter and
// then calls the returned handler's ServeHTTP from compiled code, with its
// own compiled ResponseWriter. The tests here do exactly that with Yaegi
// v0.16.1, the interpreter of Traefik v3.6, as a library, so what they
// report is what one request costs inside a real Traefik, beside a trivial
// plugin that sets one header, measured in the same run:
//
//	go test -run TestYaegiCostReport -v ./bench/yaegi
//
// TestYaegiAllocBudget asserts the allocation count of each case, which
// under the interpreter is deterministic, so that a change that slows the
// interpreted path fails CI without any timing assertion.
//
// # Where an interpreted request's allocations go
//
// Yaegi v0.16.1 gives each function a frame with one slot per parameter,
// result, local variable and intermediate result of its whole body (every
// selector, including a package's function or constant, index, slice, call
// result, conversion, operation, comparison and && or ||, but not a
// constant of the package), and fills it with reflect.New on every call,
// whether the statement runs or not. On top of that:
//
//   - a var or := allocates its variable again each time it runs, where a
//     parameter does not: the hot paths of core (serveLaneTB and the
//     functions it calls) take their variables as trailing parameters that
//     their callers pass as zero constants, which cost the caller nothing;
//   - x = a + b, x += b and x = f() write into x, where x := a + b pays for
//     the result and its copy;
//   - a standard library call goes through reflect.Value.Call: about four
//     allocations besides its slot (the arguments, the results, and a
//     boxing of each result that is not a pointer), and a method of a
//     standard library value one more for its receiver; core calls the
//     functions of its hot paths through package variables (fmtInt for
//     strconv.FormatInt), whose names, unlike selectors, take no slot;
//   - a method of an interpreted type called through an interface, or a
//     method value, goes through a reflect wrapper: MissingKey.Resolve
//     called as a method cost 25 allocations, as a method expression none
//     beyond its frame;
//   - a loop reuses its frame: only := and range variables allocate again
//     per iteration;
//   - an argument that is zero is not copied into the callee's frame, one
//     that is not and is not a pointer is boxed once;
//   - a function value that holds an interpreted closure (an observer, a
//     Clock) is called through reflect: an empty observer cost a rejection
//     12 allocations with its Verdict, and the report's Clock read about
//     10 more than reading time.Since inline;
//   - entering a function costs little beyond its slots: a handler type
//     whose ServeHTTP did ServeLane's dispatch itself, saving ServeLane's
//     frame, made the allowed request cost the same 206, its selectors
//     taking the place of ServeLane's parameters;
//   - reflect.New of a type the interpreter built (an interpreted struct, a
//     pointer to one, an unnamed slice, map or func type) goes through
//     reflect's cache of pointer types, a sync.Map: in a CPU profile of an
//     allowed request, reflect.New was 25 % of the time, a tenth of it that
//     lookup, mallocgc 26 % and the standard library calls 16 %.
//
// Counted on the interpreter's own frames (a throwaway instrumented copy of
// Yaegi that prints each function's slots and counts the calls of every
// interpreted function per request) in December 2026, an allowed
// token_bucket request's 207 allocations are 22 for Traefik's call into
// the plugin (the handler and ServeLane; the one-header plugin's whole
// request is 21), 131 for the frame of serveLaneTB, and about 54 for ten
// standard library calls (ParseAddrPort, LastIndexByte, maphash.String,
// Lock, time.Since, Unlock, FormatInt twice, Header, ServeHTTP) and the
// strings and header values it builds. The frame is 21 parameters, 14
// values for the key, 20 to find and lock the state, 34 for the token
// bucket's arithmetic and 42 for the headers. So the floor is the work
// itself: the ten calls and five header writes alone are about 90, and
// replacing a call by a loop or a table costs as many slots as the call's
// allocations (tried in an earlier change: net -4 on the allowed path, +5
// on the rejected one).
//
// # The floor
//
// The report also measures bench/testdata/floor, a plugin that is about the
// least a token bucket answering with sluice's five headers costs: one map
// under one mutex keyed by the address as net/http writes it, a theoretical
// arrival time in integer nanoseconds, the headers sluice writes
// (TestFloorAnswersAsSluice compares them), shaped as serveLaneTB is. It
// has none of sluice's guarantees (the address checked, memory bounded and
// sharded, fractional costs, a 429 with its headers and body), so the
// difference is their price. In six runs of December 2026, on a busy
// machine and a quiet one, it took 115 allocations and 3.7 to 5.6 times the
// one-header plugin's time per request, sluice 207 and 6.0 to 9.4 times.
// Its frame is 63 slots against serveLaneTB's 131 and ServeLane's 7;
// counted on the slots and calls, the 92 allocations between them are about
// 15 for the address check and the dispatch of IPv6 and proxied clients, 16
// for the hashed, sharded and bounded store, 24 for fractional costs on a
// float state, 4 each for the injected clock and the skip of a request
// without a key, 7 for ServeLane's frame, and the rest for the state's
// write with its expiry, the lane's choices of path and the texts of the
// headers; a channel of one in place of its mutex saves 4 more (a send and
// a receive against two calls). In real Traefik (bench/traefik/run.sh), in
// two runs of 16 rounds, the floor served 0.81 and 0.85 of the built-in
// rateLimit's requests per second, sluice 0.75 and 0.76 (0.92 and 0.90 of
// the floor), and a first version of the floor with 121 allocations 0.83 in
// a run of 10 rounds: under this interpreter a token bucket that writes
// those headers does not reach 0.90, however bare. A CPU profile of that
// Traefik under load (PROFILE=... bench/traefik/run.sh) puts the middleware
// alone, without the proxying after it, at 28.5 µs per request with sluice,
// 16.6 µs with the floor, 6.1 µs with the one-header plugin and 4.8 µs with
// the built-in: between the one-header plugin (1.02 of the built-in) and
// the floor, 0.90 falls near 13 µs of middleware per request, less than the
// floor takes.
//
// # The Redis floor
//
// bench/testdata/redisfloor is the same for a decision in Redis: one
// EVALSHA of a token bucket script on Redis's clock per request, over a
// connection from a pool under a mutex, the reply read with one Read and
// parsed in a loop, and the five headers (TestRedisFloorAnswersAsSluice
// compares them with sluice's on Redis). It has no timeout, breaker,
// failure policy, fallback, Cluster, Sentinel or reload of the script. On
// 2026-12-02 the report measured it at 112.6 µs and 312 allocations per
// request (309 since it writes its headers in a loop), sluice's Redis path
// at 145.4 µs and 500 (the compiled store's decision alone 78.9 µs); about
// 125 of the floor's allocations were its one frame and 37 Yaegi's type
// checks of interface values at run time. In
// real Traefik (REDIS=1 ROUNDS=8 bench/traefik/run.sh) it served 0.859 of
// the built-in rateLimit on Redis, sluice 0.561: sluice's Redis path is at
// 0.65 of that floor, where its memory path is near 0.9 of its own.
//
// This package is a test dependency only: neither core nor traefikplugin
// imports Yaegi.
package yaegibench
