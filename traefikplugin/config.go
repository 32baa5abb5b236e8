package traefikplugin

// Config is the plugin's configuration, as Traefik decodes it from the
// dynamic configuration (file provider, Docker labels, Kubernetes CRD).
//
// Traefik decodes it with mapstructure, weakly typed and matching option
// names in any letter case. Labels carry every value as a string, so every
// number, boolean and duration here is a string field that New parses
// itself, naming the option in any error: "10", 10 and 10.0 all work, as do
// "true" and true. Lists take either a list or one comma-separated string
// ("ietf,x").
//
// The first five options are those of Traefik's built-in rateLimit
// middleware, with its meanings and defaults; a configuration written for
// the built-in works unchanged (see the package documentation for the few
// differences). The others are sluice's.
type Config struct {
	// Average is the quota: requests (more exactly, cost units) admitted
	// per Period. Empty or "0" means no top-level limit, as in Traefik;
	// then only Limits apply, and with no Limits either, the middleware
	// passes every request through untouched. Fractions are allowed.
	Average string
	// Period is the length of the quota's period: a Go duration ("1m",
	// "1m30s") or a bare number of seconds ("60"), as Traefik accepts.
	// Empty or "0" means one second.
	Period string
	// Burst is the token bucket's size: how many requests may arrive at
	// once. Empty means 1, as in Traefik. For leaky_bucket it is the queue
	// depth (empty: the quota, at least 1); window algorithms take their
	// capacity from the quota and refuse a burst. "0" is refused: the
	// built-in reads it as 1, the Caddy module's default is the quota, and
	// a value that means one thing here and another there is a trap.
	Burst string
	// SourceCriterion selects what groups requests into one bucket, as in
	// Traefik: the client IP (ipStrategy, the default), a request header,
	// or the request host. Key, when set, replaces requestHeaderName and
	// requestHost; ipStrategy then still says how its client_ip part is
	// derived.
	SourceCriterion *SourceCriterion
	// Redis, when set, keeps the counters in Redis (a standalone server,
	// a Redis Cluster, or the master that Redis Sentinels name), shared by
	// every Traefik instance that uses the same one.
	Redis *Redis

	// Name is the top-level limit's name in the RateLimit-Policy header
	// and 429 bodies; default "default". (Not the middleware's name, which
	// under Kubernetes is "<namespace>-<name>": clients need not learn
	// it.) Limits items have names of their own.
	Name string

	// Algorithm is one of token_bucket (the default, Traefik's),
	// leaky_bucket, fixed_window, sliding_window_log and
	// sliding_window_counter. It is also the default of every Limits item.
	Algorithm string
	// Cost is what one request costs, in the quota's units; default 1.
	// Fractions are allowed. It is also the default of every Limits item.
	// With CostHeader or CostBytes it is the estimate charged when a
	// request is admitted: then it may be "0", the default.
	Cost string
	// MaxDelay is the longest a request is delayed instead of rejected: a
	// duration or a number of seconds. For leaky_bucket the default is no
	// bound but the queue's; for token_bucket the built-in's, 1/(2·rate)
	// (500ms below one request per second), and "0" never delays.
	MaxDelay string
	// Lease, sluice's own, with a Redis store: how much of a key's
	// capacity one Traefik may take from Redis in one call and spend
	// locally, for a key so hot that one script call per request costs
	// too much (such as a global limit). Each lease is sized by the key's
	// demand on this Traefik and returned, what is left of it, within
	// half a second; over any interval T the Traefiks together admit at
	// most burst + average·T/period + instances × Lease. Empty or "0":
	// every request is decided in Redis. Only with redis; not with
	// leaky_bucket; at most the burst.
	Lease string
	// Penalty, sluice's own: how long a key this limit refuses stays
	// refused, from the refusal (a duration or a number of seconds);
	// empty or "0": none. Not with lease.
	Penalty string
	// CountStatus, sluice's own, limits only the responses of these
	// statuses, each a code ("401") or a class ("4xx"), such as a login's
	// failures: a request over the limit is refused before the upstream
	// sees it, and an admitted one whose response has another status is
	// given its charge back. A request cut short (the client gone, a
	// panic, a hijacked connection) keeps its charge. Empty: every
	// request counts. Not with lease.
	CountStatus []string
	// CostHeader, sluice's own, takes a request's cost from its
	// response: the number in this response header (its first value),
	// such as the tokens an LLM upstream says it used. The request is
	// charged Cost (an estimate, default 0) when admitted and the
	// difference when the response comes, which may leave its key in
	// debt beyond the burst: its next requests are refused, with a
	// truthful Retry-After, until the rate has repaid it. A header
	// missing, not a number, negative, NaN or infinite leaves the
	// estimate charged; a value above the burst counts as the burst.
	// Not with costBytes or lease.
	CostHeader string
	// CostBytes, sluice's own, "true": as CostHeader, the cost being the
	// bytes of the response's body.
	CostBytes string
	// Key lists the parts of the bucket key, in sluice's syntax: client_ip,
	// header:<Name>, host, method, path, query:<name>, cookie:<name>,
	// const:<value>. ["header:X-API-Key"] limits per API key,
	// ["const:global"] limits all requests together. Empty means the key
	// of SourceCriterion. It is also the default of every Limits item.
	Key []string
	// OnMissingKey is what happens to a request whose key cannot be built
	// (such as a missing header): "skip" exempts it from the limit,
	// "shared" counts all such requests in one bucket. The default is
	// "shared" for a key taken from SourceCriterion (Traefik's behavior)
	// and "skip" for one given by Key. With skip, a client that leaves out
	// a header, query parameter or cookie the key is built from is not
	// limited; the plugin logs that once, at error level (Traefik's
	// default), when it loads.
	OnMissingKey string
	// MaxInFlight, when positive, is the most requests of one key (the
	// top-level limit's) in progress at once, as Traefik's inFlightReq
	// middleware counts them: from the moment the limits admit a request
	// until the handlers after the middleware return, also when the
	// client leaves. A request that finds every slot taken is answered 429
	// with Retry-After: 1 and is charged to no limit. With Average empty
	// or "0", the top-level limit limits only the requests in flight.
	// With Redis, each slot is a lease that expires redis.leaseTTL after
	// it was taken or last renewed.
	MaxInFlight string
	// Amount is inFlightReq's name for MaxInFlight (set one of them), so
	// that an inFlightReq configuration works renamed: with Amount and no
	// Average, Limits, SourceCriterion or Key, requests are grouped by the
	// request host, as inFlightReq does by default.
	Amount string
	// Limits are further limits decided together with the top-level one,
	// all-or-nothing: a request is charged to every limit that applies to
	// it or, if any rejects it, to none. Use it to combine, for example, a
	// per-IP, a per-API-key and a global limit in one middleware.
	Limits []LimitConfig

	// Headers selects the rate-limit response headers: any of ietf
	// (RateLimit-Policy and RateLimit), legacy (RateLimit-Limit,
	// -Remaining, -Reset), x (X-RateLimit-*), or off. Default ietf,x.
	Headers []string
	// Body is the format of a 429 answer's body: json (the default),
	// problem (RFC 9457), text or none.
	Body string
	// Mode is enforce (the default) or dry_run: decide and count, but let
	// every request through, marking those that would have been rejected
	// with the request header X-Sluice-Dry-Run: rejected for the upstream.
	Mode string
	// OnStoreError is allow (the default) or deny: what happens to a
	// request when Redis cannot decide and there is no Fallback.
	OnStoreError string
	// Fallback is "local" to decide in this instance's memory while Redis
	// is unavailable, each instance enforcing 1/Instances of every quota,
	// or "none" (the default).
	Fallback string
	// Instances is the number of Traefik instances sharing the Redis
	// quotas, by which Fallback divides them; default 1.
	Instances string
	// RetryJitter, between 0 and 1, lengthens each Retry-After by a random
	// fraction of itself of at most RetryJitter, so that clients rejected
	// together do not retry together. Default 0.
	RetryJitter string
	// TrustedProxies lists the peers (CIDR prefixes or addresses) whose
	// X-Forwarded-For the client_ip key believes. Empty: the header as it
	// reaches the middleware is believed only when ipStrategy asks for it,
	// relying on Traefik's entryPoint forwardedHeaders.trustedIPs, which
	// has already removed the header of every untrusted peer (see the
	// package documentation).
	TrustedProxies []string
	// MaxKeys, when set, gives the middleware an in-memory store of its
	// own holding at most this many (limit, key) states, instead of the
	// process-wide one (1,048,576 states) that every middleware without
	// MaxKeys shares: a flood of this middleware's keys then evicts only
	// its own states, and others' floods never evict its. With Redis it
	// sizes the store of fallback: local, and needs it. Changing it starts
	// the middleware's in-memory counters afresh.
	MaxKeys string
	// ExemptIPs lists client networks (CIDR prefixes or addresses) whose
	// requests bypass every limit of the middleware, without rate-limit
	// headers: monitoring, internal services. The client's address is the
	// one the key's client_ip part takes, as ipStrategy and TrustedProxies
	// derive it.
	ExemptIPs []string
	// Metrics, when its address is set, counts the middleware's
	// decisions and serves them, with those of every middleware naming
	// the same address, in the Prometheus text format on GET /metrics of
	// a listener of the plugin's own: never on Traefik's entryPoints.
	Metrics *Metrics
	// Unknown collects the options Traefik passes that the plugin does
	// not know (mapstructure's remain); New refuses any, naming it, so that
	// a misspelt option is not silently ignored.
	Unknown map[string]interface{} `mapstructure:",remain"`
}

// Metrics is the metrics option block. The process has one listener per
// address, shared by every middleware that names it and by all their
// versions across reloads; it is closed when the last of them leaves the
// plugin's registry.
type Metrics struct {
	// Address is the IP address and port on which the plugin serves
	// GET /metrics, such as 127.0.0.1:9180. Empty (the default): no
	// metrics, and the middleware's requests cost nothing more.
	Address string
	// AllowedNetworks lists the client networks (CIDR prefixes or
	// addresses) that may read the middleware's metrics and advice, and
	// reset its advice, by the connection's peer address; default
	// 127.0.0.0/8 and ::1. A scrape
	// sees the middlewares at the address that allow it, and is answered
	// 403 when none does.
	AllowedNetworks []string
	// DemandKeys is the most keys of each limit whose demand per period
	// the middleware follows at once, for the advice served at
	// /sluice/zones/<zone>/advice and the demand metrics: default 16384
	// (about 95 bytes a key); "off" records no demand.
	DemandKeys string
	// NearLimit is the share of a limit's capacity under which an
	// admitted request is counted as a near miss (the near_limit outcome
	// of sluice_decisions_total): a percentage ("10%") or a fraction
	// ("0.1"), above 0 and at most 1; default 10%.
	NearLimit string
	// DemandScope is whose demand the advice reads: "instance" (the
	// default), what this Traefik sees; or "fleet", with redis, what
	// every Traefik recording the middleware's demand in the same Redis
	// sees, summed per key and period there over the last 24 complete
	// periods. A fleet's demand is not in the demand metrics, which are
	// per instance.
	DemandScope string
	// Unknown is as Config.Unknown.
	Unknown map[string]interface{} `mapstructure:",remain"`
}

// LimitConfig is one item of Config.Limits. Options left empty take the
// top-level value of Algorithm, Cost, Key, OnMissingKey (and MaxDelay, for
// a leaky_bucket item); Period defaults to one second and Burst as at the
// top level.
type LimitConfig struct {
	// Name identifies the limit in the RateLimit-Policy header, in 429
	// bodies and in the store. Required; unique within the middleware.
	Name string
	// Average is the quota per Period. Required unless MaxInFlight is
	// set; "0" disables the item's rate.
	Average string
	// MaxInFlight is as Config.MaxInFlight, for the item's key.
	MaxInFlight string
	// Period is a duration or a number of seconds; default one second.
	Period string
	// Burst is as Config.Burst.
	Burst string
	// Algorithm is as Config.Algorithm.
	Algorithm string
	// Key is as Config.Key.
	Key []string
	// Cost is as Config.Cost.
	Cost string
	// MaxDelay is as Config.MaxDelay.
	MaxDelay string
	// Lease is as Config.Lease, for the item's limit; it is not taken
	// from the top level.
	Lease string
	// Penalty is as Config.Penalty, for the item's limit; it is not
	// taken from the top level.
	Penalty string
	// CountStatus is as Config.CountStatus, for the item's limit; it is
	// not taken from the top level.
	CountStatus []string
	// CostHeader and CostBytes are as Config's, for the item's limit;
	// they are not taken from the top level.
	CostHeader, CostBytes string
	// OnMissingKey is as Config.OnMissingKey.
	OnMissingKey string
	// Unknown is as Config.Unknown.
	Unknown map[string]interface{} `mapstructure:",remain"`
}

// SourceCriterion is Traefik's rateLimit.sourceCriterion. At most one of its
// three criteria may be set; none means IPStrategy with its defaults.
type SourceCriterion struct {
	// IPStrategy keys requests by the client's IP address.
	IPStrategy *IPStrategy
	// RequestHeaderName keys requests by the value of this header.
	RequestHeaderName string
	// RequestHost, "true", keys requests by the requested host (without
	// its port or a trailing dot, and lowercased, unlike Traefik's
	// built-in).
	RequestHost string
	// Unknown is as Config.Unknown.
	Unknown map[string]interface{} `mapstructure:",remain"`
}

// IPStrategy is Traefik's ipStrategy: how the client IP is found.
type IPStrategy struct {
	// Depth, when positive, takes the Depth-th X-Forwarded-For entry
	// counted from the right (1 is the rightmost). A header with fewer
	// entries yields the peer's own address (Traefik's built-in would put
	// all such requests into one bucket).
	Depth string
	// ExcludedIPs, when Depth is not set, walks X-Forwarded-For from the
	// right and takes the first address not in this list. Depth wins when
	// both are set, as in Traefik.
	ExcludedIPs []string
	// IPv6Subnet, between 1 and 128, groups IPv6 clients by this prefix
	// length (64: one bucket per /64).
	IPv6Subnet string
	// Unknown is as Config.Unknown.
	Unknown map[string]interface{} `mapstructure:",remain"`
}

// Redis is Traefik's rateLimit.redis, for one standalone Redis server.
type Redis struct {
	// Endpoints is the server's host:port; default localhost:6379. Several
	// endpoints are a Redis Cluster seed list, as for the built-in.
	Endpoints []string
	// Username, with Password, authenticates as an ACL user.
	Username string
	// Password authenticates the connection. "env:NAME" reads it from the
	// environment variable NAME of the Traefik process, so that labels and
	// files need not carry the secret.
	Password string
	// DB is the database number to SELECT; default 0.
	DB string
	// TLS, when set, connects with TLS (to the Sentinels too).
	TLS *RedisTLS
	// Sentinel, sluice's own, reaches the master of a set that Redis
	// Sentinels monitor, instead of Endpoints.
	Sentinel *RedisSentinel
	// ReadableKeys, sluice's own, "true", puts the clients' keys (their
	// addresses, API keys) in the names of the Redis keys, for debugging;
	// by default the names carry a digest of each.
	ReadableKeys string
	// LeaseTTL, sluice's own, is how long the lease of a maxInFlight slot
	// lives in Redis unless renewed: a duration or a number of seconds.
	// The middleware renews a request's leases every third of it while the
	// request lasts, so it bounds only how long the slots of a Traefik that
	// crashed stay taken. Default 35s (Traefik's entryPoints have no
	// write timeout by default; set it a few seconds above yours).
	LeaseTTL string
	// DialTimeout bounds opening a connection (TCP, TLS, AUTH, SELECT): a
	// duration or a number of seconds; default 1s.
	DialTimeout string
	// ReadTimeout and WriteTimeout bound a command; their sum is the
	// deadline of one round trip. Default 500ms each.
	ReadTimeout  string
	WriteTimeout string
	// Timeout, sluice's own, bounds one decision, connecting included: a
	// request waits for Redis at most this long (default 100ms, as in
	// Caddy), then OnStoreError or Fallback decides it.
	Timeout string
	// PoolSize is the most connections open at once; default 10.
	PoolSize string
	// MaxActiveConns, as for the built-in, caps the connections open at
	// once: with PoolSize, the smaller of the two applies.
	MaxActiveConns string
	// MinIdleConns and Secret are options of the built-in that the plugin
	// cannot honour: New refuses a configuration that sets them, naming
	// what to use instead, rather than ignoring them.
	MinIdleConns string
	Secret       string
	// Unknown is as Config.Unknown.
	Unknown map[string]interface{} `mapstructure:",remain"`
}

// RedisSentinel names a master set monitored by Redis Sentinels: the
// plugin asks them which server is the master, again after a failed
// command and at least once a second, and follows a failover.
type RedisSentinel struct {
	// MasterName is the set's name, as in the Sentinels' configuration.
	MasterName string
	// Endpoints are the Sentinels' host:port addresses, asked in order.
	Endpoints []string
	// Username and Password authenticate to the Sentinels, when they
	// require it; Password may be "env:NAME" as for Redis.Password.
	Username string
	Password string
	// Unknown is as Config.Unknown.
	Unknown map[string]interface{} `mapstructure:",remain"`
}

// RedisTLS is Traefik's client TLS configuration. CA, Cert and Key are each
// either a file path or the PEM text itself.
type RedisTLS struct {
	// CA verifies the server; empty means the system's roots.
	CA string
	// Cert and Key are the client certificate and its private key, for
	// servers that require one; both or neither.
	Cert string
	Key  string
	// InsecureSkipVerify, "true", accepts any server certificate.
	InsecureSkipVerify string
	// CASecret and CertSecret are the built-in's Kubernetes secrets, which
	// the plugin cannot read: New refuses them (use CA, Cert and Key).
	CASecret   string
	CertSecret string
	// Unknown is as Config.Unknown.
	Unknown map[string]interface{} `mapstructure:",remain"`
}

// CreateConfig returns an empty configuration: no limit until Average or
// Limits is set.
func CreateConfig() *Config {
	return &Config{}
}
