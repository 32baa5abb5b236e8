// Package traefikplugin is sluice's Traefik middleware plugin, run by
// Traefik's Yaegi interpreter. It translates Traefik's configuration and
// requests to sluice's core engine; the algorithms, the stores, the
// all-or-nothing rule and every byte of the rate-limit headers and 429
// answers are core's.
//
// # Configuration
//
// The options of Traefik's built-in rateLimit middleware work unchanged,
// with their meanings: average requests per period (period a duration or a
// number of seconds, default 1s; average 0 means no limit), a token bucket
// of size burst (default 1), sourceCriterion (ipStrategy.depth,
// ipStrategy.excludedIPs, ipStrategy.ipv6Subnet, requestHeaderName,
// requestHost) and redis (endpoints, username, password, db, tls,
// dialTimeout, readTimeout, writeTimeout, poolSize, maxActiveConns). On top of them come
// sluice's own: algorithm, cost, maxDelay, key, onMissingKey, limits,
// headers, body, mode, onStoreError, fallback, instances, retryJitter,
// trustedProxies, exemptIPs, maxKeys, redis.timeout and redis.sentinel,
// maxInFlight (inFlightReq's amount, which is accepted too) with
// redis.leaseTTL, and lease, which lets a Traefik on Redis spend a hot
// key's capacity locally. See [Config] for each. Every value may be a string, as
// Docker labels give it.
//
// Differences from the built-in, all deliberate:
//
//   - A rejected request gets sluice's 429 (rate-limit headers, Retry-After,
//     a JSON body by default). As in the built-in, a token_bucket request
//     whose token comes within 1/(2·rate) (0.5 s below one request per
//     second) waits for it (maxDelay sets the wait, "0" none); use
//     algorithm leaky_bucket with maxDelay to shape traffic.
//   - Every router using the middleware shares its quotas, and a
//     configuration reload keeps the counters (the built-in starts afresh
//     per router and per reload).
//   - ipStrategy.depth beyond the length of X-Forwarded-For keys the
//     request by its peer address; the built-in puts all such requests
//     into one bucket. requestHost is compared without port or a
//     trailing dot, and in lower case.
//   - Several redis.endpoints are a Redis Cluster seed list, as for the
//     built-in (redis.db must then be 0: the built-in ignores it);
//     replicas are not used, and a request whose limits fall in several
//     hash slots is decided by check-then-refund. maxActiveConns caps the
//     pool, minIdleConns is refused; the timeouts default to 1s (dial) and
//     500ms (read, write), and sluice's redis.timeout bounds one decision
//     (100ms, as in Caddy), since every request waits for it.
//
// # Client addresses
//
// The client_ip key part, and ipStrategy, see the peer address unless
// X-Forwarded-For is to be believed. Traefik's entryPoint has already
// removed that header from every peer outside
// entryPoints.<name>.forwardedHeaders.trustedIPs (unless
// forwardedHeaders.insecure is set), so an untrusted peer cannot forge it.
// Without trustedProxies the plugin relies on that, like the built-in:
// ipStrategy.depth and ipStrategy.excludedIPs read the header from any
// peer (excludedIPs walks it from the right, skips the excluded addresses
// and keys on the first other one). With trustedProxies set, the plugin
// checks the peer itself as well: the header of any other peer is
// ignored, whatever ipStrategy says.
//
// # State and reloads
//
// Traefik calls New once per router that uses the middleware and again on
// every configuration reload, and has no hook to release anything. The
// plugin therefore keeps a package-level registry keyed by the middleware's
// name and configuration: routers sharing a middleware share its quotas, a
// reload finds the same state, and a changed setting takes effect at once,
// keeping the counters of every limit whose name and algorithm stayed the
// same. The registry keeps at most 4 configurations per middleware name
// and 1,024 in all, dropping the least recently used; a Redis client is
// shared by every middleware with the same connection settings and closed
// with the last of them. The in-memory store is one for the whole process,
// bounded to 1,048,576 (limit, key) states, whose memory grows with the
// states held (about 50-100 bytes each); a middleware with maxKeys has a
// store of its own instead, of that capacity, kept across its reloads while
// maxKeys stays the same and dropped with its last configuration. Each
// middleware's keys are prefixed with its name, so middlewares never share a bucket, while
// the RateLimit-Policy header shows the plain limit name. The top-level
// limit is named "default", or as the name option says, never after the
// middleware. Nothing starts a goroutine but the listener of a metrics
// address, one for the whole process.
//
// # Metrics
//
// With metrics.address set, the plugin counts every verdict of the
// middleware, records each limit's demand per key and period (package
// core/demand; metrics.demandKeys bounds it, or turns it off), and serves,
// on GET /metrics of a listener of its own (never an entryPoint), the
// families of package core/telemetry in the Prometheus text format:
// sluice_decisions_total{zone,outcome}, sluice_decision_seconds,
// sluice_store_breaker_state{store}, sluice_demand{zone,quantile} and
// sluice_demand_key_periods_total{zone}, as the Caddy module exports them;
// and on GET /sluice/zones/<zone>/advice the advice on a zone's demand, as
// Caddy's admin API answers it (DELETE resets it). metrics.nearLimit is
// the share of the capacity under which an admission is a near miss. The
// zone is the middleware's name as Traefik gives it (api@file), or
// <middleware>/<limit> for each of several limits (path-escaped in the
// advice's path). Clients outside
// metrics.allowedNetworks (default the loopback) are answered 403. See
// metrics.go for the listener's life across reloads.
//
// # Redis
//
// With redis set, counters are kept in Redis and shared by every Traefik
// instance using it. The password may be read from Traefik's environment:
// password "env:REDIS_PASSWORD" (New fails, naming it, if the variable is
// not set or empty, as the Caddy module fails to load). New tries to connect once, within
// dialTimeout; a server that is down then, or later, never makes New fail:
// requests are decided by onStoreError (allow, the default, or deny) or, with
// fallback local, by this instance's memory with 1/instances of each quota,
// and the client reconnects by itself (at most one dial per second while
// it has never connected). After 5 consecutive failures a circuit breaker
// stops asking Redis for 1 s at a time, so an outage costs no time per
// request.
//
// # Logs
//
// Traefik logs what a plugin prints with the fmt package at debug level and
// what it logs with the log package at error level. At error level:
// configuration remarks, once per configuration; a line when Redis becomes
// unavailable (the circuit breaker opened, or the first connection failed)
// and one when it answers again. At debug level: a summary of the requests
// that were not simply allowed, at most
// one line per middleware every 10 seconds, such as
//
//	sluice api@docker: 123 requests rejected in the last 10s
//
// # Dry run
//
// With mode dry_run every request passes; one the limits would have
// rejected reaches the upstream with the request header
// X-Sluice-Dry-Run: rejected (any such header from the client is removed),
// and the response carries no rate-limit header, so that clients behave as
// they would without the limits. The log's summary lines count them.
package traefikplugin
