package core

import (
	"context"
	"crypto/sha256"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/resp"
)

// newLaneRedis makes l, a lane whose gate has no in-memory store to take
// from, decide with serveLaneRedis when that path applies: one enforced
// limit on a RedisStore that has a RedisDirect and Redis's clock, no
// in-flight limit, a cost of 1 and the header set ietf and x of a limit
// whose answer texts are ready (the decisions RedisDirect sends, answered
// by setIETFXHeaders). It sets the fields of the limit that serveLaneRedis
// and laneKey read, as NewLane does for a lane that takes from memory.
func newLaneRedis(l *Lane, cfg LaneConfig) {
	g := cfg.Gate
	s := g.redis
	if s == nil || s.direct == nil || s.clock != nil || g.slots != nil || len(cfg.Asks) != 1 || g.cfg.Mode != Enforce {
		return
	}
	a := cfg.Asks[0]
	lim := a.Limit
	if a.Cost != 1 || lim.redis.take == "" || g.resp.Headers != headersIETFX || !lim.answer.ready || lim.answer.quota != lim.Rate.Quota {
		return
	}
	l.rd, l.limit, l.spec, l.cost, l.quota = true, lim, cfg.Specs[a.Spec], a.Cost, lim.Rate.Quota
	l.ipv4 = l.spec.ipv4
	if len(l.spec.parts) == 1 && l.spec.parts[0].kind == partClientIP {
		l.clientIP = l.spec.ip
	}
	l.shared = a.Missing == MissingShared
	l.direct, l.breaker, l.timeout, l.answer = s.direct, g.cfg.Breaker, g.cfg.Timeout, &lim.answer
	if b := g.cfg.Breaker; b != nil {
		l.bstate, l.bfails = &b.state, &b.fails
	}
	if cfg.Watch && cfg.Observe != nil {
		l.down = cfg.Down
		if l.down == nil {
			l.down = &alwaysDown
		}
	}
	l.take, l.hole, l.hole2 = lim.redis.take, lim.redis.hole, lim.redis.hole2
	// A rejection is laneReject's when its retry is known: the reply
	// says Never in more digits than serveLaneRedis reads.
	l.rejectHead = "1 "
	if lim.capacity < maxSFInteger {
		if setFastReject(l, lim, true); l.fastReject {
			l.rejectHead = "0 "
		}
	}
	if g.cfg.Clock == nil {
		l.sys = &g.systemClock
	}
}

// serveLaneRedis is ServeLane for a lane that newLaneRedis set up: the
// common decision on Redis written out, as serveLaneTB writes out the
// in-memory one. It builds the key (laneKey4), sends the take
// script's call that the limit encoded (gateTakeRedis' RedisDirect call)
// within the gate's timeout, reads the reply of an admission without
// delay, writes the headers with setIETFXHeaders and reports the verdict
// to the observer only when LaneConfig says it must. A rejection whose
// retry the reply gives is laneReject's, as an in-memory lane's is, when
// the lane's answers are (fastReject). Everything else
// takes the general path with its semantics: serveLaneAny before the
// call (no key, a key too long to send as is, a breaker not simply
// closed, no direct client), laneRedisSlow after it (a failed call, which
// gateTakeFailed retries or reports, and any other reply, which
// decodeDecisions reads).
//
// Its parameters after r are its variables, which ServeLane passes as
// zero values, and its standard library functions are package variables:
// see serveLaneTB.
func serveLaneRedis(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request,
	key string, err error, cl *resp.Client, ctx context.Context, start time.Time, cmd []byte, sum [sha256.Size]byte,
	reply interface{}, text string, ok bool, rem float64, p, q, j int, c byte, n time.Duration, f [redisReplyFields]time.Duration, now int64, v Verdict) {
	key = laneKey4(l, r, "", nil)
	if key == "" || len(key) > MaxKeyLength || l.bstate != nil && loadInt32(l.bstate) != breakerClosed {
		serveLaneAny(l, next, w, r, nil, noVerdict)
		return
	}
	l.direct.mu.Lock()
	cl = l.direct.client
	l.direct.mu.Unlock()
	if cl == nil {
		serveLaneAny(l, next, w, r, nil, noVerdict)
		return
	}
	// gateTakeRedis' call.
	start = timeNow()
	cmd = []byte(l.take)
	sum = sha256Sum([]byte(key))
	hexEncode(cmd[l.hole:], sum[:16])
	if l.hole2 != 0 { // a sliding window log's second key
		hexEncode(cmd[l.hole2:], sum[:16])
	}
	ctx = r.Context()
	if reply, err = resp.Run(cl, ctx, start, l.timeout, "EVALSHA", cmd, 0, noTime, noTime, false); err != nil {
		laneRedisSlow(l, next, w, r, key, ctx, start, reply, err)
		return
	}
	// decodeDecisions for the reply of an admission without delay,
	// "1 <remaining> <reset> <retry> 0 <next>", or with fastReject of a
	// rejection, which starts "0 ": the number remaining as
	// decodeAsk reads any (and decodeDecisions one with a fraction), by
	// parseFloat, which reads a whole one as decodeDecisions does; the
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
		if c = text[q] - '0'; c <= 9 {
			n = n*10 + time.Duration(c)
		} else if text[q] != ' ' || q == p || q-p > 15 || j == redisReplyFields-1 {
			break
		} else {
			f[j] = n
			n = 0
			j++
			p = q + 1
		}
	}
	if q != len(text) || j != redisReplyFields-1 || q == p || q-p > 15 || f[4] != 0 {
		laneRedisSlow(l, next, w, r, key, ctx, start, reply, nil)
		return
	}
	// gateDecide's report of a success to a breaker that is not simply
	// closed (another request's failure may have come meanwhile).
	if l.bstate != nil && (loadInt32(l.bstate) != breakerClosed || loadInt32(l.bfails) != 0) {
		gateReport(l.gate, l.breaker, ctx, nil, 0)
	}
	// answer's clock: gateNow, inline for the system clock.
	if l.sys != nil {
		now = int64(timeSince(l.sys.base))
		now += l.sys.wall
	} else {
		now = gateNow(l.gate)
	}
	if text[0] == '0' {
		laneRedisReject(l, w, rem, &f, n, now)
		return
	}
	v.Decision = Decision{Limit: l.limit, Allowed: true, Quota: l.quota, Remaining: rem, Reset: f[2], Next: n}
	setIETFXHeaders(w.Header(), l.answer, &v.Decision, now, 0, 0, 0, "", "", nil)
	if l.down != nil && loadInt32(l.down) != 0 {
		l.observe(&v)
	}
	next.ServeHTTP(w, r)
}

var (
	// loadInt32 is atomic.LoadInt32 as a package variable: see
	// serveLaneTB.
	loadInt32 = atomic.LoadInt32
	// alwaysDown is the Lane's down of a lane that observes every
	// verdict: never 0, never written.
	alwaysDown int32 = 1
)

// laneRedisReject answers, by laneReject, the rejection that serveLaneRedis
// read at now, whose fields 2 to 4 are in f and the last in next, with
// decodeDecisions' RetryAfter (at least 1). It is apart so that an
// admission does not pay for its values under Yaegi.
func laneRedisReject(l *Lane, w http.ResponseWriter, rem float64, f *[redisReplyFields]time.Duration, next time.Duration, now int64) {
	if f[3] == 0 {
		f[3] = 1
	}
	laneReject(l, w, rem, int64(f[2]), int64(next), int64(f[3]), now, 0, 0, "", "", "", nil, nil, noVerdict)
}

// laneRedisSlow finishes serveLaneRedis on the general path after the
// call of the limit's script on key, begun at start, returned reply and
// err: gateTakeRedis' handling of a failure (gateTakeFailed) or of its
// reply (decodeDecisions), then gateDecide's (gateDecided) and
// serveLaneAny's.
func laneRedisSlow(l *Lane, next http.Handler, w http.ResponseWriter, r *http.Request, key string, ctx context.Context, start time.Time, reply interface{}, err error) {
	asks := []Ask{{Limit: l.limit, Key: key, Cost: l.cost}}
	out := make([]Decision, 1)
	if err != nil {
		err = gateTakeFailed(l.gate.redis, ctx, start, l.timeout, asks, out, err)
	} else {
		err = decodeDecisions(reply, asks, out, "", false, nil, 0, 0, 0, 0, 0, 0, 0, 0, 0, noFields, nil)
	}
	v := gateDecided(l.gate, ctx, asks, out, err, 0)
	laneFinish(l, next, w, r, &v, answer(l.gate, w, r, asks, &v, 0))
}
