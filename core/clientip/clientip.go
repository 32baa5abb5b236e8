// Package clientip finds the address of the client that sent a request:
// the direct peer, or, behind proxies it trusts, the client a forwarding
// header (X-Forwarded-For, Forwarded, X-Real-IP) names, and groups it by
// network into a request key. A header from a peer it does not trust never
// chooses the address.
//
// It imports the standard library only, so that Traefik's Yaegi
// interpreter can run it unchanged.
package clientip

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/core/model"
)

// MaxForwardedHops is the most entries of a forwarding header (addresses
// of X-Forwarded-For, elements of Forwarded) [Strategy] examines, counted
// from the right. Entries further left are never looked at, so a hostile
// header of any length costs the same bounded work and no allocation
// proportional to its size. A chain of more than this many trusted or
// excluded proxies is treated like a header that names no client.
const MaxForwardedHops = 32

// XForwardedFor is the default forwarding header, a list of addresses.
const XForwardedFor = "X-Forwarded-For"

// The other forwarding headers a Strategy reads in their own ways, in
// canonical form.
const (
	headerRealIP    = "X-Real-Ip" // canonical form of X-Real-IP
	headerForwarded = "Forwarded"
)

// MaxHopLength is the longest X-Forwarded-For entry worth parsing: a
// bracketed IPv6 address with an IPv4 tail, a zone and a port fits easily.
// Longer entries are garbage and are rejected before parsing.
const MaxHopLength = 96

// maxElementLength is the longest Forwarded element worth parsing: its
// for=, by=, host= and proto= parameters with addresses and a host name.
// A longer element is garbage, and the walk over the header stops there
// without looking further left.
const maxElementLength = 256

// Strategy derives the address of the client that sent a request.
//
// The direct peer (the IP of Request.RemoteAddr) is the client unless it is
// one of TrustedProxies; only then is the forwarding header consulted, so a
// header sent by an untrusted peer can never choose the address. When the
// peer is trusted but the header is absent, malformed, names no client
// within [MaxForwardedHops] entries, or is shorter than Depth, the peer's
// own address is the client: every request relayed that way shares the
// proxy's address rather than being attributed to an address the header
// does not establish.
//
// Addresses are normalized: IPv4-mapped IPv6 addresses are unmapped and IPv6
// zones are dropped. The zero Strategy trusts no proxy and keys every
// request by its peer's full address. A Strategy must pass Validate before
// use and must not be modified afterwards; it is then safe for concurrent
// use.
type Strategy struct {
	// TrustedProxies are the direct peers whose forwarding header is
	// believed; when walking X-Forwarded-For from the right they are also
	// skipped. Empty: the header is never believed, unless AnyPeer.
	TrustedProxies []netip.Prefix
	// AnyPeer believes the forwarding header from every peer, as Traefik's
	// built-in middlewares do: for a host that has already removed the
	// header of every peer it does not trust (Traefik's entryPoint, with
	// forwardedHeaders.trustedIPs). The walk from the right then skips
	// only TrustedProxies and ExcludedIPs.
	AnyPeer bool
	// Header names the forwarding header, in any letter case; it is the
	// only header read. "X-Forwarded-For" (the default, when empty) is a
	// comma-separated list of addresses, each proxy appending its peer's;
	// so is any other name but these two (such as a CDN's own header).
	// "Forwarded" is RFC 7239's list of elements, each proxy appending
	// one whose for= parameter names its peer: an element whose for= is
	// not an IP address ("unknown", an obfuscated identifier, none) ends
	// the walk as a malformed entry does. "X-Real-IP" is one address, set
	// by the nearest proxy (of several lines, the last one counts).
	Header string
	// Depth, like Traefik's ipStrategy.depth, selects the Depth-th entry
	// of the header counted from the right (1 is the rightmost, the
	// address the trusted peer itself appended); empty entries count as
	// positions. Zero walks the entries from the right, skipping those
	// in TrustedProxies or ExcludedIPs, and takes the first other address
	// (the "rightmost untrusted" rule); if every entry is skipped, the
	// leftmost one is the client, as with NGINX's real_ip_recursive.
	// At most MaxForwardedHops. Not with X-Real-IP.
	Depth int
	// ExcludedIPs, like Traefik's ipStrategy.excludedIPs, are skipped, in
	// addition to TrustedProxies, when walking the header from the right.
	// They are not trusted as peers. Only with Depth 0, not with
	// X-Real-IP.
	ExcludedIPs []netip.Prefix
	// IPv4Prefix and IPv6Prefix group client addresses by network for
	// Key: 24 keys an IPv4 client by its /24, 64 an IPv6 client by its /64.
	// Zero, or the full length (32 or 128), keys by the full address.
	IPv4Prefix, IPv6Prefix int

	// hdr is Header in canonical form when it names a list of addresses
	// other than X-Forwarded-For, else "" (set by Validate).
	hdr string
	// realIP and rfc7239: Header names X-Real-IP or Forwarded (set by
	// Validate), so that a request does not compare header names.
	realIP, rfc7239 bool
}

// ParsePrefixes parses a list of CIDR prefixes ("10.0.0.0/8",
// "2001:db8::/32") and bare addresses ("127.0.0.1" means 127.0.0.1/32,
// "::1" means ::1/128). Surrounding spaces are ignored, host bits are
// cleared, a zone on a bare address is dropped, and IPv4-mapped IPv6
// prefixes ("::ffff:10.0.0.0/104") become the IPv4 prefixes they denote,
// because [Strategy] unmaps addresses before matching them. The error names
// the first bad entry.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, raw := range list {
		s := strings.TrimSpace(raw)
		if s == "" {
			return nil, fmt.Errorf("prefix %q: empty entry", raw)
		}
		var p netip.Prefix
		if strings.IndexByte(s, '/') >= 0 {
			var err error
			p, err = netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("prefix %q: not a CIDR prefix or an IP address", raw)
			}
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("prefix %q: not a CIDR prefix or an IP address", raw)
			}
			a = a.WithZone("")
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Validate checks c; its error is a *FieldError naming the field at
// fault. It does not modify c's settings.
func (c *Strategy) Validate() error {
	for _, p := range c.TrustedProxies {
		if !p.IsValid() {
			return model.Refuse("trusted_proxies", p.String(), "invalid prefix")
		}
	}
	for _, p := range c.ExcludedIPs {
		if !p.IsValid() {
			return model.Refuse("excluded_ips", p.String(), "invalid prefix")
		}
	}
	hdr := XForwardedFor
	if c.Header != "" {
		if !IsToken(c.Header) {
			return model.Refuse("header", c.Header, "not a valid header name")
		}
		hdr = http.CanonicalHeaderKey(c.Header)
	}
	realIP := hdr == headerRealIP
	if c.Depth < 0 || c.Depth > MaxForwardedHops {
		return model.Refuse("depth", strconv.Itoa(c.Depth), "must be between 0 and "+strconv.Itoa(MaxForwardedHops))
	}
	if realIP && c.Depth != 0 {
		return model.Refuse("depth", "", "applies to a list of addresses, such as X-Forwarded-For, not to X-Real-IP")
	}
	if len(c.ExcludedIPs) > 0 {
		if realIP {
			return model.Refuse("excluded_ips", "", "apply to a list of addresses, such as X-Forwarded-For, not to X-Real-IP")
		}
		if c.Depth != 0 {
			return model.Refuse("excluded_ips", "", "only apply when depth is 0 (Traefik silently ignores them when depth is set; sluice refuses)")
		}
	}
	if c.IPv4Prefix < 0 || c.IPv4Prefix > 32 {
		return model.Refuse("ipv4_prefix", strconv.Itoa(c.IPv4Prefix), "must be between 0 and 32")
	}
	if c.IPv6Prefix < 0 || c.IPv6Prefix > 128 {
		return model.Refuse("ipv6_prefix", strconv.Itoa(c.IPv6Prefix), "must be between 0 and 128")
	}
	c.hdr, c.realIP, c.rfc7239 = "", realIP, hdr == headerForwarded
	if hdr != XForwardedFor && !realIP && !c.rfc7239 {
		c.hdr = hdr
	}
	return nil
}

// Addr returns the client's full address (before IPv4Prefix/IPv6Prefix
// grouping), unmapped and without zone. It reports false only when the
// peer address, Request.RemoteAddr, is not an IP address (as for a Unix
// socket listener); a forwarding header is never needed for an answer.
func (c *Strategy) Addr(r *http.Request) (netip.Addr, bool) {
	a, _, ok := clientAddr(c, r)
	return a, ok
}

// Key returns the client's address grouped by IPv4Prefix or IPv6Prefix, as
// text: "203.0.113.0/24" for a group, "203.0.113.7" for a full address. It
// reports false when Addr does. It allocates only the returned string, and
// not even that for an IPv4 peer keyed by its full address.
func (c *Strategy) Key(r *http.Request) (string, bool) {
	a, text, ok := clientAddr(c, r)
	if !ok {
		return "", false
	}
	return groupKey(c, a, text), true
}

// GroupKey returns the key of the client address a, grouped by IPv4Prefix
// or IPv6Prefix as Key groups it. It is for hosts that derive the client
// address themselves, such as Caddy, whose {client_ip} honours its own
// trusted_proxies.
func (c *Strategy) GroupKey(a netip.Addr) string {
	return groupKey(c, a.Unmap().WithZone(""), "")
}

// Relayed returns the client that the forwarding header h names, read as
// Key reads it after a trusted peer (Header, Depth, TrustedProxies,
// ExcludedIPs), whoever the peer is. It is for hosts that decide
// themselves whether the peer is a trusted proxy, such as Caddy with its
// trusted_proxies. It reports false when the header names no client
// (absent, malformed, too short for Depth); the peer is then the client.
func (c *Strategy) Relayed(h http.Header) (netip.Addr, bool) {
	a, _, ok := forwardedAddr(c, h)
	return a, ok
}

// groupKey formats a grouped by c's prefixes; text, if not empty, is a's
// full-address form, reused to save an allocation.
func groupKey(c *Strategy, a netip.Addr, text string) string {
	bits, full := c.IPv6Prefix, 128
	if a.Is4() {
		bits, full = c.IPv4Prefix, 32
	}
	if bits > 0 && bits < full {
		return formatAddr(a, bits)
	}
	if text != "" {
		return text
	}
	return formatAddr(a, full)
}

// formatAddr formats a as a prefix of the given length, or as an address
// when bits is its full length, allocating only the result.
func formatAddr(a netip.Addr, bits int) string {
	var buf [64]byte // fits any unzoned address or prefix
	if bits == a.BitLen() {
		return string(a.AppendTo(buf[:0]))
	}
	p, _ := a.Prefix(bits) // 0 < bits < a.BitLen()
	return string(p.AppendTo(buf[:0]))
}

// clientAddr returns the client's address and, when it is at hand without
// allocating, its canonical text (else "").
func clientAddr(c *Strategy, r *http.Request) (netip.Addr, string, bool) {
	if c.AnyPeer {
		return anyPeerAddr(c, r)
	}
	peer, text, ok := parsePeer(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, "", false
	}
	if len(c.TrustedProxies) == 0 || !Contains(c.TrustedProxies, peer) {
		return peer, text, true
	}
	if a, t, ok := forwardedAddr(c, r.Header); ok {
		return a, t, true
	}
	return peer, text, true
}

// anyPeerAddr is clientAddr for AnyPeer, where the header decides whenever
// it names a client: the peer's address is then only checked, not taken
// apart, which under Yaegi saves parsePeer's frame and three calls.
func anyPeerAddr(c *Strategy, r *http.Request) (netip.Addr, string, bool) {
	if _, err := netip.ParseAddrPort(r.RemoteAddr); err != nil {
		if _, err := netip.ParseAddr(r.RemoteAddr); err != nil {
			return netip.Addr{}, "", false // not an IP peer, as parsePeer says
		}
	}
	if a, t, ok := forwardedAddr(c, r.Header); ok {
		return a, t, true
	}
	return parsePeer(r.RemoteAddr)
}

// forwardedAddr returns the client that the forwarding header of a trusted
// peer names in h, and its text as parseHop gives it; false if it names
// none. Each walk of a list is a function of its own: under Yaegi a
// function's call pays for its whole body, which X-Real-IP needs none of.
func forwardedAddr(c *Strategy, h http.Header) (netip.Addr, string, bool) {
	if c.realIP {
		// A proxy sets X-Real-IP; if several lines arrive, the last one
		// is the nearest proxy's.
		if v := h[headerRealIP]; len(v) > 0 {
			return parseHop(v[len(v)-1])
		}
		return netip.Addr{}, "", false
	}
	if c.rfc7239 {
		return fromList(c, h[headerForwarded])
	}
	lines := h[XForwardedFor]
	if c.hdr != "" {
		lines = h[c.hdr]
	}
	if c.Depth > 0 {
		return forwardedAt(c.Depth, lines)
	}
	return fromList(c, lines)
}

// forwardedAt picks the depth-th entry from the right of the
// X-Forwarded-For lines, read as one comma-separated list (depth is at
// most MaxForwardedHops), as fromList would: a walk of its own, as small
// as can be, because under Yaegi a call pays for every value of the
// function's body. It reports false when there are fewer entries or that
// one is not an address.
func forwardedAt(depth int, lines []string) (netip.Addr, string, bool) {
	for li := len(lines) - 1; li >= 0; li-- {
		s := lines[li]
		for {
			i := strings.LastIndexByte(s, ',')
			if depth--; depth == 0 {
				return parseHop(s[i+1:])
			}
			if i < 0 {
				break
			}
			s = s[:i]
		}
	}
	return netip.Addr{}, "", false
}

// fromList picks the client from the forwarding header's lines, read as
// one comma-separated list of entries: X-Forwarded-For's addresses or, for
// Forwarded (RFC 7239), its elements, each element's for= parameter being
// its entry. With a Depth (X-Forwarded-For's takes forwardedAt) it takes
// the Depth-th entry from the right, the ones before it unread; with
// none, walking from the right, the first entry in neither TrustedProxies
// nor ExcludedIPs, or the leftmost if every entry is skipped. An entry
// that is not an address (malformed, and for Forwarded also "unknown", an
// obfuscated identifier or no for= at all) names no client: the walk
// stops there, for what lies to its left was not written by a trusted
// proxy. It examines at most MaxForwardedHops
// entries, and Forwarded elements of at most maxElementLength bytes each.
// It returns the client's canonical text when parseHop has it (else "").
//
// Its parsing of an entry and its prefix checks are written out: this
// loop may run MaxForwardedHops times, and under Yaegi every interpreted
// call costs about a microsecond.
func fromList(c *Strategy, lines []string) (netip.Addr, string, bool) {
	var a, leftmost netip.Addr // the entry, and the last skipped one
	text, ok := "", true
	n, i := 0, 0 // entries examined, and the start of the last one
	for li := len(lines) - 1; li >= 0; li-- {
		s := lines[li]
		for {
			if n == MaxForwardedHops {
				return netip.Addr{}, "", false
			}
			n++
			if !c.rfc7239 {
				i = strings.LastIndexByte(s, ',')
			} else if i, ok = lastElement(s); !ok {
				return netip.Addr{}, "", false
			}
			if n == c.Depth || c.Depth == 0 {
				if c.rfc7239 {
					a, ok = forwardedFor(s[i+1:])
				} else {
					a, text, ok = parseHop(s[i+1:])
				}
				if n == c.Depth || !ok {
					return a, text, ok
				}
				skip := false
				for _, p := range c.TrustedProxies {
					if p.Contains(a) {
						skip = true
						break
					}
				}
				for j := 0; !skip && j < len(c.ExcludedIPs); j++ {
					skip = c.ExcludedIPs[j].Contains(a)
				}
				if !skip {
					return a, text, true
				}
				leftmost = a
			}
			if i < 0 {
				break
			}
			s = s[:i]
		}
	}
	if c.Depth > 0 {
		return netip.Addr{}, "", false // fewer entries than Depth
	}
	return leftmost, "", leftmost.IsValid()
}

// lastElement returns the index of the comma that separates the last
// element of the Forwarded line s from the others, or -1 when that element
// is all of s; a comma inside a quoted string separates nothing. It
// reports false when the element is longer than maxElementLength or its
// quotes do not pair, looking at no more of s than that. Quotes escaped
// with a backslash would mislead it, but only within an element that
// holds the backslash, which forwardedFor refuses.
func lastElement(s string) (int, bool) {
	quoted := false
	stop := len(s) - 1 - maxElementLength // the comma can be no further left
	for i := len(s) - 1; i >= 0; i-- {
		switch {
		case i < stop:
			return 0, false
		case s[i] == '"':
			quoted = !quoted
		case s[i] == ',' && !quoted:
			return i, true
		}
	}
	return -1, !quoted
}

// forwardedFor returns the address that the for= parameter of the
// Forwarded element elem names. It reports false when elem is not a
// well-formed element (pairs token=value, the value a token or a quoted
// string without escapes, separated by semicolons, spaces and tabs around
// them allowed), has no for= or two, or its for= is not an IP address.
func forwardedFor(elem string) (netip.Addr, bool) {
	if strings.IndexByte(elem, '\\') >= 0 {
		return netip.Addr{}, false // a quoted pair: never in an address
	}
	var a netip.Addr
	found := false
	for {
		if elem = strings.TrimLeft(elem, " \t"); elem == "" {
			break
		}
		if elem[0] == ';' {
			elem = elem[1:] // an empty pair
			continue
		}
		eq := strings.IndexByte(elem, '=')
		if eq < 0 || !IsToken(elem[:eq]) {
			return netip.Addr{}, false
		}
		name, value := elem[:eq], elem[eq+1:]
		elem = ""
		if value != "" && value[0] == '"' {
			end := strings.IndexByte(value[1:], '"') + 1
			if end == 0 {
				return netip.Addr{}, false
			}
			elem = strings.TrimLeft(value[end+1:], " \t")
			if elem != "" && elem[0] != ';' {
				return netip.Addr{}, false
			}
			value = value[1:end]
		} else {
			if semi := strings.IndexByte(value, ';'); semi >= 0 {
				value, elem = value[:semi], value[semi:]
			}
			if value = strings.TrimRight(value, " \t"); !IsToken(value) {
				return netip.Addr{}, false
			}
		}
		if strings.EqualFold(name, "for") {
			if found {
				return netip.Addr{}, false
			}
			var ok bool
			if a, ok = forwardedNode(value); !ok {
				return netip.Addr{}, false
			}
			found = true
		}
	}
	return a, found
}

// forwardedNode parses the value of a for= parameter: an IPv4 address, or
// an IPv6 address in brackets, either with an optional port (a number, or
// an obfuscated one beginning with "_"); an IPv6 address without brackets
// too, as some proxies write it. "unknown" and obfuscated identifiers
// ("_hidden") are not addresses.
func forwardedNode(v string) (netip.Addr, bool) {
	if len(v) > MaxHopLength {
		return netip.Addr{}, false
	}
	host, port := v, ""
	if v != "" && v[0] == '[' {
		end := strings.IndexByte(v, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, port = v[1:end], v[end+1:]
		if port != "" && port[0] != ':' {
			return netip.Addr{}, false
		}
	} else if i := strings.IndexByte(v, ':'); i >= 0 && strings.IndexByte(v[i+1:], ':') < 0 {
		host, port = v[:i], v[i:] // an IPv4 address and a port
	}
	if port != "" && !isNodePort(port[1:]) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || host != v && a.Is4() == (v[0] == '[') {
		return netip.Addr{}, false // brackets are for IPv6 addresses, ports follow IPv4 ones
	}
	return a.Unmap().WithZone(""), true
}

// isNodePort reports whether p is RFC 7239's node-port: a port number, or
// an obfuscated port ("_" and letters, digits, ".", "_" or "-").
func isNodePort(p string) bool {
	if p == "" {
		return false
	}
	if p[0] == '_' {
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return len(p) > 1
	}
	if len(p) > 5 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

// parsePeer parses Request.RemoteAddr, normally "ip:port", also accepting a
// bare IP. text is the address's canonical form when RemoteAddr holds it
// verbatim (an IPv4 peer), else "".
func parsePeer(remote string) (netip.Addr, string, bool) {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		a := ap.Addr()
		if a.Is4() {
			// netip accepts only the canonical dotted quad, so the text
			// before the port is the address's String.
			return a, remote[:strings.LastIndexByte(remote, ':')], true
		}
		return a.Unmap().WithZone(""), "", true
	}
	a, err := netip.ParseAddr(remote)
	if err != nil {
		return netip.Addr{}, "", false
	}
	return a.Unmap().WithZone(""), "", true
}

// parseHop parses one forwarding-header entry: an IP address, optionally
// with a port ("203.0.113.7:4711", "[2001:db8::1]:443") or in brackets,
// surrounded by optional spaces or tabs. Anything else is garbage. text is
// the address's canonical form when the entry holds it verbatim (an IPv4
// address alone), else "". It runs on every request behind a trusted
// proxy, so the rarer forms are parseHopPort's.
func parseHop(s string) (netip.Addr, string, bool) {
	s = strings.Trim(s, " \t")
	if s == "" || len(s) > MaxHopLength {
		return netip.Addr{}, "", false
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return parseHopPort(s)
	}
	if a.Is4() {
		// netip accepts only the canonical dotted quad, and an IPv4
		// address has neither a zone nor a mapping to undo.
		return a, s, true
	}
	return a.Unmap().WithZone(""), "", true
}

// parseHopPort is parseHop for an entry, trimmed and not empty, that is not
// an address alone: an address in brackets, or with a port.
func parseHopPort(s string) (netip.Addr, string, bool) {
	var a netip.Addr
	var err error
	if s[0] == '[' && s[len(s)-1] == ']' {
		a, err = netip.ParseAddr(s[1 : len(s)-1])
	} else {
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a = ap.Addr()
	}
	if err != nil {
		return netip.Addr{}, "", false
	}
	return a.Unmap().WithZone(""), "", true
}

// Contains reports whether any of prefixes contains a.
func Contains(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// IsToken reports whether s is an RFC 9110 token, the syntax of header and
// cookie names.
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if strings.IndexByte("!#$%&'*+-.^_`|~", c) < 0 {
			return false
		}
	}
	return true
}
