package clientip

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/coretest"
)

// Client addresses in these tests are documentation addresses (RFC 5737,
// RFC 3849) written into headers; no test opens a connection.

// newRequest returns a GET request from remote with the given header lines,
// given as name, value pairs; a name may repeat.
func TestClientIPKey(t *testing.T) {
	const xff, xri, fwd = "X-Forwarded-For", "X-Real-IP", "Forwarded"
	loop := []string{"127.0.0.0/8"}
	tests := []struct {
		name     string
		trusted  []string
		excluded []string
		hdr      string
		depth    int
		anyPeer  bool
		v4, v6   int
		remote   string
		lines    []string // header name, value pairs
		want     string   // "" means ok=false
	}{
		{name: "no proxies", remote: "127.0.0.1:4711", want: "127.0.0.1"},
		{name: "bare remote", remote: "127.0.0.1", want: "127.0.0.1"},
		{name: "ipv6 remote", remote: "[::1]:4711", want: "::1"},
		{name: "empty remote", remote: "", want: ""},
		{name: "unix socket remote", remote: "@", want: ""},

		// A peer not in TrustedProxies cannot choose its address.
		{name: "spoof xff, no proxies", remote: "127.0.0.2:1", lines: []string{xff, "203.0.113.7"}, want: "127.0.0.2"},
		{name: "spoof xff, other peer trusted", trusted: []string{"127.0.0.1"}, remote: "127.0.0.2:1", lines: []string{xff, "203.0.113.7"}, want: "127.0.0.2"},
		{name: "spoof x-real-ip", trusted: []string{"127.0.0.1"}, hdr: xri, remote: "127.0.0.2:1", lines: []string{xri, "203.0.113.7"}, want: "127.0.0.2"},
		{name: "spoof with depth", trusted: []string{"127.0.0.1"}, depth: 1, remote: "127.0.0.2:1", lines: []string{xff, "203.0.113.7"}, want: "127.0.0.2"},
		{name: "spoof via mapped remote", trusted: []string{"127.0.0.1"}, remote: "[::ffff:127.0.0.2]:1", lines: []string{xff, "203.0.113.7"}, want: "127.0.0.2"},

		// Rightmost untrusted (depth 0).
		{name: "trusted single", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "203.0.113.7"}, want: "203.0.113.7"},
		{name: "rightmost untrusted", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "198.51.100.1, 203.0.113.7, 127.0.0.3"}, want: "203.0.113.7"},
		{name: "all trusted: leftmost", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "127.0.0.5,127.0.0.6"}, want: "127.0.0.5"},
		{name: "excluded skipped", trusted: loop, excluded: []string{"203.0.113.0/24"}, remote: "127.0.0.1:1", lines: []string{xff, "198.51.100.1, 203.0.113.7, 203.0.113.8"}, want: "198.51.100.1"},
		{name: "excluded not trusted as peer", trusted: loop, excluded: []string{"198.51.100.0/24"}, remote: "198.51.100.1:1", lines: []string{xff, "203.0.113.7"}, want: "198.51.100.1"},
		{name: "missing header", trusted: loop, remote: "127.0.0.1:1", want: "127.0.0.1"},
		{name: "empty header", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, ""}, want: "127.0.0.1"},
		{name: "garbage only", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "unknown"}, want: "127.0.0.1"},
		{name: "garbage before client", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "203.0.113.7, garbage"}, want: "127.0.0.1"},
		{name: "garbage left of client", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "garbage, 203.0.113.7"}, want: "203.0.113.7"},
		{name: "empty entry", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "203.0.113.7,"}, want: "127.0.0.1"},
		{name: "overlong entry", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, strings.Repeat("1", 200)}, want: "127.0.0.1"},
		{name: "prefix is garbage", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "203.0.113.0/24"}, want: "127.0.0.1"},
		{name: "tabs and spaces", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, " \t203.0.113.7\t "}, want: "203.0.113.7"},
		{name: "ipv4 with port", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "203.0.113.7:4711"}, want: "203.0.113.7"},
		{name: "ipv6 with port", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "[2001:db8::1]:443"}, want: "2001:db8::1"},
		{name: "ipv6 in brackets", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "[2001:db8::1]"}, want: "2001:db8::1"},
		{name: "several lines", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "198.51.100.1", xff, "127.0.0.3, 127.0.0.4"}, want: "198.51.100.1"},
		{name: "lowercase header option", trusted: loop, hdr: "x-forwarded-for", remote: "127.0.0.1:1", lines: []string{xff, "203.0.113.7"}, want: "203.0.113.7"},

		// Depth.
		{name: "depth 1", trusted: loop, depth: 1, remote: "127.0.0.1:1", lines: []string{xff, "198.51.100.1, 203.0.113.7"}, want: "203.0.113.7"},
		{name: "depth 1 trusted entry", trusted: loop, depth: 1, remote: "127.0.0.1:1", lines: []string{xff, "198.51.100.1, 127.0.0.3"}, want: "127.0.0.3"},
		{name: "depth 2", trusted: loop, depth: 2, remote: "127.0.0.1:1", lines: []string{xff, "198.51.100.1, 203.0.113.7"}, want: "198.51.100.1"},
		{name: "depth 2 across lines", trusted: loop, depth: 2, remote: "127.0.0.1:1", lines: []string{xff, "198.51.100.1", xff, "203.0.113.7"}, want: "198.51.100.1"},
		{name: "depth 3 counts empty entries", trusted: loop, depth: 3, remote: "127.0.0.1:1", lines: []string{xff, "198.51.100.1,,203.0.113.7"}, want: "198.51.100.1"},
		{name: "depth too deep", trusted: loop, depth: 3, remote: "127.0.0.1:1", lines: []string{xff, "198.51.100.1, 203.0.113.7"}, want: "127.0.0.1"},
		{name: "depth hits empty entry", trusted: loop, depth: 2, remote: "127.0.0.1:1", lines: []string{xff, "198.51.100.1,,203.0.113.7"}, want: "127.0.0.1"},
		{name: "depth hits garbage", trusted: loop, depth: 2, remote: "127.0.0.1:1", lines: []string{xff, "garbage, 203.0.113.7"}, want: "127.0.0.1"},

		// X-Real-IP.
		{name: "x-real-ip", trusted: loop, hdr: xri, remote: "127.0.0.1:1", lines: []string{xri, "203.0.113.7"}, want: "203.0.113.7"},
		{name: "x-real-ip ignores xff", trusted: loop, hdr: xri, remote: "127.0.0.1:1", lines: []string{xff, "198.51.100.1"}, want: "127.0.0.1"},
		{name: "x-real-ip garbage", trusted: loop, hdr: xri, remote: "127.0.0.1:1", lines: []string{xri, "203.0.113.7, 198.51.100.1"}, want: "127.0.0.1"},
		{name: "x-real-ip last line", trusted: loop, hdr: "x-real-ip", remote: "127.0.0.1:1", lines: []string{xri, "198.51.100.1", xri, "203.0.113.7"}, want: "203.0.113.7"},
		{name: "xff ignores x-real-ip", trusted: loop, remote: "127.0.0.1:1", lines: []string{xri, "203.0.113.7"}, want: "127.0.0.1"},
		{name: "xff ignores forwarded", trusted: loop, remote: "127.0.0.1:1", lines: []string{fwd, "for=203.0.113.7"}, want: "127.0.0.1"},

		// Another list header, read as X-Forwarded-For is.
		{name: "other list header", trusted: loop, hdr: "cf-connecting-ip", remote: "127.0.0.1:1", lines: []string{"CF-Connecting-IP", "198.51.100.1, 203.0.113.7", xff, "192.0.2.9"}, want: "203.0.113.7"},
		{name: "other list header, depth", trusted: loop, hdr: "X-Client-Chain", depth: 2, remote: "127.0.0.1:1", lines: []string{"X-Client-Chain", "198.51.100.1, 203.0.113.7"}, want: "198.51.100.1"},
		{name: "other list header, untrusted peer", trusted: loop, hdr: "X-Client-Chain", remote: "192.0.2.1:1", lines: []string{"X-Client-Chain", "203.0.113.7"}, want: "192.0.2.1"},

		// Forwarded (RFC 7239): the for= of each element, walked as
		// X-Forwarded-For is.
		{name: "forwarded", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, "for=203.0.113.7"}, want: "203.0.113.7"},
		{name: "forwarded, untrusted peer", trusted: loop, hdr: fwd, remote: "192.0.2.1:1", lines: []string{fwd, "for=203.0.113.7"}, want: "192.0.2.1"},
		{name: "forwarded ignores xff", trusted: loop, hdr: "forwarded", remote: "127.0.0.1:1", lines: []string{xff, "203.0.113.7"}, want: "127.0.0.1"},
		{name: "forwarded rightmost untrusted", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, "for=198.51.100.1, for=203.0.113.7;proto=https, for=127.0.0.3;by=127.0.0.1"}, want: "203.0.113.7"},
		{name: "forwarded several lines", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, "for=198.51.100.1", fwd, "for=127.0.0.3"}, want: "198.51.100.1"},
		{name: "forwarded params any order and case", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `proto=https;By="[2001:db8::9]";FOR=203.0.113.7;host=example.com`}, want: "203.0.113.7"},
		{name: "forwarded quoted ipv4 with port", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="203.0.113.7:4711"`}, want: "203.0.113.7"},
		{name: "forwarded quoted ipv6", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="[2001:db8:cafe::17]"`}, want: "2001:db8:cafe::17"},
		{name: "forwarded ipv6 with port", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::17"},
		{name: "forwarded ipv6 obfuscated port", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="[2001:db8::1]:_p1"`}, want: "2001:db8::1"},
		{name: "forwarded ipv6 without brackets", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="2001:db8::1"`}, want: "2001:db8::1"},
		{name: "forwarded mapped ipv6", trusted: loop, hdr: fwd, v4: 24, remote: "127.0.0.1:1", lines: []string{fwd, `for="[::ffff:203.0.113.7]"`}, want: "203.0.113.0/24"},
		{name: "forwarded comma in quotes", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for=198.51.100.1;ext="a, for=127.0.0.9"`}, want: "198.51.100.1"},
		{name: "forwarded semicolon in quotes", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `ext="a;for=198.51.100.1";for=203.0.113.7`}, want: "203.0.113.7"},
		{name: "forwarded empty pairs", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, ";for=203.0.113.7;;proto=http;"}, want: "203.0.113.7"},
		{name: "forwarded open quote left of client", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for=198.51.100.1, for="unknown, for=203.0.113.7`}, want: "203.0.113.7"},
		{name: "forwarded garbage left of client", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="[::1, x;;;=, for=203.0.113.7`}, want: "203.0.113.7"},
		{name: "forwarded unknown stops", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, "for=198.51.100.1, for=unknown"}, want: "127.0.0.1"},
		{name: "forwarded obfuscated stops", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, "for=198.51.100.1, for=_hidden, for=127.0.0.3"}, want: "127.0.0.1"},
		{name: "forwarded without for stops", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, "for=198.51.100.1, proto=https"}, want: "127.0.0.1"},
		{name: "forwarded two fors", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, "for=198.51.100.1;for=203.0.113.7"}, want: "127.0.0.1"},
		{name: "forwarded empty element", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, "for=203.0.113.7,"}, want: "127.0.0.1"},
		{name: "forwarded unbalanced quote", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="203.0.113.7`}, want: "127.0.0.1"},
		{name: "forwarded escape", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="203.0.113.7";x="""`}, want: "127.0.0.1"},
		{name: "forwarded text after quotes", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="203.0.113.7"x`}, want: "127.0.0.1"},
		{name: "forwarded spaces around =", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, "for = 203.0.113.7"}, want: "127.0.0.1"},
		{name: "forwarded ipv4 in brackets", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="[203.0.113.7]"`}, want: "127.0.0.1"},
		{name: "forwarded bad port", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="203.0.113.7:123456"`}, want: "127.0.0.1"},
		{name: "forwarded prefix", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, `for="203.0.113.0/24"`}, want: "127.0.0.1"},
		{name: "forwarded overlong element", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, "for=203.0.113.7;ext=" + strings.Repeat("x", 300)}, want: "127.0.0.1"},
		{name: "forwarded all trusted: leftmost", trusted: loop, hdr: fwd, remote: "127.0.0.1:1", lines: []string{fwd, "for=127.0.0.5, for=127.0.0.6"}, want: "127.0.0.5"},
		{name: "forwarded excluded skipped", trusted: loop, hdr: fwd, excluded: []string{"203.0.113.0/24"}, remote: "127.0.0.1:1", lines: []string{fwd, "for=198.51.100.1, for=203.0.113.7"}, want: "198.51.100.1"},
		{name: "forwarded depth 2", trusted: loop, hdr: fwd, depth: 2, remote: "127.0.0.1:1", lines: []string{fwd, "for=198.51.100.1, for=203.0.113.7"}, want: "198.51.100.1"},
		{name: "forwarded depth past garbage", trusted: loop, hdr: fwd, depth: 2, remote: "127.0.0.1:1", lines: []string{fwd, "for=198.51.100.1, for=unknown"}, want: "198.51.100.1"},
		{name: "forwarded depth hits garbage", trusted: loop, hdr: fwd, depth: 1, remote: "127.0.0.1:1", lines: []string{fwd, "for=198.51.100.1, for=unknown"}, want: "127.0.0.1"},
		{name: "forwarded depth too deep", trusted: loop, hdr: fwd, depth: 3, remote: "127.0.0.1:1", lines: []string{fwd, "for=198.51.100.1, for=203.0.113.7"}, want: "127.0.0.1"},
		{name: "forwarded any peer, depth", anyPeer: true, hdr: fwd, depth: 1, remote: "192.0.2.50:1", lines: []string{xff, "198.51.100.1", fwd, "for=203.0.113.7"}, want: "203.0.113.7"},
		{name: "forwarded any peer", anyPeer: true, hdr: fwd, remote: "192.0.2.50:1", lines: []string{fwd, "for=198.51.100.1, for=203.0.113.7"}, want: "203.0.113.7"},

		// AnyPeer: the header is believed from every peer, only the
		// excluded addresses are skipped.
		{name: "any peer", anyPeer: true, remote: "192.0.2.50:1", lines: []string{xff, "198.51.100.1, 203.0.113.7"}, want: "203.0.113.7"},
		{name: "any peer, excluded skipped", anyPeer: true, excluded: []string{"203.0.113.0/24"}, remote: "192.0.2.50:1", lines: []string{xff, "198.51.100.1, 203.0.113.7"}, want: "198.51.100.1"},
		{name: "any peer, no header", anyPeer: true, remote: "192.0.2.50:1", want: "192.0.2.50"},
		{name: "any peer, depth", anyPeer: true, depth: 2, remote: "192.0.2.50:1", lines: []string{xff, "198.51.100.1, 203.0.113.7"}, want: "198.51.100.1"},

		// Grouping.
		{name: "ipv4 /24", trusted: loop, v4: 24, remote: "127.0.0.1:1", lines: []string{xff, "203.0.113.7"}, want: "203.0.113.0/24"},
		{name: "ipv4 /24 peer", v4: 24, remote: "127.0.0.9:1", want: "127.0.0.0/24"},
		{name: "ipv4 /32 is full", v4: 32, remote: "127.0.0.9:1", want: "127.0.0.9"},
		{name: "ipv6 prefix leaves ipv4", v6: 64, remote: "127.0.0.9:1", want: "127.0.0.9"},
		{name: "ipv6 /64", trusted: []string{"::1"}, v4: 24, v6: 64, remote: "[::1]:1", lines: []string{xff, "2001:db8:1:2:3:4:5:6"}, want: "2001:db8:1:2::/64"},
		{name: "ipv6 /64 same net", trusted: []string{"::1"}, v6: 64, remote: "[::1]:1", lines: []string{xff, "2001:db8:1:2:ffff::1"}, want: "2001:db8:1:2::/64"},
		{name: "ipv6 /128 is full", v6: 128, remote: "[::1]:1", want: "::1"},

		// Normalization.
		{name: "mapped remote", remote: "[::ffff:127.0.0.1]:1", want: "127.0.0.1"},
		{name: "mapped remote trusted", trusted: []string{"127.0.0.1"}, remote: "[::ffff:127.0.0.1]:1", lines: []string{xff, "203.0.113.7"}, want: "203.0.113.7"},
		{name: "mapped entry grouped as ipv4", trusted: loop, v4: 24, v6: 64, remote: "127.0.0.1:1", lines: []string{xff, "::ffff:203.0.113.7"}, want: "203.0.113.0/24"},
		{name: "mapped trusted prefix", trusted: []string{"::ffff:127.0.0.0/104"}, remote: "127.0.0.1:1", lines: []string{xff, "203.0.113.7"}, want: "203.0.113.7"},
		{name: "mapped entry trusted", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "203.0.113.7, ::ffff:127.0.0.3"}, want: "203.0.113.7"},
		{name: "zone on remote", remote: "[fe80::1%eth0]:1", want: "fe80::1"},
		{name: "zone on trusted remote", trusted: []string{"fe80::/10"}, remote: "[fe80::1%eth0]:1", lines: []string{xff, "203.0.113.7"}, want: "203.0.113.7"},
		{name: "zone on entry", trusted: loop, remote: "127.0.0.1:1", lines: []string{xff, "fe80::2%eth0"}, want: "fe80::2"},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			c := &Strategy{
				TrustedProxies: mustPrefixes(t, tt.trusted...),
				ExcludedIPs:    mustPrefixes(t, tt.excluded...),
				Header:         tt.hdr,
				Depth:          tt.depth,
				AnyPeer:        tt.anyPeer,
				IPv4Prefix:     tt.v4,
				IPv6Prefix:     tt.v6,
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			got, ok := c.Key(coretest.NewRequest(tt.remote, tt.lines...))
			if ok != (tt.want != "") || got != tt.want {
				t.Errorf("Key = %q, %v; want %q, %v", got, ok, tt.want, tt.want != "")
			}
		})
	}
}

func TestClientIPAddrIsFullAddress(t *testing.T) {
	c := &Strategy{TrustedProxies: mustPrefixes(t, "127.0.0.1"), IPv4Prefix: 24, IPv6Prefix: 64}
	a, ok := c.Addr(coretest.NewRequest("127.0.0.1:1", "X-Forwarded-For", "::ffff:203.0.113.7"))
	if !ok || a != netip.MustParseAddr("203.0.113.7") {
		t.Errorf("Addr = %v, %v; want 203.0.113.7, true", a, ok)
	}
	if _, ok := c.Addr(coretest.NewRequest("not an address")); ok {
		t.Error("Addr of a request with an unparsable RemoteAddr reported ok")
	}
	var zero Strategy
	a, ok = zero.Addr(coretest.NewRequest("[::1]:1", "X-Forwarded-For", "203.0.113.7"))
	if !ok || a != netip.IPv6Loopback() {
		t.Errorf("zero Strategy: Addr = %v, %v; want ::1, true", a, ok)
	}
}

func TestClientIPValidate(t *testing.T) {
	p := mustPrefixes(t, "127.0.0.1")
	tests := []struct {
		name    string
		c       Strategy
		wantErr string // "" means valid
	}{
		{name: "zero", c: Strategy{}},
		{name: "full", c: Strategy{TrustedProxies: p, ExcludedIPs: p, IPv4Prefix: 32, IPv6Prefix: 128}},
		{name: "depth max", c: Strategy{TrustedProxies: p, Depth: MaxForwardedHops}},
		{name: "x-real-ip any case", c: Strategy{Header: "x-REAL-ip"}},
		{name: "x-forwarded-for", c: Strategy{Header: "X-Forwarded-For"}},
		{name: "forwarded", c: Strategy{Header: "forwarded", Depth: 2, ExcludedIPs: p}, wantErr: "excluded_ips"},
		{name: "forwarded with excluded", c: Strategy{Header: "Forwarded", ExcludedIPs: p}},
		{name: "other list header", c: Strategy{Header: "CF-Connecting-IP", Depth: 1}},
		{name: "bad header name", c: Strategy{Header: "X Forwarded"}, wantErr: `header "X Forwarded": not a valid header name`},
		{name: "negative depth", c: Strategy{Depth: -1}, wantErr: "depth"},
		{name: "depth too large", c: Strategy{Depth: MaxForwardedHops + 1}, wantErr: "depth"},
		{name: "depth with x-real-ip", c: Strategy{Header: "X-Real-IP", Depth: 1}, wantErr: "depth"},
		{name: "excluded with depth", c: Strategy{ExcludedIPs: p, Depth: 1}, wantErr: "excluded_ips"},
		{name: "excluded with x-real-ip", c: Strategy{ExcludedIPs: p, Header: "X-Real-IP"}, wantErr: "excluded_ips"},
		{name: "ipv4 prefix 33", c: Strategy{IPv4Prefix: 33}, wantErr: "ipv4_prefix"},
		{name: "ipv4 prefix negative", c: Strategy{IPv4Prefix: -1}, wantErr: "ipv4_prefix"},
		{name: "ipv6 prefix 129", c: Strategy{IPv6Prefix: 129}, wantErr: "ipv6_prefix"},
		{name: "invalid trusted prefix", c: Strategy{TrustedProxies: []netip.Prefix{{}}}, wantErr: "trusted_proxies"},
		{name: "invalid excluded prefix", c: Strategy{ExcludedIPs: []netip.Prefix{{}}}, wantErr: "excluded_ips"},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate = %v; want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate = %v; want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes([]string{"10.0.0.0/8", " 127.0.0.1 ", "::1", "10.1.2.3/16", "fe80::1%eth0", "::ffff:10.0.0.0/104", "2001:db8::/32"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "127.0.0.1/32", "::1/128", "10.1.0.0/16", "fe80::1/128", "10.0.0.0/8", "2001:db8::/32"}
	if len(got) != len(want) {
		t.Fatalf("ParsePrefixes = %v; want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("entry %d = %v; want %s", i, got[i], want[i])
		}
	}
	if p, err := ParsePrefixes(nil); err != nil || len(p) != 0 {
		t.Errorf("ParsePrefixes(nil) = %v, %v; want empty, nil", p, err)
	}
	for _, bad := range []string{"10.0.0.300", "10.0.0.0/33", "example.com", "", "10.0.0.0/8/8"} {
		_, err := ParsePrefixes([]string{"127.0.0.1", bad})
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("ParsePrefixes(%q) = %v; want an error naming it", bad, err)
		}
	}
}

// hostileForwardedFor returns a comma-separated list of n entries, the
// rightmost last, each made by entry(i) with i counted from the right (1 is
// the rightmost).
func hostileForwardedFor(n int, entry func(i int) string) string {
	var b strings.Builder
	for i := n; i >= 1; i-- {
		b.WriteString(entry(i))
		if i > 1 {
			b.WriteByte(',')
		}
	}
	return b.String()
}

func TestClientIPHostileHeader(t *testing.T) {
	const n = 10000
	trusted := mustPrefixes(t, "127.0.0.0/8")
	// Entries 1..n from the right: trusted proxies up to hop 5, then
	// distinct documentation addresses.
	mixed := func(i int) string {
		if i <= 5 {
			return "127.0.0." + strconv.Itoa(i)
		}
		return "198.51.100." + strconv.Itoa(i%256)
	}
	allTrusted := func(i int) string { return "127.0.0.3" }
	tests := []struct {
		name  string
		depth int
		hdr   string
		want  string
	}{
		{name: "rightmost untrusted", hdr: hostileForwardedFor(n, mixed), want: "198.51.100.6"},
		{name: "depth at the bound", depth: MaxForwardedHops, hdr: hostileForwardedFor(n, mixed), want: "198.51.100." + strconv.Itoa(MaxForwardedHops)},
		{name: "trusted beyond the bound", hdr: hostileForwardedFor(n, allTrusted), want: "127.0.0.1"},
		{name: "garbage everywhere", hdr: hostileForwardedFor(n, func(int) string { return "xxxxxx" }), want: "127.0.0.1"},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.hdr) < 64<<10 {
				t.Fatalf("header is %d bytes; want at least 64 KiB", len(tt.hdr))
			}
			c := &Strategy{TrustedProxies: trusted, Depth: tt.depth}
			r := coretest.NewRequest("127.0.0.1:1", "X-Forwarded-For", tt.hdr)
			if got, ok := c.Key(r); !ok || got != tt.want {
				t.Errorf("Key = %q, %v; want %q, true", got, ok, tt.want)
			}
		})
	}

	// The work, and so the allocations, must not grow with the header: a
	// hostile header costs what a header just longer than the bound costs.
	small := strings.Repeat("127.0.0.3,", MaxForwardedHops+8) + "127.0.0.3"
	huge := hostileForwardedFor(n, allTrusted)
	lines := make([]string, n)
	for i := range lines {
		lines[i] = "127.0.0.3"
	}
	c := &Strategy{TrustedProxies: trusted}
	rSmall := coretest.NewRequest("127.0.0.1:1", "X-Forwarded-For", small)
	rHuge := coretest.NewRequest("127.0.0.1:1", "X-Forwarded-For", huge)
	rLines := coretest.NewRequest("127.0.0.1:1")
	rLines.Header["X-Forwarded-For"] = lines
	if got, _ := c.Key(rLines); got != "127.0.0.1" {
		t.Errorf("%d header lines: Key = %q; want 127.0.0.1", n, got)
	}
	base := testing.AllocsPerRun(20, func() { c.Key(rSmall) })
	for name, r := range map[string]*http.Request{"one huge line": rHuge, "many lines": rLines} {
		got := testing.AllocsPerRun(20, func() { c.Key(r) })
		if got > base {
			t.Errorf("%s: %v allocations per Key; want no more than for a %d-entry header (%v)", name, got, MaxForwardedHops+9, base)
		}
	}
	if coretest.Interpreted() {
		t.Logf("interpreted: absolute allocation bounds not checked (%v per Key)", base)
		return
	}
	if base > 0 {
		t.Errorf("Key of a trusted chain: %v allocations; want 0", base)
	}
	c6 := &Strategy{TrustedProxies: trusted, IPv4Prefix: 24}
	rClient := coretest.NewRequest("127.0.0.1:1", "X-Forwarded-For", hostileForwardedFor(n, mixed))
	if got := testing.AllocsPerRun(20, func() { c6.Key(rClient) }); got > 1 {
		t.Errorf("Key of a grouped client behind a hostile header: %v allocations; want at most 1", got)
	}
	if got := testing.AllocsPerRun(20, func() { c6.Addr(rClient) }); got > 0 {
		t.Errorf("Addr behind a hostile header: %v allocations; want 0", got)
	}
}

func BenchmarkClientIPKey(b *testing.B) {
	trusted := mustPrefixes(b, "127.0.0.0/8")
	cases := []struct {
		name string
		c    *Strategy
		r    *http.Request
	}{
		{"peer", &Strategy{}, coretest.NewRequest("127.0.0.1:4711")},
		{"xff-3-hops", &Strategy{TrustedProxies: trusted}, coretest.NewRequest("127.0.0.1:4711", "X-Forwarded-For", "198.51.100.1, 203.0.113.7, 127.0.0.3")},
		{"xff-ipv6-64", &Strategy{TrustedProxies: trusted, IPv6Prefix: 64}, coretest.NewRequest("127.0.0.1:4711", "X-Forwarded-For", "2001:db8:1:2::7")},
		{"xff-hostile-10000", &Strategy{TrustedProxies: trusted}, coretest.NewRequest("127.0.0.1:4711", "X-Forwarded-For", strings.Repeat("127.0.0.3,", 9999)+"127.0.0.3")},
	}
	for _, bc := range cases {
		bc := bc
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, ok := bc.c.Key(bc.r); !ok {
					b.Fatal("no key")
				}
			}
		})
	}
}

func TestClientIPHostileForwarded(t *testing.T) {
	const n = 10000
	trusted := mustPrefixes(t, "127.0.0.0/8")
	elem := func(i int) string {
		if i <= 5 {
			return `for="127.0.0.` + strconv.Itoa(i) + `:80";proto=https`
		}
		return "for=198.51.100." + strconv.Itoa(i%256)
	}
	tests := []struct {
		name  string
		depth int
		hdr   string
		want  string
	}{
		{name: "rightmost untrusted", hdr: hostileForwardedFor(n, elem), want: "198.51.100.6"},
		{name: "depth at the bound", depth: MaxForwardedHops, hdr: hostileForwardedFor(n, elem), want: "198.51.100." + strconv.Itoa(MaxForwardedHops)},
		{name: "trusted beyond the bound", hdr: hostileForwardedFor(n, func(int) string { return "for=127.0.0.3" }), want: "127.0.0.1"},
		{name: "one endless element", hdr: strings.Repeat("for=198.51.100.1;", n), want: "127.0.0.1"},
		{name: "one endless quote", hdr: `for="` + strings.Repeat("198.51.100.1,", n) + `"`, want: "127.0.0.1"},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.hdr) < 64<<10 {
				t.Fatalf("header is %d bytes; want at least 64 KiB", len(tt.hdr))
			}
			c := &Strategy{TrustedProxies: trusted, Header: "Forwarded", Depth: tt.depth}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			r := coretest.NewRequest("127.0.0.1:1", "Forwarded", tt.hdr)
			if got, ok := c.Key(r); !ok || got != tt.want {
				t.Errorf("Key = %q, %v; want %q, true", got, ok, tt.want)
			}
			if coretest.Interpreted() {
				return
			}
			// Keys of IPv4 clients cost their string, of the peer none.
			want := 1.0
			if tt.want == "127.0.0.1" {
				want = 0
			}
			if got := testing.AllocsPerRun(20, func() { c.Key(r) }); got > want {
				t.Errorf("%v allocations per Key; want at most %v", got, want)
			}
		})
	}
}
