package traefikplugin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHeaders checks the header families selected by the headers option.
func TestHeaders(t *testing.T) {
	for _, tc := range []struct {
		headers       []string
		present, gone []string
	}{
		{nil, []string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}, []string{"Ratelimit-Limit"}},
		{[]string{"legacy"}, []string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset"}, []string{"Ratelimit-Policy", "X-Ratelimit-Limit"}},
		{[]string{"ietf,x"}, []string{"Ratelimit-Policy", "X-Ratelimit-Limit"}, []string{"Ratelimit-Limit"}},
		{[]string{"off"}, nil, []string{"Ratelimit-Policy", "Ratelimit", "Ratelimit-Limit", "X-Ratelimit-Limit"}},
	} {
		g := newTestRegistry()
		h, _ := g.mustNew(t, &Config{Average: "100", Period: "1m", Burst: "10", Headers: tc.headers}, "api@file")
		w, _ := do(h, request{})
		for _, name := range tc.present {
			if w.Header().Get(name) == "" {
				t.Errorf("headers %q: %s missing in %v", tc.headers, name, w.Header())
			}
		}
		for _, name := range tc.gone {
			if v := w.Header().Get(name); v != "" {
				t.Errorf("headers %q: unexpected %s: %s", tc.headers, name, v)
			}
		}
	}
	g := newTestRegistry()
	h, _ := g.mustNew(t, &Config{Average: "100", Period: "1m", Burst: "10"}, "api@file")
	w, _ := do(h, request{})
	if got, want := w.Header().Get("Ratelimit-Policy"), `"default";q=100;w=60`; got != want {
		t.Errorf("RateLimit-Policy: got %s, want %s", got, want)
	}
	if got, want := w.Header().Get("Ratelimit"), `"default";r=9;t=1`; got != want {
		t.Errorf("RateLimit: got %s, want %s", got, want)
	}
}

// TestBody checks the 429 bodies selected by the body option.
func TestBody(t *testing.T) {
	for _, tc := range []struct {
		body, ctype, contains string
	}{
		{"", "application/json", `{"error":"rate_limited","retryable":true,"retry_after":60,"policy":"default"}`},
		{"problem", "application/problem+json", `"violated-policies":["default"]`},
		{"text", "text/plain; charset=utf-8", "429 Too Many Requests: retry in 60 s"},
		{"none", "", ""},
	} {
		g := newTestRegistry()
		h, next := g.mustNew(t, &Config{Average: "1", Period: "1m", Body: tc.body}, "api@file")
		do(h, request{})
		w, _ := do(h, request{})
		if w.Code != http.StatusTooManyRequests || next.count() != 1 {
			t.Fatalf("body %q: got %d after %d passed, want 429 after 1", tc.body, w.Code, next.count())
		}
		if got := w.Header().Get("Content-Type"); got != tc.ctype {
			t.Errorf("body %q: Content-Type %q, want %q", tc.body, got, tc.ctype)
		}
		if got := w.Body.String(); !strings.Contains(got, tc.contains) || (tc.contains == "" && got != "") {
			t.Errorf("body %q: got %q, want it to contain %q", tc.body, got, tc.contains)
		}
		if got := w.Header().Get("Retry-After"); got != "60" {
			t.Errorf("body %q: Retry-After %q, want 60", tc.body, got)
		}
	}
}

// TestDryRun checks that dry_run passes every request without rate-limit
// headers, marks those it would have rejected, removes the mark when a
// client sends it, and summarizes them in the log.
func TestDryRun(t *testing.T) {
	g := newTestRegistry()
	h, next := g.mustNew(t, &Config{Average: "1", Period: "1h", Mode: "dry_run"}, "api@file")
	forged := request{headers: map[string]string{DryRunHeader: "rejected"}}
	w, r := do(h, forged)
	if w.Code != http.StatusOK || r.Header.Get(DryRunHeader) != "" {
		t.Errorf("first request: %d, %s %q; want 200 and no mark (the client's removed)", w.Code, DryRunHeader, r.Header.Get(DryRunHeader))
	}
	for i := 0; i < 3; i++ {
		w, r = do(h, request{})
		if w.Code != http.StatusOK || r.Header.Get(DryRunHeader) != "rejected" {
			t.Errorf("over the limit: %d, %s %q; want 200 and rejected", w.Code, DryRunHeader, r.Header.Get(DryRunHeader))
		}
		if len(w.Header()) != 0 {
			t.Errorf("over the limit: headers %v; want none (a dry run writes no rate-limit header)", w.Header())
		}
	}
	if next.count() != 4 {
		t.Errorf("next called %d times, want 4", next.count())
	}
	if got := g.stdout.String(); !strings.Contains(got, "sluice api@file: 1 request would have been rejected (dry run)") {
		t.Errorf("log: got %q", got)
	}
}

// TestMultiLimit checks several limits in one middleware: per IP, per API
// key and global, decided all-or-nothing.
func TestMultiLimit(t *testing.T) {
	g := newTestRegistry()
	cfg := CreateConfig()
	raw := map[string]interface{}{
		"average": "2", "period": "1h", "burst": "2", // per IP, named after the middleware
		"limits": []interface{}{
			map[string]interface{}{"name": "per-key", "average": "3", "period": "1h", "burst": "3", "key": "header:X-Api-Key"},
			map[string]interface{}{"name": "global", "average": "4", "period": "1h", "burst": "4", "key": "const:all"},
		},
	}
	if err := decodeLikeTraefik(raw, cfg); err != nil {
		t.Fatal(err)
	}
	h, next := g.mustNew(t, cfg, "edge@docker")
	from := func(ip, key string) request {
		r := request{remote: ip + ":1"}
		if key != "" {
			r.headers = map[string]string{"X-Api-Key": key}
		}
		return r
	}
	steps := []struct {
		req    request
		code   int
		policy string // the policy reported in the body of a 429
	}{
		{from("192.0.2.1", "k1"), 200, ""},
		{from("192.0.2.1", "k1"), 200, ""},
		{from("192.0.2.1", "k1"), 429, "default"}, // per IP exhausted
		{from("192.0.2.2", "k1"), 200, ""},
		{from("192.0.2.3", "k1"), 429, "per-key"}, // per key exhausted; the IP is charged nothing
		{from("192.0.2.3", ""), 200, ""},          // no key: per-key limit skipped
		{from("192.0.2.3", "k2"), 429, "global"},  // global exhausted
	}
	for i, s := range steps {
		w, _ := do(h, s.req)
		if w.Code != s.code {
			t.Fatalf("step %d: got %d, want %d", i, w.Code, s.code)
		}
		if s.policy != "" && !strings.Contains(w.Body.String(), `"policy":"`+s.policy+`"`) {
			t.Errorf("step %d: body %s, want policy %s", i, w.Body.String(), s.policy)
		}
	}
	if next.count() != 4 {
		t.Errorf("next called %d times, want 4", next.count())
	}
}

// TestOnMissingKey checks skip and shared for a key given by the key option.
func TestOnMissingKey(t *testing.T) {
	for _, tc := range []struct {
		policy, want string
	}{
		{"", "200 200 200"}, // skip: requests without the header are not limited
		{"skip", "200 200 200"},
		{"shared", "200 429 429"},
	} {
		g := newTestRegistry()
		h, _ := g.mustNew(t, &Config{Average: "1", Period: "1h", Key: []string{"header:X-Api-Key"}, OnMissingKey: tc.policy}, "api@file")
		if got := codes(h, request{}, 3); got != tc.want {
			t.Errorf("onMissingKey %q: got %s, want %s", tc.policy, got, tc.want)
		}
		k := request{headers: map[string]string{"X-Api-Key": "k"}}
		if got := codes(h, k, 2); got != "200 429" {
			t.Errorf("onMissingKey %q, with a key: got %s, want 200 429", tc.policy, got)
		}
	}
}

// TestCost checks a fractional cost per request.
func TestCost(t *testing.T) {
	g := newTestRegistry()
	h, _ := g.mustNew(t, &Config{Average: "10", Period: "1h", Burst: "5", Cost: "2.5"}, "api@file")
	if got := codes(h, request{}, 3); got != "200 200 429" {
		t.Errorf("got %s, want 200 200 429", got)
	}
}

// TestRejectionSummary checks that rejections are summarized at once and
// then at most every ten seconds.
func TestRejectionSummary(t *testing.T) {
	g := newTestRegistry()
	h, _ := g.mustNew(t, &Config{Average: "1", Period: "1h"}, "api@file")
	codes(h, request{}, 4) // 1 passes, 3 rejected: one line for the first
	g.clock.advance(9 * time.Second)
	codes(h, request{}, 5) // counted, no line yet
	g.clock.advance(2 * time.Second)
	codes(h, request{}, 1) // 11 s after the first line: the summary
	got := g.stdout.String()
	want := "sluice api@file: 1 request rejected; later lines summarize at most every 10s\n" +
		"sluice api@file: 8 requests rejected in the last 11s\n"
	if got != want {
		t.Errorf("log:\ngot  %q\nwant %q", got, want)
	}
}

// TestLeakyBucketCancel checks maxDelay: a request that would be delayed
// but whose client has gone is not passed on, and its capacity is given
// back.
func TestLeakyBucketCancel(t *testing.T) {
	g := newTestRegistry()
	h, next := g.mustNew(t, &Config{Average: "1", Period: "1h", Burst: "3", Algorithm: "leaky_bucket", MaxDelay: "3h"}, "api@file")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 3; i++ {
		r := httptest.NewRequest(http.MethodGet, "http://example.com/", nil).WithContext(ctx)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if i == 0 && next.count() != 1 {
			t.Fatalf("first request: next called %d times, want 1 (no delay)", next.count())
		}
		if i > 0 && (next.count() != 1 || w.Header().Get("Ratelimit") != `"default";r=1;t=3600`) {
			t.Errorf("request %d: next called %d times, RateLimit %q; want 1, and the same delay each time (refunded)", i, next.count(), w.Header().Get("Ratelimit"))
		}
	}
	if got := g.stdout.String(); !strings.Contains(got, "1 request cancelled by the client before proceeding") {
		t.Errorf("log: %q", got)
	}
}

// TestPassThroughWriter checks that the ResponseWriter reaches next
// untouched (Traefik's writers implement http.Hijacker and http.Flusher).
func TestPassThroughWriter(t *testing.T) {
	g := newTestRegistry()
	var got http.ResponseWriter
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = w })
	h, err := g.new(context.Background(), next, &Config{Average: "10"}, "api@file")
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if got != http.ResponseWriter(w) {
		t.Errorf("next got %T %p, want the recorder %p", got, got, w)
	}
}

// TestPolicyName: the top-level limit is "default" in headers and bodies,
// not the middleware's name (under Kubernetes "<namespace>-<name>"),
// unless name says otherwise; a name the headers cannot carry is refused.
func TestPolicyName(t *testing.T) {
	g := newTestRegistry()
	h, _ := g.mustNew(t, &Config{Average: "10", Period: "1m"}, "prod-payments-api@kubernetescrd")
	if w, _ := do(h, request{}); w.Header().Get("Ratelimit-Policy") != `"default";q=10;w=60` {
		t.Errorf("RateLimit-Policy %q, want the default name", w.Header().Get("Ratelimit-Policy"))
	}
	h, _ = g.mustNew(t, &Config{Average: "10", Period: "1m", Name: "edge"}, "prod-payments-api@kubernetescrd")
	if w, _ := do(h, request{}); w.Header().Get("Ratelimit-Policy") != `"edge";q=10;w=60` {
		t.Errorf("RateLimit-Policy %q, want edge", w.Header().Get("Ratelimit-Policy"))
	}
	for _, bad := range []string{`a"b`, "caf\u00e9"} {
		if _, err := g.registry.new(context.Background(), http.NotFoundHandler(), &Config{Average: "10", Name: bad}, "x@file"); err == nil || !strings.Contains(err.Error(), "name") {
			t.Errorf("name %q: error %v, want one naming the name", bad, err)
		}
	}
}
