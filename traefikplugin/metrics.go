package traefikplugin

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/telemetry"
)

// The metrics of the plugin are those of package telemetry, which the Caddy
// module exports too, served in the Prometheus text format by a listener
// of the plugin's own (metricsServer), since a plugin cannot reach
// Traefik's registry. Everything lives in the registry: counters by zone
// and a decision-time histogram by middleware, shared by every version of
// a middleware, so that a reload keeps them; a listener per address,
// started by the first New naming it and closed when the last registry
// entry naming it is dropped. Nothing is started per New, and a
// middleware without metrics.address pays nothing per request.

// zoneStats are the decision counters of one zone (a metrics label),
// shared by the registry entries whose limits report to it.
type zoneStats struct {
	name   string
	counts core.Counts
	// demand is the recorder of the zone's demand that its newest meter
	// took, and keys its bound; fleet, with metrics.demandScope fleet,
	// sends its partials to the Redis client rc: the next meter of the
	// zone with the same period, bound and scope (and client) takes them
	// again, so that a reload keeps the figures. Under registry.mu; a
	// meter reads only its own (meter.demand, meter.fleet).
	demand *demand.Recorder
	keys   int
	fleet  *redisstore.Demand
	rc     *redisClient
	ns     string // the fleet's limit's Namespace, which names its keys
	refs   int    // entries using it; under registry.mu
}

// histogram times the decisions of one middleware (its middleware label),
// shared by the registry entries of that name with metrics, as zoneStats
// are: the decisions of a middleware are exported only to the clients
// that may read its zones.
type histogram struct {
	name    string
	seconds *core.Histogram
	refs    int // entries using it; under registry.mu
}

// meter is what a scrape needs to export what a registry entry with
// metrics counts: its lane updates core's Meter over the same counters,
// which newMeter returns beside the meter; a meter does not hold it, as
// under Yaegi the text of a type spells out what its fields hold.
type meter struct {
	address   string
	allowed   []netip.Prefix
	nearLimit float64
	seconds   *histogram
	zones     []*zoneStats       // by limit, as counted by core
	limits    []*model.Limit     // by limit: what an advice judges
	demand    []*demand.Recorder // by limit, nil for none; set once
	fleet     []*redisstore.Demand
}

// closeFleetLocked closes z's fleet demand, if any, in the background
// (Close sends its last parts through z's Redis client, on which it holds
// a reference until then), and forgets it. Under registry.mu.
func (g *registry) closeFleetLocked(z *zoneStats) {
	f := z.fleet // read now: a goroutine's arguments are read late under Yaegi
	rc := z.rc
	z.fleet = nil
	if f == nil {
		return
	}
	rc.refs++
	go func() {
		f.Close()
		g.release(rc)
	}()
}

// zoneName is the zone label of limit l of middleware name, one of its n
// limits: the middleware's name for its only limit, else
// "<middleware>/<limit>", the limit named as in RateLimit-Policy.
func zoneName(name string, l *model.Limit, n int) string {
	if n == 1 {
		return name
	}
	return name + "/" + l.Name
}

// newMeter returns the meter of middleware name with settings s, on the
// Redis client rc (nil for none), whose metrics address is served from
// now on: it takes a reference to the counters of each of its zones, to
// the middleware's histogram and to the address's listener, started if
// needed (see openLocked); and the core.Meter counting into it.
func (g *registry) newMeter(name string, s *settings, rc *redisClient) (*meter, *core.Meter) {
	o := s.metrics
	g.mu.Lock()
	defer g.mu.Unlock()
	srv := g.servers[o.address]
	if srv == nil {
		srv = &metricsServer{address: o.address, name: name}
		g.servers[o.address] = srv
		g.openLocked(srv)
	}
	srv.refs++
	seconds := g.seconds[name]
	if seconds == nil {
		seconds = &histogram{name: name, seconds: core.NewHistogram()}
		g.seconds[name] = seconds
	}
	seconds.refs++
	m := &meter{address: o.address, allowed: o.allowed, nearLimit: o.nearLimit, seconds: seconds, limits: s.limits,
		demand: make([]*demand.Recorder, len(s.plans)), fleet: make([]*redisstore.Demand, len(s.plans))}
	counts := make([]*core.Counts, len(s.plans))
	for i, p := range s.plans {
		zone := zoneName(name, p.limit, len(s.plans))
		z := g.zones[zone]
		if z == nil {
			z = &zoneStats{name: zone}
			g.zones[zone] = z
		}
		z.refs++
		if period := p.limit.PeriodNanos(); period > 0 && o.demandKeys >= 0 {
			var fleetRC *redisClient // the client of a fleet's demand
			if o.fleet {
				fleetRC = rc
			}
			if z.demand == nil || z.demand.Period() != period || z.keys != o.demandKeys || z.rc != fleetRC ||
				fleetRC != nil && z.ns != p.limit.Namespace() {
				g.closeFleetLocked(z)
				z.rc = fleetRC
				if fleetRC != nil {
					z.fleet = rc.store.(*redisstore.Store).Demand(p.limit, name+"\x00", o.demandKeys, g.clock)
					z.ns = p.limit.Namespace()
					z.demand = z.fleet.Recorder()
				} else {
					z.demand = demand.NewRecorder(period, o.demandKeys, g.clock())
				}
				z.keys = o.demandKeys
			}
			m.demand[i] = z.demand
			m.fleet[i] = z.fleet
		}
		m.zones = append(m.zones, z)
		counts[i] = &z.counts
	}
	return m, core.NewMeter(core.MeterConfig{Limits: m.limits, Counts: counts, NearShare: o.nearLimit, Seconds: seconds.seconds, Demand: m.demand, Clock: g.coreClock})
}

// releaseMeterLocked drops m's references (m may be nil), closing a
// listener that nothing names any more.
func (g *registry) releaseMeterLocked(m *meter) {
	if m == nil {
		return
	}
	for _, z := range m.zones {
		if z.refs--; z.refs <= 0 {
			delete(g.zones, z.name)
			g.closeFleetLocked(z)
		}
	}
	if m.seconds.refs--; m.seconds.refs <= 0 {
		delete(g.seconds, m.seconds.name)
	}
	if srv := g.servers[m.address]; srv != nil {
		if srv.refs--; srv.refs <= 0 {
			delete(g.servers, m.address)
			srv.close()
		}
	}
}

// Bounds of the metrics listeners' connections, so that a client that
// reaches the port, allowed or not, holds a connection (and a file
// descriptor of Traefik's) only so long; see serverTimeouts.
const (
	// metricsReadTimeout bounds the reading of a request, headers and
	// body: a slow or silent client is cut off after it.
	metricsReadTimeout = 10 * time.Second
	// metricsWriteTimeout bounds a request's answer, from the end of its
	// headers (a fleet advice reads Redis, within its own timeouts).
	metricsWriteTimeout = 30 * time.Second
	// metricsIdleTimeout bounds the wait for the next request on a
	// kept-alive connection.
	metricsIdleTimeout = 30 * time.Second
	// listenRetryMin and listenRetryMax bound the backoff of a listener
	// that cannot open: tried again after 1s, 2s, 4s... then every 30s.
	listenRetryMin = time.Second
	listenRetryMax = 30 * time.Second
)

// serverTimeouts are the bounds of a metrics listener's connections and
// of its retries, the constants above but in tests.
type serverTimeouts struct {
	read, write, idle  time.Duration
	retryMin, retryMax time.Duration
}

// defaultTimeouts are the registry's serverTimeouts.
var defaultTimeouts = serverTimeouts{
	read: metricsReadTimeout, write: metricsWriteTimeout, idle: metricsIdleTimeout,
	retryMin: listenRetryMin, retryMax: listenRetryMax,
}

// metricsServer is the listener of one metrics address and the HTTP
// server on it, whose goroutines end when it is closed; or, while the
// address cannot be listened on, the timer of the next try.
type metricsServer struct {
	address string
	name    string        // the middleware that first named it, for the log
	srv     *http.Server  // nil until it listens
	addr    net.Addr      // where it listens (a port 0 chosen); nil until then
	refs    int           // registry entries naming the address
	retry   *time.Timer   // the next try, while it cannot listen
	wait    time.Duration // the backoff before the next try
	failed  string        // the last error logged, "" once it listens
	closed  bool
	// All under registry.mu.
}

// openLocked starts serving the metrics of s's address on it. Its mux is
// where routes go; each is restricted to the clients that some middleware
// serving at the address allows (see restricted). An address that cannot
// be listened on (a port taken) costs no traffic: the middlewares naming
// it count as ever, the error is logged (again only if it changes), and
// the address is tried again after a backoff doubling from retryMin to
// retryMax, on a timer of s's (no goroutine waits), until it opens or s
// is closed. Under registry.mu.
func (g *registry) openLocked(s *metricsServer) {
	t := g.timeouts
	ln, err := net.Listen("tcp", s.address)
	if err != nil {
		if s.wait = 2 * s.wait; s.wait < t.retryMin {
			s.wait = t.retryMin
		} else if s.wait > t.retryMax {
			s.wait = t.retryMax
		}
		if msg := err.Error(); msg != s.failed {
			s.failed = msg
			fmt.Fprintf(g.stderr, "sluice %s: metrics.address %q: %s; serving requests without metrics, retrying every %s at most\n",
				s.name, s.address, msg, t.retryMax)
		}
		s.retry = time.AfterFunc(s.wait, func() { g.reopen(s) })
		return
	}
	if s.failed != "" {
		fmt.Fprintf(g.stderr, "sluice %s: metrics.address %q: serving metrics at last\n", s.name, s.address)
		s.failed = ""
	}
	// Patterns without a method or wildcards: Traefik's Yaegi may run
	// with the mux of Go 1.21 (GODEBUG httpmuxgo121), to which
	// "GET /metrics" is a path.
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", g.restricted(s.address, writeMetrics, http.MethodGet, http.MethodHead))
	mux.HandleFunc("/sluice/zones", g.restricted(s.address, writeZones, http.MethodGet, http.MethodHead))
	mux.HandleFunc("/sluice/zones/", g.restricted(s.address, writeAdvice, http.MethodGet, http.MethodHead, http.MethodDelete))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: t.read, ReadTimeout: t.read, WriteTimeout: t.write, IdleTimeout: t.idle}
	s.addr = ln.Addr()
	s.retry = nil
	go serveMetrics(s.srv, ln)
}

// reopen is s's retry timer's: it tries s's address again unless s was
// closed meanwhile.
func (g *registry) reopen(s *metricsServer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !s.closed {
		g.openLocked(s)
	}
}

// serveMetrics serves srv on ln until srv is closed.
func serveMetrics(srv *http.Server, ln net.Listener) {
	_ = srv.Serve(ln) // http.ErrServerClosed once closed
}

// close stops s: its listener and connections, or its next try. Under
// registry.mu.
func (s *metricsServer) close() {
	s.closed = true
	if s.retry != nil {
		s.retry.Stop()
	}
	if s.srv != nil {
		_ = s.srv.Close()
	}
}

// A view is what one client may read at a metrics address: the newest
// registry entry of each middleware serving its metrics there whose
// metrics.allowedNetworks hold the client, as long as Traefik's
// configuration still has it (see registry.liveLocked).
type view struct {
	entries []*entry
	now     int64 // the registry's clock when the view was taken
}

// restricted returns the handler of a route of the listener of address,
// for methods (405 for any other): it answers 403 to a client that no
// middleware served there allows, closing its connection, and passes
// serve the view of any other.
func (g *registry) restricted(address string, serve func(http.ResponseWriter, *http.Request, *view), methods ...string) http.HandlerFunc {
	allow := strings.Join(methods, ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		ok := false
		for _, m := range methods {
			ok = ok || r.Method == m
		}
		if !ok {
			w.Header().Set("Allow", allow)
			http.Error(w, "sluice: method not allowed", http.StatusMethodNotAllowed)
			return
		}
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		var v *view
		if err == nil {
			v = g.view(address, ap.Addr().Unmap())
		}
		if v == nil {
			// Not kept alive: a refused client holds no connection.
			w.Header().Set("Connection", "close")
			http.Error(w, "sluice: this client may not read these metrics (see metrics.allowedNetworks)", http.StatusForbidden)
			return
		}
		serve(w, r, v)
	}
}

// view returns what client may read at address, or nil when no
// middleware served there allows it. Of each middleware name only the
// newest entry (the last New returned) counts, so that a configuration
// replaced by a reload is no longer exported, nor one whose newest
// version has no metrics or serves them elsewhere. A middleware that
// Traefik's configuration no longer has still lets the clients it
// allowed read the address, but shows them nothing of its own.
func (g *registry) view(address string, client netip.Addr) *view {
	g.mu.Lock()
	defer g.mu.Unlock()
	newest := map[string]*entry{}
	for _, e := range g.entries {
		if n := newest[e.name]; n == nil || e.used > n.used {
			newest[e.name] = e
		}
	}
	v := &view{now: g.clock()}
	allowed := false
	for _, e := range newest {
		if m := e.meter; m != nil && m.address == address && clientip.Contains(m.allowed, client) {
			allowed = true
			if g.liveLocked(e, v.now) {
				v.entries = append(v.entries, e)
			}
		}
	}
	if !allowed {
		return nil
	}
	sort.Slice(v.entries, func(i, j int) bool { return v.entries[i].name < v.entries[j].name })
	return v
}

// writeMetrics answers GET /metrics with v in the text format: every
// outcome of every zone, zeros included, as the Caddy module's counters
// start, the demand of the zones that record it, the decision-time
// histogram of each middleware, and the state of the breaker of each
// Redis store.
func writeMetrics(w http.ResponseWriter, _ *http.Request, v *view) {
	var e telemetry.Exposition
	zones := map[*zoneStats]bool{}
	stores := map[string]bool{} // by label: two clients of one server are one store
	for _, en := range v.entries {
		for i, z := range en.meter.zones {
			if zones[z] {
				continue
			}
			zones[z] = true
			zone := telemetry.Label{Name: "zone", Value: z.name}
			for o := core.Outcome(0); int(o) < core.NumOutcomes; o++ {
				e.Counter(telemetry.Decisions, telemetry.DecisionsHelp, float64(z.counts.Outcome(o)),
					zone, telemetry.Label{Name: "outcome", Value: o.String()})
			}
			e.Counter(telemetry.Decisions, telemetry.DecisionsHelp, float64(z.counts.Near()),
				zone, telemetry.Label{Name: "outcome", Value: telemetry.OutcomeNearLimit})
			if rec := en.meter.demand[i]; rec != nil && en.meter.fleet[i] == nil { // a fleet's demand is in Redis
				folded := rec.Folded(v.now)
				e.Counter(telemetry.DemandKeyPeriods, telemetry.DemandKeyPeriodsHelp, float64(folded.Count()), zone)
				for _, q := range folded.Quantiles() {
					e.Gauge(telemetry.Demand, telemetry.DemandHelp, q.Value, zone, telemetry.Label{Name: "quantile", Value: q.Label})
				}
			}
		}
		if rc := en.redis; rc != nil && !stores[rc.name] {
			stores[rc.name] = true
			e.Gauge(telemetry.BreakerState, telemetry.BreakerStateHelp, float64(rc.breaker.State()),
				telemetry.Label{Name: "store", Value: rc.name})
		}
		counts, sum := en.meter.seconds.seconds.Snapshot()
		e.Histogram(telemetry.DecisionSeconds, telemetry.DecisionSecondsHelp, telemetry.DecisionBuckets(), counts, sum,
			telemetry.Label{Name: "middleware", Value: en.name})
	}
	w.Header().Set("Content-Type", telemetry.ContentType)
	if _, err := e.WriteTo(w); err != nil {
		http.Error(w, "sluice: "+err.Error(), http.StatusInternalServerError)
	}
}

// writeAdvice answers GET /sluice/zones/<zone>/advice, <zone> path-escaped
// (a zone of several limits is "<middleware>/<limit>"), with the advice on
// the zone's demand as the Caddy module's admin API answers it, judging
// any ?candidate=<rate>&burst=<n> the query asks about, and resets the
// zone's demand on DELETE (204), as that API does: 404 for a zone the
// view does not hold or that records no demand, 400 for a bad candidate.
func writeAdvice(w http.ResponseWriter, r *http.Request, v *view) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/sluice/zones/")
	escaped, ok := strings.CutSuffix(rest, "/advice")
	zone, err := url.PathUnescape(escaped)
	if !ok || err != nil || zone == "" || strings.Contains(escaped, "/") {
		http.Error(w, "sluice: not found; the advice on a zone is at /sluice/zones/<zone>/advice, <zone> path-escaped, and GET /sluice/zones lists the zones", http.StatusNotFound)
		return
	}
	for _, en := range v.entries {
		for i, z := range en.meter.zones {
			rec := en.meter.demand[i]
			if z.name != zone || rec == nil {
				continue
			}
			status, adv, err := redisstore.AnswerAdvice(r.Context(), en.meter.fleet[i], rec, r.Method, zone, en.meter.limits[i], v.now, r.URL.Query())
			switch {
			case err != nil:
				http.Error(w, "sluice: "+err.Error(), status)
			case adv == nil:
				w.WriteHeader(status)
			default:
				writeJSON(w, adv)
			}
			return
		}
	}
	http.Error(w, "sluice: no zone "+strconv.Quote(zone)+" records its demand here", http.StatusNotFound)
}

// zoneInfo is one zone in the answer of GET /sluice/zones, with the fields
// of the Caddy module's admin API's listing that a middleware has.
type zoneInfo struct {
	// ID is the zone as the metrics' zone label and the advice's path
	// name it: the middleware's name for its only limit, else
	// "<middleware>/<limit>".
	ID string `json:"id"`
	// Name is the limit's name, as in RateLimit-Policy.
	Name string `json:"name"`
	// Middleware is the middleware's name as Traefik gives it, with its
	// provider: "api-limit@file".
	Middleware string `json:"middleware"`
	// Algorithm, Rate, Quota, Period and Burst describe the zone's rate;
	// a zone with maxInFlight alone has none and omits them.
	Algorithm   string  `json:"algorithm,omitempty"`
	Rate        string  `json:"rate,omitempty"`
	Quota       float64 `json:"quota,omitempty"`
	Period      float64 `json:"period_seconds,omitempty"`
	Burst       float64 `json:"burst,omitempty"`
	NearLimit   float64 `json:"near_limit"`
	MaxInFlight int     `json:"max_in_flight,omitempty"`
	// Store is "memory" or the Redis store's label, as in the breaker
	// metric.
	Store string `json:"store"`
	// Advice is the path of the zone's advice, path-escaped; omitted
	// when the zone records no demand.
	Advice string `json:"advice,omitempty"`
}

// writeZones answers GET /sluice/zones with the zones of v, by middleware
// and limit, as {"zones": [...]}.
func writeZones(w http.ResponseWriter, _ *http.Request, v *view) {
	zones := []zoneInfo{}
	for _, en := range v.entries {
		store := "memory"
		if en.redis != nil {
			store = en.redis.name
		}
		for i, z := range en.meter.zones {
			l := en.meter.limits[i]
			info := zoneInfo{ID: z.name, Name: l.Name, Middleware: en.name, NearLimit: en.meter.nearLimit, MaxInFlight: l.MaxInFlight, Store: store}
			if l.Rated() { // one field a line: Yaegi drops some of a tuple's
				info.Algorithm = string(l.Algorithm)
				info.Rate = l.Rate.String()
				info.Quota = l.Rate.Quota
				info.Period = l.Rate.Period.Seconds()
				info.Burst = l.Capacity()
			}
			if en.meter.demand[i] != nil {
				info.Advice = "/sluice/zones/" + url.PathEscape(z.name) + "/advice"
			}
			zones = append(zones, info)
		}
	}
	writeJSON(w, &zonesAnswer{Zones: zones})
}

// zonesAnswer is the answer of GET /sluice/zones.
type zonesAnswer struct {
	Zones []zoneInfo `json:"zones"`
}

// writeJSON answers with v in JSON.
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "sluice: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}
