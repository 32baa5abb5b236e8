package traefikplugin

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/telemetry"
)

// The metrics of the plugin are those of package telemetry, which the Caddy
// module exports too, served in the Prometheus text format by a listener
// of the plugin's own (metricsServer), since a plugin cannot reach
// Traefik's registry. Everything lives in the registry: counters by zone,
// shared by every version of a middleware, so that a reload keeps them;
// a decision-time histogram per address; a listener per address, started
// by the first New naming it and closed when the last registry entry
// naming it is dropped. Nothing is started per New, and a middleware
// without metrics.address pays nothing per request.

// numBuckets is the number of buckets of sluice_decision_seconds:
// telemetry.DecisionBuckets and +Inf (TestDecisionBuckets checks it).
const numBuckets = 15

// nearLimit is the share of a limit's capacity under which an admitted
// request counts as near_limit: the Caddy module's default near_limit.
const nearLimit = 0.1

// Local copies of core's constants that count reads: under Yaegi a
// constant of another package costs an allocation per use.
const (
	outcomeAllowed   = core.OutcomeAllowed
	outcomeCancelled = core.OutcomeCancelled
)

// zoneStats are the decision counters of one zone (a metrics label), by
// outcome, and its near misses, shared by the registry entries whose
// limits report to it.
type zoneStats struct {
	name     string
	outcomes [core.NumOutcomes]uint64 // atomic
	near     uint64                   // atomic
	refs     int                      // entries using it; under registry.mu
}

// histogram is sluice_decision_seconds of one metrics address: a count
// per bucket of telemetry.DecisionBuckets, the last one above them, and
// the sum, in nanoseconds.
type histogram struct {
	bounds [numBuckets - 1]int64 // nanoseconds, read only
	counts [numBuckets]uint64    // atomic
	sum    uint64                // nanoseconds, atomic
}

func newHistogram() *histogram {
	h := &histogram{}
	for i, b := range telemetry.DecisionBuckets() {
		h.bounds[i] = int64(b * float64(time.Second))
	}
	return h
}

// meter is what a registry entry with metrics counts into.
type meter struct {
	address string
	allowed []netip.Prefix
	// limits are the entry's, zones their counters, nearAt the remaining
	// capacity of each under which an admission is a near miss.
	limits  []*model.Limit
	zones   []*zoneStats
	nearAt  []float64
	seconds *histogram
}

// count counts v, a verdict about limit lim of m that took elapsed, as
// the Caddy module counts its verdicts: its outcome, a near miss, and the
// decision's time without a leaky_bucket's wait (none for a cancelled
// wait, whose time is not known).
func count(m *meter, v *core.Verdict, lim *model.Limit, elapsed time.Duration) {
	i := 0
	for i < len(m.limits)-1 && m.limits[i] != lim {
		i++
	}
	z := m.zones[i]
	if v.Outcome >= 0 && v.Outcome < numOutcomes {
		atomic.AddUint64(&z.outcomes[v.Outcome], 1)
	}
	if v.Outcome == outcomeAllowed && v.Decision.Limit != nil && v.Decision.Remaining < m.nearAt[i] {
		atomic.AddUint64(&z.near, 1)
	}
	if v.Outcome == outcomeCancelled {
		return
	}
	if elapsed -= v.Delay; elapsed > 0 {
		h := m.seconds
		i = 0
		for i < len(h.bounds) && int64(elapsed) > h.bounds[i] {
			i++
		}
		atomic.AddUint64(&h.counts[i], 1)
		atomic.AddUint64(&h.sum, uint64(elapsed))
	}
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

// newMeter returns the meter of middleware name with settings s, whose
// metrics address is served from now on: it takes a reference to the
// counters of each of its zones and to the address's listener, started if
// needed.
func (g *registry) newMeter(name string, s *settings) (*meter, error) {
	o := s.metrics
	g.mu.Lock()
	defer g.mu.Unlock()
	srv := g.servers[o.address]
	if srv == nil {
		var err error
		if srv, err = g.listen(o.address); err != nil {
			return nil, err
		}
		g.servers[o.address] = srv
	}
	srv.refs++
	if g.seconds[o.address] == nil {
		g.seconds[o.address] = newHistogram()
	}
	m := &meter{address: o.address, allowed: o.allowed, seconds: g.seconds[o.address]}
	for _, p := range s.plans {
		zone := zoneName(name, p.limit, len(s.plans))
		z := g.zones[zone]
		if z == nil {
			z = &zoneStats{name: zone}
			g.zones[zone] = z
		}
		z.refs++
		m.limits = append(m.limits, p.limit)
		m.zones = append(m.zones, z)
		m.nearAt = append(m.nearAt, nearLimit*p.limit.Capacity())
	}
	return m, nil
}

// releaseMeter drops m's references (m may be nil), closing a listener
// that nothing names any more.
func (g *registry) releaseMeter(m *meter) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releaseMeterLocked(m)
}

func (g *registry) releaseMeterLocked(m *meter) {
	if m == nil {
		return
	}
	for _, z := range m.zones {
		if z.refs--; z.refs <= 0 {
			delete(g.zones, z.name)
		}
	}
	if srv := g.servers[m.address]; srv != nil {
		if srv.refs--; srv.refs <= 0 {
			delete(g.servers, m.address)
			srv.close()
		}
	}
}

// metricsServer is the listener of one metrics address and the HTTP
// server on it, whose goroutines end when it is closed.
type metricsServer struct {
	srv  *http.Server
	addr net.Addr // where it listens (a port 0 chosen)
	refs int      // registry entries naming the address; under registry.mu
}

// listen starts serving the metrics of address on it. Its mux is where
// routes go; each is restricted to the clients that some middleware
// serving at the address allows (see restricted).
func (g *registry) listen(address string) (*metricsServer, error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("metrics.address %q: %w", address, err)
	}
	// Patterns without a method or wildcards: Traefik's Yaegi may run
	// with the mux of Go 1.21 (GODEBUG httpmuxgo121), to which
	// "GET /metrics" is a path.
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", g.restricted(address, writeMetrics))
	s := &metricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, addr: ln.Addr()}
	go serveMetrics(s.srv, ln)
	return s, nil
}

// serveMetrics serves srv on ln until srv is closed.
func serveMetrics(srv *http.Server, ln net.Listener) {
	_ = srv.Serve(ln) // http.ErrServerClosed once closed
}

func (s *metricsServer) close() {
	_ = s.srv.Close()
}

// A view is what one client may read at a metrics address: the newest
// registry entry of each middleware serving its metrics there whose
// metrics.allowedNetworks hold the client, and the address's histogram.
type view struct {
	entries []*entry
	seconds *histogram
}

// restricted returns the handler of a route of the listener of address,
// for GET and HEAD (405 for any other method): it answers 403 to a client
// that no middleware served there allows, and passes serve the view of
// any other. A further route is one line in listen, such as
//
//	mux.HandleFunc("/sluice/zones/", g.restricted(address, writeAdvice))
//
// with writeAdvice reading the zone from the path and finding it among
// the view's entries.
func (g *registry) restricted(address string, serve func(http.ResponseWriter, *http.Request, *view)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "sluice: method not allowed", http.StatusMethodNotAllowed)
			return
		}
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		var v *view
		if err == nil {
			v = g.view(address, ap.Addr().Unmap())
		}
		if v == nil {
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
// version has no metrics or serves them elsewhere.
func (g *registry) view(address string, client netip.Addr) *view {
	g.mu.Lock()
	defer g.mu.Unlock()
	newest := map[string]*entry{}
	for _, e := range g.entries {
		if n := newest[e.name]; n == nil || e.used > n.used {
			newest[e.name] = e
		}
	}
	v := &view{seconds: g.seconds[address]}
	for _, e := range newest {
		if m := e.meter; m != nil && m.address == address && clientip.Contains(m.allowed, client) {
			v.entries = append(v.entries, e)
		}
	}
	if len(v.entries) == 0 {
		return nil
	}
	return v
}

// writeMetrics answers GET /metrics with v in the text format: every
// outcome of every zone, zeros included, as the Caddy module's counters
// start, the decision-time histogram, and the state of the breaker of
// each Redis store.
func writeMetrics(w http.ResponseWriter, _ *http.Request, v *view) {
	var e telemetry.Exposition
	zones := map[*zoneStats]bool{}
	stores := map[string]bool{} // by label: two clients of one server are one store
	for _, en := range v.entries {
		for _, z := range en.meter.zones {
			if zones[z] {
				continue
			}
			zones[z] = true
			zone := telemetry.Label{Name: "zone", Value: z.name}
			for o := 0; o < core.NumOutcomes; o++ {
				e.Counter(telemetry.Decisions, telemetry.DecisionsHelp, float64(atomic.LoadUint64(&z.outcomes[o])),
					zone, telemetry.Label{Name: "outcome", Value: core.Outcome(o).String()})
			}
			e.Counter(telemetry.Decisions, telemetry.DecisionsHelp, float64(atomic.LoadUint64(&z.near)),
				zone, telemetry.Label{Name: "outcome", Value: telemetry.OutcomeNearLimit})
		}
		if rc := en.redis; rc != nil && !stores[rc.opts.name] {
			stores[rc.opts.name] = true
			e.Gauge(telemetry.BreakerState, telemetry.BreakerStateHelp, float64(rc.breaker.State()),
				telemetry.Label{Name: "store", Value: rc.opts.name})
		}
	}
	h := v.seconds
	counts := make([]uint64, numBuckets)
	for i := range counts {
		counts[i] = atomic.LoadUint64(&h.counts[i])
	}
	e.Histogram(telemetry.DecisionSeconds, telemetry.DecisionSecondsHelp, telemetry.DecisionBuckets(), counts,
		float64(atomic.LoadUint64(&h.sum))/float64(time.Second))
	w.Header().Set("Content-Type", telemetry.ContentType)
	if _, err := e.WriteTo(w); err != nil {
		http.Error(w, "sluice: "+err.Error(), http.StatusInternalServerError)
	}
}
