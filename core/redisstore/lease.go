package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/model"
)

// Leases. A limit with a Lease (model.Limit.Lease) lets a store take a
// batch of a key's capacity from Redis in one call of the take script, the
// lease, and admit the key's requests from it without asking Redis again,
// as Google's Doorman hands out capacity and Kong's sync_rate counts
// locally between synchronisations; Envoy's global rate limit service
// instead pays one call per decision, as a limit without a lease does.
//
// A lease is sized by the key's demand on this instance: what the requests
// of the last lease spent, at the rate they spent it, over leaseWindow,
// between one request's cost and the limit's Lease, less what the instance
// still holds. It lasts leaseSpan after it was taken; a request that finds
// it spent takes the next one, and what is left when it ends goes back to
// Redis as the limit refunds (Store.Refund, which never gives back more
// than the charge the bucket still misses, nor, with MaxDelay, anything
// once another request was admitted since), so that an idle instance's
// lease returns to the pool. When Redis has less than a lease asks, the
// requests' own costs are asked instead, and the next lease asks half as
// much: instances with equal demand ask equal leases, and share a scarce
// key as they would without.
//
// Redis charges a lease when it grants it, and an instance admits from it
// later: over any interval T, the instances together admit at most what
// Redis admits (B + r·T for a token bucket of capacity B and rate r) plus
// what they held when the interval began, at most Lease each. An instance
// holds one lease of a key's state, whatever limits ask it: across a
// reload, which makes the limits again, the new limit takes over the old
// one's lease. An instance that dies holding a lease takes those units
// with it: its key refills them at the limit's rate. Requests admitted
// from a lease are answered with the decision that took it, their
// Remaining what Redis held then plus what the lease holds now.
//
// A lease's size and life are measured on the instance's own clock (or
// Config.Clock, when set): they set how often it asks Redis, never what it
// admits, which the scripts decide on theirs.

// leaseWindow is the interval whose demand sizes a lease, and leaseSpan
// how long a lease lasts: twice the window, so that a lease sized by a
// steady demand is spent, and the next one taken, before it ends.
const (
	leaseWindow = 250 * time.Millisecond
	leaseSpan   = 2 * leaseWindow
)

// MaxLeases bounds the leases a Store holds at once; a key arriving when
// as many are held is decided in Redis, without one, until some end.
const MaxLeases = 100000

// leaseReturnTimeout bounds the call that gives an ended lease's units back.
const leaseReturnTimeout = time.Second

// lease is what an instance holds of one state in Redis, a limit's
// namespace and a client's key, and the demand that sizes its next lease.
type lease struct {
	// limit is the leased limit, as the last request to find the lease
	// asked it: the lease is in leases.m at {limit, key}. A reload makes
	// the limit again, equal or not, and the new one takes the lease over
	// from the old one while both are asked (see Store.lease).
	limit *model.Limit
	key   string // the client's key, as the asks give it
	state string // the state's name in leases.byState
	// units: taken from Redis and not spent; more than 0 only once a
	// lease was granted.
	units float64
	// grant is the decision that took the last lease, for the refund when
	// it ends, which gives back as limit itself refunds (see endLease).
	grant model.Decision
	start int64   // when the last lease was taken (leaseNow)
	spent float64 // the cost admitted since start
	// most, when positive, bounds the next lease's size: half the last
	// one Redis refused, growing by each request's cost that Redis admits
	// since (additive increase, multiplicative decrease).
	most float64
	// asking is set while a lease is being taken, so that concurrent
	// requests of the key ask Redis for their own cost instead of
	// taking more leases.
	asking bool
	timer  *time.Timer
}

// leaseKey finds a lease by an ask: the limit and the client's key, as
// the asks give them.
type leaseKey struct {
	limit *model.Limit
	key   string
}

// leases holds a Store's leases, by the asks that find them (m), the
// key in m of the lease of each state in Redis (byState: at most one lease
// of a state, whatever limits ask it), and the grant form of each leased
// limit with MaxDelay: the limit without it, so that a lease is taken
// whole or not at all, never by waiting. byState holds keys, not leases:
// under Yaegi the text of a type spells out every type it points to, and
// a Store's would spell a lease's twice.
type leases struct {
	mu      sync.Mutex
	m       map[leaseKey]*lease
	byState map[string]leaseKey
	grants  map[*model.Limit]*model.Limit
}

// grantLimit returns the grant form of l; ls.mu is held. Making one
// forgets those of the limits that hold no lease (pruneGrants).
func (ls *leases) grantLimit(l *model.Limit) *model.Limit {
	if l.MaxDelay == 0 {
		return l
	}
	g := ls.grants[l]
	if g == nil {
		c := *l
		c.MaxDelay = 0
		if c.Validate() != nil {
			return l
		}
		g = &c
		if ls.grants == nil {
			ls.grants = map[*model.Limit]*model.Limit{}
		}
		ls.pruneGrants()
		ls.grants[l] = g
	}
	return g
}

// pruneGrants forgets the grant forms of the limits that hold no lease,
// such as those a reload replaced, which would otherwise be kept for the
// store's life; ls.mu is held. Run when a limit's grant form is made, it
// keeps those of the limits holding leases and of the last one made.
func (ls *leases) pruneGrants() {
	held := make(map[*model.Limit]bool, len(ls.grants))
	for _, l := range ls.m {
		held[l.limit] = true
	}
	for l := range ls.grants {
		if !held[l] {
			delete(ls.grants, l)
		}
	}
}

// leased is the lease of one ask of a request, if it has one: spent says
// the ask was admitted from it, asked that the ask asks Redis for the next.
type leased struct {
	l            *lease
	spent, asked bool
}

// takeLeased is Take for asks of which some have a limit with a Lease:
// the asks a lease covers are admitted from it, the others are decided in
// Redis in one call, the leased ones among them asking for their next
// lease, and if Redis rejects the request, the leases spent get their
// units back. It reports whether it asked Redis (see TakeAsked).
func (s *Store) takeLeased(ctx context.Context, asks []model.Ask, out []model.Decision) (asked bool, err error) {
	if len(asks) == 1 && s.FromLease(asks[0], &out[0]) {
		return false, nil
	}
	now := s.leaseNow()
	held := make([]leased, len(asks))
	call := make([]model.Ask, 0, len(asks))
	idx := make([]int, 0, len(asks))
	s.leases.mu.Lock()
	for i := range asks {
		a := asks[i]
		l := s.lease(a, now)
		held[i].l = l
		if l != nil {
			if l.spend(a.Cost, &out[i]) {
				held[i].spent = true
				continue
			}
			if k := l.next(a.Cost, now); k > a.Cost && !l.asking {
				l.asking = true
				held[i].asked = true
				a.Limit = s.leases.grantLimit(a.Limit)
				a.Cost = k
			}
		}
		call = append(call, a)
		idx = append(idx, i)
	}
	s.leases.mu.Unlock()
	got := make([]model.Decision, len(call))
	if len(call) > 0 {
		err = s.take(ctx, call, got)
		if err == nil && s.leaseRefused(held, call, idx, got) {
			// Redis holds less than the leases asked: ask for the
			// requests' own costs.
			for j, i := range idx {
				call[j] = asks[i]
			}
			err = s.take(ctx, call, got)
		}
	}
	admitted := err == nil
	for j := range got {
		admitted = admitted && got[j].Allowed
	}
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	for j, i := range idx {
		h := held[i]
		if err == nil {
			out[i] = got[j]
			out[i].Limit = asks[i].Limit
		}
		if h.l == nil {
			continue
		}
		if h.asked {
			h.l.asking = false
		}
		switch {
		case admitted && h.asked && call[j].Cost > asks[i].Cost:
			h.l.granted(call[j], got[j], asks[i].Cost, now)
			out[i] = leaseDecision(h.l)
			out[i].Limit = asks[i].Limit // another limit may have taken h.l over since
			out[i].Mark = got[j].Mark
		case admitted:
			h.l.spent += asks[i].Cost
			if h.l.most > 0 {
				h.l.most += asks[i].Cost
			}
		}
	}
	if !admitted {
		for i, h := range held {
			if h.spent {
				h.l.units += asks[i].Cost
				h.l.spent -= asks[i].Cost
			}
		}
	}
	return len(call) > 0, err
}

// leaseRefused reports whether Redis rejected a lease asked in got (the
// decisions of call, the asks at idx), halving the most each lease asked
// may ask next.
func (s *Store) leaseRefused(held []leased, call []model.Ask, idx []int, got []model.Decision) bool {
	refused := false
	for j, i := range idx {
		if held[i].asked && !got[j].Allowed {
			refused = true
		}
	}
	if !refused {
		return false
	}
	s.leases.mu.Lock()
	for j, i := range idx {
		if h := held[i]; h.asked {
			h.l.most = call[j].Cost / 2
		}
	}
	s.leases.mu.Unlock()
	return true
}

// leaseNow is the instant, in Unix nanoseconds, by which leases are
// sized and end: Config.Clock's, or the system's.
func (s *Store) leaseNow() int64 {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now().UnixNano()
}

// lease returns the lease of a, making one if a's limit has a Lease and
// the store holds fewer than MaxLeases; nil otherwise. s.leases.mu is held.
//
// A lease of a's state held under another limit of the same namespace (the
// limit before a reload, which made a's again) becomes a's, holding at
// most a's Lease (the rest stays charged, erring on the safe side): an
// instance holds one lease of a state, not one per limit that asks it,
// so a reload never lets it hold, and admit from, two.
func (s *Store) lease(a model.Ask, now int64) *lease {
	if !(a.Limit.Lease >= a.Cost) {
		return nil
	}
	key := leaseKey{a.Limit, a.Key}
	if l := s.leases.m[key]; l != nil {
		return l
	}
	state := a.Limit.Namespace() + "\x00" + a.Key
	if old, ok := s.leases.byState[state]; ok {
		l := s.leases.m[old]
		delete(s.leases.m, old)
		s.leases.m[key] = l
		s.leases.byState[state] = key
		l.limit = a.Limit
		if l.units > a.Limit.Lease {
			l.units = a.Limit.Lease
		}
		return l
	}
	if len(s.leases.m) >= MaxLeases {
		return nil
	}
	if s.leases.m == nil {
		s.leases.m = map[leaseKey]*lease{}
		s.leases.byState = map[string]leaseKey{}
	}
	l := &lease{limit: a.Limit, key: a.Key, state: state, start: now}
	s.leases.m[key] = l
	s.leases.byState[state] = key
	l.timer = time.AfterFunc(leaseSpan, func() { s.endLease(l) })
	return l
}

// next returns the size of the lease to ask for a request of cost at now:
// what the key's demand since the lease began spends in a leaseWindow, at
// least cost, at most most (when set) and what Lease leaves beside the
// units held.
func (l *lease) next(cost float64, now int64) float64 {
	k := cost
	if el := now - l.start; el > 0 {
		k = l.spent * float64(leaseWindow) / float64(el)
	}
	if l.most > 0 && k > l.most {
		k = l.most
	}
	if k < cost {
		k = cost
	}
	if room := l.limit.Lease - l.units; k > room {
		k = room
	}
	return k
}

// granted records the lease got, taken by ask, of which a request of cost
// is admitted at now; the store's leases.mu is held.
func (l *lease) granted(ask model.Ask, got model.Decision, cost float64, now int64) {
	l.units += ask.Cost - cost
	if l.units > l.limit.Lease { // asked before a reload lowered it
		l.units = l.limit.Lease
	}
	l.grant = got
	l.start = now
	l.spent = cost
	l.timer.Reset(leaseSpan)
}

// spend admits a request of cost from l if l holds enough, setting d to
// its decision; s.leases.mu is held.
func (l *lease) spend(cost float64, d *model.Decision) bool {
	if l.units < cost {
		return false
	}
	l.units -= cost
	l.spent += cost
	*d = leaseDecision(l)
	return true
}

// FromLease admits a from the lease the store holds of its limit and key,
// if that lease covers its cost, setting d to its decision, and reports
// whether it did. It never calls Redis: a request it does not admit is
// Take's to decide, which takes the next lease. Take admits a request of
// one ask through it, without the bookkeeping of several.
func (s *Store) FromLease(a model.Ask, d *model.Decision) bool {
	s.leases.mu.Lock()
	l := s.leases.m[leaseKey{a.Limit, a.Key}]
	ok := l != nil && l.spend(a.Cost, d)
	s.leases.mu.Unlock()
	return ok
}

// leaseDecision is the decision of a request admitted from l.
func leaseDecision(l *lease) model.Decision {
	d := l.grant
	d.Limit = l.limit
	d.Allowed = true
	d.Remaining += l.units
	d.RetryAfter = 0
	d.Delay = 0
	d.Mark = model.Mark{}
	return d
}

// endLease ends l leaseSpan after it was taken, unless it is being taken
// again (its timer is then set again): it forgets it, and gives what it
// holds back to Redis.
func (s *Store) endLease(l *lease) {
	s.leases.mu.Lock()
	if s.leases.m[s.leases.byState[l.state]] != l {
		s.leases.mu.Unlock()
		return
	}
	if left := leaseSpan - time.Duration(s.leaseNow()-l.start); l.asking || left > 0 {
		if left <= 0 {
			left = leaseWindow
		}
		l.timer.Reset(left)
		s.leases.mu.Unlock()
		return
	}
	delete(s.leases.m, leaseKey{l.limit, l.key})
	delete(s.leases.byState, l.state)
	units := l.units
	grant := l.grant
	l.units = 0
	s.leases.mu.Unlock()
	if units <= 0 {
		return
	}
	// Given back as the limit refunds, not as the lease was taken: with
	// MaxDelay, requests admitted since may wait for these units, whose
	// return would let a later request take their slots (model.Settle's
	// refund of a token bucket with MaxDelay gives back only the last admission).
	ask := model.Ask{Limit: l.limit, Key: l.key, Cost: units}
	ctx, cancel := context.WithTimeout(context.Background(), leaseReturnTimeout)
	defer cancel()
	// A failure leaves the units taken, which errs on the safe side: the
	// key refills them at its rate.
	s.Refund(ctx, []model.Ask{ask}, []model.Decision{grant})
}
