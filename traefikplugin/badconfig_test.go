package traefikplugin

import (
	"context"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// opts is a configuration as Traefik hands it to the plugin.
type opts = map[string]interface{}

// badConfigs are bad configurations, at least one for every option (as
// TestBadConfigCoversEveryOption checks), each with the option it is bad in
// and what its error must contain: the option's name, and what is wrong.
// option is the option's path, limits items' options as limits.<name>, and
// <path>* for an unknown option at that level.
var badConfigs = []struct {
	option string
	raw    opts
	want   string
}{
	{"*", opts{"averge": "1"}, "averge: unknown option"},
	{"average", opts{"average": "lots"}, `average "lots": not a number`},
	{"average", opts{"average": "-1"}, `average "-1": must be a positive number`},
	{"average", opts{"average": "1e400"}, `average "1e400": not a number`},
	{"average", opts{"average": "20000", "algorithm": "sliding_window_log"}, `average "20000": sliding_window_log keeps one entry per request and accepts a quota of at most 10000`},
	{"average", opts{"average": "0.5", "algorithm": "fixed_window"}, `average "0.5/1s": fixed_window admits at most its quota in a window`},
	{"period", opts{"average": "1", "period": "soon"}, `period "soon": want a duration`},
	{"period", opts{"average": "1", "period": "-1s"}, `period "-1s": must not be negative`},
	{"period", opts{"average": "1", "period": "0.0000000001"}, `period "0.0000000001": shorter than a nanosecond`},
	{"period", opts{"average": "1", "period": "1.5us"}, `period "1.5µs": must be a whole number of microseconds`},
	{"period", opts{"average": "1", "period": "1000000h"}, `period "1000000h": longer than`},
	{"burst", opts{"average": "1", "burst": "x"}, `burst "x": not a number`},
	{"burst", opts{"average": "1", "burst": "-1"}, `burst "-1": must not be negative`},
	{"burst", opts{"average": "1", "algorithm": "fixed_window", "burst": "5"}, "burst: fixed_window takes its capacity from the rate's quota"},
	// A burst of 0 would mean 1 here (the built-in's reading) and the quota
	// in Caddy, whose default it is: refused in both, in core's words.
	{"burst", opts{"average": 5, "burst": 0}, `burst "0": must be positive (leave burst out for the default); the built-in rateLimit reads 0 as 1, the default`},
	{"burst", opts{"average": "5", "burst": "0.0"}, `burst "0": must be positive (leave burst out for the default)`},
	{"burst", opts{"average": "5", "algorithm": "leaky_bucket", "burst": "0"}, `burst "0": must be positive`},
	{"burst", opts{"average": "5", "algorithm": "sliding_window_counter", "burst": "0"}, `burst "0": must be positive`},
	{"sourceCriterion.*", opts{"average": "1", "sourceCriterion": opts{"ipstrategie": opts{}}}, "sourceCriterion.ipstrategie: unknown option"},
	{"sourceCriterion.requestHost", opts{"average": "1", "sourceCriterion": opts{"requestHost": "yes please"}}, `sourceCriterion.requestHost "yes please": want true or false`},
	{"sourceCriterion.requestHost", opts{"average": "1", "sourceCriterion": opts{"requestHost": "true", "requestHeaderName": "X-Key"}}, "sourceCriterion: requestHost and requestHeaderName are mutually exclusive"},
	{"sourceCriterion.requestHeaderName", opts{"average": "1", "sourceCriterion": opts{"requestHeaderName": "X Key"}}, `header name "X Key": not a valid header name`},
	{"sourceCriterion.requestHeaderName", opts{"average": "1", "key": "host", "sourceCriterion": opts{"requestHeaderName": "X-Key"}}, "key and sourceCriterion.requestHeaderName are mutually exclusive"},
	{"sourceCriterion.ipStrategy", opts{"average": "1", "sourceCriterion": opts{"requestHost": "true", "ipStrategy": opts{"depth": "1"}}}, "sourceCriterion: ipStrategy and requestHost are mutually exclusive"},
	{"sourceCriterion.ipStrategy", opts{"average": "1", "sourceCriterion": opts{"requestHeaderName": "X-Key", "ipStrategy": opts{"depth": "1"}}}, "sourceCriterion: ipStrategy and requestHeaderName are mutually exclusive"},
	{"sourceCriterion.ipStrategy.*", opts{"average": "1", "sourceCriterion": opts{"ipStrategy": opts{"deep": "1"}}}, "sourceCriterion.ipStrategy.deep: unknown option"},
	{"sourceCriterion.ipStrategy.depth", opts{"average": "1", "sourceCriterion": opts{"ipStrategy": opts{"depth": "-1"}}}, `sourceCriterion.ipStrategy.depth "-1": want a whole number between 0 and`},
	{"sourceCriterion.ipStrategy.depth", opts{"average": "1", "sourceCriterion": opts{"ipStrategy": opts{"depth": "1.5"}}}, `sourceCriterion.ipStrategy.depth "1.5"`},
	{"sourceCriterion.ipStrategy.excludedIPs", opts{"average": "1", "sourceCriterion": opts{"ipStrategy": opts{"excludedIPs": "10.0.0.1,nowhere"}}}, `sourceCriterion.ipStrategy.excludedIPs: prefix "nowhere"`},
	{"sourceCriterion.ipStrategy.ipv6Subnet", opts{"average": "1", "sourceCriterion": opts{"ipStrategy": opts{"ipv6Subnet": "129"}}}, `sourceCriterion.ipStrategy.ipv6Subnet "129": want a whole number between 1 and 128`},
	{"sourceCriterion.ipStrategy.ipv6Subnet", opts{"average": "1", "sourceCriterion": opts{"ipStrategy": opts{"ipv6Subnet": "0"}}}, `sourceCriterion.ipStrategy.ipv6Subnet "0"`},
	{"name", opts{"average": "1", "name": "a:b"}, `name "a:b": must not contain quotes`},
	{"name", opts{"average": "1", "name": "é"}, `name "é": must be printable ASCII`},
	{"algorithm", opts{"average": "1", "algorithm": "magic"}, `algorithm "magic": unknown (want token_bucket, leaky_bucket`},
	{"cost", opts{"average": "1", "cost": "0"}, `cost "0": must be positive; 0 is an estimate only for a limit whose cost comes from its response`},
	{"cost", opts{"average": "1", "cost": "0", "costHeader": "X-Tokens-Used", "limits": []interface{}{opts{"name": "a", "average": "1"}}}, `cost "0": must be positive; 0 is an estimate only for a limit whose cost comes from its response`},
	{"costHeader", opts{"average": "5", "costHeader": "X Tokens"}, `costHeader "X Tokens": not a header name`},
	{"costHeader", opts{"average": "100", "burst": "100", "costHeader": "X-Tokens-Used", "lease": "5"}, "costHeader: a lease's admissions cannot be settled; remove lease"},
	{"costHeader", opts{"maxInFlight": "5", "costHeader": "X-Tokens-Used"}, "costHeader: only a rate is charged a cost"},
	{"costBytes", opts{"average": "5", "costBytes": "yes please"}, `costBytes "yes please": want true or false`},
	{"costBytes", opts{"average": "5", "costHeader": "X-Tokens-Used", "costBytes": "true"}, "costBytes: a cost comes from a header or from the body"},
	{"cost", opts{"average": "1", "cost": "NaN"}, `cost "NaN": not a number`},
	{"cost", opts{"average": "10", "burst": "1", "cost": "2"}, `cost "2": above the capacity of 1 (`},
	{"maxDelay", opts{"average": "1", "maxDelay": "later"}, `maxDelay "later": want a duration`},
	{"maxInFlight", opts{"maxInFlight": "many"}, `maxInFlight "many": want a whole number`},
	{"maxInFlight", opts{"maxInFlight": "-1"}, `maxInFlight "-1": want a whole number`},
	{"algorithm", opts{"maxInFlight": "2", "algorithm": "fixed_window"}, `algorithm "fixed_window": only a rate has an algorithm (set average, or remove algorithm)`},
	{"amount", opts{"amount": "x"}, `amount "x": want a whole number`},
	{"amount", opts{"amount": "-3"}, `amount "-3": want a whole number`},
	{"amount", opts{"amount": "3", "maxInFlight": "4"}, "amount, maxInFlight: set one of them"},
	{"maxDelay", opts{"average": "1", "maxDelay": "-1s"}, `maxDelay "-1s": must not be negative`},
	{"maxDelay", opts{"average": "1", "algorithm": "fixed_window", "maxDelay": "1s"}, "maxDelay: only leaky_bucket and token_bucket delay requests"},
	{"lease", opts{"average": "100", "lease": "many"}, `lease "many": not a number`},
	{"lease", opts{"average": "100", "burst": "100", "lease": "-5"}, `lease "-5": must be a positive number`},
	{"lease", opts{"average": "100", "burst": "100", "lease": "500"}, `lease "500": above the capacity of 100`},
	{"lease", opts{"average": "100", "algorithm": "leaky_bucket", "lease": "5"}, "lease: a leaky_bucket's admissions wait in order"},
	{"lease", opts{"average": "100", "burst": "100", "lease": "5"}, `lease "5": only a Redis store's capacity is leased`},
	{"penalty", opts{"average": "5", "period": "1m", "penalty": "soon"}, `penalty "soon": want a duration`},
	{"penalty", opts{"average": "5", "period": "1m", "penalty": "1ns"}, `penalty "1ns": must be a whole number of microseconds`},
	{"penalty", opts{"maxInFlight": "5", "penalty": "1m"}, "penalty: only a rate's refusals start a penalty"},
	{"countStatus", opts{"average": "5", "period": "1m", "countStatus": "401,600"}, `countStatus "600": must be a status code from 100 to 599 or a class from 1xx to 5xx`},
	{"countStatus", opts{"average": "5", "period": "1m", "countStatus": []interface{}{401, "4x"}}, `countStatus "4x"`},
	{"countStatus", opts{"maxInFlight": "5", "countStatus": "401"}, "countStatus: only a rate's charges are given back"},
	{"limits.lease", opts{"limits": []interface{}{opts{"name": "a", "maxInFlight": "5", "lease": "5"}}}, "limits[0].lease: only a rate's capacity is leased"},
	{"limits.countStatus", opts{"limits": []interface{}{opts{"name": "a", "average": "5", "countStatus": "6xx"}}}, `limits[0].countStatus "6xx"`},
	{"limits.penalty", opts{"limits": []interface{}{opts{"name": "a", "average": "5", "penalty": "-1s"}}}, `limits[0].penalty "-1s"`},
	{"limits.costHeader", opts{"limits": []interface{}{opts{"name": "a", "average": "5", "costHeader": "X:Y"}}}, `limits[0].costHeader "X:Y": not a header name`},
	{"limits.costBytes", opts{"limits": []interface{}{opts{"name": "a", "average": "5", "costBytes": "often"}}}, `limits[0].costBytes "often": want true or false`},
	{"limits.costBytes", opts{"limits": []interface{}{opts{"name": "a", "maxInFlight": "5", "costBytes": "true"}}}, "limits[0].costBytes: only a rate is charged a cost"},
	{"key", opts{"average": "1", "key": "client_ip,nonsense"}, `key: key part "nonsense": unknown kind`},
	{"key", opts{"average": "1", "key": "const:"}, `key: key part "const:": want const:<value>`},
	{"onMissingKey", opts{"average": "1", "onMissingKey": "maybe"}, `onMissingKey "maybe": want skip or shared`},
	{"limits.*", opts{"limits": []interface{}{opts{"name": "a", "average": "1", "rate": "1/s"}}}, "limits[0].rate: unknown option"},
	{"limits.name", opts{"limits": []interface{}{opts{"average": "1"}}}, "limits[0].name: must not be empty"},
	{"limits.name", opts{"limits": []interface{}{opts{"name": "a:b", "average": "1"}}}, `limits[0].name "a:b": must not contain`},
	{"limits.name", opts{"average": "1", "limits": []interface{}{opts{"name": "default", "average": "1"}}}, `limits[0].name "default": defined twice (the top-level limit is named "default" unless name is set)`},
	{"limits.average", opts{"limits": []interface{}{opts{"name": "a"}}}, "limits[0].average: required"},
	{"limits.average", opts{"limits": []interface{}{opts{"name": "a", "average": "x"}}}, `limits[0].average "x": not a number`},
	{"limits.average", opts{"limits": []interface{}{opts{"name": "a", "average": "20000", "algorithm": "sliding_window_log"}}}, `limits[0].average "20000": sliding_window_log keeps one entry per request`},
	{"limits.period", opts{"limits": []interface{}{opts{"name": "a", "average": "1", "period": "often"}}}, `limits[0].period "often"`},
	{"limits.burst", opts{"limits": []interface{}{opts{"name": "a", "average": "1", "burst": "x"}}}, `limits[0].burst "x": not a number`},
	{"limits.burst", opts{"limits": []interface{}{opts{"name": "a", "average": "1", "burst": 0}}}, `limits[0].burst "0": must be positive`},
	{"limits.algorithm", opts{"limits": []interface{}{opts{"name": "a", "average": "1", "algorithm": "x"}}}, `limits[0].algorithm "x": unknown`},
	{"limits.key", opts{"limits": []interface{}{opts{"name": "a", "average": "1", "key": "header:"}}}, `limits[0].key: key part "header:"`},
	{"limits.cost", opts{"limits": []interface{}{opts{"name": "a", "average": "1", "cost": "-2"}}}, `limits[0].cost "-2"`},
	{"limits.cost", opts{"average": "1", "limits": []interface{}{opts{"name": "a", "average": "1", "burst": "1", "cost": "3"}}}, `limits[0].cost "3": above the capacity of 1`},
	{"limits.maxDelay", opts{"limits": []interface{}{opts{"name": "a", "average": "1", "maxDelay": "x"}}}, `limits[0].maxDelay "x": want a duration`},
	{"limits.maxInFlight", opts{"limits": []interface{}{opts{"name": "a", "maxInFlight": "x"}}}, `limits[0].maxInFlight "x": want a whole number`},
	{"limits.burst", opts{"limits": []interface{}{opts{"name": "a", "maxInFlight": "2", "burst": "3"}}}, "limits[0].burst: only a rate has a burst (set limits[0].average, or remove limits[0].burst)"},
	{"limits.maxDelay", opts{"limits": []interface{}{opts{"name": "a", "average": "1", "algorithm": "sliding_window_counter", "maxDelay": "1s"}}}, "limits[0].maxDelay: only leaky_bucket and token_bucket"},
	{"limits.onMissingKey", opts{"limits": []interface{}{opts{"name": "a", "average": "1", "onMissingKey": "x"}}}, `limits[0].onMissingKey "x": want skip or shared`},
	{"headers", opts{"average": "1", "headers": "ietf,fancy"}, `headers "fancy": unknown`},
	{"headers", opts{"average": "1", "headers": "off,ietf"}, `headers "off,ietf": off cannot be combined`},
	{"body", opts{"average": "1", "body": "html"}, `body "html": unknown`},
	{"mode", opts{"average": "1", "mode": "audit"}, `mode "audit": want enforce or dry_run`},
	{"onStoreError", opts{"average": "1", "onStoreError": "panic"}, `onStoreError "panic": want allow or deny`},
	{"fallback", opts{"average": "1", "fallback": "remote"}, `fallback "remote": want local or none`},
	{"fallback", opts{"average": "1", "fallback": "local"}, "fallback: applies only to a store that can fail, such as Redis, not to memory"},
	{"instances", opts{"average": "1", "fallback": "local", "redis": opts{}, "instances": "0"}, `instances "0": must be at least 1`},
	{"instances", opts{"average": "1", "instances": "3"}, "instances: only the local fallback divides quotas by the number of instances (set fallback, or remove instances)"},
	{"retryJitter", opts{"average": "1", "retryJitter": "2"}, `retryJitter "2": must be between 0 and 1`},
	{"retryJitter", opts{"average": "1", "retryJitter": "-0.5"}, `retryJitter "-0.5": must be between 0 and 1`},
	{"trustedProxies", opts{"average": "1", "trustedProxies": "10.0.0.0/33"}, `trustedProxies: prefix "10.0.0.0/33"`},
	{"trustedProxies", opts{"average": "1", "trustedProxies": "*"}, `trustedProxies: prefix "*": not a CIDR prefix or an IP address`},
	{"maxKeys", opts{"average": "1", "maxKeys": "0"}, `maxKeys "0": want a whole number between 1 and 1073741824`},
	{"maxKeys", opts{"average": "1", "maxKeys": "many"}, `maxKeys "many": want a whole number`},
	{"maxKeys", opts{"average": "1", "maxKeys": "1000", "redis": opts{}}, "maxKeys: sizes the in-memory store, which with redis only fallback: local uses"},
	{"exemptIPs", opts{"average": "1", "exemptIPs": "nowhere"}, `exemptIPs: prefix "nowhere": not a CIDR prefix or an IP address`},
	{"metrics.*", opts{"average": "1", "metrics": opts{"adress": "127.0.0.1:9180"}}, "metrics.adress: unknown option"},
	{"metrics.address", opts{"average": "1", "metrics": opts{"address": "metrics host:9180"}}, `metrics.address "metrics host:9180": host "metrics host": not an IP address or a host name`},
	{"metrics.address", opts{"average": "1", "metrics": opts{"address": "127.0.0.1"}}, `metrics.address "127.0.0.1": want [host]:port, such as 127.0.0.1:9180`},
	{"metrics.address", opts{"average": "1", "metrics": opts{"address": ":metrics"}}, `metrics.address ":metrics": port "metrics": want a number from 0 to 65535`},
	{"metrics.allowedNetworks", opts{"average": "1", "metrics": opts{"address": "127.0.0.1:0", "allowedNetworks": "10.0.0.0/33"}}, `metrics.allowedNetworks: prefix "10.0.0.0/33"`},
	{"metrics.allowedNetworks", opts{"average": "1", "metrics": opts{"allowedNetworks": "10.0.0.0/8"}}, "metrics.allowedNetworks: needs metrics.address"},
	{"metrics.demandKeys", opts{"average": "1", "metrics": opts{"address": "127.0.0.1:0", "demandKeys": "0"}}, `metrics.demandKeys "0"`},
	{"metrics.demandKeys", opts{"average": "1", "metrics": opts{"address": "127.0.0.1:0", "demandKeys": "many"}}, `metrics.demandKeys "many"`},
	{"metrics.nearLimit", opts{"average": "1", "metrics": opts{"address": "127.0.0.1:0", "nearLimit": "150%"}}, `metrics.nearLimit "150%": want a share of the capacity above 0 and at most 100%`},
	{"metrics.nearLimit", opts{"average": "1", "metrics": opts{"address": "127.0.0.1:0", "nearLimit": "close"}}, `metrics.nearLimit "close": want a share`},
	{"metrics.nearLimit", opts{"average": "1", "metrics": opts{"nearLimit": "20%"}}, "metrics.nearLimit: needs metrics.address"},
	{"metrics.demandKeys", opts{"average": "1", "metrics": opts{"demandKeys": "100"}}, "metrics.demandKeys: needs metrics.address"},
	{"metrics.demandScope", opts{"average": "1", "metrics": opts{"address": "127.0.0.1:0", "demandScope": "cluster"}}, `metrics.demandScope "cluster": want instance or fleet`},
	{"metrics.demandScope", opts{"average": "1", "metrics": opts{"address": "127.0.0.1:0", "demandScope": "fleet"}}, `metrics.demandScope "fleet": needs a Redis store`},
	{"metrics.demandScope", opts{"average": "1", "metrics": opts{"demandScope": "fleet"}}, "metrics.demandScope: needs metrics.address"},
	{"metrics.demandScope", opts{"average": "1", "redis": opts{"endpoints": "127.0.0.1:1"}, "metrics": opts{"address": "127.0.0.1:0", "demandKeys": "off", "demandScope": "fleet"}}, `metrics.demandScope "fleet": needs the zone's demand recorded`},
	{"redis.*", opts{"average": "1", "redis": opts{"endpoint": "127.0.0.1:6379"}}, "redis.endpoint: unknown option"},
	{"redis.endpoints", opts{"average": "1", "redis": opts{"endpoints": "localhost"}}, `redis.endpoints "localhost": want host:port`},
	{"redis.username", opts{"average": "1", "redis": opts{"username": "app"}}, "redis.username: needs a password"},
	{"redis.password", opts{"average": "1", "redis": opts{"password": "env:SLUICE_TEST_UNSET_VARIABLE"}}, `redis.password: the environment variable "SLUICE_TEST_UNSET_VARIABLE" is not set`},
	{"redis.db", opts{"average": "1", "redis": opts{"db": "one"}}, `redis.db "one": want a whole number`},
	{"redis.db", opts{"average": "1", "redis": opts{"endpoints": "a:1,b:2", "db": "1"}}, `redis.db "1": a Redis Cluster has only database 0`},
	{"redis.tls.*", opts{"average": "1", "redis": opts{"tls": opts{"insecure": "true"}}}, "redis.tls.insecure: unknown option"},
	{"redis.tls.ca", opts{"average": "1", "redis": opts{"tls": opts{"ca": "/nonexistent/ca.pem"}}}, `redis.tls.ca "/nonexistent/ca.pem": neither PEM text nor a readable file`},
	{"redis.tls.cert", opts{"average": "1", "redis": opts{"tls": opts{"cert": "/nonexistent/cert.pem"}}}, "redis.tls.cert: needs its private key (set redis.tls.key, or remove redis.tls.cert)"},
	{"redis.tls.cert", opts{"average": "1", "redis": opts{"tls": opts{"cert": "/nonexistent/cert.pem", "key": "/nonexistent/key.pem"}}}, `redis.tls.cert "/nonexistent/cert.pem": neither PEM text nor a readable file`},
	{"redis.tls.key", opts{"average": "1", "redis": opts{"tls": opts{"key": "/nonexistent/key.pem"}}}, "redis.tls.key: needs its certificate (set redis.tls.cert, or remove redis.tls.key)"},
	{"redis.tls.insecureSkipVerify", opts{"average": "1", "redis": opts{"tls": opts{"insecureSkipVerify": "sure"}}}, `redis.tls.insecureSkipVerify "sure": want true or false`},
	{"redis.tls.caSecret", opts{"average": "1", "redis": opts{"tls": opts{"caSecret": "ca"}}}, "redis.tls.caSecret: the plugin cannot read Kubernetes secrets"},
	{"redis.tls.certSecret", opts{"average": "1", "redis": opts{"tls": opts{"certSecret": "cert"}}}, "redis.tls.certSecret: the plugin cannot read Kubernetes secrets"},
	{"redis.sentinel", opts{"average": "1", "redis": opts{"endpoints": "a:1", "sentinel": opts{"masterName": "m", "endpoints": "b:2"}}}, "redis.sentinel: set either redis.endpoints or redis.sentinel, not both"},
	{"redis.sentinel.*", opts{"average": "1", "redis": opts{"sentinel": opts{"master": "m", "masterName": "m", "endpoints": "b:2"}}}, "redis.sentinel.master: unknown option"},
	{"redis.sentinel.masterName", opts{"average": "1", "redis": opts{"sentinel": opts{"endpoints": "a:1"}}}, "redis.sentinel.masterName: required"},
	{"redis.sentinel.endpoints", opts{"average": "1", "redis": opts{"sentinel": opts{"masterName": "m"}}}, "redis.sentinel.endpoints: at least one"},
	{"redis.sentinel.endpoints", opts{"average": "1", "redis": opts{"sentinel": opts{"masterName": "m", "endpoints": "nohost"}}}, `redis.sentinel.endpoints "nohost": want host:port`},
	{"redis.sentinel.username", opts{"average": "1", "redis": opts{"sentinel": opts{"masterName": "m", "endpoints": "b:2", "username": "u"}}}, "redis.sentinel.username: needs a password"},
	{"redis.sentinel.password", opts{"average": "1", "redis": opts{"sentinel": opts{"masterName": "m", "endpoints": "b:2", "password": "env:SLUICE_NO_SUCH_VAR"}}}, `redis.sentinel.password: the environment variable "SLUICE_NO_SUCH_VAR"`},
	{"redis.readableKeys", opts{"average": "1", "redis": opts{"readableKeys": "maybe"}}, `redis.readableKeys "maybe": want true or false`},
	{"redis.dialTimeout", opts{"average": "1", "redis": opts{"dialTimeout": "fast"}}, `redis.dialTimeout "fast": want a duration`},
	{"redis.readTimeout", opts{"average": "1", "redis": opts{"readTimeout": "-1"}}, `redis.readTimeout "-1": must not be negative`},
	{"redis.writeTimeout", opts{"average": "1", "redis": opts{"writeTimeout": "x"}}, `redis.writeTimeout "x": want a duration`},
	{"redis.timeout", opts{"average": "1", "redis": opts{"timeout": "soon"}}, `redis.timeout "soon": want a duration`},
	{"redis.leaseTTL", opts{"maxInFlight": "2", "redis": opts{"leaseTTL": "soon"}}, `redis.leaseTTL "soon": want a duration`},
	{"redis.leaseTTL", opts{"maxInFlight": "2", "redis": opts{"leaseTTL": "-1s"}}, `redis.leaseTTL "-1s": must not be negative`},
	{"redis.leaseTTL", opts{"average": "1", "redis": opts{"leaseTTL": "10s"}}, "redis.leaseTTL: only limits with maxInFlight take leases"},
	{"redis.poolSize", opts{"average": "1", "redis": opts{"poolSize": "-3"}}, `redis.poolSize "-3": want a whole number between 0 and`},
	{"redis.maxActiveConns", opts{"average": "1", "redis": opts{"maxActiveConns": "-1"}}, `redis.maxActiveConns "-1": want a whole number between 0 and`},
	{"redis.minIdleConns", opts{"average": "1", "redis": opts{"minIdleConns": "2"}}, "redis.minIdleConns: not supported"},
	{"redis.secret", opts{"average": "1", "redis": opts{"secret": "redis-auth"}}, "redis.secret: the plugin cannot read Kubernetes secrets; set redis.password to env:NAME"},
}

// TestBadConfig checks that every bad configuration is refused by New with
// one error that names the middleware and the option.
func TestBadConfig(t *testing.T) {
	g := newTestRegistry()
	for _, tc := range badConfigs {
		cfg := CreateConfig()
		if err := decodeLikeTraefik(tc.raw, cfg); err != nil {
			t.Fatalf("%s %v: decode: %v", tc.option, tc.raw, err)
		}
		h, err := g.new(context.Background(), &okHandler{}, cfg, "api@file")
		switch {
		case err == nil:
			t.Errorf("%s %v: New returned %T and no error, want one containing %q", tc.option, tc.raw, h, tc.want)
		case !strings.HasPrefix(err.Error(), "sluice api@file: ") || !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s %v:\n got error %v\nwant one containing %q", tc.option, tc.raw, err, tc.want)
		case !strings.Contains(err.Error(), optionWord(tc.option)):
			t.Errorf("%s %v: error %v does not name the option", tc.option, tc.raw, err)
		}
	}
}

// optionWord is the last name of an option path ("ipv6Subnet" of
// "sourceCriterion.ipStrategy.ipv6Subnet"; "redis" of "redis.*"), which the
// error must contain.
func optionWord(path string) string {
	path = strings.TrimSuffix(strings.TrimSuffix(path, "*"), ".")
	if path == "" {
		return "unknown option"
	}
	return path[strings.LastIndexByte(path, '.')+1:]
}

// TestBadConfigCoversEveryOption fails when an option of Config (or of the
// structs under it) has no row in badConfigs, or a level of options has no
// row with an unknown option: a new option must come with its bad values.
func TestBadConfigCoversEveryOption(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range badConfigs {
		covered[strings.ToLower(tc.option)] = true
	}
	var missing []string
	for _, o := range configOptions(reflect.TypeOf(Config{}), "") {
		if !covered[strings.ToLower(o)] {
			missing = append(missing, o)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("options without a bad-value row in badConfigs: %s", strings.Join(missing, ", "))
	}
	if len(badConfigs) < 90 {
		t.Errorf("%d rows, fewer than expected", len(badConfigs))
	}
}

// configOptions lists the option paths of the struct type t under prefix:
// its fields (names match in any letter case), recursively, and
// prefix+"*" for its unknown options. A block (sourceCriterion, redis,
// redis.tls) has no bad value of its own; its options do.
func configOptions(t reflect.Type, prefix string) []string {
	out := []string{prefix + "*"}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Name == "Unknown" {
			continue
		}
		path := prefix + f.Name
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Ptr && ft.Elem().Kind() == reflect.Struct:
			out = append(out, configOptions(ft.Elem(), path+".")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, configOptions(ft.Elem(), path+".")...)
		default:
			out = append(out, path)
		}
	}
	return out
}

// TestUnreachableRedisAtStart: a Redis that cannot be reached when the
// middleware is created does not make New fail (a proxy restarted during a
// Redis outage keeps serving): the middleware loads and the failure policy
// answers, 429 with Retry-After under deny, 200 under allow, until Redis
// answers.
func TestUnreachableRedisAtStart(t *testing.T) {
	g := newTestRegistry()
	down := closedPort(t)
	for _, tc := range []struct {
		policy string
		want   int
	}{{"deny", http.StatusTooManyRequests}, {"allow", http.StatusOK}} {
		cfg := &Config{Average: "100", OnStoreError: tc.policy, Redis: &Redis{Endpoints: []string{down}, DialTimeout: "100ms"}}
		h, err := g.new(context.Background(), &okHandler{}, cfg, tc.policy+"@file")
		if err != nil {
			t.Fatalf("%s: New with Redis down: %v, want a middleware", tc.policy, err)
		}
		w, _ := do(h, request{})
		if w.Code != tc.want || (tc.want == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "") {
			t.Errorf("%s with Redis down: %d %v, want %d (with Retry-After for a 429)", tc.policy, w.Code, w.Header(), tc.want)
		}
	}
}

// TestLeaseWithFallback: a lease above the local fallback's share of the
// capacity (burst 100, lease 50, 10 instances: a share of 10) loads, as
// the fallback ignores lease, and with Redis down the fallback admits the
// share; a lease above the capacity still fails naming the option.
func TestLeaseWithFallback(t *testing.T) {
	g := newTestRegistry()
	down := closedPort(t)
	raw := opts{"average": "100", "burst": "100", "lease": "50", "fallback": "local", "instances": "10",
		"redis": opts{"endpoints": []interface{}{down}, "dialTimeout": "100ms"}}
	cfg := CreateConfig()
	if err := decodeLikeTraefik(raw, cfg); err != nil {
		t.Fatal(err)
	}
	h, err := g.new(context.Background(), &okHandler{}, cfg, "leased@file")
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if got, want := codes(h, request{}, 11), strings.TrimSpace(strings.Repeat("200 ", 10))+" 429"; got != want {
		t.Errorf("the fallback with Redis down: got %s, want %s", got, want)
	}
	raw["limits"] = []interface{}{opts{"name": "other", "average": "10"}, opts{"name": "second", "average": "10", "burst": "10", "lease": "50"}}
	cfg = CreateConfig()
	if err := decodeLikeTraefik(raw, cfg); err != nil {
		t.Fatal(err)
	}
	const want = `limits[1].lease "50": above the capacity of 10`
	if _, err := g.new(context.Background(), &okHandler{}, cfg, "bad@file"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a lease above the capacity: %v, want an error containing %q", err, want)
	}
}
