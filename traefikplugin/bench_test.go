package traefikplugin

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// discardWriter is a ResponseWriter that keeps only its header map, so
// that a benchmark measures the middleware, not a recorder.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// noop is a next handler that does nothing.
type noop struct{}

func (noop) ServeHTTP(http.ResponseWriter, *http.Request) {}

// benchHandler returns the middleware with one in-memory limit that is
// never reached, and a request from one client.
func benchHandler(tb testing.TB) (http.Handler, *http.Request) {
	g := newRegistry(nil, 4096, os.Stdout, os.Stderr) // the system clock, as in production
	h, err := g.new(context.Background(), noop{}, &Config{Average: "1e12", Burst: "1e12"}, "bench@file")
	if err != nil {
		tb.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "http://example.com/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	return h, r
}

// BenchmarkServeHTTP measures one allowed request through the middleware:
// key, decision in the in-memory store, headers.
func BenchmarkServeHTTP(b *testing.B) {
	h, r := benchHandler(b)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.ServeHTTP(w, r)
	}
}

// TestYaegiCostReport reports the cost of one allowed request, and of its
// parts, over 20,000 calls (2,000 with -short); it asserts no timing. It
// prints with -v or when SLUICE_COST_REPORT is set; run it under Yaegi to
// see what Traefik pays:
//
//	SLUICE_COST_REPORT=1 yaegi test -run TestYaegiCostReport github.com/sluicehq/sluice/traefikplugin
func TestYaegiCostReport(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	report := os.Getenv("SLUICE_COST_REPORT") != ""
	h, r := benchHandler(t)
	w := &discardWriter{h: http.Header{}}
	e := h.(*handler).e
	spec := e.specs[0]
	ask := []core.Ask{{Limit: e.plans[0].limit, Key: "bench@file\x00192.0.2.1", Cost: 1}}
	ctx := context.Background()
	var d core.Decision
	parts := []struct {
		name string
		f    func()
	}{
		{"ServeHTTP (whole request)", func() { h.ServeHTTP(w, r) }},
		{"  KeySpec.Key", func() { spec.Key(r) }},
		{"  Gate.Decide", func() { d = e.gate.Decide(ctx, ask).Decision }},
		{"  Gate.Serve", func() { e.gate.Serve(w, r, ask) }},
		{"  Responder.SetHeaders", func() { (&core.Responder{Headers: core.DefaultHeaders}).SetHeaders(w.h, &d, 1) }},
		{"  time.Now", func() { _ = time.Now() }},
	}
	for _, p := range parts {
		f := p.f
		f()
		t0 := time.Now()
		for i := 0; i < n; i++ {
			f()
		}
		line := fmt.Sprintf("sluice cost: %-28s %8.2f µs/call (%d calls)", p.name, float64(time.Since(t0).Nanoseconds())/float64(n)/1e3, n)
		if report {
			fmt.Println(line)
		}
		t.Log(line)
	}
}
