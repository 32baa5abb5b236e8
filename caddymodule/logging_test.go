package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluicehq/sluice/core"
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
	r, _ := testRequest(clientIP, nil)
	if gone {
		ctx, cancel := context.WithCancel(r.Context())
		cancel()
		r = r.WithContext(ctx)
	}
	w := httptest.NewRecorder()
	called := false
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		called = true
		return nil
	})
	if err := h.ServeHTTP(w, r, next); err != nil {
		t.Fatalf("ServeHTTP: %v", err)
	}
	return w, called
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

// TestRejectionLogBoundsKey: log_key logs a key longer than
// core.MaxKeyLength as its digest, as /top names it, not in full.
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
	if key := entries[0].ContextMap()["key"]; key != core.BoundKey(token) {
		t.Errorf("key field = %.60q, want %q", key, core.BoundKey(token))
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
