package core

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/core/clientip"
)

func newRequest(remote string, header ...string) *http.Request {
	r := &http.Request{Method: http.MethodGet, RemoteAddr: remote, Header: http.Header{}}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

func mustPrefixes(t testing.TB, list ...string) []netip.Prefix {
	t.Helper()
	p, err := clientip.ParsePrefixes(list)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// isInterpreted reports whether the tests run under an interpreter such as
// Yaegi, where calling an empty closure allocates and absolute allocation
// counts say nothing about the code under test.
func isInterpreted() bool {
	return testing.AllocsPerRun(10, func() {}) > 0
}
