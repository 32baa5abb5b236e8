package caddymodule

import (
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

func TestAllowThenReject(t *testing.T) {
	p := freePorts(t, 1)
	url := loadCaddy(t, server{port: p[0], handler: map[string]any{
		"zones": []any{zone("api", "3/m")},
	}})[0]
	times := decisionTimes(t)

	ok := wantStatus(t, url, []int{200, 200, 200})
	for i, r := range ok {
		rem := strconv.Itoa(2 - i)
		want := map[string]string{
			"Ratelimit-Policy": `"api";q=3;w=60`,
			// t: the next token comes in 20 s, whatever the deficit.
			"Ratelimit":             `"api";r=` + rem + `;t=20`,
			"X-Ratelimit-Limit":     "3",
			"X-Ratelimit-Remaining": rem,
		}
		for k, v := range want {
			if got := r.header.Get(k); got != v {
				t.Errorf("response %d: %s = %q, want %q", i+1, k, got, v)
			}
		}
		wantBody(t, r, "zone=api remaining="+rem+" rejected=false")
	}

	before := time.Now().Unix()
	r := wantStatus(t, url, []int{429})[0]
	after := time.Now().Unix()
	want := map[string]string{
		"Ratelimit-Policy":       `"api";q=3;w=60`,
		"Ratelimit":              `"api";r=0;t=20`, // as Retry-After, not the 60 s to a full bucket
		"X-Ratelimit-Limit":      "3",
		"X-Ratelimit-Remaining":  "0",
		"Retry-After":            "20",
		"Cache-Control":          "no-store",
		"Content-Type":           "application/json",
		"X-Content-Type-Options": "nosniff",
	}
	for k, v := range want {
		if got := r.header.Get(k); got != v {
			t.Errorf("429: %s = %q, want %q", k, got, v)
		}
	}
	reset, err := strconv.ParseInt(r.header.Get("X-Ratelimit-Reset"), 10, 64)
	if err != nil || reset < before+59 || reset > after+61 {
		t.Errorf("429: X-RateLimit-Reset = %q, want about now+60 (%d)", r.header.Get("X-Ratelimit-Reset"), before+60)
	}
	if wantBody := `{"error":"rate_limited","retryable":true,"retry_after":20,"policy":"api"}`; r.body != wantBody {
		t.Errorf("429 body = %q, want %q", r.body, wantBody)
	}
	if got := counter(t, siteID("api", p[0]), "allowed"); got != 3 {
		t.Errorf("allowed count = %v, want 3", got)
	}
	if got := counter(t, siteID("api", p[0]), "rejected"); got != 1 {
		t.Errorf("rejected count = %v, want 1", got)
	}
	if n := decisionTimes(t) - times; n != 4 {
		t.Errorf("decision_seconds: %d more observations, want 4", n)
	}
}

func TestBodyAndHeaderFormats(t *testing.T) {
	p := freePorts(t, 2)
	urls := loadCaddy(t,
		server{port: p[0], handler: map[string]any{
			"zones": []any{zone("api", "1/s")}, "headers": []string{"legacy"}, "body": "problem",
		}},
		server{port: p[1], handler: map[string]any{
			"zones": []any{zone("api2", "1/s")}, "headers": []string{"off"}, "body": "text",
		}},
	)
	r := wantStatus(t, urls[0], []int{200, 429})[1]
	for k, v := range map[string]string{
		"Ratelimit-Limit": "1", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "1", "Retry-After": "1",
		"Content-Type": "application/problem+json", "Ratelimit-Policy": "", "X-Ratelimit-Limit": "",
	} {
		if got := r.header.Get(k); got != v {
			t.Errorf("problem: %s = %q, want %q", k, got, v)
		}
	}
	if !strings.Contains(r.body, `"status":429,"detail":"Retry in 1 s.","violated-policies":["api"]}`) {
		t.Errorf("problem body = %q", r.body)
	}
	rs := wantStatus(t, urls[1], []int{200, 429})
	for _, r := range rs {
		for _, k := range []string{"Ratelimit", "Ratelimit-Policy", "Ratelimit-Limit", "X-Ratelimit-Limit"} {
			if v := r.header.Get(k); v != "" {
				t.Errorf("headers off: %s = %q", k, v)
			}
		}
	}
	if rs[1].body != "429 Too Many Requests: retry in 1 s\n" || rs[1].header.Get("Retry-After") != "1" {
		t.Errorf("text 429: body %q, Retry-After %q", rs[1].body, rs[1].header.Get("Retry-After"))
	}
}

func TestZonesWithMatchers(t *testing.T) {
	p := freePorts(t, 1)
	url := loadCaddy(t, server{port: p[0], handler: map[string]any{
		"zones": []any{
			zone("search", "1/m", "match", map[string]any{"path": []string{"/search"}}),
			zone("all", "100/m"),
		},
	}})[0]
	r := wantStatus(t, url+"/search", []int{200})[0]
	if got := r.header.Get("Ratelimit"); got != `"search";r=0;t=60` {
		t.Errorf("/search: RateLimit = %q, want the zone closest to exhaustion", got)
	}
	r = wantStatus(t, url+"/search", []int{429})[0]
	if !strings.Contains(r.body, `"policy":"search"`) {
		t.Errorf("/search rejected by %q, want search", r.body)
	}
	// The rejected request charged neither zone: "all" has seen two
	// admitted requests after this one.
	r = wantStatus(t, url+"/other", []int{200})[0]
	if got := r.header.Get("Ratelimit"); !strings.HasPrefix(got, `"all";r=98;t=`) {
		t.Errorf("/other: RateLimit = %q, want all with 98 left", got)
	}
	wantBody(t, r, "zone=all remaining=98 rejected=false")
}

func TestCost(t *testing.T) {
	p := freePorts(t, 1)
	url := loadCaddy(t, server{port: p[0], handler: map[string]any{
		"zones": []any{
			zone("fixed", "10/m", "cost", 5, "match", map[string]any{"path": []string{"/expensive"}}),
			zone("metered", "10/m", "cost", "{http.request.header.X-Cost}", "match", map[string]any{"path": []string{"/metered"}}),
		},
	}})[0]
	wantStatus(t, url+"/expensive", []int{200, 200, 429})
	for _, c := range []struct {
		cost   string
		status int
		rem    string
	}{{"4", 200, "6"}, {"6", 200, "0"}, {"1", 429, "0"}} {
		r := get(t, url+"/metered", "X-Cost", c.cost)
		if r.status != c.status || r.header.Get("X-Ratelimit-Remaining") != c.rem {
			t.Errorf("cost %s: status %d, remaining %q; want %d, %q", c.cost, r.status, r.header.Get("X-Ratelimit-Remaining"), c.status, c.rem)
		}
	}
}

func TestDryRunPassesButCounts(t *testing.T) {
	p := freePorts(t, 1)
	url := loadCaddy(t, server{port: p[0], handler: map[string]any{
		"zones": []any{zone("api", "1/m")}, "mode": "dry_run",
	}})[0]
	rs := wantStatus(t, url, []int{200, 200, 200})
	wantBody(t, rs[0], "rejected=false")
	wantBody(t, rs[1], "zone=api remaining=0 rejected=true")
	wantBody(t, rs[2], "rejected=true")
	if got := counter(t, siteID("api", p[0]), "dry_run_rejected"); got != 2 {
		t.Errorf("dry_run_rejected = %v, want 2", got)
	}
	if got := counter(t, siteID("api", p[0]), "allowed"); got != 1 {
		t.Errorf("allowed = %v, want 1", got)
	}
}

func TestMissingKey(t *testing.T) {
	p := freePorts(t, 1)
	url := loadCaddy(t, server{port: p[0], handler: map[string]any{
		"zones": []any{
			zone("skip", "1/m", "key", "{http.request.header.X-API-Key}", "match", map[string]any{"path": []string{"/skip"}}),
			zone("shared", "2/m", "key", "{http.request.header.X-API-Key}", "on_missing_key", "shared", "match", map[string]any{"path": []string{"/shared"}}),
		},
	}})[0]
	rs := wantStatus(t, url+"/skip", []int{200, 200, 200})
	if rs[2].header.Get("Ratelimit") != "" {
		t.Errorf("skipped zone sent RateLimit %q", rs[2].header.Get("Ratelimit"))
	}
	wantBody(t, rs[2], "zone= remaining= rejected=false")
	wantStatus(t, url+"/skip", []int{200, 429}, "X-API-Key", "a")
	wantStatus(t, url+"/shared", []int{200, 200, 429})
	wantStatus(t, url+"/shared", []int{200, 200, 429}, "X-API-Key", "b")
}

// TestZonesPerHandler: two sites that each define a zone per_ip count
// apart, in memory and in one config, unless they name the same share
// group; a reload keeps each one's counters.
func TestZonesPerHandler(t *testing.T) {
	for _, share := range []string{"", "edge"} {
		p := freePorts(t, 2)
		servers := []server{
			{port: p[0], handler: map[string]any{"zones": []any{zone("per_ip", "1/m")}, "share": share}},
			{port: p[1], handler: map[string]any{"zones": []any{zone("per_ip", "1/m")}, "share": share}},
		}
		urls := loadCaddy(t, servers...)
		wantStatus(t, urls[0], []int{200, 429})
		if share == "" {
			wantStatus(t, urls[1], []int{200, 429})
		} else {
			wantStatus(t, urls[1], []int{429})
		}
		// The same config again: both zones still remember.
		urls = loadCaddy(t, servers...)
		wantStatus(t, urls[0], []int{429})
		wantStatus(t, urls[1], []int{429})
	}
}

// TestCompositeKeysDoNotCollide: a key of two placeholders whose values
// hold spaces keeps (alice bob, acme) and (alice, bob acme) apart, and a
// missing part still makes the key missing.
func TestCompositeKeysDoNotCollide(t *testing.T) {
	p := freePorts(t, 1)
	url := loadCaddy(t, server{port: p[0], handler: map[string]any{
		"zones": []any{zone("users", "1/m", "key", "{http.request.header.X-User} {http.request.header.X-Org}")},
	}})[0]
	wantStatus(t, url, []int{200, 429}, "X-User", "alice bob", "X-Org", "acme")
	wantStatus(t, url, []int{200, 429}, "X-User", "alice", "X-Org", "bob acme")
	wantStatus(t, url, []int{200, 200}, "X-User", "alice") // X-Org missing: skipped
}

func TestKeyPlaceholders(t *testing.T) {
	for _, c := range []struct {
		tmpl string
		vars []string
	}{
		{"{a} {b}", []string{"{a}", "{b}"}},
		{"user-{a}", []string{"{a}"}},
		{`x\{y} {a}{b}`, []string{"{a}", "{b}"}},
		{"{a", nil},
	} {
		if vars := keyPlaceholders(c.tmpl); !reflect.DeepEqual(vars, c.vars) {
			t.Errorf("keyPlaceholders(%q) = %q, want %q", c.tmpl, vars, c.vars)
		}
	}
}

// TestClientIPFromTrustedProxy checks that the default key is Caddy's
// client address, which honours the server's trusted_proxies.
func TestClientIPFromTrustedProxy(t *testing.T) {
	p := freePorts(t, 1)
	url := loadCaddy(t, server{port: p[0],
		handler: map[string]any{"zones": []any{zone("per_net", "1/m", "ipv4_prefix", 24)}},
		extra: map[string]any{"trusted_proxies": map[string]any{
			"source": "static", "ranges": []string{"127.0.0.1/32"},
		}},
	})[0]
	wantStatus(t, url, []int{200, 429}, "X-Forwarded-For", "203.0.113.7")
	wantStatus(t, url, []int{429}, "X-Forwarded-For", "203.0.113.99") // the same /24
	wantStatus(t, url, []int{200, 429}, "X-Forwarded-For", "198.51.100.7")
}

// TestReloadKeepsCounters reloads the config three times: with an unrelated
// change, the counters carry over; with a changed rate, they carry over
// and the new rate applies; with a changed algorithm, the zone starts
// afresh.
func TestReloadKeepsCounters(t *testing.T) {
	p := freePorts(t, 1)
	cfg := func(rate, algorithm, body string) server {
		return server{port: p[0], handler: map[string]any{
			"zones": []any{zone("api", rate, "algorithm", algorithm)}, "body": body,
		}}
	}
	url := loadCaddy(t, cfg("3/m", "token_bucket", "json"))[0]
	wantStatus(t, url, []int{200, 200})
	if n, ok := stores.References("memory:1000000"); !ok || n != 1 {
		t.Fatalf("memory store references = %d, %v; want 1", n, ok)
	}

	loadCaddy(t, cfg("3/m", "token_bucket", "text"))
	wantStatus(t, url, []int{200, 429})
	if n, ok := stores.References("memory:1000000"); !ok || n != 1 {
		t.Fatalf("after reload: memory store references = %d, %v; want 1 (the old handler released it)", n, ok)
	}

	// 3 tokens taken of a bucket now holding 5: 2 left.
	loadCaddy(t, cfg("5/m", "token_bucket", "text"))
	wantStatus(t, url, []int{200, 200, 429})

	loadCaddy(t, cfg("5/m", "sliding_window_log", "text"))
	wantStatus(t, url, append(repeat(200, 5), 429))

	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if n, ok := stores.References("memory:1000000"); ok {
		t.Errorf("after stop: memory store still has %d references", n)
	}
}

// poolSize counts the stores in the pool.
func poolSize() int {
	n := 0
	stores.Range(func(any, any) bool { n++; return true })
	return n
}

func TestWarnLimiter(t *testing.T) {
	var w warnLimiter
	sec := int64(time.Second)
	steps := []struct {
		now        int64
		ok         bool
		suppressed int64
	}{
		{1 * sec, true, 0},
		{1*sec + 1, false, 0},
		{1*sec + sec/2, false, 0},
		{2*sec - 1, false, 0},
		{2 * sec, true, 3},
		{2*sec + 1, false, 0},
		{10 * sec, true, 1},
		{20 * sec, true, 0},
	}
	for i, s := range steps {
		ok, n := w.allow(s.now)
		if ok != s.ok || n != s.suppressed {
			t.Errorf("step %d (t=%d): allow = %v, %d; want %v, %d", i, s.now, ok, n, s.ok, s.suppressed)
		}
	}
}

// TestBodyErrorDefersToHandleErrors: with body error, a rejection reaches
// the server's error routes, which see the 429 and the placeholders, and
// the rate-limit headers are already set.
func TestBodyErrorDefersToHandleErrors(t *testing.T) {
	p := freePorts(t, 1)
	url := loadCaddy(t, server{port: p[0],
		handler: map[string]any{"zones": []any{zone("api", "1/m")}, "body": "error"},
		extra: map[string]any{"errors": map[string]any{"routes": []any{map[string]any{"handle": []any{
			map[string]any{"handler": "static_response", "status_code": "{http.error.status_code}",
				"body": "custom {http.error.status_code} zone={http.sluice.zone}"},
		}}}}},
	})[0]
	get(t, url)
	r := get(t, url)
	if r.status != http.StatusTooManyRequests || r.body != "custom 429 zone=api" {
		t.Fatalf("got %d %q, want handle_errors' 429", r.status, r.body)
	}
	if r.header.Get("Retry-After") != "60" || r.header.Get("RateLimit-Policy") == "" {
		t.Errorf("headers of the deferred 429: %v", r.header)
	}
}

// TestClientCannotChooseItsKey: behind a trusted load balancer that
// appends the client's address to X-Forwarded-For, the entries to its left
// are the client's own words. Caddy's client_ip is the leftmost entry
// unless the server sets trusted_proxies_strict, so a client that writes a
// new address there each time must still land in one bucket, and one that
// writes another client's address must not spend that client's quota.
func TestClientCannotChooseItsKey(t *testing.T) {
	trusted := map[string]any{"source": "static", "ranges": []string{"127.0.0.1/32"}}
	for _, strict := range []int{0, 1} {
		t.Run("trusted_proxies_strict="+strconv.Itoa(strict), func(t *testing.T) {
			extra := map[string]any{"trusted_proxies": trusted}
			if strict > 0 {
				extra["trusted_proxies_strict"] = strict
			}
			// Zones of their own names: counters outlive a reload.
			name := "per_ip_" + strconv.Itoa(strict)
			for _, z := range []map[string]any{zone(name, "1/m"), zone(name+"_v6", "1/m", "ipv6_prefix", 64)} {
				p := freePorts(t, 1)
				url := loadCaddy(t, server{port: p[0], handler: map[string]any{"zones": []any{z}}, extra: extra})[0]
				var got []int
				for i := 1; i <= 5; i++ {
					r := get(t, url, "X-Forwarded-For", "198.51.100."+strconv.Itoa(i)+", 203.0.113.5")
					got = append(got, r.status)
				}
				if want := []int{200, 429, 429, 429, 429}; !reflect.DeepEqual(got, want) {
					t.Errorf("zone %v: statuses %v, want %v", z, got, want)
				}
				// The victim, whose address the attacker wrote on the
				// left, still has its quota.
				wantStatus(t, url, []int{200, 429}, "X-Forwarded-For", "198.51.100.1")
				// A balancer's entry that Caddy cannot read (a space before
				// brackets and a port), which trusted_proxies_strict makes
				// Caddy skip to the client's own entry on its left.
				got = got[:0]
				for i := 6; i <= 8; i++ {
					got = append(got, get(t, url, "X-Forwarded-For", "198.51.100."+strconv.Itoa(i)+", [2001:db8::8]:443").status)
				}
				if want := []int{200, 429, 429}; !reflect.DeepEqual(got, want) {
					t.Errorf("zone %v, an entry Caddy cannot read: statuses %v, want %v", z, got, want)
				}
			}
		})
	}
}
