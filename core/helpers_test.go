package core

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/model"
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

// algLimit returns a validated limit.
func algLimit(t testing.TB, alg model.Algorithm, rate string, burst float64, maxDelay time.Duration) *model.Limit {
	t.Helper()
	r, err := model.ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	l := &model.Limit{Name: "t", Algorithm: alg, Rate: r, Burst: burst, MaxDelay: maxDelay}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return l
}

func copyState(s model.State) model.State {
	if s.Log != nil {
		s.Log = append([]model.LogEntry(nil), s.Log...)
	}
	return s
}
