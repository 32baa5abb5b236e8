package caddymodule

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/model"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("sluice", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("sluice", httpcaddyfile.Before, "basic_auth")
}

// Handler rate-limits requests with sluice. Each request is checked against
// every zone that applies to it, in the order the zones are listed, and is
// charged to all of them or, if any rejects it, to none. A rejected request
// is answered 429 Too Many Requests with the configured headers and body;
// an admitted one gets the rate-limit headers of the zone closest to
// exhaustion and proceeds (after its delay, for a leaky_bucket zone).
//
// Counters live in the configured store. Handlers whose stores are
// configured identically share one store, in this process (memory) or on
// the server (Redis), but each handler's zones count on their own unless
// the handlers name the same Share group: two sites that each define a
// zone "per_ip" do not share it. A zone is told apart from the others of
// its name by its handler's ID, else by the site it serves (see ID), so
// that instances of Caddy whose configs serve the site alike share their
// Redis counters, however the rest of their configs differ. A config
// reload keeps the store and therefore the counters; a zone whose
// rate or burst changed keeps its counters and applies the new values, a
// zone whose name, algorithm or identity changed starts afresh.
type Handler struct {
	// Zones are the limits, checked in this order. At least one is
	// required; names must be unique.
	Zones []*Zone `json:"zones,omitempty"`

	// Store selects where counters live; absent means in memory with
	// default settings.
	Store *StoreConfig `json:"store,omitempty"`

	// OnStoreError is what happens to a request when the store cannot
	// decide within its timeout (an outage, an open circuit breaker) and
	// no fallback is configured: "allow" (the default) lets it through,
	// "deny" answers 429 with Retry-After: 1.
	OnStoreError string `json:"on_store_error,omitempty"`

	// Fallback, when "local", decides requests in this process while the
	// Redis store fails, each zone with its quota and burst divided by
	// Instances, instead of applying OnStoreError. Only with a Redis store.
	// The local counters are kept apart from Redis's and, like a memory
	// store's, shared by every handler of the process.
	Fallback string `json:"fallback,omitempty"`

	// Instances is the number of Caddy instances sharing the Redis store,
	// by which the local fallback divides each zone's quota and burst so
	// that together they still admit about the global quota. Default 1;
	// only with Fallback.
	Instances int `json:"instances,omitempty"`

	// Headers lists the rate-limit header families to send on every
	// response a zone decided: "ietf" (RateLimit-Policy and RateLimit of
	// draft-ietf-httpapi-ratelimit-headers), "legacy" (RateLimit-Limit,
	// -Remaining, -Reset) and "x" (X-RateLimit-Limit, -Remaining, -Reset),
	// or "off" alone for none. Empty means ietf and x.
	Headers []string `json:"headers,omitempty"`

	// Body is the format of a 429 answer's body: "json" (the default),
	// "problem" (RFC 9457 application/problem+json), "text", "none", or
	// "error": sluice sets the rate-limit headers, Retry-After and
	// Cache-Control, and returns an HTTP error with status 429, so that the
	// server's handle_errors routes write the answer (the placeholders
	// {http.sluice.*} and {http.error.status_code} are set).
	Body string `json:"body,omitempty"`

	// Mode is "enforce" (the default) or "dry_run", which decides and
	// counts every request, sets the placeholders and metrics, and logs
	// would-be rejections at info level, but lets rejected requests
	// proceed (without charging them) and writes no rate-limit headers.
	Mode string `json:"mode,omitempty"`

	// RetryJitter, between 0 and 1, lengthens each Retry-After by a
	// random fraction of itself of at most this much (0.2: by up to 20%),
	// so that clients rejected together do not retry together. Default 0.
	RetryJitter float64 `json:"retry_jitter,omitempty"`

	// LogKey adds the rejected request's raw key (such as the client's
	// address or API key) to the debug log of each rejection. Off by
	// default: keys can be personal data or secrets.
	LogKey bool `json:"log_key,omitempty"`

	// Share names a group of handlers whose zones of the same name share
	// their counters, as instances sharing one Redis store always do.
	// Empty (the default): this handler's zones are its own, so two sites
	// that each define a zone "per_ip" count apart. A share group's zones
	// are "<name>@=<group>" and their keys begin "=<group>/".
	Share string `json:"share,omitempty"`

	// ID names the handler's zones apart from the zones of the same name
	// of other handlers, in their IDs ("per_ip@<id>"), their metrics'
	// zone label and their store keys (with readable_keys, Redis shows
	// sluice:{per_ip:token_bucket:<id>/203.0.113.7}), the same on every
	// instance and across reloads whatever else the config says.
	// Handlers with the same ID count their zones of one name together.
	// Not with Share.
	//
	// Without an ID, a handler is named by the site it serves: the hosts
	// of the server's top-level route it is in, ":" and the ports the
	// server listens on (not the addresses it binds): "example.com:443"
	// for the Caddyfile site example.com, "a.com,b.com:443" for a site of
	// two names, ":8080" for the site :8080 or http://:8080. The second
	// handler of one site with a zone of the same name adds "#1" to the
	// site's name ("per_ip@example.com:443#1"), the third "#2", in the
	// order of the server's routes (so sites of one host and port that
	// differ by path are told apart by their order). Adding, removing or
	// reordering other sites, or renaming servers, keeps a zone's
	// identity; changing the site's own names or ports changes it, and
	// instances that serve it on different ports name it apart: set ID
	// where counters must outlive such changes or be shared by such
	// instances. A handler in a named route, which several sites may
	// invoke, needs an ID or a Share group, and so do sites of one name
	// on two servers whose addresses differ only by host.
	ID string `json:"id,omitempty"`

	gate      *core.Gate
	counted   bool         // a zone has count_status: ServeHTTP sees the status
	deferred  bool         // the responder leaves a rejection to handle_errors (answer.Responder.Defer)
	store     *pooledStore // the primary store, which the admin API reads
	stores    []string     // pool keys this handler holds, released by Cleanup
	watches   []string     // watch pool keys this handler holds, released by Cleanup
	series    []string     // zoneSeries keys (zone IDs) this handler holds, released by Cleanup
	admin     []*adminZone // the handler's zones in the admin API's registry
	logger    *zap.Logger
	warnings  *warnLimiter // store errors
	dryRuns   *warnLimiter // dry_run's would-be rejections
	metrics   *handlerMetrics
	zoneIndex map[string]int // zone name → index in Zones
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.sluice",
		New: func() caddy.Module { return new(Handler) },
	}
}

// parseCaddyfile reads the sluice directive. In a named route, which
// several sites may invoke, its zones' identity cannot be the site's: it
// needs an id or a share group.
func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	s := new(Handler)
	if err := s.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return s, err
	}
	if h.IsNamedRoute() && s.ID == "" && s.Share == "" {
		h.Reset()
		h.Next() // the directive, whose line the error names
		return s, h.Err("sluice in a named route, which several sites may invoke: set id (or share) to name its zones' counters")
	}
	return s, nil
}

// Provision builds the zones' limits, keys and matchers, acquires the
// stores and registers the metrics. It leaves the checks that need no
// building to Validate.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.warnings, h.dryRuns = new(warnLimiter), new(warnLimiter)
	responder, err := h.responder()
	if err != nil {
		return err
	}
	mode, err := core.ParseMode(h.Mode)
	if err != nil {
		return err
	}
	policy, err := core.ParseStoreErrorPolicy(h.OnStoreError)
	if err != nil {
		return err
	}
	st, err := h.acquireStore(ctx)
	if err != nil {
		return err
	}
	h.store = st
	if err := h.setIdentities(ctx); err != nil {
		return err
	}
	limits := make([]*model.Limit, len(h.Zones))
	h.zoneIndex = make(map[string]int, len(h.Zones))
	for i, z := range h.Zones {
		if z == nil {
			return fmt.Errorf("zones[%d]: null", i)
		}
		z.index = i
		if err := z.provision(ctx); err != nil {
			return fmt.Errorf("zones[%d].%w", i, err)
		}
		z.nearAt = z.nearLimit() * z.limit.Capacity()
		z.nameValue = z.Name
		if err := h.acquireWatch(z, st); err != nil {
			return fmt.Errorf("zone %q: %w", z.Name, err)
		}
		limits[i] = z.limit
		h.zoneIndex[z.Name] = i
	}

	cfg := core.GateConfig{Limits: limits, Responder: responder, Mode: mode, OnStoreError: policy, MaxCost: map[*model.Limit]float64{}, Clock: testClock}
	h.counted = core.AnswerCounts(limits)
	h.deferred = responder.Defer
	for _, z := range h.Zones {
		if z.costTmpl == "" {
			cfg.MaxCost[z.limit] = z.cost
		}
	}
	cfg.Store, cfg.Timeout, cfg.Breaker = st.store, st.timeout, st.breaker
	cfg.LeaseTTL = h.leaseTTL(ctx)
	if h.Fallback == fallbackLocal {
		fb, err := h.acquire(fallbackPoolKey, newFallbackStore)
		if err != nil {
			return err
		}
		cfg.Fallback = fb.store
	}
	cfg.Instances = h.instances()
	if h.gate, err = core.NewGate(cfg); err != nil {
		if le, ok := err.(*model.LimitError); ok {
			return fmt.Errorf("zones[%d].%w", le.Index, caddyError(err))
		}
		return caddyError(err)
	}
	if h.metrics, err = h.newHandlerMetrics(ctx.GetMetricsRegistry(), st); err != nil {
		return err
	}
	h.register(ctx)
	return nil
}

// leaseSlack is what the default lease_ttl adds to the server's
// write_timeout: a request may last that long, and its lease a little
// longer.
const leaseSlack = 5 * time.Second

// leaseTTL is the time to live of the Redis leases of max_in_flight
// slots: the store's lease_ttl, else the server's write_timeout and
// leaseSlack more, else core's default.
func (h *Handler) leaseTTL(ctx caddy.Context) time.Duration {
	if h.Store != nil && h.Store.Redis != nil && h.Store.Redis.LeaseTTL > 0 {
		return time.Duration(h.Store.Redis.LeaseTTL)
	}
	if srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok && srv != nil && srv.WriteTimeout > 0 {
		return time.Duration(srv.WriteTimeout) + leaseSlack
	}
	return core.DefaultLeaseTTL
}

// responder builds the core.Responder of Headers, Body and RetryJitter.
func (h *Handler) responder() (answer.Responder, error) {
	var r answer.Responder
	var err error
	if r.Headers, err = answer.ParseHeaderSet(h.Headers); err != nil {
		return r, caddyError(err)
	}
	if r.Body, r.Defer, err = parseBody(h.Body); err != nil {
		return r, caddyError(err)
	}
	r.Jitter = h.RetryJitter
	return r, caddyError(r.Validate())
}

// Validate checks the settings that Provision does not need to build.
func (h *Handler) Validate() error {
	if len(h.Zones) == 0 {
		return errors.New("zones: at least one zone is required")
	}
	onRedis := h.Store != nil && h.Store.Redis != nil
	for i, z := range h.Zones {
		if err := z.validate(); err != nil {
			return fmt.Errorf("zones[%d].%w", i, err)
		}
		if err := h.checkScope(z); err != nil {
			return fmt.Errorf("zones[%d].%w", i, err)
		}
	}
	if _, err := h.responder(); err != nil {
		return err
	}
	if err := checkID(h.ID, h.Share); err != nil {
		return err
	}
	if onRedis && h.Store.Redis.LeaseTTL != 0 && !h.inFlight() {
		return optionErrorf("store", "store.redis.lease_ttl: only zones with max_in_flight take leases")
	}
	if h.Fallback != "" && h.Fallback != fallbackLocal {
		return optionErrorf("fallback", "fallback %q: unknown (want local)", h.Fallback)
	}
	if err := model.CheckFallback(h.Fallback == fallbackLocal, h.instances(), !onRedis); err != nil {
		return caddyError(err)
	}
	if h.Store != nil {
		return h.Store.validate()
	}
	return nil
}

// checkScope checks z's demand_scope against the handler's store.
func (h *Handler) checkScope(z *Zone) error {
	onRedis := h.Store != nil && h.Store.Redis != nil
	return caddyError(demand.CheckScope(z.DemandScope, onRedis, z.Rate != "" && z.DemandKeys >= 0))
}

// instances is Instances, or with the local fallback and no Instances, 1.
func (h *Handler) instances() int {
	if h.Fallback == fallbackLocal && h.Instances == 0 {
		return 1
	}
	return h.Instances
}

// inFlight reports whether a zone has max_in_flight.
func (h *Handler) inFlight() bool {
	for _, z := range h.Zones {
		if z.MaxInFlight > 0 {
			return true
		}
	}
	return false
}

// Cleanup releases the handler's references to its watches and its
// zones' metric series, then to its stores (a fleet's demand sends its
// last parts through its store's client); the last reference to a Redis
// store closes its client. It is safe to call more than once and after a
// failed Provision.
func (h *Handler) Cleanup() error {
	h.unregister()
	var errs []error
	for _, key := range h.watches {
		if _, err := watches.Delete(key); err != nil {
			errs = append(errs, err)
		}
	}
	h.watches = nil
	for _, id := range h.series {
		if _, err := zoneSeries.Delete(id); err != nil {
			errs = append(errs, err)
		}
	}
	h.series = nil
	for _, key := range h.stores {
		if _, err := stores.Delete(key); err != nil {
			errs = append(errs, err)
		}
	}
	h.stores = nil
	return errors.Join(errs...)
}

// ServeHTTP decides r against every zone that applies to it and either
// lets it proceed to next or answers it (429), through core's Gate; the
// in-flight slots of its zones with max_in_flight are held until next
// returns. When an
// admitted request's delay is cut short because the client left, it
// returns nil without calling next: there is nobody left to answer, and
// the decision is counted with outcome "cancelled".
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	var buf [8]model.Ask
	var zbuf [8]int
	asks, zones := buf[:0], zbuf[:0] // zones[i]: the index of asks[i]'s zone
	for i, z := range h.Zones {
		ask, ok, err := z.ask(r, repl)
		if err != nil {
			return caddyhttp.Error(http.StatusInternalServerError, err)
		}
		if ok {
			asks = append(asks, ask)
			zones = append(zones, i)
		}
	}
	if len(asks) == 0 {
		setPlaceholders(repl, "", "", false)
		return next.ServeHTTP(w, r)
	}

	start := time.Now()
	h.recordDemand(start, asks, zones)
	v, proceed := h.gate.Serve(w, r, asks)
	defer v.Slots.Release() // max_in_flight: when next returns, panics included
	elapsed := time.Since(start)
	zone := h.reportedZone(v, asks)
	near := v.NearMiss(h.Zones[zone].nearAt)
	h.metrics.observe(zone, v, elapsed, near)
	h.countKeys(start.UnixNano(), zone, near, v, asks, zones)

	rejected := v.Outcome == core.OutcomeRejected || v.Outcome == core.OutcomeDryRunRejected ||
		v.Outcome == core.OutcomeStoreErrorDeny
	var zoneName any = ""
	remaining := ""
	if v.Decision.Limit != nil {
		zoneName = h.Zones[zone].nameValue // the decision's zone
		remaining = strconv.FormatFloat(math.Floor(v.Decision.Remaining), 'f', -1, 64)
	}
	setPlaceholders(repl, zoneName, remaining, rejected)
	if v.Err != nil {
		h.warnStoreError(v)
	}
	if rejected {
		h.logRejection(zone, v, asks)
	}
	if !proceed {
		if rejected && v.Outcome != core.OutcomeDryRunRejected && h.deferred {
			return caddyhttp.Error(http.StatusTooManyRequests, errRateLimited)
		}
		return nil
	}
	if h.counted {
		return h.serveCounted(w, r, next, asks, zones, &v)
	}
	return next.ServeHTTP(w, r)
}

// serveCounted passes an admitted request to next through a recorder of
// its response, for a handler with a zone that must see it (count_status,
// a cost from the response), and settles the admission v of asks, whose
// zones are zones, with its status, header (with the values of its zones'
// response_cost: responseHeader) and body's size (Gate.Answered): the
// status next wrote, or that of the error it returned (as an upstream
// timeout's 504, written by Caddy's error handling), 200 when it wrote
// nothing. A panic in next once the response began, as reverse_proxy
// aborts a response whose client left or whose upstream broke off, is
// settled by Gate.Aborted and goes on; a panic before keeps the charges.
func (h *Handler) serveCounted(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, asks []model.Ask, zones []int, v *core.Verdict) error {
	rec := caddyhttp.NewResponseRecorder(w, nil, nil) // streams, flushes and hijacks as w
	answered := false
	defer func() {
		if status := finalStatus(rec); !answered && status != 0 {
			h.gate.Aborted(asks, v, status, h.responseHeader(r, rec, zones), int64(rec.Size()))
		}
	}()
	err := next.ServeHTTP(rec, r)
	answered = true
	status := finalStatus(rec)
	var he caddyhttp.HandlerError
	switch {
	case status != 0:
	case errors.As(err, &he):
		status = he.StatusCode
		if status == 0 {
			status = http.StatusInternalServerError
		}
	case err != nil:
		status = http.StatusInternalServerError
	default:
		status = http.StatusOK
	}
	h.gate.Answered(r.Context(), asks, v, status, h.responseHeader(r, rec, zones), int64(rec.Size()))
	return err
}

// finalStatus is the status rec recorded: 0 for none, and for an
// informational one (1xx, such as Early Hints' 103) that comes before the
// final status, 101 apart.
func finalStatus(rec caddyhttp.ResponseRecorder) int {
	if s := rec.Status(); s >= 200 || s == http.StatusSwitchingProtocols {
		return s
	}
	return 0
}

// responseHeader is the header of the response rec recorded, as
// Gate.Answered reads it: rec's own, or when one of zones has a
// ResponseCost, a copy of it in which each such zone's
// responseCostHeader holds the value of its template, which r's replacer
// expands with {http.response.status} and {http.response.size} set to
// rec's status and size, as Caddy's access log sets them.
func (h *Handler) responseHeader(r *http.Request, rec caddyhttp.ResponseRecorder, zones []int) http.Header {
	var header http.Header
	var repl *caddy.Replacer
	for _, i := range zones {
		z := h.Zones[i]
		if z.ResponseCost == "" {
			continue
		}
		if header == nil {
			repl = r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
			repl.Set("http.response.status", finalStatus(rec))
			repl.Set("http.response.size", rec.Size())
			header = rec.Header().Clone()
			if header == nil {
				header = http.Header{}
			}
		}
		header.Set(z.limit.CostHeader, repl.ReplaceAll(z.ResponseCost, ""))
	}
	if header == nil {
		return rec.Header()
	}
	return header
}

// countKeys feeds the zones' heavy-hitter sketches with a verdict about
// the zone of index reported: every zone asked is charged the cost it
// admitted, and the reported zone counts a near miss or a rejection (a
// rejection in dry_run mode too). Store failures and cancelled waits
// count nothing.
func (h *Handler) countKeys(now int64, reported int, near bool, v core.Verdict, asks []model.Ask, zones []int) {
	switch v.Outcome {
	case core.OutcomeAllowed:
		for i := range asks {
			z, n := h.Zones[zones[i]], 0.0
			if near && zones[i] == reported {
				n = 1
			}
			z.top.Add(now, z.topKey(asks[i].Key), 0, asks[i].Cost, n)
		}
	case core.OutcomeRejected, core.OutcomeDryRunRejected:
		for i := range asks {
			if zones[i] == reported {
				z := h.Zones[reported]
				z.top.Add(now, z.topKey(asks[i].Key), 1, 0, 0)
			}
		}
	}
}

// recordDemand records in each zone asked the cost its key asks at start,
// before the decision (which may wait for Redis or a leaky_bucket's
// delay), so that a key's asks are recorded in the order they came:
// demand is what clients ask, admitted or refused.
func (h *Handler) recordDemand(start time.Time, asks []model.Ask, zones []int) {
	now := start.UnixNano()
	if testClock != nil {
		now = testClock()
	}
	for i := range asks {
		if z := h.Zones[zones[i]]; z.demand != nil {
			z.demand.Add(now, z.topKey(asks[i].Key), asks[i].Cost)
		}
	}
}

// errRateLimited is the error of a rejection that handle_errors answers
// (body error).
var errRateLimited = errors.New("rate limited")

// parseBody reads Body: core's formats, or "error" to defer the answer to
// handle_errors.
func parseBody(s string) (answer.BodyFormat, bool, error) {
	if s == "error" {
		return answer.BodyNone, true, nil
	}
	f, err := answer.ParseBodyFormat(s)
	if err != nil {
		return f, false, &model.FieldError{Field: "body", Value: s, Reason: "unknown (want json, problem, text, none or error)"}
	}
	return f, false, nil
}

// reportedZone is the index of the zone a verdict is about: the zone of its
// decision or, when the store failed without one, the first zone asked.
func (h *Handler) reportedZone(v core.Verdict, asks []model.Ask) int {
	name := asks[0].Limit.Name
	if v.Decision.Limit != nil {
		name = v.Decision.Limit.Name
	}
	return h.zoneIndex[name]
}

// setPlaceholders sets {http.sluice.*} on repl; zone is a zone's name
// (Zone.nameValue, or "").
func setPlaceholders(repl *caddy.Replacer, zone any, remaining string, rejected bool) {
	repl.Set("http.sluice.zone", zone)
	repl.Set("http.sluice.remaining", remaining)
	if rejected {
		repl.Set("http.sluice.rejected", rejectedValue)
	} else {
		repl.Set("http.sluice.rejected", admittedValue)
	}
}

// rejectedValue and admittedValue are {http.sluice.rejected}'s values,
// boxed once: a string put in the replacer's map of values is otherwise
// an allocation per request. They stay strings, as a CEL expression
// comparing the placeholder to "true" reads them.
var rejectedValue, admittedValue any = "true", "false"

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
