package traefikplugin

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/model"
)

// DryRunHeader is the request header that marks, in dry_run mode, a request
// the limits would have rejected: "X-Sluice-Dry-Run: rejected" reaches the
// upstream. In dry_run mode the middleware removes any X-Sluice-Dry-Run a
// client sent, so the upstream can trust it.
const DryRunHeader = "X-Sluice-Dry-Run"

// entry is one middleware configuration's runtime state, shared by every
// handler New returns for it.
type entry struct {
	name string
	// handler returns the http.Handler of the entry's lane in front of
	// next. A closure over the lane: under Yaegi the text of a type spells
	// out every type its fields point to, and a func field spells only its
	// signature, so the text of an entry, and of every type and function
	// signature holding one, leaves out the lane's.
	handler func(next http.Handler) http.Handler
	redis   *redisClient // nil with the in-memory store
	own     string       // the registry's ownStoreID of its own in-memory store, or ""
	report  *report
	meter   *meter // nil without metrics

	// used is registry.seq of the last New that returned it, done the
	// Done channel of that call's context, and gone the registry's clock
	// when done was first seen closed, or 0 (see registry.liveLocked).
	// Under registry.mu.
	used uint64
	done <-chan struct{}
	gone int64
}

// newEntry builds the Gate and the Lane of s. memory is the process-wide
// in-memory store: the store itself, or with rc the local fallback. cm,
// when not nil, counts every verdict, which m exports. clock is the gate's and the
// report's (nil: the system clock, read inline).
func newEntry(name string, s *settings, memory *core.MemoryStore, rc *redisClient, m *meter, cm *core.Meter, clock model.Clock, out io.Writer) (*entry, error) {
	asks := make([]core.LaneAsk, len(s.plans))
	costs := make(map[*model.Limit]float64, len(s.plans))
	for i, p := range s.plans {
		asks[i] = core.LaneAsk{Limit: p.limit, Spec: p.spec, Missing: p.missing, Cost: p.cost}
		costs[p.limit] = p.cost
	}
	cfg := core.GateConfig{
		Limits:       s.limits,
		Store:        memory,
		Responder:    s.responder,
		Mode:         s.mode,
		OnStoreError: s.policy,
		Clock:        clock,
		MaxCost:      costs,
		LeaseTTL:     s.leaseTTL,
	}
	if rc != nil {
		cfg.Store = rc.store
		cfg.Breaker = &rc.breaker
		cfg.Timeout = rc.timeout
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
		redis:  rc,
		report: &report{name: name, out: out, clock: clock, base: time.Now()},
		meter:  m,
	}
	// Without Redis, note is all there is to do: under Yaegi the call of
	// observe would cost every rejection a frame.
	obs := func(v *core.Verdict) {
		if v.Outcome != core.OutcomeAllowed {
			note(e.report, v.Outcome)
		}
	}
	// With Redis, observe follows its health: a verdict simply allowed
	// matters only while an outage is reported (down), which the lane
	// loads before calling it.
	var down *int32
	if rc != nil {
		obs = func(v *core.Verdict) { observe(e, v) }
		down = &rc.down
	}
	lane := core.NewLane(core.LaneConfig{
		Gate:         gate,
		Asks:         asks,
		Specs:        s.specs,
		Prefix:       name + "\x00",
		Observe:      obs,
		Watch:        rc != nil,
		Down:         down,
		Meter:        cm,
		DryRunHeader: DryRunHeader,
		Exempt:       s.exempt,
		ExemptIP:     s.ip,
	})
	// counted: a limit counts only some responses.
	counted := core.AnswerCounts(s.limits)
	e.handler = func(next http.Handler) http.Handler { return laneHandler(lane, counted, cm != nil, next) }
	return e, nil
}

// observe counts the verdicts of e that are not simply allowed in its
// report, and follows Redis's health. It is a function calling method
// expressions: under Yaegi a method call costs four times a function's.
func observe(e *entry, v *core.Verdict) {
	if v.Outcome != core.OutcomeAllowed {
		note(e.report, v.Outcome)
	}
	if c := e.redis; c != nil && (v.Err != nil || atomic.LoadInt32(&c.down) != 0) {
		(*redisClient).observe(c, v.Err)
	}
}

// laneHandler returns the http.Handler New returns for lane in front of
// next: one per router, all of a configuration's handlers sharing its
// entry. It decides each request on every limit that applies to it and
// either answers 429 or passes it on, after any leaky_bucket delay; all of
// that is core's, in the function that serves lane at the least cost: if
// counted (a limit counts only some responses, countStatus),
// core.ServeLaneCounted, which wraps the writer to see the status; if
// metered, core.ServeLaneMetered, which counts every verdict in the
// entry's meter; else core.ServeLane. Without countStatus the
// ResponseWriter reaches next untouched, so websockets and streaming
// work. The handler is a closure, not a type: under Yaegi a type holding
// the lane spells the lane's type text in its own, and that of its
// pointer and of its ServeHTTP, and an interpreted method call costs more
// than a closure call.
func laneHandler(lane *core.Lane, counted, metered bool, next http.Handler) http.Handler {
	if counted {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { core.ServeLaneCounted(lane, next, w, r) })
	}
	if metered {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { core.ServeLaneMetered(lane, next, w, r) })
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { core.ServeLane(lane, next, w, r) })
}
