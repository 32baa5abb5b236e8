package traefikplugin

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBuiltinCompat decodes configurations written for Traefik's built-in
// rateLimit middleware, as YAML and as labels, and checks that they limit
// as the built-in does: a token bucket of size burst, refilled at
// average/period, that lets a request wait for its token up to 1/(2·rate).
func TestBuiltinCompat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		raw   map[string]interface{}
		burst int
		every time.Duration // refill interval of one token
	}{
		// The example of Traefik's documentation: 100 requests per minute,
		// bursts of 50.
		{"yaml", map[string]interface{}{"average": 100, "period": "1m", "burst": 50}, 50, 600 * time.Millisecond},
		{"labels", map[string]interface{}{"average": "100", "period": "1m", "burst": "50"}, 50, 600 * time.Millisecond},
		{"period in seconds", map[string]interface{}{"average": "100", "period": "60", "burst": "50"}, 50, 600 * time.Millisecond},
		// Defaults: period 1s, burst 1. (In every case a token takes
		// longer than the bounded wait.) A burst of 0, which the built-in
		// reads as 1, is refused (badConfigs): left out, it is 1.
		{"defaults", map[string]interface{}{"average": "5"}, 1, 200 * time.Millisecond},
		{"slow rate", map[string]interface{}{"average": 1, "period": "1h", "burst": 2}, 2, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestRegistry()
			cfg := CreateConfig()
			if err := decodeLikeTraefik(tc.raw, cfg); err != nil {
				t.Fatal(err)
			}
			h, next := g.mustNew(t, cfg, "rl@file")
			req := request{}
			if got, want := codes(h, req, tc.burst+1), repeat("200", tc.burst)+" 429"; got != want {
				t.Fatalf("a burst: got %s, want %s", got, want)
			}
			// 1 ms before a token is back, the built-in's bounded wait
			// (1/(2·rate), at most 500 ms) admits the request after 1 ms;
			// the next one would wait a whole token more.
			g.clock.advance(tc.every - time.Millisecond)
			if got := codes(h, req, 2); got != "200 429" {
				t.Fatalf("1 ms before one token is back: got %s, want 200 (delayed) 429", got)
			}
			if got, want := next.count(), int64(tc.burst+1); got != want {
				t.Errorf("next called %d times, want %d", got, want)
			}
			// Another client has its own bucket.
			if got := codes(h, request{remote: "198.51.100.7:999"}, 1); got != "200" {
				t.Errorf("another client: got %s, want 200", got)
			}
		})
	}
}

// TestBuiltinNoLimit checks that average 0, as in Traefik, limits nothing:
// New returns the next handler itself.
func TestBuiltinNoLimit(t *testing.T) {
	g := newTestRegistry()
	next := &okHandler{}
	for _, raw := range []map[string]interface{}{{}, {"average": "0", "period": "1m", "burst": "10"}, {"average": 0}} {
		cfg := CreateConfig()
		if err := decodeLikeTraefik(raw, cfg); err != nil {
			t.Fatal(err)
		}
		h, err := g.new(context.Background(), next, cfg, "rl@file")
		if err != nil {
			t.Fatal(err)
		}
		// A type assertion, not h != next: Yaegi wraps interpreted values
		// in interfaces, so that comparison is unreliable under it.
		if _, same := h.(*okHandler); !same {
			t.Errorf("%v: got a limiting handler, want next itself", raw)
		}
		if w, _ := do(h, request{}); w.Code != http.StatusOK || w.Header().Get("Ratelimit") != "" || next.count() == 0 {
			t.Errorf("%v: got %d %v, want next's plain 200", raw, w.Code, w.Header())
		}
	}
}

// TestBuiltinSourceCriterion checks requestHeaderName, requestHost and
// ipStrategy.depth as the built-in understands them.
func TestBuiltinSourceCriterion(t *testing.T) {
	t.Run("requestHeaderName", func(t *testing.T) {
		g := newTestRegistry()
		h, _ := g.mustNew(t, &Config{Average: "1", Period: "1h", SourceCriterion: &SourceCriterion{RequestHeaderName: "X-Api-Key"}}, "rl@file")
		a := request{headers: map[string]string{"X-Api-Key": "a"}}
		b := request{headers: map[string]string{"X-Api-Key": "b"}, remote: "192.0.2.1:4321"}
		if got := codes(h, a, 2) + " " + codes(h, b, 2); got != "200 429 200 429" {
			t.Errorf("keys a and b from one IP: got %s, want 200 429 200 429", got)
		}
		// Without the header, Traefik keys by the empty string: all such
		// requests share one bucket.
		if got := codes(h, request{}, 1) + " " + codes(h, request{remote: "198.51.100.7:1"}, 1); got != "200 429" {
			t.Errorf("no header, two IPs: got %s, want 200 429", got)
		}
	})
	t.Run("requestHost", func(t *testing.T) {
		g := newTestRegistry()
		h, _ := g.mustNew(t, &Config{Average: "1", Period: "1h", SourceCriterion: &SourceCriterion{RequestHost: "true"}}, "rl@file")
		if got := codes(h, request{host: "a.example"}, 2) + " " + codes(h, request{host: "B.example:8080", remote: "198.51.100.7:1"}, 1) +
			" " + codes(h, request{host: "b.example"}, 1); got != "200 429 200 429" {
			t.Errorf("got %s, want 200 429 200 429", got)
		}
	})
	t.Run("depth", func(t *testing.T) {
		g := newTestRegistry()
		cfg := CreateConfig()
		raw := map[string]interface{}{"average": "1", "period": "1h",
			"sourceCriterion": map[string]interface{}{"ipStrategy": map[string]interface{}{"depth": "2"}}}
		if err := decodeLikeTraefik(raw, cfg); err != nil {
			t.Fatal(err)
		}
		h, _ := g.mustNew(t, cfg, "rl@file")
		xff := func(v string) request {
			return request{remote: "10.0.0.1:1", headers: map[string]string{"X-Forwarded-For": v}}
		}
		// depth 2 is the second entry from the right: 203.0.113.9 for both.
		if got := codes(h, xff("203.0.113.9, 10.1.1.1"), 1) + " " + codes(h, xff("1.2.3.4, 203.0.113.9, 10.2.2.2"), 1); got != "200 429" {
			t.Errorf("same client behind two proxies: got %s, want 200 429", got)
		}
		if got := codes(h, xff("198.51.100.20, 10.1.1.1"), 1); got != "200" {
			t.Errorf("another client: got %s, want 200", got)
		}
	})
	t.Run("excludedIPs", func(t *testing.T) {
		g := newTestRegistry()
		h, _ := g.mustNew(t, &Config{Average: "1", Period: "1h", SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{ExcludedIPs: []string{"10.0.0.0/8"}}}}, "rl@file")
		xff := func(peer, v string) request {
			return request{remote: peer, headers: map[string]string{"X-Forwarded-For": v}}
		}
		// The first address from the right outside 10.0.0.0/8.
		if got := codes(h, xff("10.0.0.1:1", "203.0.113.9, 10.1.1.1, 10.2.2.2"), 1) + " " + codes(h, xff("10.9.9.9:1", "203.0.113.9"), 1); got != "200 429" {
			t.Errorf("same client: got %s, want 200 429", got)
		}
		// Whatever peer relays them, as for the built-in: clients behind
		// a load balancer outside excludedIPs are told apart.
		lb := "192.0.2.50:1"
		if got := codes(h, xff(lb, "198.51.100.7, 10.1.1.1"), 1) + " " + codes(h, xff(lb, "198.51.100.8"), 1) + " " + codes(h, xff(lb, "198.51.100.7"), 1); got != "200 200 429" {
			t.Errorf("two clients behind a load balancer: got %s, want 200 200 429", got)
		}
	})
}

// TestNoSpoofing checks that with trustedProxies set, a forwarding header
// from any other peer is ignored, whatever ipStrategy asks for.
func TestNoSpoofing(t *testing.T) {
	g := newTestRegistry()
	h, _ := g.mustNew(t, &Config{Average: "1", Period: "1h", TrustedProxies: []string{"10.0.0.0/8"},
		SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{Depth: "1"}}}, "rl@file")
	spoof := func(v string) request {
		return request{remote: "203.0.113.66:1", headers: map[string]string{"X-Forwarded-For": v}}
	}
	// An untrusted peer inventing a new address per request is still one
	// client.
	if got := codes(h, spoof("198.51.100.1"), 1) + " " + codes(h, spoof("198.51.100.2"), 1); got != "200 429" {
		t.Errorf("untrusted peer rotating X-Forwarded-For: got %s, want 200 429", got)
	}
	// A trusted proxy's header is believed.
	proxied := func(v string) request {
		return request{remote: "10.0.0.1:1", headers: map[string]string{"X-Forwarded-For": v}}
	}
	if got := codes(h, proxied("198.51.100.1"), 1) + " " + codes(h, proxied("198.51.100.2"), 1) + " " + codes(h, proxied("198.51.100.2"), 1); got != "200 200 429" {
		t.Errorf("trusted proxy: got %s, want 200 200 429", got)
	}
}

// TestBalancerSpoof: behind a load balancer that appends the client's
// address to X-Forwarded-For, a client that writes a new address to its
// left each time is still one client, and cannot spend the quota of the
// client whose address it wrote: with trustedProxies (the rightmost
// untrusted entry), with ipStrategy.depth 1, with ipStrategy.excludedIPs,
// and by default (the peer).
func TestBalancerSpoof(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		victim string // the victim's own requests: 200 429, or 429 429 when all share the balancer's key
	}{
		{"trustedProxies", Config{TrustedProxies: []string{"127.0.0.1"}}, "200 429"},
		{"depth", Config{SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{Depth: "1"}}}, "200 429"},
		{"depth with trustedProxies", Config{TrustedProxies: []string{"127.0.0.1"}, SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{Depth: "1"}}}, "200 429"},
		{"excludedIPs", Config{SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{ExcludedIPs: []string{"10.0.0.0/8"}}}}, "200 429"},
		{"default", Config{}, "429 429"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Average, cfg.Period = "1", "1m"
			h, _ := newTestRegistry().mustNew(t, &cfg, "rl@file")
			var got []string
			for i := 1; i <= 5; i++ {
				got = append(got, codes(h, request{remote: "127.0.0.1:4711",
					headers: map[string]string{"X-Forwarded-For": "198.51.100." + strconv.Itoa(i) + ", 203.0.113.5"}}, 1))
			}
			if s := strings.Join(got, " "); s != "200 429 429 429 429" {
				t.Errorf("a client writing a new address each time: got %s, want 200 429 429 429 429", s)
			}
			victim := request{remote: "127.0.0.1:4711", headers: map[string]string{"X-Forwarded-For": "198.51.100.1"}}
			if s := codes(h, victim, 2); s != tc.victim {
				t.Errorf("the client whose address it wrote: got %s, want %s", s, tc.victim)
			}
		})
	}
}

// TestExemptIPs: clients in exemptIPs bypass every limit, without
// rate-limit headers, on the address the key's client_ip part derives
// (here through ipStrategy.depth); other clients are limited as before.
func TestExemptIPs(t *testing.T) {
	g := newTestRegistry()
	h, _ := g.mustNew(t, &Config{Average: "1", Period: "1h", ExemptIPs: []string{"10.0.0.0/8", "2001:db8::/32"},
		Limits: []LimitConfig{{Name: "global", Average: "100", Period: "1h", Key: []string{"const:all"}}}}, "rl@file")
	if got := codes(h, request{remote: "10.1.2.3:1"}, 3); got != "200 200 200" {
		t.Errorf("exempt IPv4 client: got %s, want 200 200 200", got)
	}
	if got := codes(h, request{remote: "[2001:db8::7]:1"}, 2); got != "200 200" {
		t.Errorf("exempt IPv6 client: got %s, want 200 200", got)
	}
	if w, _ := do(h, request{remote: "10.1.2.3:1"}); w.Header().Get("Ratelimit") != "" {
		t.Errorf("exempt client got RateLimit %q", w.Header().Get("Ratelimit"))
	}
	if got := codes(h, request{remote: "192.0.2.9:1"}, 2); got != "200 429" {
		t.Errorf("other client: got %s, want 200 429", got)
	}
	// Behind a proxy: the client address of ipStrategy, not the peer's.
	g = newTestRegistry()
	h, _ = g.mustNew(t, &Config{Average: "1", Period: "1h", ExemptIPs: []string{"198.51.100.0/24"},
		SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{Depth: "1"}}}, "rl@file")
	via := func(client string) request {
		return request{remote: "192.0.2.1:1", headers: map[string]string{"X-Forwarded-For": client}}
	}
	if got := codes(h, via("198.51.100.4"), 2) + " " + codes(h, via("203.0.113.5"), 2); got != "200 200 200 429" {
		t.Errorf("through a proxy: got %s, want 200 200 200 429", got)
	}
	if _, err := parse(&Config{Average: "1", ExemptIPs: []string{"10.0.0.0/33"}}, "rl@file"); err == nil || !strings.Contains(err.Error(), "exemptIPs") {
		t.Errorf("bad exemptIPs: error %v, want one naming exemptIPs", err)
	}
}

// TestBuiltinMaxDelay: a token_bucket's maxDelay defaults to the bounded
// wait of Traefik's rateLimit (its TestNewRateLimiter: average 200, burst
// 10 → 2.5 ms), is 500 ms below one request per second, and "0" turns it
// off.
func TestBuiltinMaxDelay(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{Average: "200", Burst: "10"}, 2500 * time.Microsecond},
		{Config{Average: "100"}, 5 * time.Millisecond},
		{Config{Average: "50", Period: "500ms"}, 5 * time.Millisecond},
		{Config{Average: "5", Period: "10s"}, 500 * time.Millisecond},
		{Config{Average: "2.5"}, 250 * time.Millisecond}, // 2/s, truncated as Traefik does
		{Config{Average: "100", MaxDelay: "0"}, 0},
		{Config{Average: "100", MaxDelay: "40ms"}, 40 * time.Millisecond},
		{Config{Average: "100", Algorithm: "leaky_bucket"}, 0},
	} {
		s, err := parse(&tc.cfg, "rl@file")
		if err != nil {
			t.Fatal(err)
		}
		if got := s.plans[0].limit.MaxDelay; got != tc.want {
			t.Errorf("%+v: maxDelay %v, want %v", tc.cfg, got, tc.want)
		}
	}
}
