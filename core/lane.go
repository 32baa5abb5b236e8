package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash/maphash"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/resp"
)

// A Lane is the whole request path of one Gate for hosts whose keys come
// from keyspec.Specs, as the Traefik plugin's do: build each limit's key,
// decide, write the headers or the 429 answer, wait out a delay, and pass
// the request on. It is built once per configuration by NewLane and is
// safe for concurrent use.
type Lane struct {
	gate    *Gate
	asks    []LaneAsk
	specs   []*keyspec.Spec
	shapes  []keyspec.Shape // of specs
	prefix  string
	resp    *answer.Responder
	observe func(*Verdict)
	meter   *Meter
	watch   bool
	dryRun  string // LaneConfig.DryRunHeader in DryRun mode, else ""
	costs   bool   // a limit takes its cost from the response (model.Limit.CostFromResponse)
	// exempt and exemptIP are LaneConfig's; exempt is nil without any.
	exempt   []netip.Prefix
	exemptIP *clientip.Strategy

	// mem: the gate's store is in memory and unwatched, so the lane
	// takes from it directly. one: mem, and a single enforced limit,
	// whose fields follow. tb: one, a token_bucket, which ServeLane
	// writes out.
	mem  *MemoryStore
	one  bool
	tb   bool
	ipv4 bool // the key is the peer's full IPv4 address
	ipv6 bool // likewise for an IPv6 peer (Shape.PeerIPv6)
	// clientIP is the spec's clientip.Strategy when the key is the client's
	// address and nothing else, else nil.
	clientIP *clientip.Strategy
	// depth4: clientIP takes an IPv4 client behind proxies at a Depth,
	// keyed by its full address, so that laneDepthKey applies.
	depth4   bool
	shared   bool // the limit's MissingKey is MissingShared
	clock    bool // g.memClock, for every lane on mem: the decision's instant is the headers' clock
	limit    *model.Limit
	spec     *keyspec.Spec
	cost     float64
	nsHash   uint64
	capacity float64
	quota    float64
	period   float64 // nanoseconds
	unit     float64 // nanoseconds per cost unit
	headers  answer.HeaderSet
	// fast: ServeLane writes the headers itself, which it does for the
	// sets ietf, x and ietf,x, on the gate's own clock, with a quota
	// below maxSFInteger.
	fast       bool
	most       float64 // the most deficit: capacity, and the tokens MaxDelay lends
	owe        bool    // MaxDelay lends tokens
	lent       float64 // how many: the limit's owe
	policy     string  // RateLimit-Policy
	ietfPrefix string  // start of RateLimit
	qText      string  // X-RateLimit-Limit
	// fastReject: fast, and laneReject writes the 429 answers, which it
	// does without jitter or Defer, with a body, for a cost that the
	// limit can admit (known at NewLane for a token bucket); the body is
	// bodyHead, the seconds of Retry-After, bodyTail.
	fastReject         bool
	bodyHead, bodyTail string
	contentType        string

	// answer: one or rd, the limit's answer texts, which laneSetIETFX
	// writes; texts: several limits, each limit's (see newLaneMany).
	answer *answer.Texts
	texts  map[*model.Limit]*answer.Texts
	// ietfx and rejects: several limits, as newLaneMany says; rejects
	// holds lanes (*Lane) of one limit each whose 429 answers laneReject
	// writes, as any: Yaegi v0.16.1 cannot build a Lane that refers to
	// its own type.
	ietfx   bool
	rejects []any

	// rd: ServeLane decides on Redis by serveLaneRedis (see newLaneRedis),
	// with limit, spec, cost, quota, ipv4, clientIP and shared as for one.
	// direct, breaker and timeout are the gate's store's and config's,
	// bstate and bfails the breaker's state and fails (nil without one);
	// take, hole and hole2 the limit's redisstore.DirectTake call; sys the gate's
	// system clock, nil with a GateConfig.Clock. down is LaneConfig's
	// with Watch and Observe, &alwaysDown with them but no Down, else
	// nil: serveLaneRedis observes an admission while *down is not 0.
	// leased: serveLaneAny first admits from the limit's lease by
	// serveLaneLease, with the fields of rd but direct, breaker, timeout
	// and the call.
	rd          bool
	leased      bool
	direct      *redisstore.Direct
	breaker     *Breaker
	timeout     time.Duration
	take        string
	hole, hole2 int
	sys         *systemClock
	down        *int32
	bstate      *int32
	bfails      *int32
	// rejectHead: "0 ", the start of a rejection's reply, with fastReject
	// (see newLaneRedis), else "1 ", an admission's.
	rejectHead string
}

// LaneConfig configures a Lane.
type LaneConfig struct {
	// Gate decides; Asks are its limits that the lane asks, in order,
	// whose keys Specs build.
	Gate  *Gate
	Asks  []LaneAsk
	Specs []*keyspec.Spec
	// Prefix begins every key (such as a middleware's name, so that two
	// lanes sharing a store never share a key).
	Prefix string
	// Observe, if set, is called with the verdict of every request that
	// is not simply allowed (rejected, delayed and cancelled, decided
	// while the store failed, or in a dry run), and with every verdict
	// when Watch is set (a host that follows a remote store's health).
	Observe func(*Verdict)
	Watch   bool
	// DryRunHeader, in DryRun mode, is a request header that the lane
	// removes from every request and sets to "rejected" on those the
	// limits would have rejected, so that the upstream can trust it.
	DryRunHeader string
	// Exempt, if not empty, are client networks whose requests bypass
	// every limit, without headers; ExemptIP (validated) finds a request's
	// client address.
	Exempt   []netip.Prefix
	ExemptIP *clientip.Strategy
	// Meter, required by ServeLaneMetered, counts the verdict of every
	// request that a limit applies to, allowed ones included, by the
	// limit it is about (its decision's or, when the store failed without
	// one, the first asked), times its decision, a leaky_bucket's wait
	// left out, and records each ask's cost in its limit's demand when
	// the meter has recorders. ServeLane never counts.
	Meter *Meter
	// Down, if set with Watch, is a host's flag, loaded atomically, that
	// is not 0 while it deems the store down: the lane may then leave a
	// verdict simply allowed (no delay, no store error) unobserved while
	// *Down is 0, for a host whose observer has nothing to do with such
	// a verdict but report the store's recovery. Under Yaegi the call
	// of an observer costs far more than the load.
	Down *int32
}

// LaneAsk is how a Lane builds one limit's ask.
type LaneAsk struct {
	Limit   *model.Limit
	Spec    int // index into LaneConfig.Specs
	Missing keyspec.MissingKey
	Cost    float64
}

// NewLane returns the lane of cfg.
func NewLane(cfg LaneConfig) *Lane {
	g := cfg.Gate
	l := &Lane{gate: g, asks: cfg.Asks, specs: cfg.Specs, prefix: cfg.Prefix, resp: g.resp, observe: cfg.Observe, watch: cfg.Watch, meter: cfg.Meter}
	for _, a := range cfg.Asks {
		l.costs = l.costs || a.Limit.CostFromResponse()
	}
	l.shapes = make([]keyspec.Shape, len(cfg.Specs))
	for i, spec := range cfg.Specs {
		l.shapes[i] = spec.Shape()
	}
	if g.cfg.Mode == DryRun {
		l.dryRun = cfg.DryRunHeader
	}
	general := laneGeneral(cfg.Asks)
	if !cfg.Watch && !general {
		l.mem = g.mem
	}
	if len(cfg.Exempt) > 0 {
		// serveLaneAny checks the exemption, so that lanes without one
		// pay nothing for it.
		l.exempt, l.exemptIP = cfg.Exempt, cfg.ExemptIP
		return l
	}
	if general {
		return l
	}
	if l.mem == nil {
		newLaneRedis(l, cfg)
		return l
	}
	l.clock = g.memClock
	if len(cfg.Asks) != 1 {
		newLaneMany(l, cfg)
		return l
	}
	if g.cfg.Mode != Enforce {
		return l
	}
	a := cfg.Asks[0]
	lim := a.Limit
	l.one, l.limit, l.spec, l.cost = true, lim, cfg.Specs[a.Spec], a.Cost
	l.tb = lim.Algorithm == tokenBucket
	laneShape(l, l.spec.Shape())
	l.shared = a.Missing == missingShared
	// One field per statement: Yaegi v0.16.1 loses values of a tuple
	// assignment of calls to fields.
	l.nsHash = lim.Hash
	l.capacity = lim.Capacity()
	l.quota = lim.Rate.Quota
	l.lent = lim.Owe()
	l.most = l.capacity + l.lent
	l.owe = l.lent > 0
	l.period = float64(lim.PeriodNanos())
	l.unit = lim.Unit()
	l.headers = g.resp.Headers
	l.fast = l.clock && l.headers&headersLegacy == 0 && l.headers&headersIETF != 0 && l.headers&headersX != 0 &&
		lim.Capacity() < maxSFInteger && g.resp.Texts(lim) != nil
	l.answer = g.resp.Texts(lim)
	if l.fast {
		setFastReject(l, lim, !l.tb || a.Cost <= lim.Capacity()+eps)
	}
	return l
}

// laneGeneral reports whether a limit of asks has a Penalty, which only
// the stores apply, or must see its response (Limit.Answered,
// ServeLaneCounted's): such a lane's
// requests go to Gate.Serve, none of whose fused copies it takes.
func laneGeneral(asks []LaneAsk) bool {
	for _, a := range asks {
		if a.Limit.Penalty != 0 || a.Limit.Answered() {
			return true
		}
	}
	return false
}

// setFastReject sets the answer texts of l's one limit lim, whose headers
// l writes itself (the set ietf and x, a quota below maxSFInteger), and,
// when laneReject can answer its rejections (no jitter, no Defer, a body,
// and admit: the limit can admit the request's cost), fastReject and the
// texts of the body.
func setFastReject(l *Lane, lim *model.Limit, admit bool) {
	a := l.resp.Texts(lim)
	l.policy, l.ietfPrefix, l.qText = a.Policy, a.IETFPrefix, a.QText
	rs := l.resp
	if admit && rs.Jitter == 0 && !rs.Defer && rs.Body < bodyNone {
		t := &answer.BodyTexts[rs.Body]
		l.fastReject = true
		l.bodyHead, l.bodyTail, l.contentType = t.Retry, t.RetryEnd+a.Tails[rs.Body], t.ContentType
	}
}

// newLaneMany sets the fields of l, a lane of several limits in the
// in-memory store, that laneMany reads: ietfx, when the headers of every
// limit's decisions are laneSetIETFX's work, and, in Enforce mode, the
// rejects of the limits whose rejections laneReject can write.
func newLaneMany(l *Lane, cfg LaneConfig) {
	l.ietfx = cfg.Gate.resp.Headers == headersIETFX
	l.texts = make(map[*model.Limit]*answer.Texts, len(cfg.Asks))
	for _, a := range cfg.Asks {
		t := cfg.Gate.resp.Texts(a.Limit)
		if t == nil {
			l.ietfx = false
		}
		l.texts[a.Limit] = t
		// The lane of a alone, fastReject in Enforce mode when laneReject
		// can write its rejections.
		if rl := NewLane(LaneConfig{Gate: cfg.Gate, Asks: []LaneAsk{a}, Specs: cfg.Specs, Observe: cfg.Observe}); rl.fastReject {
			l.rejects = append(l.rejects, rl)
		}
	}
}

// serveLaneTB is ServeLane for one enforced token_bucket limit in the
// in-memory store: the path written out. Its parameters after r are its
// variables, which ServeLane passes as zero values: Yaegi allocates a
// function's parameters once per call, where a var or := allocates each
// variable again when it runs. They are assigned with =, which writes a
// call's or an operation's result straight into its variable. Its
// standard library functions are package variables (fmtInt and the
// others), whose names, unlike a selector such as strconv.FormatInt, take
// no value of the frame. The key is laneKey4's, written out: its call
// would cost the commonest request five allocations more.
func serveLaneTB(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request,
	key, remText, tText string, s *MemoryStore, h uint64, sh *memShard, sl memSlot, held bool, err error,
	now, t, reset, n int64, deficit, ns float64, vals []string, hd http.Header) {
	key = r.RemoteAddr
	if l.ipv4 && key != "" && key[0] != '[' {
		if _, err = parseAddrPort(key); err == nil {
			key = l.prefix + key[:lastIndexByte(key, ':')]
		} else {
			key = laneKey(l, r, "", false)
		}
	} else {
		key = laneKey(l, r, "", false)
	}
	if key == "" { // MissingSkip
		next.ServeHTTP(w, r)
		return
	}
	s = l.mem
	h = hashString(s.seed, key)
	h ^= l.nsHash
	sh = &s.shards[h>>memShardShift]
	sh.mu.Lock()
	sl, held = sh.slots[h]
	now = int64(timeSince(s.base))
	now += s.wall
	if s.clock != nil {
		now = s.clock()
	}
	// tokenBucket's refill and admission, written out.
	t = sl.t
	deficit = sl.a
	if now > t {
		t = now
	}
	if deficit > l.most {
		deficit = l.most
	}
	if deficit > 0 {
		deficit -= float64(t-sl.t) * l.quota / l.period
		if deficit < eps {
			deficit = 0
		}
	}
	if l.capacity-deficit+eps < l.cost {
		laneShort(l, next, w, r, key, sh, h, held, &sl, deficit, now, 0, 0, 0, 0, 0)
		return
	}
	deficit += l.cost
	if deficit > l.capacity {
		deficit = l.capacity
	}
	ns = deficit * l.unit
	reset = int64(ns) // duration(ns), which rounds up
	if float64(reset) < ns {
		reset++
	}
	if !held {
		room(s, sh, now)
	}
	sh.slots[h] = memSlot{t: t, a: deficit, exp: t + reset}
	sh.mu.Unlock()
	if !l.fast {
		laneHeaders(l, next, w, r, deficit, reset, now)
		return
	}
	// Responder.SetHeaders for ietf and x, written out. Remaining (n) is what the
	// bucket holds (ns), whole units.
	ns = l.capacity - deficit
	n = int64(ns)
	if n < smallInts {
		remText = smallIntTexts[n]
	} else {
		remText = fmtInt(n, 10)
	}
	// t, tokenBucket's Next (nextUnits, duration, SetHeaders) computed as it
	// computes it, to the nanosecond (t is reused for it): the units to
	// the next whole one, no more than the deficit.
	ns -= float64(n)
	ns = 1 - ns
	if ns > deficit {
		ns = deficit
	}
	ns *= l.unit
	t = int64(ns)
	if float64(t) < ns {
		t++
	}
	t += nsPerSecond - 1
	t /= nsPerSecond
	if t < smallInts {
		tText = smallIntTexts[t]
	} else {
		tText = fmtInt(t, 10)
	}
	// X-RateLimit-Reset: the second the limit is whole again.
	now = answer.ResetUnix(now, reset)
	vals = []string{l.policy, l.ietfPrefix + remText + ";t=" + tText, l.qText, remText, fmtInt(now, 10)}
	hd = w.Header()
	hd["Ratelimit-Policy"] = vals[0:1:1]
	hd["Ratelimit"] = vals[1:2:2]
	hd["X-Ratelimit-Limit"] = vals[2:3:3]
	hd["X-Ratelimit-Remaining"] = vals[3:4:4]
	hd["X-Ratelimit-Reset"] = vals[4:5:5]
	next.ServeHTTP(w, r)
}

// statusTooManyRequests is http.StatusTooManyRequests as a constant of this
// package: under Yaegi a constant of another package is a value of the
// frame of every function that uses it.
const statusTooManyRequests = 429

// The constants of packages model, keyspec, clientip, answer and
// redisstore that the lanes' paths read, as constants of this package for
// the same reason.
const (
	eps              = model.Eps
	never            = model.Never
	maxLogQuota      = model.MaxLogQuota
	tokenBucket      = model.TokenBucket
	leakyBucket      = model.LeakyBucket
	fixedWindow      = model.FixedWindow
	slidingWindowLog = model.SlidingWindowLog
	maxKeyLength     = keyspec.MaxKeyLength
	sharedKey        = keyspec.SharedKey
	missingShared    = keyspec.MissingShared
	maxHopLength     = clientip.MaxHopLength
	xForwardedFor    = clientip.XForwardedFor
	maxSFInteger     = answer.MaxSFInteger
	nsPerSecond      = answer.NanosPerSecond
	smallInts        = answer.SmallInts
	headersIETF      = answer.HeadersIETF
	headersX         = answer.HeadersX
	headersLegacy    = answer.HeadersLegacy
	headersOff       = answer.HeadersOff
	bodyNone         = answer.BodyNone
	replyFields      = redisstore.ReplyFields
)

// smallIntTexts is answer.SmallIntTexts, copied into this package: under
// Yaegi an element of another package's variable costs a value of the
// frame that reads it, as a constant does, and calling another package's
// function through a variable of this one costs more than calling it.
var smallIntTexts = answer.SmallIntTexts

// The standard library functions of the lanes' paths, as package
// variables: see serveLaneTB.
var (
	noSlot        memSlot        // serveLaneTB's sl, zero
	noVerdict     Verdict        // laneReject's v, zero
	noDecision    model.Decision // laneSetHeaders' d, zero
	noState       model.State    // take1's st, zero
	fmtInt        = strconv.FormatInt
	parseAddrPort = netip.ParseAddrPort
	lastIndexByte = strings.LastIndexByte
	hashString    = maphash.String
	timeSince     = time.Since
	itoa          = strconv.Itoa
	writeString   = io.WriteString
	loadInt32     = atomic.LoadInt32
	addUint64     = atomic.AddUint64
	timeNow       = time.Now
	sha256Sum     = sha256.Sum256
	hexEncode     = hex.Encode
	parseFloat    = strconv.ParseFloat
	noSum         [sha256.Size]byte          // serveLaneRedis' sum, zero
	noTime        time.Time                  // serveLaneRedis' start, zero
	noFields      [replyFields]time.Duration // serveLaneRedis' f, zero
	noAddr        netip.Addr                 // laneDepthKey's a, zero
	parseAddr     = netip.ParseAddr
	trimHop       = strings.Trim
)

// laneReject answers 429 for a fastReject lane whose limit, at now, has
// rem units left, is whole again in reset nanoseconds and admits the
// request in wait (not Never): reject's answer, written out with the
// formats of Responder.SetHeaders and Reject. It then reports the rejection to the
// observer. Its parameters after now are its variables, zero, as
// serveLaneTB's are.
func laneReject(l *Lane, w http.ResponseWriter, rem float64, reset, next, wait, now int64,
	retry, t int64, remText, retryText, body string, texts []string, hd http.Header, v Verdict) {
	retry = wait + (nsPerSecond - 1)
	retry /= nsPerSecond
	if retry < 1 {
		retry = 1
	}
	t = answer.ResetUnix(now, reset)
	remText = fmtInt(int64(rem), 10)
	retryText = fmtInt(retry, 10)
	body = l.bodyHead + retryText + l.bodyTail
	// SetHeaders: a rejection's t is its Retry-After.
	texts = []string{l.policy, l.ietfPrefix + remText + ";t=" + retryText, l.qText, remText, fmtInt(t, 10),
		"no-store", itoa(len(body)), retryText, l.contentType, "nosniff"}
	hd = w.Header()
	hd["Ratelimit-Policy"] = texts[0:1:1]
	hd["Ratelimit"] = texts[1:2:2]
	hd["X-Ratelimit-Limit"] = texts[2:3:3]
	hd["X-Ratelimit-Remaining"] = texts[3:4:4]
	hd["X-Ratelimit-Reset"] = texts[4:5:5]
	hd["Cache-Control"] = texts[5:6:6]
	hd["Content-Length"] = texts[6:7:7]
	hd["Retry-After"] = texts[7:8:8]
	hd["Content-Type"] = texts[8:9:9]
	hd["X-Content-Type-Options"] = texts[9:10:10]
	w.WriteHeader(statusTooManyRequests)
	_, _ = writeString(w, body) // a failed write means the client is gone
	if l.observe != nil {
		v = Verdict{Outcome: OutcomeRejected, Decision: model.Decision{Limit: l.limit, Quota: l.quota, Remaining: rem,
			Reset: time.Duration(reset), Next: time.Duration(next), RetryAfter: time.Duration(wait)}}
		l.observe(&v)
	}
}

// laneKey4 is the key of a lane's request as serveLaneTB builds it: an
// IPv4 peer's address, prefixed, when the key is that address (l.ipv4),
// else laneKey's. key and err are its variables, zero (see serveLaneTB).
func laneKey4(l *Lane, r *http.Request, key string, err error) string {
	key = r.RemoteAddr
	if l.ipv4 && key != "" && key[0] != '[' {
		if _, err = parseAddrPort(key); err == nil {
			return l.prefix + key[:lastIndexByte(key, ':')]
		}
	}
	return laneKey(l, r, "", false)
}

// laneKey is the key of a token bucket lane's request, prefixed, for every
// request but an IPv4 peer's keyed by its address: "" when the request has
// no key and the limit skips such requests. It takes an IPv6 peer's
// address itself rather than through keyspec.Spec.Key, whose IPv4 path it would
// pay for under Yaegi, and a client address behind proxies from clientip.Strategy.Key
// rather than through keyspec.Spec.PartsKey. key and ok are its variables, zero (see
// serveLaneTB).
func laneKey(l *Lane, r *http.Request, key string, ok bool) string {
	key = r.RemoteAddr
	if l.ipv6 && key != "" && key[0] == '[' {
		key, ok = keyspec.PeerKey6(key)
	}
	if !ok {
		if l.depth4 {
			key, ok = laneDepthKey(l.clientIP, r, "", nil, 0, 0, noAddr, nil)
		} else if l.clientIP != nil {
			key, ok = (*clientip.Strategy).Key(l.clientIP, r)
		} else {
			key, ok = (*keyspec.Spec).PartsKey(l.spec, r)
		}
	}
	if ok && key != "" {
		return l.prefix + key
	}
	if l.shared {
		return l.prefix + sharedKey
	}
	return ""
}

// laneShort finishes serveLaneTB, with sh locked, for a request the
// bucket, which held deficit at now, cannot serve at once. It answers a
// fastReject lane's rejection with tokenBucket's answer, written out, by
// laneReject; otherwise, and whenever MaxDelay lends the tokens,
// laneDecide does. Its parameters after now are its variables, zero, as
// serveLaneTB's are.
func laneShort(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, key string, sh *memShard, h uint64, held bool, sl *memSlot, deficit float64, now int64,
	wait, reset, t int64, rem, ns float64) {
	if !l.fastReject || l.owe && deficit+l.cost <= l.most+eps {
		laneDecide(l, next, w, r, key, sh, h, held, sl, now)
		return
	}
	if held {
		laneKeep(sh, h, *sl, l.limit, now)
	}
	sh.mu.Unlock()
	// Until the tokens missing are within what MaxDelay lends.
	rem = l.capacity - deficit
	ns = l.cost - rem
	ns -= l.lent
	ns *= l.unit
	wait = int64(ns) // duration(ns), which rounds up
	if float64(wait) < ns {
		wait++
	}
	ns = deficit * l.unit
	reset = int64(ns)
	if float64(reset) < ns {
		reset++
	}
	// Next: nextUnits, then duration.
	if rem < 0 { // in debt
		ns = model.NextUnits(0, l.capacity) - rem
		rem = 0
	} else {
		ns = 1 - (rem - float64(int64(rem))) // rem < maxSFInteger: whole below 1<<53
		if ns > deficit {
			ns = deficit
		}
	}
	ns *= l.unit
	t = int64(ns)
	if float64(t) < ns {
		t++
	}
	laneReject(l, w, rem, reset, t, wait, now, 0, 0, "", "", "", nil, nil, noVerdict)
}

// laneDecide finishes laneShort, with sh locked: tokenBucket decides the
// request from the state sl that h held at now, the state is saved if it
// admitted the request (with a delay, when MaxDelay lends its tokens), and
// the request is answered, or waits, as Gate.Serve answers it.
func laneDecide(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, key string, sh *memShard, h uint64, held bool, sl *memSlot, now int64) {
	st := model.State{T: sl.t, A: sl.a}
	var v Verdict
	exp := model.TokenBucketStep(l.limit, &st, now, l.cost, &v.Decision, 0, 0, 0)
	if v.Decision.Allowed {
		if !held {
			room(l.mem, sh, now)
		}
		sh.slots[h] = memSlot{t: st.T, a: st.A, exp: exp}
		v.Decision.Mark = model.Mark{T: st.T, A: st.A, OK: true} // take1's
	} else if held {
		laneKeep(sh, h, *sl, l.limit, now)
	}
	sh.mu.Unlock()
	if !l.clock {
		now = 0
	}
	laneOneAnswer(l, next, w, r, []model.Ask{{Limit: l.limit, Key: key, Cost: l.cost}}, &v, now)
}

// laneHeaders writes the headers of an admitted token bucket request whose
// deficit after the decision is deficit, and which is whole again in
// reset nanoseconds, for the header sets and quotas ServeLane does not
// write itself, and passes the request on. The headers are laneSetHeaders'
// work, apart so that a lane without headers does not pay for its body.
func laneHeaders(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, deficit float64, reset, now int64) {
	if l.headers != headersOff {
		laneSetHeaders(l, w, deficit, reset, now, noDecision)
	}
	next.ServeHTTP(w, r)
}

// laneSetHeaders is Responder.SetHeaders for laneHeaders; d is its variable, zero
// (see serveLaneTB).
func laneSetHeaders(l *Lane, w http.ResponseWriter, deficit float64, reset, now int64, d model.Decision) {
	d = model.Decision{Limit: l.limit, Allowed: true, Quota: l.quota, Remaining: l.capacity - deficit, Reset: time.Duration(reset)}
	if deficit > 0 {
		d.Next = model.DurationOf(model.NextUnits(d.Remaining, deficit) * l.unit)
	}
	if !l.clock {
		now = l.gate.now()
	}
	l.resp.SetHeaders(w.Header(), &d, now)
}

// serveLaneAny is ServeLane for everything the other fused paths leave:
// several limits, a watched or remote store, a dry run, exempt clients,
// in-flight limits, and a leased limit's request that its lease does not
// cover (serveLaneLease, tried first). It builds the asks (laneAsks);
// several on the in-memory store are laneMany's, anything else
// Gate.Serve's, Caddy's path. Its parameters after r are its variables,
// zero (see serveLaneTB).
func serveLaneAny(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request,
	asks []model.Ask, v Verdict, ok bool) {
	if l.leased {
		if serveLaneLease(l, next, w, r) {
			return
		}
	}
	if l.dryRun != "" {
		delete(r.Header, l.dryRun)
	}
	if l.exempt != nil && laneExempt(l, r) {
		next.ServeHTTP(w, r)
		return
	}
	asks = laneAsks(l, r, nil, nil, 0, "", nil, nil, nil)
	if l.mem != nil && len(asks) > 1 {
		laneMany(l, next, w, r, asks, nil, nil, nil, 0, 0)
		return
	}
	v, ok = l.gate.Serve(w, r, asks)
	if v.Slots != nil {
		defer releaseSlots(v.Slots) // when next returns, panics included
	}
	laneFinish(l, next, w, r, &v, ok)
}

// laneMany finishes serveLaneAny for several asks on the in-memory store,
// fusing Gate.Serve's decide (laneTakeMany), classify and answer.
// When every limit admits the request at once, which needs neither
// classify's generality nor answer's, it writes the headers of the
// decision classify reports, that of the limit closest to exhaustion, on
// the clock of the decisions when that is the gate's (l.clock), and
// passes the request on; laneManyAnswer answers any other request. Its
// parameters after asks are its variables, zero (see serveLaneTB).
func laneMany(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, asks []model.Ask,
	out []model.Decision, d, best *model.Decision, i int, now int64) {
	out = make([]model.Decision, len(asks))
	now = laneTakeMany(l.mem, asks, out, noMemAsks, noOrder, nil, nil, nil, nil, nil, nil, nil, nil, noSlot, false, false, false, 0, 0)
	best = &out[0]
	for i = 0; i < len(out); i++ {
		d = &out[i]
		if !d.Allowed || d.Delay > 0 {
			laneManyAnswer(l, next, w, r, asks, out, now, nil, nil, nil, 0)
			return
		}
		if d.Remaining*best.Quota < best.Remaining*d.Quota { // as classify chooses
			best = d
		}
	}
	if l.resp.Headers != headersOff {
		if !l.clock {
			now = l.gate.now()
		}
		if l.ietfx { // made by newLaneMany
			laneSetIETFX(w.Header(), l.texts[best.Limit], best, now, 0, 0, 0, "", "", nil)
		} else {
			l.resp.SetHeaders(w.Header(), best, now)
		}
	}
	next.ServeHTTP(w, r)
}

// laneManyAnswer finishes laneMany for asks, decided into out at now, of
// which one at least rejects or delays the request. The decision that
// classify reports for a rejection is the rejecting one that asks for the
// longest wait, the first of equals (chosen here as classify chooses it);
// when its limit has a lane in l.rejects and can admit the request later,
// laneReject answers it, as answer would; laneClassify answers any other
// request. Its parameters after now are its variables, zero (see
// serveLaneTB).
func laneManyAnswer(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, asks []model.Ask, out []model.Decision, now int64,
	d, best *model.Decision, rl *Lane, i int) {
	for i = 0; i < len(out); i++ {
		d = &out[i]
		if !d.Allowed && (best == nil || d.RetryAfter > best.RetryAfter) {
			best = d
		}
	}
	if best != nil && best.RetryAfter != never {
		for i = 0; i < len(l.rejects); i++ {
			if rl = l.rejects[i].(*Lane); rl.limit == best.Limit {
				laneReject(rl, w, best.Remaining, int64(best.Reset), int64(best.Next), int64(best.RetryAfter), now,
					0, 0, "", "", "", nil, nil, noVerdict)
				return
			}
		}
	}
	laneClassify(l, next, w, r, asks, out, noVerdict)
}

// laneClassify finishes laneManyAnswer for a request that laneReject
// does not answer: classify and answer, apart so that a rejection that
// laneReject answers does not pay for them under Yaegi. v is its
// variable, zero (see serveLaneTB).
func laneClassify(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, asks []model.Ask, out []model.Decision, v Verdict) {
	v = l.gate.classify(out)
	laneFinish(l, next, w, r, &v, l.gate.answer(w, r, asks, &v, 0))
}

// laneExempt reports whether r's client is in l's exempt networks.

// laneExempt reports whether r's client is in l's exempt networks.
func laneExempt(l *Lane, r *http.Request) bool {
	a, ok := (*clientip.Strategy).Addr(l.exemptIP, r)
	return ok && clientip.Contains(l.exempt, a)
}

// serveLaneOne is ServeLane for one enforced limit of any algorithm in
// the in-memory store: Gate.Serve's own path, without its generality. It
// builds the key by laneKey4 rather than through keyspec.Spec.Key, whose
// generality costs more under Yaegi. Its parameters after r are its
// variables, zero (see serveLaneTB).
func serveLaneOne(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request,
	key string, v Verdict, d *model.Decision, now int64) {
	key = laneKey4(l, r, "", nil)
	if key == "" { // MissingSkip
		next.ServeHTTP(w, r)
		return
	}
	d = &v.Decision
	now = laneTake1(l.mem, l.limit, key, l.cost, d, 0, nil, noSlot, false, noState, nil, 0, 0)
	if !l.clock {
		now = 0
	}
	if !d.Allowed || d.Delay > 0 || !l.fast {
		// answer writes an admitted request's headers as SetHeaders
		// does, and passes it on.
		laneOneAnswer(l, next, w, r, []model.Ask{{Limit: l.limit, Key: key, Cost: l.cost}}, &v, now)
		return
	}
	laneSetIETFX(w.Header(), l.answer, d, now, 0, 0, 0, "", "", nil)
	next.ServeHTTP(w, r)
}

// laneOneAnswer finishes serveLaneOne for a request its limit rejected or
// delays: v holds the decision on asks at now (0 if not the gate's
// clock).
func laneOneAnswer(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, asks []model.Ask, v *Verdict, now int64) {
	d := &v.Decision
	if !d.Allowed && l.fastReject && d.RetryAfter != never {
		laneReject(l, w, d.Remaining, int64(d.Reset), int64(d.Next), int64(d.RetryAfter), now, 0, 0, "", "", "", nil, nil, noVerdict)
		return
	}
	l.gate.classify1(v)
	laneFinish(l, next, w, r, v, l.gate.answer(w, r, asks, v, now))
}

// laneFinish reports v to the lane's observer, as LaneConfig says, and
// passes the request on if ok.
func laneFinish(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, v *Verdict, ok bool) {
	if l.observe != nil && (l.watch || v.Outcome != OutcomeAllowed || v.Delay > 0) {
		l.observe(v)
	}
	if !ok {
		return
	}
	if v.Outcome == OutcomeDryRunRejected && l.dryRun != "" {
		r.Header[l.dryRun] = []string{"rejected"}
	}
	next.ServeHTTP(w, r)
}

// laneAsks returns the asks of every limit of l that applies to r,
// building each distinct key once. Its parameters after r are its
// variables, zero (see serveLaneTB); its loops count with i, since under
// Yaegi a range loop's variables are allocated again on every iteration.
// A constant key (a global limit's), an IPv4 peer's key (as serveLaneTB
// builds it) and hostkey.Resolve (which the hosts that build keys
// themselves call, in a package the plugin does not load) are inline:
// under Yaegi each call of keyspec.Spec.Key or Resolve costs a frame more
// than the lines it saves.
func laneAsks(l *Lane, r *http.Request, keys []string, asks []model.Ask, i int, key string, sh *keyspec.Shape, a *LaneAsk, err error) []model.Ask {
	keys = make([]string, len(l.specs))
	for i = 0; i < len(keys); i++ {
		sh = &l.shapes[i]
		if sh.Fixed {
			keys[i] = sh.Const
			continue
		}
		key = r.RemoteAddr
		if sh.PeerIPv4 && key != "" && key[0] != '[' {
			if _, err = parseAddrPort(key); err == nil {
				keys[i] = key[:lastIndexByte(key, ':')]
				continue
			}
		}
		keys[i], _ = (*keyspec.Spec).Key(l.specs[i], r) // "" when missing
	}
	asks = make([]model.Ask, 0, len(l.asks))
	for i = 0; i < len(l.asks); i++ {
		a = &l.asks[i]
		if key = keys[a.Spec]; key == "" { // hostkey.Resolve(a.Missing, key, true)
			if a.Missing != missingShared {
				continue
			}
			key = sharedKey
		}
		asks = append(asks, model.Ask{Limit: a.Limit, Key: l.prefix + key, Cost: a.Cost})
	}
	return asks
}

// ServeLane decides r on every limit of the lane and answers what it can,
// as Gate.Serve does, and passes r to next unless it answered 429 or the
// client left during a delay.
//
// This is the interpreted hot path of the Traefik plugin, written in the
// dialect that Yaegi runs fastest: on every call the interpreter allocates
// a value for every variable and intermediate result of the function's
// body, executed or not, and a call costs far more than arithmetic. So
// the common case, one enforced token_bucket limit in the in-memory store
// admitting a request, is written out here with as few values as it
// takes: the key of an IPv4 peer, the lookup of MemoryStore.take1, the
// admission of tokenBucket and the headers of Responder.SetHeaders
// (serveLaneTB). So are one limit of any algorithm in memory
// (serveLaneOne), several in memory (laneMany), the common decision on
// Redis (serveLaneRedis) and an admission from a lease of Redis's capacity
// (serveLaneLease), each in functions that it calls only when
// needed, since entering a function pays for its whole body; the tests
// prove every path identical to Gate.Serve's. Every other configuration
// is Gate.Serve's own (serveLaneAny, which tries serveLaneLease first: a
// case of its own here would cost every lane's requests an allocation,
// there it costs two to those of the general path).
func ServeLane(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request) {
	switch {
	case l.tb:
		serveLaneTB(l, next, w, r, "", "", "", nil, 0, nil, noSlot, false, nil, 0, 0, 0, 0, 0, 0, nil, nil)
	case l.one:
		serveLaneOne(l, next, w, r, "", noVerdict, nil, 0)
	case l.rd:
		serveLaneRedis(l, next, w, r, "", nil, nil, nil, noTime, nil, noSum, nil, "", false, 0, 0, 0, 0, 0, 0, noFields, 0, noVerdict)
	default:
		serveLaneAny(l, next, w, r, nil, noVerdict, false)
	}
}

// ServeLaneMetered is ServeLane for a host that counts every verdict and
// times every decision, such as the Traefik plugin with metrics: it
// counts each verdict in LaneConfig.Meter, which must be set, before
// reporting it to LaneConfig.Observe as ServeLane does. One enforced limit in memory is decided as
// serveLaneOne decides it (serveLaneMeteredOne), everything else by
// Gate.Serve (serveLaneMetered). ServeLane's fused paths leave admissions
// unreported, and a check of the meter there would cost every lane's
// requests, metered or not: a host's choice of function is the check.
func ServeLaneMetered(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request) {
	if l.one {
		serveLaneMeteredOne(l, next, w, r, "", noVerdict, nil, 0, noTime)
		return
	}
	serveLaneMetered(l, next, w, r, noTime, nil, noVerdict, false)
}

// serveLaneMeteredOne is serveLaneOne counting its verdict in the meter,
// timed from the key built to the answer written: an admission
// without delay answered by laneSetIETFX, a rejection by laneReject when
// laneOneAnswer would answer it so, every other verdict by classify1 and
// answer. Its parameters after r are its variables, zero (see
// serveLaneTB).
func serveLaneMeteredOne(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request,
	key string, v Verdict, d *model.Decision, now int64, start time.Time) {
	key = laneKey4(l, r, "", nil)
	if key == "" { // MissingSkip
		next.ServeHTTP(w, r)
		return
	}
	start = timeNow()
	d = &v.Decision
	now = laneTake1(l.mem, l.limit, key, l.cost, d, 0, nil, noSlot, false, noState, nil, 0, 0)
	if l.meter.demand != nil {
		laneDemand(l.meter, 0, key, l.cost, now, nil) // the decision's instant
	}
	if !l.clock {
		now = 0
	}
	if d.Allowed && d.Delay == 0 && l.fast {
		laneSetIETFX(w.Header(), l.answer, d, now, 0, 0, 0, "", "", nil)
		laneCount(l.meter, &v, 0, timeSince(start), nil, nil)
		next.ServeHTTP(w, r)
		return
	}
	if !d.Allowed && l.fastReject && d.RetryAfter != never {
		laneReject(l, w, d.Remaining, int64(d.Reset), int64(d.Next), int64(d.RetryAfter), now, 0, 0, "", "", "", nil, nil, noVerdict)
		v.Outcome = OutcomeRejected // classify1's
		laneCount(l.meter, &v, 0, timeSince(start), nil, nil)
		return
	}
	laneMeteredAnswer(l, next, w, r, key, &v, now, start)
}

// laneMeteredAnswer finishes serveLaneMeteredOne for a verdict v on key
// at now that its fused answers leave: laneOneAnswer's general case,
// counting v in the meter before laneFinish.
func laneMeteredAnswer(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, key string, v *Verdict, now int64, start time.Time) {
	l.gate.classify1(v)
	ok := l.gate.answer(w, r, []model.Ask{{Limit: l.limit, Key: key, Cost: l.cost}}, v, now)
	laneCount(l.meter, v, 0, timeSince(start), nil, nil)
	laneFinish(l, next, w, r, v, ok)
}

// serveLaneMetered is ServeLaneMetered for every lane but one enforced
// limit in memory; its parameters after r are its variables, zero (see
// serveLaneTB). A request that no limit applies to (every key missing and
// skipped) passes on uncounted, as the Caddy module does. The verdict is
// counted under its decision's limit or, when the store failed without
// one, the first asked.
func serveLaneMetered(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request,
	start time.Time, asks []model.Ask, v Verdict, ok bool) {
	if l.dryRun != "" {
		delete(r.Header, l.dryRun)
	}
	if l.exempt != nil && laneExempt(l, r) {
		next.ServeHTTP(w, r)
		return
	}
	asks = laneAsks(l, r, nil, nil, 0, "", nil, nil, nil)
	if len(asks) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	start = timeNow()
	if l.meter.demand != nil {
		laneDemands(l.meter, asks, start, 0, 0, 0)
	}
	v, ok = l.gate.Serve(w, r, asks)
	if v.Slots != nil {
		defer releaseSlots(v.Slots) // when next returns, panics included
	}
	laneMeterVerdict(l, asks, &v, start, nil, 0)
	laneFinish(l, next, w, r, &v, ok)
}

// laneMeterVerdict counts in l's meter the verdict v on asks, decided
// since start, under its decision's limit or, when the store failed
// without one, the first asked. Its parameters after start are its
// variables, zero (see serveLaneTB).
func laneMeterVerdict(l *Lane, asks []model.Ask, v *Verdict, start time.Time, lim *model.Limit, i int) {
	lim = v.Decision.Limit
	if lim == nil {
		lim = asks[0].Limit
	}
	// By name: a decision of the local fallback is about its share of
	// the limit, another *model.Limit of the same name.
	for i = 0; i < len(l.meter.limits)-1 && l.meter.limits[i].Name != lim.Name; i++ {
	}
	laneCount(l.meter, v, i, timeSince(start), nil, nil)
}

// ServeLaneCounted is ServeLane, or ServeLaneMetered with a Meter, for a
// lane of which a limit must see its response (AnswerCounts: CountStatus,
// CostHeader, CostBytes): it decides r by Gate.Serve, as
// serveLaneMetered does, and passes an admitted request to next through
// answeredNext, which settles it with its response as
// Gate.ServeAnswered does and flushes its streams. A host's choice of
// function is the check, so that no other lane's requests pay for it.
func ServeLaneCounted(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request) {
	if l.dryRun != "" {
		delete(r.Header, l.dryRun)
	}
	if l.exempt != nil && laneExempt(l, r) {
		next.ServeHTTP(w, r)
		return
	}
	asks := laneAsks(l, r, nil, nil, 0, "", nil, nil, nil)
	if len(asks) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	start := timeNow()
	if l.meter != nil && l.meter.demand != nil {
		laneDemands(l.meter, asks, start, 0, 0, 0)
	}
	v, ok := l.gate.Serve(w, r, asks)
	if v.Slots != nil {
		defer releaseSlots(v.Slots) // when next returns, panics included
	}
	if l.meter != nil {
		laneMeterVerdict(l, asks, &v, start, nil, 0)
	}
	laneFinish(l, &answeredNext{gate: l.gate, next: next, asks: asks, v: &v, aborts: l.costs}, w, r, &v, ok)
}

// answeredNext is the next handler of an admitted request of
// ServeLaneCounted: Gate.ServeAnswered's, through a writer that flushes
// streamed responses itself (statusWriter's flushStreams), since the
// interpreter hands it on without its Flush method.
type answeredNext struct {
	gate   *Gate
	next   http.Handler
	asks   []model.Ask
	v      *Verdict
	aborts bool // Lane.costs
}

func (a *answeredNext) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(&statusWriter{ResponseWriter: w, flushStreams: true, gate: a.gate, asks: a.asks, v: a.v, aborts: a.aborts}).serve(a.next, r)
}

// laneDemands records in m's demand the cost of each of asks, at start
// (or at m's clock's instant), before the decision (which may wait for
// Redis or a delay), so that a key's asks are recorded in the order they
// came; its parameters after start are its variables, zero (see
// serveLaneTB).
func laneDemands(m *Meter, asks []model.Ask, start time.Time, a int, i int, now int64) {
	if m.clock != nil {
		now = m.clock()
	} else {
		now = start.UnixNano()
	}
	for a = 0; a < len(asks); a++ {
		for i = 0; i < len(m.limits)-1 && m.limits[i] != asks[a].Limit; i++ {
		}
		laneDemand(m, i, asks[a].Key, asks[a].Cost, now, nil)
	}
}

// laneDemand records in m's demand of its i-th limit, if it has one, that
// key asked cost at now; its parameter after now is its variable, nil
// (see serveLaneTB).
func laneDemand(m *Meter, i int, key string, cost float64, now int64, rec *demand.Recorder) {
	rec = m.demand[i]
	if rec != nil {
		rec.Add(now, key, cost)
	}
}

// laneCount counts in m the verdict v about its i-th limit, whose decision
// took elapsed: its outcome, a near miss, and the time without a
// leaky_bucket's wait (none for a cancelled wait, whose time is not
// known), as the Caddy module counts its verdicts. Its parameters after
// elapsed are its variables, zero (see serveLaneTB).
func laneCount(m *Meter, v *Verdict, i int, elapsed time.Duration, c *Counts, h *Histogram) {
	c = m.counts[i]
	addUint64(&c.outcomes[v.Outcome], 1)
	if v.Outcome == OutcomeAllowed {
		// v.NearMiss(m.nearAt[i]), written out (TestLaneCountNearMiss).
		if v.Decision.Remaining < m.nearAt[i] && v.Decision.Limit != nil {
			addUint64(&c.near, 1)
		}
	} else if v.Outcome == OutcomeCancelled {
		return
	}
	if elapsed -= v.Delay; elapsed <= 0 {
		return
	}
	h = m.seconds
	for i = 0; i < numDecisionBounds && elapsed > h.bounds[i]; i++ {
	}
	addUint64(&h.counts[i], 1)
	addUint64(&h.sum, uint64(elapsed))
}

// laneTake1 is MemoryStore.take1 fused with model.Step's dispatch, for
// serveLaneOne: the hash, the clock reading, the load and save of the
// state and a sliding_window_log's load of its entries are inline, and
// memShard.keep is laneKeep. Its parameters after d are its
// variables, which callers pass as zero values (see serveLaneTB).
func laneTake1(s *MemoryStore, l *model.Limit, key string, cost float64, d *model.Decision,
	h uint64, sh *memShard, sl memSlot, held bool, st model.State, ps *model.State, now, exp int64) int64 {
	h = hashString(s.seed, key)
	h ^= l.Hash
	sh = &s.shards[h>>memShardShift]
	sh.mu.Lock()
	sl, held = sh.slots[h]
	st = model.State{T: sl.t, A: sl.a, B: sl.b}
	ps = &st
	now = int64(timeSince(s.base))
	now += s.wall
	if s.clock != nil {
		now = s.clock()
	}
	switch l.Algorithm {
	case tokenBucket:
		exp = model.TokenBucketStep(l, ps, now, cost, d, 0, 0, 0)
	case leakyBucket:
		exp = model.LeakyBucketStep(l, ps, now, cost, d, 0, 0, 0, 0, 0, 0, 0, false)
	case fixedWindow:
		exp = model.FixedWindowStep(l, ps, now, cost, d, 0, 0, 0)
	case slidingWindowLog:
		if held {
			st.Log = sh.logs[h]
		}
		exp = model.SlidingLogStep(l, ps, now, cost, d, 0, 0, 0, nil)
		if d.Allowed {
			// Before room, which may forget another state (h is not held).
			putLog(sh, h, st.Log)
		}
	default:
		exp = model.SlidingCounterStep(l, ps, now, cost, d, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	}
	if d.Allowed {
		if !held {
			room(s, sh, now)
		}
		sh.slots[h] = memSlot{t: st.T, a: st.A, b: st.B, exp: exp}
		d.Mark = model.Mark{T: st.T, A: st.A, OK: true}
	} else if held {
		laneKeep(sh, h, sl, l, now)
	}
	sh.mu.Unlock()
	return now
}

// laneKeep is memShard.keep for the state sl of h, which the lane has
// read: a function apart, so that admissions do not pay for its values
// under Yaegi. sh's mutex is held.
func laneKeep(sh *memShard, h uint64, sl memSlot, l *model.Limit, now int64) {
	now += l.Keep + 1 // the expiry to keep, in now: no := (see model.Step)
	if sl.exp < now {
		sl.exp = now
		sh.slots[h] = sl
	}
}

// noMemAsks and noOrder are laneTakeMany's mb and ib, zero.
var (
	noMemAsks [maxAsks]memAsk
	noOrder   [maxAsks]int
)

// laneTakeMany is MemoryStore.takeMany fused with MemoryStore.hash, now,
// memShard.load and keep and the save of each state, for laneMany: a
// token_bucket or sliding_window_log ask calls its algorithm without
// decide, and its loops count with i, since under Yaegi each call costs
// and a range loop's variables are allocated again at each iteration. Its
// parameters after out are its variables, which callers pass as zero
// values (see serveLaneTB): mb and ib hold ms and order for up to maxAsks
// asks.
func laneTakeMany(s *MemoryStore, asks []model.Ask, out []model.Decision,
	mb [maxAsks]memAsk, ib [maxAsks]int, ms []memAsk, order []int, a *model.Ask, l *model.Limit, m *memAsk, st *model.State,
	d *model.Decision, sh *memShard, sl memSlot, held, all, full bool, i int, now int64) int64 {
	if len(asks) > maxAsks {
		ms, order = make([]memAsk, len(asks)), make([]int, 0, len(asks))
	} else {
		ms, order = mb[:len(asks)], ib[:0]
	}
	for i = 0; i < len(asks); i++ {
		a = &asks[i]
		m = &ms[i]
		m.h = hashString(s.seed, a.Key)
		m.h ^= a.Limit.Hash
		if i == 0 { // shardOrder of no shards, without its call
			order = append(order, int(m.h>>memShardShift))
		} else {
			order = shardOrder(order, int(m.h>>memShardShift))
		}
	}
	for i = 0; i < len(order); i++ {
		s.shards[order[i]].mu.Lock()
	}
	now = int64(timeSince(s.base))
	now += s.wall
	if s.clock != nil {
		now = s.clock()
	}
	all = true
	for i = 0; i < len(asks); i++ {
		a = &asks[i]
		l = a.Limit
		m = &ms[i]
		st = &m.st
		d = &out[i]
		sh = &s.shards[m.h>>memShardShift]
		sl = sh.slots[m.h]
		*st = model.State{T: sl.t, A: sl.a, B: sl.b}
		switch l.Algorithm {
		case tokenBucket:
			m.exp = model.TokenBucketStep(l, st, now, a.Cost, d, 0, 0, 0)
		case slidingWindowLog:
			st.Log = sh.logs[m.h]
			if len(st.Log) >= maxLogQuota {
				m.full = true
				full = true
				m.newest = st.Log[len(st.Log)-1]
			}
			m.exp = model.SlidingLogStep(l, st, now, a.Cost, d, 0, 0, 0, nil)
		default:
			m.exp = model.Step(l, st, now, a.Cost, d)
		}
		if !d.Allowed {
			all = false
		}
	}
	if all {
		for i = 0; i < len(asks); i++ {
			m = &ms[i]
			st = &m.st
			sh = &s.shards[m.h>>memShardShift]
			if asks[i].Limit.Algorithm == slidingWindowLog {
				putLog(sh, m.h, st.Log)
			}
			if _, held = sh.slots[m.h]; !held {
				room(s, sh, now)
			}
			sh.slots[m.h] = memSlot{t: st.T, a: st.A, b: st.B, exp: m.exp}
			out[i].Mark = model.Mark{T: st.T, A: st.A, OK: true}
		}
	} else {
		laneKeepAll(s, asks, ms, full, now)
	}
	for i = 0; i < len(order); i++ {
		s.shards[order[i]].mu.Unlock()
	}
	return now
}

// laneKeepAll finishes laneTakeMany when it saves no state, with the
// shards locked: it puts back the newest entry of each full log decided
// (see memAsk), when full, and keeps every held state (laneKeep). It is
// apart so that admissions do not pay for it under Yaegi.
func laneKeepAll(s *MemoryStore, asks []model.Ask, ms []memAsk, full bool, now int64) {
	for i := range ms {
		m := &ms[i]
		sh := &s.shards[m.h>>memShardShift]
		if full && m.full {
			log := sh.logs[m.h]
			log[len(log)-1] = m.newest
		}
		if sl, held := sh.slots[m.h]; held {
			laneKeep(sh, m.h, sl, asks[i].Limit, now)
		}
	}
}

// laneShape sets the fields of l that describe its one key, of shape sh.
func laneShape(l *Lane, sh keyspec.Shape) {
	l.ipv4, l.ipv6 = sh.PeerIPv4, sh.PeerIPv6
	if sh.Client != nil {
		l.clientIP = sh.Client
		l.depth4 = laneDepth4(sh.Client)
	}
}

// laneDepth4 reports whether laneDepthKey finds c's keys: c believes
// X-Forwarded-For from any peer at a Depth, and keys IPv4 clients by their
// full address.
func laneDepth4(c *clientip.Strategy) bool {
	return c.AnyPeer && c.Depth > 0 && (c.Header == "" || http.CanonicalHeaderKey(c.Header) == xForwardedFor) &&
		(c.IPv4Prefix == 0 || c.IPv4Prefix == 32)
}

// laneDepthKey is clientip.Strategy.Key fused with that package's
// clientAddr, forwardedAt, parseHop and groupKey for the commonest client
// behind a load balancer, as Traefik's ipStrategy.depth finds it
// (laneDepth4): when the request has one X-Forwarded-For line whose
// Depth-th entry from the right is an IPv4 address alone, from an IP peer,
// that address is the key, as clientAddr and groupKey would find it. Every
// other request takes their path, through Strategy.Key. Under Yaegi the
// seven frames of the general path cost a request behind a proxy some 150
// allocations. Its parameters after r are its variables, zero (see
// serveLaneTB).
func laneDepthKey(c *clientip.Strategy, r *http.Request, s string, lines []string, depth, i int, a netip.Addr, err error) (string, bool) {
	lines = r.Header[xForwardedFor]
	if len(lines) != 1 {
		return (*clientip.Strategy).Key(c, r)
	}
	s = lines[0]
	for depth = c.Depth; depth > 1; depth-- {
		if i = lastIndexByte(s, ','); i < 0 {
			return (*clientip.Strategy).Key(c, r) // fewer entries than Depth
		}
		s = s[:i]
	}
	s = s[lastIndexByte(s, ',')+1:]
	s = trimHop(s, " \t")
	if len(s) > maxHopLength {
		return (*clientip.Strategy).Key(c, r)
	}
	if a, err = parseAddr(s); err != nil || !a.Is4() {
		return (*clientip.Strategy).Key(c, r)
	}
	// The peer is only checked, as anyPeerAddr checks it.
	if _, err = parseAddrPort(r.RemoteAddr); err != nil {
		return (*clientip.Strategy).Key(c, r)
	}
	// netip accepts only the canonical dotted quad, as parseHop says.
	return s, true
}

// headersIETFX is HeadersIETF|HeadersX as a variable: Yaegi v0.16.1
// compares a value with an | of typed constants wrongly.
var headersIETFX = headersIETF | headersX

// laneSetIETFX is Responder.SetHeaders fused for the header set ietf and
// x and the answer texts a of d's limit. Its parameters after now are its
// variables, zero (see serveLaneTB). Each field of d is read once, and t
// is a Duration, so that d's durations need no conversion: under Yaegi
// each selector and conversion is a value.
func laneSetIETFX(h http.Header, a *answer.Texts, d *model.Decision, now int64,
	rem int64, t time.Duration, x float64, remText, tText string, vals []string) {
	x = d.Remaining // floorUnits(x)
	if x >= maxSFInteger {
		rem = maxSFInteger
	} else if x > 0 {
		rem = int64(x)
	}
	if rem < smallInts {
		remText = smallIntTexts[rem]
	} else {
		remText = fmtInt(rem, 10)
	}
	// t: ceilSeconds of Next, or of a rejection's RetryAfter.
	t = d.RetryAfter
	if d.Allowed || t == never {
		t = d.Next
	}
	tText = "0"
	if t > 0 {
		t--
		t /= time.Duration(nsPerSecond)
		if t++; t < smallInts {
			tText = smallIntTexts[t]
		} else {
			tText = fmtInt(int64(t), 10)
		}
	}
	now = answer.ResetUnix(now, int64(d.Reset))
	vals = []string{a.Policy, a.IETFPrefix + remText + ";t=" + tText, a.QText, remText, fmtInt(now, 10)}
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
	h["X-Ratelimit-Limit"] = vals[2:3:3]
	h["X-Ratelimit-Remaining"] = vals[3:4:4]
	h["X-Ratelimit-Reset"] = vals[4:5:5]
}

// newLaneRedis makes l, a lane whose gate has no in-memory store to take
// from, decide with serveLaneRedis when that path applies: one enforced
// limit on a redisstore.Store that has a redisstore.Direct and Redis's clock, no
// in-flight limit, a cost of 1 and the header set ietf and x of a limit
// whose answer texts are ready (the decisions redisstore.Direct sends, answered
// by laneSetIETFX). A limit with a Lease, of any cost, takes
// serveLaneLease instead, which needs no redisstore.Direct. It sets the
// fields of the limit that those paths and laneKey read, as NewLane does
// for a lane that takes from memory.
func newLaneRedis(l *Lane, cfg LaneConfig) {
	g := cfg.Gate
	s := g.redis
	if s == nil || g.slots != nil || len(cfg.Asks) != 1 || g.cfg.Mode != Enforce {
		return
	}
	a := cfg.Asks[0]
	lim := a.Limit
	if !lim.Rated() || g.resp.Headers != headersIETFX || g.resp.Texts(lim) == nil {
		return
	}
	leased := lim.Lease > 0
	if !leased && (a.Cost != 1 || s.Direct() == nil) {
		return
	}
	l.rd, l.leased, l.limit, l.spec, l.cost, l.quota = !leased, leased, lim, cfg.Specs[a.Spec], a.Cost, lim.Rate.Quota
	laneShape(l, l.spec.Shape())
	l.shared = a.Missing == missingShared
	l.answer = g.resp.Texts(lim)
	if b := g.cfg.Breaker; b != nil {
		l.bstate, l.bfails = &b.state, &b.fails
	}
	if cfg.Watch && cfg.Observe != nil {
		l.down = cfg.Down
		if l.down == nil {
			l.down = &alwaysDown
		}
	}
	if g.cfg.Clock == nil {
		l.sys = &g.systemClock
	}
	if leased {
		return
	}
	// One field per statement: Yaegi v0.16.1 loses values of a tuple
	// assignment of calls to fields.
	l.direct = s.Direct()
	l.breaker, l.timeout = g.cfg.Breaker, g.cfg.Timeout
	l.take, l.hole, l.hole2 = redisstore.DirectTake(lim)
	// A rejection is laneReject's when its retry is known: the reply
	// says Never in more digits than serveLaneRedis reads.
	l.rejectHead = "1 "
	if lim.Capacity() < maxSFInteger {
		if setFastReject(l, lim, true); l.fastReject {
			l.rejectHead = "0 "
		}
	}
}

// serveLaneLease is ServeLane for a lane whose one limit leases Redis's
// capacity (newLaneRedis): a request that the lease its store holds
// covers is admitted without a call to Redis (redisstore.Store.FromLease,
// which Take admits through too) and answered as serveLaneRedis answers
// an admission, by laneSetIETFX on the gate's clock, observed only while
// *down is not 0, and reports whether it did; it tells the breaker
// nothing, as no answer of Redis stands behind it. Every other request,
// and every request while the breaker is not simply closed (Gate.Serve
// then asks no store but for the probe, which a lease answering it does
// not decide), it leaves to the rest of serveLaneAny, which calls it, the
// general path, which asks Redis for the next lease. (Its variables
// cost the same here as scratch parameters: 319 allocations either way.)
func serveLaneLease(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request) bool {
	var now int64
	var v Verdict
	key := laneKey4(l, r, "", nil)
	if key == "" || l.bstate != nil && loadInt32(l.bstate) != breakerClosed ||
		!(*redisstore.Store).FromLease(l.gate.redis, model.Ask{Limit: l.limit, Key: key, Cost: l.cost}, &v.Decision) {
		return false
	}
	// answer's clock: Gate.now, inline for the system clock.
	if l.sys != nil {
		now = int64(timeSince(l.sys.base))
		now += l.sys.wall
	} else {
		now = l.gate.now()
	}
	laneSetIETFX(w.Header(), l.answer, &v.Decision, now, 0, 0, 0, "", "", nil)
	if l.down != nil && loadInt32(l.down) != 0 {
		l.observe(&v)
	}
	next.ServeHTTP(w, r)
	return true
}

// serveLaneRedis is ServeLane for a lane that newLaneRedis set up: the
// common decision on Redis written out, as serveLaneTB writes out the
// in-memory one. It builds the key (laneKey4), sends the take
// script's call that the limit encoded (redisstore.Store.Take's call, sent to the redisstore.Direct client)
// within the gate's timeout, reads the reply of an admission without
// delay, writes the headers with laneSetIETFX and reports the verdict
// to the observer only when LaneConfig says it must. A rejection whose
// retry the reply gives is laneReject's, as an in-memory lane's is, when
// the lane's answers are (fastReject). Everything else
// takes the general path with its semantics: serveLaneAny before the
// call (no key, a key too long to send as is, a breaker not simply
// closed, no direct client), laneRedisSlow after it (a failed call, which
// redisstore.Store.takeFailed retries or reports, and any other reply, which
// redisstore.DecodeDecisions reads).
//
// Its parameters after r are its variables, which ServeLane passes as
// zero values, and its standard library functions are package variables:
// see serveLaneTB.
func serveLaneRedis(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request,
	key string, err error, cl *resp.Client, ctx context.Context, start time.Time, cmd []byte, sum [sha256.Size]byte,
	reply interface{}, text string, ok bool, rem float64, p, q, j int, c, n time.Duration, f [replyFields]time.Duration, now int64, v Verdict) {
	key = laneKey4(l, r, "", nil)
	if key == "" || len(key) > maxKeyLength || l.bstate != nil && loadInt32(l.bstate) != breakerClosed {
		serveLaneAny(l, next, w, r, nil, noVerdict, false)
		return
	}
	cl = (*redisstore.Direct).Client(l.direct)
	if cl == nil {
		serveLaneAny(l, next, w, r, nil, noVerdict, false)
		return
	}
	// redisstore.Store.Take's call, for the direct client.
	start = timeNow()
	cmd = []byte(l.take)
	sum = sha256Sum([]byte(key))
	hexEncode(cmd[l.hole:], sum[:16])
	if l.hole2 != 0 { // a sliding window log's second key
		hexEncode(cmd[l.hole2:], sum[:16])
	}
	ctx = r.Context()
	if reply, err = resp.Run(cl, ctx, start, l.timeout, "EVALSHA", cmd); err != nil {
		laneRedisSlow(l, next, w, r, key, ctx, start, reply, err)
		return
	}
	// redisstore.DecodeDecisions for the reply of an admission without delay,
	// "1 <remaining> <reset> <retry> 0 <next>", or with fastReject of a
	// rejection, which starts "0 ": the number remaining as
	// decodeAsk reads any (and redisstore.DecodeDecisions one with a fraction), by
	// parseFloat, which reads a whole one as redisstore.DecodeDecisions does; the
	// others whole numbers of 1 to 15 digits, fields 2 to 4 in f and the
	// last in n.
	if text, ok = reply.(string); !ok || len(text) < 11 || text[:2] != "1 " && text[:2] != l.rejectHead {
		laneRedisSlow(l, next, w, r, key, ctx, start, reply, nil)
		return
	}
	for q = 2; q < len(text) && text[q] != ' '; q++ {
	}
	if rem, err = parseFloat(text[2:q], 64); err != nil || !(rem >= 0) || q == len(text) {
		laneRedisSlow(l, next, w, r, key, ctx, start, reply, nil)
		return
	}
	p, j = q+1, 2
	for q = p; q < len(text); q++ {
		if c = replyDigits[text[q]]; c <= 9 {
			n = n*10 + c
		} else if text[q] != ' ' || q == p || q-p > 15 || j == replyFields-1 {
			break
		} else {
			f[j] = n
			n = 0
			j++
			p = q + 1
		}
	}
	if q != len(text) || j != replyFields-1 || q == p || q-p > 15 || f[4] != 0 {
		laneRedisSlow(l, next, w, r, key, ctx, start, reply, nil)
		return
	}
	// Gate.decided's report of a success to a breaker that is not simply
	// closed (another request's failure may have come meanwhile).
	if l.bstate != nil && (loadInt32(l.bstate) != breakerClosed || loadInt32(l.bfails) != 0) {
		l.gate.report(l.breaker, ctx, nil, 0)
	}
	// answer's clock: Gate.now, inline for the system clock.
	if l.sys != nil {
		now = int64(timeSince(l.sys.base))
		now += l.sys.wall
	} else {
		now = l.gate.now()
	}
	if text[0] == '0' {
		laneRedisReject(l, w, rem, &f, n, now)
		return
	}
	v.Decision = model.Decision{Limit: l.limit, Allowed: true, Quota: l.quota, Remaining: rem, Reset: f[2], Next: n}
	laneSetIETFX(w.Header(), l.answer, &v.Decision, now, 0, 0, 0, "", "", nil)
	if l.down != nil && loadInt32(l.down) != 0 {
		l.observe(&v)
	}
	next.ServeHTTP(w, r)
}

// replyDigits is the value of each byte as a decimal digit, 10 for a
// byte that is not one: serveLaneRedis reads a reply's digits through it,
// because under Yaegi a conversion of each digit would allocate.
var replyDigits = func() (t [256]time.Duration) {
	for i := range t {
		t[i] = 10
	}
	for i := 0; i < 10; i++ {
		t['0'+i] = time.Duration(i)
	}
	return t
}()

// alwaysDown is the Lane's down of a lane that observes every verdict:
// never 0, never written.
var alwaysDown int32 = 1

// laneRedisReject answers, by laneReject, the rejection that serveLaneRedis
// read at now, whose fields 2 to 4 are in f and the last in next, with
// redisstore.DecodeDecisions' RetryAfter (at least 1). It is apart so that an
// admission does not pay for its values under Yaegi.
func laneRedisReject(l *Lane, w http.ResponseWriter, rem float64, f *[replyFields]time.Duration, next time.Duration, now int64) {
	if f[3] == 0 {
		f[3] = 1
	}
	laneReject(l, w, rem, int64(f[2]), int64(next), int64(f[3]), now, 0, 0, "", "", "", nil, nil, noVerdict)
}

// laneRedisSlow finishes serveLaneRedis on the general path after the
// call of the limit's script on key, begun at start, returned reply and
// err: redisstore.Store.takeFailed's handling of a failure or redisstore.DecodeDecisions'
// of its reply, then Gate.decided's and
// serveLaneAny's.
func laneRedisSlow(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, key string, ctx context.Context, start time.Time, reply interface{}, err error) {
	asks := []model.Ask{{Limit: l.limit, Key: key, Cost: l.cost}}
	out := make([]model.Decision, 1)
	if err != nil {
		err = l.gate.redis.TakeFailed(ctx, start, l.timeout, asks, out, err)
	} else {
		err = redisstore.DecodeDecisions(reply, asks, out)
	}
	v := l.gate.decided(ctx, asks, out, err, 0)
	laneFinish(l, next, w, r, &v, l.gate.answer(w, r, asks, &v, 0))
}
