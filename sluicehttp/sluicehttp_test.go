package sluicehttp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/resp"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicehttp"
)

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })

// newMW returns cfg's middleware, closed when the test ends.
func newMW(t *testing.T, cfg sluicehttp.Config) *sluicehttp.Limiter {
	t.Helper()
	mw, err := sluicehttp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Close() })
	return mw
}

// serve sends one request from peer (host:port) with the headers h
// ("Name: value") to hd and returns the recorded answer.
func serve(hd http.Handler, peer string, h ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = peer
	for _, kv := range h {
		k, v, _ := strings.Cut(kv, ": ")
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	hd.ServeHTTP(w, r)
	return w
}

// codes returns the status codes of n requests from peer to hd.
func codes(hd http.Handler, peer string, n int) string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprint(serve(hd, peer).Code))
	}
	return strings.Join(out, " ")
}

// redisClient connects to srv for inspecting what the middleware wrote.
func redisClient(t *testing.T, srv *redistest.Server) *resp.Client {
	t.Helper()
	c, err := resp.New(context.Background(), resp.Options{Addr: srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedisKeyOfShareGroup pins the Redis key of a limit in a share group
// to the one Caddy's handler with `share edge` writes for the zone of the
// same name (caddymodule: zonePrefix, then redisstore.Store): the prefix,
// the limit's namespace (name and algorithm) and the digest of the
// group's prefix and the client's key.
func TestRedisKeyOfShareGroup(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	mw := newMW(t, sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "per_ip", Rate: "10/1h"}},
		Share:  "edge",
		Redis:  &sluicehttp.Redis{Addr: srv.Addr, Prefix: "t:"},
	})
	if w := serve(mw.Handler(ok), "192.0.2.1:1234"); w.Code != 200 {
		t.Fatalf("status %d, want 200", w.Code)
	}
	keys, err := redisClient(t, srv).Do(context.Background(), "KEYS", "t:*")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("=edge/192.0.2.1"))
	want := "t:{per_ip:token_bucket:#" + hex.EncodeToString(sum[:16]) + "}"
	if got := fmt.Sprint(keys); got != "["+want+"]" {
		t.Errorf("Redis keys %s, want [%s]", got, want)
	}

	_, err = sluicehttp.New(sluicehttp.Config{Limits: []sluicehttp.Limit{{Name: "per_ip", Rate: "10/1h"}}, Redis: &sluicehttp.Redis{Addr: srv.Addr, Prefix: "{x}"}})
	if want := `sluicehttp: redis: prefix "{x}": must not contain braces`; err == nil || err.Error() != want {
		t.Errorf("a prefix with braces: error %v, want %s", err, want)
	}
}

// TestSharedQuota: two middlewares (two replicas of a service, or a
// service and a Caddy handler) of one share group count one quota in
// Redis; a middleware of another group counts its own.
func TestSharedQuota(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := func(share string) sluicehttp.Config {
		return sluicehttp.Config{
			Limits: []sluicehttp.Limit{{Name: "api", Rate: "5/1h", Key: []string{"header:X-Client"}}},
			Share:  share,
			Redis:  &sluicehttp.Redis{Addr: srv.Addr, Prefix: "t:"},
		}
	}
	a, b := newMW(t, cfg("svc")).Handler(ok), newMW(t, cfg("svc")).Handler(ok)
	other := newMW(t, cfg("")).Handler(ok)
	var got []string
	for i := 0; i < 8; i++ {
		h := a
		if i%2 == 1 {
			h = b
		}
		got = append(got, fmt.Sprint(serve(h, "192.0.2.1:1", "X-Client: c1").Code))
	}
	if want := "200 200 200 200 200 429 429 429"; strings.Join(got, " ") != want {
		t.Errorf("one client alternating over two middlewares of group svc: %s, want %s", strings.Join(got, " "), want)
	}
	if w := serve(other, "192.0.2.1:1", "X-Client: c1"); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("the same client in another group: status %d, remaining %q, want 200 and 4 (a quota of its own)", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	w := serve(a, "192.0.2.1:1", "X-Client: c1")
	if w.Code != 429 || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), `"policy":"api"`) {
		t.Errorf("429: status %d, Retry-After %q, body %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}

// TestInFlightReleased: a request holds its in-flight slot until the next
// handler returns, normally or by a panic, in memory and in Redis.
func TestInFlightReleased(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			cfg := sluicehttp.Config{Limits: []sluicehttp.Limit{{Name: "conc", MaxInFlight: 1}}}
			if store == "redis" {
				cfg.Redis = &sluicehttp.Redis{Addr: srv.Addr, Prefix: "t-" + store + ":"}
			}
			mw := newMW(t, cfg)
			entered, release := make(chan struct{}), make(chan struct{})
			held := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				<-release
			}))
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(held, "192.0.2.1:1")
			}()
			<-entered
			h := mw.Handler(ok)
			w := serve(h, "192.0.2.1:2")
			if w.Code != 429 || w.Header().Get("RateLimit-Policy") != `"conc";q=1;qu="concurrent-requests"` {
				t.Errorf("a second request while the first is in progress: status %d, RateLimit-Policy %q, want 429 and the concurrency policy", w.Code, w.Header().Get("RateLimit-Policy"))
			}
			close(release)
			wg.Wait()
			if w := serve(h, "192.0.2.1:3"); w.Code != 200 {
				t.Errorf("after the first returned: status %d, want 200", w.Code)
			}
			panics := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }))
			func() {
				defer func() { recover() }()
				serve(panics, "192.0.2.1:4")
			}()
			if w := serve(h, "192.0.2.1:5"); w.Code != 200 {
				t.Errorf("after a handler panicked: status %d, want 200 (its slot released)", w.Code)
			}
		})
	}
}

// TestKeysAndMatch: the key parts, on_missing_key and Match decide which
// requests a limit counts; a request no limit applies to passes without
// rate-limit headers.
func TestKeysAndMatch(t *testing.T) {
	mw := newMW(t, sluicehttp.Config{
		Limits: []sluicehttp.Limit{
			{Name: "per_key", Rate: "1/1h", Key: []string{"header:X-API-Key"}},
			{Name: "reports", Rate: "1/1h", Key: []string{"const:all"}, Match: func(r *http.Request) bool { return r.URL.Path == "/reports" }},
		},
	})
	h := mw.Handler(ok)
	if got := codes(h, "192.0.2.1:1", 3); got != "200 200 200" {
		t.Errorf("without X-API-Key (skip), outside /reports: %s, want 200 200 200", got)
	}
	if w := serve(h, "192.0.2.1:1"); w.Header().Get("RateLimit-Policy") != "" {
		t.Errorf("a request no limit applies to has RateLimit-Policy %q", w.Header().Get("RateLimit-Policy"))
	}
	var got []string
	for _, k := range []string{"a", "a", "b"} {
		got = append(got, fmt.Sprint(serve(h, "192.0.2.1:1", "X-API-Key: "+k).Code))
	}
	if strings.Join(got, " ") != "200 429 200" {
		t.Errorf("keys a, a, b: %s, want 200 429 200", strings.Join(got, " "))
	}
	r := httptest.NewRequest("GET", "/reports", nil)
	for i, want := range []int{200, 429} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("/reports #%d: status %d, want %d", i+1, w.Code, want)
		}
	}

	shared := newMW(t, sluicehttp.Config{Limits: []sluicehttp.Limit{{Name: "per_key", Rate: "1/1h", Key: []string{"header:X-API-Key"}, OnMissingKey: "shared"}}})
	if got := codes(shared.Handler(ok), "192.0.2.1:1", 2); got != "200 429" {
		t.Errorf("without X-API-Key (shared): %s, want 200 429", got)
	}
}

// TestTrustedProxies: the client's address comes from X-Forwarded-For
// only when a trusted proxy sent it.
func TestTrustedProxies(t *testing.T) {
	mw := newMW(t, sluicehttp.Config{
		Limits:         []sluicehttp.Limit{{Name: "per_ip", Rate: "1/1h"}},
		TrustedProxies: []string{"10.0.0.0/8"},
	})
	h := mw.Handler(ok)
	var got []string
	for _, c := range []struct{ peer, xff string }{
		{"10.0.0.1:1", "198.51.100.1"},                 // client 198.51.100.1
		{"10.0.0.2:1", "203.0.113.9, 198.51.100.1"},    // the same: the left entry is the client's own
		{"10.0.0.1:1", "198.51.100.2"},                 // another client
		{"192.0.2.1:1", "198.51.100.3"},                // an untrusted peer: itself
		{"192.0.2.1:1", "198.51.100.4"},                // the same
		{"10.0.0.1:1", "198.51.100.1, 10.0.0.9"},       // a trusted proxy skipped
		{"10.0.0.3:1", "not an address, 198.51.100.5"}, // another client again
	} {
		got = append(got, fmt.Sprint(serve(h, c.peer, "X-Forwarded-For: "+c.xff).Code))
	}
	if want := "200 429 200 200 429 429 200"; strings.Join(got, " ") != want {
		t.Errorf("statuses %s, want %s", strings.Join(got, " "), want)
	}
}

// TestStoreError: while Redis is down, OnStoreError decides (deny: 429,
// allow: 200) within the timeout, and the local fallback enforces each
// instance's share; after Close, and once Redis is back, a request
// connects again.
func TestStoreError(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := func(policy, fallback string) sluicehttp.Config {
		return sluicehttp.Config{
			Limits:       []sluicehttp.Limit{{Name: "api", Rate: "4/1h"}},
			Redis:        &sluicehttp.Redis{Addr: srv.Addr, Prefix: "t:", Timeout: 200 * time.Millisecond},
			OnStoreError: policy,
			Fallback:     fallback,
			Instances:    map[string]int{"": 0, "local": 2}[fallback],
		}
	}
	deny, allow, local := newMW(t, cfg("deny", "")), newMW(t, cfg("allow", "")), newMW(t, cfg("", "local"))
	srv.Stop()
	if got := codes(deny.Handler(ok), "192.0.2.1:1", 2); got != "429 429" {
		t.Errorf("deny, Redis down: %s, want 429 429", got)
	}
	if got := codes(allow.Handler(ok), "192.0.2.1:1", 6); got != "200 200 200 200 200 200" {
		t.Errorf("allow, Redis down: %s, want 200s", got)
	}
	if got := codes(local.Handler(ok), "192.0.2.1:1", 3); got != "200 200 429" {
		t.Errorf("fallback local over 2 instances, Redis down: %s, want 200 200 429 (half of 4)", got)
	}
	if err := deny.Close(); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	waitAdmitted(t, deny.Handler(ok), "192.0.2.2:1")
}

// waitAdmitted sends requests from remote to h until one is admitted, for
// at most 10s: a limiter whose Redis is back connects again by itself,
// once its breaker lets a call through and its last failed dial is
// resp.RedialEvery old.
func waitAdmitted(t *testing.T, h http.Handler, remote string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for codes(h, remote, 1) != "200" {
		if time.Now().After(deadline) {
			t.Fatalf("Redis back: %s still refused after 10s", remote)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStartsWhileRedisIsDown: New does not need Redis: a limiter made while
// Redis is down applies OnStoreError, then counts in Redis once it is up.
func TestStartsWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	srv.Stop()
	lim := newMW(t, sluicehttp.Config{
		Limits:       []sluicehttp.Limit{{Name: "api", Rate: "2/1h"}},
		Redis:        &sluicehttp.Redis{Addr: srv.Addr, Prefix: "down:", Timeout: 200 * time.Millisecond},
		OnStoreError: "deny",
	})
	if got := codes(lim.Handler(ok), "192.0.2.1:1", 1); got != "429" {
		t.Errorf("Redis down at start: %s, want 429 (on_store_error deny)", got)
	}
	srv.Restart(t)
	waitAdmitted(t, lim.Handler(ok), "192.0.2.9:1")
	if got := codes(lim.Handler(ok), "192.0.2.1:1", 3); got != "200 200 429" {
		t.Errorf("Redis up: %s, want 200 200 429 (2/1h counted in Redis)", got)
	}
}

// TestOnVerdict: the hook sees every decided request's outcome, and none
// of a request no limit applies to.
func TestOnVerdict(t *testing.T) {
	var outcomes []string
	mw := newMW(t, sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "api", Rate: "1/1h", Match: func(r *http.Request) bool { return r.URL.Path == "/" }}},
		OnVerdict: func(r *http.Request, v core.Verdict) {
			outcomes = append(outcomes, v.Outcome.String()+" "+v.Decision.Limit.Name)
		},
	})
	h := mw.Handler(ok)
	codes(h, "192.0.2.1:1", 2)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/other", nil))
	if got := strings.Join(outcomes, ", "); got != "allowed api, rejected api" {
		t.Errorf("verdicts %q, want \"allowed api, rejected api\"", got)
	}
}

// TestConfigErrors: a bad configuration fails New with an error naming the
// field.
// TestPenalty: a client the limit refuses stays refused for the penalty,
// with the time left as Retry-After, while another client is admitted.
func TestPenalty(t *testing.T) {
	mw := newMW(t, sluicehttp.Config{Limits: []sluicehttp.Limit{{Name: "login", Rate: "2/m", Penalty: 15 * time.Minute}}})
	hd := mw.Handler(ok)
	if got := codes(hd, "192.0.2.1:1", 4); got != "200 200 429 429" {
		t.Fatalf("codes %s, want 200 200 429 429", got)
	}
	if w := serve(hd, "192.0.2.1:1"); w.Code != 429 || w.Header().Get("Retry-After") != "900" {
		t.Errorf("held out: %d, Retry-After %q, want 429 and 900", w.Code, w.Header().Get("Retry-After"))
	}
	if w := serve(hd, "192.0.2.2:1"); w.Code != 200 {
		t.Errorf("another client: %d", w.Code)
	}
}

func TestConfigErrors(t *testing.T) {
	lim := func(l sluicehttp.Limit) []sluicehttp.Limit {
		if l.Name == "" {
			l.Name = "api"
		}
		return []sluicehttp.Limit{l}
	}
	one := lim(sluicehttp.Limit{Rate: "1/s"})
	for _, c := range []struct {
		name string
		cfg  sluicehttp.Config
		want string
	}{
		{"no limits", sluicehttp.Config{}, "limits: at least one is required"},
		{"no rate", sluicehttp.Config{Limits: lim(sluicehttp.Limit{})}, "limits[0] (api): rate: required (or max_in_flight)"},
		{"bad rate", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "fast"})}, `limits[0] (api): rate "fast": want <quota>/<period>`},
		{"bad name", sluicehttp.Config{Limits: []sluicehttp.Limit{{Name: "a:b", Rate: "1/s"}}}, "limits[0] (a:b): "},
		{"same name", sluicehttp.Config{Limits: append(lim(sluicehttp.Limit{Rate: "1/s"}), one...)}, `limit "api": name "api": defined twice`},
		{"burst of a window", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "1/s", Algorithm: "fixed_window", Burst: 3})}, "burst: fixed_window takes its capacity"},
		{"algorithm", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "1/s", Algorithm: "gcra"})}, `algorithm "gcra": unknown`},
		{"key", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "1/s", Key: []string{"header"}})}, `limits[0] (api): key part "header": want header:<Name>`},
		{"on_missing_key", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "1/s", OnMissingKey: "maybe"})}, `on_missing_key "maybe": want skip or shared`},
		{"cost", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "1/s", Burst: 2, Cost: 3})}, `limits[0] (api): cost "3": above the capacity of 2`},
		{"negative cost", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "1/s", Cost: -1})}, `cost "-1": must be positive`},
		{"negative estimate", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "1/s", Cost: -1, CostBytes: true})}, `cost "-1": must be positive`},
		{"cost_header", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "1/s", CostHeader: "X Tokens"})}, `limits[0] (api): cost_header "X Tokens": not a header name`},
		{"cost_header and lease", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "10/s", CostHeader: "X-Tokens-Used", Lease: 5})}, "limits[0] (api): cost_header: a lease's admissions cannot be settled; remove lease"},
		{"cost_header without rate", sluicehttp.Config{Limits: lim(sluicehttp.Limit{MaxInFlight: 5, CostHeader: "X-Tokens-Used"})}, "limits[0] (api): cost_header: only a rate is charged a cost"},
		{"cost_bytes and cost_header", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "1/s", CostHeader: "X-Tokens-Used", CostBytes: true})}, "limits[0] (api): cost_bytes: a cost comes from a header or from the body"},
		{"lease above capacity", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "10/s", Lease: 20})}, `limits[0] (api): lease "20": above the capacity of 10`},
		{"penalty", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "10/s", Penalty: time.Nanosecond})}, `limits[0] (api): penalty "1ns": must be a whole number of microseconds`},
		{"lease in memory", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "10/s", Lease: 5})}, `lease "5": only a Redis store's capacity is leased`},
		{"ipv6_prefix", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "1/s", IPv6Prefix: 129})}, `ipv6_prefix "129": must be between 0 and 128`},
		{"trusted_proxies", sluicehttp.Config{Limits: one, TrustedProxies: []string{"10.0.0.0/33"}}, `trusted_proxies: prefix "10.0.0.0/33"`},
		{"client_ip_header", sluicehttp.Config{Limits: one, ClientIPHeader: "X Forwarded"}, `header "X Forwarded": not a valid header name`},
		{"headers", sluicehttp.Config{Limits: one, Headers: []string{"draft"}}, `headers "draft": unknown`},
		{"body", sluicehttp.Config{Limits: one, Body: "xml"}, `body "xml": unknown`},
		{"mode", sluicehttp.Config{Limits: one, Mode: "audit"}, `mode "audit": want enforce or dry_run`},
		{"retry_jitter", sluicehttp.Config{Limits: one, RetryJitter: 2}, `jitter "2": must be between 0 and 1`},
		{"on_store_error", sluicehttp.Config{Limits: one, OnStoreError: "panic"}, `on_store_error "panic": want allow or deny`},
		{"fallback", sluicehttp.Config{Limits: one, Fallback: "remote"}, `fallback "remote": want local`},
		{"fallback without redis", sluicehttp.Config{Limits: one, Fallback: "local"}, "fallback: applies only to a store that can fail"},
		{"instances without fallback", sluicehttp.Config{Limits: one, Instances: 3}, "instances: only the local fallback divides quotas"},
		{"redis db", sluicehttp.Config{Limits: one, Redis: &sluicehttp.Redis{Addr: "127.0.0.1:1", DB: -1}}, `redis: db "-1": must not be negative`},
		{"redis addr", sluicehttp.Config{Limits: one, Redis: &sluicehttp.Redis{}}, "redis: addr: required"},
		{"key and key func", sluicehttp.Config{Limits: lim(sluicehttp.Limit{Rate: "1/s", Key: []string{"host"}, KeyFunc: func(*http.Request) (string, bool) { return "", false }})}, "key: set Key or KeyFunc, not both"},
		{"redis timeout", sluicehttp.Config{Limits: one, Redis: &sluicehttp.Redis{Addr: "127.0.0.1:1", Timeout: -1}}, "redis: timeout and lease_ttl: must not be negative"},
	} {
		_, err := sluicehttp.New(c.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "sluicehttp: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one beginning sluicehttp: and containing %q", c.name, err, c.want)
		}
	}
}
