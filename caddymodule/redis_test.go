package caddymodule

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicehttp"
)

// redisStore returns a handler's "store" value for Redis at addr. Handlers
// whose stores differ in pool_size get distinct clients, as two Caddy
// instances would.
func redisStore(addr string, poolSize int, more ...any) map[string]any {
	r := map[string]any{"address": addr, "pool_size": poolSize, "timeout": "1s"}
	for i := 0; i+1 < len(more); i += 2 {
		r[more[i].(string)] = more[i+1]
	}
	return map[string]any{"redis": r}
}

// concurrently sends n requests, spread over urls, at the same time and
// counts the statuses.
func concurrently(t *testing.T, urls []string, n int, header ...string) map[int]int {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	counts := map[int]int{}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(url string) {
			defer wg.Done()
			r, err := fetch(url, header...)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			counts[r.status]++
			mu.Unlock()
		}(urls[i%len(urls)])
	}
	wg.Wait()
	return counts
}

// TestRedisSharedQuota runs two servers whose handlers, in one share
// group as two Caddy instances with one config would be, use distinct
// Redis clients of one server: together they admit exactly the quota.
func TestRedisSharedQuota(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	p := freePorts(t, 2)
	urls := loadCaddy(t,
		server{port: p[0], handler: map[string]any{"zones": []any{zone("api", "10/m")}, "store": redisStore(rs.Addr, 4), "share": "instances"}},
		server{port: p[1], handler: map[string]any{"zones": []any{zone("api", "10/m")}, "store": redisStore(rs.Addr, 5), "share": "instances"}},
	)
	if n := poolSize(); n != 2 {
		t.Fatalf("%d stores in the pool, want 2 distinct Redis clients", n)
	}
	counts := concurrently(t, urls, 30)
	if counts[200] != 10 || counts[429] != 20 {
		t.Errorf("statuses %v, want 10 × 200 and 20 × 429", counts)
	}
	r := get(t, urls[1])
	if r.status != 429 || r.header.Get("Ratelimit-Policy") != `"api";q=10;w=60` {
		t.Errorf("after the quota: status %d, RateLimit-Policy %q", r.status, r.header.Get("Ratelimit-Policy"))
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := poolSize(); n != 0 {
		t.Errorf("after stop: %d stores left in the pool, want their clients closed", n)
	}
}

// TestRedisDown stops Redis: each handler applies its on_store_error
// policy or its local fallback, and Redis decides again once restarted.
func TestRedisDown(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	p := freePorts(t, 3)
	store := redisStore(rs.Addr, 4, "timeout", "100ms", "breaker", map[string]any{"failures": 3, "backoff": "200ms"})
	urls := loadCaddy(t,
		server{port: p[0], handler: map[string]any{"zones": []any{zone("deny", "10/m")}, "store": store, "on_store_error": "deny"}},
		server{port: p[1], handler: map[string]any{"zones": []any{zone("allow", "10/m")}, "store": store}},
		server{port: p[2], handler: map[string]any{"zones": []any{zone("local", "10/m")}, "store": store, "fallback": "local", "instances": 2}},
	)
	for _, u := range urls {
		wantStatus(t, u, []int{200})
	}
	rs.Stop()

	start := time.Now()
	r := wantStatus(t, urls[0], []int{429})[0]
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("deny took %v with Redis down, want about the 100ms timeout at most", elapsed)
	}
	if r.header.Get("Retry-After") != "1" || r.body != `{"error":"rate_limited","retryable":true,"retry_after":1}` {
		t.Errorf("deny: Retry-After %q, body %q", r.header.Get("Retry-After"), r.body)
	}
	r = wantStatus(t, urls[1], []int{200})[0]
	wantBody(t, r, "zone= remaining= rejected=false")
	if r.header.Get("Ratelimit") != "" {
		t.Errorf("allow: RateLimit %q sent without a decision", r.header.Get("Ratelimit"))
	}
	// The local fallback admits this instance's share: 10/2 = 5 per minute.
	rs5 := wantStatus(t, urls[2], append(repeat(200, 5), 429))
	if got := rs5[0].header.Get("Ratelimit-Policy"); got != `"local";q=5;w=60` {
		t.Errorf("fallback: RateLimit-Policy %q, want the instance's share", got)
	}
	if got := counter(t, siteID("deny", p[0]), "store_error_denied"); got != 1 {
		t.Errorf("store_error_denied = %v, want 1", got)
	}
	if got := counter(t, siteID("allow", p[1]), "store_error_allowed"); got != 1 {
		t.Errorf("store_error_allowed = %v, want 1", got)
	}
	if f := family(t, "sluice_store_breaker_state"); f == nil || f.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("breaker state = %v, want open (1)", f)
	}

	rs.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := get(t, urls[1])
		if r.header.Get("Ratelimit") != "" {
			break // decided by Redis again
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis restarted but requests are still not decided by it after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// blackhole accepts connections and never answers, like a hung Redis.
func blackhole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c) // ends when the connection closes
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}

// TestRedisHungTimeout checks that a Redis that accepts but never answers
// costs a request the store's timeout, then the policy applies.
func TestRedisHungTimeout(t *testing.T) {
	addr := blackhole(t)
	p := freePorts(t, 1)
	url := loadCaddy(t, server{port: p[0], handler: map[string]any{
		"zones": []any{zone("api", "10/m")}, "on_store_error": "deny",
		"store": redisStore(addr, 4, "timeout", "100ms"),
	}})[0]
	start := time.Now()
	wantStatus(t, url, []int{429})
	if elapsed := time.Since(start); elapsed < 100*time.Millisecond || elapsed > 2*time.Second {
		t.Errorf("a hung Redis held the request %v, want about the 100ms timeout", elapsed)
	}
}

// TestRedisTLSAndACL connects with TLS (CA from a file) as an ACL user
// whose password comes from an environment placeholder; a wrong password
// is a store error.
func TestRedisTLSAndACL(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{TLS: true, ACLUser: "sluice", ACLPassword: "s3cret"})
	ca, _, _ := rs.CertFiles()
	t.Setenv("SLUICE_TEST_REDIS_PASSWORD", "s3cret")
	p := freePorts(t, 2)
	tlsCfg := map[string]any{"ca": ca}
	urls := loadCaddy(t,
		server{port: p[0], handler: map[string]any{"zones": []any{zone("api", "2/m")},
			"store": redisStore(rs.TLSAddr(), 4, "tls", tlsCfg, "username", "sluice", "password", "{env.SLUICE_TEST_REDIS_PASSWORD}")}},
		server{port: p[1], handler: map[string]any{"zones": []any{zone("api", "2/m")}, "on_store_error": "deny",
			"store": redisStore(rs.TLSAddr(), 4, "tls", tlsCfg, "username", "sluice", "password", "wrong")}},
	)
	rs2 := wantStatus(t, urls[0], []int{200, 200, 429})
	if got := rs2[1].header.Get("X-Ratelimit-Remaining"); got != "0" {
		t.Errorf("X-RateLimit-Remaining = %q, want 0", got)
	}
	wantStatus(t, urls[1], []int{429})
	if got := counter(t, siteID("api", p[1]), "store_error_denied"); got != 1 {
		t.Errorf("store_error_denied = %v, want 1 (wrong password)", got)
	}
}

// TestRedisCluster runs two servers with distinct clients of a three-master
// Redis Cluster: keys spread over the masters, the two share each quota
// exactly, and zones whose keys live in different slots stay
// all-or-nothing.
func TestRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	p := freePorts(t, 2)
	zones := []any{
		zone("user", "5/m", "key", "{http.request.header.X-User}"),
		zone("tenant", "3/m", "key", "{http.request.header.X-Tenant}"),
	}
	store := func(poolSize int) map[string]any {
		return map[string]any{"redis": map[string]any{"addresses": c.Addrs, "pool_size": poolSize, "timeout": "1s", "readable_keys": true}}
	}
	urls := loadCaddy(t,
		server{port: p[0], handler: map[string]any{"zones": zones, "store": store(4), "share": "instances"}},
		server{port: p[1], handler: map[string]any{"zones": zones, "store": store(5), "share": "instances"}},
	)

	// Twelve users, each exactly 5 requests across both servers.
	for i := 0; i < 12; i++ {
		user := "u" + strconv.Itoa(i)
		for j, want := range append(repeat(200, 5), 429) {
			if r := get(t, urls[j%2], "X-User", user); r.status != want {
				t.Fatalf("user %s, request %d: status %d, want %d", user, j+1, r.status, want)
			}
		}
	}
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var mu sync.Mutex
	sizes := map[string]int64{}
	err := rc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		mu.Lock()
		sizes[m.Options().Addr] = n
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 3 {
		t.Fatalf("keys per master %v, want 3 masters", sizes)
	}
	for addr, n := range sizes {
		if n == 0 {
			t.Errorf("master %s holds no key: keys did not spread (%v)", addr, sizes)
		}
	}

	// One hot user, hit by both servers at once.
	if counts := concurrently(t, urls, 20, "X-User", "hot"); counts[200] != 5 || counts[429] != 15 {
		t.Errorf("hot user: statuses %v, want 5 × 200 and 15 × 429", counts)
	}

	// Two zones in different slots: a request the tenant zone rejects is
	// not charged to the user zone.
	slot := func(key string) int64 {
		s, err := rc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if slot("sluice:{user:token_bucket:=instances/ux}") == slot("sluice:{tenant:token_bucket:=instances/t1}") {
		t.Fatal("user ux and tenant t1 share a slot; pick names in different slots")
	}
	wantStatus(t, urls[0], []int{200, 200, 200}, "X-User", "ux", "X-Tenant", "t1")
	r := get(t, urls[1], "X-User", "ux", "X-Tenant", "t1")
	if r.status != 429 || !strings.Contains(r.body, `"policy":"tenant"`) {
		t.Fatalf("4th request of tenant t1: status %d, body %q; want 429 by tenant", r.status, r.body)
	}
	rs := wantStatus(t, urls[1], []int{200, 200, 429}, "X-User", "ux", "X-Tenant", "t2")
	if !strings.Contains(rs[2].body, `"policy":"user"`) {
		t.Errorf("user ux after 5 admitted requests: body %q, want 429 by user", rs[2].body)
	}
}

// TestStoreLabelsDiffer: two stores on one server that differ only by
// prefix, user or TLS get metric labels of their own, so neither's
// breaker gauge reads the other's.
func TestStoreLabelsDiffer(t *testing.T) {
	base := RedisStoreConfig{Address: "127.0.0.1:6379", Prefix: "sluice:"} // redisstore.DefaultPrefix
	labels := map[string]bool{base.label(): true}
	for _, c := range []RedisStoreConfig{
		{Address: base.Address, Prefix: "other:"},
		{Address: base.Address, Prefix: base.Prefix, Username: "app"},
		{Address: base.Address, Prefix: base.Prefix, TLS: &RedisTLSConfig{}},
	} {
		l := c.label()
		if labels[l] {
			t.Errorf("label %q is another store's", l)
		}
		labels[l] = true
	}
}

// TestRedisUnreachableAtStart: a Redis that cannot be reached when the
// config loads is not a configuration error (a Caddy restarted during a
// Redis outage keeps serving): the config loads, and each handler's
// failure policy answers until Redis does: 429 with Retry-After under
// deny, 200 under allow.
func TestRedisUnreachableAtStart(t *testing.T) {
	p := freePorts(t, 3)
	store := redisStore("127.0.0.1:"+strconv.Itoa(p[2]), 2, "timeout", "100ms")
	urls := loadCaddy(t,
		server{port: p[0], handler: map[string]any{"zones": []any{zone("deny", "10/m")}, "store": store, "on_store_error": "deny"}},
		server{port: p[1], handler: map[string]any{"zones": []any{zone("allow", "10/m")}, "store": store}},
	)
	if r := wantStatus(t, urls[0], []int{429})[0]; r.header.Get("Retry-After") != "1" {
		t.Errorf("deny with Redis unreachable: Retry-After %q, want 1", r.header.Get("Retry-After"))
	}
	wantStatus(t, urls[1], []int{200})
}

// TestRedisLease runs two servers of a leased zone through distinct Redis
// clients, as two Caddy instances: they admit its requests with a script
// call per lease rather than per request, and together exactly its quota.
func TestRedisLease(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	p := freePorts(t, 4)
	leased := func(port, pool int, name, rate string) server {
		return server{port: port, handler: map[string]any{"zones": []any{zone(name, rate, "lease", 10)}, "store": redisStore(rs.Addr, pool), "share": "instances"}}
	}
	urls := loadCaddy(t, leased(p[0], 4, "hot", "1000/h"), leased(p[1], 5, "hot", "1000/h"),
		leased(p[2], 4, "scarce", "30/h"), leased(p[3], 5, "scarce", "30/h"))
	alternate := func(urls []string, n int) (admitted int) {
		for i := 0; i < n; i++ {
			if get(t, urls[i%2]).status == 200 {
				admitted++
			}
		}
		return admitted
	}
	before := rs.ScriptCalls(t)
	if got := alternate(urls[:2], 200); got != 200 {
		t.Errorf("%d of 200 requests admitted by a quota of 1000", got)
	}
	if calls := rs.ScriptCalls(t) - before; calls > 200/5 {
		t.Errorf("%d script calls for 200 requests, want at most one per 5", calls)
	}
	if got := alternate(urls[2:], 60); got != 30 {
		t.Errorf("%d of 60 requests admitted by a quota of 30", got)
	}
}

// TestRedisSharedWithService: a Caddy handler and a Go service's
// sluicehttp middleware, in one share group on one Redis, count one quota
// for a client that sends its key header on two lines, the second
// changing with every request: both key it by the first line, so a 2/m
// limit admits 2 of 6 requests alternating between them.
func TestRedisSharedWithService(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	p := freePorts(t, 1)
	url := loadCaddy(t, server{port: p[0], handler: map[string]any{
		"zones": []any{zone("api", "2/m", "key", "{http.request.header.X-API-Key}")},
		"store": redisStore(rs.Addr, 4, "prefix", "t:"),
		"share": "svc",
	}})[0]
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "api", Rate: "2/1m", Key: []string{"header:X-API-Key"}}},
		Share:  "svc",
		Redis:  &sluicehttp.Redis{Addr: rs.Addr, Prefix: "t:", Timeout: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mw.Close() })
	svc := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var got []string
	for i := 0; i < 6; i++ {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("X-API-Key", "alice")
		req.Header.Add("X-API-Key", "n"+strconv.Itoa(i))
		status := 0
		if i%2 == 0 {
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			status = res.StatusCode
		} else {
			w := httptest.NewRecorder()
			svc.ServeHTTP(w, req)
			status = w.Code
		}
		got = append(got, strconv.Itoa(status))
	}
	if want := "200 200 429 429 429 429"; strings.Join(got, " ") != want {
		t.Errorf("Caddy, service, Caddy, ...: %s, want %s (one quota, keyed by the first line)", strings.Join(got, " "), want)
	}
}

// TestRedisBreakerIgnoresLeases: with Redis stopped, requests admitted
// from the lease the store holds, interleaved with failures, neither keep
// the breaker from opening at the third failure nor, as its probe, close
// it. A lease lasts half a second: an attempt whose lease ended first
// (no RateLimit header where the lease should have answered) proves
// nothing and is made again, at most three times.
func TestRedisBreakerIgnoresLeases(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	p := freePorts(t, 1)
	const backoff = 100 * time.Millisecond
	store := redisStore(rs.Addr, 4, "timeout", "100ms", "breaker", map[string]any{"failures": 3, "backoff": backoff.String()})
	urls := loadCaddy(t, server{port: p[0], handler: map[string]any{
		"zones": []any{zone("leased", "1000/h", "lease", 10, "key", "{http.request.header.X-Key}")}, "store": store}})
	breaker := func() float64 {
		return family(t, "sluice_store_breaker_state").GetMetric()[0].GetGauge().GetValue()
	}
	// decided reports whether a limit decided r (by Redis or a lease):
	// fail open sends no RateLimit header.
	decided := func(r response) bool { return r.status == 200 && r.header.Get("Ratelimit") != "" }
	for attempt := 1; ; attempt++ {
		hot := "hot" + strconv.Itoa(attempt)
		for i := 0; i < 3; i++ { // the third takes a lease
			if r := get(t, urls[0], "X-Key", hot); !decided(r) {
				t.Fatalf("request %d with Redis up: %d %v", i+1, r.status, r.header)
			}
		}
		rs.Stop()
		leased := true
		for i := 0; i < 3 && leased; i++ {
			if r := get(t, urls[0], "X-Key", "cold"); r.status != 200 || decided(r) {
				t.Fatalf("failure %d: %d %v, want failing open", i+1, r.status, r.header)
			}
			if i < 2 {
				leased = decided(get(t, urls[0], "X-Key", hot))
				if leased && breaker() != 0 {
					t.Fatalf("after %d failures: breaker %v, want closed (0)", i+1, breaker())
				}
			}
		}
		if leased {
			if got := breaker(); got != 1 {
				t.Fatalf("after 3 failures between requests admitted from a lease: breaker %v, want open (1)", got)
			}
			time.Sleep(backoff + 10*time.Millisecond) // past the back-off
			if leased = decided(get(t, urls[0], "X-Key", hot)); leased && breaker() == 0 {
				t.Fatal("a probe answered from a lease, with Redis stopped, closed the breaker")
			}
		}
		if leased {
			return
		}
		if attempt == 3 {
			t.Fatal("in each of 3 attempts the lease ended before the test could spend it")
		}
		rs.Restart(t)
		deadline := time.Now().Add(10 * time.Second)
		for !decided(get(t, urls[0], "X-Key", "cold")) {
			if time.Now().After(deadline) {
				t.Fatal("Redis restarted but requests are still not decided by it after 10s")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
