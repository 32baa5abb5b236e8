package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/keyspec"
)

// provisionHandler provisions and validates h outside a running config,
// logging to the returned observer.
func provisionHandler(t testing.TB, h *Handler) *observer.ObservedLogs {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(func() {
		cancel()
		if err := h.Cleanup(); err != nil {
			t.Error(err)
		}
	})
	if err := h.Provision(ctx); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if err := h.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	core, logs := observer.New(zap.DebugLevel)
	h.logger = zap.New(core)
	return logs
}

// serve runs one request from clientIP through h and reports whether the
// next handler was called. A gone request's context is cancelled from the
// start, as if its client had left.
func serve(t *testing.T, h *Handler, gone bool, clientIP string) (*httptest.ResponseRecorder, bool) {
	t.Helper()
	called := false
	w, err := serveNext(h, gone, clientIP, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		called = true
		return nil
	}))
	if err != nil {
		t.Fatalf("ServeHTTP: %v", err)
	}
	return w, called
}

// serveNext runs one request from clientIP through h to next and returns
// the recorded answer and ServeHTTP's error. A gone request's context is
// cancelled from the start, as if its client had left.
func serveNext(h *Handler, gone bool, clientIP string, next caddyhttp.Handler) (*httptest.ResponseRecorder, error) {
	r, _ := testRequest(clientIP, nil)
	if gone {
		ctx, cancel := context.WithCancel(r.Context())
		cancel()
		r = r.WithContext(ctx)
	}
	w := httptest.NewRecorder()
	return w, h.ServeHTTP(w, r, next)
}

func TestRejectionLogOmitsKeyUnlessLogKey(t *testing.T) {
	for _, logKey := range []bool{false, true} {
		h := &Handler{Zones: []*Zone{{Name: "api", Rate: "1/m"}}, LogKey: logKey}
		logs := provisionHandler(t, h)
		ip := map[bool]string{false: "203.0.113.10", true: "203.0.113.11"}[logKey] // the two handlers share a store
		if _, called := serve(t, h, false, ip); !called {
			t.Fatal("first request did not proceed")
		}
		w, called := serve(t, h, false, ip)
		if called || w.Code != http.StatusTooManyRequests {
			t.Fatalf("second request: status %d, next called %v; want 429", w.Code, called)
		}
		entries := logs.FilterMessage("request rate-limited").All()
		if len(entries) != 1 {
			t.Fatalf("log_key %v: %d rejection logs, want 1", logKey, len(entries))
		}
		fields := entries[0].ContextMap()
		if entries[0].Level != zap.DebugLevel || fields["zone"] != "api" || fields["outcome"] != "rejected" {
			t.Errorf("log_key %v: rejection log %v %v", logKey, entries[0].Level, fields)
		}
		if key, ok := fields["key"]; ok != logKey || (logKey && key != ip) {
			t.Errorf("log_key %v: key field = %v (present %v)", logKey, key, ok)
		}
	}
}

// TestDryRunLogsAtInfo: in dry_run mode a would-be rejection is logged at
// info level, so that the default log shows what enforcing would refuse,
// at most once per warnInterval with the count of those held back; the
// answer carries no rate-limit header.
func TestDryRunLogsAtInfo(t *testing.T) {
	h := &Handler{Zones: []*Zone{{Name: "api", Rate: "1/m"}}, Mode: "dry_run"}
	logs := provisionHandler(t, h)
	for i := 0; i < 4; i++ {
		w, called := serve(t, h, false, "203.0.113.13")
		if !called || w.Code != http.StatusOK {
			t.Fatalf("request %d: status %d, next called %v; want 200 passed on", i+1, w.Code, called)
		}
		for _, name := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
			if v := w.Header().Get(name); v != "" {
				t.Errorf("request %d: %s = %q; a dry run writes no rate-limit header", i+1, name, v)
			}
		}
	}
	entries := logs.FilterMessage("request would have been rate-limited (dry run)").All()
	if len(entries) != 1 {
		t.Fatalf("%d dry-run logs for 3 would-be rejections within warnInterval, want 1", len(entries))
	}
	fields := entries[0].ContextMap()
	if entries[0].Level != zap.InfoLevel || fields["zone"] != "api" || fields["outcome"] != "dry_run_rejected" || fields["suppressed"] != int64(0) {
		t.Errorf("dry-run log: %v %v", entries[0].Level, fields)
	}
}

// TestRejectionLogBoundsKey: log_key logs a key longer than
// keyspec.MaxKeyLength as its digest, as /top names it, not in full.
func TestRejectionLogBoundsKey(t *testing.T) {
	token := strings.Repeat("t", 64<<10)
	h := &Handler{Zones: []*Zone{{Name: "api", Rate: "1/m", Key: "{http.request.header.X-Token}"}}, LogKey: true}
	logs := provisionHandler(t, h)
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		r, _ := testRequest("203.0.113.12", map[string]string{"X-Token": token})
		w := httptest.NewRecorder()
		next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
		if err := h.ServeHTTP(w, r, next); err != nil || w.Code != want {
			t.Fatalf("request %d: status %d, %v; want %d", i+1, w.Code, err, want)
		}
	}
	entries := logs.FilterMessage("request rate-limited").All()
	if len(entries) != 1 {
		t.Fatalf("%d rejection logs, want 1", len(entries))
	}
	if key := entries[0].ContextMap()["key"]; key != keyspec.BoundKey(token) {
		t.Errorf("key field = %.60q, want %q", key, keyspec.BoundKey(token))
	}
}

func TestStoreErrorWarns(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePorts(t, 1)[0]) // nothing listens there
	h := &Handler{
		Zones: []*Zone{{Name: "api", Rate: "10/m"}},
		Store: &StoreConfig{Redis: &RedisStoreConfig{Address: addr, Password: "s3cret"}},
	}
	logs := provisionHandler(t, h)
	if _, called := serve(t, h, false, "203.0.113.7"); !called {
		t.Fatal("on_store_error allow: the request did not proceed")
	}
	entries := logs.FilterMessage("rate-limit store failed").All()
	if len(entries) != 1 {
		t.Fatalf("%d store-error warnings, want 1", len(entries))
	}
	fields := entries[0].ContextMap()
	if entries[0].Level != zap.WarnLevel || fields["outcome"] != "store_error_allowed" || fields["suppressed"] != int64(0) {
		t.Errorf("warning: %v %v", entries[0].Level, fields)
	}
	if msg, _ := fields["error"].(string); msg == "" || strings.Contains(msg, "s3cret") {
		t.Errorf("warning's error = %q", msg)
	}
}

// TestCancelledWait checks that a client gone during its leaky_bucket wait
// is not passed on, counted as cancelled, and refunded.
func TestCancelledWait(t *testing.T) {
	h := &Handler{Zones: []*Zone{{Name: "shape", Rate: "1/m", Algorithm: "leaky_bucket", Burst: 3}}}
	provisionHandler(t, h)
	if _, called := serve(t, h, false, "198.51.100.1"); !called {
		t.Fatal("first request did not proceed")
	}
	for i := 0; i < 3; i++ { // each is refunded, so the queue never fills
		if w, called := serve(t, h, true, "198.51.100.1"); called || w.Code != http.StatusOK || w.Body.Len() != 0 {
			t.Fatalf("cancelled request %d: next called %v, status %d, body %q", i+1, called, w.Code, w.Body)
		}
	}
	if got := testutil.ToFloat64(h.metrics.decisions[0][core.OutcomeCancelled]); got != 3 {
		t.Errorf("cancelled count = %v, want 3", got)
	}
	w, _ := serve(t, h, true, "198.51.100.1")
	if got := w.Header().Get("X-Ratelimit-Remaining"); got != "1" {
		t.Errorf("after refunds: X-RateLimit-Remaining = %q, want 1 (only the first request queued)", got)
	}
}

// TestRedisLogIsCaddys: go-redis's own lines (here, about a Sentinel that
// cannot be reached) go to Caddy's log as structured entries of logger
// http.handlers.sluice.redis, not as plain text: every line of a JSON
// default log parses, and a warning about the Sentinel is among them. The log goes to a writer of the test's (Caddy's default encoder
// for a writer that is not a terminal writes JSON).
func TestRedisLogIsCaddys(t *testing.T) {
	ports := freePorts(t, 2) // the server's, and a Sentinel's that nothing listens on
	cfg := map[string]any{
		"admin": map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{
			"level":  "INFO",
			"writer": map[string]any{"output": "sluice_test"},
		}}},
		"apps": map[string]any{"http": map[string]any{"servers": map[string]any{"srv0": map[string]any{
			"listen":          []string{"127.0.0.1:" + strconv.Itoa(ports[0])},
			"automatic_https": map[string]any{"disable": true},
			"routes": []any{map[string]any{"handle": []any{map[string]any{
				"handler":        "sluice",
				"zones":          []any{zone("per_ip", "10/m")},
				"on_store_error": "allow",
				"store": map[string]any{"redis": map[string]any{
					"sentinel": map[string]any{"master": "mymaster", "addresses": []string{"127.0.0.1:" + strconv.Itoa(ports[1])}},
					"timeout":  "500ms",
				}},
			}}}},
		}}}},
	}
	sentinel := "127.0.0.1:" + strconv.Itoa(ports[1])
	// Another test's warnings in the last second would hold these back.
	redisWarnings.last.Store(0)
	redisWarnings.suppressed.Store(0)
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(raw, true); err != nil {
		t.Fatalf("loading config: %v", err)
	}
	client.CloseIdleConnections()
	wantStatus(t, "http://127.0.0.1:"+strconv.Itoa(ports[0]), []int{200}) // on_store_error allow
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	text := testLog.String()
	found := false
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		var e struct{ Level, Logger, Msg string }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Errorf("a line of the log is not JSON: %q", line)
			continue
		}
		if e.Logger == redisLoggerName && e.Level == "warn" && strings.Contains(e.Msg, sentinel) {
			found = true
		}
	}
	if !found {
		t.Errorf("no warning of logger %s about the Sentinel in the log:\n%s", redisLoggerName, text)
	}
}

// testLog is what the log writer sluice_test received.
var testLog syncBuffer

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testLogWriter is the log writer caddy.logging.writers.sluice_test,
// which writes to testLog.
type testLogWriter struct{}

func (testLogWriter) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "caddy.logging.writers.sluice_test", New: func() caddy.Module { return new(testLogWriter) }}
}
func (testLogWriter) String() string    { return "sluice_test" }
func (testLogWriter) WriterKey() string { return "sluice_test" }
func (testLogWriter) OpenWriter() (io.WriteCloser, error) {
	return nopCloser{&testLog}, nil
}

// nopCloser is a writer whose Close does nothing.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func init() { caddy.RegisterModule(testLogWriter{}) }
