package core

import (
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/answer"
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

// answerNow is the wall clock of every answer test, in Unix nanoseconds,
// at a whole second.
const answerNow = 1700000000 * answer.NanosPerSecond

// renderAnswer prints a recorded response: status line, headers sorted by
// name with their values in order, a blank line, the body.
func renderAnswer(code int, h http.Header, body string) string {
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

// discardWriter is a ResponseWriter that keeps headers and drops the rest.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
