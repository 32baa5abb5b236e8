package keyspec

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/internal/coretest"
)

// keyRequest returns a request from 127.0.0.1 for target ("/path?query")
// with the given header lines, given as name, value pairs.
func keyRequest(t testing.TB, method, host, target string, header ...string) *http.Request {
	t.Helper()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &http.Request{Method: http.MethodGet, RemoteAddr: "127.0.0.1:4711", Header: http.Header{}}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	r.Method, r.Host, r.URL = method, host, u
	return r
}

func TestParseKeySpecErrors(t *testing.T) {
	tests := []struct {
		parts   []string
		wantErr string
	}{
		{[]string{"hedaer:X"}, `key part "hedaer:X": unknown kind "hedaer"`},
		{[]string{"client_ip", "Host"}, `key part "Host": unknown kind "Host"`},
		{[]string{""}, `key part "": unknown kind ""`},
		{[]string{"header:"}, `key part "header:": want header:<Name>`},
		{[]string{"header:X Key"}, `key part "header:X Key": header name "X Key"`},
		{[]string{"header:host"}, `key part "header:host": use the host part`},
		{[]string{"client_ip:24"}, `key part "client_ip:24": client_ip takes no argument`},
		{[]string{"method:GET"}, `key part "method:GET": method takes no argument`},
		{[]string{"query:"}, `key part "query:": want query:<name>`},
		{[]string{"cookie:"}, `key part "cookie:": want cookie:<name>`},
		{[]string{"cookie:a=b"}, `key part "cookie:a=b": cookie name "a=b"`},
		{[]string{"const:"}, `key part "const:": want const:<value>`},
	}
	for _, tt := range tests {
		_, err := Parse(tt.parts, nil)
		if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
			t.Errorf("ParseKeySpec(%q) = %v; want an error starting %q", tt.parts, err, tt.wantErr)
		}
	}
	if _, err := Parse(nil, &clientip.Strategy{IPv4Prefix: 40}); err == nil || !strings.Contains(err.Error(), "ipv4_prefix") {
		t.Errorf("ParseKeySpec with an invalid clientip.Strategy = %v; want its error", err)
	}
}

func TestKeySpecKey(t *testing.T) {
	r := keyRequest(t, http.MethodPost, "Example.COM:8443", "/api/v1%2Fx/a%20b?a=1&b=x%20y&b=2&api%5Fkey=k+1&e=&bad=%zz&bad=ok",
		"X-Api-Key", "secret",
		"X-Api-Key", "second",
		"X-Empty", "",
		"Cookie", "session=abc; theme=dark",
	)
	tests := []struct {
		parts []string
		want  string // "" means ok=false
	}{
		{nil, "127.0.0.1"},
		{[]string{}, "127.0.0.1"},
		{[]string{"client_ip"}, "127.0.0.1"},
		{[]string{" client_ip "}, "127.0.0.1"},
		{[]string{"header:X-Api-Key"}, "secret"},
		{[]string{"header:x-api-key"}, "secret"},
		{[]string{"header:X-Missing"}, ""},
		{[]string{"header:X-Empty"}, ""},
		{[]string{"host"}, "example.com"},
		{[]string{"method"}, "POST"},
		{[]string{"path"}, "/api/v1/x/a b"},
		{[]string{"query:a"}, "1"},
		{[]string{"query:b"}, "x y"},
		{[]string{"query:api_key"}, "k 1"},
		{[]string{"query:e"}, ""},
		{[]string{"query:bad"}, "ok"},
		{[]string{"query:missing"}, ""},
		{[]string{"query:A"}, ""},
		{[]string{"cookie:session"}, "abc"},
		{[]string{"cookie:missing"}, ""},
		{[]string{"const:global"}, "global"},
		{[]string{"const:\x00missing"}, "\x01\x00missing"},
		{[]string{"client_ip", "method"}, "9:127.0.0.1|4:POST"},
		{[]string{"client_ip", "header:X-Missing"}, ""},
		{[]string{"header:X-Api-Key", "query:b", "host", "path"}, "6:secret|3:x y|11:example.com|13:/api/v1/x/a b"},
	}
	for _, tt := range tests {
		k, err := Parse(tt.parts, nil)
		if err != nil {
			t.Errorf("ParseKeySpec(%q): %v", tt.parts, err)
			continue
		}
		got, ok := k.Key(r)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("%q: Key = %q, %v; want %q, %v", tt.parts, got, ok, tt.want, tt.want != "")
		}
	}
}

// TestFirstValue: a header, query parameter or cookie that a request
// carries several times gives its first value, the one Go's readers give
// (http.Header.Get, url.Values.Get, http.Request.Cookie), alone, in a key
// of several parts and through Spec.Value; values the client adds after it
// change no key.
func TestFirstValue(t *testing.T) {
	requests := []*http.Request{
		keyRequest(t, http.MethodGet, "h", "/?k=alice&k=n1", "X-Api-Key", "alice", "X-Api-Key", "n1", "Cookie", "s=alice; s=n1"),
		keyRequest(t, http.MethodGet, "h", "/?k=alice&K=n2&k=n2&k", "X-Api-Key", "alice", "X-Api-Key", "n2", "X-Api-Key", "n3",
			"Cookie", "S=n2; s=alice", "Cookie", "s=n3"),
		keyRequest(t, http.MethodGet, "h", "/?k=al%69ce&k=", "x-api-key", "alice", "X-API-KEY", "", "Cookie", "s=\"alice\"", "Cookie", "s=n4"),
		keyRequest(t, http.MethodGet, "h", "/?k;x=n5&k=alice&k=n5", "X-Api-Key", "alice, n5", "Cookie", "s=alice;s=n5"),
		keyRequest(t, http.MethodGet, "h", "/?k=&k=bob", "X-Api-Key", "", "X-Api-Key", "bob", "Cookie", "s=; s=bob"),
	}
	// What Go's readers give: the first four requests' query parameter
	// and cookie are alice, their header alice but for the fourth's one
	// line "alice, n5", which Header.Get gives whole; the last request's
	// first values are empty.
	wantHeader := []string{"alice", "alice", "alice", "alice, n5", ""}
	header := mustSpec(t, "header:X-API-Key")
	query := mustSpec(t, "query:k")
	cookie := mustSpec(t, "cookie:s")
	composite, err := Parse([]string{"header:X-Api-Key", "query:k", "cookie:s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range requests {
		q, _ := url.ParseQuery(r.URL.RawQuery)
		c := ""
		if ck, err := r.Cookie("s"); err == nil {
			c = ck.Value
		}
		var values []string
		if r.Header.Get("X-Api-Key") != wantHeader[i] || i < 4 && (q.Get("k") != "alice" || c != "alice") {
			t.Fatalf("request %d: Go reads %q, %q, %q; the test expects %q, alice, alice", i, r.Header.Get("X-Api-Key"), q.Get("k"), c, wantHeader[i])
		}
		for _, tc := range []struct {
			part *Spec
			kind string
			want string
		}{{header, "header", wantHeader[i]}, {query, "query", q.Get("k")}, {cookie, "cookie", c}} {
			values = append(values, tc.want)
			if got := tc.part.Value(r); got != tc.want {
				t.Errorf("request %d: %s Value = %q, want Go's %q", i, tc.kind, got, tc.want)
			}
			if got, ok := tc.part.Key(r); got != tc.want || ok != (tc.want != "") {
				t.Errorf("request %d: %s Key = %q, %v, want Go's %q", i, tc.kind, got, ok, tc.want)
			}
		}
		want := ""
		if i < 4 {
			want = JoinKey(values)
		}
		if got, _ := composite.Key(r); got != want {
			t.Errorf("request %d: composite Key = %q, want %q", i, got, want)
		}
	}
}

func mustSpec(t *testing.T, part string) *Spec {
	t.Helper()
	k, err := Parse([]string{part}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSpecValue(t *testing.T) {
	r := keyRequest(t, http.MethodPost, "Example.COM.", "/p?x=1")
	r.RemoteAddr = "192.0.2.1:1234"
	for s, want := range map[string]string{"host": "example.com", "method": "POST", "path": "/p", "query:x": "1", "const:c": "c", "client_ip": "192.0.2.1"} {
		if got := mustSpec(t, " "+s+" ").Value(r); got != want {
			t.Errorf("Parse(%q).Value = %q, want %q", s, got, want)
		}
	}
}

func TestKeySpecUsesClientIP(t *testing.T) {
	trusted, err := clientip.ParsePrefixes([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ip := &clientip.Strategy{TrustedProxies: trusted, IPv4Prefix: 24}
	k, err := Parse([]string{"client_ip", "path"}, ip)
	if err != nil {
		t.Fatal(err)
	}
	r := keyRequest(t, http.MethodGet, "localhost", "/x", "X-Forwarded-For", "203.0.113.7")
	if got, ok := k.Key(r); !ok || got != "14:203.0.113.0/24|2:/x" {
		t.Errorf("Key = %q, %v; want %q, true", got, ok, "14:203.0.113.0/24|2:/x")
	}
	r.RemoteAddr = "@"
	if got, ok := k.Key(r); ok {
		t.Errorf("Key without a client address = %q, true; want false", got)
	}
}

func TestKeySpecHost(t *testing.T) {
	k, err := Parse([]string{"host"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{
		"example.com":      "example.com",
		"EXAMPLE.com:80":   "example.com",
		"example.com:":     "example.com",
		"127.0.0.1:8080":   "127.0.0.1",
		"[::1]:443":        "::1",
		"[::1]":            "::1",
		"::1":              "::1",
		"":                 "",
		":8080":            "",
		"[2001:DB8::1]:80": "2001:db8::1",
		// A fully qualified name is the same host as without its dot.
		"example.com.":      "example.com",
		"Example.COM.:8443": "example.com",
		".":                 ".",
	} {
		r := keyRequest(t, http.MethodGet, host, "/")
		got, ok := k.Key(r)
		if ok != (want != "") || got != want {
			t.Errorf("host %q: Key = %q, %v; want %q", host, got, ok, want)
		}
	}
}

func TestKeySpecMethodDefault(t *testing.T) {
	k, err := Parse([]string{"method"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := k.Key(keyRequest(t, "", "localhost", "/")); !ok || got != http.MethodGet {
		t.Errorf("empty Method: Key = %q, %v; want GET, true", got, ok)
	}
}

// Distinct value lists must never share a key, however the values are
// chosen.
func TestKeySpecCompositeNoCollision(t *testing.T) {
	k, err := Parse([]string{"header:A", "header:B"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pairs := [][2]string{
		{"a|b", "c"}, {"a", "b|c"},
		{"1:a", "b"}, {"1", "a|1:b"}, {"a|1:b", "1"},
		{"a:", "b"}, {"a", ":b"},
		{"ab", "c"}, {"a", "bc"},
		{"3:a|b", "1:c"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		r := keyRequest(t, http.MethodGet, "localhost", "/", "A", p[0], "B", p[1])
		key, ok := k.Key(r)
		if !ok {
			t.Fatalf("%q: no key", p)
		}
		if prev, dup := seen[key]; dup {
			t.Errorf("%q and %q share key %q", prev, p, key)
		}
		seen[key] = p
	}
}

func TestKeySpecNeverReservedPrefix(t *testing.T) {
	k, err := Parse([]string{"path"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for value, want := range map[string]string{
		"\x00missing": "\x01\x00missing",
		"\x01a":       "\x01\x01a",
		"\x02a":       "\x02a",
	} {
		r := keyRequest(t, http.MethodGet, "localhost", "/")
		r.URL.Path = value
		got, ok := k.Key(r)
		if !ok || got != want {
			t.Errorf("path %q: Key = %q, %v; want %q", value, got, ok, want)
		}
		if got == SharedKey {
			t.Errorf("path %q: the key is the shared missing key", value)
		}
	}
}

func TestKeySpecHugeHeaderIsBounded(t *testing.T) {
	huge := strings.Repeat("a", 64<<10)
	for _, parts := range [][]string{{"header:X-Huge"}, {"client_ip", "header:X-Huge"}} {
		k, err := Parse(parts, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := keyRequest(t, http.MethodGet, "localhost", "/", "X-Huge", huge)
		got, ok := k.Key(r)
		if !ok || len(got) > MaxKeyLength || got[0] != '#' {
			t.Errorf("%q: Key = %.40q (%d bytes), %v; want a digest of at most %d bytes", parts, got, len(got), ok, MaxKeyLength)
		}
	}
}

func TestKeySpecAllocations(t *testing.T) {
	r := keyRequest(t, http.MethodGet, "example.com:8443", "/api?a=1&b=2", "X-Api-Key", "secret", "Cookie", "session=abc")
	allocs := map[string]float64{
		"client_ip":        0,
		"header:X-Api-Key": 0,
		"host":             0,
		"method":           0,
		"path":             0,
		"query:b":          0,
		"const:global":     0,
	}
	interpreted := coretest.Interpreted()
	for part, want := range allocs {
		k, err := Parse([]string{part}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := testing.AllocsPerRun(50, func() { k.Key(r) })
		if interpreted {
			t.Logf("interpreted: %s: %v allocations per Key (not checked)", part, got)
			continue
		}
		if got > want {
			t.Errorf("%s: %v allocations per Key; want %v", part, got, want)
		}
	}
}

func TestBoundKey(t *testing.T) {
	exact := strings.Repeat("k", MaxKeyLength)
	if got := BoundKey(exact); got != exact {
		t.Errorf("BoundKey of %d bytes changed it", MaxKeyLength)
	}
	if got := BoundKey(""); got != "" {
		t.Errorf("BoundKey(\"\") = %q", got)
	}
	for _, n := range []int{MaxKeyLength + 1, 4095, 4096, 4097, 64 << 10} {
		long := strings.Repeat("k", n)
		sum := sha256.Sum256([]byte(long))
		want := "#" + hex.EncodeToString(sum[:])[:32]
		if got := BoundKey(long); got != want {
			t.Errorf("BoundKey of %d bytes = %q; want %q", n, got, want)
		}
	}
	a, b := BoundKey(exact+"a"), BoundKey(exact+"b")
	if a == b || len(a) != 33 {
		t.Errorf("BoundKey: %q and %q; want distinct 33-byte digests", a, b)
	}
	huge := strings.Repeat("k", 64<<10)
	got := testing.AllocsPerRun(20, func() { BoundKey(huge) })
	if coretest.Interpreted() {
		t.Logf("interpreted: %v allocations per BoundKey of 64 KiB (not checked)", got)
	} else if got > 2 {
		t.Errorf("BoundKey of 64 KiB: %v allocations; want at most 2", got)
	}
}

func TestParseMissingKey(t *testing.T) {
	for s, want := range map[string]MissingKey{"": MissingSkip, "skip": MissingSkip, "shared": MissingShared} {
		got, err := ParseMissingKey(s)
		if err != nil || got != want {
			t.Errorf("ParseMissingKey(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, bad := range []string{"Skip", "share", "deny"} {
		if _, err := ParseMissingKey(bad); err == nil || !strings.Contains(err.Error(), `"`+bad+`"`) {
			t.Errorf("ParseMissingKey(%q) = %v; want an error naming it", bad, err)
		}
	}
}

func BenchmarkKeySpecHeader(b *testing.B) {
	r := keyRequest(b, http.MethodGet, "example.com", "/api", "X-Api-Key", "0123456789abcdef")
	for _, parts := range [][]string{{"header:X-Api-Key"}, {"client_ip", "header:X-Api-Key"}} {
		k, err := Parse(parts, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strings.Join(parts, "+"), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, ok := k.Key(r); !ok {
					b.Fatal("no key")
				}
			}
		})
	}
}

func TestClientIPGroupKey(t *testing.T) {
	c := &clientip.Strategy{IPv4Prefix: 24, IPv6Prefix: 64}
	for in, want := range map[string]string{
		"203.0.113.7":          "203.0.113.0/24",
		"::ffff:203.0.113.7":   "203.0.113.0/24",
		"2001:db8:1:2:3::4":    "2001:db8:1:2::/64",
		"2001:db8:1:2:3::4%e0": "2001:db8:1:2::/64",
	} {
		if got := c.GroupKey(netip.MustParseAddr(in)); got != want {
			t.Errorf("GroupKey(%s) = %q, want %q", in, got, want)
		}
	}
	if got := (&clientip.Strategy{}).GroupKey(netip.MustParseAddr("::ffff:10.0.0.1")); got != "10.0.0.1" {
		t.Errorf("ungrouped GroupKey = %q, want 10.0.0.1", got)
	}
}
