package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/inspect"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// AdminAPI is the module admin.api.sluice: endpoints of Caddy's admin API
// that show the zones of the running config, a key's state in a zone
// (and reset it), and a zone's heaviest keys. Caddy's admin server loads
// it by itself; it needs no configuration. Its endpoints are as
// sensitive as the rest of the admin API: they name clients and reset
// their limits.
//
//	GET    /sluice/zones                     every zone
//	GET    /sluice/zones/<zone>/keys/<key>   a key's state
//	DELETE /sluice/zones/<zone>/keys/<key>   reset it: the key's next request finds the zone whole
//	GET    /sluice/zones/<zone>/top?n=20     the heaviest keys by rejections, admitted cost and near misses
//	GET    /sluice/zones/<zone>/advice       the demand per key and period, and what candidate limits would refuse of it
//	DELETE /sluice/zones/<zone>/advice       forget the demand recorded: figures start again
//
// Advice takes candidates of its own as ?candidate=100/1m&burst=20
// (repeated, each burst pairing with the candidate before it). A zone is
// addressed by its ID, "<name>@<handler>", as /sluice/zones lists it and
// the metrics label it (the handler's part is the zone's key prefix
// without its slash: the handler's id, "per_ip@edge"; else the site it
// serves, "per_ip@example.com:443", "per_ip@example.com:443#1" for the
// second handler of the site with a zone per_ip; "per_ip@=api" in share
// group api; see [Handler.ID]), or by its name alone when no other zone
// of the running config has it. <key> is the key as the zone builds it
// and /top shows it (for the key {client_ip}, the client's address or,
// with a prefix, its network; a key longer than 128 bytes as its digest,
// "#" and 32 hexadecimal digits, or in full), path-escaped.
type AdminAPI struct{}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.sluice",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Routes returns the admin API's routes under /sluice/.
func (AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: "/sluice/", Handler: caddy.AdminHandlerFunc(serveAdmin)}}
}

// adminZone is a zone of a provisioned handler, as the admin API finds it.
type adminZone struct {
	id     string // the zone's ID (Zone.id)
	server string // the server's name, or "" in a share group
	h      *Handler
	z      *Zone
}

// zoneRegistry holds the zones of every provisioned handler, by ID. Caddy
// provisions a new config before it cleans up the old one, so during a
// reload an ID may have two entries (and a share group's zones of one
// name one per handler): the last registered, the newest, is the one the
// API answers for.
var zoneRegistry = struct {
	sync.Mutex
	byID map[string][]*adminZone
}{byID: map[string][]*adminZone{}}

// register adds the handler's zones to the registry.
func (h *Handler) register(ctx caddy.Context) {
	server := ""
	if srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok && srv != nil && h.Share == "" {
		server = srv.Name()
	}
	zoneRegistry.Lock()
	defer zoneRegistry.Unlock()
	for _, z := range h.Zones {
		az := &adminZone{id: z.id, server: server, h: h, z: z}
		zoneRegistry.byID[az.id] = append(zoneRegistry.byID[az.id], az)
		h.admin = append(h.admin, az)
	}
}

// unregister removes the handler's zones from the registry.
func (h *Handler) unregister() {
	zoneRegistry.Lock()
	defer zoneRegistry.Unlock()
	for _, az := range h.admin {
		list := zoneRegistry.byID[az.id]
		for i, e := range list {
			if e == az {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(zoneRegistry.byID, az.id)
		} else {
			zoneRegistry.byID[az.id] = list
		}
	}
	h.admin = nil
}

// registeredZones returns the newest entry of every ID, sorted by ID.
func registeredZones() []*adminZone {
	zoneRegistry.Lock()
	out := make([]*adminZone, 0, len(zoneRegistry.byID))
	for _, list := range zoneRegistry.byID {
		out = append(out, list[len(list)-1])
	}
	zoneRegistry.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// findZone returns the zone that ref (an ID, or a name no other zone has)
// designates.
func findZone(ref string) (*adminZone, error) {
	var named []*adminZone
	for _, az := range registeredZones() {
		if az.id == ref {
			return az, nil
		}
		if az.z.Name == ref {
			named = append(named, az)
		}
	}
	switch len(named) {
	case 0:
		return nil, apiError(http.StatusNotFound, "unknown zone %q", ref)
	case 1:
		return named[0], nil
	}
	ids := make([]string, len(named))
	for i, az := range named {
		ids[i] = az.id
	}
	return nil, apiError(http.StatusConflict, "zone name %q is used by several zones; use an ID: %s", ref, strings.Join(ids, ", "))
}

// watches holds the zones' heavy-hitter sketches and demand recorders,
// keyed by watchKey, so that a config reload keeps the rankings and the
// demand, and the zones of a share group rank and record together.
var watches = caddy.NewUsagePool()

// pooledWatch is what the pool holds for a zone: its heavy-hitter sketch
// and, for a zone with a rate and demand_keys not negative, its demand,
// recorded for the fleet in Redis with demand_scope fleet.
type pooledWatch struct {
	top    *inspect.HeavyHitters
	demand *demand.Recorder
	fleet  *redisstore.Demand
}

// Destruct implements caddy.Destructor: a fleet's demand sends its last
// parts to Redis and stops.
func (w pooledWatch) Destruct() error {
	if w.fleet != nil {
		w.fleet.Close()
	}
	return nil
}

// acquireWatch sets the sketch and demand recorder of z, whose prefix is
// set, building them on first use, and records them for Cleanup. A
// reload keeps them while the zone's top_keys, top_window, period,
// demand_keys and demand_scope are unchanged (with demand_scope fleet,
// its store st too).
func (h *Handler) acquireWatch(z *Zone, st *pooledStore) error {
	period := z.limit.PeriodNanos()
	key := z.prefix + "\x00" + z.Name + "\x00" + strconv.Itoa(z.TopKeys) + "\x00" + time.Duration(z.TopWindow).String() +
		"\x00" + strconv.FormatInt(period, 10) + "\x00" + strconv.Itoa(z.DemandKeys)
	rs, fleet := st.store.(*redisstore.Store)
	fleet = fleet && z.DemandScope == demand.ScopeFleet
	if fleet {
		key += "\x00fleet\x00" + st.key + "\x00" + z.limit.Namespace()
	}
	v, _, err := watches.LoadOrNew(key, func() (caddy.Destructor, error) {
		hh, err := inspect.NewHeavyHitters(z.TopKeys, time.Duration(z.TopWindow))
		if err != nil {
			return nil, fmt.Errorf("top_keys, top_window: %w", err)
		}
		w := pooledWatch{top: hh}
		switch {
		case period <= 0 || z.DemandKeys < 0:
		case fleet:
			w.fleet = rs.Demand(z.limit, z.prefix, z.DemandKeys, clockNow)
			w.demand = w.fleet.Recorder()
		default:
			w.demand = demand.NewRecorder(period, z.DemandKeys, clockNow())
		}
		return w, nil
	})
	if err != nil {
		return err
	}
	h.watches = append(h.watches, key)
	w := v.(pooledWatch)
	z.top = w.top
	z.demand = w.demand
	z.fleet = w.fleet
	return nil
}

// adminTimeout bounds each store call the admin API makes.
const adminTimeout = 5 * time.Second

// countBudget is the most Redis keys a zones listing scans per zone.
const countBudget = 100000

// serveAdmin routes the requests under /sluice/.
func serveAdmin(w http.ResponseWriter, r *http.Request) error {
	path := strings.TrimPrefix(r.URL.EscapedPath(), "/sluice/")
	parts := strings.Split(path, "/")
	for i, p := range parts {
		u, err := url.PathUnescape(p)
		if err != nil {
			return apiError(http.StatusBadRequest, "path segment %q: %v", p, err)
		}
		parts[i] = u
	}
	switch {
	case len(parts) == 1 && parts[0] == "zones":
		if err := onlyMethods(r, http.MethodGet); err != nil {
			return err
		}
		return writeJSON(w, listZones(r.Context()))
	case len(parts) == 4 && parts[0] == "zones" && parts[2] == "keys":
		if err := onlyMethods(r, http.MethodGet, http.MethodDelete); err != nil {
			return err
		}
		az, err := findZone(parts[1])
		if err != nil {
			return err
		}
		if parts[3] == "" {
			return apiError(http.StatusBadRequest, "empty key")
		}
		// A zone charges a long key under its digest (Zone.ask), which is
		// also the name /top shows; a digest is its own.
		key := keyspec.BoundKey(parts[3])
		if r.Method == http.MethodDelete {
			return deleteKey(w, r, az, key)
		}
		return peekKey(w, r, az, key)
	case len(parts) == 3 && parts[0] == "zones" && parts[2] == "top":
		if err := onlyMethods(r, http.MethodGet); err != nil {
			return err
		}
		az, err := findZone(parts[1])
		if err != nil {
			return err
		}
		return topKeys(w, r, az)
	case len(parts) == 3 && parts[0] == "zones" && parts[2] == "advice":
		if err := onlyMethods(r, http.MethodGet, http.MethodDelete); err != nil {
			return err
		}
		az, err := findZone(parts[1])
		if err != nil {
			return err
		}
		return advice(w, r, az)
	}
	return apiError(http.StatusNotFound, "resource not found: %s", r.URL.Path)
}

// zoneInfo is one zone in the answer of GET /sluice/zones.
type zoneInfo struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Server string `json:"server,omitempty"`
	Share  string `json:"share,omitempty"`
	// Algorithm, Rate, Quota, Period and Burst describe the zone's rate;
	// a zone with max_in_flight alone has none and omits them.
	Algorithm string  `json:"algorithm,omitempty"`
	Rate      string  `json:"rate,omitempty"`
	Quota     float64 `json:"quota,omitempty"`
	Period    float64 `json:"period_seconds,omitempty"`
	Burst     float64 `json:"burst,omitempty"`
	NearLimit float64 `json:"near_limit"`
	// MaxInFlight is the zone's max_in_flight, 0 without.
	MaxInFlight int    `json:"max_in_flight,omitempty"`
	Store       string `json:"store"`
	// Keys is the number of states the store holds, as KeysScope says;
	// nil when the store cannot count them (a Redis Cluster) or failed to.
	Keys         *int   `json:"keys"`
	KeysScope    string `json:"keys_scope"`
	KeysComplete bool   `json:"keys_complete"`
	KeysError    string `json:"keys_error,omitempty"`
}

// zonesAnswer is the answer of GET /sluice/zones.
type zonesAnswer struct {
	Zones []zoneInfo `json:"zones"`
}

// listZones describes every registered zone. A memory store identifies
// states by a hash of the zone and key, so its count is the whole
// store's (scope "store"); a Redis store's is the count of the zone's
// limit namespace (name and algorithm) on the server, scanned within
// countBudget keys (scope "namespace", which the zones of the same name
// and algorithm of other handlers share).
func listZones(ctx context.Context) zonesAnswer {
	ans := zonesAnswer{Zones: []zoneInfo{}}
	counted := map[model.Store]int{} // memory stores' counts, once per store
	for _, az := range registeredZones() {
		z, l := az.z, az.z.limit
		info := zoneInfo{
			ID: az.id, Name: z.Name, Server: az.server, Share: az.h.Share,
			NearLimit: z.nearLimit(), MaxInFlight: l.MaxInFlight, Store: az.h.store.label,
		}
		if l.Rated() {
			info.Algorithm, info.Rate, info.Quota = string(l.Algorithm), l.Rate.String(), l.Rate.Quota
			info.Period, info.Burst = l.Rate.Period.Seconds(), l.Capacity()
		}
		switch st := az.h.store.store.(type) {
		case *core.MemoryStore:
			n, ok := counted[st]
			if !ok {
				n = st.Len()
				counted[st] = n
			}
			info.Keys, info.KeysScope, info.KeysComplete = &n, "store", true
		case *redisstore.Store:
			info.KeysScope = "namespace"
			cctx, cancel := context.WithTimeout(ctx, adminTimeout)
			n, complete, err := inspect.CountKeys(cctx, st, l, countBudget)
			cancel()
			if err != nil {
				info.KeysError = err.Error()
			} else {
				info.Keys, info.KeysComplete = &n, complete
			}
		}
		ans.Zones = append(ans.Zones, info)
	}
	return ans
}

// keyAnswer is the answer of GET and DELETE /sluice/zones/<zone>/keys/<key>.
// Key is the key as /top names it. Cost units are given to the thousandth,
// Remaining rounded down, Reset and Next in seconds rounded up to the
// millisecond, so that none promises more than the zone holds. Queued is
// given for a zone that delays requests (a leaky_bucket, or a
// token_bucket with max_delay) and omitted for one that never does;
// Penalty, the seconds the key is still held out, for a zone with a
// penalty.
type keyAnswer struct {
	Zone      string   `json:"zone"`
	Key       string   `json:"key"`
	Present   bool     `json:"present"`
	Remaining *float64 `json:"remaining,omitempty"`
	Capacity  *float64 `json:"capacity,omitempty"`
	Reset     *float64 `json:"reset_seconds,omitempty"`
	Next      *float64 `json:"next_seconds,omitempty"`
	Queued    *float64 `json:"queued,omitempty"`
	Penalty   *float64 `json:"penalty_seconds,omitempty"`
	InFlight  *int     `json:"in_flight,omitempty"`
	Deleted   *bool    `json:"deleted,omitempty"`
}

// inspector returns the Inspector of the zone's store.
func (az *adminZone) inspector() (inspect.Inspector, error) {
	in, ok := inspect.Of(az.h.store.store)
	if !ok {
		return nil, apiError(http.StatusNotImplemented, "store %s cannot be inspected", az.h.store.label)
	}
	return in, nil
}

// peekKey answers GET /sluice/zones/<zone>/keys/<key>.
func peekKey(w http.ResponseWriter, r *http.Request, az *adminZone, key string) error {
	in, err := az.inspector()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	ks, err := in.Peek(ctx, az.z.limit, az.z.storeKey(key))
	if err != nil {
		return apiError(http.StatusServiceUnavailable, "store: %v", err)
	}
	l := az.z.limit
	remaining := floorMilli(ks.Remaining)
	ans := keyAnswer{Zone: az.id, Key: key, Present: ks.Present, Remaining: &remaining}
	if l.Rated() {
		capacity, reset, next := l.Capacity(), ceilMilli(ks.Reset), ceilMilli(ks.Next)
		ans.Capacity, ans.Reset, ans.Next = &capacity, &reset, &next
		if l.Algorithm == model.LeakyBucket || l.MaxDelay > 0 {
			queued := math.Round(ks.Queued*1000) / 1000
			ans.Queued = &queued
		}
	}
	if l.Penalty > 0 {
		penalty := ceilMilli(ks.Penalty)
		ans.Penalty = &penalty
	}
	if l.MaxInFlight > 0 {
		ans.InFlight = &ks.InFlight
	}
	return writeJSON(w, ans)
}

// floorMilli rounds a count of cost units down to the thousandth. The
// 1e-9 added first keeps a count that is a whole number of thousandths at
// that number where its product with 1000 falls a rounding error short.
func floorMilli(x float64) float64 {
	return math.Floor(x*1000+1e-9) / 1000
}

// ceilMilli is d in seconds, rounded up to the millisecond.
func ceilMilli(d time.Duration) float64 {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	// A whole number of milliseconds over 1000 is the nearest float64 to
	// the decimal (d.Seconds() gives 1.9969999999999999 for 1997 ms).
	return float64(ms) / 1000
}

// deleteKey answers DELETE /sluice/zones/<zone>/keys/<key>.
func deleteKey(w http.ResponseWriter, r *http.Request, az *adminZone, key string) error {
	in, err := az.inspector()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	held, err := in.Delete(ctx, az.z.limit, az.z.storeKey(key))
	if err != nil {
		return apiError(http.StatusServiceUnavailable, "store: %v", err)
	}
	return writeJSON(w, keyAnswer{Zone: az.id, Key: key, Present: false, Deleted: &held})
}

// topAnswer is the answer of GET /sluice/zones/<zone>/top. Scope says
// what it counts: "instance", the requests of this Caddy instance alone,
// whatever the store (a sketch is in memory, never shared).
type topAnswer struct {
	Zone      string     `json:"zone"`
	Scope     string     `json:"scope"`
	Since     time.Time  `json:"since"`
	Window    float64    `json:"window_seconds"`
	Counters  int        `json:"counters"`
	Rejected  []topEntry `json:"rejected"`
	Admitted  []topEntry `json:"admitted"`
	NearLimit []topEntry `json:"near_limit"`
}

// topEntry is one key of a ranking: its count over the windows, at most
// error above the true count.
type topEntry struct {
	Key   string  `json:"key"`
	Count float64 `json:"count"`
	Error float64 `json:"error"`
}

// defaultTopN and maxTopN bound the n of /top.
const (
	defaultTopN = 20
	maxTopN     = 2 * inspect.MaxSketchCounters
)

// topKeys answers GET /sluice/zones/<zone>/top?n=.
func topKeys(w http.ResponseWriter, r *http.Request, az *adminZone) error {
	n := defaultTopN
	if s := r.URL.Query().Get("n"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > maxTopN {
			return apiError(http.StatusBadRequest, "n %q: want an integer from 1 to %d", s, maxTopN)
		}
	}
	hh, now := az.z.top, time.Now().UnixNano()
	ans := topAnswer{Zone: az.id, Scope: "instance", Window: hh.Window().Seconds(), Counters: hh.Counters()}
	for w := inspect.Weight(0); int(w) < inspect.NumWeights; w++ {
		top := hh.Top(now, w, n)
		ans.Since = time.Unix(0, top.Since).UTC()
		list := make([]topEntry, len(top.Keys))
		for i, k := range top.Keys {
			list[i] = topEntry{Key: k.Key, Count: k.Count, Error: k.Error}
		}
		switch w {
		case inspect.WeightRejected:
			ans.Rejected = list
		case inspect.WeightAdmitted:
			ans.Admitted = list
		default:
			ans.NearLimit = list
		}
	}
	return writeJSON(w, ans)
}

// advice answers GET /sluice/zones/<zone>/advice, with any
// ?candidate=<rate>&burst=<n> the operator asks about, and resets the
// zone's demand on DELETE.
func advice(w http.ResponseWriter, r *http.Request, az *adminZone) error {
	rec := az.z.demand
	if rec == nil {
		return apiError(http.StatusNotFound, "zone %s records no demand (no rate, or demand_keys off)", az.id)
	}
	status, adv, err := redisstore.AnswerAdvice(r.Context(), az.z.fleet, rec, r.Method, az.id, az.z.limit, clockNow(), r.URL.Query())
	switch {
	case err != nil:
		return apiError(status, "zone %s: %v", az.id, err)
	case adv == nil:
		w.WriteHeader(status)
		return nil
	}
	return writeJSON(w, adv)
}

// onlyMethods returns a 405 error unless r's method is one of methods.
func onlyMethods(r *http.Request, methods ...string) error {
	for _, m := range methods {
		if r.Method == m {
			return nil
		}
	}
	return apiError(http.StatusMethodNotAllowed, "method %s not allowed (want %s)", r.Method, strings.Join(methods, " or "))
}

// apiError is a caddy.APIError of the given status.
func apiError(status int, format string, args ...any) error {
	return caddy.APIError{HTTPStatus: status, Err: fmt.Errorf(format, args...)}
}

// writeJSON writes v as the JSON answer.
func writeJSON(w http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return apiError(http.StatusInternalServerError, "encoding the answer: %v", err)
	}
	w.Header().Set("Content-Type", "application/json")
	_, err = w.Write(append(b, '\n'))
	return err
}

// Interface guards
var (
	_ caddy.AdminRouter = AdminAPI{}
	_ caddy.Destructor  = pooledWatch{}
)
