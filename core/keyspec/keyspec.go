// Package keyspec builds the key that a request is limited by, from an
// ordered list of its parts (client address, header, host, method, path,
// query parameter, cookie, constant), bounds its length, and says what
// becomes of a request without a key (MissingKey).
//
// It imports the standard library only, so that Traefik's Yaegi
// interpreter can run it unchanged.
package keyspec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/model"
)

// Spec builds a request's key from an ordered list of request parts. It
// is built by Parse and safe for concurrent use.
type Spec struct {
	parts []keyPart
	ip    *clientip.Strategy
	// ipv4: the key is client_ip alone, from the peer's address, with
	// IPv4 addresses in full; Key then handles an IPv4 peer inline. ipv6:
	// likewise for IPv6 addresses, which PeerKey6 handles.
	ipv4, ipv6 bool
	// fixed: every part is a constant, so the key is always constKey
	// (and constOK), computed once: a global limit's key costs a request
	// nothing under Yaegi.
	fixed    bool
	constKey string
	constOK  bool
}

// Shape describes the keys a Spec builds, for the request paths that
// build the commonest ones themselves (the Traefik lane's): it is read once,
// when such a path is made, so that a request reads no field of the spec.
type Shape struct {
	// PeerIPv4: the key is client_ip alone, from the peer's address, with
	// IPv4 addresses in full; an IPv4 peer's "ip:port" gives the key "ip".
	// PeerIPv6: likewise for IPv6 addresses, which PeerKey6 reads.
	PeerIPv4, PeerIPv6 bool
	// Client is the spec's Strategy when the key is the client's address
	// alone, else nil.
	Client *clientip.Strategy
	// Fixed: every part is a constant, so the key is always Const.
	Fixed bool
	Const string
}

// Shape returns the shape of k's keys.
func (k *Spec) Shape() Shape {
	s := Shape{PeerIPv4: k.ipv4, PeerIPv6: k.ipv6, Fixed: k.fixed, Const: k.constKey}
	if len(k.parts) == 1 && k.parts[0].kind == partClientIP {
		s.Client = k.ip
	}
	return s
}

// partKind is the kind of one key part.
type partKind int

const (
	partClientIP partKind = iota
	partHeader
	partHost
	partMethod
	partPath
	partQuery
	partCookie
	partConst
)

// keyPart is one parsed key part; arg is the canonical header name, the
// query parameter or cookie name, or the constant value.
type keyPart struct {
	kind partKind
	arg  string
}

// Parse parses the parts of a key, in order:
//
//	client_ip       the client address, as derived by ip (see [clientip.Strategy.Key])
//	header:<Name>   the first value of request header Name
//	host            the requested host, lowercased, without port, IPv6 brackets
//	                or the trailing dot of a fully qualified name
//	method          the request method
//	path            the URL path, decoded but not cleaned ("/a//b" stays)
//	query:<name>    the first value of query parameter name, decoded
//	cookie:<name>   the value of the first cookie named name
//	const:<value>   value itself: a key shared by every request (a global limit)
//
// A part that a request carries several times (a header on several lines,
// a query parameter or a cookie given twice, on one Cookie line or
// several) takes its first value, as [http.Header.Get], [url.Values.Get]
// and [http.Request.Cookie] read it: the value a Go upstream and Traefik's
// own rateLimit read, and never a join of the values, so that a client
// cannot make itself new keys by adding values. An empty first value is a
// missing part, whatever follows it. [Spec.Value] reads a part the same way.
//
// Kinds are lowercase; a header name is matched in any letter case, query
// parameter and cookie names exactly. Surrounding spaces are ignored. An
// empty or nil parts means client_ip alone. A nil ip means the zero
// [clientip.Strategy] (no trusted proxy); ip is validated here and must not be
// modified afterwards. Errors name the offending part.
func Parse(parts []string, ip *clientip.Strategy) (*Spec, error) {
	if ip == nil {
		ip = &clientip.Strategy{}
	}
	if err := ip.Validate(); err != nil {
		return nil, fmt.Errorf("client_ip: %w", err)
	}
	k := &Spec{ip: ip}
	k.ipv4 = len(ip.TrustedProxies) == 0 && !ip.AnyPeer && (ip.IPv4Prefix == 0 || ip.IPv4Prefix == 32)
	if len(parts) == 0 {
		k.parts = []keyPart{{kind: partClientIP}}
		k.ipv6 = k.ipv4 && (ip.IPv6Prefix == 0 || ip.IPv6Prefix == 128)
		return k, nil
	}
	k.parts = make([]keyPart, 0, len(parts))
	for _, raw := range parts {
		p, err := parseKeyPart(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("key part %q: %w", raw, err)
		}
		k.parts = append(k.parts, p)
	}
	k.ipv4 = k.ipv4 && len(k.parts) == 1 && k.parts[0].kind == partClientIP
	k.ipv6 = k.ipv4 && (ip.IPv6Prefix == 0 || ip.IPv6Prefix == 128)
	k.fixed = true
	for _, p := range k.parts {
		k.fixed = k.fixed && p.kind == partConst
	}
	if k.fixed {
		k.constKey, k.constOK = k.PartsKey(nil) // constants never read the request
	}
	return k, nil
}

func parseKeyPart(s string) (keyPart, error) {
	kind, arg, hasArg := strings.Cut(s, ":")
	noArg := func(p partKind) (keyPart, error) {
		if hasArg {
			return keyPart{}, fmt.Errorf("%s takes no argument", kind)
		}
		return keyPart{kind: p}, nil
	}
	named := func(p partKind, what string) (keyPart, error) {
		if arg == "" {
			return keyPart{}, fmt.Errorf("want %s:<%s>", kind, what)
		}
		return keyPart{kind: p, arg: arg}, nil
	}
	switch kind {
	case "client_ip":
		return noArg(partClientIP)
	case "host":
		return noArg(partHost)
	case "method":
		return noArg(partMethod)
	case "path":
		return noArg(partPath)
	case "header":
		if arg == "" {
			return keyPart{}, fmt.Errorf("want header:<Name>")
		}
		if !clientip.IsToken(arg) {
			return keyPart{}, fmt.Errorf("header name %q: not a valid header name", arg)
		}
		name := http.CanonicalHeaderKey(arg)
		if name == "Host" {
			return keyPart{}, fmt.Errorf("use the host part: Go moves the Host header to Request.Host")
		}
		return keyPart{kind: partHeader, arg: name}, nil
	case "query":
		return named(partQuery, "name")
	case "cookie":
		if arg != "" && !clientip.IsToken(arg) {
			return keyPart{}, fmt.Errorf("cookie name %q: not a valid cookie name", arg)
		}
		return named(partCookie, "name")
	case "const":
		return named(partConst, "value")
	}
	return keyPart{}, fmt.Errorf("unknown kind %q (want client_ip, header:<Name>, host, method, path, query:<name>, cookie:<name> or const:<value>)", kind)
}

// Key returns r's key, bounded by [BoundKey]. It reports false when any part
// is missing or empty (no such header, query parameter or cookie, no usable
// client address); see [MissingKey] for what to do then.
//
// A single part's key is its value; one that begins with byte 0x00 or 0x01
// gets a 0x01 prefix, so that no key begins with 0x00 (a prefix reserved for
// [SharedKey]). Several parts are encoded as
// "<len>:<value>|<len>:<value>...", lengths in decimal bytes, so distinct
// value lists never share a key. The key may share memory with the request;
// a store that keeps it beyond the request should copy it.
func (k *Spec) Key(r *http.Request) (string, bool) {
	if k.ipv4 {
		// The common key, an IPv4 peer's address, in two calls of the
		// standard library: an unbracketed ip:port that netip accepts is
		// a canonical dotted quad and a port, so the text before the port
		// is the key. Anything else takes the general path.
		remote := r.RemoteAddr
		if remote != "" && remote[0] != '[' {
			if _, err := netip.ParseAddrPort(remote); err == nil {
				return remote[:strings.LastIndexByte(remote, ':')], true
			}
		} else if k.ipv6 && remote != "" {
			if key, ok := PeerKey6(remote); ok {
				return key, true
			}
		}
	}
	if k.fixed {
		return k.constKey, k.constOK
	}
	return k.PartsKey(r)
}

// PeerKey6 is the key of a bracketed IPv6 peer "[addr]:port" for a
// Spec whose keys are of Shape PeerIPv6: the address unmapped, without zone, in
// full, as clientip.Strategy.Key makes it, in five calls of the standard library
// instead of Strategy.Key's dozen interpreted frames. ok is false when remote
// is not such an address.
func PeerKey6(remote string) (string, bool) {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return "", false
	}
	return ap.Addr().Unmap().WithZone("").String(), true
}

// PartsKey is Key but for its fast path (an IPv4 or IPv6 peer's address,
// a constant key): the key built from the parts. It is for request paths
// that have taken that fast path themselves. Under Yaegi, entering a
// function costs tens of nanoseconds for every value in its body, executed
// or not, so Key keeps only its fast path.
func (k *Spec) PartsKey(r *http.Request) (string, bool) {
	if len(k.parts) > 1 {
		return composite(k, r)
	}
	// One part. The common kinds are handled inline: under Yaegi every
	// interpreted call costs about a microsecond.
	p := &k.parts[0]
	var v string
	switch p.kind {
	case partClientIP:
		// An address or prefix: short, and never begins with 0x00.
		return k.ip.Key(r)
	case partHeader:
		if vs := r.Header[p.arg]; len(vs) > 0 {
			v = vs[0]
		}
	default:
		v = partValue(k, p, r)
	}
	if v == "" {
		return "", false
	}
	if v[0] <= 1 {
		v = "\x01" + v
	}
	if len(v) > MaxKeyLength {
		v = digestKey(v)
	}
	return v, true
}

// composite builds the key of several parts.
func composite(k *Spec, r *http.Request) (string, bool) {
	values := make([]string, len(k.parts))
	for i := range k.parts {
		if values[i] = partValue(k, &k.parts[i], r); values[i] == "" {
			return "", false
		}
	}
	return JoinKey(values), true
}

// JoinKey encodes the values of a key of several parts unambiguously, as
// "<len>:<value>|<len>:<value>...", lengths in decimal bytes, so that two
// distinct lists of values never share a key ("a b"+"c" is not "a"+"b c"),
// and bounds the result with [BoundKey]. Spec.Key uses it, and hosts
// that build keys from several values of their own (Caddy's placeholders)
// must too. The key never begins with 0x00 or 0x01.
// Plain concatenation costs two allocations more than a strings.Builder
// when compiled, but under Yaegi it takes half the time: the Builder's
// every method is a call.
func JoinKey(values []string) string {
	key := ""
	for i, v := range values {
		if i > 0 {
			key += "|"
		}
		key += strconv.Itoa(len(v)) + ":" + v
	}
	return BoundKey(key)
}

// Value returns the value of k's first part for r, or "" when r lacks
// it: as Key reads it (of a part that r carries several times, the first
// value; see Parse), but neither prefixed nor bounded. It is for a host
// that assembles keys of its own from single parts that it parses with
// Parse (the Caddy module's key templates).
func (k *Spec) Value(r *http.Request) string { return partValue(k, &k.parts[0], r) }

// partValue returns the value of one part for r, or "" when it is missing:
// of a header, query parameter or cookie given several times, the first
// (Parse says why). k is read for client_ip only.
func partValue(k *Spec, p *keyPart, r *http.Request) string {
	switch p.kind {
	case partClientIP:
		v, _ := k.ip.Key(r)
		return v
	case partHeader:
		if vs := r.Header[p.arg]; len(vs) > 0 {
			return vs[0]
		}
	case partHost:
		return HostKey(r.Host)
	case partMethod:
		if r.Method == "" {
			return http.MethodGet // Request.Method documents "" as GET
		}
		return r.Method
	case partPath:
		if r.URL != nil {
			return r.URL.Path
		}
	case partQuery:
		if r.URL != nil {
			return queryValue(r.URL.RawQuery, p.arg)
		}
	case partCookie:
		if c, err := r.Cookie(p.arg); err == nil {
			return c.Value
		}
	case partConst:
		return p.arg
	}
	return ""
}

// HostKey is a key's value for the Host value host: lowercased, without
// port or brackets, and without the trailing dot of a fully qualified name,
// so that "Example.com.:443" and "example.com" are one key. A Spec's
// host part and the Caddy module's {http.request.host} read it.
func HostKey(host string) string {
	h := strings.ToLower(stripPort(host))
	if len(h) > 1 && h[len(h)-1] == '.' {
		h = h[:len(h)-1]
	}
	return h
}

// stripPort removes the port from a Host value and the brackets around an
// IPv6 literal: "Example.com:8080" → "Example.com", "[::1]:443" → "::1".
func stripPort(host string) string {
	if len(host) > 0 && host[0] == '[' {
		if end := strings.IndexByte(host, ']'); end > 0 {
			return host[1:end]
		}
		return host
	}
	if i := strings.IndexByte(host, ':'); i >= 0 && strings.IndexByte(host[i+1:], ':') < 0 {
		return host[:i]
	}
	return host
}

// queryValue returns the decoded value of the first parameter of the raw
// query whose decoded name is name, like url.ParseQuery(raw).Get(name) but
// without building the whole map: it allocates only to decode the value it
// returns. Pairs with malformed escapes are skipped, as ParseQuery does;
// pairs containing a semicolon, which ParseQuery rejects, are skipped too.
func queryValue(raw, name string) string {
	for raw != "" {
		pair := raw
		if i := strings.IndexByte(raw, '&'); i >= 0 {
			pair, raw = raw[:i], raw[i+1:]
		} else {
			raw = ""
		}
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		key, val, _ := strings.Cut(pair, "=")
		if !unescapedEquals(key, name) {
			continue
		}
		if strings.IndexByte(val, '%') < 0 && strings.IndexByte(val, '+') < 0 {
			return val
		}
		if v, err := url.QueryUnescape(val); err == nil {
			return v
		}
	}
	return ""
}

// unescapedEquals reports whether the query-escaped s decodes to name,
// without allocating; a malformed escape never matches.
func unescapedEquals(s, name string) bool {
	j := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '+':
			c = ' '
		case '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
		}
		if j >= len(name) || name[j] != c {
			return false
		}
		j++
	}
	return j == len(name)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// MaxKeyLength is the longest raw key kept verbatim; longer keys are replaced
// by a fixed-length digest (see [BoundKey]), so a 64 KiB header costs
// no more memory than a short one.
const MaxKeyLength = 128

// BoundKey returns key unchanged if it is at most MaxKeyLength bytes long,
// else a 33-byte digest of it: "#" followed by the first 32 hexadecimal
// digits (128 bits) of its SHA-256. It reads a long key in fixed-size
// chunks, so a 64 KiB key costs no allocation proportional to its length.
func BoundKey(key string) string {
	if len(key) <= MaxKeyLength {
		return key
	}
	return digestKey(key)
}

// digestKey returns BoundKey's digest of key. It is apart from BoundKey
// because Yaegi allocates a function's local arrays on every call, even on
// paths that do not use them.
func digestKey(key string) string {
	h := sha256.New()
	var chunk [4096]byte
	for off := 0; off < len(key); {
		n := copy(chunk[:], key[off:])
		h.Write(chunk[:n])
		off += n
	}
	var sum [sha256.Size]byte
	var out [33]byte
	out[0] = '#'
	hex.Encode(out[1:], h.Sum(sum[:0])[:16])
	return string(out[:])
}

// MissingKey says what to do with a request whose key cannot be built
// ([Spec.Key] reports false). The zero value is MissingSkip.
type MissingKey int

const (
	// MissingSkip exempts the request from the limit.
	MissingSkip MissingKey = iota
	// MissingShared counts every request without a key in one bucket
	// shared by all of them.
	MissingShared
)

// SharedKey is MissingShared's key. Built keys never begin with 0x00
// (see Spec.Key), so it collides with none of them.
const SharedKey = "\x00missing"

// ParseMissingKey parses a policy name: "skip" (also the empty string) or
// "shared".
func ParseMissingKey(s string) (MissingKey, error) {
	switch s {
	case "", "skip":
		return MissingSkip, nil
	case "shared":
		return MissingShared, nil
	}
	return 0, model.Refuse("on_missing_key", s, "want skip or shared")
}
