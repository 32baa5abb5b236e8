package caddymodule

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/hostkey"
	"github.com/sluicehq/sluice/core/inspect"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/telemetry"
)

// clientIPKey is the default key template: the client's address (see
// Zone.clientKey). The Caddyfile adapter rewrites it to clientIPVarKey,
// the placeholder that exists at run time; both mean the address.
const (
	clientIPKey    = "{client_ip}"
	clientIPVarKey = "{http.vars.client_ip}"
)

// Zone is one named rate limit of a [Handler].
type Zone struct {
	// Name identifies the zone in the RateLimit-Policy header, 429 bodies,
	// logs, metrics and store keys. Required and unique within the
	// handler; it must not contain quotes, backslashes, colons, braces or
	// line breaks.
	Name string `json:"name,omitempty"`

	// Key is the template of the key that identifies a client within the
	// zone: any text with Caddy placeholders, such as
	// "{http.request.header.X-API-Key}" or
	// "{http.vars.client_ip} {http.request.host}". Default "{client_ip}",
	// the client's address: the peer's, or, from a peer in the server's
	// trusted_proxies, the one its client_ip_headers name, read from the
	// right so that a client cannot choose it (see docs/caddy.md);
	// "{http.vars.client_ip}" alone is the same. (Inside a template of
	// several placeholders, {http.vars.client_ip} is Caddy's own value,
	// which without trusted_proxies_strict is the leftmost
	// X-Forwarded-For entry: the client's choice.) A request header's,
	// query parameter's or cookie's placeholder
	// ({http.request.header.*}, {http.request.uri.query.*},
	// {http.request.cookie.*}) is read as Go's net/http reads it, and as
	// Traefik and sluicehttp key: of a header on several lines or a
	// parameter or cookie given several times, the first value (not
	// Caddy's comma-joined one, which a client could change by adding a
	// value), a cookie's name in its exact letter case. A request
	// for which any placeholder of Key is empty or unknown has no key, and
	// is treated as OnMissingKey says. A key without placeholders is one
	// counter shared by every request (a global limit). With two
	// placeholders or more, each placeholder and text is expanded on its
	// own and the values are joined with their lengths, so that values
	// holding spaces cannot make two clients one ("alice bob" and "acme"
	// is not "alice" and "bob acme"). Keys longer than 128 bytes are
	// stored as a digest.
	Key string `json:"key,omitempty"`

	// Rate is the quota of cost units per period, written
	// "<quota>/<period>": the period is a unit (ms, s, m, h or d) or a Go
	// duration, as in "100/m", "5/s", "10/1m30s" or "2.5/s". Required
	// unless MaxInFlight is set; a zone without a rate limits only the
	// requests in flight.
	Rate string `json:"rate,omitempty"`

	// MaxInFlight, when positive, is the most requests of one key in
	// progress at once: from the moment the zone admits a request until
	// the handlers after sluice return (also when they panic or the
	// client leaves). A request that finds every slot taken is answered
	// 429 with Retry-After: 1 and is charged to no zone. With a Redis
	// store, each slot is a lease that expires the store's LeaseTTL after
	// it was taken or last renewed.
	MaxInFlight int `json:"max_in_flight,omitempty"`

	// Burst is the capacity in cost units: for token_bucket the bucket
	// size, for leaky_bucket the queue depth (the request being served
	// included). Zero, the field left out, means the quota, or 1 when the
	// quota is below 1 (rate 0.5/s: one request every two seconds); the
	// Caddyfile refuses burst 0, which Traefik reads as 1. The window
	// algorithms take their capacity from the quota, which must then be at
	// least 1 (write 1/2s, not 0.5/s), and refuse a burst.
	Burst float64 `json:"burst,omitempty"`

	// Algorithm is one of token_bucket (the default), leaky_bucket,
	// fixed_window, sliding_window_log (quota at most 10000) or
	// sliding_window_counter.
	Algorithm string `json:"algorithm,omitempty"`

	// Cost is what a request is charged: a positive number (default 1),
	// or a placeholder such as "{http.request.header.X-Cost}" evaluated
	// per request. A placeholder that does not evaluate to a positive
	// finite number charges 1. A placeholder must come from a trusted
	// source (a header set by an upstream handler, not by the client): a
	// client that chooses its own cost can make its requests nearly free.
	// With CostHeader, CostBytes or ResponseCost it is the estimate
	// charged when the request is admitted, before its response says
	// what it cost: then it may be 0, the default.
	Cost caddyhttp.WeakString `json:"cost,omitempty"`

	// MaxDelay is, for leaky_bucket, the longest a request is held to
	// pace it at the rate rather than rejected; zero (the default) holds
	// requests as long as the queue (Burst) allows. For token_bucket it is
	// how long a request may wait for its missing tokens instead of being
	// rejected (zero, the default: not at all), as Traefik's rateLimit
	// does. Other algorithms refuse it.
	MaxDelay caddy.Duration `json:"max_delay,omitempty"`

	// Lease, with a Redis store, is how much of a key's capacity this
	// Caddy may take from Redis in one script call and then spend
	// locally, for a key so hot that one call per request costs too much
	// (a global limit, a tenant's shared quota). Each lease is sized by
	// the key's demand on this Caddy, at most Lease, and what is left of it
	// goes back to Redis within half a second. Over any interval T the
	// instances together admit at most what Redis would, burst + rate·T,
	// plus Lease each. Zero, the default, decides every request in Redis.
	// Only with a Redis store; not with leaky_bucket; at most the burst.
	Lease float64 `json:"lease,omitempty"`

	// Penalty holds out a key that the zone refuses: from that refusal,
	// every request of the key is refused (429, Retry-After the time
	// left) for this long, whatever the zone's state, in every instance
	// sharing the store; then its state is as time left it. Refusals
	// during a penalty do not extend it. Zero, the default, holds no one
	// out. Not with lease.
	Penalty caddy.Duration `json:"penalty,omitempty"`

	// CountStatus limits only the responses of these statuses, each a
	// code ("401") or a class ("4xx"): a request over the limit is
	// refused before the upstream sees it, and an admitted one whose
	// response has another status is given its charge back, exactly. A
	// request cut short keeps its charge (the client gone, a panic); an
	// upstream failure counts by the status Caddy answers (502, 504).
	// Absent counts every request. Not with lease.
	CountStatus []string `json:"count_status,omitempty"`

	// CostHeader takes a request's cost from its response: the number
	// in this response header (its first value, spaces trimmed), such
	// as the tokens an LLM upstream says it used. The request is
	// charged Cost (an estimate, default 0) when admitted, and the
	// difference when the response comes, which may leave its key in
	// debt beyond the burst: its next requests are refused, with a
	// truthful Retry-After, until the rate has repaid it. A header
	// missing, not a number, negative, NaN or infinite leaves the
	// estimate charged; a value above the burst counts as the burst. A
	// response that CountStatus does not count is given back the
	// estimate. The header is read once the response has ended, so a
	// trailer counts. A request cut short keeps the estimate (a panic
	// before the response, an upgrade); one cut short once its response
	// began (the client gone, the upstream broken off, and
	// reverse_proxy's abort) is charged the response's cost too, when it
	// is above the estimate. Not with cost_bytes, lease or a zone without
	// a rate.
	CostHeader string `json:"cost_header,omitempty"`

	// CostBytes takes a request's cost from its response as CostHeader
	// does, but as the bytes of the response's body that the handlers
	// after sluice wrote.
	CostBytes bool `json:"cost_bytes,omitempty"`

	// ResponseCost takes a request's cost from its response as
	// CostHeader does, but as the number that this placeholder template
	// gives once the handlers after sluice have returned, such as
	// "{http.response.header.X-Tokens-Used}", "{http.vars.cost}" set by
	// a later handler, or "{http.response.size}". Then
	// {http.response.status} and {http.response.size} are the status and
	// body's bytes the handlers after sluice wrote, as in the access log
	// (status 0 when they wrote none). A value that is not a number
	// (an unknown placeholder, a header on several lines, which Caddy
	// joins with commas) leaves the estimate charged, as CostHeader's.
	// It must hold a placeholder; not with cost_header, cost_bytes or
	// lease.
	ResponseCost string `json:"response_cost,omitempty"`

	// MatchRaw restricts the zone to the requests that match every one of
	// these matchers; the zone is skipped for other requests. Absent means
	// every request the handler sees.
	MatchRaw caddy.ModuleMap `json:"match,omitempty" caddy:"namespace=http.matchers"`

	// IPv4Prefix, with the key {client_ip} (the default), keys IPv4 clients by
	// their network of this many bits (24: one counter per /24) instead
	// of their full address. Zero or 32 means the full address.
	IPv4Prefix int `json:"ipv4_prefix,omitempty"`

	// IPv6Prefix, with the key {client_ip} (the default), keys IPv6 clients by
	// their network of this many bits (64 is usual: one counter per /64,
	// what one subscriber typically gets). Zero or 128 means the full
	// address.
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`

	// OnMissingKey is what happens to a request without a key: "skip"
	// (the default) exempts it from this zone, "shared" counts all such
	// requests under one key of their own. With skip, a client that leaves
	// out a header, cookie or query parameter the key is built from is not
	// limited by the zone; provisioning logs that at info level.
	OnMissingKey string `json:"on_missing_key,omitempty"`

	// NearLimit is the share of the zone's capacity under which an
	// admitted request counts as a near miss: a request that leaves less
	// than NearLimit × capacity remaining (0.1, the default: less than
	// 10 %). Near misses are counted by the decisions metric (outcome
	// near_limit) and ranked by the admin API's top keys, to tell a limit
	// that is too tight (many clients near it) from a client that
	// misbehaves (one client rejected). Between 0 and 1; zero means 0.1.
	NearLimit float64 `json:"near_limit,omitempty"`

	// TopKeys is the number of counters of the zone's heavy-hitter
	// sketch, for each ranking (rejected, admitted, near_limit) and
	// window, that the admin API's /top reads: 8 to 1024, default 128.
	// Keys whose count in a window is above its total divided by TopKeys
	// are always found; memory is fixed, about 600 bytes per counter.
	TopKeys int `json:"top_keys,omitempty"`

	// TopWindow is the length of the sketch's windows: the rankings cover
	// the current window and the previous one, so the last one to two
	// windows. 1s to 1h, default 1m.
	TopWindow caddy.Duration `json:"top_window,omitempty"`

	// DemandKeys is the most keys whose demand per period the zone
	// follows at once, for the admin API's advice and the demand
	// metrics (see package demand): default 16384, about 95 bytes a
	// key; -1 records no demand. A zone without a rate records none.
	DemandKeys int `json:"demand_keys,omitempty"`

	// DemandScope is whose demand the advice reads: "instance" (the
	// default), what this Caddy sees; or "fleet", with a Redis store,
	// what every Caddy recording the zone's demand in it sees, summed per
	// key and period in Redis over the last 24 complete periods
	// (redisstore.Demand): behind a balancer that spreads a client's
	// requests, each instance sees only part of its demand. A fleet
	// zone's demand is not in the demand metrics, which are per instance.
	DemandScope string `json:"demand_scope,omitempty"`

	limit   *model.Limit
	match   caddyhttp.MatcherSet
	missing keyspec.MissingKey
	keyKind keyKind
	group   *clientip.Strategy // with keyClientIP: groups addresses by prefix; nil keys by full address
	// relays, with keyClientIP or clientVar, read the server's
	// client_ip_headers, in order, for a request that a trusted proxy
	// relayed (clientKey).
	relays []relayHeader
	// clientVar: a keyTemplate with the placeholder {http.vars.client_ip},
	// which expands to clientKey's address rather than Caddy's.
	clientVar bool
	// hostVar: a keyTemplate with the placeholder {http.request.host},
	// which expands to keyspec.HostKey's spelling of the host, so that a
	// client cannot multiply its quota by changing the Host header's
	// letter case or adding a trailing dot.
	hostVar bool
	// parts, with keyTemplate, are the template's placeholders of a
	// request header, query parameter or cookie (keyParts), by name
	// without braces: they expand to the part's value as keyspec reads
	// it; nil when it has none.
	parts map[string]*keyspec.Spec
	// constKey is a keyConstant zone's key.
	constKey string
	// strict: the server sets trusted_proxies_strict, so that Caddy's
	// client_ip is already read from the right.
	strict bool
	// keyVars, with keyTemplate and two placeholders or more, are the
	// template's placeholders in order, expanded one by one and joined by
	// keyspec.JoinKey, so that values with spaces cannot make two clients
	// one; nil otherwise. (The template's other text is the same for
	// every request of the zone, so the key leaves it out.)
	keyVars []string
	// prefix begins every key of the zone, to tell it from the zones of
	// the same name of other handlers, and id is the zone's ID,
	// "<name>@<prefix without its slash>" (identity.go).
	prefix   string
	id       string
	cost     float64 // the cost when costTmpl is empty
	costTmpl string  // the cost's placeholder template, or ""
	// nearAt is the remaining capacity under which an admitted request
	// is a near miss: NearLimit × capacity.
	nearAt    float64
	nameValue any // Name, boxed once: the value of {http.sluice.zone}
	// top ranks the zone's keys (admin.go); it is shared with the zones
	// of the same prefix and name, across reloads.
	top *inspect.HeavyHitters
	// demand records the zone's demand per key and period (admin.go,
	// metrics.go), shared like top; nil without a rate or with
	// DemandKeys -1.
	demand *demand.Recorder
	// fleet sends and reads demand's partials in Redis, with DemandScope
	// fleet; nil otherwise.
	fleet *redisstore.Demand
	// index is the zone's index in its handler's Zones, which names the
	// header under which its ResponseCost reaches core
	// (responseCostHeader); set by Provision.
	index int
	// scopeLine and leaseLine are the Caddyfile lines of demand_scope and
	// lease, for their errors, which need the store that the block may
	// name after the zone.
	scopeLine, leaseLine int
}

// keyKind is how a zone builds its key.
type keyKind int

const (
	keyClientIP keyKind = iota // Key is exactly {client_ip}: read Caddy's client address
	keyTemplate                // Key has placeholders: expand them per request
	keyConstant                // Key has none: one key for every request
)

// provision builds the zone's limit, key, cost and matchers.
func (z *Zone) provision(ctx caddy.Context) error {
	var err error
	if z.limit, err = z.coreLimit(); err != nil {
		return err
	}
	if err := z.checkTop(); err != nil {
		return err
	}

	switch key := z.key(); {
	case isClientIPKey(key):
		z.keyKind = keyClientIP
		if z.groups() {
			z.group = &clientip.Strategy{IPv4Prefix: z.IPv4Prefix, IPv6Prefix: z.IPv6Prefix}
			if err := z.group.Validate(); err != nil {
				return err
			}
		}
		if err := z.provisionRelays(ctx); err != nil {
			return err
		}
	case strings.ContainsAny(key, "{}"):
		z.keyKind = keyTemplate
		vars := keyPlaceholders(key)
		if len(vars) > 1 {
			z.keyVars = vars
		}
		for _, ph := range vars {
			z.clientVar = z.clientVar || ph == clientIPVarKey
			z.hostVar = z.hostVar || ph == hostVarKey
		}
		if z.parts, err = keyParts(key); err != nil {
			return &optionError{option: "key", err: err}
		}
		if z.clientVar {
			if err := z.provisionRelays(ctx); err != nil {
				return err
			}
		}
		if name, ok := unknownPlaceholder(key); ok {
			// Not an error: other modules may define placeholders. But
			// an unknown one never expands, and the zone then treats
			// every request as missing its key.
			ctx.Logger().Warn("zone key has a placeholder Caddy's request replacer may not know; requests whose key does not expand follow on_missing_key",
				zap.String("zone", z.Name), zap.String("placeholder", name))
		}
	default:
		z.keyKind = keyConstant
		z.constKey = hostkey.Key(z.Key)
	}
	if z.missing, err = keyspec.ParseMissingKey(z.OnMissingKey); err != nil {
		return err
	}
	if ph := clientChosenPlaceholder(z.key()); ph != "" && z.missing == keyspec.MissingSkip {
		ctx.Logger().Info("a request without this placeholder's value is not limited by the zone (on_missing_key skip); set on_missing_key shared to count such requests under one key",
			zap.String("zone", z.Name), zap.String("placeholder", ph))
	}
	if err := z.provisionCost(); err != nil {
		return err
	}
	return z.provisionMatch(ctx)
}

// coreLimit builds and validates the zone's limit: its rate, unless it
// has none and a MaxInFlight, and its in-flight slots.
func (z *Zone) coreLimit() (*model.Limit, error) {
	l := &model.Limit{
		Name:        z.Name,
		Algorithm:   model.Algorithm(z.Algorithm),
		Burst:       z.Burst,
		MaxDelay:    time.Duration(z.MaxDelay),
		MaxInFlight: z.MaxInFlight,
		Lease:       z.Lease,
		Penalty:     time.Duration(z.Penalty),
		CostHeader:  z.CostHeader,
		CostBytes:   z.CostBytes,
	}
	if z.ResponseCost != "" {
		if err := z.checkResponseCost(); err != nil {
			return nil, err
		}
		l.CostHeader = responseCostHeader(z.index)
	}
	var err error
	if l.CountStatus, err = model.ParseStatusSet(z.CountStatus); err != nil {
		return nil, caddyError(err)
	}
	if z.Rate != "" {
		rate, err := model.ParseRate(z.Rate)
		if err != nil {
			return nil, caddyError(err)
		}
		l.Rate = rate
	}
	if err := l.Validate(); err != nil {
		if fe := model.FieldOf(err); fe != nil && fe.Field == "cost_header" && z.ResponseCost != "" {
			fe.Field, fe.Value = "response_cost", "" // the header is response_cost's
		}
		return nil, caddyError(err)
	}
	return l, nil
}

// responseCostHeader is the name of the header under which the value of
// the ResponseCost of the zone of index i reaches core (its limit's
// CostHeader): serveCounted sets it, over any an upstream sent, in a
// copy of the response's header that only Gate.Answered reads.
func responseCostHeader(i int) string {
	return "Sluice-Response-Cost-" + strconv.Itoa(i)
}

// checkResponseCost checks ResponseCost against the zone's other options:
// it must hold a placeholder (a constant is cost's), and a cost comes
// from one source.
func (z *Zone) checkResponseCost() error {
	switch {
	case len(keyPlaceholders(z.ResponseCost)) == 0:
		return optionErrorf("response_cost", "response_cost %q: want a placeholder, such as {http.response.header.X-Tokens-Used}; a constant cost is cost's", z.ResponseCost)
	case z.CostHeader != "":
		return optionErrorf("response_cost", "response_cost: a cost comes from response_cost or from cost_header, not both")
	case z.CostBytes:
		return optionErrorf("response_cost", "response_cost: a cost comes from response_cost or from cost_bytes, not both")
	}
	return nil
}

// caddyFields name core's fields (model.FieldError.Field) as the
// subdirectives, and JSON keys, that set them, where the names differ.
var caddyFields = map[string]string{
	"rate.quota":  "rate",
	"rate.period": "rate",
	"jitter":      "retry_jitter",
}

// subdirective is the subdirective that sets core's field.
func subdirective(field string) string {
	if sub, ok := caddyFields[field]; ok {
		return sub
	}
	return field
}

// caddyError is err, a model.FieldError or model.LimitError, in the
// Caddyfile's (and JSON's) words, beginning with the subdirective at fault ("rate:
// period "1.5µs": ..." for a part of one); any other error is returned as
// it is.
func caddyError(err error) error {
	fe := model.FieldOf(err)
	if fe == nil {
		return err
	}
	sub := subdirective(fe.Field)
	name := sub
	if part, ok := strings.CutPrefix(fe.Field, sub+"."); ok {
		name = sub + ": " + part
	}
	needs := ""
	if fe.Needs != "" {
		needs = subdirective(fe.Needs)
	}
	return &optionError{option: sub, err: errors.New(fe.Format(name, needs))}
}

// An optionError is an error about one subdirective of a block (and the
// JSON key of the same name), which the Caddyfile adapter reports at that
// subdirective's line. Its text is err's.
type optionError struct {
	option string
	err    error
}

func (e *optionError) Error() string { return e.err.Error() }
func (e *optionError) Unwrap() error { return e.err }

// optionErrorf returns an optionError about option with a formatted text.
func optionErrorf(option, format string, args ...any) error {
	return &optionError{option: option, err: fmt.Errorf(format, args...)}
}

// optionOf is the subdirective that err is about, the outermost
// optionError's, or "" when it names none.
func optionOf(err error) string {
	var oe *optionError
	if errors.As(err, &oe) {
		return oe.option
	}
	return ""
}

// key is the key template, defaulted.
func (z *Zone) key() string {
	if z.Key == "" {
		return clientIPKey
	}
	return z.Key
}

// isClientIPKey reports whether key is the client's address alone.
func isClientIPKey(key string) bool { return key == clientIPKey || key == clientIPVarKey }

// groups reports whether client addresses are grouped by network.
func (z *Zone) groups() bool { return z.IPv4Prefix != 0 || z.IPv6Prefix != 0 }

// provisionCost reads Cost as a number or a placeholder template, and
// checks a number against the zone's limit (model.Limit.CheckCost).
func (z *Zone) provisionCost() error {
	s := strings.TrimSpace(string(z.Cost))
	switch {
	case s == "":
		z.cost = z.limit.DefaultCost()
	case strings.ContainsAny(s, "{}"):
		z.costTmpl = s
		return nil
	default:
		c, err := parseCost(s)
		if err != nil {
			return optionErrorf("cost", "cost %q: %v", s, err)
		}
		z.cost = c
	}
	if err := z.limit.CheckCost(z.cost); err != nil {
		return caddyError(err)
	}
	return nil
}

// parseCost parses a configured cost with model.ParseCost, telling a value
// that is not a number that it may also be a placeholder.
func parseCost(s string) (float64, error) {
	c, err := model.ParseCost(s)
	if err == model.ErrCostNotNumber {
		return 0, errors.New("not a number or a placeholder")
	}
	return c, err
}

// provisionMatch loads the zone's matchers.
func (z *Zone) provisionMatch(ctx caddy.Context) error {
	if z.MatchRaw == nil {
		return nil
	}
	mods, err := ctx.LoadModule(z, "MatchRaw")
	if err != nil {
		return fmt.Errorf("match: %w", err)
	}
	for name, m := range mods.(map[string]any) {
		switch m.(type) {
		//lint:ignore SA1019 matchers of other modules may implement only the older interface; MatcherSet handles both
		case caddyhttp.RequestMatcherWithError, caddyhttp.RequestMatcher:
			z.match = append(z.match, m)
		default:
			return fmt.Errorf("match: %s is not a request matcher", name)
		}
	}
	return nil
}

// validate checks the settings that provision does not need.
func (z *Zone) validate() error {
	if err := checkKey(z.key()); err != nil {
		return &optionError{option: "key", err: err}
	}
	if z.groups() && !isClientIPKey(z.key()) {
		option := "ipv4_prefix"
		if z.IPv4Prefix == 0 {
			option = "ipv6_prefix"
		}
		return optionErrorf(option, "%s: groups client addresses, so it applies only to the key %s, not %q", option, clientIPKey, z.Key)
	}
	if !(z.NearLimit >= 0 && z.NearLimit <= 1) {
		return optionErrorf("near_limit", "near_limit: must be between 0 and 1 (a share of the capacity), got %v", z.NearLimit)
	}
	return z.checkTop()
}

// checkTop checks TopKeys, TopWindow and DemandKeys, zero meaning their
// defaults.
func (z *Zone) checkTop() error {
	if n := z.TopKeys; n != 0 && (n < inspect.MinSketchCounters || n > inspect.MaxSketchCounters) {
		return optionErrorf("top_keys", "top_keys: must be between %d and %d, got %d", inspect.MinSketchCounters, inspect.MaxSketchCounters, n)
	}
	if w := time.Duration(z.TopWindow); w != 0 && (w < inspect.MinSketchWindow || w > inspect.MaxSketchWindow) {
		return optionErrorf("top_window", "top_window: must be between %v and %v, got %v", inspect.MinSketchWindow, inspect.MaxSketchWindow, w)
	}
	if n := z.DemandKeys; n < -1 || n > demand.MaxKeys {
		return optionErrorf("demand_keys", "demand_keys: %d: want -1 (off), 0 (the default, %d) or up to %d", n, demand.DefaultMaxKeys, demand.MaxKeys)
	}
	return nil
}

// checkKey checks that the braces of a key template pair up into
// placeholders with names, as Caddy's replacer reads them (a brace escaped
// with a backslash is text): a brace left open or closed twice would make
// the key a literal text, one counter for every client. It also checks
// the names of its request header, query parameter and cookie
// placeholders (keyParts): a name that no request can carry would leave
// every request without a key.
func checkKey(key string) error {
	open := -1
	for i := 0; i < len(key); i++ {
		switch key[i] {
		case '\\':
			i++
		case '{':
			if open >= 0 {
				return fmt.Errorf("key %q: a { inside the placeholder opened at byte %d", key, open)
			}
			open = i
		case '}':
			switch {
			case open < 0:
				return fmt.Errorf("key %q: a } at byte %d closes no placeholder", key, i)
			case i == open+1:
				return fmt.Errorf("key %q: an empty placeholder {}", key)
			}
			open = -1
		}
	}
	if open >= 0 {
		return fmt.Errorf("key %q: the placeholder opened at byte %d is not closed", key, open)
	}
	_, err := keyParts(key)
	return err
}

// nearLimit is NearLimit, defaulted.
func (z *Zone) nearLimit() float64 {
	if z.NearLimit == 0 {
		return telemetry.DefaultNearLimit
	}
	return z.NearLimit
}

// topKey is the key (with its prefix removed: the key as the zone builds
// it, already bounded by keyspec.BoundKey) under which the zone's sketch
// counts an ask's key.
func (z *Zone) topKey(askKey string) string {
	return strings.TrimPrefix(askKey, z.prefix)
}

// storeKey is the key of an ask of the zone for a client whose key, as
// the admin API names it, is key: the raw key or its digest (keyspec.BoundKey),
// as /top shows keys longer than keyspec.MaxKeyLength.
func (z *Zone) storeKey(key string) string {
	return z.prefix + keyspec.BoundKey(key)
}

// ask returns r's ask of the zone; ok is false when the zone does not apply
// (its matchers do not match, or the key is missing under on_missing_key
// skip). err is a matcher's error.
func (z *Zone) ask(r *http.Request, repl *caddy.Replacer) (a model.Ask, ok bool, err error) {
	if len(z.match) > 0 {
		if ok, err = z.match.MatchWithError(r); !ok || err != nil {
			return a, false, err
		}
	}
	key, ok := z.keyOf(r, repl)
	key, ok = hostkey.Resolve(z.missing, key, ok)
	if !ok {
		return a, false, nil
	}
	return model.Ask{Limit: z.limit, Key: z.prefix + key, Cost: z.costOf(repl)}, true, nil
}

// relayHeader is one of the server's client_ip_headers, as a zone keyed
// on the client's address reads it.
type relayHeader struct {
	name string             // canonical
	ip   *clientip.Strategy // reads it, and groups addresses as the zone does
	// own: sluice reads the header even when the server sets
	// trusted_proxies_strict, because Caddy cannot (Forwarded).
	own bool
}

// provisionRelays prepares the reading of the client_ip_headers of the
// server the zone's handler belongs to (X-Forwarded-For, without one).
func (z *Zone) provisionRelays(ctx caddy.Context) error {
	headers := []string{"X-Forwarded-For"}
	if srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok && srv != nil {
		if len(srv.ClientIPHeaders) > 0 {
			headers = srv.ClientIPHeaders
		}
		z.strict = srv.TrustedProxiesStrict > 0
	}
	z.relays = make([]relayHeader, len(headers))
	for i, name := range headers {
		ip := &clientip.Strategy{Header: name, IPv4Prefix: z.IPv4Prefix, IPv6Prefix: z.IPv6Prefix}
		if err := ip.Validate(); err != nil {
			return fmt.Errorf("the server's client_ip_headers: %w", err)
		}
		name = http.CanonicalHeaderKey(name)
		z.relays[i] = relayHeader{name: name, ip: ip, own: name == "Forwarded"}
	}
	return nil
}

// clientKey returns the key of a zone keyed on the client's address.
// From a peer the server does not trust, it is the peer's address, which
// is Caddy's client_ip then. From a trusted proxy, the first of the
// server's client_ip_headers that the request carries names the client,
// read from the right: Caddy's client_ip when the server sets
// trusted_proxies_strict (Caddy walks the header from the right, past the
// server's trusted proxies; see strictVetted); otherwise Caddy's client_ip is the header's
// leftmost entry, which the client writes, and sluice takes the rightmost
// instead, the address that the trusted peer appended. Forwarded, which
// Caddy does not read, sluice reads itself either way, taking the
// rightmost for=. A header that names no client leaves the peer's address.
func (z *Zone) clientKey(r *http.Request) (string, bool) {
	ip, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	if trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool); trusted {
		for i := range z.relays {
			rh := &z.relays[i]
			if len(r.Header[rh.name]) == 0 {
				continue
			}
			if z.strict && !rh.own {
				if strictVetted(r.Header[rh.name], ip) {
					break
				}
				return z.peerKey(r, rh)
			}
			if a, ok := rh.ip.Relayed(r.Header); ok {
				return rh.ip.GroupKey(a), true
			}
			return z.peerKey(r, rh)
		}
	}
	if ip == "" || z.group == nil {
		return ip, ip != ""
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "", false
	}
	return z.group.GroupKey(a), true
}

// peerKey is the key of r's peer, grouped as rh groups addresses: for a
// request relayed by a trusted proxy whose header names no client. A Unix
// socket's peer, "@", is keyed as itself.
func (z *Zone) peerKey(r *http.Request, rh *relayHeader) (string, bool) {
	if k, ok := rh.ip.Key(r); ok { // rh.ip trusts no peer: the peer
		return k, true
	}
	return r.RemoteAddr, r.RemoteAddr != ""
}

// strictVetted reports whether ip, Caddy's client_ip under
// trusted_proxies_strict, is an entry of the header lines with only
// entries that Caddy reads to its right, which it skipped as trusted
// proxies. Caddy also skips the entries it cannot read, such as
// " [2001:db8::1]:443", and would then take an entry to their left, which
// the client may have written; the zone keys such a request by its peer,
// as for a header that names no client. At most clientip.MaxForwardedHops
// entries are examined.
func strictVetted(lines []string, ip string) bool {
	n := 0
	for li := len(lines) - 1; li >= 0; li-- {
		s := lines[li]
		for {
			if n == clientip.MaxForwardedHops {
				return false
			}
			n++
			i := strings.LastIndexByte(s, ',')
			a, ok := caddyEntry(s[i+1:])
			if !ok {
				return false
			}
			if a == ip {
				return true
			}
			if i < 0 {
				break
			}
			s = s[:i]
		}
	}
	return false
}

// caddyEntry reads one entry of a client IP header as Caddy v2.11's
// strictUntrustedClientIp does, returning the address's text as Caddy's
// client_ip holds it; false where Caddy skips the entry.
func caddyEntry(part string) (string, bool) {
	host, _, err := net.SplitHostPort(part)
	if err != nil {
		host = part
	}
	host, _, _ = strings.Cut(strings.TrimSpace(host), "%")
	a, err := netip.ParseAddr(host)
	if err != nil {
		return "", false
	}
	return a.String(), true
}

// keyOf returns r's key; ok is false when it has none.
func (z *Zone) keyOf(r *http.Request, repl *caddy.Replacer) (string, bool) {
	switch z.keyKind {
	case keyClientIP:
		return z.clientKey(r)
	case keyTemplate:
		if z.keyVars != nil {
			return z.joinedKey(r, repl)
		}
		k, ok := z.expand(r, repl, z.Key)
		if !ok {
			return "", false
		}
		return hostkey.Key(k), true
	}
	return z.constKey, true
}

// joinedKey expands the placeholders of a template with several of them
// one by one and joins their values unambiguously; a placeholder that is
// unknown or empty makes the key missing, as for a template expanded
// whole.
func (z *Zone) joinedKey(r *http.Request, repl *caddy.Replacer) (string, bool) {
	values := make([]string, len(z.keyVars))
	for i, ph := range z.keyVars {
		v, ok := "", false
		if ph == clientIPVarKey {
			v, ok = z.clientKey(r)
		} else {
			v, ok = z.expand(r, repl, ph)
		}
		if !ok {
			return "", false
		}
		values[i] = v
	}
	return keyspec.JoinKey(values), true
}

// errNoValue ends the expansion of a key template with a placeholder that
// is unknown or empty.
var errNoValue = errors.New("placeholder without a value")

// hostVarKey is the placeholder of the request's host.
const hostVarKey = "{http.request.host}"

// expand expands the key template tmpl for r; false when a placeholder of
// it is unknown or empty, or the result is empty. {http.vars.client_ip}
// expands to clientKey's address, {http.request.host} to keyspec.HostKey's
// spelling of the host, and a request header's, query parameter's or
// cookie's placeholder to the part's value as keyspec reads it (the first
// of several), not Caddy's (see keyParts); a template that is only such a
// placeholder is read without the replacer.
func (z *Zone) expand(r *http.Request, repl *caddy.Replacer, tmpl string) (string, bool) {
	if len(tmpl) > 2 && tmpl[0] == '{' && tmpl[len(tmpl)-1] == '}' {
		if p := z.parts[tmpl[1:len(tmpl)-1]]; p != nil {
			v := p.Value(r)
			return v, v != ""
		}
	}
	if !z.clientVar && !z.hostVar && z.parts == nil {
		v, err := repl.ReplaceOrErr(tmpl, true, true)
		return v, err == nil && v != ""
	}
	v, err := repl.ReplaceFunc(tmpl, func(name string, val any) (any, error) {
		switch name {
		case clientIPVarKey[1 : len(clientIPVarKey)-1]:
			if k, ok := z.clientKey(r); ok {
				return k, nil
			}
			return nil, errNoValue
		case hostVarKey[1 : len(hostVarKey)-1]:
			val = keyspec.HostKey(caddy.ToString(val))
		default:
			if p := z.parts[name]; p != nil {
				val = p.Value(r)
			}
		}
		if caddy.ToString(val) == "" {
			return nil, errNoValue // unknown (nil) or empty
		}
		return val, nil
	})
	return v, err == nil && v != ""
}

// keyPlaceholders returns the placeholders ("{...}") of a key template,
// in order. A brace escaped with a backslash is text, as for Caddy's
// replacer.
func keyPlaceholders(tmpl string) []string {
	var vars []string
	for i := 0; i < len(tmpl); i++ {
		switch tmpl[i] {
		case '\\':
			i++ // the escaped byte is text
		case '{':
			if end := strings.IndexByte(tmpl[i:], '}'); end >= 0 {
				vars = append(vars, tmpl[i:i+end+1])
				i += end
			}
		}
	}
	return vars
}

// costOf returns the cost of the request whose replacer is repl: its
// placeholder's number, or the limit's default cost when that is not a
// cost the limit takes (not a number, negative, or 0 for a limit whose
// cost does not come from its response).
func (z *Zone) costOf(repl *caddy.Replacer) float64 {
	if z.costTmpl == "" {
		return z.cost
	}
	c, err := model.ParseCost(strings.TrimSpace(repl.ReplaceAll(z.costTmpl, "")))
	if err != nil || c == 0 && !z.limit.CostFromResponse() {
		return z.limit.DefaultCost()
	}
	return c
}

// partPlaceholders map the names of Caddy's placeholders of a request
// header, query parameter and cookie, by the prefix before the part's
// name, to keyspec's kinds of key part. A zone's key reads them as keyspec
// does, which for a part given several times is its first value, the one
// a Go upstream reads (keyspec.Parse), and not as Caddy's replacer does:
// it joins the lines of a header and the values of a query parameter with
// commas, so that a client that adds a value would make itself a new key,
// and matches a cookie's name in any letter case. Their value, or its
// absence, is the client's choice.
var partPlaceholders = []struct{ prefix, kind string }{
	{"http.request.header.", "header:"},
	{"http.request.cookie.", "cookie:"},
	{"http.request.uri.query.", "query:"},
}

// keyParts returns the key parts of the placeholders of the key template
// key that partPlaceholders name, each a Spec of that one part whose Value
// the placeholder expands to, by placeholder name without braces; nil
// when there are none. A name that keyspec refuses, such as the Host
// header, which Go moves out of the request's headers, is an error.
func keyParts(key string) (map[string]*keyspec.Spec, error) {
	var parts map[string]*keyspec.Spec
	for _, ph := range keyPlaceholders(key) {
		name := ph[1 : len(ph)-1]
		for _, pp := range partPlaceholders {
			arg, ok := strings.CutPrefix(name, pp.prefix)
			if !ok {
				continue
			}
			p, err := keyspec.Parse([]string{pp.kind + arg}, nil)
			if err != nil {
				return nil, fmt.Errorf("key %q: placeholder %s: %w", key, ph, errors.Unwrap(err))
			}
			if parts == nil {
				parts = map[string]*keyspec.Spec{}
			}
			parts[name] = p
		}
	}
	return parts, nil
}

// clientChosenPlaceholder returns the first placeholder of a key template
// that the client chooses to send or not, or "".
func clientChosenPlaceholder(key string) string {
	for _, ph := range keyPlaceholders(key) {
		for _, pp := range partPlaceholders {
			if strings.HasPrefix(ph, "{"+pp.prefix) {
				return ph
			}
		}
	}
	return ""
}

// knownPlaceholderRoots are the namespaces of the placeholders a request's
// replacer expands (Caddy's global ones and its HTTP ones).
var knownPlaceholderRoots = []string{"http.", "env.", "system.", "time.", "file."}

// unknownPlaceholder returns the first placeholder of the template key
// outside knownPlaceholderRoots, such as a bare {client_ip} in JSON, which
// only the Caddyfile adapter rewrites.
func unknownPlaceholder(key string) (string, bool) {
	for {
		i := strings.IndexByte(key, '{')
		if i < 0 {
			return "", false
		}
		j := strings.IndexByte(key[i:], '}')
		if j < 0 {
			return "", false
		}
		name := key[i+1 : i+j]
		known := false
		for _, root := range knownPlaceholderRoots {
			if strings.HasPrefix(name, root) {
				known = true
			}
		}
		if !known {
			return "{" + name + "}", true
		}
		key = key[i+j+1:]
	}
}
