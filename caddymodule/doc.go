// Package caddymodule is sluice's Caddy v2 HTTP handler, the module
// http.handlers.sluice and the Caddyfile directive sluice. It translates
// Caddy's configuration, placeholders, logging and metrics to sluice's core
// engine; the algorithms, the stores, the all-or-nothing rule and every byte
// of the rate-limit headers and 429 answers are core's.
//
// # Caddyfile
//
//	sluice [<matcher>] {
//	    zone <name> {
//	        key            <template>...        # default {client_ip}; several are joined by spaces
//	        rate           <quota>/<period>     # 100/m, 5/s, 10/1m30s; required unless max_in_flight
//	        max_in_flight  <n>                  # at most n requests of a key in progress at once
//	        burst          <cost units>         # token and leaky buckets, positive; default: the quota, at least 1
//	        algorithm      token_bucket|leaky_bucket|fixed_window|sliding_window_log|sliding_window_counter
//	        cost           <number>|<placeholder>   # default 1; with cost_header, cost_bytes or response_cost, the estimate, default 0
//	        max_delay      <duration>           # leaky_bucket, token_bucket: wait up to this long instead of rejecting
//	        lease          <cost units>         # Redis: take up to this much of a key's capacity per call, spend it locally
//	        penalty        <duration>           # refuse a key the zone refuses for this long from the refusal
//	        count_status   <status...>          # count only responses of these codes or classes (401 403 429 4xx)
//	        cost_header    <header>             # the cost is the number the response's header says (X-Tokens-Used)
//	        cost_bytes                          # the cost is the response body's bytes
//	        response_cost  <placeholder>        # the cost is the number the placeholder gives after the response ({http.vars.cost})
//	        match          { <request matchers> }
//	        ipv4_prefix    <bits>               # key {client_ip} only: group IPv4 clients by network
//	        ipv6_prefix    <bits>
//	        on_missing_key skip|shared
//	        near_limit     <share>              # a near miss leaves less than this share of the capacity: 10% (default) or 0.1
//	        top_keys       <n>                  # counters of the zone's heavy-hitter sketch, 8 to 1024; default 128
//	        top_window     <duration>           # the sketch's window, 1s to 1h; /top covers the last one to two; default 1m
//	        demand_keys    <n>|off              # keys whose demand per period /advice follows at once; default 16384
//	        demand_scope   instance|fleet       # fleet: every instance's demand, summed in the Redis store
//	    }
//	    store memory [{ max_keys <n> }]
//	    store redis {
//	        address    <host:port>              # a standalone server, or
//	        addresses  <host:port>...           # seed nodes of a Redis Cluster, or
//	        sentinel   <master> <host:port>...  # Sentinels of a master
//	        username   <user>
//	        password   <password>               # placeholders such as {env.REDIS_PASSWORD} work
//	        db         <n>
//	        tls {                               # or tls alone: system roots
//	            ca          <file>
//	            cert        <file>
//	            key         <file>
//	            server_name <name>
//	            insecure_skip_verify
//	        }
//	        timeout    <duration>               # default 100ms
//	        pool_size  <n>
//	        prefix     <key prefix>             # default sluice:
//	        readable_keys                       # client keys in Redis key names (default: a digest)
//	        breaker    <failures> <backoff>     # default 5 1s
//	        lease_ttl  <duration>               # in-flight leases; default the server's write_timeout + 5s, else 35s
//	    }
//	    on_store_error allow|deny
//	    fallback       local
//	    instances      <n>
//	    headers        ietf|legacy|x...|off
//	    body           json|problem|text|none|error   (error: handle_errors writes the 429)
//	    mode           enforce|dry_run
//	    retry_jitter   <fraction>
//	    log_key
//	    share          <group>                  # zones shared with other handlers of the group
//	    id             <id>                     # names the zones' counters; default: the site's addresses
//	}
//
// Zones are decided in the order written, all-or-nothing: a request is
// charged to every applicable zone or, if any of them rejects it, to none.
// A handler's zones are its own: two sites that each define a zone per_ip
// count apart; handlers that name the same share group, or the same id,
// share the counters of their zones of the same name. A zone's counters,
// its ID in the admin API and its metrics' zone label are named by the
// handler's id or, without one, by the site it serves (its names and ports, as
// "per_ip@example.com:443"), never by the rest of the config: adding or
// reordering other sites keeps them across a reload, and instances that
// serve the site alike share them in Redis. See [Handler.ID].
// See [Handler] and [Zone] for the meaning of every setting; each has the
// same name in JSON.
//
// A zone with max_in_flight also holds a slot of its key from the moment
// its rate (if any) admits a request until the handlers after sluice
// return, also when they panic or the client leaves; a request that finds
// every slot taken is answered 429 with Retry-After: 1 and the policy
// "<zone>";q=<n>;qu="concurrent-requests", and is charged to no zone. In
// Redis a slot is a lease that expires lease_ttl after it was taken or
// last renewed (long requests renew theirs every third of it), so that
// the slots of a Caddy that crashed are free again after lease_ttl.
//
// # Errors
//
// A bad value fails the adapt or the load with one error that names it: in
// a Caddyfile, the subdirective and its file and line ("zone \"api\": cost
// 5: above the zone's capacity of 2 ..., at Caddyfile:7"); in JSON, the
// field by its path ("zones[0].max_delay \"soon\": want a duration ...",
// "store.redis.tls.verify: unknown field"). A cost above the zone's
// capacity, which no request could pay, and a key template whose braces
// do not pair are errors too. A Redis server that cannot be reached is
// not: the config loads and on_store_error or the fallback answers until
// Redis does, so that restarting Caddy during a Redis outage does not take
// every site down (with deny, those requests get 429 with Retry-After: 1).
//
// # Order
//
// The directive runs before basic_auth by default, so that unauthenticated
// floods are limited before passwords are checked. To key a zone on the
// authenticated user ({http.auth.user.id}), run it after authentication,
// either globally:
//
//	{
//	    order sluice after basic_auth
//	}
//
// or, for one site, inside a route block, which keeps the written order:
//
//	route {
//	    basic_auth {
//	        ...
//	    }
//	    sluice {
//	        zone per_user {
//	            key  {http.auth.user.id}
//	            rate 100/m
//	        }
//	    }
//	}
//
// # Admin API
//
// The module admin.api.sluice ([AdminAPI]) adds endpoints to Caddy's admin
// API, loaded by Caddy's admin server without configuration:
//
//	GET    /sluice/zones                     every zone of the running config
//	GET    /sluice/zones/<zone>/keys/<key>   a key's state: remaining, reset, next, in flight
//	DELETE /sluice/zones/<zone>/keys/<key>   reset it
//	GET    /sluice/zones/<zone>/top?n=20     the heaviest keys by rejections, admitted cost and near misses
//
// The metric sluice_decisions_total counts, besides each
// decision's outcome, the allowed decisions that left the reported zone
// under its near_limit share of the capacity, with outcome near_limit.
//
// # Placeholders
//
// After deciding, the handler sets, for the handlers, logs and responses
// that follow it:
//
//	{http.sluice.zone}       the zone reported to the client (the rejecting one,
//	                         else the one closest to exhaustion); empty when none applied
//	{http.sluice.remaining}  its remaining cost units, floored; empty when none applied
//	{http.sluice.rejected}   true when a zone rejected the request (also in dry_run
//	                         mode, where it proceeds) or the store failed under
//	                         on_store_error deny; else false
package caddymodule
