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
// This package is a test dependency only: neither core nor traefikplugin
// imports Yaegi.
package yaegibench
