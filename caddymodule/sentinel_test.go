package caddymodule

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// loadCaddyfile adapts and (re)loads a Caddyfile; the config is stopped
// when the test ends.
func loadCaddyfile(t *testing.T, caddyfile string) {
	t.Helper()
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatalf("adapting the Caddyfile: %v\n%s", err, caddyfile)
	}
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading config: %v\n%s", err, cfg)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
}

// keyExists reports whether key exists on the Redis server at addr.
func keyExists(t *testing.T, addr, key string) bool {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := rc.Exists(ctx, key).Result()
	if err != nil {
		t.Fatalf("EXISTS %s on %s: %v", key, addr, err)
	}
	return n == 1
}

// TestRedisSentinel configures the Redis store with the Caddyfile's
// sentinel subdirective: the handler decides against the master the
// Sentinels name, and after a failover against the promoted replica, with
// the counters it inherited.
func TestRedisSentinel(t *testing.T) {
	s := redistest.StartSentinel(t, "sluicemaster")
	port := freePorts(t, 1)[0]
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	loadCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	log {
		level WARN
	}
}
%s {
	bind 127.0.0.1
	sluice {
		zone api {
			key  {http.request.header.X-User}
			rate 3/m
		}
		store redis {
			sentinel %s %s
			timeout  1s
			readable_keys # the test finds the counters by name
		}
	}
	respond "ok"
}
`, url, s.Name, strings.Join(s.Addrs, " ")))

	// Decided by Redis: three admitted with a RateLimit header (not
	// allowed because the store failed), then rejected.
	rs := wantStatus(t, url, []int{200, 200, 200, 429}, "X-User", "a")
	for i, r := range rs {
		if r.header.Get("Ratelimit") == "" {
			t.Errorf("request %d: no RateLimit header: not decided by the store", i+1)
		}
	}
	// The site http://127.0.0.1:<port> is its host and its port.
	prefix := fmt.Sprintf("sluice:{api:token_bucket:127.0.0.1:%d/", port)
	if !keyExists(t, s.Master.Addr, prefix+"a}") {
		t.Fatalf("user a's counter is not on the master %s", s.Master.Addr)
	}

	s.Failover(t)

	// Until the client follows the failover, requests may fail over to
	// on_store_error (allow, without RateLimit) or still reach the former
	// master; a fresh user per try tells where its counter went.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		user := fmt.Sprintf("b%d", i)
		r := get(t, url, "X-User", user)
		if r.status == 200 && r.header.Get("Ratelimit") != "" &&
			keyExists(t, s.Master.Addr, prefix+user+"}") {
			t.Logf("decided by the new master after %d tries", i+1)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the failover, user %s: status %d, RateLimit %q, no counter on the new master %s",
				user, r.status, r.header.Get("Ratelimit"), s.Master.Addr)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The new master holds the counters replicated before the failover:
	// user a is still out of quota, and a new user gets exactly three.
	r := get(t, url, "X-User", "a")
	if r.status != 429 || !strings.Contains(r.body, `"policy":"api"`) {
		t.Errorf("user a after the failover: status %d, body %q; want 429 by api", r.status, r.body)
	}
	wantStatus(t, url, []int{200, 200, 200, 429}, "X-User", "c")
	if !keyExists(t, s.Master.Addr, prefix+"c}") {
		t.Errorf("user c's counter is not on the new master %s", s.Master.Addr)
	}
}
