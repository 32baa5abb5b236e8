package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestSiteName names sites by their route's hosts and the ports their
// server listens on, whatever the order Caddy holds them in, and finds the
// route being provisioned: the first whose handlers are not loaded yet.
func TestSiteName(t *testing.T) {
	raw := []json.RawMessage{json.RawMessage(`{"handler":"sluice"}`)}
	loaded := caddyhttp.Route{Handlers: []caddyhttp.MiddlewareHandler{caddyhttp.StaticResponse{}}}
	host := func(h ...string) caddyhttp.MatcherSet {
		m := caddyhttp.MatchHost(h)
		return caddyhttp.MatcherSet{&m}
	}
	path := caddyhttp.MatchPath{"/api/*"}
	method := caddyhttp.MatchMethod{"GET"}
	for _, c := range []struct {
		name   string
		listen []string
		sets   caddyhttp.MatcherSets
		want   string
	}{
		{"a host on a port", []string{":443"}, caddyhttp.MatcherSets{host("example.com")}, "example.com:443"},
		{"hosts sorted", []string{":443"}, caddyhttp.MatcherSets{host("www.example.com", "example.com")}, "example.com,www.example.com:443"},
		{"a path: not the site's", []string{":443"}, caddyhttp.MatcherSets{append(host("example.com"), &path)}, "example.com:443"},
		{"no matchers", []string{":8080"}, nil, ":8080"},
		{"a bound listener: its port", []string{"tcp/127.0.0.1:443"}, caddyhttp.MatcherSets{host("example.com")}, "example.com:443"},
		{"ports sorted, once", []string{"[::1]:8443", ":443", "127.0.0.1:8443"}, caddyhttp.MatcherSets{host("example.com")}, "example.com:443,8443"},
		{"a port range", []string{":8000-8002"}, nil, ":8000-8002"},
		{"a Unix socket", []string{"unix//run/caddy.sock"}, nil, ":unix//run/caddy.sock"},
		{"the hosts of every set", []string{":80"}, caddyhttp.MatcherSets{host("b.example", "a.example"), host("a.example")}, "a.example,b.example:80"},
		{"no host matcher", []string{":80"}, caddyhttp.MatcherSets{{&method, &path}}, ":80"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := &caddyhttp.Server{Listen: c.listen, Routes: caddyhttp.RouteList{loaded, {MatcherSets: c.sets, HandlersRaw: raw}, {HandlersRaw: raw}}}
			got, s, err := siteName(serverContext(t, srv))
			if err != nil || got != c.want || s != srv {
				t.Errorf("siteName: %q, %p, %v; want %q, %p", got, s, err, c.want, srv)
			}
		})
	}

	// In the error routes, once the routes are loaded.
	srv := &caddyhttp.Server{Listen: []string{":80"}, Routes: caddyhttp.RouteList{loaded},
		Errors: &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{{MatcherSets: caddyhttp.MatcherSets{host("e.example")}, HandlersRaw: raw}}}}
	if got, _, err := siteName(serverContext(t, srv)); err != nil || got != "e.example:80" {
		t.Errorf("an error route: %q, %v; want e.example:80", got, err)
	}
	// Neither: a named route's handler.
	srv = &caddyhttp.Server{Listen: []string{":80"}, Routes: caddyhttp.RouteList{loaded}}
	if _, _, err := siteName(serverContext(t, srv)); !errors.Is(err, errNoSite) {
		t.Errorf("no route provisioning: %v, want errNoSite", err)
	}
	// No server at all.
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if got, s, err := siteName(ctx); got != "" || s != nil || err != nil {
		t.Errorf("no server: %q, %v, %v; want none", got, s, err)
	}
}

// serverContext returns a context of a config load holding srv, as Caddy
// provisions the handlers of srv's routes.
func serverContext(t *testing.T, srv *caddyhttp.Server) caddy.Context {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	return ctx.WithValue(caddyhttp.ServerCtxKey, srv)
}

// TestSiteOrdinal: a site's later zones of one name take "#1", "#2" in
// the order provisioned, per config load; zones of other names or sites,
// and the next load, start again; a site of one name on two servers is an
// error.
func TestSiteOrdinal(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	s1, s2 := new(caddyhttp.Server), new(caddyhttp.Server)
	var got []string
	for _, c := range []struct {
		srv        *caddyhttp.Server
		site, name string
	}{{s1, "a:443", "per_ip"}, {s1, "a:443", "per_ip"}, {s1, "a:443", "per_ip"}, {s1, "a:443", "api"}, {s2, "b:443", "per_ip"}} {
		p, err := siteOrdinal(ctx, c.srv, c.site, c.name)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	if want := "a:443 a:443#1 a:443#2 a:443 b:443"; strings.Join(got, " ") != want {
		t.Errorf("parts %q, want %q", got, want)
	}
	if _, err := siteOrdinal(ctx, s2, "a:443", "other"); err == nil || !strings.Contains(err.Error(), `two servers have a site named "a:443"`) {
		t.Errorf("a site of one name on two servers: %v, want an error", err)
	}
	cancel()
	next, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if got, err := siteOrdinal(next, s2, "a:443", "per_ip"); got != "a:443" || err != nil {
		t.Errorf("the next load: %q, %v; want a:443", got, err)
	}
	siteZones.Lock()
	n := len(siteZones.loads)
	siteZones.Unlock()
	if n != 1 {
		t.Errorf("%d loads held, want the running one alone", n)
	}
}

// TestNamedRouteNeedsID: a handler in a named route, which several sites
// may invoke, has no site to name its zones: in JSON it fails to load,
// asking for an id; with one it loads.
func TestNamedRouteNeedsID(t *testing.T) {
	for _, id := range []string{"", "edge"} {
		h := map[string]any{"handler": "sluice", "zones": []any{zone("per_ip", "1/s")}}
		if id != "" {
			h["id"] = id
		}
		raw, _ := json.Marshal(map[string]any{"apps": map[string]any{"http": map[string]any{"servers": map[string]any{
			"srv0": map[string]any{
				"listen":       []string{"127.0.0.1:0"},
				"routes":       []any{map[string]any{"handle": []any{map[string]any{"handler": "invoke", "name": "limited"}}}},
				"named_routes": map[string]any{"limited": map[string]any{"handle": []any{h}}},
			},
		}}}})
		var cfg caddy.Config
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		err := caddy.Validate(&cfg)
		if id == "" && (err == nil || !strings.Contains(err.Error(), "set id, or share")) {
			t.Errorf("without an id: %v, want an error asking for one", err)
		}
		if id != "" && err != nil {
			t.Errorf("with id %s: %v", id, err)
		}
	}
}
