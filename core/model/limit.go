package model

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Algorithm names a rate-limiting algorithm.
type Algorithm string

// The algorithms sluice implements. See the Step functions in this package
// for the exact semantics of each.
const (
	// TokenBucket holds up to Burst tokens, refilled continuously at
	// Rate.Quota per Rate.Period; a request of cost c passes iff at least c
	// tokens are present, and takes them, or with MaxDelay iff they will be
	// within it, and waits for them.
	TokenBucket Algorithm = "token_bucket"
	// LeakyBucket shapes traffic like NGINX's limit_req without nodelay:
	// requests leave at the constant rate; one that can leave within
	// MaxDelay (and fits the queue of depth Burst) is admitted with that
	// delay, any other is rejected.
	LeakyBucket Algorithm = "leaky_bucket"
	// FixedWindow counts cost per calendar-aligned window of length
	// Rate.Period (aligned to the Unix epoch).
	FixedWindow Algorithm = "fixed_window"
	// SlidingWindowLog keeps the instant and cost of every admitted request
	// of the last period: an exact moving count, at a memory cost
	// proportional to the quota.
	SlidingWindowLog Algorithm = "sliding_window_log"
	// SlidingWindowCounter keeps the counts of the current and the previous
	// window and weighs the previous one by its overlap with the last
	// period.
	SlidingWindowCounter Algorithm = "sliding_window_counter"
)

// Algorithms lists every algorithm, in documentation order.
var Algorithms = []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter}

// MaxLogQuota is the largest quota a SlidingWindowLog limit accepts. The log
// keeps at most this many entries per key (16 bytes each), so one key costs
// at most 160 KiB.
const MaxLogQuota = 10000

// MaxSpan bounds a limit's period and the time its capacity takes to refill
// (Burst·Period/Quota), so that no instant sluice computes overflows int64
// nanoseconds (which end in 2262).
const MaxSpan = 100 * 365 * 24 * time.Hour

// Never is the RetryAfter of a decision that no amount of waiting can
// change: the cost exceeds the limit's capacity.
const Never = time.Duration(math.MaxInt64)

// Rate is a quota of cost units per period.
type Rate struct {
	Quota  float64       // cost units admitted per Period; > 0
	Period time.Duration // > 0
}

// ParseRate parses a rate written as "<quota>/<period>": "100/m",
// "5/s", "1000/1d", "2.5/s", "10/1m30s". The period is a unit, meaning
// one of it, a count of a unit, or a Go duration. The units and the names
// each may be written by:
//
//	millisecond  ms, msec, msecs, millisecond, milliseconds
//	second       s, sec, secs, second, seconds
//	minute       m, min, mins, minute, minutes
//	hour         h, hr, hrs, hour, hours
//	day          d, day, days (24 hours)
//
// A count is a number without sign, whole or decimal, before the unit,
// with or without a space: "1000/1d", "1000/2days", "60/1 hour",
// "10/90sec", "1/1.5h". A Go duration (time.ParseDuration) adds the units
// us and ns and sums of parts: "1m30s", "1h15m", "1500ms". Names are
// lowercase.
func ParseRate(s string) (Rate, error) {
	q, p, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Rate{}, Refuse("rate", s, "want <quota>/<period>, such as 100/m")
	}
	quota, err := strconv.ParseFloat(strings.TrimSpace(q), 64)
	if err != nil || math.IsNaN(quota) || math.IsInf(quota, 0) {
		return Rate{}, Refuse("rate", s, "quota "+strconv.Quote(q)+" is not a number")
	}
	if quota <= 0 {
		return Rate{}, Refuse("rate", s, "quota must be positive")
	}
	p = strings.TrimSpace(p)
	if p == "" || (p[0] < '0' || p[0] > '9') && periodUnits[p] == "" {
		return Rate{}, Refuse("rate", s, "unknown unit "+strconv.Quote(p)+
			" (use ms, s, m, h or d, or a name such as sec, minute, hours or days, alone or after a count such as 1d or 2days, or a duration such as 1m30s)")
	}
	period, ok := parsePeriod(p)
	if !ok {
		return Rate{}, Refuse("rate", s, "period "+strconv.Quote(p)+": unknown unit or bad duration")
	}
	if period <= 0 {
		return Rate{}, Refuse("rate", s, "period must be positive")
	}
	return Rate{Quota: quota, Period: period}, nil
}

// periodUnits maps each name of a unit that ParseRate reads to the unit
// of time.ParseDuration that its count is read in ("d": hours, times 24).
var periodUnits = map[string]string{
	"ms": "ms", "msec": "ms", "msecs": "ms", "millisecond": "ms", "milliseconds": "ms",
	"s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
	"m": "m", "min": "m", "mins": "m", "minute": "m", "minutes": "m",
	"h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
	"d": "d", "day": "d", "days": "d",
}

// parsePeriod reads a period as ParseRate describes it: a unit's name,
// optionally after a count, else a Go duration. It reports false for
// anything else, and for a period that overflows a time.Duration.
func parsePeriod(p string) (time.Duration, bool) {
	i := 0
	for i < len(p) && (p[i] >= '0' && p[i] <= '9' || p[i] == '.') {
		i++
	}
	count, unit := p[:i], periodUnits[strings.TrimSpace(p[i:])]
	if unit == "" {
		d, err := time.ParseDuration(p)
		return d, err == nil
	}
	if count == "" {
		count = "1"
	}
	if unit != "d" {
		d, err := time.ParseDuration(count + unit)
		return d, err == nil
	}
	h, err := time.ParseDuration(count + "h")
	if err != nil || h > math.MaxInt64/24 {
		return 0, false
	}
	return 24 * h, true
}

// String formats r as it is written and so that ParseRate reads it back:
// the period as a Go duration without its zero trailing units, "30/1m",
// "5/1h30m", "10/100ms", not "30/1m0s".
func (r Rate) String() string {
	return strconv.FormatFloat(r.Quota, 'f', -1, 64) + "/" + FormatPeriod(r.Period)
}

// FormatPeriod writes a period as users write it: time.Duration's text
// without its trailing zero units, "1m" rather than "1m0s", "1h" rather
// than "1h0m0s", "1m30s" unchanged.
func FormatPeriod(d time.Duration) string {
	p := d.String()
	if strings.HasSuffix(p, "m0s") {
		p = p[:len(p)-2]
	}
	if strings.HasSuffix(p, "h0m") {
		p = p[:len(p)-2]
	}
	return p
}

// Limit is one named rate limit. A Limit must pass Validate (which also fills
// in defaults) before it is used; after that it must not be modified.
type Limit struct {
	// Name identifies the limit in headers ("api" in RateLimit-Policy),
	// metrics and store keys. Names are unique within a Limiter.
	Name string
	// Algorithm is one of Algorithms; empty means TokenBucket.
	Algorithm Algorithm
	// Rate is the quota per period.
	Rate Rate
	// Burst is the capacity, in cost units: for TokenBucket the bucket size,
	// for LeakyBucket the queue depth (the request being served included).
	// Zero means the quota (a full period's worth), or 1 when the quota is
	// below 1; hosts read an unset burst as zero or as a default of their
	// own, and refuse one written as 0 (CheckBurst). Window algorithms take their capacity from the quota, which
	// must be at least 1, and reject a non-zero Burst.
	Burst float64
	// MaxDelay bounds the wait of a LeakyBucket request; zero means only the
	// queue depth bounds it. For a TokenBucket it is how long a request may
	// wait for its missing tokens instead of being rejected (zero: it never
	// waits), as in Traefik's rateLimit. Other algorithms reject a non-zero
	// MaxDelay.
	MaxDelay time.Duration
	// MaxInFlight, when positive, also bounds the requests of one key in
	// progress at once: a request that would be the MaxInFlight+1-th is
	// rejected, and an admitted one holds its slot until the host releases
	// it when its handler chain returns (see core.Verdict.Slots). A limit with
	// MaxInFlight may leave Rate zero (with no Algorithm, Burst or
	// MaxDelay): it then limits concurrency only.
	MaxInFlight int
	// Lease, when positive, lets each instance deciding on a Redis store
	// take up to this much of a key's capacity in one script call and
	// admit requests from it without asking Redis again, giving back what
	// it has not spent when the lease ends (see package redisstore): fewer
	// round trips for a hot key, at the price of a looser bound, as over any
	// interval the instances together admit at most what Redis would plus
	// Lease each. Zero, the default, decides every request in Redis. A
	// limit decided in memory, which is local anyway, may not have one
	// (CheckLeases), but a Redis store's local fallback ignores it. Not
	// with a LeakyBucket, whose admissions wait in order.
	Lease float64
	// Penalty, when positive, holds out a key that l refuses: from the
	// refusal, every request of the key is refused for Penalty, with the
	// penalty's remaining time as its RetryAfter (or the limit's own,
	// when longer), whatever the limit's state; refusals during the
	// penalty do not extend it. The limit's state is charged nothing
	// meanwhile, and after it the key finds that state as time left it.
	// Zero, the default, holds no one out. Not with a Lease, whose
	// admissions Redis does not see.
	Penalty time.Duration
	// CountStatus, when not nil, limits only the responses of these
	// statuses: an admitted request whose response has another status is
	// given its charge back (core.Gate.Answered, with the stores' exact
	// Refund), so that the limit bounds its counted responses. nil, the
	// default, counts every request. Not with a Lease.
	CountStatus StatusSet
	// CostHeader, when set, takes a request's cost from its response:
	// the number in this response header. The request is charged the
	// cost asked (an estimate, which may be 0) when admitted, and the
	// difference when it is answered (core.Gate.Answered), which may
	// leave its key in debt, beyond the capacity, until the rate repays
	// it. A missing, malformed or negative value leaves the estimate
	// charged; a value above the capacity counts as the capacity.
	// Not with a Lease.
	CostHeader string
	// CostBytes, when true, takes a request's cost from its response as
	// CostHeader does, but as the bytes of the response's body.
	CostBytes bool

	// Hash and Keep are set by Validate, for the stores and request paths
	// that read them on every request, where a method call would cost
	// the Yaegi interpreter a frame; they must not be set otherwise.
	//
	// Hash is the 64-bit FNV-1a hash of Namespace, which in-memory stores
	// mix into their key hashes.
	Hash uint64
	// Keep is how long, in nanoseconds, a state lives that has just taken
	// the whole capacity: how long, at least, an in-memory store keeps a
	// key's state after a request it rejected.
	Keep int64

	ns       string  // store namespace: name and algorithm
	unit     float64 // nanoseconds of the period per cost unit
	period   int64   // Rate.Period in nanoseconds
	capacity float64 // effective burst
	owe      float64 // token_bucket: the tokens MaxDelay lends, MaxDelay/unit
	// most is, for a token_bucket, the largest deficit a state holds:
	// capacity + owe, or with a response cost, whose settlements may
	// leave a key in debt, the tokens the rate refills in MaxSpan.
	most float64
	// flight, with MaxInFlight, is the *Limit that decides its in-flight
	// slots (flightlimit.go); nil without. An interface, not a *Limit:
	// Yaegi keeps a recursive struct type at a cost of about 115 KB of the
	// Traefik plugin's heap.
	flight interface{}
	// params is Params' value.
	params [4]string
}

// Validate checks l and fills in defaults. Its error is a *LimitError
// naming the limit and the field at fault. It is idempotent.
func (l *Limit) Validate() error {
	if err := l.validate(); err != nil {
		return &LimitError{Index: -1, Limit: l.Name, Err: err}
	}
	return nil
}

// CheckCost refuses a request cost that l can never admit, above its
// capacity (see Fits), and 0 but as the estimate of a cost from the
// response (CostFromResponse). It is valid after Validate.
func (l *Limit) CheckCost(cost float64) error {
	if cost == 0 && !l.CostFromResponse() {
		return Refuse("cost", "0", "must be positive; 0 is an estimate only for a limit whose cost comes from its response")
	}
	if l.Fits(cost) {
		return nil
	}
	return Refuse("cost", FormatFloat(cost), "above the capacity of "+FormatFloat(l.capacity)+
		" (the burst, or a window algorithm's quota), so no request could ever pass; lower the cost or raise the capacity")
}

func (l *Limit) validate() *FieldError {
	if err := CheckLimitName(l.Name); err != nil {
		return err.(*FieldError)
	}
	if l.MaxInFlight < 0 {
		return Refuse("max_in_flight", strconv.Itoa(l.MaxInFlight), "must not be negative")
	}
	l.flight = nil
	if l.MaxInFlight > 0 {
		l.flight = newFlightLimit(l)
		if l.Rate == (Rate{}) {
			return l.validateFlightOnly()
		}
	}
	if l.Rate == (Rate{}) {
		return Refuse("rate", "", "required (or max_in_flight)")
	}
	if l.Algorithm == "" {
		l.Algorithm = TokenBucket
	}
	known := false
	for _, a := range Algorithms {
		if a == l.Algorithm {
			known = true
		}
	}
	bucket := l.Algorithm == TokenBucket || l.Algorithm == LeakyBucket
	if err := refusal([]check{
		{!known, "algorithm", string(l.Algorithm), "unknown (want token_bucket, leaky_bucket, fixed_window, sliding_window_log or sliding_window_counter)"},
		{!(l.Rate.Quota > 0) || math.IsInf(l.Rate.Quota, 0), "rate.quota", FormatFloat(l.Rate.Quota), "must be a positive number"},
		{l.Rate.Period <= 0, "rate.period", FormatPeriod(l.Rate.Period), "must be positive"},
		{l.Burst < 0 || math.IsNaN(l.Burst) || math.IsInf(l.Burst, 0), "burst", FormatFloat(l.Burst), "must not be negative"},
		{l.MaxDelay < 0, "max_delay", l.MaxDelay.String(), "must not be negative"},
	}); err != nil {
		return err
	}
	// A bucket's capacity is its burst, or else the quota, but at least
	// one request: 0.5/s is one request every two seconds, not none ever.
	// A window's is its quota.
	l.capacity = l.Burst
	if !bucket || l.capacity == 0 {
		l.capacity = l.Rate.Quota
		if bucket && l.capacity < 1 {
			l.capacity = 1
		}
	}
	field := "cost_header"
	if l.CostBytes {
		field = "cost_bytes"
	}
	if err := refusal([]check{
		{!bucket && l.Burst != 0, "burst", "", string(l.Algorithm) + " takes its capacity from the rate's quota; remove burst"},
		{!bucket && l.Rate.Quota < 1, "rate", l.Rate.String(), string(l.Algorithm) + " admits at most its quota in a window, and a quota below 1 admits no request of cost 1; write it as " +
			Rate{Quota: 1, Period: time.Duration(float64(l.Rate.Period) / l.Rate.Quota)}.String()},
		{!bucket && l.MaxDelay != 0, "max_delay", "", "only leaky_bucket and token_bucket delay requests, not " + string(l.Algorithm)},
		{l.Lease != 0 && (!(l.Lease > 0) || math.IsInf(l.Lease, 0)), "lease", FormatFloat(l.Lease), "must be a positive number"},
		{l.Lease != 0 && l.Algorithm == LeakyBucket, "lease", "", "a leaky_bucket's admissions wait in order, which a lease cannot keep; use token_bucket"},
		{l.Lease > l.capacity, "lease", FormatFloat(l.Lease), "above the capacity of " + FormatFloat(l.capacity) + ", which no lease could take at once"},
		{l.Penalty < 0 || l.Penalty > MaxSpan, "penalty", FormatPeriod(l.Penalty), "must be positive and at most " + FormatPeriod(MaxSpan)},
		{l.Penalty%time.Microsecond != 0, "penalty", FormatPeriod(l.Penalty), "must be a whole number of microseconds (Redis's clock resolution)"},
		{l.Penalty != 0 && l.Lease != 0, "penalty", "", "a lease admits requests that Redis does not see, so it cannot hold a key out; remove lease"},
		// Only a rate's charge is given back, and a lease's admissions
		// are not the store's to give back nor to settle.
		{l.CountStatus != nil && l.Lease != 0, "count_status", "", "a lease's admissions cannot be given back; remove lease"},
		{l.CostHeader != "" && l.CostBytes, "cost_bytes", "", "a cost comes from a header or from the body's bytes, not both"},
		{l.CostFromResponse() && l.Lease != 0, field, "", "a lease's admissions cannot be settled; remove lease"},
		{notToken(l.CostHeader), "cost_header", l.CostHeader, "not a header name"},
		{l.Algorithm == SlidingWindowLog && l.Rate.Quota > MaxLogQuota, "rate.quota", FormatFloat(l.Rate.Quota), "sliding_window_log keeps one entry per request and accepts a quota of at most " + strconv.Itoa(MaxLogQuota) + " (use sliding_window_counter)"},
		{l.Rate.Period > MaxSpan, "rate.period", FormatPeriod(l.Rate.Period), "longer than the " + FormatPeriod(MaxSpan) + " sluice supports"},
		{l.Rate.Period%time.Microsecond != 0, "rate.period", FormatPeriod(l.Rate.Period), "must be a whole number of microseconds (Redis's clock resolution)"},
	}); err != nil {
		return err
	}
	l.period = int64(l.Rate.Period)
	l.unit = float64(l.period) / l.Rate.Quota
	l.owe = 0
	if l.Algorithm == TokenBucket {
		l.owe = float64(l.MaxDelay) / l.unit
	}
	l.most = l.capacity + l.owe
	if l.CostHeader != "" || l.CostBytes {
		l.most = float64(MaxSpan) / l.unit
	}
	if span := l.capacity*l.unit + float64(l.MaxDelay); !(span <= float64(MaxSpan)) {
		return Refuse("burst", FormatFloat(l.capacity), "refilling it at the rate takes longer than the "+FormatPeriod(MaxSpan)+" sluice supports")
	}
	l.ns = l.Name + ":" + string(l.Algorithm)
	l.Hash = fnv1a(l.ns)
	var spent State
	var d Decision
	l.Keep = Step(l, &spent, 0, l.capacity, &d)
	l.params = [4]string{FormatFloat(l.Rate.Quota), strconv.FormatInt(l.period, 10), FormatFloat(l.capacity), strconv.FormatInt(int64(l.MaxDelay), 10)}
	return nil
}

// check is one rule of Validate: a limit for which bad holds is refused
// with Refuse(field, value, reason). Validate writes its rules as tables
// of checks, whose values it computes whether or not they are refused: a
// table costs the Traefik plugin, which keeps every syntax node it loads
// under Yaegi, fewer nodes than as many if statements.
type check struct {
	bad                  bool
	field, value, reason string
}

// refusal returns the FieldError of the first bad check of checks, or nil.
func refusal(checks []check) *FieldError {
	for i := range checks {
		if checks[i].bad {
			return Refuse(checks[i].field, checks[i].value, checks[i].reason)
		}
	}
	return nil
}

// notToken reports whether the header name s holds a byte that no header
// name can: a space, a control or non-ASCII byte, or a separator.
func notToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return true
		}
	}
	return false
}

// Rated reports whether l limits a rate, as every limit does but one that
// only limits requests in flight (MaxInFlight, with a zero Rate). It is
// valid after Validate.
func (l *Limit) Rated() bool { return l.period > 0 }

// Fits reports whether a request of cost can ever be admitted by l: its
// cost is at most the capacity, or l limits requests in flight only,
// where a cost does not count. It is valid after Validate.
func (l *Limit) Fits(cost float64) bool { return !l.Rated() || cost <= l.capacity }

// Capacity is the most cost the limit can admit at once: Burst, or the quota
// when Burst is zero. It is valid after Validate.
func (l *Limit) Capacity() float64 { return l.capacity }

// Namespace is the prefix that separates this limit's keys from every other
// limit's in a shared store: the name and the algorithm. A changed rate keeps
// the namespace (counters carry over and the new rate applies); a changed
// algorithm does not. It is valid after Validate.
func (l *Limit) Namespace() string { return l.ns }

// Flight is the limit that decides l's requests in flight (MaxInFlight),
// or nil without MaxInFlight. It is valid after Validate.
func (l *Limit) Flight() *Limit {
	f, _ := l.flight.(*Limit)
	return f
}

// Owe is, for a token_bucket, the tokens MaxDelay lends, MaxDelay/Unit;
// zero otherwise. It is valid after Validate.
func (l *Limit) Owe() float64 { return l.owe }

// Unit is the nanoseconds of the period per cost unit, Period/Quota. It
// is valid after Validate.
func (l *Limit) Unit() float64 { return l.unit }

// PeriodNanos is Rate.Period in nanoseconds, or zero for a limit of
// requests in flight only. It is valid after Validate.
func (l *Limit) PeriodNanos() int64 { return l.period }

// Params is l's quota, period in nanoseconds, capacity and maximum delay in
// nanoseconds as texts that read back as the same numbers (FormatFloat),
// made once by Validate for the stores that send them, such as the Redis
// store's scripts. It is the zero array for a limit of requests in flight
// only.
func (l *Limit) Params() [4]string { return l.params }

// fnv1a is the 64-bit FNV-1a hash of s.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// FormatFloat formats x so that Lua's tonumber reads back the same double.
func FormatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
