package traefikplugin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
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

// BenchmarkServeHTTP measures one allowed request through the compiled
// middleware: key, decision in the in-memory store, headers. What Traefik
// pays, under its interpreter, is measured by bench/yaegi.
func BenchmarkServeHTTP(b *testing.B) {
	h, r := benchHandler(b)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.ServeHTTP(w, r)
	}
}
