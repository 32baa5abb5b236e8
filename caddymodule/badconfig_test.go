package caddymodule

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// zoneOK is a valid zone, three lines, for the rows about other options.
var zoneOK = []string{"zone a {", "\trate 1/s", "}"}

// with returns lines after zoneOK.
func with(lines ...string) []string { return append(append([]string{}, zoneOK...), lines...) }

// redisWith returns a valid zone and a store redis block holding lines.
func redisWith(lines ...string) []string {
	return append(append(with("store redis {"), lines...), "}")
}

// badCaddyfiles are bad sluice blocks, at least one for every
// subdirective (TestBadCaddyfileCoversEverySubdirective checks it), each
// with the subdirective it is bad in (zone.<sub>, store <kind>.<sub>, and
// <level>* for an unknown one), the line of the block the error must point
// at (0: the Caddyfile adapts, and the error comes when the config loads),
// and what the error must contain.
var badCaddyfiles = []struct {
	option string
	block  []string
	line   int
	want   string
}{
	{"*", with("limits 5"), 4, `unrecognized sluice subdirective "limits"`},
	{"zone", []string{"zone a b {", "\trate 1/s", "}"}, 1, "zone: want one name before the block, got 2 arguments"},
	{"zone", []string{"zone {", "\trate 1/s", "}"}, 1, "zone: want one name before the block, got 0 arguments"},
	{"zone", append(with(), zoneOK...), 4, `zone "a": name "a": defined twice`},
	{"zone", []string{"mode enforce"}, 2, "sluice: at least one zone is required"},
	{"zone", []string{"zone a:b {", "\trate 1/s", "}"}, 1, `zone "a:b": name "a:b": must not contain quotes`},
	{"zone.*", []string{"zone a {", "\trate 1/s", "\tlimit 5", "}"}, 3, `zone "a": unrecognized subdirective "limit"`},
	{"zone.*", []string{"zone a {", "\trate 1/s", "\trate 2/s", "}"}, 3, `zone "a": duplicate subdirective "rate"`},
	{"zone.key", []string{"zone a {", "\tkey", "\trate 1/s", "}"}, 2, "key: want a template"},
	{"zone.key", []string{"zone a {", "\tkey {http.request.header.X-Key", "\trate 1/s", "}"}, 2, `key "{http.request.header.X-Key": the placeholder opened at byte 0 is not closed`},
	{"zone.key", []string{"zone a {", "\tkey tenant}", "\trate 1/s", "}"}, 2, `key "tenant}": a } at byte 6 closes no placeholder`},
	{"zone.key", []string{"zone a {", "\tkey {http.request.header.Host}", "\trate 1/s", "}"}, 2, `key "{http.request.header.Host}": placeholder {http.request.header.Host}: use the host part: Go moves the Host header to Request.Host`},
	{"zone.key", []string{"zone a {", "\tkey {http.request.uri.query.} x", "\trate 1/s", "}"}, 2, `key "{http.request.uri.query.} x": placeholder {http.request.uri.query.}: want query:<name>`},
	{"zone.rate", []string{"zone a {", "\trate lots", "}"}, 2, `rate "lots"`},
	{"zone.rate", []string{"zone a {", "\trate 0/s", "}"}, 2, `rate "0/s"`},
	{"zone.rate", []string{"zone a {", "\trate -1/s", "}"}, 2, `rate "-1/s"`},
	{"zone.rate", []string{"zone a {", "\trate 1/0s", "}"}, 2, `rate "1/0s"`},
	{"zone.rate", []string{"zone a {", "\tburst 5", "}"}, 3, `zone "a": rate: required`},
	{"zone.rate", []string{"zone a {", "\trate 20000/m", "\talgorithm sliding_window_log", "}"}, 2, `rate: quota "20000": sliding_window_log keeps one entry per request and accepts a quota of at most 10000`},
	{"zone.rate", []string{"zone a {", "\trate 1/2s", "\trate 3/s", "}"}, 3, `duplicate subdirective "rate"`},
	{"zone.burst", []string{"zone a {", "\trate 1/s", "\tburst -1", "}"}, 3, `burst "-1": must not be negative`},
	{"zone.burst", []string{"zone a {", "\trate 1/s", "\tburst x", "}"}, 3, `burst "x": want a number`},
	// 0, the quota here when left out, would be 1 in Traefik: refused in
	// both hosts, in core's words.
	{"zone.burst", []string{"zone a {", "\trate 10/s", "\tburst 0", "}"}, 3, `burst "0": must be positive (leave burst out for the default)`},
	{"zone.burst", []string{"zone a {", "\trate 10/s", "\talgorithm leaky_bucket", "\tburst 0.0", "}"}, 4, `burst "0": must be positive`},
	{"zone.burst", []string{"zone a {", "\trate 1/s", "\talgorithm fixed_window", "\tburst 5", "}"}, 4, "burst: fixed_window takes its capacity from the rate's quota"},
	{"zone.algorithm", []string{"zone a {", "\trate 1/s", "\talgorithm magic", "}"}, 3, `algorithm "magic": unknown (want token_bucket`},
	{"zone.cost", []string{"zone a {", "\trate 1/s", "\tcost 0", "}"}, 3, `cost "0": must be positive; 0 is an estimate only for a limit whose cost comes from its response`},
	{"zone.cost_header", []string{"zone a {", "\trate 1/s", "\tcost_header", "}"}, 3, "cost_header: want one argument, got 0"},
	{"zone.cost_header", []string{"zone a {", "\trate 1/s", "\tcost_header X:Y", "}"}, 3, `cost_header "X:Y": not a header name`},
	{"zone.cost_header", []string{"zone a {", "\trate 100/s", "\tcost_header X-Tokens-Used", "\tlease 5", "}"}, 3, "cost_header: a lease's admissions cannot be settled; remove lease"},
	{"zone.cost_header", []string{"zone a {", "\tmax_in_flight 5", "\tcost_header X-Tokens-Used", "}"}, 3, "cost_header: only a rate is charged a cost"},
	{"zone.cost_bytes", []string{"zone a {", "\trate 1/s", "\tcost_bytes yes", "}"}, 3, `cost_bytes: takes no argument, got "yes"`},
	{"zone.cost_bytes", []string{"zone a {", "\trate 1/s", "\tcost_header X-Tokens-Used", "\tcost_bytes", "}"}, 4, "cost_bytes: a cost comes from a header or from the body's bytes, not both"},
	{"zone.response_cost", []string{"zone a {", "\trate 1/s", "\tresponse_cost", "}"}, 3, "response_cost: want one argument, got 0"},
	{"zone.response_cost", []string{"zone a {", "\trate 1/s", "\tresponse_cost 5", "}"}, 3, `response_cost "5": want a placeholder, such as {http.response.header.X-Tokens-Used}; a constant cost is cost's`},
	{"zone.response_cost", []string{"zone a {", "\trate 1/s", "\tcost_header X-Tokens-Used", "\tresponse_cost {http.vars.cost}", "}"}, 4, "response_cost: a cost comes from response_cost or from cost_header, not both"},
	{"zone.response_cost", []string{"zone a {", "\trate 1/s", "\tresponse_cost {http.response.size}", "\tcost_bytes", "}"}, 3, "response_cost: a cost comes from response_cost or from cost_bytes, not both"},
	{"zone.response_cost", []string{"zone a {", "\trate 100/s", "\tresponse_cost {http.vars.cost}", "\tlease 5", "}"}, 3, "response_cost: a lease's admissions cannot be settled; remove lease"},
	{"zone.response_cost", []string{"zone a {", "\tmax_in_flight 5", "\tresponse_cost {http.vars.cost}", "}"}, 3, "response_cost: only a rate is charged a cost"},
	{"zone.cost", []string{"zone a {", "\trate 1/s", "\tcost NaN", "}"}, 3, `cost "NaN"`},
	{"zone.cost", []string{"zone a {", "\trate 1/s", "\tcost five", "}"}, 3, `cost "five": not a number or a placeholder`},
	{"zone.cost", []string{"zone a {", "\trate 10/s", "\tburst 2", "\tcost 5", "}"}, 4, `cost "5": above the capacity of 2`},
	{"zone.max_delay", []string{"zone a {", "\trate 1/s", "\tmax_delay soon", "}"}, 3, `max_delay "soon": want a non-negative duration`},
	{"zone.max_delay", []string{"zone a {", "\trate 1/s", "\tmax_delay -1s", "}"}, 3, `max_delay "-1s": want a non-negative duration`},
	{"zone.max_delay", []string{"zone a {", "\trate 1/s", "\talgorithm fixed_window", "\tmax_delay 1s", "}"}, 4, "max_delay: only leaky_bucket and token_bucket delay requests"},
	{"zone.lease", []string{"zone a {", "\trate 100/s", "\tlease many", "}"}, 3, `lease "many": want a number`},
	{"zone.lease", []string{"zone a {", "\trate 100/s", "\tlease -5", "}"}, 3, `lease "-5": must be a positive number`},
	{"zone.lease", []string{"zone a {", "\trate 100/s", "\tlease 500", "}"}, 3, `lease "500": above the capacity of 100`},
	{"zone.lease", []string{"zone a {", "\trate 100/s", "\talgorithm leaky_bucket", "\tlease 5", "}"}, 4, "lease: a leaky_bucket's admissions wait in order"},
	{"zone.lease", []string{"zone a {", "\tmax_in_flight 5", "\tlease 5", "}"}, 3, "lease: only a rate's capacity is leased"},
	{"zone.penalty", []string{"zone a {", "\trate 5/m", "\tpenalty soon", "}"}, 3, `penalty "soon": want a non-negative duration`},
	{"zone.count_status", []string{"zone a {", "\trate 5/m", "\tcount_status 401 4x", "}"}, 3, `count_status "4x": must be a status code from 100 to 599 or a class from 1xx to 5xx`},
	{"zone.count_status", []string{"zone a {", "\trate 5/m", "\tcount_status", "}"}, 3, "wrong argument count"},
	{"zone.penalty", []string{"zone a {", "\trate 5/m", "\tpenalty 1ns", "}"}, 3, `penalty "1ns": must be a whole number of microseconds`},
	{"zone.penalty", []string{"zone a {", "\trate 100/s", "\tlease 5", "\tpenalty 15m", "}"}, 4, "penalty: a lease admits requests that Redis does not see"},
	{"zone.lease", []string{"zone a {", "\trate 100/s", "}", "zone b {", "\trate 100/s", "\tlease 5", "}"}, 6, `zone "b": lease "5": only a Redis store's capacity is leased`},
	{"zone.max_in_flight", []string{"zone a {", "\tmax_in_flight x", "}"}, 2, `max_in_flight "x": want an integer from 1 to`},
	{"zone.max_in_flight", []string{"zone a {", "\tmax_in_flight 0", "}"}, 2, `max_in_flight "0": want an integer from 1 to`},
	{"zone.algorithm", []string{"zone a {", "\tmax_in_flight 2", "\talgorithm fixed_window", "}"}, 3, `zone "a": algorithm "fixed_window": only a rate has an algorithm (set rate, or remove algorithm)`},
	{"zone.near_limit", []string{"zone a {", "\trate 1/s", "\tnear_limit 150%", "}"}, 3, `near_limit "150%": want a share of the capacity above 0 and at most 100%`},
	{"zone.near_limit", []string{"zone a {", "\trate 1/s", "\tnear_limit close", "}"}, 3, `near_limit "close": want a share of the capacity`},
	{"zone.top_keys", []string{"zone a {", "\trate 1/s", "\ttop_keys 2", "}"}, 3, `top_keys "2": want an integer from 8 to 1024`},
	{"zone.top_keys", []string{"zone a {", "\trate 1/s", "\ttop_keys many", "}"}, 3, `top_keys "many": want an integer from 8 to 1024`},
	{"zone.top_window", []string{"zone a {", "\trate 1/s", "\ttop_window soon", "}"}, 3, `top_window "soon": want a non-negative duration`},
	{"zone.top_window", []string{"zone a {", "\trate 1/s", "\ttop_window 2h", "}"}, 3, `top_window "2h": want a duration from 1s to 1h0m0s`},
	{"zone.demand_keys", []string{"zone a {", "\trate 1/s", "\tdemand_keys none", "}"}, 3, `demand_keys "none": want off or an integer from 1 to 4194304`},
	{"zone.demand_keys", []string{"zone a {", "\trate 1/s", "\tdemand_keys 0", "}"}, 3, `demand_keys "0": want off or an integer from 1 to 4194304`},
	{"zone.demand_scope", []string{"zone a {", "\trate 1/s", "\tdemand_scope cluster", "}"}, 3, `demand_scope "cluster": want instance or fleet`},
	{"zone.demand_scope", []string{"zone a {", "\trate 1/s", "\tdemand_scope fleet", "}"}, 3, `demand_scope "fleet": needs a Redis store`},
	{"zone.demand_scope", []string{"zone a {", "\trate 1/s", "\tdemand_keys off", "\tdemand_scope fleet", "}", "store redis {", "\taddress 127.0.0.1:1", "}"}, 4, `demand_scope "fleet": needs the zone's demand recorded`},
	{"zone.match", []string{"zone a {", "\trate 1/s", "\tmatch {", "\t\tnosuchmatcher x", "\t}", "}"}, 5, "match: getting matcher module 'nosuchmatcher'"},
	{"zone.ipv4_prefix", []string{"zone a {", "\trate 1/s", "\tipv4_prefix 33", "}"}, 3, `ipv4_prefix "33": want an integer from 0 to 32`},
	{"zone.ipv4_prefix", []string{"zone a {", "\trate 1/s", "\tkey {http.request.header.X-Key}", "\tipv4_prefix 24", "}"}, 4, "ipv4_prefix: groups client addresses, so it applies only to the key {client_ip}"},
	{"zone.ipv6_prefix", []string{"zone a {", "\trate 1/s", "\tipv6_prefix 129", "}"}, 3, `ipv6_prefix "129": want an integer from 0 to 128`},
	{"zone.ipv6_prefix", []string{"zone a {", "\trate 1/s", "\tipv6_prefix x", "}"}, 3, `ipv6_prefix "x": want an integer`},
	{"zone.on_missing_key", []string{"zone a {", "\trate 1/s", "\ton_missing_key maybe", "}"}, 3, `on_missing_key "maybe": want skip or shared`},
	{"store", with("store"), 4, "store: want memory or redis"},
	{"store.*", with("store disk"), 4, `store "disk": unknown (want memory or redis)`},
	{"store.memory", with("store memory extra"), 4, `store memory: unexpected argument "extra"`},
	{"store memory.*", with("store memory {", "\tkeys 5", "}"), 5, `store memory: unrecognized subdirective "keys"`},
	{"store memory.max_keys", with("store memory {", "\tmax_keys 0", "}"), 5, `max_keys "0": want an integer from 1 to 1073741824`},
	{"store memory.max_keys", with("store memory {", "\tmax_keys many", "}"), 5, `max_keys "many": want an integer`},
	{"store.redis", with("store redis {", "}"), 5, "store.redis: set exactly one of address, addresses (Cluster) and sentinel"},
	{"store redis.*", redisWith("\taddress 127.0.0.1:6379", "\thost x"), 6, `store redis: unrecognized subdirective "host"`},
	{"store redis.address", redisWith("\taddress localhost"), 5, `store.redis.address "localhost": want host:port`},
	{"store redis.address", redisWith("\taddress a:1 b:2"), 5, "address: want one argument, got 2"},
	{"store redis.address", redisWith("\taddress 127.0.0.1:6379", "\taddresses 127.0.0.1:7000"), 7, "store.redis: set exactly one of address, addresses (Cluster) and sentinel"},
	{"store redis.addresses", redisWith("\taddresses"), 5, "addresses: want the host:port of at least one Cluster node"},
	{"store redis.addresses", redisWith("\taddresses 127.0.0.1:7000 nohost"), 5, `store.redis.addresses "nohost": want host:port`},
	{"store redis.sentinel", redisWith("\tsentinel mymaster"), 5, "sentinel: want the master's name and at least one Sentinel's host:port"},
	{"store redis.sentinel", redisWith("\tsentinel mymaster nohost"), 5, `store.redis.sentinel.addresses "nohost": want host:port`},
	{"store redis.username", redisWith("\taddress 127.0.0.1:6379", "\tusername app"), 6, "store.redis.username: needs a password"},
	{"store redis.password", redisWith("\taddress 127.0.0.1:6379", "\tpassword a b"), 6, "password: want one argument, got 2"},
	// An unset variable: {env.X} fails the load, {$X} (expanded as the
	// Caddyfile is read) the adapt.
	{"store redis.password", redisWith("\taddress 127.0.0.1:6379", "\tpassword {env.SLUICE_TEST_UNSET_VARIABLE}"), 0, `store.redis.password "{env.SLUICE_TEST_UNSET_VARIABLE}": expands to nothing`},
	{"store redis.password", redisWith("\taddress 127.0.0.1:6379", "\tpassword {$SLUICE_TEST_UNSET_VARIABLE}"), 6, "password: want one argument, got 0"},
	{"store redis.db", redisWith("\taddress 127.0.0.1:6379", "\tdb -1"), 6, `db "-1": want an integer from 0 to`},
	{"store redis.db", redisWith("\taddresses 127.0.0.1:7000", "\tdb 1"), 6, `store.redis.db "1": a Redis Cluster has only database 0`},
	{"store redis.tls", redisWith("\taddress 127.0.0.1:6379", "\ttls yes"), 6, `tls: unexpected argument "yes"`},
	{"store redis.tls.*", redisWith("\taddress 127.0.0.1:6379", "\ttls {", "\t\tverify no", "\t}"), 7, `tls: unrecognized subdirective "verify"`},
	{"store redis.tls.ca", redisWith("\taddress 127.0.0.1:6379", "\ttls {", "\t\tca /nonexistent/ca.pem", "\t}"), 0, `store.redis.tls: ca "/nonexistent/ca.pem": neither PEM text nor a readable file`},
	{"store redis.tls.cert", redisWith("\taddress 127.0.0.1:6379", "\ttls {", "\t\tcert /nonexistent/cert.pem", "\t}"), 6, "store.redis.tls: cert and key go together"},
	{"store redis.tls.cert", redisWith("\taddress 127.0.0.1:6379", "\ttls {", "\t\tcert /nonexistent/cert.pem", "\t\tkey /nonexistent/key.pem", "\t}"), 0, `store.redis.tls: cert "/nonexistent/cert.pem": neither PEM text nor a readable file`},
	{"store redis.tls.key", redisWith("\taddress 127.0.0.1:6379", "\ttls {", "\t\tkey /nonexistent/key.pem", "\t}"), 6, "store.redis.tls: cert and key go together"},
	{"store redis.tls.server_name", redisWith("\taddress 127.0.0.1:6379", "\ttls {", "\t\tserver_name a b", "\t}"), 7, "server_name: want one argument, got 2"},
	{"store redis.tls.insecure_skip_verify", redisWith("\taddress 127.0.0.1:6379", "\ttls {", "\t\tinsecure_skip_verify yes", "\t}"), 7, `insecure_skip_verify: takes no argument, got "yes"`},
	{"store redis.timeout", redisWith("\taddress 127.0.0.1:6379", "\ttimeout soon"), 6, `timeout "soon": want a non-negative duration`},
	{"store redis.lease_ttl", redisWith("\taddress 127.0.0.1:6379", "\tlease_ttl soon"), 6, `lease_ttl "soon": want a non-negative duration`},
	{"store redis.lease_ttl", redisWith("\taddress 127.0.0.1:6379", "\tlease_ttl 0s"), 6, `lease_ttl "0s": want a positive duration`},
	{"store redis.lease_ttl", redisWith("\taddress 127.0.0.1:6379", "\tlease_ttl 10s"), 4, "store.redis.lease_ttl: only zones with max_in_flight take leases"},
	{"store redis.timeout", redisWith("\taddress 127.0.0.1:6379", "\ttimeout -1s"), 6, `timeout "-1s": want a non-negative duration`},
	{"store redis.pool_size", redisWith("\taddress 127.0.0.1:6379", "\tpool_size 0"), 6, `pool_size "0": want an integer from 1 to`},
	{"store redis.readable_keys", redisWith("\taddress 127.0.0.1:6379", "\treadable_keys yes"), 6, `readable_keys: takes no argument, got "yes"`},
	{"store redis.prefix", redisWith("\taddress 127.0.0.1:6379", "\tprefix {x}"), 6, `prefix "{x}": must not contain braces`},
	{"store redis.breaker", redisWith("\taddress 127.0.0.1:6379", "\tbreaker x 1s"), 6, `breaker: failures "x": want a positive integer`},
	{"store redis.breaker", redisWith("\taddress 127.0.0.1:6379", "\tbreaker 5 soon"), 6, `breaker: backoff "soon": want a positive duration`},
	{"store redis.breaker", redisWith("\taddress 127.0.0.1:6379", "\tbreaker 5"), 6, "breaker: want two arguments, <failures> <backoff>"},
	{"on_store_error", with("on_store_error panic"), 4, `on_store_error "panic": want allow or deny`},
	{"fallback", with("fallback remote"), 4, `fallback "remote": unknown (want local)`},
	{"fallback", with("fallback local"), 4, "fallback: applies only to a store that can fail, such as Redis, not to memory"},
	{"instances", with("store redis {", "\taddress 127.0.0.1:6379", "}", "fallback local", "instances 0"), 8, `instances "0": want an integer from 1 to`},
	{"instances", with("instances 2"), 4, "instances: only the local fallback divides quotas by the number of instances (set fallback, or remove instances)"},
	{"headers", with("headers"), 4, "headers: want at least one of ietf, legacy, x or off"},
	{"headers", with("headers ietf fancy"), 4, `headers "fancy": unknown (want ietf, legacy, x or off)`},
	{"headers", with("headers off ietf"), 4, `headers "off,ietf": off cannot be combined`},
	{"body", with("body html"), 4, `body "html": unknown (want json, problem, text, none or error)`},
	{"mode", with("mode audit"), 4, `mode "audit": want enforce or dry_run`},
	{"mode", with("mode enforce", "mode dry_run"), 5, `duplicate subdirective "mode"`},
	{"retry_jitter", with("retry_jitter 2"), 4, `retry_jitter "2": must be between 0 and 1`},
	{"retry_jitter", with("retry_jitter some"), 4, `retry_jitter "some": want a number`},
	{"share", with("share"), 4, "share: want one argument, got 0"},
	{"share", with("share a b"), 4, "share: want one argument, got 2"},
	{"log_key", with("log_key yes"), 4, `log_key: takes no argument, got "yes"`},
	{"id", with("id"), 4, "id: want one argument, got 0"},
	{"id", with("id a b"), 4, "id: want one argument, got 2"},
	{"id", with("id a", "share b"), 4, `id "a": not with share "b"`},
}

// TestBadCaddyfile checks that every bad sluice block fails with one
// error naming the subdirective and pointing at its line (Caddyfile:N),
// or, for what only loading can find (an unreadable file), fails to load
// naming it.
func TestBadCaddyfile(t *testing.T) {
	adapter := caddyconfig.GetAdapter("caddyfile")
	for _, tc := range badCaddyfiles {
		block := "\t\t" + strings.Join(tc.block, "\n\t\t")
		in := ":8080 {\n\tsluice {\n" + block + "\n\t}\n}\n"
		out, _, err := adapter.Adapt([]byte(in), nil)
		name := tc.option + ": " + strings.Join(tc.block, " | ")
		if tc.line == 0 {
			if err != nil {
				t.Errorf("%s: adapt: %v, want an error at load", name, err)
				continue
			}
			var cfg caddy.Config
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			err = caddy.Validate(&cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: load error %v, want one containing %q", name, err, tc.want)
			}
			continue
		}
		at := fmt.Sprintf("at Caddyfile:%d", tc.line+2)
		switch {
		case err == nil:
			t.Errorf("%s: adapted without error, want one containing %q", name, tc.want)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s:\n got %v\nwant an error containing %q", name, err, tc.want)
		case !strings.Contains(err.Error(), at):
			t.Errorf("%s: error %v, want it %s", name, err, at)
		case !strings.Contains(err.Error(), lastWord(tc.option)):
			t.Errorf("%s: error %v does not name %q", name, err, lastWord(tc.option))
		}
	}
	if n := poolSize(); n != 0 {
		t.Errorf("failed loads left %d stores in the pool", n)
	}
}

// TestLeaseWithFallback: a lease above the local fallback's share of the
// capacity (burst 100, lease 50, 10 instances: a share of 10) loads, from
// a Caddyfile and from JSON, as the fallback ignores lease; a lease above
// the capacity still fails, naming the zone and the field, and in a
// Caddyfile its line.
func TestLeaseWithFallback(t *testing.T) {
	caddyfile := func(lease string) string {
		return ":8080 {\n\tsluice {\n\t\tzone a {\n\t\t\trate 100/s\n\t\t}\n\t\tzone b {\n\t\t\trate 100/s\n\t\t\tburst 100\n\t\t\tlease " + lease +
			"\n\t\t}\n\t\tstore redis {\n\t\t\taddress 127.0.0.1:1\n\t\t}\n\t\tfallback local\n\t\tinstances 10\n\t}\n}\n"
	}
	handler := func(lease int) map[string]any {
		return map[string]any{"handler": "sluice", "zones": []any{zone("a", "100/s"), zone("b", "100/s", "burst", 100, "lease", lease)},
			"store": map[string]any{"redis": map[string]any{"address": "127.0.0.1:1"}}, "fallback": "local", "instances": 10}
	}
	load := func(h map[string]any) error {
		raw, _ := json.Marshal(map[string]any{"apps": map[string]any{"http": map[string]any{"servers": map[string]any{
			"srv0": map[string]any{"listen": []string{"127.0.0.1:0"}, "routes": []any{map[string]any{"handle": []any{h}}}},
		}}}})
		var cfg caddy.Config
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		return caddy.Validate(&cfg)
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	out, _, err := adapter.Adapt([]byte(caddyfile("50")), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	var cfg caddy.Config
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&cfg); err != nil {
		t.Errorf("Caddyfile: %v", err)
	}
	if err := load(handler(50)); err != nil {
		t.Errorf("JSON: %v", err)
	}
	const want = `lease "500": above the capacity of 100`
	if _, _, err := adapter.Adapt([]byte(caddyfile("500")), nil); err == nil || !strings.Contains(err.Error(), `zone "b": `+want) || !strings.Contains(err.Error(), "Caddyfile:9") {
		t.Errorf("Caddyfile, lease 500: %v, want an error of zone \"b\" at Caddyfile:9 containing %q", err, want)
	}
	if err := load(handler(500)); err == nil || !strings.Contains(err.Error(), "zones[1]."+want) {
		t.Errorf("JSON, lease 500: %v, want an error containing %q", err, "zones[1]."+want)
	}
	if n := poolSize(); n != 0 {
		t.Errorf("loads left %d stores in the pool", n)
	}
}

// lastWord is the subdirective an option path ends with ("max_keys" of
// "store memory.max_keys"), or for <level>* its level's word.
func lastWord(option string) string {
	option = strings.TrimSuffix(strings.TrimSuffix(option, "*"), ".")
	if option == "" {
		return "sluice"
	}
	if i := strings.LastIndexAny(option, ". "); i >= 0 {
		return option[i+1:]
	}
	return option
}

// caddyfileLevels are the switches of caddyfile.go on a subdirective, by
// function and switch tag, and the prefix of their options in
// badCaddyfiles.
var caddyfileLevels = map[string]string{
	"UnmarshalCaddyfile sub": "",
	"parseZone sub":          "zone.",
	"parseStore kind":        "store.",
	"parseStore d.Val()":     "store memory.",
	"parseRedis sub":         "store redis.",
	"parseRedisTLS sub":      "store redis.tls.",
}

// TestBadCaddyfileCoversEverySubdirective reads the subdirective switches
// of caddyfile.go and fails when a subdirective, or a level's unknown
// subdirective, has no row in badCaddyfiles.
func TestBadCaddyfileCoversEverySubdirective(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "caddyfile.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, tc := range badCaddyfiles {
		covered[tc.option] = true
	}
	var options []string
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			sw, ok := n.(*ast.SwitchStmt)
			if !ok || sw.Tag == nil {
				return true
			}
			level := fn.Name.Name + " " + exprString(sw.Tag)
			prefix, ok := caddyfileLevels[level]
			if !ok {
				t.Errorf("a switch in %s on %s: add it to caddyfileLevels and its options to badCaddyfiles", fn.Name.Name, exprString(sw.Tag))
				return true
			}
			options = append(options, prefix+"*")
			for _, stmt := range sw.Body.List {
				for _, e := range stmt.(*ast.CaseClause).List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						options = append(options, prefix+s)
					}
				}
			}
			return true
		})
	}
	var missing []string
	for _, o := range options {
		if !covered[o] {
			missing = append(missing, o)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("subdirectives without a bad-value row in badCaddyfiles: %s", strings.Join(missing, ", "))
	}
	if len(options) < 45 {
		t.Errorf("found %d subdirectives in caddyfile.go, fewer than there are", len(options))
	}
}

// exprString prints a switch tag: an identifier or a method call.
func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.CallExpr:
		return exprString(x.Fun) + "()"
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	}
	return fmt.Sprintf("%T", e)
}

// zj is a handler with one zone "a" of rate 1/s and more of the zone's
// fields; hj is a handler with that zone and more of the handler's fields;
// rj is a handler with that zone and a Redis store of these fields.
func zj(fields string) string { return `{"zones":[{"name":"a","rate":"1/s",` + fields + `}]}` }
func hj(fields string) string { return `{"zones":[{"name":"a","rate":"1/s"}],` + fields + `}` }
func rj(fields string) string { return hj(`"store":{"redis":{` + fields + `}}`) }

// badJSON are bad handler configurations in JSON, at least one for every
// field (TestBadJSONCoversEveryField checks it), each with the field's
// path (zones.<field> for a zone's; <path>* for an unknown field) and what
// the error of loading it must contain: the path of the field at fault.
var badJSON = []struct {
	field, handler, want string
}{
	{"*", hj(`"limits":1`), "http.handlers.sluice: limits: unknown field"},
	{"zones", `{"zones":[]}`, "zones: at least one zone is required"},
	{"zones", `{"zones":[null]}`, "zones[0]: null"},
	{"zones", `{"zones":{}}`, "zones: want []json.RawMessage, got a JSON object"},
	{"zones.*", zj(`"burts":2`), "zones[0].burts: unknown field"},
	{"zones.name", `{"zones":[{"rate":"1/s"}]}`, "zones[0].name: must not be empty"},
	{"zones.name", `{"zones":[{"name":"a:b","rate":"1/s"}]}`, `zones[0].name "a:b": must not contain quotes`},
	{"zones.name", `{"zones":[{"name":"a","rate":"1/s"},{"name":"a","rate":"2/s"}]}`, `zones[1].name "a": defined twice`},
	{"zones.key", zj(`"key":"{http.request.header.X"`), `zones[0].key "{http.request.header.X": the placeholder opened at byte 0 is not closed`},
	{"zones.key", zj(`"key":5`), "zones[0].key: want string, got a JSON number"},
	{"zones.rate", `{"zones":[{"name":"a"}]}`, "zones[0].rate"},
	{"zones.rate", `{"zones":[{"name":"a","rate":"lots"}]}`, `zones[0].rate "lots"`},
	{"zones.rate", `{"zones":[{"name":"a","rate":"1/0s"}]}`, `zones[0].rate "1/0s"`},
	{"zones.rate", `{"zones":[{"name":"a","rate":"20000/m","algorithm":"sliding_window_log"}]}`, `zones[0].rate: quota "20000": sliding_window_log keeps one entry per request and accepts a quota of at most 10000`},
	{"zones.burst", zj(`"burst":-1`), `zones[0].burst "-1": must not be negative`},
	{"zones.burst", zj(`"burst":"5"`), "zones[0].burst: want float64, got a JSON string"},
	{"zones.algorithm", zj(`"algorithm":"gcra"`), `zones[0].algorithm "gcra": unknown`},
	{"zones.cost", zj(`"cost":-1`), `zones[0].cost "-1": must not be negative`},
	{"zones.cost", zj(`"cost":0`), `zones[0].cost "0": must be positive; 0 is an estimate only for a limit whose cost comes from its response`},
	{"zones.cost_header", zj(`"cost_header":"X Y"`), `zones[0].cost_header "X Y": not a header name`},
	{"zones.cost_header", zj(`"cost_header":5`), "zones[0].cost_header: want string, got a JSON number"},
	{"zones.cost_bytes", zj(`"cost_header":"X-Tokens-Used","cost_bytes":true`), "zones[0].cost_bytes: a cost comes from a header"},
	{"zones.cost_bytes", zj(`"burst":100,"cost_bytes":true,"cost":500`), `zones[0].cost "500": above the capacity of 100`},
	{"zones.response_cost", zj(`"response_cost":"{http.vars.cost"`), `zones[0].response_cost "{http.vars.cost": want a placeholder`},
	{"zones.response_cost", zj(`"response_cost":"{http.vars.cost}","cost_header":"X-Cost"`), "zones[0].response_cost: a cost comes from response_cost or from cost_header, not both"},
	{"zones.response_cost", zj(`"response_cost":"{http.vars.cost}","lease":0.5`), "zones[0].response_cost: a lease's admissions cannot be settled; remove lease"},
	{"zones.response_cost", zj(`"response_cost":"{http.response.size}","burst":100,"cost":500`), `zones[0].cost "500": above the capacity of 100`},
	{"zones.cost", zj(`"burst":2,"cost":5`), `zones[0].cost "5": above the capacity of 2`},
	{"zones.max_delay", zj(`"max_delay":"soon"`), `zones[0].max_delay "soon": want a duration`},
	{"zones.penalty", zj(`"penalty":"soon"`), `zones[0].penalty "soon": want a duration`},
	{"zones.count_status", zj(`"count_status":["600"]`), `count_status "600": must be a status code from 100 to 599`},
	{"zones.lease", zj(`"lease":1000`), `zones[0].lease "1000": above the capacity`},
	{"zones.lease", zj(`"lease":0.5`), `zones[0].lease "0.5": only a Redis store's capacity is leased`},
	{"zones.max_in_flight", zj(`"max_in_flight":-1`), `zones[0].max_in_flight "-1": must not be negative`},
	{"zones.max_in_flight", zj(`"max_in_flight":"2"`), "zones[0].max_in_flight: want int, got a JSON string"},
	{"zones.near_limit", zj(`"near_limit":1.5`), "zones[0].near_limit: must be between 0 and 1"},
	{"zones.near_limit", zj(`"near_limit":"10%"`), "zones[0].near_limit: want float64, got a JSON string"},
	{"zones.top_keys", zj(`"top_keys":2`), "zones[0].top_keys: must be between 8 and 1024, got 2"},
	{"zones.top_keys", zj(`"top_keys":"many"`), "zones[0].top_keys: want int, got a JSON string"},
	{"zones.top_window", zj(`"top_window":"soon"`), `zones[0].top_window "soon": want a duration`},
	{"zones.top_window", zj(`"top_window":"2h"`), "zones[0].top_window: must be between 1s and 1h0m0s, got 2h0m0s"},
	{"zones.demand_keys", zj(`"demand_keys":-2`), "zones[0].demand_keys: -2: want -1 (off), 0 (the default, 16384) or up to 4194304"},
	{"zones.demand_scope", zj(`"demand_scope":"cluster"`), `zones[0].demand_scope "cluster": want instance or fleet`},
	{"zones.demand_scope", zj(`"demand_scope":"fleet"`), `zones[0].demand_scope "fleet": needs a Redis store`},
	{"zones.max_delay", zj(`"max_delay":-1`), `zones[0].max_delay "-1ns": must not be negative`},
	{"zones.max_delay", zj(`"algorithm":"fixed_window","max_delay":"1s"`), "zones[0].max_delay: only leaky_bucket and token_bucket delay requests"},
	{"zones.match", zj(`"match":{"nosuchmatcher":{}}`), "zones[0].match: "},
	{"zones.ipv4_prefix", zj(`"ipv4_prefix":33`), `zones[0].ipv4_prefix "33": must be between 0 and 32`},
	{"zones.ipv6_prefix", zj(`"ipv6_prefix":129`), `zones[0].ipv6_prefix "129": must be between 0 and 128`},
	{"zones.ipv6_prefix", zj(`"key":"{http.request.host}","ipv6_prefix":64`), "zones[0].ipv6_prefix: groups client addresses"},
	{"zones.on_missing_key", zj(`"on_missing_key":"drop"`), `zones[0].on_missing_key "drop": want skip or shared`},
	{"store", hj(`"store":{"memory":{},"redis":{"address":"127.0.0.1:1"}}`), "store: set memory or redis, not both"},
	{"store.*", hj(`"store":{"disk":{}}`), "store.disk: unknown field"},
	{"store.memory.*", hj(`"store":{"memory":{"keys":1}}`), "store.memory.keys: unknown field"},
	{"store.memory.max_keys", hj(`"store":{"memory":{"max_keys":-1}}`), "store.memory.max_keys: must not be negative"},
	{"store.memory.max_keys", hj(`"store":{"memory":{"max_keys":"many"}}`), "store.memory.max_keys: want int, got a JSON string"},
	{"store.redis.*", rj(`"address":"127.0.0.1:1","host":"x"`), "store.redis.host: unknown field"},
	{"store.redis.address", rj(`"address":"localhost"`), `store.redis.address "localhost": want host:port`},
	{"store.redis.address", rj(`"address":"{env.SLUICE_TEST_UNSET_VARIABLE}"`), `store.redis.address "{env.SLUICE_TEST_UNSET_VARIABLE}": expands to nothing`},
	{"store.redis.addresses", rj(`"addresses":["127.0.0.1:7000","nohost"]`), `store.redis.addresses "nohost": want host:port`},
	{"store.redis.sentinel.*", rj(`"sentinel":{"master":"m","addresses":["127.0.0.1:26379"],"name":"m"}`), "store.redis.sentinel.name: unknown field"},
	{"store.redis.sentinel.master", rj(`"sentinel":{"addresses":["127.0.0.1:26379"]}`), "store.redis.sentinel.master: required"},
	{"store.redis.sentinel.master", rj(`"sentinel":{"master":5}`), "store.redis.sentinel.master: want string, got a JSON number"},
	{"store.redis.sentinel.addresses", rj(`"sentinel":{"master":"m"}`), "store.redis.sentinel.addresses: at least one Sentinel host:port"},
	{"store.redis.sentinel.addresses", rj(`"sentinel":{"master":"m","addresses":["nohost"]}`), `store.redis.sentinel.addresses "nohost": want host:port`},
	{"store.redis.username", rj(`"address":"127.0.0.1:1","username":"app"`), "store.redis.username: needs a password"},
	{"store.redis.password", rj(`"address":"127.0.0.1:1","password":5`), "store.redis.password: want string, got a JSON number"},
	// An unset variable in a credential fails the load, as env:NAME fails
	// the Traefik plugin's middleware, rather than leaving every request to
	// on_store_error.
	{"store.redis.password", rj(`"address":"127.0.0.1:1","password":"{env.SLUICE_TEST_UNSET_VARIABLE}"`), `store.redis.password "{env.SLUICE_TEST_UNSET_VARIABLE}": expands to nothing (an environment variable not set or empty?)`},
	{"store.redis.username", rj(`"address":"127.0.0.1:1","username":"{env.SLUICE_TEST_UNSET_VARIABLE}","password":"p"`), `store.redis.username "{env.SLUICE_TEST_UNSET_VARIABLE}": expands to nothing`},
	{"store.redis.db", rj(`"address":"127.0.0.1:1","db":-1`), `store.redis.db "-1": must not be negative`},
	{"store.redis.db", rj(`"addresses":["127.0.0.1:7000"],"db":1`), `store.redis.db "1": a Redis Cluster has only database 0`},
	{"store.redis.tls.*", rj(`"address":"127.0.0.1:1","tls":{"verify":true}`), "store.redis.tls.verify: unknown field"},
	{"store.redis.tls.ca", rj(`"address":"127.0.0.1:1","tls":{"ca":"/nonexistent/ca.pem"}`), `store.redis.tls: ca "/nonexistent/ca.pem": neither PEM text nor a readable file`},
	{"store.redis.tls.cert", rj(`"address":"127.0.0.1:1","tls":{"cert":"/nonexistent/cert.pem"}`), "store.redis.tls: cert and key go together"},
	{"store.redis.tls.key", rj(`"address":"127.0.0.1:1","tls":{"key":"/nonexistent/key.pem"}`), "store.redis.tls: cert and key go together"},
	{"store.redis.tls.server_name", rj(`"address":"127.0.0.1:1","tls":{"server_name":5}`), "store.redis.tls.server_name: want string, got a JSON number"},
	{"store.redis.tls.insecure_skip_verify", rj(`"address":"127.0.0.1:1","tls":{"insecure_skip_verify":"yes"}`), "store.redis.tls.insecure_skip_verify: want bool, got a JSON string"},
	{"store.redis.timeout", rj(`"address":"127.0.0.1:1","timeout":"soon"`), `store.redis.timeout "soon": want a duration`},
	{"store.redis.lease_ttl", rj(`"address":"127.0.0.1:1","lease_ttl":"soon"`), `store.redis.lease_ttl "soon": want a duration`},
	{"store.redis.lease_ttl", rj(`"address":"127.0.0.1:1","lease_ttl":-1`), "store.redis.lease_ttl: must not be negative"},
	{"store.redis.lease_ttl", rj(`"address":"127.0.0.1:1","lease_ttl":"10s"`), "store.redis.lease_ttl: only zones with max_in_flight take leases"},
	{"store.redis.timeout", rj(`"address":"127.0.0.1:1","timeout":-1`), "store.redis.timeout: must not be negative"},
	{"store.redis.pool_size", rj(`"address":"127.0.0.1:1","pool_size":-1`), "store.redis.pool_size: must not be negative"},
	{"store.redis.prefix", rj(`"address":"127.0.0.1:1","prefix":"{x}"`), `store.redis.prefix "{x}": must not contain braces`},
	{"store.redis.readable_keys", rj(`"address":"127.0.0.1:1","readable_keys":"yes"`), "store.redis.readable_keys: want bool, got a JSON string"},
	{"store.redis.breaker.*", rj(`"address":"127.0.0.1:1","breaker":{"fails":1}`), "store.redis.breaker.fails: unknown field"},
	{"store.redis.breaker.failures", rj(`"address":"127.0.0.1:1","breaker":{"failures":-1}`), "store.redis.breaker.failures: must not be negative"},
	{"store.redis.breaker.backoff", rj(`"address":"127.0.0.1:1","breaker":{"backoff":"soon"}`), `store.redis.breaker.backoff "soon": want a duration`},
	{"store.redis.breaker.backoff", rj(`"address":"127.0.0.1:1","breaker":{"backoff":-1}`), "store.redis.breaker.backoff: must not be negative"},
	{"on_store_error", hj(`"on_store_error":"maybe"`), `on_store_error "maybe": want allow or deny`},
	{"fallback", hj(`"fallback":"remote"`), `fallback "remote": unknown (want local)`},
	{"fallback", hj(`"fallback":"local"`), "fallback: applies only to a store that can fail, such as Redis, not to memory"},
	{"instances", hj(`"fallback":"local","instances":-1,"store":{"redis":{"address":"127.0.0.1:1"}}`), `instances "-1": must be at least 1`},
	{"instances", hj(`"instances":2`), "instances: only the local fallback divides quotas by the number of instances (set fallback, or remove instances)"},
	{"headers", hj(`"headers":["draft"]`), `headers "draft": unknown`},
	{"headers", hj(`"headers":["off","ietf"]`), `headers "off,ietf": off cannot be combined`},
	{"headers", hj(`"headers":"ietf"`), "headers: want []string, got a JSON string"},
	{"body", hj(`"body":"html"`), `body "html": unknown`},
	{"mode", hj(`"mode":"shadow"`), `mode "shadow": want enforce or dry_run`},
	{"retry_jitter", hj(`"retry_jitter":1.5`), `retry_jitter "1.5": must be between 0 and 1`},
	{"retry_jitter", hj(`"retry_jitter":-0.1`), `retry_jitter "-0.1": must be between 0 and 1`},
	{"log_key", hj(`"log_key":"yes"`), "log_key: want bool, got a JSON string"},
	{"share", hj(`"share":5`), "share: want string, got a JSON number"},
	{"id", hj(`"id":"a","share":"b"`), `id "a": not with share "b"`},
	{"id", hj(`"id":"a\nb"`), `id "a\nb": must not contain control characters`},
}

// TestBadJSON loads every bad JSON configuration as Caddy does and checks
// that it fails with an error naming the field by its path.
func TestBadJSON(t *testing.T) {
	for _, tc := range badJSON {
		var h map[string]any
		if err := json.Unmarshal([]byte(tc.handler), &h); err != nil {
			t.Fatalf("%s: %v", tc.handler, err)
		}
		h["handler"] = "sluice"
		raw, _ := json.Marshal(map[string]any{"apps": map[string]any{"http": map[string]any{"servers": map[string]any{
			"srv0": map[string]any{"listen": []string{"127.0.0.1:0"}, "routes": []any{map[string]any{"handle": []any{h}}}},
		}}}})
		var cfg caddy.Config
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		err := caddy.Validate(&cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s:\n got %v\nwant an error containing %q", tc.field, tc.handler, err, tc.want)
		}
	}
	if n := poolSize(); n != 0 {
		t.Errorf("failed loads left %d stores in the pool", n)
	}
}

// TestBadJSONCoversEveryField reflects over the handler's JSON fields and
// fails when one, or a level's unknown field, has no row in badJSON.
func TestBadJSONCoversEveryField(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range badJSON {
		covered[tc.field] = true
	}
	var missing []string
	for _, f := range jsonFields(reflect.TypeOf(Handler{}), "") {
		if !covered[f] {
			missing = append(missing, f)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("JSON fields without a bad-value row in badJSON: %s", strings.Join(missing, ", "))
	}
}

// jsonFields lists the JSON field paths of the struct type t under prefix,
// recursively into structs and lists of structs, and prefix+"*" for each
// level's unknown fields.
func jsonFields(t reflect.Type, prefix string) []string {
	out := []string{prefix + "*"}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Ptr || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			out = append(out, jsonFields(ft, prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}
