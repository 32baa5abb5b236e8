package traefikplugin

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
)

// start is the fake clocks' first instant: 2023-11-14T22:13:20Z.
const start = int64(1700000000) * int64(time.Second)

// fakeClock is a model.Clock the test moves by hand.
type fakeClock struct{ ns int64 }

func newFakeClock() *fakeClock { return &fakeClock{ns: start} }

func (c *fakeClock) clock() model.Clock {
	return func() int64 { return atomic.LoadInt64(&c.ns) }
}

func (c *fakeClock) advance(d time.Duration) { atomic.AddInt64(&c.ns, int64(d)) }

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// testRegistry is a registry on a fake clock with a small memory store,
// writing its logs to buffers.
type testRegistry struct {
	*registry
	clock          *fakeClock
	stdout, stderr *syncBuffer
}

func newTestRegistry() *testRegistry {
	c := newFakeClock()
	out, errOut := &syncBuffer{}, &syncBuffer{}
	return &testRegistry{registry: newRegistry(c.clock(), 4096, out, errOut), clock: c, stdout: out, stderr: errOut}
}

// okHandler answers 200 and counts its calls.
type okHandler struct{ calls int64 }

func (h *okHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	atomic.AddInt64(&h.calls, 1)
	w.WriteHeader(http.StatusOK)
}

func (h *okHandler) count() int64 { return atomic.LoadInt64(&h.calls) }

// mustNew builds a middleware or fails the test.
func (g *testRegistry) mustNew(t *testing.T, cfg *Config, name string) (http.Handler, *okHandler) {
	t.Helper()
	next := &okHandler{}
	h, err := g.new(context.Background(), next, cfg, name)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return h, next
}

// request describes one test request.
type request struct {
	remote  string            // RemoteAddr; default 192.0.2.1:1234
	host    string            // Host; default example.com
	headers map[string]string // request headers
}

// do sends req to h and returns the recorded response and the request as
// the next handler saw it.
func do(h http.Handler, req request) (*httptest.ResponseRecorder, *http.Request) {
	r := httptest.NewRequest(http.MethodGet, "http://example.com/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	if req.remote != "" {
		r.RemoteAddr = req.remote
	}
	if req.host != "" {
		r.Host = req.host
	}
	for k, v := range req.headers {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w, r
}

// codes sends n identical requests and returns their status codes as a
// string such as "200 200 429".
func codes(h http.Handler, req request, n int) string {
	out := make([]string, n)
	for i := 0; i < n; i++ {
		w, _ := do(h, req)
		out[i] = http.StatusText(w.Code)
		if w.Code == http.StatusOK {
			out[i] = "200"
		} else if w.Code == http.StatusTooManyRequests {
			out[i] = "429"
		}
	}
	return strings.Join(out, " ")
}

// repeat returns s n times joined by spaces.
func repeat(s string, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = s
	}
	return strings.Join(parts, " ")
}
