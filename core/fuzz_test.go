package core

import (
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// FuzzParseRate: any text either fails to parse with a *FieldError of the
// rate holding the text, or parses to a rate that a limit then accepts or
// refuses, without panicking.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"", "100/m", "10/1m30s", "2.5/s", "0.5/s", "1/2s", "10/100ms", "1e308/ns", "-1/s", "NaN/s", "5/", "/s", "1/9999999h", "7/1500ms"} {
		f.Add(s, 0.0)
	}
	f.Fuzz(func(t *testing.T, s string, burst float64) {
		r, err := model.ParseRate(s)
		if err != nil {
			if fe, ok := err.(*model.FieldError); !ok || fe.Field != "rate" || fe.Value != s {
				t.Fatalf("ParseRate(%q): error %#v is not a FieldError of the rate holding the text", s, err)
			}
			return
		}
		for _, alg := range model.Algorithms {
			l := &model.Limit{Name: "f", Algorithm: alg, Rate: r, Burst: burst}
			if l.Validate() == nil {
				if _, d := coretest.Decide(l, model.State{}, testclock.Epoch, 1); !d.Allowed && d.RetryAfter == 0 {
					t.Fatalf("%s %v burst %v: a fresh state rejects with no Retry-After", alg, r, burst)
				}
			}
		}
	})
}

// FuzzParseCost: a cost parses to a finite number, not negative, or fails.
func FuzzParseCost(f *testing.F) {
	for _, s := range []string{"1", "0.5", "1e3", "0", "-1", "NaN", "Inf", "0x10", " 2", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if c, err := model.ParseCost(s); err == nil && !(c >= 0 && !math.IsInf(c, 0)) {
			t.Fatalf("ParseCost(%q) = %v without error", s, c)
		}
	})
}

// FuzzRequestKey builds keys and client addresses from hostile peers and
// headers: no panic, keys bounded, and an untrusted peer's headers never
// change its key.
func FuzzRequestKey(f *testing.F) {
	f.Add("192.0.2.1:1", "203.0.113.7, 10.0.0.1", "198.51.100.9", "key")
	f.Add("10.0.0.1:1", strings.Repeat("1.2.3.4,", 100), "::1", "\x00missing")
	f.Add("[2001:db8::1%eth0]:443", "[::ffff:10.0.0.1]:80, unknown", "", strings.Repeat("k", 300))
	f.Add("@", ",,,", "x", "")
	trusted := mustPrefixes(f, "10.0.0.0/8", "::1/128")
	rules := []*clientip.Strategy{
		{},
		{TrustedProxies: trusted},
		{TrustedProxies: trusted, Depth: 2},
		{TrustedProxies: trusted, Header: "X-Real-IP"},
		{AnyPeer: true, ExcludedIPs: mustPrefixes(f, "203.0.113.0/24")},
		{TrustedProxies: trusted, IPv4Prefix: 24, IPv6Prefix: 64},
	}
	var specs []*keyspec.Spec
	for _, ip := range rules {
		for _, parts := range [][]string{nil, {"client_ip", "header:X-Key"}, {"header:X-Key"}, {"query:k", "cookie:c", "path"}} {
			spec, err := keyspec.Parse(parts, ip)
			if err != nil {
				f.Fatal(err)
			}
			specs = append(specs, spec)
		}
	}
	plain, _ := keyspec.Parse(nil, nil)
	f.Fuzz(func(t *testing.T, remote, xff, realIP, value string) {
		r := httptest.NewRequest(http.MethodGet, "/p", nil)
		r.URL.RawQuery = "k=" + url.QueryEscape(value)
		r.RemoteAddr = remote
		r.Header.Set("X-Key", value)
		r.Header["X-Forwarded-For"] = []string{xff}
		r.Header["X-Real-Ip"] = []string{realIP}
		r.Header["Cookie"] = []string{"c=" + value}
		for _, s := range specs {
			if key, ok := s.Key(r); ok && len(key) > keyspec.MaxKeyLength+1 && len(key) != len(keyspec.BoundKey(string(make([]byte, keyspec.MaxKeyLength+1)))) {
				t.Fatalf("key of %d bytes", len(key))
			}
		}
		// The zero clientip.Strategy trusts no proxy: headers cannot move its key.
		withHeaders, ok1 := plain.Key(r)
		r.Header = http.Header{}
		bare, ok2 := plain.Key(r)
		if withHeaders != bare || ok1 != ok2 {
			t.Fatalf("peer %q: key %q with headers, %q without", remote, withHeaders, bare)
		}
	})
}

// FuzzRelayedClient: whatever a client writes into X-Forwarded-For or
// Forwarded, the trusted proxies' entries appended to its right decide the
// key; and any header, from any peer, is read without a panic.
func FuzzRelayedClient(f *testing.F) {
	f.Add("198.51.100.1", 0)
	f.Add(`for="unknown, for=[::1]:80;proto=http`, 1)
	f.Add(`"`, 2)
	f.Add(`for="\",for=198.51.100.1"`, 0)
	f.Add(strings.Repeat("for=127.0.0.3,", 40), 3)
	f.Add(";;;=,=;\t", 32)
	trusted := mustPrefixes(f, "10.0.0.0/8")
	f.Fuzz(func(t *testing.T, written string, depth int) {
		for _, tc := range []struct{ header, proxies, want string }{
			{"X-Forwarded-For", ", 2001:db8::5, 10.0.0.2", "2001:db8::5"},
			{"Forwarded", `, for="[2001:db8::5]:4711";proto=https, for=10.0.0.2;by=10.0.0.1`, "2001:db8::5"},
			{"Forwarded", ",for=203.0.113.5", "203.0.113.5"},
		} {
			c := &clientip.Strategy{TrustedProxies: trusted, Header: tc.header}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			r := coretest.NewRequest("10.0.0.1:1", tc.header, written+tc.proxies)
			if got, ok := c.Key(r); !ok || got != tc.want {
				t.Fatalf("%s: %q: key %q, %v; want %q", tc.header, written+tc.proxies, got, ok, tc.want)
			}
			if depth < 0 || depth > clientip.MaxForwardedHops {
				continue
			}
			// The client's text alone, with any depth: no panic, and a
			// key that is an address.
			c = &clientip.Strategy{TrustedProxies: trusted, Header: tc.header, Depth: depth}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			r = coretest.NewRequest("10.0.0.1:1", tc.header, written)
			if got, ok := c.Key(r); !ok {
				t.Fatalf("%s: %q: no key", tc.header, written)
			} else if _, err := netip.ParseAddr(got); err != nil {
				t.Fatalf("%s: %q: key %q is not an address", tc.header, written, got)
			}
		}
	})
}

// FuzzDepthKey: behind load balancers, as Traefik's ipStrategy.depth
// configures it, the key that the lane takes (laneDepthKey) for an IPv4
// entry is the one that clientip.Strategy.Key finds, for any peer and any
// header.
func FuzzDepthKey(f *testing.F) {
	f.Add("192.0.2.1:1", "203.0.113.7, 10.0.0.1", 1)
	f.Add("192.0.2.1:1", "203.0.113.7 ,\t10.0.0.1", 2)
	f.Add("192.0.2.1:1", "2001:db8::1, 203.0.113.7:80", 1)
	f.Add("192.0.2.1:1", "[2001:db8::1], 010.0.0.1", 2)
	f.Add("@", "203.0.113.7", 1)
	f.Add("192.0.2.1", "203.0.113.7", 1)
	f.Add("[2001:db8::1]:443", ", ,203.0.113.7", 3)
	f.Add("192.0.2.1:1", strings.Repeat("1.2.3.4,", 40), 32)
	f.Add("192.0.2.1:1", "::ffff:203.0.113.7", 1)
	f.Fuzz(func(t *testing.T, remote, xff string, depth int) {
		if depth < 1 || depth > clientip.MaxForwardedHops {
			return
		}
		for _, v4 := range []int{0, 24, 32} {
			c := &clientip.Strategy{AnyPeer: true, Depth: depth, IPv4Prefix: v4, IPv6Prefix: 64}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			r := coretest.NewRequest(remote)
			for _, line := range strings.Split(xff, "\n") {
				r.Header.Add(clientip.XForwardedFor, line)
			}
			if !laneDepth4(c) {
				continue // the lane takes Strategy.Key itself
			}
			got, ok := laneDepthKey(c, r, "", nil, 0, 0, noAddr, nil)
			want, wantOK := (*clientip.Strategy).Key(c, r)
			if got != want || ok != wantOK {
				t.Fatalf("peer %q, X-Forwarded-For %q, depth %d, ipv4 /%d: key %q, %v; want %q, %v", remote, xff, depth, v4, got, ok, want, wantOK)
			}
		}
	})
}
