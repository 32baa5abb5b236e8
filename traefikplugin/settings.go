package traefikplugin

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/telemetry"
)

// maxLimits is the most limits one middleware may define.
const maxLimits = 32

// maxMemoryKeys is the largest maxKeys, as for the Caddy module's max_keys.
const maxMemoryKeys = 1 << 30

// settings is a Config parsed and checked: everything a registry entry
// needs to build its Gate.
type settings struct {
	plans     []limitPlan
	limits    []*model.Limit  // the plans' limits, in order
	specs     []*keyspec.Spec // distinct key specs; plans index them
	responder answer.Responder
	mode      core.Mode
	policy    core.StoreErrorPolicy
	redis     *redisOptions // nil: the in-memory store
	fallback  bool
	instances int
	leaseTTL  time.Duration // redis.leaseTTL, or 0 for core's default
	// maxKeys, when positive, is the capacity of the middleware's own
	// in-memory store; zero means the process-wide store.
	maxKeys int
	// notes are remarks about the configuration, logged once at error
	// level when the registry entry is created: Traefik's default level,
	// so that a warning such as a limit clients can bypass is seen.
	notes []string
	// exempt are the client networks that bypass the limits, and ip the
	// rule that finds a request's client address.
	exempt []netip.Prefix
	ip     *clientip.Strategy
	// metrics is the metrics block, nil without an address.
	metrics *metricsOptions
}

// metricsOptions is Config.Metrics parsed.
type metricsOptions struct {
	address    string // canonical host:port (listenAddress)
	allowed    []netip.Prefix
	demandKeys int     // Metrics.DemandKeys: 0 the default, -1 off
	nearLimit  float64 // Metrics.NearLimit, defaulted
	fleet      bool    // Metrics.DemandScope is fleet
}

// limitPlan is one limit and how a request's ask for it is built.
type limitPlan struct {
	limit   *model.Limit
	spec    int // index into settings.specs
	missing keyspec.MissingKey
	cost    float64
	option  string // the path of its options, for errors: "" or "limits[i]."
}

// keyDefaults are the top-level defaults of the per-limit key options.
type keyDefaults struct {
	parts   []string
	missing keyspec.MissingKey
	// fromSource is set when parts come from SourceCriterion, where a
	// missing key is shared as in Traefik's built-in.
	fromSource bool
	// option is the option parts come from, for errors.
	option string
}

// parse checks cfg, the configuration of middleware name, and returns its
// settings.
func parse(cfg *Config, name string) (*settings, error) {
	o := &options{}
	o.refuseUnknown(cfg)
	s := &settings{}
	ip, keys := parseSource(cfg, s, o)
	if s.exempt = o.prefixes("exemptIPs", cfg.ExemptIPs); len(s.exempt) > 0 {
		o.field(ip.Validate())
		s.ip = ip
	}
	parseAnswers(cfg, s, o)
	parseStore(cfg, s, o)
	s.metrics = parseMetrics(cfg.Metrics, s.redis != nil, o)

	cost := o.cost("cost", cfg.Cost, unsetCost)
	topName := strings.TrimSpace(cfg.Name)
	if topName == "" {
		topName = defaultLimitName
	}
	top := LimitConfig{
		Name:        topName,
		Average:     cfg.Average,
		Period:      cfg.Period,
		Burst:       cfg.Burst,
		Algorithm:   cfg.Algorithm,
		MaxDelay:    cfg.MaxDelay,
		MaxInFlight: cfg.MaxInFlight,
		Lease:       cfg.Lease,
		Penalty:     cfg.Penalty,
		CountStatus: cfg.CountStatus,
		CostHeader:  cfg.CostHeader,
		CostBytes:   cfg.CostBytes,
	}
	if strings.TrimSpace(cfg.Amount) != "" {
		if strings.TrimSpace(cfg.MaxInFlight) != "" {
			o.keep(errors.New("amount, maxInFlight: set one of them (amount is inFlightReq's name for maxInFlight)"))
		}
		o.integer("amount", cfg.Amount, 0, 1<<30)
		top.MaxInFlight = cfg.Amount
	}

	// The top-level limit, then limits: the top level's key, onMissingKey
	// and cost are the defaults of every limit, and the top-level limit
	// takes them as they are (top sets no key, onMissingKey or cost).
	specIndex := map[string]int{}
	for i, item := range append([]LimitConfig{top}, cfg.Limits...) {
		if o.err != nil {
			return nil, o.err
		}
		path := "" // of the item's options
		if i > 0 {
			path = fmt.Sprintf("limits[%d].", i-1)
			if strings.TrimSpace(item.Average) == "" && strings.TrimSpace(item.MaxInFlight) == "" {
				return nil, fmt.Errorf("%saverage: required (\"0\" disables the limit), or maxInFlight", path)
			}
		}
		if item.Algorithm == "" {
			item.Algorithm = cfg.Algorithm
		}
		if alg := model.Algorithm(strings.TrimSpace(item.Algorithm)); item.MaxDelay == "" && (alg == model.LeakyBucket || alg == model.TokenBucket || alg == "") {
			item.MaxDelay = cfg.MaxDelay
		}
		l, err := buildLimit(item, path)
		if err == errNoLimit {
			continue
		}
		if err != nil {
			return nil, err
		}
		k := keys
		if parts := parseList(item.Key); len(parts) > 0 {
			k = keyDefaults{parts: parts, missing: keyspec.MissingSkip, option: path + "key"}
			if cfg.OnMissingKey != "" {
				k.missing = keys.missing // the explicit top-level choice
			}
		}
		if item.OnMissingKey != "" {
			if k.missing, err = keyspec.ParseMissingKey(strings.TrimSpace(item.OnMissingKey)); err != nil {
				return nil, fieldError(path, err)
			}
		}
		c, costOption := cost, "cost"
		if item.Cost != "" {
			costOption = path + "cost"
			c = o.cost(costOption, item.Cost, cost)
		}
		id := strings.Join(k.parts, "\x00")
		spec, ok := specIndex[id]
		if !ok {
			ks, err := keyspec.Parse(k.parts, ip)
			if err != nil {
				o.keep(fmt.Errorf("%s: %w", k.option, err))
			}
			spec = len(s.specs)
			s.specs = append(s.specs, ks)
			specIndex[id] = spec
		}
		if c == unsetCost {
			c = l.DefaultCost()
		}
		if err := l.CheckCost(c); err != nil {
			o.keep(errors.New(model.FieldOf(err).Format(costOption, "")))
		}
		s.plans = append(s.plans, limitPlan{limit: l, spec: spec, missing: k.missing, cost: c, option: path})
		if k.missing == keyspec.MissingSkip {
			if part := clientChosenPart(k.parts); part != "" {
				s.notes = append(s.notes, fmt.Sprintf("limit %q: a request without %s is not limited by it (onMissingKey: skip); set onMissingKey: shared to count such requests in one bucket", l.Name, part))
			}
		}
	}
	if o.err != nil {
		return nil, o.err
	}
	if len(s.plans) > maxLimits {
		return nil, fmt.Errorf("limits: at most %d limits per middleware, got %d", maxLimits, len(s.plans))
	}
	if s.leaseTTL != 0 && !hasInFlight(s.plans) {
		return nil, errors.New("redis.leaseTTL: only limits with maxInFlight take leases")
	}
	s.limits = make([]*model.Limit, len(s.plans))
	for i, p := range s.plans {
		s.limits[i] = p.limit
	}
	if err := model.CheckLimits(s.limits); err != nil {
		p := s.plans[err.(*model.LimitError).Index]
		err = fieldError(p.option, err)
		if p.option != "" && p.limit.Name == topName && strings.TrimSpace(cfg.Name) == "" {
			err = fmt.Errorf("%w (the top-level limit is named %q unless name is set)", err, topName)
		}
		return nil, err
	}
	return s, nil
}

// hasInFlight reports whether a plan's limit has MaxInFlight.
func hasInFlight(plans []limitPlan) bool {
	for _, p := range plans {
		if p.limit.MaxInFlight > 0 {
			return true
		}
	}
	return false
}

// unsetCost is options.cost's default for a cost left out, which parse reads
// as the limit's default cost (model.Limit.DefaultCost).
const unsetCost = -1

// builtinMaxDelay is the bounded wait of Traefik's rateLimit for avg
// requests per period: 1/(2·rate), the rate per second truncated to a
// whole number as Traefik does, and 500ms below one request per second. A
// token_bucket whose maxDelay is not set uses it, so that a built-in
// configuration admits what the built-in admits.
func builtinMaxDelay(avg float64, period time.Duration) time.Duration {
	rate := avg * float64(time.Second) / float64(period)
	if rate < 1 {
		return 500 * time.Millisecond
	}
	if rate >= 1e9 {
		return 0
	}
	return time.Second / (time.Duration(rate) * 2)
}

// buildLimit builds and validates the limit of item; path prefixes the
// names of its options in errors ("" at the top level, else
// "limits[i]."). It returns errNoLimit when the average is zero or empty
// and there is no maxInFlight.
//
// An item without a rate limits only the requests in flight. An item's
// algorithm and maxDelay may come from the top level, and are then ignored;
// core refuses its own burst and, at the top level, an algorithm and a
// maxDelay.
func buildLimit(item LimitConfig, path string) (*model.Limit, error) {
	o := &options{path: path}
	avg := o.number("average", item.Average)
	l := &model.Limit{Name: strings.TrimSpace(item.Name), MaxInFlight: o.integer("maxInFlight", item.MaxInFlight, 0, 1<<30)}
	if o.err == nil && avg == 0 && l.MaxInFlight == 0 {
		return nil, errNoLimit
	}
	rated := avg != 0
	if rated {
		l.Rate = model.Rate{Quota: avg, Period: o.duration("period", item.Period)}
		if l.Rate.Period == 0 {
			l.Rate.Period = defaultPeriod
		}
	}
	l.Burst = o.number("burst", item.Burst)
	if err := model.CheckBurst(l.Burst); err != nil && rated && strings.TrimSpace(item.Burst) != "" {
		o.keep(fmt.Errorf("%w; the built-in rateLimit reads 0 as 1, the default", fieldError(path, err)))
	}
	if rated || path == "" {
		l.Algorithm = model.Algorithm(strings.ToLower(strings.TrimSpace(item.Algorithm)))
		l.MaxDelay = o.duration("maxDelay", item.MaxDelay)
	}
	if rated && (l.Algorithm == model.TokenBucket || l.Algorithm == "") {
		if l.Burst == 0 {
			l.Burst = 1 // Traefik's default
		}
		if strings.TrimSpace(item.MaxDelay) == "" {
			l.MaxDelay = builtinMaxDelay(avg, l.Rate.Period)
		}
	}
	l.Lease = o.number("lease", item.Lease)
	l.Penalty = o.duration("penalty", item.Penalty)
	var err error
	l.CountStatus, err = model.ParseStatusSet(parseList(item.CountStatus))
	o.field(err)
	l.CostHeader = strings.TrimSpace(item.CostHeader)
	l.CostBytes = o.boolean("costBytes", item.CostBytes)
	if o.err != nil {
		return nil, o.err
	}
	if err := l.Validate(); err != nil {
		return nil, fieldError(path, err)
	}
	return l, nil
}

// coreOptions name core's fields (model.FieldError.Field) as the plugin's
// options, a line each: the field, a space, the option. A field the plugin
// names alike (burst, lease, ...) is left out. A text, not a map: under
// Yaegi each entry of a map literal is syntax the plugin keeps loaded.
const coreOptions = `
rate average
rate.quota average
rate.period period
max_delay maxDelay
max_in_flight maxInFlight
count_status countStatus
cost_header costHeader
cost_bytes costBytes
jitter retryJitter
trusted_proxies trustedProxies
header sourceCriterion.requestHeaderName
depth sourceCriterion.ipStrategy.depth
excluded_ips sourceCriterion.ipStrategy.excludedIPs
ipv6_prefix sourceCriterion.ipStrategy.ipv6Subnet
cert redis.tls.cert
key redis.tls.key
ca redis.tls.ca
sentinel.master redis.sentinel.masterName
sentinel.addresses redis.sentinel.endpoints
on_missing_key onMissingKey
on_store_error onStoreError
near_limit nearLimit
demand_scope demandScope
`

// fieldError is err, a model.FieldError or a model.LimitError, naming its
// field as the plugin's option under option ("", "limits[i]." or
// "redis."); any other error is returned as it is.
func fieldError(option string, err error) error {
	fe := model.FieldOf(err)
	if fe == nil {
		return err
	}
	needs := ""
	if fe.Needs != "" {
		needs = option + coreOption(fe.Needs)
	}
	return errors.New(fe.Format(option+coreOption(fe.Field), needs))
}

// coreOption is the plugin's option for core's field, or the field itself
// when the plugin names it alike.
func coreOption(field string) string {
	i := strings.Index(coreOptions, "\n"+field+" ")
	if i < 0 {
		return field
	}
	option := coreOptions[i+len(field)+2:]
	return option[:strings.IndexByte(option, '\n')]
}

// parseSource reads SourceCriterion, TrustedProxies, Key and OnMissingKey:
// how the client IP is found, and the default key of every limit.
func parseSource(cfg *Config, s *settings, o *options) (*clientip.Strategy, keyDefaults) {
	var keys keyDefaults
	sc := cfg.SourceCriterion
	if sc == nil {
		sc = &SourceCriterion{}
	}
	host := o.boolean("sourceCriterion.requestHost", sc.RequestHost)
	header := strings.TrimSpace(sc.RequestHeaderName)
	switch {
	case sc.IPStrategy != nil && header != "":
		o.keep(errors.New("sourceCriterion: ipStrategy and requestHeaderName are mutually exclusive"))
	case sc.IPStrategy != nil && host:
		o.keep(errors.New("sourceCriterion: ipStrategy and requestHost are mutually exclusive"))
	case header != "" && host:
		o.keep(errors.New("sourceCriterion: requestHost and requestHeaderName are mutually exclusive"))
	}

	ip := parseClientIP(cfg, sc.IPStrategy, s, o)

	keys.parts = parseList(cfg.Key)
	switch {
	case len(keys.parts) > 0 && header != "":
		o.keep(errors.New("key and sourceCriterion.requestHeaderName are mutually exclusive: write the header as a key part, header:<Name>"))
	case len(keys.parts) > 0 && host:
		o.keep(errors.New("key and sourceCriterion.requestHost are mutually exclusive: write host as a key part"))
	case len(keys.parts) > 0:
		keys.missing, keys.option = keyspec.MissingSkip, "key"
	case header != "":
		keys.parts, keys.fromSource, keys.option = []string{"header:" + header}, true, "sourceCriterion.requestHeaderName"
	case host || inFlightReqStyle(cfg):
		keys.parts, keys.fromSource, keys.option = []string{"host"}, true, "sourceCriterion.requestHost"
	default:
		keys.parts, keys.fromSource, keys.option = []string{"client_ip"}, true, "sourceCriterion"
	}
	if keys.fromSource {
		keys.missing = keyspec.MissingShared
	}
	if cfg.OnMissingKey != "" {
		var err error
		keys.missing, err = keyspec.ParseMissingKey(strings.TrimSpace(cfg.OnMissingKey))
		o.field(err)
	}
	return ip, keys
}

// inFlightReqStyle reports whether cfg reads as a configuration of
// Traefik's inFlightReq middleware (amount, and no rate, limits or
// ipStrategy), whose requests are grouped by the request host by default.
func inFlightReqStyle(cfg *Config) bool {
	avg := strings.TrimSpace(cfg.Average)
	return strings.TrimSpace(cfg.Amount) != "" && (avg == "" || avg == "0") && len(cfg.Limits) == 0 &&
		(cfg.SourceCriterion == nil || cfg.SourceCriterion.IPStrategy == nil)
}

// parseClientIP builds the client_ip rule from ipStrategy and
// TrustedProxies.
//
// With TrustedProxies set, X-Forwarded-For is believed only from those
// peers: Depth picks an entry counted from the right, and without Depth
// the entries are walked from the right, skipping trusted proxies and
// ExcludedIPs, to the first other address.
//
// Without TrustedProxies, the plugin does what Traefik's built-in does and
// believes the header as it reaches the middleware when ipStrategy asks for
// it. That is safe because Traefik's entryPoint has already removed
// X-Forwarded-For from every peer outside forwardedHeaders.trustedIPs
// (unless forwardedHeaders.insecure is set): an untrusted peer's header
// never gets here. For Depth and ExcludedIPs the header is then believed
// from every peer (clientip.Strategy.AnyPeer): with ExcludedIPs, the walk from
// the right skips the excluded addresses and keys on the first other one,
// whichever peer relayed the request.
func parseClientIP(cfg *Config, st *IPStrategy, s *settings, o *options) *clientip.Strategy {
	ip := &clientip.Strategy{TrustedProxies: o.prefixes("trustedProxies", cfg.TrustedProxies)}
	if st == nil {
		return ip
	}
	depth := o.integer("sourceCriterion.ipStrategy.depth", st.Depth, 0, clientip.MaxForwardedHops)
	excluded := o.prefixes("sourceCriterion.ipStrategy.excludedIPs", st.ExcludedIPs)
	if st.IPv6Subnet != "" {
		ip.IPv6Prefix = o.integer("sourceCriterion.ipStrategy.ipv6Subnet", st.IPv6Subnet, 1, 128)
	}
	switch {
	case depth > 0:
		ip.Depth = depth
		if len(excluded) > 0 {
			s.notes = append(s.notes, "sourceCriterion.ipStrategy.excludedIPs is ignored because depth is set, as Traefik does")
		}
		ip.AnyPeer = len(ip.TrustedProxies) == 0
	case len(excluded) > 0:
		ip.ExcludedIPs = excluded
		ip.AnyPeer = len(ip.TrustedProxies) == 0
	}
	return ip
}

// parseAnswers reads Headers, Body, RetryJitter and Mode.
func parseAnswers(cfg *Config, s *settings, o *options) {
	var err error
	s.responder.Headers, err = answer.ParseHeaderSet(parseList(cfg.Headers))
	o.field(err)
	s.responder.Body, err = answer.ParseBodyFormat(cfg.Body)
	o.field(err)
	s.responder.Jitter = o.number("retryJitter", cfg.RetryJitter)
	o.field(s.responder.Validate())
	s.mode, err = core.ParseMode(cfg.Mode)
	o.field(err)
}

// parseStore reads Redis, OnStoreError, Fallback, Instances and MaxKeys.
func parseStore(cfg *Config, s *settings, o *options) {
	var err error
	s.policy, err = core.ParseStoreErrorPolicy(cfg.OnStoreError)
	o.field(err)
	switch strings.ToLower(strings.TrimSpace(cfg.Fallback)) {
	case "", "none":
	case "local":
		s.fallback = true
	default:
		o.keep(fmt.Errorf("fallback %q: want local or none", cfg.Fallback))
	}
	s.instances = o.integer("instances", cfg.Instances, 0, 1<<20)
	if s.fallback && strings.TrimSpace(cfg.Instances) == "" {
		s.instances = 1 // the default with fallback; without, 0: not set
	}
	o.field(model.CheckFallback(s.fallback, s.instances, cfg.Redis == nil))
	s.maxKeys = o.integer("maxKeys", cfg.MaxKeys, 1, maxMemoryKeys)
	if cfg.Redis == nil {
		return
	}
	if s.maxKeys > 0 && !s.fallback {
		o.keep(errors.New("maxKeys: sizes the in-memory store, which with redis only fallback: local uses; set fallback: local or remove maxKeys"))
	}
	s.redis = parseRedis(cfg.Redis, s, o)
}

// clientChosenPart returns the first key part whose absence the client
// chooses (a header, query parameter or cookie), or "".
func clientChosenPart(parts []string) string {
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if strings.HasPrefix(p, "header:") || strings.HasPrefix(p, "query:") || strings.HasPrefix(p, "cookie:") {
			return p
		}
	}
	return ""
}

// loopback are the networks that may read a middleware's metrics unless
// metrics.allowedNetworks says otherwise.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// parseMetrics reads the metrics block of a middleware on Redis or not;
// nil without an address.
func parseMetrics(m *Metrics, onRedis bool, o *options) *metricsOptions {
	if m == nil {
		return nil
	}
	address := strings.TrimSpace(m.Address)
	networks := parseList(m.AllowedNetworks)
	if address == "" {
		// The options that only serving metrics uses, each before its
		// value; o keeps the first set.
		set := []string{"allowedNetworks", strings.Join(networks, ","), "demandKeys", m.DemandKeys, "nearLimit", m.NearLimit, "demandScope", m.DemandScope}
		for i := 0; i < len(set); i += 2 {
			if strings.TrimSpace(set[i+1]) != "" {
				o.keep(errors.New("metrics." + set[i] + ": needs metrics.address, where the metrics are served"))
			}
		}
		return nil
	}
	canonical, err := listenAddress(address)
	if err != nil {
		o.keep(fmt.Errorf("metrics.address %q: %w", address, err))
	}
	mo := &metricsOptions{address: canonical, allowed: loopback, nearLimit: telemetry.DefaultNearLimit}
	if near := strings.TrimSpace(m.NearLimit); near != "" {
		mo.nearLimit, err = telemetry.ParseNearLimit(near)
		o.keep(fieldError("metrics.", err))
	}
	if keys := strings.TrimSpace(m.DemandKeys); keys == "off" {
		mo.demandKeys = -1
	} else {
		mo.demandKeys = o.integer("metrics.demandKeys", keys, 1, demand.MaxKeys)
	}
	scope := strings.TrimSpace(m.DemandScope)
	o.keep(fieldError("metrics.", demand.CheckScope(scope, onRedis, mo.demandKeys >= 0)))
	mo.fleet = scope == demand.ScopeFleet
	if len(networks) > 0 {
		mo.allowed = o.prefixes("metrics.allowedNetworks", networks)
	}
	return mo
}

// listenAddress reads a listener's address in the forms Traefik's
// entryPoints take: ":9180" (every interface), "127.0.0.1:9180",
// "[::1]:9180", "localhost:9180"; the port a number, 0 for any. It
// returns the address in one spelling per listener: the IP address as
// netip writes it, a host name in lower case.
func listenAddress(s string) (string, error) {
	const want = "want [host]:port, such as 127.0.0.1:9180, [::1]:9180, localhost:9180 or :9180 (every interface)"
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", errors.New(want)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	switch ip, err := netip.ParseAddr(host); {
	case host == "":
		return ":" + strconv.FormatUint(n, 10), nil
	case err == nil:
		return netip.AddrPortFrom(ip, uint16(n)).String(), nil
	case !hostName(host):
		return "", fmt.Errorf("host %q: not an IP address or a host name; %s", host, want)
	}
	return net.JoinHostPort(strings.ToLower(host), strconv.FormatUint(n, 10)), nil
}

// hostName reports whether s is spelt as a DNS host name: labels of
// letters, digits and hyphens, separated by dots.
func hostName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' || strings.Trim(label, hostNameBytes) != "" {
			return false
		}
	}
	return true
}

// hostNameBytes are the bytes of a host name's labels.
const hostNameBytes = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-"
