package demand

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/maphash"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/telemetry"
)

// DefaultMaxKeys is the most keys a Recorder follows at once unless told
// otherwise: with about 95 bytes a key (its hash, its entry, the map's
// share; TestRecorderMemory), some 1.5 MiB of heap for a limit with that
// many keys asking within the hour. A limit with more evicts the keys
// idle the longest, which a later ask counts as new keys.
const DefaultMaxKeys = 1 << 14

// MaxKeys bounds the keys a host may ask a Recorder to follow: some
// 400 MB of keys for one limit.
const MaxKeys = 1 << 22

// minSweep is the least time between two sweeps of a shard.
const minSweep = int64(10 * time.Second)

// numShards is the number of independently locked parts of a Recorder's
// keys, so that parallel requests of different keys rarely wait for one
// another.
const numShards = 16

// Recorder records a limit's demand per key and period: the cost each key
// asks in each period of the limit (aligned on the Unix epoch), admitted
// or refused. A key-period is folded into a Sketch once its period is
// over: when its key asks again, at the next sweep of its shard (every
// half period, or every 10 s if that is longer) or when a Snapshot is
// taken. A key idle for longer than the idle horizon is retired, its
// largest period folded into a second Sketch, of keys. Memory is bounded:
// at most maxKeys keys are followed, and when a shard is full even after a
// sweep, the key idle the longest in a sample is retired early, its
// period folded (a partial key-period, which Advice counts, if the period
// is not over). It is safe for concurrent use.
type Recorder struct {
	period int64 // nanoseconds
	idle   int64 // nanoseconds a key may be idle and stay followed
	// sweepEvery is the time between two sweeps of a shard: half a
	// period, but at least minSweep, as a sweep visits every key of the
	// shard, which a short period would make most of the work.
	sweepEvery int64
	perShard   int
	seed       maphash.Seed
	shards     []shard // numShards of them

	mu      sync.Mutex
	periods Sketch // demand of each complete key-period
	peaks   Sketch // largest period demand of each retired key
	partial uint64 // key-periods folded early, by a retirement
	since   int64  // instant of the last reset

	// due, when not nil, puts the recorder in fleet mode (see
	// NewFleetRecorder); out holds its partials by period index and key
	// hash, pending counts them and dropped those refused beyond the
	// bound, all under mu.
	due     func()
	out     map[int64]map[uint64]float64
	pending int
	dropped uint64
}

type shard struct {
	mu    sync.Mutex
	keys  map[uint64]entry // by the key's 64-bit hash
	sweep int64            // instant the next sweep is due
}

// entry is one followed key.
type entry struct {
	sum   float64 // demand so far in the period of last
	peak  float64 // largest demand of the key's complete periods
	last  int64   // instant of the key's last ask
	fleet uint64  // the key's FleetKey, in fleet mode, for its partials
}

// NewRecorder returns a Recorder of the demand per period (nanoseconds,
// positive) of at most maxKeys keys at once (zero: DefaultMaxKeys). A
// key is retired after max(2 periods, 1 hour) without asking, so a key
// that asks again later than that counts as a new key. now is the instant
// its figures start from.
func NewRecorder(period int64, maxKeys int, now int64) *Recorder {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	per := maxKeys / numShards
	if per < 1 {
		per = 1
	}
	idle := 2 * period
	if idle < int64(time.Hour) {
		idle = int64(time.Hour)
	}
	r := &Recorder{period: period, idle: idle, perShard: per, seed: maphash.MakeSeed(), since: now, shards: make([]shard, numShards), sweepEvery: period / 2}
	if r.sweepEvery < minSweep {
		r.sweepEvery = minSweep
	}
	for i := range r.shards {
		r.shards[i].keys = make(map[uint64]entry)
	}
	return r
}

// NewFleetRecorder returns a Recorder, as NewRecorder does, for demand
// that several instances record together, each seeing part of a key's
// asks (a limit on a shared store): a key-period is not folded into the
// recorder's sketches but kept as this instance's Partial of it, keyed by
// a hash of the key that every instance computes alike, until Drain takes
// it for a store that sums the instances' partials (such as
// redisstore.Demand). due is called when partials start waiting and
// when a key's period opens, with a lock held: it must return at once,
// such as by starting, unless it runs, a goroutine that folds (Fold) and
// drains later. At most 4 × maxKeys partials wait; more are dropped
// and counted (Dropped), such as while the store is unreachable.
func NewFleetRecorder(period int64, maxKeys int, now int64, due func()) *Recorder {
	r := NewRecorder(period, maxKeys, now)
	r.due = due
	r.out = make(map[int64]map[uint64]float64)
	return r
}

// A Partial is one instance's share of the demand of one key in one
// period, which a fleet's store sums over its instances.
type Partial struct {
	Period int64  // the period's index: its start, in periods since the epoch
	Key    uint64 // FleetKey of the key
	Demand float64
}

// FleetKey is the hash of a key that every instance of a fleet computes
// alike, by which partials of one key-period meet: the first 64 bits of
// its SHA-256, as the Redis store digests keys. A client that chooses its
// keys (a header's value) cannot make its demand count under another's
// key: that takes a second preimage, some 2^64 hashes, where a CRC, being
// linear, gives any key any other's hash by 8 bytes of its choosing (or
// 64 characters each of two values). Two keys of its own that meet, some
// 2^32 hashes a pair, count as one key, which buys it nothing that asking
// more under one key does not, as demand counts refused asks too; and a
// key whose demand meets another's only grows, which evicts no key from
// the fleet's store (redisstore.Demand evicts the least demand first).
// One call of the standard library under Yaegi, made once a key is
// followed.
func FleetKey(key string) uint64 {
	h := sha256.Sum256([]byte(key))
	return binary.BigEndian.Uint64(h[:8])
}

// Drain returns the partials waiting in a fleet recorder and forgets them.
func (r *Recorder) Drain() []Partial {
	r.mu.Lock()
	defer r.mu.Unlock()
	parts := make([]Partial, 0, r.pending)
	for p, keys := range r.out {
		for k, v := range keys {
			parts = append(parts, Partial{Period: p, Key: k, Demand: v})
		}
		delete(r.out, p)
	}
	r.pending = 0
	return parts
}

// Waiting is how many partials wait in a fleet recorder for Drain.
func (r *Recorder) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending
}

// Fold folds every key-period that is over at now, as a sweep does, and
// reports whether some key's period is still open: a fleet's sender
// calls it so that a period is sent once over even when no request comes
// to fold it.
func (r *Recorder) Fold(now int64) (open bool) {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		r.sweep(sh, now)
		for _, e := range sh.keys {
			open = open || e.sum > 0
		}
		sh.mu.Unlock()
	}
	return open
}

// FoldAll folds every key's period, open ones too, as partial
// key-periods: a fleet recorder's last act, whose store sums this
// instance's part of an open period with the others'.
func (r *Recorder) FoldAll() {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for k, e := range sh.keys {
			if e.sum > 0 {
				r.fold(e.fleet, e.last/r.period, e.sum, true)
				e.sum = 0
				sh.keys[k] = e
			}
		}
		sh.mu.Unlock()
	}
}

// Dropped is how many partials a fleet recorder refused, its bound
// reached.
func (r *Recorder) Dropped() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Period is the length of the recorder's periods, in nanoseconds.
func (r *Recorder) Period() int64 { return r.period }

// Add records that key asked cost at now (nanoseconds since the epoch).
// A cost that is not positive records nothing. A key's further asks in
// its period, the usual case, take the short path; under the Yaegi
// interpreter a function costs every value of its body on each call, so
// the rest is in add.
func (r *Recorder) Add(now int64, key string, cost float64) {
	if !(cost > 0) {
		return
	}
	h := maphash.String(r.seed, key)
	sh := &r.shards[h%numShards]
	sh.mu.Lock()
	e, ok := sh.keys[h]
	if ok && e.sum > 0 && e.last/r.period == now/r.period && now < sh.sweep {
		e.sum += cost
		e.last = now
		sh.keys[h] = e
		sh.mu.Unlock()
		return
	}
	r.add(sh, now, h, key, cost, e, ok)
	sh.mu.Unlock()
}

// add is Add for a key new to sh (ok false), a key's first ask in a
// period, or an ask that finds a sweep due; h is key's hash, e its entry,
// if ok. It is called with sh's lock held.
func (r *Recorder) add(sh *shard, now int64, h uint64, key string, cost float64, e entry, ok bool) {
	if now >= sh.sweep {
		r.sweep(sh, now)
		e, ok = sh.keys[h] // the sweep folds and retires entries
	}
	switch {
	case !ok:
		if len(sh.keys) >= r.perShard {
			r.evict(sh, now)
		}
		e = entry{last: now}
		if r.due != nil {
			e.fleet = FleetKey(key)
		}
	case now/r.period < e.last/r.period:
		// An ask stamped before the key's last (hosts stamp asks as they
		// come, concurrently): counted in the key's current period rather
		// than reopening one that may be folded.
	case now/r.period > e.last/r.period:
		r.fold(e.fleet, e.last/r.period, e.sum, false)
		if e.sum > e.peak {
			e.peak = e.sum
		}
		e.sum, e.last = 0, now
	default:
		// The period of last: e.sum is 0 only if a sweep folded it, for an
		// ask stamped before the sweep and recorded after it, which starts
		// a key-period of its own (a race of microseconds).
		e.last = now
	}
	e.sum += cost
	sh.keys[h] = e
	if r.due != nil {
		r.due() // a period opens, which the fleet's sender must fold when over
	}
}

// fold records the demand v of a key in period p, partial when that
// period was not over; in fleet mode, as a Partial of the key's FleetKey
// fk, whose sum over the instances a later period of the key's own adds
// to when it was cut short. It is called with a shard's lock held.
func (r *Recorder) fold(fk uint64, p int64, v float64, partial bool) {
	if !(v > 0) {
		return
	}
	r.mu.Lock()
	switch {
	case r.due != nil:
		r.keep(fk, p, v)
	default:
		r.periods.Add(v)
		if partial {
			r.partial++
		}
	}
	r.mu.Unlock()
}

// keep adds v to the waiting partial of the key whose FleetKey is h in
// period p, telling due when partials start waiting. r.mu is held.
func (r *Recorder) keep(h uint64, p int64, v float64) {
	keys := r.out[p]
	if keys == nil {
		keys = make(map[uint64]float64)
		r.out[p] = keys
	}
	if _, ok := keys[h]; !ok {
		if r.pending >= 4*numShards*r.perShard {
			r.dropped++
			return
		}
		r.pending++
		if r.pending == 1 {
			r.due()
		}
	}
	keys[h] += v
}

// retire records the largest period demand of a key no longer followed;
// in fleet mode, nothing: the fleet's store knows each key's periods.
func (r *Recorder) retire(peak float64) {
	if !(peak > 0) || r.due != nil {
		return
	}
	r.mu.Lock()
	r.peaks.Add(peak)
	r.mu.Unlock()
}

// sweep folds the key-periods of sh that are over and retires its keys
// idle beyond the horizon; the next sweep is due sweepEvery later.
func (r *Recorder) sweep(sh *shard, now int64) {
	p := now / r.period
	for k, e := range sh.keys {
		if e.last/r.period < p && e.sum > 0 {
			r.fold(e.fleet, e.last/r.period, e.sum, false)
			if e.sum > e.peak {
				e.peak = e.sum
			}
			e.sum = 0
			sh.keys[k] = e
		}
		if now-e.last > r.idle {
			r.retire(e.peak)
			delete(sh.keys, k)
		}
	}
	sh.sweep = now + r.sweepEvery
}

// evict retires, from a full shard, the key idle the longest among a few
// (map iteration order samples them) at now: its period folded, as a
// partial key-period if that period is not over.
func (r *Recorder) evict(sh *shard, now int64) {
	var victim uint64
	var oldest entry
	n := 0
	for k, e := range sh.keys {
		if n == 0 || e.last < oldest.last {
			victim, oldest = k, e
		}
		n++
		if n == 8 {
			break
		}
	}
	peak := oldest.peak
	if oldest.sum > peak {
		peak = oldest.sum
	}
	r.fold(oldest.fleet, oldest.last/r.period, oldest.sum, oldest.last/r.period == now/r.period)
	r.retire(peak)
	delete(sh.keys, victim)
}

// Reset forgets everything recorded; figures start again from now.
func (r *Recorder) Reset(now int64) {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		sh.keys = make(map[uint64]entry)
		sh.sweep = 0
		sh.mu.Unlock()
	}
	r.mu.Lock()
	r.periods, r.peaks, r.partial, r.since = Sketch{}, Sketch{}, 0, now
	if r.due != nil {
		r.out = make(map[int64]map[uint64]float64)
		r.pending = 0
	}
	r.mu.Unlock()
}

// Snapshot is what a Recorder has recorded, at one instant.
type Snapshot struct {
	// Since is the instant the figures start from (the recorder's
	// creation or last reset), nanoseconds since the epoch.
	Since int64
	// Periods holds the demand of each complete key-period.
	Periods Sketch
	// Keys holds, for every key with a complete period, the largest
	// demand of its periods: a key retired and seen again counts twice.
	Keys Sketch
	// Partial is how many of Periods were folded before their period
	// was over, their key retired early to bound memory (for a fleet's,
	// redisstore.Demand, evicted to bound what Redis holds).
	Partial uint64
	// Followed is how many keys the recorder follows now.
	Followed int
	// Open is how many key-periods were recorded whose period is not
	// over, which Periods will count once it is; OpenEnd is the end of
	// the first of those periods (nanoseconds since the epoch), zero when
	// none is open.
	Open    int
	OpenEnd int64
}

// Snapshot folds every key-period that is over at now and returns the
// recorder's figures. It visits every followed key: it is for an
// operator's query, not for a request.
func (r *Recorder) Snapshot(now int64) Snapshot {
	var live Sketch
	followed, open, openEnd := 0, 0, int64(0)
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		r.sweep(sh, now)
		followed += len(sh.keys)
		for _, e := range sh.keys {
			if r.due == nil { // in fleet mode, the fleet's store knows peaks
				live.Add(e.peak)
			}
			if e.sum > 0 { // the sweep folded the periods over
				open++
				if end := (e.last/r.period + 1) * r.period; openEnd == 0 || end < openEnd {
					openEnd = end
				}
			}
		}
		sh.mu.Unlock()
	}
	r.mu.Lock()
	s := Snapshot{Since: r.since, Partial: r.partial, Followed: followed, Open: open, OpenEnd: openEnd}
	s.Periods.Merge(&r.periods)
	s.Keys.Merge(&r.peaks)
	r.mu.Unlock()
	s.Keys.Merge(&live)
	return s
}

// Folded returns a copy of the sketch of the key-periods folded by now:
// what the demand metrics export on every scrape. It sweeps only the
// shards whose sweep is due, as Add does, so that scrapes cost no more
// than the sweeps traffic already makes, and periods over are folded
// within a sweep's interval even when no request comes.
func (r *Recorder) Folded(now int64) Sketch {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		if now >= sh.sweep {
			r.sweep(sh, now)
		}
		sh.mu.Unlock()
	}
	var s Sketch
	r.mu.Lock()
	s.Merge(&r.periods)
	r.mu.Unlock()
	return s
}

// A Quantile is one series of the metric telemetry.Demand: the label of a
// quantile and the sketch's value at it.
type Quantile struct {
	Label string
	Value float64
}

// Quantiles returns s's values at each of telemetry.DemandQuantiles, in
// order, labelled as the metric telemetry.Demand exports them; nil for an
// empty sketch, which has no quantile.
func (s *Sketch) Quantiles() []Quantile {
	if s.n == 0 {
		return nil
	}
	qs := telemetry.DemandQuantiles()
	out := make([]Quantile, len(qs))
	for i, q := range qs {
		out[i] = Quantile{Label: strconv.FormatFloat(q, 'f', -1, 64), Value: s.Quantile(q)}
	}
	return out
}
