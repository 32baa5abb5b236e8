// Package floor is a Traefik plugin that measures about the least a token
// bucket answering with sluice's five rate-limit headers costs under Yaegi.
//
// It keeps one theoretical arrival time in integer nanoseconds per client,
// in one map under one mutex, keyed by the client address up to its port as
// net/http writes it, and on an admission writes RateLimit-Policy,
// RateLimit and the X-RateLimit trio with the values sluice writes for the
// same limit. It is shaped the way sluice's hot path is (its variables are
// parameters, the standard library is called through package variables),
// so that nothing but the work itself is counted.
//
// It has none of sluice's guarantees: it does not check the address, holds
// a state for every client it ever saw, takes one lock for all of them,
// has no fractional costs and answers a rejection with a bare 429. It
// exists only to be measured beside sluice, by bench/yaegi and
// bench/traefik/run.sh: what sluice costs above it is the price of those
// guarantees under the interpreter.
package floor

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is the limit: Average requests per second, Burst at once.
type Config struct {
	Average int64
	Burst   int64
}

// CreateConfig returns an empty configuration.
func CreateConfig() *Config { return &Config{} }

type handler struct {
	next      http.Handler
	mu        sync.Mutex
	tat       map[string]int64 // per client, since base
	base      time.Time
	wall      int64 // base in ns since the epoch
	emission  int64 // ns per token
	tau       int64 // ns of the whole burst
	policy    string
	limitText string
}

// New returns the plugin's handler in front of next.
func New(ctx context.Context, next http.Handler, config *Config, name string) (http.Handler, error) {
	if config.Average < 1 || config.Burst < 1 {
		return nil, errBadLimit
	}
	h := &handler{next: next, tat: map[string]int64{}, base: time.Now()}
	h.wall = h.base.UnixNano()
	h.emission = int64(time.Second) / config.Average
	if h.emission < 1 {
		h.emission = 1
	}
	h.tau = h.emission * config.Burst
	h.limitText = strconv.FormatInt(config.Average, 10)
	h.policy = `"default";q=` + h.limitText + ";w=1"
	return h, nil
}

type badLimit struct{}

func (badLimit) Error() string { return "floor: average and burst must be at least 1" }

var errBadLimit error = badLimit{}

// Constants of other packages, as constants of this one: under Yaegi a
// constant of another package takes a slot of every call's frame.
const (
	second                = int64(time.Second)
	statusTooManyRequests = http.StatusTooManyRequests
)

// The standard library functions of serve, as package variables: under
// Yaegi a selector of another package takes a slot of every call's frame.
var (
	fmtInt        = strconv.FormatInt
	lastIndexByte = strings.LastIndexByte
	timeSince     = time.Since
)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serve(h, w, r, "", "", 0, 0, 0, nil, nil)
}

// serve admits or rejects r. Its parameters after r are its variables,
// passed as zero: under Yaegi a parameter costs its slot, a := one more
// allocation each time it runs.
func serve(h *handler, w http.ResponseWriter, r *http.Request,
	key, remText string, now, tat, t int64, vals []string, hd http.Header) {
	key = r.RemoteAddr
	key = key[:lastIndexByte(key, ':')+1] // up to the port
	now = int64(timeSince(h.base))
	h.mu.Lock()
	tat = h.tat[key]
	if tat < now {
		tat = now
	}
	tat += h.emission
	tat -= now // from here on, the deficit in ns
	if tat > h.tau {
		h.mu.Unlock()
		w.WriteHeader(statusTooManyRequests)
		return
	}
	h.tat[key] = now + tat
	h.mu.Unlock()
	remText = fmtInt((h.tau-tat)/h.emission, 10)
	// t: the seconds to the next whole token.
	t = tat % h.emission
	if t == 0 {
		t = h.emission
	}
	t += second - 1
	t /= second
	// X-RateLimit-Reset: the second the bucket is whole again.
	tat += second - 1
	tat /= second
	now += h.wall
	now /= second
	now += tat
	vals = []string{h.policy, `"default";r=` + remText + ";t=" + fmtInt(t, 10), h.limitText, remText, fmtInt(now, 10)}
	hd = w.Header()
	hd["Ratelimit-Policy"] = vals[0:1:1]
	hd["Ratelimit"] = vals[1:2:2]
	hd["X-Ratelimit-Limit"] = vals[2:3:3]
	hd["X-Ratelimit-Remaining"] = vals[3:4:4]
	hd["X-Ratelimit-Reset"] = vals[4:5:5]
	h.next.ServeHTTP(w, r)
}
