package core

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/await"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
)

// StoreErrorPolicy says what a Gate does with a request when its store
// cannot decide (an outage, a timeout, an open circuit breaker) and no
// fallback store is configured.
type StoreErrorPolicy int

const (
	// FailOpen admits the request: availability over protection.
	FailOpen StoreErrorPolicy = iota
	// FailClosed rejects the request with 429: protection over availability.
	FailClosed
)

// ParseStoreErrorPolicy reads "allow" (or "") as FailOpen and "deny" as
// FailClosed.
func ParseStoreErrorPolicy(s string) (StoreErrorPolicy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "allow":
		return FailOpen, nil
	case "deny":
		return FailClosed, nil
	}
	return FailOpen, model.Refuse("on_store_error", s, "want allow or deny")
}

// Mode is how a Gate treats requests its limits reject.
type Mode int

const (
	// Enforce rejects them with 429.
	Enforce Mode = iota
	// DryRun decides and counts as Enforce does but lets every request
	// through at once, without a leaky_bucket delay and without rate-limit
	// headers, reporting OutcomeDryRunRejected for those it would have
	// rejected, so hosts can log and count them before enforcing while
	// clients see what they would see without the limits.
	DryRun
)

// ParseMode reads "enforce" (or "") and "dry_run".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "enforce":
		return Enforce, nil
	case "dry_run", "dry-run", "dryrun":
		return DryRun, nil
	}
	return Enforce, model.Refuse("mode", s, "want enforce or dry_run")
}

// Outcome classifies a Gate's verdict, for metrics and logs.
type Outcome int

const (
	OutcomeAllowed         Outcome = iota // every limit admitted the request
	OutcomeRejected                       // a limit rejected it; answered 429
	OutcomeDryRunRejected                 // a limit rejected it; passed in DryRun mode
	OutcomeStoreErrorAllow                // the store failed; admitted by FailOpen
	OutcomeStoreErrorDeny                 // the store failed; rejected by FailClosed
	OutcomeCancelled                      // admitted, but the client left during its delay or while its in-flight slots were taken
)

// NumOutcomes is the number of Outcome values, 0 to NumOutcomes-1: the
// size of a table indexed by outcome.
const NumOutcomes = int(OutcomeCancelled) + 1

var outcomeNames = [NumOutcomes]string{"allowed", "rejected", "dry_run_rejected", "store_error_allowed", "store_error_denied", "cancelled"}

// String is the outcome's metric label value.
func (o Outcome) String() string {
	if o < 0 || int(o) >= len(outcomeNames) {
		return "unknown"
	}
	return outcomeNames[o]
}

// Verdict is a Gate's answer for one request.
type Verdict struct {
	Outcome Outcome
	// Decision is the one reported to the client: among rejecting limits
	// the one asking for the longest wait; otherwise the limit closest to
	// exhaustion (smallest Remaining/Quota). Its Limit is nil when no limit
	// applied or when the store failed without fallback.
	Decision model.Decision
	// Delay is how long the request must wait before proceeding (the
	// longest delay of its leaky_bucket limits).
	Delay time.Duration
	// Err is the store's error, if it failed; the verdict then comes from
	// the fallback store (Fallback true) or from the StoreErrorPolicy.
	Err      error
	Fallback bool
	// Slots, when not nil, are the in-flight slots the admitted request
	// holds (its limits with MaxInFlight): the host must Release them
	// when its handler chain returns. Serve releases them itself when the
	// request may not proceed.
	Slots *Slots
	// charged holds the decision on each ask of an admission when there
	// are several (the store's), for a refund; nil for one ask, whose
	// decision is Decision.
	charged []model.Decision
	// chargedLocal: the rates were charged on the fallback store, where
	// a refund goes. It differs from Fallback when the rates were decided
	// by the primary store and the in-flight slots by the fallback.
	chargedLocal bool
}

// charges is what Store.Refund needs of v: the decision on each of the
// asks that v decided.
func (v *Verdict) charges() []model.Decision {
	if v.charged != nil {
		return v.charged
	}
	return []model.Decision{v.Decision}
}

// GateConfig configures a Gate.
type GateConfig struct {
	// Limits are every limit the gate may be asked about, validated. Asks
	// must refer to these pointers.
	Limits []*model.Limit
	// Store decides; nil means a new MemoryStore with default settings.
	Store model.Store
	// Responder writes headers and 429 answers.
	Responder answer.Responder
	// Mode is Enforce or DryRun.
	Mode Mode
	// OnStoreError applies when Store fails and there is no Fallback.
	OnStoreError StoreErrorPolicy
	// Timeout bounds each call to Store; zero means none (right for a
	// MemoryStore, which never blocks on I/O).
	Timeout time.Duration
	// Breaker, if set, stops calling Store after consecutive failures and
	// probes it again after a back-off; meanwhile requests are decided by
	// Fallback or OnStoreError immediately.
	Breaker *Breaker
	// Fallback, if set, decides while Store fails, on limits whose quota
	// and burst are divided by Instances (each instance enforces its share
	// of the global quota locally), without their Lease (the fallback
	// decides in memory, locally already). A share's capacity (a bucket's
	// burst, a window's quota) is never below 1 nor below the limit's
	// MaxCost, and never above the limit's own: a share too small for one
	// request would reject every request for the whole outage. So with few
	// requests per instance the instances together may admit more than the
	// quota while the store is down, but never reject what the limit would
	// admit. Instances must be at least 1 with a Fallback and zero
	// without, and a Fallback needs a Store that can fail, not a
	// MemoryStore (CheckFallback).
	Fallback  model.Store
	Instances int
	// MaxCost, if set, holds for some limits the largest cost the host asks
	// of them (a constant cost it configured); others are taken to ask 1.
	MaxCost map[*model.Limit]float64
	// Clock supplies the instant for the Unix-time headers; nil means
	// SystemClock().
	Clock model.Clock
	// LeaseTTL is how long a Redis lease on an in-flight slot lives
	// unless renewed (see Slots): how long the slots of a crashed
	// instance stay taken. Zero means DefaultLeaseTTL.
	LeaseTTL time.Duration
}

// Gate runs the request path both adapters share: decide every applicable
// limit all-or-nothing, apply the failure policy, write the rate-limit
// headers, and either answer 429 or let the request proceed after its
// delay.
type Gate struct {
	cfg GateConfig // cfg.Clock nil: the system clock, read from systemClock
	systemClock
	resp     *answer.Responder             // &cfg.Responder
	fallback map[*model.Limit]*model.Limit // primary limit → its per-instance share
	// mem is the primary store when it is a MemoryStore and no breaker
	// watches it: Serve then decides a single ask without Decide's
	// generality (a MemoryStore never fails and ignores contexts).
	mem *MemoryStore
	// redis is the primary store when it is a redisstore.Store.
	redis *redisstore.Store
	// memClock reports that the gate and mem both read the system clock:
	// Serve then takes the Unix time of the headers from the decision.
	memClock bool
	// slots is the in-flight part of a gate with MaxInFlight limits
	// (inflight.go), which leaves mem nil: its requests take the general
	// path. nil without such limits.
	slots *gateSlots
}

// NewGate checks cfg and returns a Gate.
func NewGate(cfg GateConfig) (*Gate, error) {
	if cfg.Store == nil {
		st, err := NewMemoryStore(MemoryConfig{Clock: cfg.Clock})
		if err != nil {
			return nil, err
		}
		cfg.Store = st
	}
	if cfg.Timeout < 0 {
		return nil, model.Refuse("timeout", cfg.Timeout.String(), "must not be negative")
	}
	if err := cfg.Responder.Validate(); err != nil {
		return nil, err
	}
	if err := model.CheckLimits(cfg.Limits); err != nil {
		return nil, err
	}
	_, inMemory := cfg.Store.(*MemoryStore)
	if err := model.CheckFallback(cfg.Fallback != nil, cfg.Instances, inMemory); err != nil {
		return nil, err
	}
	if err := model.CheckLeases(cfg.Limits, inMemory); err != nil {
		return nil, err
	}
	g := &Gate{cfg: cfg}
	if cfg.Mode == DryRun {
		// A dry run must not change what clients do: a client that paces
		// itself by RateLimit or X-RateLimit-Remaining would slow down for
		// rejections that never happen. So it writes no rate-limit headers.
		g.cfg.Responder.Headers = answer.HeadersOff
	}
	g.resp = &g.cfg.Responder
	if cfg.Clock == nil {
		g.systemClock = newSystemClock()
	}
	g.redis, _ = cfg.Store.(*redisstore.Store)
	var err error
	if g.slots, err = newGateSlots(&g.cfg); err != nil {
		return nil, err
	}
	if ms, ok := cfg.Store.(*MemoryStore); ok && cfg.Breaker == nil && g.slots == nil {
		g.mem = ms
		g.memClock = cfg.Clock == nil && ms.clock == nil
	}
	if cfg.Fallback != nil {
		n := cfg.Instances
		g.fallback = make(map[*model.Limit]*model.Limit, len(cfg.Limits))
		shares := make([]*model.Limit, 0, len(cfg.Limits))
		for i, l := range cfg.Limits {
			share := *l
			share.Lease = 0
			floor := cfg.MaxCost[l]
			if floor < 1 {
				floor = 1
			}
			if floor > l.Capacity() {
				floor = l.Capacity()
			}
			share.Rate.Quota /= float64(n)
			if l.MaxInFlight > 0 {
				share.MaxInFlight = flightShare(l.MaxInFlight, n)
			}
			if l.Algorithm == model.TokenBucket || l.Algorithm == model.LeakyBucket {
				share.Burst = l.Capacity() / float64(n)
				if share.Burst < floor {
					share.Burst = floor
				}
			} else if share.Rate.Quota < floor {
				share.Rate.Quota = floor
			}
			if err := share.Validate(); err != nil {
				// The limit is valid: what its share breaks comes of
				// the division, whose result the user never wrote.
				le := err.(*model.LimitError)
				le.Index = i
				le.Err.Value = ""
				le.Err.Reason = "divided among " + strconv.Itoa(n) + " instances by the local fallback, " + le.Err.Reason
				return nil, le
			}
			g.fallback[l] = &share
			shares = append(shares, &share)
		}
		g.resp.Prepare(shares)
	}
	g.resp.Prepare(cfg.Limits)
	return g, nil
}

// Decide decides asks all-or-nothing and classifies the result. It neither
// writes nor waits. The slots of an admitted request's in-flight limits
// are taken: the caller must release the verdict's Slots.
func (g *Gate) Decide(ctx context.Context, asks []model.Ask) Verdict {
	if g.slots != nil {
		v, _ := flightDecide(g, ctx, asks)
		return v
	}
	return g.decide(ctx, asks)
}

// decide is Decide without in-flight limits. It asks the primary store
// through the breaker and the timeout, and decided reports the call and
// classifies the decisions; a call that the store answered from its
// leases, without asking Redis, is no outcome for the breaker.
func (g *Gate) decide(ctx context.Context, asks []model.Ask) Verdict {
	if len(asks) == 0 {
		return Verdict{Outcome: OutcomeAllowed}
	}
	out := make([]model.Decision, len(asks)) // on the heap anyway: stores keep it
	b := g.cfg.Breaker
	var probe uint64
	if b != nil && atomic.LoadInt32(&b.state) != breakerClosed {
		var ok bool
		if ok, probe = b.Allow(g.now()); !ok {
			return g.failed(ctx, asks, out, ErrBreakerOpen)
		}
	}
	asked, err := g.take(ctx, asks, out)
	if !asked {
		if probe != 0 {
			b.Skipped(probe)
		}
		return g.classify(out)
	}
	return g.decided(ctx, asks, out, err, probe)
}

// decided finishes decide after the primary store decided asks
// into out, or failed with err: it reports the call, with the breaker's
// probe ticket, to the breaker unless it is simply closed and the call
// succeeded, and returns the verdict.
func (g *Gate) decided(ctx context.Context, asks []model.Ask, out []model.Decision, err error, probe uint64) Verdict {
	b := g.cfg.Breaker
	if b != nil && (err != nil || atomic.LoadInt32(&b.state) != breakerClosed || atomic.LoadInt32(&b.fails) != 0) {
		g.report(b, ctx, err, probe)
	}
	if err != nil {
		return g.failed(ctx, asks, out, err)
	}
	return g.classify(out)
}

// failed is the verdict on asks after the primary store failed with
// err: the fallback's, or the StoreErrorPolicy's.
func (g *Gate) failed(ctx context.Context, asks []model.Ask, out []model.Decision, err error) Verdict {
	if g.fallback != nil {
		if ferr := g.cfg.Fallback.Take(ctx, g.localAsks(asks), out); ferr == nil {
			v := g.classify(out)
			v.Err, v.Fallback, v.chargedLocal = err, true, true
			return v
		}
	}
	if g.cfg.OnStoreError == FailClosed {
		return Verdict{Outcome: OutcomeStoreErrorDeny, Err: err, Decision: model.Decision{RetryAfter: time.Second}}
	}
	return Verdict{Outcome: OutcomeStoreErrorAllow, Err: err}
}

// ErrBreakerOpen is the store error of decisions made while the circuit
// breaker is open.
var ErrBreakerOpen = errors.New("sluice: store circuit breaker is open")

// report tells b how a call it admitted with the ticket probe went: a
// failure, unless the client left (or its deadline passed), which says
// nothing about the store; an unreported probe is replaced after the
// back-off. A deadline is checked on the clock as well as by ctx.Err,
// which reports it only once ctx's timer has fired: a connection's
// deadline, set from ctx's, may fail the call a moment before.
func (g *Gate) report(b *Breaker, ctx context.Context, err error, probe uint64) {
	switch {
	case err == nil:
		b.Success(probe)
	case clientGone(ctx):
	default:
		b.Failure(g.now(), probe)
	}
}

// clientGone reports whether the request of ctx has ended: cancelled, or
// past its deadline.
func clientGone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// classify picks the reported decision and the outcome.
func (g *Gate) classify(out []model.Decision) Verdict {
	v := Verdict{Outcome: OutcomeAllowed}
	best := -1
	allowed := true
	for i := range out {
		d := &out[i]
		if d.Delay > v.Delay {
			v.Delay = d.Delay
		}
		if !d.Allowed {
			if allowed || d.RetryAfter > out[best].RetryAfter {
				best = i
			}
			allowed = false
			continue
		}
		if allowed && (best < 0 || d.Remaining*out[best].Quota < out[best].Remaining*d.Quota) {
			best = i
		}
	}
	v.Decision = out[best]
	if allowed && len(out) > 1 {
		v.charged = out
	}
	if !allowed || g.cfg.Mode == DryRun {
		v.Delay = 0 // a dry run shapes nothing either
	}
	if !allowed {
		v.Outcome = OutcomeRejected
		if g.cfg.Mode == DryRun {
			v.Outcome = OutcomeDryRunRejected
		}
	}
	return v
}

// Serve decides asks for r and answers what it can: it sets the
// rate-limit headers on w (when a limit applied), writes the 429 answer
// for a rejection, and waits out an admitted request's delay, giving the
// capacity back if the client leaves first. It reports whether the request
// may proceed to the next handler; when it may not, the answer has been
// written, except for OutcomeCancelled, where the client is gone. A
// request that proceeds may hold in-flight slots (Verdict.Slots), which
// the host releases when the next handler returns.
func (g *Gate) Serve(w http.ResponseWriter, r *http.Request, asks []model.Ask) (Verdict, bool) {
	if g.mem == nil || len(asks) != 1 {
		if g.slots != nil {
			return serveFlight(g, w, r, asks)
		}
		v := g.decide(r.Context(), asks)
		return v, g.answer(w, r, asks, &v, 0)
	}
	// The common case, one ask on the in-memory store, which never fails.
	var v Verdict
	now := g.mem.take1(&asks[0], &v.Decision)
	if !g.memClock {
		now = 0
	}
	g.classify1(&v)
	return v, g.answer(w, r, asks, &v, now)
}

// take asks the primary store to decide asks into out, within the gate's
// timeout, and reports whether the store asked Redis: false only when a
// redisstore.Store admitted every ask from its leases (TakeAsked).
func (g *Gate) take(ctx context.Context, asks []model.Ask, out []model.Decision) (asked bool, err error) {
	if g.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.cfg.Timeout)
		defer cancel()
	}
	if g.redis != nil {
		return g.redis.TakeAsked(ctx, asks, out)
	}
	return true, g.cfg.Store.Take(ctx, asks, out)
}

// classify1 is classify for a single decision, v.Decision.
func (g *Gate) classify1(v *Verdict) {
	switch {
	case v.Decision.Allowed:
		if g.cfg.Mode != DryRun { // a dry run shapes nothing either
			v.Delay = v.Decision.Delay
		}
	case g.cfg.Mode == DryRun:
		v.Outcome = OutcomeDryRunRejected
	default:
		v.Outcome = OutcomeRejected
	}
}

// answer finishes Serve for the verdict v on asks: it writes the 429
// answer or the headers, and waits out v.Delay. now is the gate's clock,
// or 0 if it has not been read. It reports whether the request may
// proceed.
func (g *Gate) answer(w http.ResponseWriter, r *http.Request, asks []model.Ask, v *Verdict, now int64) bool {
	d := &v.Decision
	if v.Outcome == OutcomeRejected || v.Outcome == OutcomeStoreErrorDeny {
		if now == 0 {
			now = g.now()
		}
		g.resp.Reject(w, d, now) // headers included
		return false
	}
	if d.Limit != nil && g.resp.Headers != answer.HeadersOff {
		// Only X-RateLimit-Reset needs the Unix time.
		if now == 0 && g.resp.Headers&answer.HeadersX != 0 {
			now = g.now()
		}
		g.resp.SetHeaders(w.Header(), d, now)
	}
	if v.Delay > 0 && !await.Sleep(r.Context(), v.Delay) {
		g.Refund(asks, v)
		v.Outcome = OutcomeCancelled
		return false
	}
	return true
}

// now reads the gate's clock.
func (g *Gate) now() int64 {
	if g.cfg.Clock == nil {
		return g.systemClock.read()
	}
	return g.cfg.Clock()
}

// Refund gives back what the admission v of asks took, from the store
// that decided it, for a request that does not proceed: a cancelled wait,
// one refused an in-flight slot, or a caller of Decide that will not act
// on it. It runs without the request's context (which may have ended),
// bounded by the gate's timeout.
func (g *Gate) Refund(asks []model.Ask, v *Verdict) {
	g.refund(asks, v.charges(), v.chargedLocal)
}

// refund gives back the charges charged of asks, from the fallback store
// when local.
func (g *Gate) refund(asks []model.Ask, charged []model.Decision, local bool) {
	g.settle(asks, charged, nil, local)
}

// settle settles the charges charged of asks at the actual costs actual
// (Store.Settle), or gives them back when actual is nil (Store.Refund),
// in the fallback store when local, without the request's context (which
// may have ended), bounded by the gate's timeout.
func (g *Gate) settle(asks []model.Ask, charged []model.Decision, actual []float64, local bool) {
	ctx := context.Background()
	if g.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.cfg.Timeout)
		defer cancel()
	}
	st := g.cfg.Store
	if local {
		st = g.cfg.Fallback
		asks = g.localAsks(asks)
	}
	if actual == nil {
		st.Refund(ctx, asks, charged)
		return
	}
	st.Settle(ctx, asks, charged, actual)
}

// Answered settles the admission v of asks (a verdict of Serve or Decide
// on which the request proceeded) once the host knows its response: its
// status, header and the bytes of its body. The charge of each ask whose
// limit counts only some statuses (Limit.CountStatus) and not this one
// is given back, exactly as Refund gives it. The charge of each other ask
// whose limit takes its cost from the response (CostHeader, read from
// header after the response ended, so that a trailer counts, announced or
// under http.TrailerPrefix; CostBytes; model.ResponseCost) is settled at
// that cost (Store.Settle): the difference charged, which may leave its
// key in debt, or given back; a cost the response does not state leaves
// the charge as it is. A request cut short keeps its charges: ctx ended
// (the client left), status 0 (no response, as when the handler panicked
// or hijacked the connection) or 101 (the connection was upgraded, as a
// WebSocket's: hosts that see the 101 and not the hijack that follows,
// such as Caddy's response recorder, count it alike); only a response
// cost above the charge is settled when the client left after the
// response began, as the bytes it was sent or the work its header states
// were spent all the same. Hosts call it only for limits that must see their response
// (AnswerCounts).
func (g *Gate) Answered(ctx context.Context, asks []model.Ask, v *Verdict, status int, header http.Header, bytes int64) {
	g.answered(ctx.Err() != nil, asks, v, status, header, bytes)
}

// Aborted settles v, the verdict on asks, for a request whose handler
// panicked once its response had begun with status (not 0), as a proxy
// aborts a response (http.ErrAbortHandler) when its client leaves or its
// upstream breaks off in the middle of the body: as Answered settles a
// request whose client left, the charges are kept, and a response cost
// above a charge (the bytes sent, the work the header states) is charged.
// A handler that panics before its response began keeps its charges, and
// its host calls neither.
func (g *Gate) Aborted(asks []model.Ask, v *Verdict, status int, header http.Header, bytes int64) {
	g.answered(true, asks, v, status, header, bytes)
}

// answered is Answered, left reporting that the request was cut short:
// its client left (before its response or during it) or its handler
// aborted a response it had begun (Aborted).
func (g *Gate) answered(left bool, asks []model.Ask, v *Verdict, status int, header http.Header, bytes int64) {
	if status == http.StatusSwitchingProtocols {
		status = 0
	}
	counted := status
	if left {
		counted = 0
	}
	charged := v.charges()
	var back []model.Ask
	var backCharged []model.Decision
	var actual []float64
	j := 0 // v's charges are of the asks of rated limits
	for i := range asks {
		l := asks[i].Limit
		if !l.Rated() {
			continue
		}
		cost, ok := 0.0, !model.Counts(l.CountStatus, counted)
		if !ok && status != 0 && l.CostFromResponse() {
			value := header.Get(l.CostHeader)
			if value == "" { // a trailer its handler did not announce
				value = header.Get(http.TrailerPrefix + http.CanonicalHeaderKey(l.CostHeader))
			}
			if l.CostBytes {
				value = strconv.FormatInt(bytes, 10)
			}
			cost, ok = model.ResponseCost(l, value)
			ok = ok && !(left && cost < asks[i].Cost)
		}
		if j < len(charged) && ok {
			back = append(back, asks[i])
			backCharged = append(backCharged, charged[j])
			actual = append(actual, cost)
		}
		j++
	}
	if len(back) > 0 {
		g.settle(back, backCharged, actual, v.chargedLocal)
	}
}

// AnswerCounts reports whether one of limits must see its response
// (Limit.Answered: CountStatus, CostHeader, CostBytes), so that its host
// must observe the response and call Answered.
func AnswerCounts(limits []*model.Limit) bool {
	for _, l := range limits {
		if l.Answered() {
			return true
		}
	}
	return false
}

// localAsks translates asks to the fallback store's per-instance limits.
func (g *Gate) localAsks(asks []model.Ask) []model.Ask {
	local := make([]model.Ask, len(asks))
	for i := range asks {
		local[i] = asks[i]
		local[i].Limit = g.fallback[asks[i].Limit]
	}
	return local
}
