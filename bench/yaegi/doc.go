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
// Yaegi v0.16.1 gives each function a frame with one slot per local
// variable, parameter and intermediate result of its whole body (every
// selector, index, slice, call result, comparison and && or ||, but not a
// constant), and fills it with reflect.New on every call, whether the
// statement runs or not; calling a standard library function goes through
// reflect.Value.Call. Counted on the interpreter's own frame layout (a
// throwaway instrumented copy of Yaegi that prints each function's slots)
// in December 2026, an allowed token_bucket request's 251 allocations are
// 23 for Traefik's call into the plugin (the handler and ServeLane, as
// the one-header plugin's 21), 158 for the frame of serveLaneTB, the path
// written out, and about 70 for running it: seven standard library calls
// (maphash.String, Lock, time.Since, Unlock, FormatInt, Header,
// ServeHTTP) and the strings it builds. A rejection adds the frames of
// laneShort (23 slots), laneRejectTB (36) and laneReject (89) and the
// plugin's observer (about 60). So the frame, not the arithmetic, sets the
// floor: replacing a standard library call by table lookups or a loop of
// its own costs as many slots as the call's allocations (tried: net -4 on
// the allowed path, +5 on the rejected one).
//
// This package is a test dependency only: neither core nor traefikplugin
// imports Yaegi.
package yaegibench
