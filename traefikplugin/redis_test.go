package traefikplugin

import (
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// redisConfig is a limit of burst per hour in Redis at addr; the refill
// is too slow to matter during a test, whose decisions use Redis's clock.
func redisConfig(addr, burst string) *Config {
	return &Config{Average: "1", Period: "1h", Burst: burst,
		Redis: &Redis{Endpoints: []string{addr}, DialTimeout: "500ms", ReadTimeout: "500ms", WriteTimeout: "500ms"}}
}

// TestRedisShared checks that two Traefik instances (two registries) using
// the same Redis share one quota, and that middlewares stay apart.
func TestRedisShared(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newTestRegistry(), newTestRegistry()
	ha, _ := a.mustNew(t, redisConfig(srv.Addr, "3"), "api@file")
	hb, _ := b.mustNew(t, redisConfig(srv.Addr, "3"), "api@file")
	if got := codes(ha, request{}, 2) + " " + codes(hb, request{}, 2); got != "200 200 200 429" {
		t.Errorf("two instances: got %s, want 200 200 200 429", got)
	}
	w, _ := do(ha, request{})
	if w.Code != 429 || w.Header().Get("Ratelimit") != `"default";r=0;t=3600` {
		t.Errorf("rejected by Redis: %d, RateLimit %q", w.Code, w.Header().Get("Ratelimit"))
	}
	other, _ := a.mustNew(t, redisConfig(srv.Addr, "3"), "other@file")
	if got := codes(other, request{}, 1); got != "200" {
		t.Errorf("another middleware: got %s, want 200", got)
	}
	if a.stderr.String() != "" || b.stderr.String() != "" {
		t.Errorf("unexpected logs: %q %q", a.stderr.String(), b.stderr.String())
	}
}

// TestRedisOutage checks the failure policies while Redis is down, the
// outage and recovery lines, and that the client reconnects by itself.
func TestRedisOutage(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, tc := range []struct {
		name        string
		cfg         func(*Config)
		whileDown   string
		summaryPart string
		back        string // after the restart; "" means 200 200 200 429
	}{
		{"allow", func(c *Config) {}, "200 200 200 200 200 200 200", "7 requests allowed while the store failed", ""},
		{"deny", func(c *Config) { c.OnStoreError = "deny" }, "429 429 429 429 429 429 429", "7 requests denied while the store failed", ""},
		// Local fallback: the quota of 3 shared by 2 instances, 1.5 each.
		{"fallback", func(c *Config) { c.Fallback = "local"; c.Instances = "2" }, "200 429 429 429 429 429 429", "6 requests rejected", ""},
		// The built-in's default burst of 1 over 2 instances: the share of
		// 0.5 is floored to one request, not rejecting all.
		{"fallback, burst 1", func(c *Config) { c.Burst = "1"; c.Fallback = "local"; c.Instances = "2" }, "200 429 429 429 429 429 429", "6 requests rejected", "200 429 429 429"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestRegistry()
			cfg := redisConfig(srv.Addr, "3")
			tc.cfg(cfg)
			h, _ := g.mustNew(t, cfg, tc.name+"@file")
			if got := codes(h, request{}, 1); got != "200" {
				t.Fatalf("Redis up: got %s", got)
			}
			srv.Stop()
			if got := codes(h, request{}, 7); got != tc.whileDown {
				t.Errorf("Redis down: got %s, want %s", got, tc.whileDown)
			}
			if got := g.stderr.String(); !strings.Contains(got, "sluice: redis "+srv.Addr+" unavailable, circuit breaker open") {
				t.Errorf("no outage line: %q", got)
			}
			g.clock.advance(time.Minute)
			codes(h, request{}, 1) // the summary of the outage
			if got := g.stdout.String(); !strings.Contains(got, tc.summaryPart) {
				t.Errorf("summary: got %q, want %q", got, tc.summaryPart)
			}
			srv.Restart(t)
			g.clock.advance(time.Minute) // past the breaker's back-off
			// The restarted server kept nothing: a full bucket.
			back := tc.back
			if back == "" {
				back = "200 200 200 429"
			}
			if got := codes(h, request{}, 4); got != back {
				t.Errorf("Redis back: got %s, want %s", got, back)
			}
			if got := g.stderr.String(); !strings.Contains(got, "sluice: redis "+srv.Addr+" available again") {
				t.Errorf("no recovery line: %q", got)
			}
		})
	}
}

// TestRedisDownAtStart checks that a Redis that is down when the
// middleware is created does not fail New, and is used once it answers.
func TestRedisDownAtStart(t *testing.T) {
	addr := closedPort(t)
	g := newTestRegistry()
	before := runtime.NumGoroutine()
	cfg := redisConfig(addr, "1")
	cfg.OnStoreError = "deny"
	h, _ := g.mustNew(t, cfg, "api@file")
	if got := g.stderr.String(); !strings.Contains(got, "sluice: redis "+addr+" unavailable: ") {
		t.Errorf("no line about the failed connection: %q", got)
	}
	if got := codes(h, request{}, 2); got != "429 429" {
		t.Errorf("down, deny: got %s, want 429 429", got)
	}
	for i := 0; i < 100; i++ {
		g.mustNew(t, cfg, "api@file")
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines: %d before, %d after", before, after)
	}
}

// TestRedisAuthAndTLS checks a password read from the environment and a
// TLS connection verified with the server's CA file.
func TestRedisAuthAndTLS(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: "s3cret", TLS: true})
	const env = "SLUICE_TEST_REDIS_PASSWORD"
	os.Setenv(env, "s3cret")
	defer os.Unsetenv(env)
	ca, _, _ := srv.CertFiles()
	for _, tc := range []struct {
		name string
		r    *Redis
	}{
		{"plain", &Redis{Endpoints: []string{srv.Addr}, Password: "env:" + env}},
		{"tls", &Redis{Endpoints: []string{srv.TLSAddr()}, Password: "env:" + env, TLS: &RedisTLS{CA: ca}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestRegistry()
			h, _ := g.mustNew(t, &Config{Average: "1", Period: "1h", Burst: "1", OnStoreError: "deny", Redis: tc.r}, tc.name+"@file")
			if got := codes(h, request{}, 2); got != "200 429" {
				t.Errorf("got %s, want 200 429; log %q", got, g.stderr.String())
			}
			if g.stderr.String() != "" {
				t.Errorf("unexpected log %q", g.stderr.String())
			}
		})
	}
}

// TestRedisDroppedEntry checks that an entry the registry dropped while
// Traefik still routes to it keeps deciding in Redis: dropping the last
// entry of a client closes its connections, requests in flight then run on
// new ones, and later requests connect again.
func TestRedisDroppedEntry(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	g := newTestRegistry()
	g.maxEntries = 1
	cfg := redisConfig(srv.Addr, "1000")
	cfg.OnStoreError = "deny" // a store error answers 429
	h, _ := g.mustNew(t, cfg, "api@file")
	if got := codes(h, request{}, 1); got != "200" {
		t.Fatalf("before the drop: got %s, want 200", got)
	}
	const workers, each = 4, 25
	var failed int64
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < each; j++ {
				if w, _ := do(h, request{}); w.Code != http.StatusOK {
					atomic.AddInt64(&failed, 1)
				}
			}
		}()
	}
	g.mustNew(t, &Config{Average: "1"}, "other@file") // drops api@file and closes its client
	wg.Wait()
	if failed != 0 {
		t.Errorf("%d of %d requests during the drop failed", failed, workers*each)
	}
	g.mu.Lock()
	entries, clients := len(g.entries), len(g.redis)
	g.mu.Unlock()
	if entries != 1 || clients != 0 {
		t.Fatalf("after the drop: %d entries, %d Redis clients; want 1 and 0", entries, clients)
	}
	if got := codes(h, request{}, 2); got != "200 200" {
		t.Errorf("after the drop: got %s, want 200 200", got)
	}
	// A burst of 1000 per hour, of which 1+100+2 are taken: counted in Redis.
	w, _ := do(h, request{})
	if got := w.Header().Get("X-Ratelimit-Remaining"); got != "896" {
		t.Errorf("X-RateLimit-Remaining %q, want 896", got)
	}
	if got := g.stderr.String(); got != "" {
		t.Errorf("unexpected log %q", got)
	}
}

// TestRedisCluster checks that several redis.endpoints are a Redis Cluster
// seed list: two Traefik instances share each middleware's quota exactly,
// with middlewares spread over the masters, also under concurrent requests.
func TestRedisCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cfg := func(burst string) *Config {
		c := redisConfig(cluster.Addrs[0], burst)
		c.Redis.Endpoints = []string{cluster.Addrs[2], cluster.Addrs[0]}
		return c
	}
	a, b := newTestRegistry(), newTestRegistry()
	for _, name := range []string{"m0@file", "m1@file", "m2@file", "m3@file", "m4@file", "m5@file"} {
		ha, _ := a.mustNew(t, cfg("3"), name)
		hb, _ := b.mustNew(t, cfg("3"), name)
		if got := codes(ha, request{}, 2) + " " + codes(hb, request{}, 2); got != "200 200 200 429" {
			t.Errorf("%s, two instances: got %s, want 200 200 200 429", name, got)
		}
	}

	const tokens, callers = 10, 32
	ha, _ := a.mustNew(t, cfg(strconv.Itoa(tokens)), "race@file")
	hb, _ := b.mustNew(t, cfg(strconv.Itoa(tokens)), "race@file")
	var admitted, other int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		h := ha
		if i%2 == 1 {
			h = hb
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			w, _ := do(h, request{})
			switch w.Code {
			case http.StatusOK:
				atomic.AddInt32(&admitted, 1)
			case http.StatusTooManyRequests:
			default:
				atomic.AddInt32(&other, 1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if admitted != tokens || other != 0 {
		t.Errorf("%d callers for %d tokens: %d admitted, %d other answers", callers, tokens, admitted, other)
	}
	for _, g := range []*testRegistry{a, b} {
		if log := g.stderr.String(); strings.Contains(log, "unavailable") || !strings.Contains(log, "Redis Cluster seed list") {
			t.Errorf("log: %q; want the seed list note and no outage", log)
		}
	}
}

// TestRedisSentinel: with redis.sentinel the plugin decides on the master
// the Sentinels name, and after a failover, with the former master
// stopped, Redis decides again within a bounded time (until then
// onStoreError allow admits).
func TestRedisSentinel(t *testing.T) {
	rs := redistest.StartSentinel(t, "sluiceplugin")
	cfg := &Config{Average: "1", Period: "1h", Burst: "2", OnStoreError: "allow",
		Redis: &Redis{Sentinel: &RedisSentinel{MasterName: rs.Name, Endpoints: rs.Addrs}, Timeout: "300ms"}}
	g := newTestRegistry()
	h, _ := g.mustNew(t, cfg, "api@file")
	if got := codes(h, request{}, 3); got != "200 200 429" {
		t.Fatalf("through the Sentinels' master: %s, want 200 200 429", got)
	}
	rs.Failover(t)
	rs.Replica.Stop() // the former master
	// The promoted replica holds the replicated state: once the plugin
	// asks the Sentinels again, Redis answers 429.
	deadline := time.Now().Add(5 * time.Second)
	seen := ""
	for {
		w, _ := do(h, request{})
		seen += strconv.Itoa(w.Code) + " "
		if w.Code == http.StatusTooManyRequests {
			break
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("5 s after the failover Redis does not decide: %s", seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("after the failover: %s", seen)
}

// TestRedisLease: two Traefiks leasing one key's capacity admit its
// requests with a script call per lease, not per request, and together
// exactly its quota; the RateLimit header counts what the lease holds.
func TestRedisLease(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newTestRegistry(), newTestRegistry()
	leased := func(burst string) *Config {
		c := redisConfig(srv.Addr, burst)
		c.Lease = "10"
		return c
	}
	alternate := func(ha, hb http.Handler, n int) (admitted int) {
		for i := 0; i < n; i++ {
			h := ha
			if i%2 == 1 {
				h = hb
			}
			if w, _ := do(h, request{}); w.Code == http.StatusOK {
				admitted++
			}
		}
		return admitted
	}
	ha, _ := a.mustNew(t, leased("1000"), "hot@file")
	hb, _ := b.mustNew(t, leased("1000"), "hot@file")
	before := srv.ScriptCalls(t)
	if got := alternate(ha, hb, 200); got != 200 {
		t.Errorf("%d of 200 requests admitted by a quota of 1000", got)
	}
	if calls := srv.ScriptCalls(t) - before; calls > 200/5 {
		t.Errorf("%d script calls for 200 requests, want at most one per 5", calls)
	}
	// What is left, seen from one instance: 1000 less the 201 admitted,
	// give or take a lease per instance (held by the other, or taken by
	// it since this one's).
	w, _ := do(ha, request{})
	h := w.Header().Get("Ratelimit")
	left, err := strconv.Atoi(strings.TrimPrefix(strings.Split(h, ";t=")[0], `"default";r=`))
	if err != nil || left < 1000-201-20 || left > 1000-201+20 {
		t.Errorf("RateLimit %q after 201 of 1000 admitted, want r within 20 of 799", h)
	}
	ha, _ = a.mustNew(t, leased("30"), "scarce@file")
	hb, _ = b.mustNew(t, leased("30"), "scarce@file")
	if got := alternate(ha, hb, 60); got != 30 {
		t.Errorf("%d of 60 requests admitted by a quota of 30", got)
	}
}
