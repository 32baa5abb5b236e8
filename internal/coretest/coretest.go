// Package coretest holds the helpers that the tests of several of core's
// packages share: requests, validated limits, a ResponseWriter that keeps
// only headers, the text of a recorded answer. It imports the standard
// library and core/model only, so that those tests run it under Yaegi too,
// and so that no package it helps but model is among its imports.
package coretest

import (
	"context"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
)

// Nonce keeps the keys of one test process apart from an earlier run's in
// a shared store (a Redis server that still holds them).
var Nonce = strconv.FormatInt(time.Now().UnixNano(), 36)

// NewRequest returns a GET request from the peer remote with the given
// header lines, given as name, value pairs.
func NewRequest(remote string, header ...string) *http.Request {
	r := &http.Request{Method: http.MethodGet, RemoteAddr: remote, Header: http.Header{}}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

// Interpreted reports whether the tests run under an interpreter such as
// Yaegi, where calling an empty closure allocates and absolute allocation
// counts say nothing about the code under test.
func Interpreted() bool {
	return testing.AllocsPerRun(10, func() {}) > 0
}

// Limit returns the validated limit named name.
func Limit(tb testing.TB, name string, alg model.Algorithm, rate string, burst float64, maxDelay time.Duration) *model.Limit {
	tb.Helper()
	r, err := model.ParseRate(rate)
	if err != nil {
		tb.Fatal(err)
	}
	l := &model.Limit{Name: name, Algorithm: alg, Rate: r, Burst: burst, MaxDelay: maxDelay}
	if err := l.Validate(); err != nil {
		tb.Fatal(err)
	}
	return l
}

// Take asks s for cost of l under key and fails the test on an error.
func Take(tb testing.TB, s model.Store, l *model.Limit, key string, cost float64) model.Decision {
	tb.Helper()
	out := make([]model.Decision, 1)
	if err := s.Take(context.Background(), []model.Ask{{Limit: l, Key: key, Cost: cost}}, out); err != nil {
		tb.Fatalf("Take: %v", err)
	}
	return out[0]
}

// CopyState returns s with a log of its own.
func CopyState(s model.State) model.State {
	if s.Log != nil {
		s.Log = append([]model.LogEntry(nil), s.Log...)
	}
	return s
}

// Decide returns the state and decision of model.Step on a copy of s,
// the admission marked as a store marks it.
func Decide(l *model.Limit, s model.State, now int64, cost float64) (model.State, model.Decision) {
	s = CopyState(s)
	var d model.Decision
	model.Step(l, &s, now, cost, &d)
	if d.Allowed {
		d.Mark = model.Mark{T: s.T, A: s.A, OK: true}
	}
	return s, d
}

// RenderAnswer prints a recorded response: status line, headers sorted by
// name with their values in order, a blank line, the body.
func RenderAnswer(code int, h http.Header, body string) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("HTTP " + strconv.Itoa(code) + "\n")
	for _, k := range keys {
		for _, v := range h[k] {
			b.WriteString(k + ": " + v + "\n")
		}
	}
	b.WriteString("\n")
	b.WriteString(body)
	return b.String()
}

// DiscardWriter is a ResponseWriter that keeps the headers and drops the
// rest.
type DiscardWriter struct{ H http.Header }

// Header returns w.H.
func (w *DiscardWriter) Header() http.Header { return w.H }

// Write drops b.
func (w *DiscardWriter) Write(b []byte) (int, error) { return len(b), nil }

// WriteHeader drops the status.
func (w *DiscardWriter) WriteHeader(int) {}

// Golden compares got with the golden file at path and fails the test
// when they differ; with SLUICE_UPDATE_GOLDEN=1 in the environment it
// writes got there first.
func Golden(tb testing.TB, path, got string) {
	tb.Helper()
	if os.Getenv("SLUICE_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run with SLUICE_UPDATE_GOLDEN=1 to create it)", err)
	}
	if got != string(want) {
		tb.Errorf("differs from %s\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
