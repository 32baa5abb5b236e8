package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
)

// In-flight limits. A Limit with MaxInFlight holds, besides its rate, a
// count of its key's requests in progress. A Gate decides a request's
// rates first (all-or-nothing, as always) and only if they admit it takes
// one in-flight slot of every limit that has MaxInFlight, again
// all-or-nothing; if a slot is refused, the rates' charges are refunded
// (Store.Refund), so that a rejected request holds nothing anywhere. An
// admitted request keeps its slots until the host releases them
// (Verdict.Slots) when its handler chain returns: after the response, a
// panic or the client's cancellation alike.
//
// The slots of a limit are decided by a Limit of their own (Limit.flight),
// named as the limit, whose answer strings advertise the concurrency
// (RateLimit-Policy: "api";q=10;qu="concurrent-requests") and whose
// namespace, "<name>:in_flight", keeps its keys apart from the rate's.

// DefaultLeaseTTL is the time to live of a Redis in-flight lease when
// GateConfig.LeaseTTL is zero: 30 s, a common request timeout, and 5 s
// more. It bounds how long the slots of a proxy that crashed stay taken.
const DefaultLeaseTTL = 35 * time.Second

// flightTable is a MemoryStore's count of requests in flight, by the hash
// of (flight limit, key) as its states are. A key's entry exists only
// while it has requests in flight, so the table holds at most one entry
// per request in progress.
type flightTable struct {
	mu    sync.Mutex
	held  map[uint64]int
	total int
}

func newFlightTable() *flightTable {
	return &flightTable{held: make(map[uint64]int)}
}

// InFlight is the number of in-flight slots the store's requests hold,
// over every limit and key.
func (s *MemoryStore) InFlight() int {
	t := s.flight
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// AcquireSlots implements model.SlotStore, exactly: one lock over the count of
// every key of the request.
func (s *MemoryStore) AcquireSlots(ctx context.Context, asks []model.Ask, lease string, ttl time.Duration, out []model.Decision) error {
	var hb [maxAsks]uint64
	hs := hb[:0]
	for i := range asks {
		hs = append(hs, s.hash(asks[i].Limit, asks[i].Key))
	}
	t := s.flight
	all := true
	t.mu.Lock()
	for i := range asks {
		out[i] = model.FlightDecision(asks[i].Limit, t.held[hs[i]])
		all = all && out[i].Allowed
	}
	if all {
		for _, h := range hs {
			t.held[h]++
		}
		t.total += len(hs)
	}
	t.mu.Unlock()
	return nil
}

// addSlots takes a slot of every ask, whether or not it has one free: the
// count of slots held on another store, which the fallback's shares must
// see (see Slots).
func (s *MemoryStore) addSlots(asks []model.Ask) {
	t := s.flight
	t.mu.Lock()
	for i := range asks {
		t.held[s.hash(asks[i].Limit, asks[i].Key)]++
	}
	t.total += len(asks)
	t.mu.Unlock()
}

// ReleaseSlots implements model.SlotStore; a key's entry goes at zero.
func (s *MemoryStore) ReleaseSlots(ctx context.Context, asks []model.Ask, lease string) error {
	t := s.flight
	t.mu.Lock()
	for i := range asks {
		h := s.hash(asks[i].Limit, asks[i].Key)
		switch n := t.held[h]; {
		case n > 1:
			t.held[h] = n - 1
		case n == 1:
			delete(t.held, h)
		default:
			continue
		}
		t.total--
	}
	t.mu.Unlock()
	return nil
}

// RenewSlots implements model.SlotStore: a memory store's slots never expire.
func (s *MemoryStore) RenewSlots(ctx context.Context, asks []model.Ask, lease string, ttl time.Duration) error {
	return nil
}

// gateSlots is the in-flight part of a Gate that has limits with
// MaxInFlight.
type gateSlots struct {
	store    model.SlotStore // the gate's primary store
	fallback *MemoryStore    // its fallback, or nil
	ttl      time.Duration
	// remote: the store is a redisstore.Store, whose leases expire and are
	// named by leases and a counter: random, so that instances sharing
	// a Redis never pick the same name.
	remote bool
	leases string
	seq    uint64
	// held asserts, by lease, each of the gate's Slots in progress
	// (assertLease), when it has a Redis store and a fallback (else nil):
	// after an outage they are asserted on Redis again (reassertSlots)
	// before Redis admits another request. Functions, not *Slots: Yaegi
	// v0.16.1 cannot build the type cycle Gate, Slots, Gate.
	mu   sync.Mutex
	held map[string]func() error
	// dirty is slotsClean, or slotsDirty once Redis may not hold every
	// lease of held (a call failed, or the fallback took slots), or
	// slotsAsserting while one request asserts them; atomic.
	dirty int32
	// order keeps, with held, a decision on Redis (read-locked) and one
	// by the fallback (locked) from overlapping: a slot the fallback gave
	// is then in held, and dirty, before a later request reaches Redis,
	// and a request that reached Redis is counted by the fallback before
	// a later fallback decision.
	order sync.RWMutex
}

// The values of gateSlots.dirty.
const (
	slotsClean int32 = iota
	slotsDirty
	slotsAsserting
)

// errAsserting is the store error of a request that found another one
// asserting the gate's slots on Redis after an outage: it is decided by
// the fallback meanwhile, as during the outage.
var errAsserting = errors.New("sluice: asserting the slots held through an outage on the store")

// newGateSlots returns the in-flight part of a gate of cfg, or nil when
// no limit of cfg has MaxInFlight.
func newGateSlots(cfg *GateConfig) (*gateSlots, error) {
	flight := false
	for _, l := range cfg.Limits {
		flight = flight || l.MaxInFlight > 0
	}
	if cfg.LeaseTTL < 0 {
		return nil, model.Refuse("lease_ttl", cfg.LeaseTTL.String(), "must not be negative")
	}
	if !flight {
		return nil, nil
	}
	gs := &gateSlots{ttl: cfg.LeaseTTL}
	if gs.ttl == 0 {
		gs.ttl = DefaultLeaseTTL
	}
	var ok bool
	if gs.store, ok = cfg.Store.(model.SlotStore); !ok {
		return nil, fmt.Errorf("max_in_flight: the store %T does not count requests in flight (the memory and Redis stores do)", cfg.Store)
	}
	if cfg.Fallback != nil {
		if gs.fallback, ok = cfg.Fallback.(*MemoryStore); !ok {
			return nil, fmt.Errorf("max_in_flight: the fallback store %T does not count requests in flight (the memory store does)", cfg.Fallback)
		}
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("max_in_flight: naming leases: %w", err)
	}
	gs.leases = hex.EncodeToString(b[:]) + "-"
	_, gs.remote = cfg.Store.(*redisstore.Store)
	if gs.remote && gs.fallback != nil {
		gs.held = make(map[string]func() error)
	}
	return gs, nil
}

// flightShare is the in-flight slots of one of n instances deciding
// locally while the store fails: most/n, but at least one.
func flightShare(most, n int) int {
	if most/n < 1 {
		return 1
	}
	return most / n
}

// Slots are the in-flight slots an admitted request holds: one of each of
// its limits with MaxInFlight. The host must call Release when the request
// is done, that is when its handler chain returns (with defer, so that a
// panic releases them too). A Redis lease not released, because the
// process died or Redis could not be reached, expires GateConfig.LeaseTTL
// after it was taken or last renewed; while the request lasts, its leases
// are renewed every third of that.
//
// With a fallback store, the slots are counted in both stores as long as
// they are held, so that the bound holds across an outage and the
// recovery: slots taken on Redis count in the fallback's share too, and
// slots the fallback took while Redis failed are added to Redis as leases
// once it answers again (at their next renewal, and before the gate's
// next request is admitted on Redis: see reassertSlots).
type Slots struct {
	// gs and timeout are the gate's slots and Timeout, not the *Gate:
	// under Yaegi every type's text spells out the types it points to,
	// and a Verdict's, which points to its Slots, would spell the gate's
	// (thousands of bytes kept for each type that names a Verdict).
	gs      *gateSlots
	timeout time.Duration
	asks    []model.Ask // of the flight limits, on the gate's store
	local   []model.Ask // of the fallback's shares, on the fallback; nil without
	lease   string
	mu      sync.Mutex
	timer   *time.Timer // renews a Redis lease; nil for memory
	done    bool
	// leased: asks are held on the gate's store (taken there, or added
	// since as leases); false for slots the fallback took.
	leased bool
}

// Release gives the slots back. It may be called on nil Slots, and more
// than once: only the first call releases.
func (s *Slots) Release() {
	if s != nil {
		releaseSlots(s)
	}
}

// releaseSlots is Release as a function: under Yaegi a method call costs
// four times as much.
func releaseSlots(s *Slots) {
	s.mu.Lock()
	done, leased := s.done, s.leased
	s.done = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	if done {
		return
	}
	gs := s.gs
	if gs.held != nil {
		gs.mu.Lock()
		delete(gs.held, s.lease)
		gs.mu.Unlock()
	}
	if leased {
		releaseLease(s.timeout, gs.store, s.asks, s.lease)
	}
	if s.local != nil {
		_ = gs.fallback.ReleaseSlots(context.Background(), s.local, "")
	}
}

// releaseLease gives back the slots of lease on store, without a
// request's context, which may have ended, but bounded by the gate's
// timeout; a failure leaves a Redis lease to expire.
func releaseLease(timeout time.Duration, store model.SlotStore, asks []model.Ask, lease string) {
	ctx, cancel := gateBackground(timeout)
	_ = store.ReleaseSlots(ctx, asks, lease)
	cancel()
}

// renew extends the leases and arms the next renewal, unless the slots
// were released meanwhile.
func (s *Slots) renew() {
	_ = assertLease(s) // a failure is retried at the next renewal
	s.mu.Lock()
	if !s.done {
		s.timer.Reset(s.gs.ttl / 3)
	}
	s.mu.Unlock()
}

// assertLease sets the Redis lease of s to expire the gate's LeaseTTL
// from now, adding it if Redis does not hold it (it was lost, or the
// fallback took the slots), unless s was released. A release that ran
// meanwhile, and so missed the lease, is repeated. A failure marks the
// gate's slots dirty.
func assertLease(s *Slots) error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done {
		return nil
	}
	gs := s.gs
	ctx, cancel := gateBackground(s.timeout)
	err := gs.store.RenewSlots(ctx, s.asks, s.lease, gs.ttl)
	cancel()
	if err != nil {
		if gs.held != nil {
			atomic.StoreInt32(&gs.dirty, slotsDirty)
		}
		return err
	}
	s.mu.Lock()
	s.leased = true
	done = s.done
	s.mu.Unlock()
	if done {
		releaseLease(s.timeout, gs.store, s.asks, s.lease)
	}
	return nil
}

// reassertSlots asserts on Redis every lease the gate holds, when its
// slots are dirty: after an outage Redis may have lost leases (it
// restarted, or they expired unrenewed) and lacks those of the slots the
// fallback took. A request is admitted on Redis only once they are all
// there, so that they count. It returns errAsserting when another request
// is asserting them, or they became dirty again meanwhile.
func reassertSlots(g *Gate) error {
	gs := g.slots
	if !atomic.CompareAndSwapInt32(&gs.dirty, slotsDirty, slotsAsserting) {
		return errAsserting
	}
	gs.mu.Lock()
	held := make([]func() error, 0, len(gs.held))
	for _, assert := range gs.held {
		held = append(held, assert)
	}
	gs.mu.Unlock()
	for _, assert := range held {
		if err := assert(); err != nil {
			atomic.StoreInt32(&gs.dirty, slotsDirty)
			return err
		}
	}
	if !atomic.CompareAndSwapInt32(&gs.dirty, slotsAsserting, slotsClean) {
		return errAsserting
	}
	return nil
}

// gateBackground is a context for work that outlives a request's own
// (refunds, releases, renewals): bounded by the gate's timeout.
func gateBackground(timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout > 0 {
		return context.WithTimeout(context.Background(), timeout)
	}
	return context.WithCancel(context.Background())
}

// flightDecide is Decide for a gate with in-flight limits. It decides the
// rates of asks (those of limits that have one), then, if they admit the
// request, takes its in-flight slots, refunding the rates' charges if a
// slot is refused or the store fails under FailClosed. It returns the
// verdict, holding the slots taken, and the asks of the rates, which
// answer refunds if the client leaves during a delay.
func flightDecide(g *Gate, ctx context.Context, asks []model.Ask) (Verdict, []model.Ask) {
	rated := make([]model.Ask, 0, len(asks))
	var flight []model.Ask
	for i := range asks {
		l := asks[i].Limit
		if l.Flight() != nil {
			flight = append(flight, model.Ask{Limit: l.Flight(), Key: asks[i].Key, Cost: 1})
		}
		if l.Rated() {
			rated = append(rated, asks[i])
		}
	}
	v := g.decide(ctx, rated)
	if len(flight) == 0 || v.Outcome != OutcomeAllowed && v.Outcome != OutcomeStoreErrorAllow {
		return v, rated
	}
	// The rates are charged unless the store failed and FailOpen let the
	// request through uncharged.
	charged := v.Err == nil || v.Fallback
	out := make([]model.Decision, len(flight), len(flight)+1)
	slots, decided, err := takeFlight(g, ctx, asks, flight, v.Err, out)
	if !decided {
		if clientGone(ctx) {
			// The store failed because the client left: the request
			// goes no further, not even through FailOpen.
			if charged {
				g.Refund(rated, &v)
			}
			return Verdict{Outcome: OutcomeCancelled, Err: err}, rated
		}
		if g.cfg.OnStoreError == FailClosed {
			if charged {
				g.Refund(rated, &v)
			}
			return Verdict{Outcome: OutcomeStoreErrorDeny, Err: err, Decision: model.Decision{RetryAfter: time.Second}}, rated
		}
		v.Outcome, v.Err = OutcomeStoreErrorAllow, err
		return v, rated
	}
	if v.Decision.Limit != nil {
		out = append(out, v.Decision)
	}
	nv := g.classify(out)
	// The rates' charges, for answer's refund. One field per statement:
	// Yaegi v0.16.1 drops the other values of an assignment that mixes a
	// call with them.
	nv.Err, nv.Fallback, nv.chargedLocal = v.Err, v.Fallback, v.chargedLocal
	nv.charged = v.charges()
	if err != nil {
		nv.Err, nv.Fallback = err, true
	}
	if nv.Outcome != OutcomeAllowed {
		if charged {
			g.Refund(rated, &v)
		}
		return nv, rated
	}
	nv.Delay, nv.Slots = v.Delay, slots
	if v.Outcome == OutcomeStoreErrorAllow {
		nv.Outcome = OutcomeStoreErrorAllow
	}
	return nv, rated
}

// takeFlight takes the in-flight slots flight of the request whose asks
// they come from, from the gate's store or, when it fails (or failed
// already, with failed, for the request's rates), from the fallback store
// with each instance's share. It writes the decisions to out and returns
// the slots if all of them were granted. decided is false when no store
// decided (out is then unspecified and nothing is held); err is the
// primary store's error, if it failed.
//
// With a fallback, the slots are counted on it whichever store decides:
// the shares are taken unconditionally before the gate's store decides,
// and given back if it refuses or fails.
func takeFlight(g *Gate, ctx context.Context, asks, flight []model.Ask, failed error, out []model.Decision) (slots *Slots, decided bool, err error) {
	gs := g.slots
	err = failed
	var probe uint64
	if b := g.cfg.Breaker; err == nil && b != nil && atomic.LoadInt32(&b.state) != breakerClosed {
		var ok bool
		if ok, probe = b.Allow(g.now()); !ok {
			err = ErrBreakerOpen
		}
	}
	var local []model.Ask
	if gs.fallback != nil {
		local = make([]model.Ask, 0, len(flight))
		for i := range asks {
			if l := g.fallback[asks[i].Limit]; l.Flight() != nil {
				local = append(local, model.Ask{Limit: l.Flight(), Key: asks[i].Key, Cost: 1})
			}
		}
	}
	lease := ""
	if gs.remote {
		lease = gs.leases + strconv.FormatUint(atomic.AddUint64(&gs.seq, 1), 36)
	}
	if gs.held != nil {
		gs.order.RLock()
	}
	if err == nil && gs.held != nil && atomic.LoadInt32(&gs.dirty) != slotsClean {
		err = reassertSlots(g)
		if b := g.cfg.Breaker; b != nil && err != nil && err != errAsserting {
			g.report(b, context.Background(), err, probe)
		}
	}
	if err == nil {
		if local != nil {
			gs.fallback.addSlots(local)
		}
		// Not the request's context: a call cut short by the client may
		// still run on the server, after a release sent on another
		// connection, and leave the lease to expire; so the call always
		// ends, within the gate's timeout, and a lease taken for a
		// client that left meanwhile is given back at once.
		tctx, cancel := gateBackground(g.cfg.Timeout)
		err = gs.store.AcquireSlots(tctx, flight, lease, gs.ttl, out)
		cancel()
		if b := g.cfg.Breaker; b != nil {
			g.report(b, context.Background(), err, probe)
		}
		if err == nil {
			slots = holdSlots(g, flight, local, lease, out, true)
			if gs.held != nil {
				gs.order.RUnlock()
			}
			if slots != nil && clientGone(ctx) {
				releaseSlots(slots)
				return nil, false, ctx.Err()
			}
			if slots == nil && local != nil {
				_ = gs.fallback.ReleaseSlots(ctx, local, "")
			}
			return slots, true, nil
		}
		if local != nil {
			_ = gs.fallback.ReleaseSlots(ctx, local, "")
		}
	}
	if gs.held != nil {
		gs.order.RUnlock()
	}
	if gs.fallback == nil {
		return nil, false, err
	}
	if gs.held == nil {
		if ferr := gs.fallback.AcquireSlots(ctx, local, "", 0, out); ferr != nil {
			return nil, false, err
		}
		return holdSlots(g, flight, local, lease, out, false), true, err
	}
	gs.order.Lock()
	if err != errAsserting {
		atomic.StoreInt32(&gs.dirty, slotsDirty) // Redis may have lost leases
	}
	if ferr := gs.fallback.AcquireSlots(ctx, local, "", 0, out); ferr != nil {
		gs.order.Unlock()
		return nil, false, err
	}
	slots = holdSlots(g, flight, local, lease, out, false)
	gs.order.Unlock()
	return slots, true, err
}

// holdSlots returns the Slots that acquireSlots took for lease, on the
// gate's store when leased and else on the fallback, with the decisions
// out, or nil if one refused. local are the fallback's asks, counted on
// it. On Redis, the lease is renewed every third of its lifetime, and
// the slots join the gate's held ones: slots the fallback took make them
// dirty, to be added to Redis once it answers.
func holdSlots(g *Gate, flight, local []model.Ask, lease string, out []model.Decision, leased bool) *Slots {
	for i := range out {
		if !out[i].Allowed {
			return nil
		}
	}
	gs := g.slots
	s := &Slots{gs: gs, timeout: g.cfg.Timeout, asks: flight, local: local, lease: lease, leased: leased}
	if gs.held != nil {
		gs.mu.Lock()
		gs.held[lease] = func() error { return assertLease(s) }
		gs.mu.Unlock()
		if !leased {
			atomic.StoreInt32(&gs.dirty, slotsDirty) // after joining held: see reassertSlots
		}
	}
	if gs.remote {
		s.mu.Lock()
		s.timer = time.AfterFunc(gs.ttl/3, s.renew)
		s.mu.Unlock()
	}
	return s
}

// serveFlight is Serve for a gate with in-flight limits: Serve's work
// around flightDecide. The slots of a request that may not proceed are
// released at once.
func serveFlight(g *Gate, w http.ResponseWriter, r *http.Request, asks []model.Ask) (Verdict, bool) {
	v, rated := flightDecide(g, r.Context(), asks)
	if v.Outcome == OutcomeCancelled {
		return v, false
	}
	ok := g.answer(w, r, rated, &v, 0)
	if !ok && v.Slots != nil {
		releaseSlots(v.Slots)
		v.Slots = nil
	}
	return v, ok
}

var (
	_ model.SlotStore = (*MemoryStore)(nil)
	_ model.SlotStore = (*redisstore.Store)(nil)
)
