package core

import (
	"hash/maphash"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// A Lane is the whole request path of one Gate for hosts whose keys come
// from KeySpecs, as the Traefik plugin's do: build each limit's key,
// decide, write the headers or the 429 answer, wait out a delay, and pass
// the request on. It is built once per configuration by NewLane and is
// safe for concurrent use.
type Lane struct {
	gate    *Gate
	asks    []LaneAsk
	specs   []*KeySpec
	prefix  string
	resp    *Responder
	observe func(*Verdict)
	watch   bool
	dryRun  string // LaneConfig.DryRunHeader in DryRun mode, else ""
	// exempt and exemptIP are LaneConfig's; exempt is nil without any.
	exempt   []netip.Prefix
	exemptIP *ClientIP
	flight   bool // the gate has in-flight limits: serveLaneAny calls laneHold

	// mem: the gate's store is in memory and unwatched, so the lane
	// takes from it directly. one: mem, and a single enforced limit,
	// whose fields follow. tb: one, a token_bucket, which ServeLane
	// writes out.
	mem  *MemoryStore
	one  bool
	tb   bool
	ipv4 bool // the key is the peer's full IPv4 address
	// clientIP is the spec's ClientIP when the key is the client's
	// address and nothing else, else nil.
	clientIP *ClientIP
	shared   bool // the limit's MissingKey is MissingShared
	clock    bool // g.memClock, for every lane on mem: the decision's instant is the headers' clock
	limit    *Limit
	spec     *KeySpec
	cost     float64
	nsHash   uint64
	capacity float64
	quota    float64
	period   float64 // nanoseconds
	unit     float64 // nanoseconds per cost unit
	headers  HeaderSet
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

	// answer: one or rd, the limit's answer texts, which setIETFXHeaders
	// writes.
	answer *limitAnswer
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
	// take, hole and hole2 the limit's limitRedis call; sys the gate's
	// system clock, nil with a GateConfig.Clock. down is LaneConfig's
	// with Watch and Observe, &alwaysDown with them but no Down, else
	// nil: serveLaneRedis observes an admission while *down is not 0.
	rd          bool
	direct      *RedisDirect
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
	Specs []*KeySpec
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
	ExemptIP *ClientIP
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
	Limit   *Limit
	Spec    int // index into LaneConfig.Specs
	Missing MissingKey
	Cost    float64
}

// NewLane returns the lane of cfg.
func NewLane(cfg LaneConfig) *Lane {
	g := cfg.Gate
	l := &Lane{gate: g, asks: cfg.Asks, specs: cfg.Specs, prefix: cfg.Prefix, resp: g.resp, observe: cfg.Observe, watch: cfg.Watch, flight: g.slots != nil}
	if g.cfg.Mode == DryRun {
		l.dryRun = cfg.DryRunHeader
	}
	if !cfg.Watch {
		l.mem = g.mem
	}
	if len(cfg.Exempt) > 0 {
		// serveLaneAny checks the exemption, so that lanes without one
		// pay nothing for it.
		l.exempt, l.exemptIP = cfg.Exempt, cfg.ExemptIP
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
	l.tb = lim.Algorithm == TokenBucket
	l.ipv4 = l.spec.ipv4
	if len(l.spec.parts) == 1 && l.spec.parts[0].kind == partClientIP {
		l.clientIP = l.spec.ip
	}
	l.shared = a.Missing == MissingShared
	l.nsHash, l.capacity, l.quota = lim.nsHash, lim.capacity, lim.Rate.Quota
	l.most, l.owe, l.lent = lim.capacity+lim.owe, lim.owe > 0, lim.owe
	l.period, l.unit = float64(lim.period), lim.unit
	l.headers = g.resp.Headers
	l.fast = l.clock && l.headers&HeadersLegacy == 0 && l.headers&HeadersIETF != 0 && l.headers&HeadersX != 0 &&
		lim.capacity < maxSFInteger && lim.answer.ready
	l.answer = &lim.answer
	if l.fast {
		setFastReject(l, lim, !l.tb || a.Cost <= lim.capacity+eps)
	}
	return l
}

// setFastReject sets the answer texts of l's one limit lim, whose headers
// l writes itself (the set ietf and x, a quota below maxSFInteger), and,
// when laneReject can answer its rejections (no jitter, no Defer, a body,
// and admit: the limit can admit the request's cost), fastReject and the
// texts of the body.
func setFastReject(l *Lane, lim *Limit, admit bool) {
	l.policy, l.ietfPrefix, l.qText = lim.answer.policy, lim.answer.ietfPrefix, lim.answer.qText
	rs := l.resp
	if admit && rs.Jitter == 0 && !rs.Defer && rs.Body < BodyNone {
		t := &bodyTexts[rs.Body]
		l.fastReject = true
		l.bodyHead, l.bodyTail, l.contentType = t.retry, t.retryEnd+lim.answer.tails[rs.Body], t.contentType
	}
}

// newLaneMany sets the fields of l, a lane of several limits in the
// in-memory store, that laneMany reads: ietfx, when the headers of every
// limit's decisions are setIETFXHeaders' work, and, in Enforce mode, the
// rejects of the limits whose rejections laneReject can write.
func newLaneMany(l *Lane, cfg LaneConfig) {
	l.ietfx = cfg.Gate.resp.Headers == headersIETFX
	for _, a := range cfg.Asks {
		if !a.Limit.answer.ready || a.Limit.answer.quota != a.Limit.Rate.Quota {
			l.ietfx = false
		}
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
		memRoom(s, sh, now)
	}
	sh.slots[h] = memSlot{t: t, a: deficit, exp: t + reset}
	sh.mu.Unlock()
	if !l.fast {
		laneHeaders(l, next, w, r, deficit, reset, now)
		return
	}
	// setHeaders for ietf and x, written out. Remaining (n) is what the
	// bucket holds (ns), whole units.
	ns = l.capacity - deficit
	n = int64(ns)
	if n < smallInts {
		remText = smallIntTexts[n]
	} else {
		remText = fmtInt(n, 10)
	}
	// t, tokenBucket's Next (nextUnits, duration, setHeaders) computed as it
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
	now = resetUnix(now, reset)
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

// The standard library functions of the lanes' paths, as package
// variables: see serveLaneTB.
var (
	noSlot        memSlot  // serveLaneTB's sl, zero
	noVerdict     Verdict  // laneReject's v, zero
	noDecision    Decision // laneSetHeaders' d, zero
	noState       State    // take1's st, zero
	fmtInt        = strconv.FormatInt
	parseAddrPort = netip.ParseAddrPort
	lastIndexByte = strings.LastIndexByte
	hashString    = maphash.String
	timeSince     = time.Since
	itoa          = strconv.Itoa
	writeString   = io.WriteString
)

// laneReject answers 429 for a fastReject lane whose limit, at now, has
// rem units left, is whole again in reset nanoseconds and admits the
// request in wait (not Never): reject's answer, written out with the
// formats of setHeaders and reject. It then reports the rejection to the
// observer. Its parameters after now are its variables, zero, as
// serveLaneTB's are.
func laneReject(l *Lane, w http.ResponseWriter, rem float64, reset, next, wait, now int64,
	retry, t int64, remText, retryText, body string, texts []string, hd http.Header, v Verdict) {
	retry = wait + (nsPerSecond - 1)
	retry /= nsPerSecond
	if retry < 1 {
		retry = 1
	}
	t = resetUnix(now, reset)
	remText = fmtInt(int64(rem), 10)
	retryText = fmtInt(retry, 10)
	body = l.bodyHead + retryText + l.bodyTail
	// setHeaders: a rejection's t is its Retry-After.
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
		v = Verdict{Outcome: OutcomeRejected, Decision: Decision{Limit: l.limit, Quota: l.quota, Remaining: rem,
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
// address itself rather than through KeySpec.Key, whose IPv4 path it would
// pay for under Yaegi, and a client address behind proxies from clientKey
// rather than through specKey. key and ok are its variables, zero (see
// serveLaneTB).
func laneKey(l *Lane, r *http.Request, key string, ok bool) string {
	key = r.RemoteAddr
	if l.spec.ipv6 && key != "" && key[0] == '[' {
		key, ok = peerKey6(key)
	}
	if !ok {
		if l.clientIP != nil {
			key, ok = clientKey(l.clientIP, r)
		} else {
			key, ok = specKey(l.spec, r)
		}
	}
	if ok && key != "" {
		return l.prefix + key
	}
	if l.shared {
		return l.prefix + missingSharedKey
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
		memTouch(sh, h, *sl, l.limit, now)
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
		ns = nextUnits(0, l.capacity) - rem
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
	st := State{T: sl.t, A: sl.a}
	var v Verdict
	exp := tokenBucket(l.limit, &st, now, l.cost, &v.Decision, 0, 0, 0, 0)
	if v.Decision.Allowed {
		if !held {
			memRoom(l.mem, sh, now)
		}
		sh.slots[h] = memSlot{t: st.T, a: st.A, exp: exp}
		v.Decision.mark = mark{t: st.T, a: st.A, ok: true} // take1's
	} else if held {
		memTouch(sh, h, *sl, l.limit, now)
	}
	sh.mu.Unlock()
	if !l.clock {
		now = 0
	}
	laneOneAnswer(l, next, w, r, []Ask{{Limit: l.limit, Key: key, Cost: l.cost}}, &v, now)
}

// laneHeaders writes the headers of an admitted token bucket request whose
// deficit after the decision is deficit, and which is whole again in
// reset nanoseconds, for the header sets and quotas ServeLane does not
// write itself, and passes the request on. The headers are laneSetHeaders'
// work, apart so that a lane without headers does not pay for its body.
func laneHeaders(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, deficit float64, reset, now int64) {
	if l.headers != HeadersOff {
		laneSetHeaders(l, w, deficit, reset, now, noDecision)
	}
	next.ServeHTTP(w, r)
}

// laneSetHeaders is setHeaders for laneHeaders; d is its variable, zero
// (see serveLaneTB).
func laneSetHeaders(l *Lane, w http.ResponseWriter, deficit float64, reset, now int64, d Decision) {
	d = Decision{Limit: l.limit, Allowed: true, Quota: l.quota, Remaining: l.capacity - deficit, Reset: time.Duration(reset)}
	if deficit > 0 {
		d.Next = duration(nextUnits(d.Remaining, deficit) * l.unit)
	}
	if !l.clock {
		now = gateNow(l.gate)
	}
	setHeaders(l.resp, w.Header(), &d, now)
}

// serveLaneAny is ServeLane for several limits, a watched or remote store,
// a dry run, exempt clients, or in-flight limits (whose gate has no mem):
// several limits in the in-memory store are laneMany's, anything else
// laneDecideAny's, apart so that neither pays for the other's values
// under Yaegi. Its parameters after r are its variables, zero (see
// serveLaneTB); v is laneDecideAny's.
func serveLaneAny(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request,
	asks []Ask, v Verdict) {
	if l.dryRun != "" {
		delete(r.Header, l.dryRun)
	}
	if l.exempt != nil && laneExempt(l, r) {
		next.ServeHTTP(w, r)
		return
	}
	asks = laneAsks(l, r, nil, nil, 0, "", nil, nil, nil)
	if l.flight {
		laneHold(l, next, w, r, asks)
		return
	}
	if l.mem != nil && len(asks) > 1 {
		laneMany(l, next, w, r, asks, nil, nil, nil, 0, 0)
		return
	}
	laneDecideAny(l, next, w, r, asks, v)
}

// laneDecideAny finishes serveLaneAny for asks that are not several on
// the in-memory store. v is its variable, zero (see serveLaneTB).
func laneDecideAny(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, asks []Ask, v Verdict) {
	if l.mem == nil || len(asks) == 0 {
		v = gateDecide(l.gate, r.Context(), asks)
	} else {
		// One ask: Decide's work without its generality, since a
		// MemoryStore never fails.
		take1(l.mem, asks[0].Limit, asks[0].Key, asks[0].Cost, &v.Decision, 0, nil, noSlot, false, noState, nil, 0, 0)
		classify1(l.gate, &v)
	}
	laneFinish(l, next, w, r, &v, answer(l.gate, w, r, asks, &v, 0))
}

// laneMany finishes serveLaneAny for several asks on the in-memory store.
// When every limit admits the request at once, which needs neither
// classify's generality nor answer's, it writes the headers of the
// decision classify reports, that of the limit closest to exhaustion, on
// the clock of the decisions when that is the gate's (l.clock), and
// passes the request on; laneManyAnswer answers any other request. Its
// parameters after asks are its variables, zero (see serveLaneTB).
func laneMany(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, asks []Ask,
	out []Decision, d, best *Decision, i int, now int64) {
	out = make([]Decision, len(asks))
	now = takeMany(l.mem, asks, out, noMemAsks, noOrder, nil, nil, nil, nil, nil, nil, nil, nil, noSlot, false, false, false, 0, 0)
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
	if l.resp.Headers != HeadersOff {
		if !l.clock {
			now = gateNow(l.gate)
		}
		if l.ietfx { // setHeaders' choice, made by newLaneMany
			setIETFXHeaders(w.Header(), &best.Limit.answer, best, now, 0, 0, 0, "", "", nil)
		} else {
			setHeaders(l.resp, w.Header(), best, now)
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
func laneManyAnswer(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, asks []Ask, out []Decision, now int64,
	d, best *Decision, rl *Lane, i int) {
	for i = 0; i < len(out); i++ {
		d = &out[i]
		if !d.Allowed && (best == nil || d.RetryAfter > best.RetryAfter) {
			best = d
		}
	}
	if best != nil && best.RetryAfter != Never {
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
func laneClassify(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, asks []Ask, out []Decision, v Verdict) {
	v = classify(l.gate, out)
	laneFinish(l, next, w, r, &v, answer(l.gate, w, r, asks, &v, 0))
}

// laneExempt reports whether r's client is in l's exempt networks.
func laneExempt(l *Lane, r *http.Request) bool {
	a, ok := (*ClientIP).Addr(l.exemptIP, r)
	return ok && containsAddr(l.exempt, a)
}

// serveLaneOne is ServeLane for one enforced limit of any algorithm in
// the in-memory store: Gate.Serve's own path, without its generality. It
// builds the key by laneKey4 rather than through KeySpec.Key, whose
// generality costs more under Yaegi. Its parameters after r are its
// variables, zero (see serveLaneTB).
func serveLaneOne(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request,
	key string, v Verdict, d *Decision, now int64) {
	key = laneKey4(l, r, "", nil)
	if key == "" { // MissingSkip
		next.ServeHTTP(w, r)
		return
	}
	d = &v.Decision
	now = take1(l.mem, l.limit, key, l.cost, d, 0, nil, noSlot, false, noState, nil, 0, 0)
	if !l.clock {
		now = 0
	}
	if !d.Allowed || d.Delay > 0 || !l.fast {
		// answer writes an admitted request's headers as setHeaders
		// does, and passes it on.
		laneOneAnswer(l, next, w, r, []Ask{{Limit: l.limit, Key: key, Cost: l.cost}}, &v, now)
		return
	}
	setIETFXHeaders(w.Header(), l.answer, d, now, 0, 0, 0, "", "", nil)
	next.ServeHTTP(w, r)
}

// laneOneAnswer finishes serveLaneOne for a request its limit rejected or
// delays: v holds the decision on asks at now (0 if not the gate's
// clock).
func laneOneAnswer(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, asks []Ask, v *Verdict, now int64) {
	d := &v.Decision
	if !d.Allowed && l.fastReject && d.RetryAfter != Never {
		laneReject(l, w, d.Remaining, int64(d.Reset), int64(d.Next), int64(d.RetryAfter), now, 0, 0, "", "", "", nil, nil, noVerdict)
		return
	}
	classify1(l.gate, v)
	laneFinish(l, next, w, r, v, answer(l.gate, w, r, asks, v, now))
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
// builds it) and MissingKey.Resolve are inline: under Yaegi each call of
// KeySpec.Key or Resolve costs a frame more than the lines it saves.
func laneAsks(l *Lane, r *http.Request, keys []string, asks []Ask, i int, key string, spec *KeySpec, a *LaneAsk, err error) []Ask {
	keys = make([]string, len(l.specs))
	for i = 0; i < len(keys); i++ {
		spec = l.specs[i]
		if spec.fixed {
			keys[i] = spec.constKey
			continue
		}
		key = r.RemoteAddr
		if spec.ipv4 && key != "" && key[0] != '[' {
			if _, err = parseAddrPort(key); err == nil {
				keys[i] = key[:lastIndexByte(key, ':')]
				continue
			}
		}
		keys[i], _ = (*KeySpec).Key(spec, r) // "" when missing
	}
	asks = make([]Ask, 0, len(l.asks))
	for i = 0; i < len(l.asks); i++ {
		a = &l.asks[i]
		if key = keys[a.Spec]; key == "" { // Resolve(key, true)
			if a.Missing != MissingShared {
				continue
			}
			key = missingSharedKey
		}
		asks = append(asks, Ask{Limit: a.Limit, Key: l.prefix + key, Cost: a.Cost})
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
// admission of tokenBucket and the headers of setHeaders (serveLaneTB).
// So is the common decision on Redis (serveLaneRedis).
// Everything else is in functions that it calls only when needed, since
// entering a function pays for its whole body; the tests prove every path
// identical to Gate.Serve's.
func ServeLane(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request) {
	switch {
	case l.tb:
		serveLaneTB(l, next, w, r, "", "", "", nil, 0, nil, noSlot, false, nil, 0, 0, 0, 0, 0, 0, nil, nil)
	case l.one:
		serveLaneOne(l, next, w, r, "", noVerdict, nil, 0)
	case l.rd:
		serveLaneRedis(l, next, w, r, "", nil, nil, nil, noTime, nil, noSum, nil, "", false, 0, 0, 0, 0, 0, 0, noFields, 0, noVerdict)
	default:
		serveLaneAny(l, next, w, r, nil, noVerdict)
	}
}
