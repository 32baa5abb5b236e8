// Package sluicehttp rate-limits a Go service with sluice's engine, the
// one Caddy's http.handlers.sluice and the Traefik plugin run, configured
// with the limits the proxies take. A [Limiter] is two things:
//
//   - a [net/http] middleware ([Limiter.Handler]) that answers as the
//     proxies do (the same 429, the same rate-limit headers), keyed by
//     request parts or by a function of the request;
//   - a limiter for anything else (gRPC interceptors, jobs, queues):
//     [Limiter.Allow], [Limiter.Take] and [Limiter.Wait] on a key the
//     caller has, as golang.org/x/time/rate's Allow and Wait.
//
// In memory, or on Redis, where, given the same Redis and the same keys,
// it counts on the same counters as the proxies. A Redis that is down is
// an outage like any other, decided by the failure policy, never an error
// of New.
//
// Limits at the edge do not protect services that call each other
// directly: a service in a retry loop can exhaust another one the proxy
// never sees. A limiter in the service closes that gap:
//
//	lim, err := sluicehttp.New(sluicehttp.Config{
//		Limits: []sluicehttp.Limit{{Name: "api", Rate: "100/1m", Burst: 20}},
//	})
//	if err != nil { ... }
//	defer lim.Close()
//	http.ListenAndServe(addr, lim.Handler(next))
//
// # Sharing a limit with Caddy
//
// A limit counts a client under its name, its algorithm and its key, with
// a prefix that tells apart the handlers that define limits of the same
// name. A Caddy handler and a middleware share a limit when, on one Redis
// server and key prefix, the Caddy handler names a share group (`share
// <group>` in its sluice block, "share" in JSON) that is the middleware's
// Config.Share, and the zone and the limit have the same name, algorithm
// and key. Each side decides with its own rate and burst, so write those
// alike too. Every zone of the handler is in the group; the middleware's
// limits of other names count apart.
//
// The limiter is a thin adapter: the decisions, the waits, the headers
// and the answers are core.Gate's, the request keys keyspec.Spec's, and
// the Redis keys redisstore.Store's.
package sluicehttp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/await"
	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/hostkey"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/resp"
)

// Config configures a [Limiter]. Only Limits is required.
type Config struct {
	// Limits are checked in this order and are all-or-nothing: a request
	// that one of them rejects is charged to none. At least one; names
	// must be unique.
	Limits []Limit

	// Share is the share group whose counters the limits use, as Caddy's
	// `share <group>`: a Caddy handler of the group and this middleware
	// count a limit of the same name on the same Redis keys. Empty, the
	// limits share their counters with every middleware that sets no
	// Share on the same Redis server and prefix (the replicas of a
	// service), and with no proxy.
	Share string

	// Redis keeps the counters in a Redis server, shared by every
	// instance that uses it. Nil keeps them in this process's memory.
	Redis *Redis

	// TrustedProxies are the peers (addresses or CIDR prefixes, such as
	// "10.0.0.0/8") whose forwarding header names the client for the
	// key part client_ip; the header is read from the right, skipping
	// these proxies, so that a client cannot choose its key. Empty: the
	// client is the peer.
	TrustedProxies []string

	// ClientIPHeader is the forwarding header read from a trusted proxy:
	// "X-Forwarded-For" (the default), "Forwarded" (RFC 7239's for=), or
	// "X-Real-IP".
	ClientIPHeader string

	// OnStoreError is what happens to a request when Redis cannot decide
	// within Redis.Timeout and there is no Fallback: "allow" (the
	// default) lets it through, "deny" answers 429 with Retry-After: 1.
	OnStoreError string

	// Fallback "local" decides requests in this process's memory while
	// Redis fails, each limit's quota and burst divided by Instances,
	// instead of applying OnStoreError. Only with Redis.
	Fallback string

	// Instances is the number of instances sharing Redis, by which the
	// local fallback divides each quota and burst. Default 1; only with
	// Fallback.
	Instances int

	// Headers lists the rate-limit header families: "ietf" (RateLimit,
	// RateLimit-Policy), "legacy" (RateLimit-Limit, -Remaining, -Reset)
	// and "x" (X-RateLimit-*), or "off" alone. Empty means ietf and x.
	Headers []string

	// Body is the format of a 429 answer's body: "json" (the default),
	// "problem" (RFC 9457), "text" or "none".
	Body string

	// Mode is "enforce" (the default) or "dry_run", which decides and
	// counts every request but lets those it would reject through, and
	// writes no rate-limit headers.
	Mode string

	// RetryJitter, between 0 and 1, lengthens each Retry-After by a
	// random fraction of itself of at most this much, so that clients
	// rejected together do not retry together. Default 0.
	RetryJitter float64

	// Limited, when set, answers the requests that a limit rejects (or
	// that OnStoreError "deny" refuses) instead of the standard 429: it is
	// called with Retry-After and the rate-limit headers already set, and
	// writes the status and the body itself. [DecisionOf] gives it the
	// decision. Nil: the 429 of Body.
	Limited http.Handler

	// OnVerdict, when set, is called with every request that a limit
	// applied to and its verdict, before the request proceeds or after
	// its 429 was written: for logs and metrics (the verdict's Err is
	// Redis's error, if it failed). It must not write to the response.
	OnVerdict func(r *http.Request, v core.Verdict)
}

// Limit is one named limit, with the settings and defaults of a Caddy zone
// or a Traefik limit item.
type Limit struct {
	// Name identifies the limit in the RateLimit-Policy header, 429
	// bodies and store keys. Required and unique; printable ASCII without
	// quotes, backslashes, colons, braces or spaces.
	Name string

	// Rate is the quota of cost units per period, "<quota>/<period>":
	// "100/1m", "5/s", "10/1m30s", "2.5/s". Required unless MaxInFlight
	// is set.
	Rate string

	// Burst is the capacity in cost units (for token_bucket the bucket
	// size, for leaky_bucket the queue depth); zero means the quota, or
	// 1 when the quota is below 1. The window algorithms refuse it.
	Burst float64

	// Algorithm is token_bucket (the default), leaky_bucket,
	// fixed_window, sliding_window_log or sliding_window_counter.
	Algorithm string

	// Key lists the request parts the key is built from, in order:
	// "client_ip" (the default, when empty), "header:<Name>", "host",
	// "method", "path", "query:<name>", "cookie:<name>" or
	// "const:<value>" (one counter for every request). A Caddy zone
	// builds the same key from {client_ip},
	// {http.request.header.<Name>}, and so on. A part with several
	// values (a repeated header) takes the first, as Header.Get does.
	Key []string

	// KeyFunc, when set, returns the request's key instead of the parts
	// of Key (which must then be empty): a user or a tenant that an
	// earlier handler put in the request's context, say. ok false means
	// the request has no key (see OnMissingKey). A Caddy zone or a Traefik
	// limit shares the counters of the keys that it builds alike, such as
	// an API key read from the same header.
	KeyFunc func(r *http.Request) (key string, ok bool)

	// OnMissingKey is what happens to a request without a key (a part
	// missing or empty): "skip" (the default) exempts it from the limit,
	// "shared" counts all such requests under one key of their own.
	OnMissingKey string

	// Cost is what each request is charged: a positive number, default
	// 1, at most the limit's capacity. With CostHeader or CostBytes it is
	// the estimate charged when a request is admitted, and zero charges
	// nothing before the response.
	Cost float64

	// MaxDelay is, for leaky_bucket, the longest a request is held to
	// pace it (zero: as long as the queue allows); for token_bucket, how
	// long a request may wait for its missing tokens instead of being
	// rejected (zero: not at all).
	MaxDelay time.Duration

	// Lease, with Redis, lets this service take up to Lease of a key's
	// capacity in one script call and admit requests from it locally, for
	// a key too hot for a call per request (a global limit), as a Caddy
	// zone's lease does; the instances together then admit at most
	// B + r·T + instances × Lease in any interval T. Zero: every request is
	// decided in Redis. Not with leaky_bucket.
	Lease float64
	// Penalty, when positive, holds out a key that this limit refuses:
	// from the refusal, every request of the key is refused (429, with
	// the time left as Retry-After) for Penalty, whatever the limit's
	// state, in every instance sharing the store; then its state is as
	// time left it. Refusals during it do not extend it. The Caddy
	// module's and the Traefik plugin's option of the same name. Not with
	// Lease.
	Penalty time.Duration
	// CountStatus, when set, limits only the responses of these statuses,
	// each a code ("401") or a class ("4xx"): a request over the limit is
	// refused as always, and an admitted one whose response has another
	// status is given its charge back, exactly. A request cut short keeps
	// its charge: the client gone, or a panic in the next handler. The
	// Caddy module's count_status and the Traefik plugin's countStatus.
	// Not with Lease.
	CountStatus []string
	// CostHeader, when set, takes a request's cost from its response:
	// the number in this response header (its first value), such as the
	// tokens an LLM upstream says it used. The request is charged Cost (an
	// estimate, which may be zero) when admitted, and the difference when
	// the next handler returns, which may leave its key in debt beyond
	// the capacity: its next requests are refused, with a truthful
	// Retry-After, until the rate has repaid it. A header missing, not a
	// number, negative, NaN or infinite leaves the estimate charged; a
	// value above the capacity counts as the capacity. The header is read
	// when the next handler returns, so a trailer counts. A request cut
	// short keeps the estimate; one whose next handler panics once its
	// response began (as httputil.ReverseProxy aborts a response whose
	// client left) is charged the response's cost too, if it is above the
	// estimate. The Caddy module's cost_header and the Traefik plugin's
	// costHeader. Not with CostBytes or Lease.
	CostHeader string
	// CostBytes takes a request's cost from its response as CostHeader
	// does, but as the bytes of the response's body the next handler
	// wrote. The Caddy module's cost_bytes and the Traefik plugin's
	// costBytes.
	CostBytes bool

	// MaxInFlight, when positive, is the most requests of one key in
	// progress at once: a request holds its slot until the next handler
	// returns. With Redis, a slot is a lease that expires Redis.LeaseTTL
	// after it was taken or renewed.
	MaxInFlight int

	// IPv4Prefix and IPv6Prefix group the clients of the key part
	// client_ip by network: 24 keys an IPv4 client by its /24, 64 an IPv6
	// client by its /64. Zero keeps the full address.
	IPv4Prefix, IPv6Prefix int

	// Match, when set, restricts the limit to the requests for which it
	// returns true.
	Match func(*http.Request) bool
}

// Redis locates the Redis server that keeps the counters (a standalone
// server or a master; not a Cluster or Sentinels).
type Redis struct {
	// Addr is the server's "host:port". Required.
	Addr string
	// Username and Password authenticate: AUTH Password, or AUTH Username
	// Password for an ACL user.
	Username, Password string
	// DB is the database number, default 0.
	DB int
	// TLS, when set, connects over TLS with this configuration.
	TLS *tls.Config
	// Prefix begins every Redis key: the same as the proxies' to share
	// their counters. Empty means "sluice:", their default.
	Prefix string
	// ReadableKeys puts the clients' keys in the Redis key names instead
	// of their digests, for debugging; the proxies must set it alike to
	// share counters.
	ReadableKeys bool
	// Timeout bounds one decision, connecting included; past it the
	// request is decided by the fallback or OnStoreError. Default 100ms.
	Timeout time.Duration
	// LeaseTTL is how long the lease of an in-flight slot lives unless
	// renewed: how long a crashed instance's slots stay taken. Default
	// 35s; set it a few seconds above the longest request.
	LeaseTTL time.Duration
}

// Limiter limits the requests of the handlers it wraps and the calls of
// Take, Allow and Wait. It is safe for concurrent use; every handler that
// Handler returns shares its counters.
type Limiter struct {
	gate      *core.Gate
	limits    []limit
	onVerdict func(*http.Request, core.Verdict)
	limited   http.Handler
	inFlight  bool       // a limit has MaxInFlight, which Take cannot hold
	counted   bool       // a limit must see its response (core.AnswerCounts)
	client    *resp.Lazy // nil in memory
}

// limit is a Limit as a request needs it.
type limit struct {
	limit   *model.Limit
	key     *keyspec.Spec
	keyFunc func(*http.Request) (string, bool)
	missing keyspec.MissingKey
	cost    float64
	match   func(*http.Request) bool
	prefix  string // hostkey.SharePrefix(Config.Share)
}

// New checks cfg and returns its limiter. With Redis it does not wait for
// the server: the connections are made on demand and made again after a
// failure, and while Redis is away requests are decided by Fallback or
// OnStoreError, so a service starts during a Redis outage. Errors name the
// field at fault, as in `limits[0] (api): rate: ...`.
func New(cfg Config) (*Limiter, error) {
	l, gc, err := build(&cfg)
	if err != nil {
		return nil, fmt.Errorf("sluicehttp: %w", err)
	}
	if cfg.Redis != nil {
		if gc.Store, err = l.connect(cfg.Redis); err != nil {
			return nil, fmt.Errorf("sluicehttp: redis: %w", err)
		}
		gc.Timeout = cfg.Redis.Timeout
		if gc.Timeout == 0 {
			gc.Timeout = redisstore.DefaultTimeout
		}
		gc.LeaseTTL = cfg.Redis.LeaseTTL
		gc.Breaker = new(core.Breaker)
	}
	if l.gate, err = core.NewGate(gc); err != nil {
		l.Close()
		return nil, fmt.Errorf("sluicehttp: %w", err)
	}
	return l, nil
}

// build translates cfg into a limiter without a gate and the gate's
// configuration without a Redis store.
func build(cfg *Config) (*Limiter, core.GateConfig, error) {
	var gc core.GateConfig
	if len(cfg.Limits) == 0 {
		return nil, gc, errors.New("limits: at least one is required")
	}
	var err error
	if gc.Responder, err = responder(cfg); err != nil {
		return nil, gc, err
	}
	if gc.Mode, err = core.ParseMode(cfg.Mode); err != nil {
		return nil, gc, err
	}
	if gc.OnStoreError, err = core.ParseStoreErrorPolicy(cfg.OnStoreError); err != nil {
		return nil, gc, err
	}
	if err := fallback(cfg, &gc); err != nil {
		return nil, gc, err
	}
	trusted, err := clientip.ParsePrefixes(cfg.TrustedProxies)
	if err != nil {
		return nil, gc, fmt.Errorf("trusted_proxies: %w", err)
	}
	prefix := hostkey.SharePrefix(cfg.Share)
	l := &Limiter{onVerdict: cfg.OnVerdict, limited: cfg.Limited, limits: make([]limit, len(cfg.Limits))}
	gc.MaxCost = make(map[*model.Limit]float64, len(cfg.Limits))
	for i := range cfg.Limits {
		cl := &cfg.Limits[i]
		ip := &clientip.Strategy{TrustedProxies: trusted, Header: cfg.ClientIPHeader, IPv4Prefix: cl.IPv4Prefix, IPv6Prefix: cl.IPv6Prefix}
		if l.limits[i], err = newLimit(cl, ip, prefix); err != nil {
			return nil, gc, fmt.Errorf("limits[%d] (%s): %w", i, cl.Name, err)
		}
		gc.Limits = append(gc.Limits, l.limits[i].limit)
		gc.MaxCost[l.limits[i].limit] = l.limits[i].cost
		l.inFlight = l.inFlight || cl.MaxInFlight > 0
	}
	l.counted = core.AnswerCounts(gc.Limits)
	// Limited writes the answer: the gate sets the headers and Retry-After
	// and leaves the status line and the body.
	gc.Responder.Defer = cfg.Limited != nil
	return l, gc, nil
}

// newLimit builds the limit l, whose clients' keys begin with prefix and
// whose client addresses ip reads.
func newLimit(l *Limit, ip *clientip.Strategy, prefix string) (limit, error) {
	cl := &model.Limit{Name: l.Name, Algorithm: model.Algorithm(l.Algorithm), Burst: l.Burst, MaxDelay: l.MaxDelay, Lease: l.Lease, Penalty: l.Penalty, MaxInFlight: l.MaxInFlight,
		CostHeader: l.CostHeader, CostBytes: l.CostBytes}
	if l.Rate == "" && l.MaxInFlight == 0 {
		return limit{}, errors.New("rate: required (or max_in_flight)")
	}
	if l.Rate != "" {
		rate, err := model.ParseRate(l.Rate)
		if err != nil {
			return limit{}, err
		}
		cl.Rate = rate
	}
	set, err := model.ParseStatusSet(l.CountStatus)
	if err != nil {
		return limit{}, err
	}
	cl.CountStatus = set
	if err := cl.Validate(); err != nil {
		// The caller names the limit.
		return limit{}, err.(*model.LimitError).Err
	}
	if l.KeyFunc != nil && len(l.Key) > 0 {
		return limit{}, errors.New("key: set Key or KeyFunc, not both")
	}
	key, err := keyspec.Parse(l.Key, ip)
	if err != nil {
		return limit{}, err
	}
	missing, err := keyspec.ParseMissingKey(l.OnMissingKey)
	if err != nil {
		return limit{}, err
	}
	cost := l.Cost
	if cost == 0 {
		cost = cl.DefaultCost()
	}
	if !(cost >= 0) {
		return limit{}, &model.FieldError{Field: "cost", Value: strconv.FormatFloat(cost, 'g', -1, 64), Reason: "must be positive"}
	}
	if err := cl.CheckCost(cost); err != nil {
		return limit{}, err
	}
	return limit{limit: cl, key: key, keyFunc: l.KeyFunc, missing: missing, cost: cost, match: l.Match, prefix: prefix}, nil
}

// responder builds the answers' configuration.
func responder(cfg *Config) (answer.Responder, error) {
	headers, err := answer.ParseHeaderSet(cfg.Headers)
	if err != nil {
		return answer.Responder{}, err
	}
	body, err := answer.ParseBodyFormat(cfg.Body)
	if err != nil {
		return answer.Responder{}, err
	}
	r := answer.Responder{Headers: headers, Body: body, Jitter: cfg.RetryJitter}
	if err := r.Validate(); err != nil {
		return answer.Responder{}, err
	}
	return r, nil
}

// fallback sets the local fallback of gc from cfg.
func fallback(cfg *Config, gc *core.GateConfig) error {
	if cfg.Fallback != "" && cfg.Fallback != "local" {
		return fmt.Errorf("fallback %q: want local or nothing", cfg.Fallback)
	}
	n := cfg.Instances
	if cfg.Fallback == "local" && n == 0 {
		n = 1 // the default of one instance
	}
	if err := model.CheckFallback(cfg.Fallback == "local", n, cfg.Redis == nil); err != nil {
		return err
	}
	if cfg.Fallback == "" {
		return nil
	}
	st, err := core.NewMemoryStore(core.MemoryConfig{})
	if err != nil {
		return err
	}
	gc.Fallback, gc.Instances = st, n
	return nil
}

// connect makes l's Redis client, which connects on demand, and returns
// the store on it.
func (l *Limiter) connect(r *Redis) (model.Store, error) {
	if err := redisstore.CheckDB(r.DB, false); err != nil {
		return nil, err
	}
	if r.Timeout < 0 || r.LeaseTTL < 0 {
		return nil, errors.New("timeout and lease_ttl: must not be negative")
	}
	if r.Addr == "" {
		return nil, errors.New("addr: required")
	}
	opts := resp.Options{Addr: r.Addr, Username: r.Username, Password: r.Password, DB: r.DB, TLS: r.TLS}
	c := resp.NewLazy(resp.Target{Options: opts, Name: r.Addr}, nil, nil)
	st, err := redisstore.New(redisstore.Config{Client: c, Prefix: r.Prefix, ReadableKeys: r.ReadableKeys})
	if err != nil {
		c.Close()
		return nil, err
	}
	l.client = c
	return st, nil
}

// Close closes the Redis connections, if any. Requests served afterwards
// connect again.
func (l *Limiter) Close() error {
	if l.client == nil {
		return nil
	}
	return l.client.Close()
}

// Handler returns next limited by l: a request that a limit rejects is
// answered 429 (or by Config.Limited) and never reaches next; an admitted
// one gets the rate-limit headers of the limit closest to exhaustion,
// waits out any delay of its limits (leaky_bucket, token_bucket with
// MaxDelay), and holds its in-flight slots until next returns. The
// ResponseWriter reaches next untouched.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return &handler{l: l, next: next}
}

type handler struct {
	l    *Limiter
	next http.Handler
}

// ServeHTTP asks every limit that applies to r and lets Gate.Serve answer.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	asks := h.l.asks(r)
	if len(asks) == 0 {
		h.next.ServeHTTP(w, r)
		return
	}
	v, ok := h.l.gate.Serve(w, r, asks)
	if h.l.onVerdict != nil {
		h.l.onVerdict(r, v)
	}
	if !ok {
		if h.l.limited != nil && (v.Outcome == core.OutcomeRejected || v.Outcome == core.OutcomeStoreErrorDeny) {
			h.l.limited.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decisionKey{}, decision(v))))
		}
		return
	}
	defer v.Slots.Release() // nil-safe; also when next panics
	if h.l.counted {
		h.l.gate.ServeAnswered(h.next, w, r, asks, &v)
		return
	}
	h.next.ServeHTTP(w, r)
}

// asks returns r's ask of every limit that applies to it.
func (l *Limiter) asks(r *http.Request) []model.Ask {
	asks := make([]model.Ask, 0, len(l.limits))
	for i := range l.limits {
		lim := &l.limits[i]
		if lim.match != nil && !lim.match(r) {
			continue
		}
		var key string
		var ok bool
		if lim.keyFunc != nil {
			key, ok = lim.keyFunc(r)
			key, ok = callerKey(key, ok)
		} else {
			key, ok = lim.key.Key(r)
		}
		if key, ok = hostkey.Resolve(lim.missing, key, ok); !ok {
			continue
		}
		asks = append(asks, model.Ask{Limit: lim.limit, Key: lim.prefix + key, Cost: lim.cost})
	}
	return asks
}

// callerKey makes a key that a caller gave (KeyFunc, Take) a built key, as
// a request part's value is made one (hostkey.Key); an empty key is a
// missing one.
func callerKey(key string, ok bool) (string, bool) {
	if !ok || key == "" {
		return "", false
	}
	return hostkey.Key(key), true
}

// Decision is a Limiter's answer for one request or one Take.
type Decision struct {
	// Allowed reports whether the cost was admitted, charged to every
	// limit. In dry_run mode it is always true; when Redis failed, it is
	// what Fallback or OnStoreError decided.
	Allowed bool
	// Limit names the limit reported: among those that refused, the one
	// asking for the longest wait; otherwise the one closest to
	// exhaustion. Empty when Redis failed without a fallback.
	Limit string
	// Remaining is the cost that Limit could still admit now.
	Remaining float64
	// Reset is the time until Limit is whole again.
	Reset time.Duration
	// RetryAfter, when not Allowed, is the time until the same cost would
	// be admitted if nothing else happened, or -1 when it never would (the
	// cost is above a limit's capacity).
	RetryAfter time.Duration
	// Delay, when Allowed, is how long the caller must wait before acting
	// on the admission: a leaky_bucket's pacing, or a token_bucket's
	// MaxDelay. Take leaves the wait to its caller; Wait waits.
	Delay time.Duration
}

// decision is v as a Decision.
func decision(v core.Verdict) Decision {
	d := Decision{
		Allowed:    v.Outcome == core.OutcomeAllowed || v.Outcome == core.OutcomeDryRunRejected || v.Outcome == core.OutcomeStoreErrorAllow,
		Remaining:  v.Decision.Remaining,
		Reset:      v.Decision.Reset,
		RetryAfter: v.Decision.RetryAfter,
		Delay:      v.Delay,
	}
	if v.Decision.Limit != nil {
		d.Limit = v.Decision.Limit.Name
	}
	if d.Allowed {
		d.RetryAfter = 0
	} else if d.RetryAfter == model.Never {
		d.RetryAfter = -1
	}
	return d
}

// decisionKey is the context key of the decision that Limited answers.
type decisionKey struct{}

// DecisionOf returns the decision of the rejected request that
// Config.Limited is answering, and false for any other request.
func DecisionOf(r *http.Request) (Decision, bool) {
	d, ok := r.Context().Value(decisionKey{}).(Decision)
	return d, ok
}

// ErrInFlight is Take's, Allow's and Wait's error for a limiter with a
// limit of MaxInFlight: a slot is held while a request is in progress,
// which only Handler knows.
var ErrInFlight = errors.New("sluicehttp: in-flight limits (MaxInFlight) apply to Handler's requests only")

// Take asks every limit of l for cost units of key's quota, at once and
// all-or-nothing, and returns the decision without waiting: an admitted
// cost is charged, and the caller acts after d.Delay. key is what the
// limits count under, as a request's key would be (an API key, a user,
// a tenant); the limits' Key, KeyFunc, Match and Cost are for requests and
// are not used. When Redis fails, d is the decision of Fallback or
// OnStoreError and err is Redis's error: d is usable either way. Take
// refuses an empty key and a cost that is not positive.
func (l *Limiter) Take(ctx context.Context, key string, cost float64) (d Decision, err error) {
	_, v, err := l.take(ctx, key, cost)
	if err != nil {
		return Decision{}, err
	}
	return decision(v), v.Err
}

// take is Take that also returns the asks and the verdict, for a refund.
func (l *Limiter) take(ctx context.Context, key string, cost float64) ([]model.Ask, core.Verdict, error) {
	if l.inFlight {
		return nil, core.Verdict{}, ErrInFlight
	}
	if !(cost > 0) {
		return nil, core.Verdict{}, fmt.Errorf("sluicehttp: cost %v: must be positive", cost)
	}
	k, ok := callerKey(key, true)
	if !ok {
		return nil, core.Verdict{}, errors.New("sluicehttp: empty key")
	}
	asks := make([]model.Ask, len(l.limits))
	for i := range l.limits {
		asks[i] = model.Ask{Limit: l.limits[i].limit, Key: l.limits[i].prefix + k, Cost: cost}
	}
	return asks, l.gate.Decide(ctx, asks), nil
}

// Allow reports whether one unit of key's quota may be spent now, and
// spends it if so. An admission that would have to wait (a limit's Delay)
// is given back and reported as false: use Wait to be paced.
func (l *Limiter) Allow(ctx context.Context, key string) bool {
	asks, v, err := l.take(ctx, key, 1)
	if err != nil {
		return false
	}
	d := decision(v)
	if d.Allowed && d.Delay > 0 {
		l.gate.Refund(asks, &v)
		return false
	}
	return d.Allowed
}

// Wait spends cost units of key's quota, waiting as long as the limits
// ask: for a refused cost, until it would be admitted, then asking again;
// for an admitted one, its Delay. It returns ctx's error if ctx ends
// first, giving back an admission it was waiting out, and an error at
// once when the wait would outlast ctx's deadline or the cost can never
// be admitted.
func (l *Limiter) Wait(ctx context.Context, key string, cost float64) error {
	for {
		asks, v, err := l.take(ctx, key, cost)
		if err != nil {
			return err
		}
		d := decision(v)
		wait := d.Delay
		if !d.Allowed {
			wait = d.RetryAfter
			if wait < 0 {
				return fmt.Errorf("sluicehttp: cost %v of key %q exceeds limit %s's capacity", cost, key, d.Limit)
			}
			if wait < time.Millisecond {
				wait = time.Millisecond // never spin
			}
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			if d.Allowed {
				l.gate.Refund(asks, &v)
			}
			return fmt.Errorf("sluicehttp: waiting %v for key %q would exceed the context's deadline", wait, key)
		}
		if wait > 0 && !await.Sleep(ctx, wait) {
			if d.Allowed {
				l.gate.Refund(asks, &v)
			}
			return ctx.Err()
		}
		if d.Allowed {
			return nil
		}
	}
}
