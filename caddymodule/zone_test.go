package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
)

// testRequest returns a request whose Caddy client address is clientIP,
// with the given headers, and its replacer.
func testRequest(clientIP string, header map[string]string) (*http.Request, *caddy.Replacer) {
	r := httptest.NewRequest(http.MethodGet, "http://example.com/search?q=x", nil)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	vars := map[string]any{caddyhttp.ClientIPVarKey: clientIP}
	*r = *r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, vars))
	return r, caddyhttp.NewTestReplacer(r)
}

func provisionedZone(t *testing.T, z Zone) *Zone {
	t.Helper()
	if z.Name == "" {
		z.Name = "z"
	}
	if z.Rate == "" {
		z.Rate = "10/s"
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	if err := z.provision(ctx); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if err := z.validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	return &z
}

func TestZoneKey(t *testing.T) {
	const shared = "\x00missing" // core's key of on_missing_key shared
	tests := []struct {
		name     string
		zone     Zone
		clientIP string
		header   map[string]string
		want     string
		ok       bool
	}{
		{"default is the client address", Zone{}, "203.0.113.7", nil, "203.0.113.7", true},
		{"explicit client_ip", Zone{Key: "{client_ip}"}, "203.0.113.7", nil, "203.0.113.7", true},
		{"adapted client_ip", Zone{Key: "{http.vars.client_ip}"}, "2001:db8::1", nil, "2001:db8::1", true},
		{"ipv4 grouped", Zone{IPv4Prefix: 24, IPv6Prefix: 64}, "203.0.113.7", nil, "203.0.113.0/24", true},
		{"ipv6 grouped", Zone{IPv4Prefix: 24, IPv6Prefix: 64}, "2001:db8:1:2:3:4:5:6", nil, "2001:db8:1:2::/64", true},
		{"ipv4-mapped ipv6 grouped as ipv4", Zone{IPv4Prefix: 16}, "::ffff:198.51.100.9", nil, "198.51.0.0/16", true},
		{"ipv4 full when only ipv6 grouped", Zone{IPv6Prefix: 64}, "203.0.113.7", nil, "203.0.113.7", true},
		{"no client address", Zone{}, "", nil, "", false},
		{"no client address, shared", Zone{OnMissingKey: "shared"}, "", nil, shared, true},
		{"header", Zone{Key: "{http.request.header.X-API-Key}"}, "203.0.113.7", map[string]string{"X-API-Key": "k1"}, "k1", true},
		{"header absent", Zone{Key: "{http.request.header.X-API-Key}"}, "203.0.113.7", nil, "", false},
		{"header absent, shared", Zone{Key: "{http.request.header.X-API-Key}", OnMissingKey: "shared"}, "203.0.113.7", nil, shared, true},
		{"composite", Zone{Key: "{http.vars.client_ip} {http.request.host}"}, "203.0.113.7", nil, "11:203.0.113.7|11:example.com", true},
		{"composite with an empty part", Zone{Key: "{http.request.host}/{http.request.header.X-User}"}, "203.0.113.7", nil, "", false},
		{"unknown placeholder", Zone{Key: "{no.such.placeholder}"}, "203.0.113.7", nil, "", false},
		{"constant", Zone{Key: "global"}, "", nil, "global", true},
		{"query value", Zone{Key: "{http.request.uri.query.q}"}, "", nil, "x", true},
		{"value starting with NUL is escaped", Zone{Key: "{http.request.header.X-K}"}, "", map[string]string{"X-K": "\x00missing"}, "\x01\x00missing", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z := provisionedZone(t, tt.zone)
			r, repl := testRequest(tt.clientIP, tt.header)
			a, ok, err := z.ask(r, repl)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.ok || a.Key != tt.want {
				t.Errorf("ask = (%q, %v), want (%q, %v)", a.Key, ok, tt.want, tt.ok)
			}
			if ok && a.Limit != z.limit {
				t.Errorf("ask's limit is not the zone's")
			}
		})
	}
}

// TestZoneKeyFirstValue: a header, query parameter or cookie that a
// request carries several times keys the zone by its first value, as
// keyspec reads it, alone, with text around it and in a key of several
// placeholders, and not by Caddy's replacer, which joins a header's lines
// and a parameter's values with commas (a new key for every value a client
// adds) and matches a cookie's name in any letter case.
func TestZoneKeyFirstValue(t *testing.T) {
	header := http.Header{
		"X-Api-Key": {"alice", "n1"},
		"Cookie":    {"SID=n1; sid=alice", "sid=n2"},
	}
	tests := []struct{ key, want string }{
		{"{http.request.header.X-API-Key}", "alice"},
		{"{http.request.uri.query.k}", "alice"},
		{"{http.request.cookie.sid}", "alice"},
		{"tenant-{http.request.header.X-API-Key}", "tenant-alice"},
		{"{http.request.header.X-API-Key} {http.request.uri.query.k} {http.request.cookie.sid} {http.request.host}", "5:alice|5:alice|5:alice|11:example.com"},
		{"{http.request.header.X-API-Key}/{http.request.header.X-Missing}", ""},
	}
	for _, tt := range tests {
		z := provisionedZone(t, Zone{Key: tt.key})
		r, repl := testRequest("203.0.113.7", nil)
		r.Header = header
		r.URL.RawQuery = "k=alice&k=n1"
		key, ok := z.keyOf(r, repl)
		if key != tt.want || ok != (tt.want != "") {
			t.Errorf("key %s: %q, %v, want %q", tt.key, key, ok, tt.want)
		}
	}
}

func TestZoneCost(t *testing.T) {
	tests := []struct {
		cost   string
		header string
		want   float64
	}{
		{"", "", 1},
		{"5", "", 5},
		{"2.5", "", 2.5},
		{"{http.request.header.X-Cost}", "4", 4},
		{"{http.request.header.X-Cost}", "0.5", 0.5},
		{"{http.request.header.X-Cost}", "", 1},
		{"{http.request.header.X-Cost}", "0", 1},
		{"{http.request.header.X-Cost}", "-3", 1},
		{"{http.request.header.X-Cost}", "NaN", 1},
		{"{http.request.header.X-Cost}", "Inf", 1},
		{"{http.request.header.X-Cost}", "lots", 1},
	}
	for _, tt := range tests {
		z := provisionedZone(t, Zone{Cost: caddyhttp.WeakString(tt.cost)})
		r, repl := testRequest("203.0.113.7", map[string]string{"X-Cost": tt.header})
		a, ok, err := z.ask(r, repl)
		if err != nil || !ok {
			t.Fatalf("cost %q, header %q: ask = %v, %v", tt.cost, tt.header, ok, err)
		}
		if a.Cost != tt.want {
			t.Errorf("cost %q, header %q: cost = %v, want %v", tt.cost, tt.header, a.Cost, tt.want)
		}
	}
}

func TestZoneMatch(t *testing.T) {
	z := provisionedZone(t, Zone{MatchRaw: caddy.ModuleMap{"path": []byte(`["/search"]`)}})
	r, repl := testRequest("203.0.113.7", nil)
	if _, ok, err := z.ask(r, repl); !ok || err != nil {
		t.Errorf("/search: ask = %v, %v; want the zone to apply", ok, err)
	}
	r, repl = testRequest("203.0.113.7", nil)
	r.URL.Path = "/other"
	if _, ok, err := z.ask(r, repl); ok || err != nil {
		t.Errorf("/other: ask = %v, %v; want the zone skipped", ok, err)
	}
}

func TestZoneProvisionErrors(t *testing.T) {
	tests := []struct {
		zone Zone
		want string
	}{
		{Zone{Name: "z", Rate: "ten per second"}, `rate "ten per second"`},
		{Zone{Name: "z", Rate: "10/s", Algorithm: "gcra"}, `algorithm "gcra": unknown`},
		{Zone{Name: "z", Rate: "10/s", Algorithm: "fixed_window", Burst: 3}, `burst: fixed_window takes its capacity`},
		{Zone{Name: "a:b", Rate: "10/s"}, `name "a:b"`},
		{Zone{Name: "z", Rate: "10/s", IPv4Prefix: 40}, `ipv4_prefix "40": must be between 0 and 32`},
		{Zone{Name: "z", Rate: "10/s", IPv6Prefix: -1}, `ipv6_prefix "-1": must be between 0 and 128`},
		{Zone{Name: "z", Rate: "10/s", Cost: "0"}, `cost "0": must be positive`},
		{Zone{Name: "z", Rate: "10/s", OnMissingKey: "drop"}, `on_missing_key "drop": want skip or shared`},
		{Zone{Name: "z", Rate: "10/s", MatchRaw: caddy.ModuleMap{"nosuchmatcher": []byte(`{}`)}}, "match:"},
		{Zone{Name: "z", Rate: "10/s", Key: "{http.request.cookie.a b}"}, `key "{http.request.cookie.a b}": placeholder {http.request.cookie.a b}: cookie name "a b": not a valid cookie name`},
	}
	for _, tt := range tests {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		err := tt.zone.provision(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: provision error %v, want one containing %q", tt.zone, err, tt.want)
		}
	}
	z := Zone{Name: "z", Rate: "10/s", Key: "{http.request.header.X-API-Key}", IPv6Prefix: 64}
	if err := z.validate(); err == nil || !strings.HasPrefix(err.Error(), "ipv6_prefix: groups client addresses") {
		t.Errorf("prefix on a header key: validate error %v", err)
	}
}

// TestLimitIsCore checks that a zone's limit is core's, validated, with the
// zone's settings.
func TestLimitIsCore(t *testing.T) {
	z := provisionedZone(t, Zone{Name: "api", Rate: "100/m", Algorithm: "leaky_bucket", Burst: 5, MaxDelay: caddy.Duration(5e8)})
	l := z.limit
	if l.Name != "api" || l.Algorithm != model.LeakyBucket || l.Rate.Quota != 100 || l.Capacity() != 5 || l.MaxDelay != 5e8 {
		t.Errorf("limit = %+v", l)
	}
}

func TestUnknownPlaceholder(t *testing.T) {
	for key, want := range map[string]string{
		"{http.request.header.X-API-Key}":    "",
		"{http.vars.client_ip}-{env.REGION}": "",
		"{client_ip}":                        "{client_ip}",
		"{http.request.host}/{tenant}":       "{tenant}",
		"no placeholder":                     "",
	} {
		if got, _ := unknownPlaceholder(key); got != want {
			t.Errorf("unknownPlaceholder(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestClientChosenPlaceholder(t *testing.T) {
	for key, want := range map[string]string{
		"{http.request.header.X-API-Key}":               "{http.request.header.X-API-Key}",
		"{http.vars.client_ip} {http.request.cookie.s}": "{http.request.cookie.s}",
		"{http.request.uri.query.key}":                  "{http.request.uri.query.key}",
		"{http.request.host}":                           "",
		"{client_ip}":                                   "",
		"global":                                        "",
	} {
		if got := clientChosenPlaceholder(key); got != want {
			t.Errorf("clientChosenPlaceholder(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestZoneClientKeyBehindProxy: from a peer the server trusts, the client
// is read from the right of the server's client_ip_headers, whatever
// Caddy's client_ip says (its leftmost X-Forwarded-For entry, unless the
// server sets trusted_proxies_strict); from another peer, the peer.
func TestZoneClientKeyBehindProxy(t *testing.T) {
	const spoofed = "198.51.100.1" // what Caddy's client_ip is without strict: the leftmost entry
	xff := map[string]string{"X-Forwarded-For": spoofed + ", 203.0.113.5"}
	tests := []struct {
		name     string
		srv      *caddyhttp.Server // nil: no server in the context
		zone     Zone
		trusted  bool
		clientIP string // Caddy's client_ip
		header   map[string]string
		want     string
	}{
		{name: "untrusted peer", zone: Zone{}, clientIP: "192.0.2.1", header: xff, want: "192.0.2.1"},
		{name: "trusted, xff", zone: Zone{}, trusted: true, clientIP: spoofed, header: xff, want: "203.0.113.5"},
		{name: "trusted, xff, ipv6 prefix", zone: Zone{IPv6Prefix: 64}, trusted: true, clientIP: spoofed, header: xff, want: "203.0.113.5"},
		{name: "trusted, xff, ipv4 prefix", zone: Zone{IPv4Prefix: 24}, trusted: true, clientIP: spoofed, header: xff, want: "203.0.113.0/24"},
		{name: "trusted, ipv6 grouped", zone: Zone{IPv6Prefix: 64}, trusted: true, clientIP: "2001:db8:9::1",
			header: map[string]string{"X-Forwarded-For": "2001:db8:9::1, [2001:db8:1:2::7]:443"}, want: "2001:db8:1:2::/64"},
		{name: "trusted, no header", zone: Zone{}, trusted: true, clientIP: "127.0.0.1", want: "127.0.0.1"},
		{name: "trusted, garbage: the peer", zone: Zone{}, trusted: true, clientIP: spoofed,
			header: map[string]string{"X-Forwarded-For": spoofed + ", garbage"}, want: "192.0.2.1"},
		{name: "strict: Caddy's", srv: &caddyhttp.Server{TrustedProxiesStrict: 1}, zone: Zone{}, trusted: true, clientIP: "203.0.113.5", header: xff, want: "203.0.113.5"},
		{name: "strict, an entry Caddy cannot read: the peer", srv: &caddyhttp.Server{TrustedProxiesStrict: 1}, zone: Zone{}, trusted: true, clientIP: spoofed,
			header: map[string]string{"X-Forwarded-For": spoofed + ", [2001:db8::8]:443"}, want: "192.0.2.1"},
		{name: "strict, all trusted: the peer", srv: &caddyhttp.Server{TrustedProxiesStrict: 1}, zone: Zone{}, trusted: true, clientIP: "192.0.2.1",
			header: map[string]string{"X-Forwarded-For": "127.0.0.2, 127.0.0.3"}, want: "192.0.2.1"},
		{name: "strict, chain", srv: &caddyhttp.Server{TrustedProxiesStrict: 1}, zone: Zone{IPv6Prefix: 64}, trusted: true, clientIP: "2001:db8:1:2::7",
			header: map[string]string{"X-Forwarded-For": spoofed + ", 2001:db8:1:2::7, 127.0.0.3:80"}, want: "2001:db8:1:2::/64"},
		{name: "client_ip_headers", srv: &caddyhttp.Server{ClientIPHeaders: []string{"X-Real-IP", "X-Forwarded-For"}}, zone: Zone{}, trusted: true, clientIP: spoofed,
			header: map[string]string{"X-Forwarded-For": spoofed + ", 203.0.113.5"}, want: "203.0.113.5"},
		{name: "client_ip_headers, first present", srv: &caddyhttp.Server{ClientIPHeaders: []string{"X-Real-IP", "X-Forwarded-For"}}, zone: Zone{}, trusted: true, clientIP: spoofed,
			header: map[string]string{"X-Real-IP": "203.0.113.9", "X-Forwarded-For": spoofed}, want: "203.0.113.9"},
		{name: "forwarded", srv: &caddyhttp.Server{ClientIPHeaders: []string{"Forwarded"}}, zone: Zone{}, trusted: true, clientIP: "192.0.2.1",
			header: map[string]string{"Forwarded": "for=" + spoofed + `, for="[2001:db8::5]:80";proto=https`, "X-Forwarded-For": spoofed}, want: "2001:db8::5"},
		{name: "forwarded, strict", srv: &caddyhttp.Server{ClientIPHeaders: []string{"Forwarded"}, TrustedProxiesStrict: 1}, zone: Zone{}, trusted: true, clientIP: "192.0.2.1",
			header: map[string]string{"Forwarded": "for=" + spoofed + ", for=203.0.113.5"}, want: "203.0.113.5"},
		{name: "forwarded, untrusted peer", srv: &caddyhttp.Server{ClientIPHeaders: []string{"Forwarded"}}, zone: Zone{}, clientIP: "192.0.2.1",
			header: map[string]string{"Forwarded": "for=203.0.113.5"}, want: "192.0.2.1"},
		{name: "composite", zone: Zone{Key: "{http.vars.client_ip} {http.request.host}"}, trusted: true, clientIP: spoofed, header: xff, want: "11:203.0.113.5|11:example.com"},
		{name: "template", zone: Zone{Key: "ip={http.vars.client_ip}"}, trusted: true, clientIP: spoofed, header: xff, want: "ip=203.0.113.5"},
		{name: "template, unknown placeholder", zone: Zone{Key: "{http.vars.client_ip}{no.such}"}, trusted: true, clientIP: spoofed, header: xff, want: ""},
		{name: "template, empty placeholder", zone: Zone{Key: "{http.vars.client_ip}/{http.request.header.X-None}"}, trusted: true, clientIP: spoofed, header: xff, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z := tt.zone
			z.Name, z.Rate = "z", "10/s"
			bg := context.Background()
			if tt.srv != nil {
				bg = context.WithValue(bg, caddyhttp.ServerCtxKey, tt.srv)
			}
			ctx, cancel := caddy.NewContext(caddy.Context{Context: bg})
			defer cancel()
			if err := z.provision(ctx); err != nil {
				t.Fatal(err)
			}
			r, repl := testRequest(tt.clientIP, tt.header)
			r.RemoteAddr = "192.0.2.1:4711"
			caddyhttp.SetVar(r.Context(), caddyhttp.TrustedProxyVarKey, tt.trusted)
			a, ok, err := z.ask(r, repl)
			if err != nil {
				t.Fatal(err)
			}
			if ok != (tt.want != "") || a.Key != tt.want {
				t.Errorf("ask = (%q, %v), want (%q, %v)", a.Key, ok, tt.want, tt.want != "")
			}
		})
	}
}

// TestZoneLongKeyIsBounded: a key longer than keyspec.MaxKeyLength, from one
// placeholder or a constant, is its digest in the ask, so that the
// stores, the sketch and the log see 33 bytes, hashed once per request;
// the admin API finds it by its digest or in full.
func TestZoneLongKeyIsBounded(t *testing.T) {
	long := strings.Repeat("k", 64<<10)
	for _, tc := range []struct {
		zone   Zone
		header map[string]string
		raw    string // the key before bounding
	}{
		{Zone{Key: "{http.request.header.X-Token}"}, map[string]string{"X-Token": long}, long},
		{Zone{Key: "token {http.request.header.X-Token}"}, map[string]string{"X-Token": long}, "token " + long},
		{Zone{Key: long}, nil, long},
	} {
		z := provisionedZone(t, tc.zone)
		r, repl := testRequest("203.0.113.7", tc.header)
		a, ok, err := z.ask(r, repl)
		if err != nil || !ok {
			t.Fatalf("key %.40q: ask = %v, %v", tc.zone.Key, ok, err)
		}
		want := keyspec.BoundKey(tc.raw)
		if a.Key != z.prefix+want || len(want) != 33 {
			t.Errorf("key %.40q: ask key %.60q (%d bytes), want %q", tc.zone.Key, a.Key, len(a.Key), want)
		}
		if got := z.topKey(a.Key); got != want {
			t.Errorf("key %.40q: sketch key %.60q, want %q", tc.zone.Key, got, want)
		}
		for _, name := range []string{want, tc.raw} {
			if got := z.storeKey(name); got != a.Key {
				t.Errorf("key %.40q: the admin API's key for %.40q is %.60q, want %q", tc.zone.Key, name, got, a.Key)
			}
		}
	}
}
