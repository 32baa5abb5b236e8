package caddymodule

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/headers" // the upstream's response headers

	"github.com/sluicehq/sluice/internal/behaviour"
)

// TestBehaviourTable replays the behaviour table shared with the Traefik
// plugin (testdata/behaviour at the top of the module, described in
// testdata/README.md): each case rendered as a Caddyfile, adapted by
// Caddy's Caddyfile adapter and loaded into this process's Caddy, its
// trace sent to the HTTP server Caddy built (which finds the client's
// address and whether its peer is a trusted proxy) on a fake clock.
func TestBehaviourTable(t *testing.T) {
	var now int64
	testClock = func() int64 { return atomic.LoadInt64(&now) }
	t.Cleanup(func() { testClock = nil })
	behaviour.Run(t, behaviour.Caddy, func(t *testing.T, c behaviour.Case) (http.Handler, func(int64), string) {
		src := caddyfileOf(c, freePorts(t, 1)[0])
		loadCaddyfile(t, src)
		return httpServer(t), func(ns int64) { atomic.StoreInt64(&now, ns) }, "Caddyfile:\n" + src
	})
}

// httpServer returns the one HTTP server of the running config.
func httpServer(t *testing.T) *caddyhttp.Server {
	t.Helper()
	app, err := caddy.ActiveContext().App("http")
	if err != nil {
		t.Fatal(err)
	}
	servers := app.(*caddyhttp.App).Servers
	if len(servers) != 1 {
		t.Fatalf("%d servers, want 1", len(servers))
	}
	for _, srv := range servers {
		return srv
	}
	return nil
}

// caddyfileOf renders a case as a Caddyfile: one site on port, its sluice
// block with a zone per limit, then the upstream, in a route after
// sluice: a header handler per name of the case's upstream headers,
// setting it when the request asks, and a respond answering the status
// that the request's behaviour.UpstreamHeader names with the body of its
// behaviour.UpstreamBody.
func caddyfileOf(c behaviour.Case, port int) string {
	var b strings.Builder
	line := func(indent int, words ...string) {
		b.WriteString(strings.Repeat("\t", indent) + strings.Join(words, " ") + "\n")
	}
	line(0, "{")
	line(1, "admin off")
	line(1, "persist_config off")
	line(1, "log {")
	line(2, "level ERROR")
	line(1, "}")
	if len(c.TrustedProxies) > 0 {
		line(1, "servers {")
		line(2, append([]string{"trusted_proxies static"}, c.TrustedProxies...)...)
		if c.TrustedProxiesStrict {
			line(2, "trusted_proxies_strict")
		}
		line(1, "}")
	}
	line(0, "}")
	line(0, "http://:"+strconv.Itoa(port), "{")
	line(1, "sluice {")
	for _, l := range c.Limits {
		line(2, "zone", l.Name, "{")
		key := caddyKey(l.KeyParts())
		line(3, "key", key)
		line(3, "rate", l.Rate)
		if l.Algorithm != "" {
			line(3, "algorithm", l.Algorithm)
		}
		if l.Burst != 0 {
			line(3, "burst", behaviour.Number(l.Burst))
		}
		if l.MaxDelay != "" {
			line(3, "max_delay", l.MaxDelay)
		}
		if l.Cost != 0 {
			line(3, "cost", behaviour.Number(l.Cost))
		}
		if l.Penalty != "" {
			line(3, "penalty", l.Penalty)
		}
		if l.OnMissingKey != "" {
			line(3, "on_missing_key", l.OnMissingKey)
		}
		if len(l.CountStatus) > 0 {
			line(3, append([]string{"count_status"}, l.CountStatus...)...)
		}
		if l.CostHeader != "" {
			line(3, "cost_header", l.CostHeader)
		}
		if l.CostBytes {
			line(3, "cost_bytes")
		}
		if c.IPv6Prefix != 0 && key == clientIPKey {
			line(3, "ipv6_prefix", strconv.Itoa(c.IPv6Prefix))
		}
		line(2, "}")
	}
	if len(c.Headers) > 0 {
		line(2, append([]string{"headers"}, c.Headers...)...)
	}
	if c.Body != "" {
		line(2, "body", c.Body)
	}
	if c.Mode != "" {
		line(2, "mode", c.Mode)
	}
	line(1, "}")
	line(1, "route {")
	for i, name := range c.UpstreamHeaderNames() {
		m := "@upstream_header_" + strconv.Itoa(i)
		line(2, m, "header", behaviour.UpstreamHeaderPrefix+name, "*")
		line(2, "header", m, name, "{http.request.header."+behaviour.UpstreamHeaderPrefix+name+"}")
	}
	line(2, "respond {http.request.header."+behaviour.UpstreamBody+"} {http.request.header."+behaviour.UpstreamHeader+"}")
	line(1, "}")
	line(0, "}")
	return b.String()
}

// caddyKey writes the table's key parts as a Caddy key template.
func caddyKey(parts []string) string {
	words := make([]string, len(parts))
	for i, p := range parts {
		kind, arg, _ := strings.Cut(p, ":")
		switch kind {
		case "client_ip":
			words[i] = clientIPKey
		case "host":
			words[i] = "{http.request.host}"
		case "header":
			words[i] = "{http.request.header." + arg + "}"
		case "query":
			words[i] = "{http.request.uri.query." + arg + "}"
		case "cookie":
			words[i] = "{http.request.cookie." + arg + "}"
		case "const":
			words[i] = arg
		}
	}
	return strings.Join(words, " ")
}
