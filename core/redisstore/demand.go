package redisstore

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/await"
	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/model"
)

// DemandPeriods is how many of a limit's most recent complete periods a
// fleet's demand covers: the figures of an advice on it.
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
// sorted set per period sums them by key (one script call per period and
// batch), and reads the last DemandPeriods complete periods back as a
// demand.Snapshot of the whole fleet's key-periods.
//
// Redis holds at most maxKeys keys a period (Store.Demand), as a Recorder
// follows at most that many at once: a part of a key the period's set
// does not hold, the set full, evicts the key of the least demand so far
// (which may be that key itself); its key-period is folded, as a partial
// one, into the period's sketch of evicted key-periods, a hash of at most
// one field for each bucket of a demand.Sketch that its values fall in
// and three more (count, sum, largest). A flood of keys that ask little
// thus evicts one another, not the keys that ask the most, whose
// key-periods a limit refuses; a key evicted and asking again in the
// period starts a key-period of its own, as a retired key does in a
// Recorder, and every evicted key-period counts as a key of its own.
//
// Parts are sent by a goroutine of the Demand's, started when the first
// part waits or a key's period opens: DemandFlushDelay after it starts it
// folds what is over and sends what waits; while some key's period is
// open it does so again demandFoldSlack after that period's end (every
// 11 s at least); it ends when no period is open and nothing waits. So a
// period reaches Redis about a second after its end even when no request
// follows it, and a Snapshot reads it once every instance has had the
// time to send it (demandLag). Close folds and sends what remains, open
// periods included, and stops the goroutine.
//
// Its keys are Prefix + "{" + limit.Namespace() + ":demand:" + zone + "}:"
// (zone's braces escaped as in state keys) followed by "keys:" or
// "evicted:" and the period's index (its start in periods since the
// epoch), or by "since" (the instant of the last Reset): one hash slot in
// a Cluster. A period's keys take about 100 bytes each (a sorted set's
// member and score; measured with MEMORY USAGE), its sketch of evicted
// key-periods 580 fields and 31 KB at most, under 1 KB while their demands
// span less than two decades (58 buckets a decade); each lives
// DemandPeriods + 2 periods and the lag after its last write (292 years at
// most, what a Duration holds): Redis holds a limit's last 28 periods or
// so, at most 28 × maxKeys keys and 28 sketches. Periods are counted on the
// instances' clocks, not Redis's: instances whose clocks differ may split
// a key's asks near a period's end between two periods.
type Demand struct {
	store  evaler // the Store that made it (Store.Demand)
	base   string
	period int64
	keys   string // maxKeys, as the script takes it
	clock  model.Clock
	rec    *demand.Recorder
	ctx    context.Context // ended by Close
	stop   context.CancelFunc
	busy   int32 // 1 while the sending goroutine runs; atomic
	kick   int32 // 1 when due was called since the goroutine last folded; atomic

	mu      sync.Mutex
	closed  bool
	running chan struct{} // closed when the newest sending goroutine ends
}

// evaler runs a script as Store.Eval does: a Demand holds its Store as
// one, because under Yaegi the text of a type spells out every type it
// points to, and a pointer would put a Store's, leases included, in the
// text of every type holding a Demand.
type evaler interface {
	Eval(ctx context.Context, script *Script, keys, args []string) (interface{}, error)
}

// Demand returns the fleet demand of l (a validated limit with a period)
// in the host's zone (what the host begins its keys of l with, such as a
// server's or a middleware's name: the instances of a fleet name it
// alike), whose Recorder follows at most maxKeys keys at once (see
// demand.NewRecorder; zero: demand.DefaultMaxKeys) and Redis holds at most
// maxKeys keys a period, on the host's clock (the instants it records at;
// nil: the system's). The host calls Close when it no longer records.
func (s *Store) Demand(l *model.Limit, zone string, maxKeys int, clock model.Clock) *Demand {
	if clock == nil {
		clock = func() int64 { return time.Now().UnixNano() }
	}
	if maxKeys <= 0 {
		maxKeys = demand.DefaultMaxKeys
	}
	d := &Demand{store: s, base: s.prefix + "{" + l.Namespace() + ":demand:" + tagSafe(zone) + "}:", period: l.PeriodNanos(), keys: strconv.Itoa(maxKeys), clock: clock}
	d.ctx, d.stop = context.WithCancel(context.Background())
	d.rec = demand.NewFleetRecorder(d.period, maxKeys, clock(), d.due)
	return d
}

// Recorder is the recorder into which this instance records the limit's
// demand.
func (d *Demand) Recorder() *demand.Recorder { return d.rec }

// due is the recorder's call when partials start waiting or a key's
// period opens: it starts the sending goroutine unless it runs, and tells
// it to go on.
func (d *Demand) due() {
	atomic.StoreInt32(&d.kick, 1)
	if atomic.CompareAndSwapInt32(&d.busy, 0, 1) {
		d.start()
	}
}

// start starts the sending goroutine, unless d is closed.
func (d *Demand) start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return // busy stays 1: nothing starts again
	}
	done := make(chan struct{})
	d.running = done
	go d.send(done)
}

// demandFoldSlack is how long after a period's end the sending goroutine
// wakes to fold it; demandMaxSleep the longest it sleeps while a period
// is open, so that parts folded early (a key evicted) wait no longer.
const (
	demandFoldSlack = 100 * time.Millisecond
	demandMaxSleep  = 10 * time.Second
)

// send is the sending goroutine; it closes done when it ends.
func (d *Demand) send(done chan struct{}) {
	defer close(done)
	for await.Sleep(d.ctx, DemandFlushDelay) {
		atomic.StoreInt32(&d.kick, 0)
		open := d.rec.Fold(d.clock())
		// Not d.ctx: Close waits for this send rather than cancel it.
		ctx, cancel := context.WithTimeout(context.Background(), demandSendTimeout)
		_ = d.Flush(ctx) // parts Redis refused are lost
		cancel()
		if !open {
			atomic.StoreInt32(&d.busy, 0)
			// A due since the fold above found busy set: go on for it.
			if atomic.LoadInt32(&d.kick) == 0 && d.rec.Waiting() == 0 || !atomic.CompareAndSwapInt32(&d.busy, 0, 1) {
				return
			}
			continue
		}
		sleep := time.Duration(d.period-d.clock()%d.period) + demandFoldSlack - DemandFlushDelay
		if sleep > demandMaxSleep {
			sleep = demandMaxSleep
		}
		if sleep > 0 && !await.Sleep(d.ctx, sleep) {
			return
		}
	}
}

// Close stops recording: it stops the sending goroutine, waiting for it,
// then folds every key's period, open ones too (the fleet sums this
// instance's part of them with the others'), and sends them within
// demandSendTimeout. The Recorder must no longer be used.
func (d *Demand) Close() {
	d.mu.Lock()
	d.closed = true
	done := d.running
	d.mu.Unlock()
	d.stop()
	if done != nil {
		<-done
	}
	d.rec.FoldAll()
	ctx, cancel := context.WithTimeout(context.Background(), demandSendTimeout)
	defer cancel()
	_ = d.Flush(ctx) // parts Redis refused are lost
}

// demandBatch is the most partials one script call sends, and the most
// fields one call reads, so that no call holds Redis for long.
const demandBatch = 1000

// Flush sends the partials waiting in the recorder to Redis now; those
// of a call that fails are lost, and the first error returned.
func (d *Demand) Flush(ctx context.Context) error {
	return d.add(ctx, d.rec.Drain())
}

// periodKeys are the Redis keys of period p: its keys' sorted set and its
// sketch of evicted key-periods.
func (d *Demand) periodKeys(p int64) []string {
	i := strconv.FormatInt(p, 10)
	return []string{d.base + "keys:" + i, d.base + "evicted:" + i}
}

// demandBucketing is what the add script needs of demand.Bucketing: the
// smallest value's bound, the logarithm of the buckets' ratio and the last
// bucket, as ARGV[3] to ARGV[5].
var demandBucketing = func() []string {
	lo, lnG, last := demand.Bucketing()
	return []string{model.FormatFloat(lo), model.FormatFloat(lnG), strconv.Itoa(last)}
}()

// add sends parts to Redis; those of a call that fails are lost, and the
// first error returned.
func (d *Demand) add(ctx context.Context, parts []demand.Partial) error {
	if len(parts) == 0 {
		return nil
	}
	byPeriod := map[int64][]string{}
	for _, p := range parts {
		byPeriod[p.Period] = append(byPeriod[p.Period], strconv.FormatUint(p.Key, 36), model.FormatFloat(p.Demand))
	}
	head := append([]string{strconv.FormatInt(int64(d.retention()/time.Millisecond), 10), d.keys}, demandBucketing...)
	var first error
	for p, pairs := range byPeriod {
		keys := d.periodKeys(p)
		for len(pairs) > 0 {
			n := len(pairs)
			if n > 2*demandBatch {
				n = 2 * demandBatch
			}
			args := append(append(make([]string, 0, len(head)+n), head...), pairs[:n]...)
			if _, err := d.store.Eval(ctx, redisDemandAdd, keys, args); err != nil {
				if first == nil {
					first = err
				}
			}
			pairs = pairs[n:]
		}
	}
	return first
}

// demandLag is how long after a period's end every instance has sent its
// partials of it: the sending goroutine folds it demandFoldSlack after
// its end and sends it within demandSendTimeout; DemandFlushDelay and a
// second more for the instances' clocks and timers.
const demandLag = int64(demandFoldSlack + DemandFlushDelay + demandSendTimeout + time.Second)

// retention is how long a period's keys live after their last write: the
// periods a Snapshot reads, the lag and two more periods; for periods of
// more than about 11 years, whose 26 periods a Duration cannot hold, the
// longest Duration (some 292 years): never less, which PEXPIRE would take
// as an expiry in the past, deleting the key.
func (d *Demand) retention() time.Duration {
	if d.period > (math.MaxInt64-demandLag)/(DemandPeriods+2) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration((DemandPeriods+2)*d.period + demandLag)
}

// window returns the first and last periods a Snapshot at now reads: the
// last DemandPeriods complete periods that every instance has sent, none
// before the epoch's (a period so long that fewer have passed since 1970
// would have instants no int64 holds).
func (d *Demand) window(now int64) (first, last int64) {
	last = (now-demandLag)/d.period - 1
	first = last - DemandPeriods + 1
	if first < 0 {
		first = 0
	}
	return first, last
}

// Snapshot sends this instance's partials, then returns the fleet's
// demand in the window's periods that begin at or after the last Reset:
// Periods holds every key-period, Keys each key's largest period; Since
// is the start of the first period read (the figures cover from there to
// the end of the last complete period every instance has sent).
// Followed is the keys this instance follows; Open the key-periods not
// yet read (see pending), OpenEnd when the first of them will be.
func (d *Demand) Snapshot(ctx context.Context, now int64) (demand.Snapshot, error) {
	local := d.rec.Snapshot(now) // folds what is over, to send
	_ = d.Flush(ctx)             // the fleet's figures are read even if this fails
	first, last := d.window(now)
	reply, err := d.store.Eval(ctx, redisDemandSince, []string{d.base + "since"}, nil)
	if err != nil {
		return demand.Snapshot{}, err
	}
	from := first
	if since, ok := reply.(string); ok {
		if t, err := strconv.ParseInt(since, 10, 64); err == nil && t > first*d.period {
			from = (t + d.period - 1) / d.period // the first period begun since
		}
	}
	s := demand.Snapshot{Since: from * d.period, Followed: local.Followed}
	peaks := map[uint64]float64{}
	for p := from; p <= last; p++ {
		if err := d.readPeriod(ctx, p, &s, peaks); err != nil {
			return demand.Snapshot{}, err
		}
	}
	for _, v := range peaks {
		s.Keys.Add(v)
	}
	if err := d.pending(ctx, now, from, last, &local, &s); err != nil {
		return demand.Snapshot{}, err
	}
	return s, nil
}

// demandPending is the most periods after a Snapshot's window whose
// key-periods pending counts: more than two only for periods shorter than
// the lag.
const demandPending = 8

// pending sets s.Open and s.OpenEnd: the key-periods that a Snapshot at
// now, whose window ends with period last and begins with from, does not
// read yet, in periods that begin at or after from: those Redis holds of
// the (at most demandPending) periods after last, sent by the instances or
// evicted early from them, and those local, this instance's recorder, holds
// open; and when a Snapshot will read the first of them, demandLag after
// its period's end. A key with parts in Redis and in local counts in each.
func (d *Demand) pending(ctx context.Context, now, from, last int64, local *demand.Snapshot, s *demand.Snapshot) error {
	first := last + 1
	if first < from {
		first = from
	}
	var keys []string
	for p := first; p <= now/d.period && p < first+demandPending; p++ {
		keys = append(keys, d.periodKeys(p)...)
	}
	if len(keys) > 0 {
		reply, err := d.store.Eval(ctx, redisDemandCount, keys, nil)
		if err != nil {
			return err
		}
		counts, _ := reply.([]interface{})
		for i, c := range counts {
			if n, _ := c.(int64); n > 0 {
				s.Open += int(n)
				if s.OpenEnd == 0 {
					s.OpenEnd = (first+int64(i)+1)*d.period + demandLag
				}
			}
		}
	}
	if local.Open > 0 && local.OpenEnd > from*d.period {
		s.Open += local.Open
		if end := local.OpenEnd + demandLag; s.OpenEnd == 0 || end < s.OpenEnd {
			s.OpenEnd = end
		}
	}
	return nil
}

// readPeriod adds the key-periods of period p to s.Periods, raising each
// key's peak, and its evicted key-periods to s.Periods and s.Keys (each a
// key of its own) and s.Partial. It reads the period's keys demandBatch at
// a time (ZSCAN, which may return a key twice: each counts once), so that
// what it loads is bounded by what Redis holds: the keys, at most the
// largest maxKeys of the instances writing them, and the sketch.
func (d *Demand) readPeriod(ctx context.Context, p int64, s *demand.Snapshot, peaks map[uint64]float64) error {
	keys := d.periodKeys(p)
	count := strconv.Itoa(demandBatch)
	seen := map[uint64]bool{}
	cursor := "0"
	for {
		reply, err := d.store.Eval(ctx, redisDemandScan, keys, []string{cursor, count})
		if err != nil {
			return err
		}
		page, ok := reply.([]interface{})
		if !ok || len(page) != 3 {
			return fmt.Errorf("redis: demand: unexpected reply %v", reply)
		}
		if cursor == "0" {
			evicted := evictedSketch(page[2])
			s.Periods.Merge(&evicted)
			s.Keys.Merge(&evicted)
			s.Partial += evicted.Count()
		}
		cursor, _ = page[0].(string)
		fields, _ := page[1].([]interface{})
		for j := 0; j+1 < len(fields); j += 2 {
			k, _ := fields[j].(string)
			text, _ := fields[j+1].(string)
			id, err := strconv.ParseUint(k, 36, 64)
			if err != nil || seen[id] {
				continue
			}
			v, err := strconv.ParseFloat(text, 64)
			if err != nil || !(v > 0) {
				continue
			}
			seen[id] = true
			s.Periods.Add(v)
			if v > peaks[id] {
				peaks[id] = v
			}
		}
		if cursor == "0" || cursor == "" {
			return nil
		}
	}
}

// evictedSketch reads a period's sketch of evicted key-periods from the
// hash's fields and values (HGETALL's reply): the count of each bucket,
// under its index, and the values' sum and largest, under "sum" and "max".
func evictedSketch(reply interface{}) demand.Sketch {
	fields, _ := reply.([]interface{})
	counts := map[int]uint64{}
	var sum, largest float64
	for j := 0; j+1 < len(fields); j += 2 {
		k, _ := fields[j].(string)
		v, _ := fields[j+1].(string)
		switch k {
		case "sum":
			sum, _ = strconv.ParseFloat(v, 64)
		case "max":
			largest, _ = strconv.ParseFloat(v, 64)
		default:
			i, err := strconv.Atoi(k)
			n, err2 := strconv.ParseUint(v, 10, 64)
			if err == nil && err2 == nil {
				counts[i] = n
			}
		}
	}
	return demand.SketchOf(counts, sum, largest)
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

// DemandAnswerTimeout bounds the Redis calls of one Answer.
const DemandAnswerTimeout = 5 * time.Second

// Answer is the answer on the advice endpoint of a zone, whose limit is
// l, that records its demand for the fleet (see AnswerAdvice): for DELETE,
// Reset and 204; for any other method, Advise and 200 with the advice;
// 400 with a model.FieldError for a bad query; 502 with Redis's error
// when it fails. adv is nil but with 200.
func (d *Demand) Answer(ctx context.Context, method, zone string, l *model.Limit, now int64, q url.Values) (status int, adv *demand.Advice, err error) {
	ctx, cancel := context.WithTimeout(ctx, DemandAnswerTimeout)
	defer cancel()
	if method == http.MethodDelete {
		if err := d.Reset(ctx, now); err != nil {
			return http.StatusBadGateway, nil, fmt.Errorf("resetting the fleet's demand: %w", err)
		}
		return http.StatusNoContent, nil, nil
	}
	a, err := d.Advise(ctx, zone, l, now, q)
	switch {
	case model.FieldOf(err) != nil:
		return http.StatusBadRequest, nil, err
	case err != nil:
		return http.StatusBadGateway, nil, fmt.Errorf("reading the fleet's demand: %w", err)
	}
	return http.StatusOK, &a, nil
}

// AnswerAdvice is what both hosts answer on the advice endpoint of a zone
// whose limit is l and whose demand rec records: fleet's Answer when rec
// is a fleet's (fleet, its Demand, not nil), else rec's.
func AnswerAdvice(ctx context.Context, fleet *Demand, rec *demand.Recorder, method, zone string, l *model.Limit, now int64, q url.Values) (status int, adv *demand.Advice, err error) {
	if fleet != nil {
		return fleet.Answer(ctx, method, zone, l, now, q)
	}
	return rec.Answer(method, zone, l, now, q)
}

// Reset forgets the fleet's demand: a Snapshot reads no period begun
// before now, in any instance; this instance's waiting partials are
// dropped.
func (d *Demand) Reset(ctx context.Context, now int64) error {
	ttl := strconv.FormatInt(int64(d.retention()/time.Millisecond), 10)
	if _, err := d.store.Eval(ctx, redisDemandReset, []string{d.base + "since"}, []string{strconv.FormatInt(now, 10), ttl}); err != nil {
		return err
	}
	d.rec.Reset(now)
	return nil
}

var (
	redisDemandAdd   = NewScript(redisDemandAddScript)
	redisDemandSince = NewScript(redisDemandSinceScript)
	redisDemandScan  = NewScript(redisDemandScanScript)
	redisDemandCount = NewScript(redisDemandCountScript)
	redisDemandReset = NewScript(redisDemandResetScript)
)

// redisDemandAddScript adds one instance's partials to a period: KEYS[1]
// the sorted set of its keys, KEYS[2] the hash of its sketch of evicted
// key-periods; ARGV[1] their time to live in milliseconds, ARGV[2] the
// most keys the set holds, ARGV[3] to ARGV[5] demand.Bucketing's bound,
// logarithm and last bucket, then a key and its demand, for each key. A
// key new to a full set evicts the key of the least demand, maybe itself;
// a set fuller than ARGV[2] (written by an instance of a larger bound)
// gives back up to 1,000 more. An evicted key-period counts in its bucket
// of the sketch (the index as the field), in "n", "sum" and "max".
const redisDemandAddScript = `
local most, lo, lng, last = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local n = redis.call('ZCARD', KEYS[1])
local counts, evicted, sum, top = {}, 0, 0, nil
local function evict(k)
  local out = redis.call('ZPOPMIN', KEYS[1], k)
  for j = 2, #out, 2 do
    local v = tonumber(out[j])
    local b = 0
    if v > lo then
      b = math.ceil(math.log(v / lo) / lng)
      if b > last then b = last end
    end
    counts[b] = (counts[b] or 0) + 1
    evicted = evicted + 1
    sum = sum + v
    if top == nil or v > top then top = v end
    n = n - 1
  end
end
if n > most then evict(math.min(n - most, 1000)) end
for i = 6, #ARGV, 2 do
  if redis.call('ZADD', KEYS[1], 'NX', ARGV[i + 1], ARGV[i]) == 1 then
    n = n + 1
    if n > most then evict(1) end
  else
    redis.call('ZINCRBY', KEYS[1], ARGV[i + 1], ARGV[i])
  end
end
if evicted > 0 then
  for b, c in pairs(counts) do
    redis.call('HINCRBY', KEYS[2], string.format('%d', b), c)
  end
  redis.call('HINCRBY', KEYS[2], 'n', evicted)
  redis.call('HINCRBYFLOAT', KEYS[2], 'sum', string.format('%.17g', sum))
  local was = tonumber(redis.call('HGET', KEYS[2], 'max') or '0')
  if top > was then redis.call('HSET', KEYS[2], 'max', string.format('%.17g', top)) end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 0
`

// redisDemandSinceScript returns the instant of the last reset, KEYS[1]
// (nil if none).
const redisDemandSinceScript = `return redis.call('GET', KEYS[1])`

// redisDemandScanScript returns the next page of a period's keys, KEYS[1]:
// ZSCAN from cursor ARGV[1], about ARGV[2] keys, as {cursor, keys and
// demands}, and a third element: for the first page (cursor 0), the
// fields and values of the period's sketch of evicted key-periods,
// KEYS[2] (at most some 580); else none.
const redisDemandScanScript = `
local page = redis.call('ZSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local evicted = {}
if ARGV[1] == '0' then evicted = redis.call('HGETALL', KEYS[2]) end
return {page[1], page[2], evicted}
`

// redisDemandCountScript returns, for each period whose keys and sketch
// of evicted key-periods are KEYS[2i−1] and KEYS[2i], how many
// key-periods it holds.
const redisDemandCountScript = `
local out = {}
for i = 1, #KEYS, 2 do
  out[#out + 1] = redis.call('ZCARD', KEYS[i]) + tonumber(redis.call('HGET', KEYS[i + 1], 'n') or '0')
end
return out
`

// redisDemandResetScript records the instant of a reset, ARGV[1], at
// KEYS[1], for ARGV[2] milliseconds.
const redisDemandResetScript = `
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 0
`
