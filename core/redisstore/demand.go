package redisstore

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/model"
)

// DemandPeriods is how many of a limit's most recent complete periods a
// fleet's demand covers: the figures of an advice on it. Redis holds
// each of them as a hash of about 50 bytes a key that asked in it.
const DemandPeriods = 24

// DemandFlushDelay is how long a fleet recorder's partials wait, once
// the first of them is there, before they are sent to Redis together.
const DemandFlushDelay = time.Second

// demandSendTimeout bounds the call that sends partials.
const demandSendTimeout = time.Second

// Demand is a limit's demand recorded by a fleet: every instance that
// decides the limit in one Redis records the cost its keys ask in a
// demand.Recorder made by NewFleetRecorder, which keeps this instance's
// part of each key-period; Demand sends those parts to Redis, where one
// hash per period sums them by key (HINCRBYFLOAT, one script call per
// period and flush), and reads the last DemandPeriods complete periods
// back as a demand.Snapshot of the whole fleet's key-periods.
//
// Parts are sent DemandFlushDelay after the first of them waits, by a
// goroutine that, while some key's period is open, also folds each
// period once it is over (and sends it), so that a period reaches Redis
// even when no request comes after it; it ends when no period is open. A
// Snapshot reads a period once every instance has had the time to send it
// (lag).
//
// Its keys are Prefix + "{" + limit.Namespace() + ":demand:" + zone + "}:"
// (zone's braces escaped as in state keys) followed by the period's index (its start in periods since the epoch) or "since"
// (the instant of the last Reset): one hash slot in a Cluster. Periods
// are counted on the instances' clocks, not Redis's: instances whose
// clocks differ may split a key's asks near a period's end between two
// periods.
type Demand struct {
	store  *Store
	base   string
	period int64
	clock  model.Clock
	rec    *demand.Recorder
	busy   int32 // 1 while the sending goroutine runs; atomic
	lost   uint64
}

// Demand returns the fleet demand of l (a validated limit with a period)
// in the host's zone (what the host begins its keys of l with, such as a
// server's or a middleware's name: the instances of a fleet name it
// alike), whose Recorder follows at most maxKeys keys at once (see
// demand.NewRecorder), on the host's clock (the instants it records at;
// nil: the system's).
func (s *Store) Demand(l *model.Limit, zone string, maxKeys int, clock model.Clock) *Demand {
	if clock == nil {
		clock = func() int64 { return time.Now().UnixNano() }
	}
	d := &Demand{store: s, base: s.prefix + "{" + l.Namespace() + ":demand:" + tagSafe(zone) + "}:", period: l.PeriodNanos(), clock: clock}
	d.rec = demand.NewFleetRecorder(d.period, maxKeys, clock(), d.due)
	return d
}

// Recorder is the recorder into which this instance records the limit's
// demand.
func (d *Demand) Recorder() *demand.Recorder { return d.rec }

// Lost is how many partials could not be sent (Redis failed) or were
// dropped by the recorder's bound, since the start.
func (d *Demand) Lost() uint64 { return atomic.LoadUint64(&d.lost) + d.rec.Dropped() }

// due is the recorder's call when partials start waiting: it starts the
// sending goroutine unless it runs.
func (d *Demand) due() {
	if atomic.CompareAndSwapInt32(&d.busy, 0, 1) {
		go d.send()
	}
}

// send is the sending goroutine: DemandFlushDelay after it starts, and
// again a little after the end of each period while one is open, it
// folds what is over and sends the partials. It ends when no period is
// open and no partial waits.
func (d *Demand) send() {
	for {
		time.Sleep(DemandFlushDelay)
		open := d.rec.Fold(d.clock())
		ctx, cancel := context.WithTimeout(context.Background(), demandSendTimeout)
		_ = d.Flush(ctx) // counted in lost
		cancel()
		if !open {
			atomic.StoreInt32(&d.busy, 0)
			// A partial kept since the Drain found busy set: send it too.
			if d.rec.Waiting() == 0 || !atomic.CompareAndSwapInt32(&d.busy, 0, 1) {
				return
			}
			continue
		}
		now := d.clock()
		time.Sleep(time.Duration(d.period-now%d.period) + demandFoldSlack)
	}
}

// demandFoldSlack is how long after a period's end the sending goroutine
// folds it.
const demandFoldSlack = 100 * time.Millisecond

// Flush sends the partials waiting in the recorder to Redis now.
func (d *Demand) Flush(ctx context.Context) error {
	parts := d.rec.Drain()
	if len(parts) == 0 {
		return nil
	}
	byPeriod := map[int64][]string{}
	for _, p := range parts {
		byPeriod[p.Period] = append(byPeriod[p.Period], strconv.FormatUint(p.Key, 36), model.FormatFloat(p.Demand))
	}
	ttl := strconv.FormatInt(int64(d.retention()/time.Millisecond), 10)
	var first error
	for p, pairs := range byPeriod {
		args := append([]string{ttl}, pairs...)
		if _, err := d.store.Eval(ctx, redisDemandAdd, []string{d.base + strconv.FormatInt(p, 10)}, args); err != nil {
			atomic.AddUint64(&d.lost, uint64(len(pairs)/2))
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// lag is how long after a period's end every instance has sent its
// partials of it: the sending goroutine folds it demandFoldSlack after
// its end, DemandFlushDelay later sends it within demandSendTimeout; a
// second more for the instances' clocks and timers.
func (d *Demand) lag() int64 {
	return int64(demandFoldSlack + DemandFlushDelay + demandSendTimeout + time.Second)
}

// retention is how long a period's hash lives after its last write: the
// periods a Snapshot reads, the lag and two more periods.
func (d *Demand) retention() time.Duration {
	return time.Duration((DemandPeriods+2)*d.period + d.lag())
}

// window returns the first and last periods a Snapshot at now reads: the
// last DemandPeriods complete periods that every instance has sent.
func (d *Demand) window(now int64) (first, last int64) {
	last = (now-d.lag())/d.period - 1
	return last - DemandPeriods + 1, last
}

// Snapshot sends this instance's partials, then returns the fleet's
// demand in the window's periods that begin at or after the last Reset:
// Periods holds every key-period, Keys each key's largest period; Since
// is the start of the first period read (the figures cover from there to
// the end of the last complete period every instance has sent).
// Followed is the keys this instance follows.
func (d *Demand) Snapshot(ctx context.Context, now int64) (demand.Snapshot, error) {
	followed := d.rec.Snapshot(now).Followed // folds what is over, to send
	_ = d.Flush(ctx)                         // counted in lost; the fleet's figures are read anyway
	first, last := d.window(now)
	keys := []string{d.base + "since"}
	for p := first; p <= last; p++ {
		keys = append(keys, d.base+strconv.FormatInt(p, 10))
	}
	reply, err := d.store.Eval(ctx, redisDemandRead, keys, nil)
	if err != nil {
		return demand.Snapshot{}, err
	}
	rows, ok := reply.([]interface{})
	if !ok || len(rows) != len(keys) {
		return demand.Snapshot{}, fmt.Errorf("redis: demand: unexpected reply %v", reply)
	}
	since, _ := rows[0].(string)
	from := first
	if t, err := strconv.ParseInt(since, 10, 64); err == nil && t > first*d.period {
		from = (t + d.period - 1) / d.period // the first period begun since
	}
	s := demand.Snapshot{Since: from * d.period, Followed: followed}
	peaks := map[string]float64{}
	for i, row := range rows[1:] {
		if first+int64(i) < from {
			continue
		}
		fields, _ := row.([]interface{})
		for j := 0; j+1 < len(fields); j += 2 {
			k, _ := fields[j].(string)
			text, _ := fields[j+1].(string)
			v, err := strconv.ParseFloat(text, 64)
			if err != nil || !(v > 0) {
				continue
			}
			s.Periods.Add(v)
			if v > peaks[k] {
				peaks[k] = v
			}
		}
	}
	for _, v := range peaks {
		s.Keys.Add(v)
	}
	return s, nil
}

// Advise is demand.AdviseQuery on the fleet's demand at now: the advice
// on zone, whose limit is l, with Scope "fleet". A bad query's error is a
// model.FieldError; any other is Redis's.
func (d *Demand) Advise(ctx context.Context, zone string, l *model.Limit, now int64, q url.Values) (demand.Advice, error) {
	asked, err := demand.Asked(l, q)
	if err != nil {
		return demand.Advice{}, err
	}
	s, err := d.Snapshot(ctx, now)
	if err != nil {
		return demand.Advice{}, err
	}
	a := demand.Advise(zone, l, &s, asked)
	a.Scope = demand.ScopeFleet
	return a, nil
}

// Reset forgets the fleet's demand: a Snapshot reads no period begun
// before now, in any instance; this instance's waiting partials are
// dropped.
func (d *Demand) Reset(ctx context.Context, now int64) error {
	d.rec.Reset(now)
	ttl := strconv.FormatInt(int64(d.retention()/time.Millisecond), 10)
	_, err := d.store.Eval(ctx, redisDemandReset, []string{d.base + "since"}, []string{strconv.FormatInt(now, 10), ttl})
	return err
}

var (
	redisDemandAdd   = NewScript(redisDemandAddScript)
	redisDemandRead  = NewScript(redisDemandReadScript)
	redisDemandReset = NewScript(redisDemandResetScript)
)

// redisDemandAddScript adds one instance's partials to a period's hash:
// KEYS[1] the hash, ARGV[1] its time to live in milliseconds, then a key
// and its demand, for each key.
const redisDemandAddScript = `
for i = 2, #ARGV, 2 do
  redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 0
`

// redisDemandReadScript returns the instant of the last reset (KEYS[1],
// false if none) and the fields of each period's hash (KEYS[2] ...).
const redisDemandReadScript = `
local out = {redis.call('GET', KEYS[1])}
for i = 2, #KEYS do
  out[i] = redis.call('HGETALL', KEYS[i])
end
return out
`

// redisDemandResetScript records the instant of a reset, ARGV[1], at
// KEYS[1], for ARGV[2] milliseconds.
const redisDemandResetScript = `
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 0
`
