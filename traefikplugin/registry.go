package traefikplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/model"
)

// Bounds of the registry; see registry.
const (
	// maxEntries is the most middleware configurations kept.
	maxEntries = 1024
	// maxVersions is the most configurations kept per middleware name.
	maxVersions = 4
	// memoryKeys is the capacity of the process-wide in-memory store, in
	// (limit, key) states: 1,048,576 states, which take memory as they
	// are held (about 50 to 100 bytes each, at most some 100 MiB).
	memoryKeys = 1 << 20
	// goneAfter is how long a middleware stays in its metrics listener's
	// answers once the configuration that last created it is seen
	// replaced by one that does not (see liveLocked).
	goneAfter = 10 * time.Second
)

// plugins is the process-wide registry New uses.
var plugins = newRegistry(nil, memoryKeys, debugLog{}, errorLog{})

// debugLog and errorLog reach Traefik's log. Yaegi sends what an interpreted
// plugin prints with the fmt package's Print functions to the interpreter's
// Stdout, which Traefik logs at debug level, and what it logs with the log
// package to its Stderr, logged at error level; os.Stdout and os.Stderr are
// the process's own streams and bypass Traefik's log file and format.
type (
	debugLog struct{}
	errorLog struct{}
)

func (debugLog) Write(p []byte) (int, error) {
	fmt.Print(string(p))
	return len(p), nil
}

func (errorLog) Write(p []byte) (int, error) {
	log.Print(string(p))
	return len(p), nil
}

// registry keeps the state of every middleware across Traefik's calls of
// New, which come once per router using a middleware and again on every
// configuration reload, with no hook to release anything.
//
// An entry is a middleware's Gate and everything it needs, keyed by the
// middleware's name and its configuration: two routers using the same
// middleware get the same entry, and so share its quotas; a reload with
// an unchanged configuration finds it again; a changed configuration gets a
// new entry, with the new settings in effect at once.
//
// Counters live in stores shared by entries, so they survive both kinds
// of reload: the in-memory store is one for the whole process, and keys are
// prefixed with the middleware's name so that middlewares never share a
// bucket; a middleware with maxKeys has an in-memory store of its own
// instead, shared by its entries of that capacity and dropped with the last
// of them; a limit whose name and algorithm are unchanged keeps its counters
// under a changed rate or burst, which then applies. Redis clients are
// shared by every entry with the same connection settings and closed when
// the last such entry goes.
//
// The registry is bounded: it keeps at most maxVersions entries per
// middleware name and maxEntries in all, dropping the one least recently
// returned by New. Live entries are returned on every reload, so only
// configurations replaced long ago are dropped. Nothing here starts a
// goroutine but the metrics listeners, one per metrics address for the
// whole process (see metrics.go), held like Redis clients by the entries
// that name it, and, while a listener cannot open, the timer of its next
// try.
type registry struct {
	clock model.Clock // never nil
	// coreClock is the clock given to the in-memory store and the gates:
	// nil for the system clock, which they then read inline (cheaper
	// under Yaegi than calling a Clock).
	coreClock   model.Clock
	memoryKeys  int
	maxEntries  int       // maxEntries, but tests make it smaller
	maxVersions int       // maxVersions, likewise
	stdout      io.Writer // rejection summaries
	stderr      io.Writer // configuration notes, store outages

	mu sync.Mutex
	// own are the in-memory stores by ownStoreID: the middlewares' own
	// and, under "", the process-wide one, created on first use and kept.
	own     map[string]*ownStore
	entries map[string]*entry
	redis   map[string]*redisClient // by redisOptions.id
	seq     uint64                  // counts New calls; entry.used
	// The metrics (see metrics.go): counters by zone, histograms by
	// middleware, listeners by metrics address, and the bounds of the
	// listeners' connections and retries.
	zones    map[string]*zoneStats
	seconds  map[string]*histogram
	servers  map[string]*metricsServer
	timeouts serverTimeouts
}

// newRegistry returns an empty registry on clock; nil means the system
// clock.
func newRegistry(clock model.Clock, memoryKeys int, stdout, stderr io.Writer) *registry {
	g := &registry{
		clock:       clock,
		coreClock:   clock,
		memoryKeys:  memoryKeys,
		maxEntries:  maxEntries,
		maxVersions: maxVersions,
		stdout:      stdout,
		stderr:      stderr,
		entries:     map[string]*entry{},
		own:         map[string]*ownStore{},
		redis:       map[string]*redisClient{},
		zones:       map[string]*zoneStats{},
		seconds:     map[string]*histogram{},
		servers:     map[string]*metricsServer{},
		timeouts:    defaultTimeouts,
	}
	if clock == nil {
		g.clock = core.SystemClock()
	}
	return g
}

// New returns the sluice middleware named name, configured by config, in
// front of next. It is Traefik's plugin constructor.
//
// State is kept in a package-level registry keyed by name and config, so
// that every router using the middleware shares its quotas and a
// configuration reload keeps the counters. New starts no goroutine, but
// for the listener of a metrics address that no middleware named before.
// With no limit configured (average 0 and no limits), it returns next
// itself.
func New(ctx context.Context, next http.Handler, config *Config, name string) (http.Handler, error) {
	return plugins.new(ctx, next, config, name)
}

func (g *registry) new(ctx context.Context, next http.Handler, cfg *Config, name string) (http.Handler, error) {
	if next == nil {
		return nil, fmt.Errorf("sluice %s: no next handler", name)
	}
	if cfg == nil {
		cfg = CreateConfig()
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("sluice %s: %w", name, err)
	}
	id := name + "\x00" + string(raw)

	g.mu.Lock()
	g.seq++
	if e := g.entries[id]; e != nil {
		e.returnedLocked(g.seq, ctx)
		g.mu.Unlock()
		h := e.handler(next) // Yaegi v0.16.1 loses the handler in return e.handler(next), nil
		return h, nil
	}
	g.mu.Unlock()

	s, err := parse(cfg, name)
	if err != nil {
		return nil, fmt.Errorf("sluice %s: %w", name, err)
	}
	if len(s.plans) == 0 {
		return next, nil
	}
	e, err := g.build(ctx, id, name, s)
	if err != nil {
		return nil, fmt.Errorf("sluice %s: %w", name, err)
	}
	h := e.handler(next) // as above
	return h, nil
}

// build creates the entry id for s, or returns the one a concurrent call
// created first.
func (g *registry) build(ctx context.Context, id, name string, s *settings) (*entry, error) {
	own, maxKeys := "", g.memoryKeys
	if s.maxKeys > 0 { // one a line: Yaegi v0.16.1 drops maxKeys from a tuple with a call
		own = ownStoreID(name, s.maxKeys)
		maxKeys = s.maxKeys
	}
	memory, err := g.ownStore(own, maxKeys)
	if err != nil {
		return nil, err
	}
	var rc *redisClient
	if s.redis != nil {
		rc, err = g.redisClient(ctx, s.redis)
	}
	var m *meter
	var cm *core.Meter
	if s.metrics != nil && err == nil {
		m, cm = g.newMeter(name, s, rc)
	}
	var e *entry
	if err == nil {
		e, err = newEntry(name, s, memory, rc, m, cm, g.coreClock, g.stdout)
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.entries[id]
	if err != nil || old != nil { // e is not kept: drop what it holds
		g.releaseLocked(rc)
		g.releaseOwnLocked(own)
		g.releaseMeterLocked(m)
	}
	if err != nil {
		return nil, err
	}
	g.seq++
	if old != nil {
		old.returnedLocked(g.seq, ctx)
		return old, nil
	}
	e.own = own
	e.returnedLocked(g.seq, ctx)
	g.entries[id] = e
	for _, n := range s.notes {
		fmt.Fprintf(g.stderr, "sluice %s: %s\n", name, n)
	}
	g.evictLocked(name)
	return e, nil
}

// returnedLocked notes that New returned e in its seq-th call, for the
// configuration of Traefik's whose context is ctx. Under registry.mu.
func (e *entry) returnedLocked(seq uint64, ctx context.Context) {
	e.used = seq
	e.gone = 0
	e.done = nil
	if ctx != nil {
		e.done = ctx.Done()
	}
}

// liveLocked reports whether Traefik's configuration still has the
// middleware of e, its newest entry, by the context the last New that
// returned e was given. Traefik (v3.6) gives New the context of the
// configuration it builds and cancels it when it applies the next one,
// whose New calls then return the middlewares it still names: a
// middleware whose context is cancelled is no longer configured, once
// its new configuration has had goneAfter, from when the cancellation is
// first seen here, to create it again. A context that is never cancelled
// (context.Background) keeps e live. Under registry.mu.
func (g *registry) liveLocked(e *entry, now int64) bool {
	select {
	case <-e.done:
	default:
		return true
	}
	if e.gone == 0 {
		e.gone = now
	}
	return now-e.gone < int64(goneAfter)
}

// ownStore is the in-memory store of the middlewares with maxKeys of one
// name and capacity, or the process-wide one, and how many registry
// entries use it.
type ownStore struct {
	store *core.MemoryStore
	refs  int
}

// ownStoreID identifies the own store of middleware name with capacity
// maxKeys.
func ownStoreID(name string, maxKeys int) string {
	return name + "\x00" + strconv.Itoa(maxKeys)
}

// ownStore returns the own store id ("": the process-wide one), of
// capacity maxKeys, creating it if needed, and counts one more reference
// to it.
func (g *registry) ownStore(id string, maxKeys int) (*core.MemoryStore, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if o := g.own[id]; o != nil {
		o.refs++
		return o.store, nil
	}
	st, err := core.NewMemoryStore(core.MemoryConfig{MaxKeys: maxKeys, Clock: g.coreClock})
	if err != nil {
		return nil, err
	}
	g.own[id] = &ownStore{store: st, refs: 1}
	return st, nil
}

// releaseOwnLocked drops one reference to the own store id; the
// process-wide store ("") is kept.
func (g *registry) releaseOwnLocked(id string) {
	o := g.own[id]
	if o == nil || id == "" {
		return
	}
	if o.refs--; o.refs <= 0 {
		delete(g.own, id)
	}
}

// redisClient returns the client for o, creating it if needed, and counts
// one more reference to it. A new client tries to connect once, outside
// the registry's lock.
func (g *registry) redisClient(ctx context.Context, o *redisOptions) (*redisClient, error) {
	g.mu.Lock()
	if rc := g.redis[o.id]; rc != nil {
		rc.refs++
		g.mu.Unlock()
		return rc, nil
	}
	g.mu.Unlock()
	rc, err := newRedisClient(ctx, o, g.clock, g.stderr)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if other := g.redis[o.id]; other != nil {
		rc.close()
		other.refs++
		return other, nil
	}
	rc.refs = 1
	g.redis[o.id] = rc
	return rc, nil
}

// release drops one reference to rc (which may be nil).
func (g *registry) release(rc *redisClient) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releaseLocked(rc)
}

func (g *registry) releaseLocked(rc *redisClient) {
	if rc == nil {
		return
	}
	rc.refs--
	if rc.refs <= 0 && g.redis[rc.id] == rc {
		delete(g.redis, rc.id)
		rc.close()
	}
}

// evictLocked drops the least recently used entries beyond g.maxVersions
// for name and beyond g.maxEntries in all.
func (g *registry) evictLocked(name string) {
	for {
		var oldest, oldestOfName string
		versions := 0
		for id, e := range g.entries {
			if oldest == "" || e.used < g.entries[oldest].used {
				oldest = id
			}
			if e.name == name {
				versions++
				if oldestOfName == "" || e.used < g.entries[oldestOfName].used {
					oldestOfName = id
				}
			}
		}
		switch {
		case versions > g.maxVersions:
			g.dropLocked(oldestOfName)
		case len(g.entries) > g.maxEntries:
			g.dropLocked(oldest)
		default:
			return
		}
	}
}

func (g *registry) dropLocked(id string) {
	e := g.entries[id]
	delete(g.entries, id)
	g.releaseLocked(e.redis)
	g.releaseOwnLocked(e.own)
	g.releaseMeterLocked(e.meter)
}
