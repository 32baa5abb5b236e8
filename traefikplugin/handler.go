package traefikplugin

import (
	"io"
	"net/http"

	"github.com/sluicehq/sluice/core"
)

// DryRunHeader is the request header that marks, in dry_run mode, a request
// the limits would have rejected: "X-Sluice-Dry-Run: rejected" reaches the
// upstream. In dry_run mode the middleware removes any X-Sluice-Dry-Run a
// client sent, so the upstream can trust it.
const DryRunHeader = "X-Sluice-Dry-Run"

// stackAsks is how many limits a request is decided on without allocating.
const stackAsks = 8

// entry is one middleware configuration's runtime state, shared by every
// handler New returns for it.
type entry struct {
	name   string
	gate   *core.Gate
	plans  []limitPlan
	specs  []*core.KeySpec
	prefix string // middleware name + NUL, before every key
	dryRun bool
	redis  *redisClient // nil with the in-memory store
	report *report
	// single: one limit, enforced, in memory, which ServeHTTP decides
	// without the generality of serve; plan and spec are then its plan
	// and key.
	single bool
	plan   *limitPlan
	spec   *core.KeySpec

	used uint64 // registry.seq of the last New that returned it; under registry.mu
}

// newEntry builds the Gate of s. memory is the process-wide in-memory
// store: the store itself, or with rc the local fallback. gateClock is the
// gate's clock (nil: the system clock, read inline), clock the reports'.
func newEntry(name string, s *settings, memory *core.MemoryStore, rc *redisClient, gateClock, clock core.Clock, out io.Writer) (*entry, error) {
	limits := make([]*core.Limit, len(s.plans))
	for i := range s.plans {
		limits[i] = s.plans[i].limit
	}
	cfg := core.GateConfig{
		Limits:       limits,
		Store:        memory,
		Responder:    s.responder,
		Mode:         s.mode,
		OnStoreError: s.policy,
		Clock:        gateClock,
	}
	if rc != nil {
		cfg.Store = rc.store
		cfg.Breaker = &rc.breaker
		cfg.Timeout = rc.opts.timeout
		if s.fallback {
			cfg.Fallback = memory
			cfg.Instances = s.instances
		}
	}
	gate, err := core.NewGate(cfg)
	if err != nil {
		return nil, err
	}
	e := &entry{
		name:   name,
		gate:   gate,
		plans:  s.plans,
		specs:  s.specs,
		prefix: name + "\x00",
		dryRun: s.mode == core.DryRun,
		redis:  rc,
		report: &report{name: name, out: out, clock: clock},
	}
	if len(s.plans) == 1 && s.mode != core.DryRun && rc == nil {
		e.single = true
		e.plan = &s.plans[0]
		e.spec = s.specs[e.plan.spec]
	}
	return e, nil
}

// handler is the http.Handler New returns: one per router, all of a
// configuration's handlers sharing its entry.
type handler struct {
	next http.Handler
	e    *entry
}

func (e *entry) handler(next http.Handler) http.Handler {
	return &handler{next: next, e: e}
}

// ServeHTTP decides the request on every limit that applies to it and
// either answers 429 or passes it on, after any leaky_bucket delay. The
// ResponseWriter reaches next untouched, so websockets and streaming work.
//
// Under Yaegi every call into the standard library costs about a
// microsecond, so this path builds each distinct key once, its asks on the
// stack, and leaves headers, answers and waits to core.Gate.Serve. Entering
// an interpreted function costs about a microsecond too, plus tens of
// nanoseconds for every value in its body, executed or not: the common
// case of one enforced in-memory limit is written out here, the rest is in
// serve. Both call core's methods as method expressions, (*T).M(x), which
// Yaegi enters like plain functions, several microseconds faster than x.M().
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := h.e
	if !e.single {
		serve(e, h.next, w, r)
		return
	}
	p := e.plan
	key, ok := (*core.KeySpec).Key(e.spec, r)
	if !ok || key == "" { // Resolve's own fast path, without its call
		key, ok = p.missing.Resolve(key, ok)
	}
	if ok {
		asks := [1]core.Ask{{Limit: p.limit, Key: e.prefix + key, Cost: p.cost}}
		v, proceed := (*core.Gate).Serve(e.gate, w, r, asks[:])
		if v.Outcome != core.OutcomeAllowed {
			(*report).note(e.report, v.Outcome)
		}
		if !proceed {
			return
		}
	}
	h.next.ServeHTTP(w, r)
}

// serve is ServeHTTP for any configuration.
func serve(e *entry, next http.Handler, w http.ResponseWriter, r *http.Request) {
	var buf [stackAsks]core.Ask
	asks := entryAsks(e, r, buf[:0])
	if e.dryRun {
		delete(r.Header, DryRunHeader)
	}
	v, proceed := (*core.Gate).Serve(e.gate, w, r, asks)
	if v.Outcome != core.OutcomeAllowed {
		(*report).note(e.report, v.Outcome)
	}
	if e.redis != nil {
		e.redis.observe(v.Err)
	}
	if !proceed {
		return
	}
	if v.Outcome == core.OutcomeDryRunRejected {
		r.Header[DryRunHeader] = []string{"rejected"}
	}
	next.ServeHTTP(w, r)
}

// entryAsks appends to asks those of every limit of e that applies to r,
// building each distinct key once.
func entryAsks(e *entry, r *http.Request, asks []core.Ask) []core.Ask {
	var kb [stackAsks]string
	var ob [stackAsks]bool
	keys, oks := kb[:], ob[:]
	if len(e.specs) > stackAsks {
		keys, oks = make([]string, len(e.specs)), make([]bool, len(e.specs))
	}
	for i, s := range e.specs {
		keys[i], oks[i] = (*core.KeySpec).Key(s, r)
	}
	for i := range e.plans {
		p := &e.plans[i]
		key, ok := keys[p.spec], oks[p.spec]
		if !ok || key == "" {
			key, ok = p.missing.Resolve(key, ok)
		}
		if ok {
			asks = append(asks, core.Ask{Limit: p.limit, Key: e.prefix + key, Cost: p.cost})
		}
	}
	return asks
}
