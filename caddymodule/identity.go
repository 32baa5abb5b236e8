package caddymodule

import (
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/sluice/core/hostkey"
)

// A zone's identity is what tells its counters (in the store, the
// heavy-hitter sketch, the demand and the metrics) from those of the
// zones of the same name of other handlers: zones of one name and
// identity count together, zones of different identities apart. It is
// the zone's ID, "<name>@<handler part>", and its keys' prefix,
// "<handler part>/". The handler part is, in this order of precedence:
//
//   - in a share group (Handler.Share), "=" and the group's name;
//   - with an explicit Handler.ID, that ID;
//   - otherwise the name of the site the handler serves (siteName): the
//     hosts of the top-level route it is in and the ports its server
//     listens on, such as "example.com:443" or ":8080".
//     The n-th handler of one site with a zone of the same name, after
//     the first, adds "#n" to the site's name (siteOrdinal), so that two
//     handlers of a site count apart unless they name a group or an ID.
//
// Names are escaped so that no prefix begins another (escapeID,
// hostkey.EscapePrefix). The identity depends on nothing else in the
// config: not on the server's name, which the Caddyfile adapter numbers
// by the order of the listen addresses of all sites, nor on the
// position of the site among the others, so that adding, removing or
// reordering other sites keeps a zone's counters, and instances whose
// configs differ elsewhere share a Redis store's counters.

// errNoSite is the error of a handler whose site cannot be told: one in a
// named route, which several sites may invoke.
var errNoSite = errors.New("id: cannot tell which site this sluice handler serves (it is in a named route, or outside the server's routes): set id, or share, to name its zones' counters")

// siteName returns the name of the site whose route Caddy is provisioning
// with ctx, as the handler part of the identity of its zones without an
// ID, and its server: the hosts of the server's top-level route that
// holds the handler (siteHosts), then ":" and the ports the server
// listens on, sorted and joined by commas ("example.com:443", ":8080" for
// a route without hosts). A listen address's host is left out, so that
// instances bound to addresses of their own name a site alike; an
// address without a port (a Unix socket) is written whole. The name is ""
// and the server nil when ctx has no server (a handler provisioned
// outside Caddy's HTTP app, as in some tests).
func siteName(ctx caddy.Context) (string, *caddyhttp.Server, error) {
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return "", nil, nil
	}
	route := provisioningRoute(srv.Routes)
	if route == nil && srv.Errors != nil {
		route = provisioningRoute(srv.Errors.Routes)
	}
	if route == nil {
		return "", nil, errNoSite
	}
	seen := map[string]bool{}
	var ports []string
	for _, l := range srv.Listen {
		if p := listenPort(l); !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	sort.Strings(ports)
	return siteHosts(route.MatcherSets) + ":" + strings.Join(ports, ","), srv, nil
}

// listenPort is the port or port range of a server's listen address
// ("443", "8080-8085"), or the address itself when it has none.
func listenPort(addr string) string {
	na, err := caddy.ParseNetworkAddress(addr)
	if err != nil || na.IsUnixNetwork() || na.StartPort == 0 {
		return addr
	}
	p := strconv.FormatUint(uint64(na.StartPort), 10)
	if na.EndPort != na.StartPort {
		p += "-" + strconv.FormatUint(uint64(na.EndPort), 10)
	}
	return p
}

// provisioningRoute returns the route of routes whose handlers Caddy is
// provisioning, or nil. Caddy provisions a server's top-level routes (then
// its error routes) in order, each route's handlers (and every handler
// nested in them) before it sets the route's Handlers from its
// HandlersRaw: the first route whose HandlersRaw is set but whose Handlers
// are not yet is the one of the handler being provisioned. The matchers
// of those routes are provisioned before any handler.
func provisioningRoute(routes caddyhttp.RouteList) *caddyhttp.Route {
	for i := range routes {
		if len(routes[i].Handlers) == 0 && len(routes[i].HandlersRaw) > 0 {
			return &routes[i]
		}
	}
	return nil
}

// siteHosts names a route by the hosts its matcher sets match, sorted,
// once each and joined by commas ("example.com,www.example.com"), or ""
// when it has no host matcher. Its other matchers name no site: the
// Caddyfile adapter puts the routes of a site without a host that is
// alone on its server (its handle blocks, with their paths) at the top of
// the server, and wraps them in one route when another site joins it.
func siteHosts(sets caddyhttp.MatcherSets) string {
	seen := map[string]bool{}
	var hosts []string
	for _, set := range sets {
		for _, m := range set {
			if h, ok := m.(*caddyhttp.MatchHost); ok {
				for _, host := range *h {
					if !seen[host] {
						seen[host] = true
						hosts = append(hosts, host)
					}
				}
			}
		}
	}
	sort.Strings(hosts)
	return strings.Join(hosts, ",")
}

// escapeID escapes an explicit ID for a key prefix as hostkey.EscapePrefix
// escapes a name, but for "#", so that "id srv0#1" keeps the keys that
// releases naming zones by their server gave the second handler of
// server srv0 with a zone of the name. (An ID and a site's "#n" part
// that are equal name the same counters, as two equal IDs do.)
func escapeID(id string) string { return idEscaper.Replace(id) }

var idEscaper = strings.NewReplacer("%", "%25", "/", "%2F", "=", "%3D")

// checkID checks an explicit ID: not with a share group, which names its
// zones itself, and without control characters (it is a metric's label
// and a log field).
func checkID(id, share string) error {
	if id == "" {
		return nil
	}
	if share != "" {
		return optionErrorf("id", "id %q: not with share %q, whose name is its zones' identity", id, share)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return optionErrorf("id", "id %q: must not contain control characters", id)
		}
	}
	return nil
}

// setIdentities sets the prefix and ID of each of the handler's zones,
// provisioned with ctx; see the top of this file.
func (h *Handler) setIdentities(ctx caddy.Context) error {
	var part string
	var srv *caddyhttp.Server // the site's server, for a handler named by its site
	switch {
	case h.Share != "":
		part = strings.TrimSuffix(hostkey.SharePrefix(h.Share), "/")
	case h.ID != "":
		part = escapeID(h.ID)
	default:
		site, s, err := siteName(ctx)
		if err != nil {
			return err
		}
		part, srv = hostkey.EscapePrefix(site), s
	}
	for _, z := range h.Zones {
		if z == nil {
			continue // Provision reports it
		}
		p := part
		if h.Share == "" && h.ID == "" {
			var err error
			if p, err = siteOrdinal(ctx, srv, part, z.Name); err != nil {
				return err
			}
		}
		z.prefix, z.id = p+"/", z.Name+"@"+p
	}
	return nil
}

// siteZones counts, per config load (identified by its context's Done
// channel, which every module of one config shares), the zones of each
// site and name provisioned so far outside share groups and explicit IDs,
// and the server of each site.
var siteZones = struct {
	sync.Mutex
	loads map[<-chan struct{}]*loadSites
}{loads: map[<-chan struct{}]*loadSites{}}

// loadSites are the sites of one config load.
type loadSites struct {
	zones   map[string]int               // by site and zone name: how many so far
	servers map[string]*caddyhttp.Server // by site
}

// siteOrdinal returns the handler part of the zone called name of a
// handler without an ID that serves site (escaped) on server srv,
// provisioned with ctx: site for the site's first zone of that name, then
// site and "#1", "#2"… Caddy provisions a server's routes in order, so
// the part is the same after a reload and on every instance whose config
// has the site alike. Two servers with a site of one name (their
// addresses differing only by host) are an error: Caddy provisions
// servers in no set order. With a context that no config owns (some
// tests), site itself.
func siteOrdinal(ctx caddy.Context, srv *caddyhttp.Server, site, name string) (string, error) {
	done := ctx.Done()
	if done == nil {
		return site, nil
	}
	siteZones.Lock()
	defer siteZones.Unlock()
	for d := range siteZones.loads {
		select {
		case <-d: // that config was unloaded
			delete(siteZones.loads, d)
		default:
		}
	}
	ls := siteZones.loads[done]
	if ls == nil {
		ls = &loadSites{zones: map[string]int{}, servers: map[string]*caddyhttp.Server{}}
		siteZones.loads[done] = ls
	}
	if other, ok := ls.servers[site]; !ok {
		ls.servers[site] = srv
	} else if other != srv {
		return "", optionErrorf("id", "zone %q: two servers have a site named %q (their listen addresses differ only by host): set id", name, site)
	}
	key := site + "\x00" + name
	n := ls.zones[key]
	ls.zones[key] = n + 1
	if n == 0 {
		return site, nil
	}
	return site + "#" + strconv.Itoa(n), nil
}
