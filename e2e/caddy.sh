#!/usr/bin/env bash
# End-to-end test of sluice's Caddy module in a real Caddy v2.11.9, built by
# ./xcaddy.sh. Everything listens on 127.0.0.1 and is stopped on exit.
#
#   module   ./caddy list-modules has http.handlers.sluice;
#            Caddyfile.example adapts and validates, and it and
#            e2e/testdata's are as `caddy fmt` writes them (else Caddy warns
#            on every run). The documentation's Caddyfiles are checked by
#            go test ./examples and run by e2e/recipes.sh.
#   proxy    ./caddy behind a trusted load balancer (curl from 127.0.0.1,
#            in the servers' trusted_proxies; e2e/testdata/proxy.Caddyfile):
#            a client that writes a new address left of the one the
#            balancer appended, in X-Forwarded-For (with and without
#            trusted_proxies_strict) or Forwarded (client_ip_headers
#            Forwarded), gets one bucket, for the key {client_ip} with and
#            without ipv6_prefix; the client whose address it wrote keeps
#            its quota; X-Forwarded-For does not move a key read from
#            Forwarded.
#   example  ./caddy runs Caddyfile.example (127.0.0.1:8080, admin on
#            localhost:2019, both must be free): an allowed answer carries
#            the rate-limit headers; POST /login's stricter zone rejects the
#            4th attempt; GET / is answered 429 within a bounded number of
#            requests, with Retry-After, RateLimit, RateLimit-Policy,
#            X-RateLimit-* and a JSON body; /account keys on the user that
#            basic_auth verified; /slow shapes; forwarded headers from
#            the untrusted peer do not change the key; the client at 429,
#            reset through Caddy's admin API (DELETE
#            /sluice/zones/per_ip/keys/127.0.0.1), is admitted on its next
#            request, and /sluice/zones and /top show the zone and client.
#   admin    a Caddy instance (e2e/testdata/admin.Caddyfile) whose zone keys
#            on a bearer token longer than 128 bytes: the client at 429 is
#            shown by /top as the token's digest, read and reset through
#            the admin API by that name and by the token itself, each reset
#            admitting its next request; /sluice/zones gives rates as
#            written and no rate fields for a zone of max_in_flight alone,
#            and /top its scope, the instance. A dry_run zone of the same
#            instance answers every request 200, and its advice says what
#            its limit would have refused: the heavy client's periods, not
#            the light one's; DELETE forgets the demand.
#   redis    a redis-server and two Caddy instances sharing it
#            (e2e/testdata/redis.Caddyfile): requests spread over both, some
#            at once, are admitted exactly up to the shared quota; the key
#            at 429, reset through one instance's admin API, is admitted by
#            the other (the Redis keys are gone); then, with
#            Redis frozen (SIGSTOP) and then gone, the instance configured
#            on_store_error deny answers 429 and the one configured allow
#            answers 200, each within the store timeout plus slack.
#   inflight two Caddy instances sharing max_in_flight 3 in a new Redis
#            (e2e/testdata/inflight.Caddyfile) in front of e2e/backend's slow
#            requests: 4 at once give 3 × 200 and a 429 with the concurrency
#            policy; an instance killed with 3 requests in progress leaves
#            its slots taken for at most lease_ttl (2s).
#
# Prints PASS or FAIL lines and exits non-zero on the first failure, after
# showing the logs of the servers it started.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"

# req sends one request with curl's remaining arguments; it writes the
# answer's headers to $TMP/h and body to $TMP/b and prints its status code.
req() {
	curl -sS --max-time 5 -D "$TMP/h" -o "$TMP/b" -w '%{http_code}' "$@" || echo 000
}

# hdr prints the value of the last answer's header $1.
hdr() {
	awk -v n="$1" '{ sub(/\r$/, "") } index(tolower($0), tolower(n) ":") == 1 { sub(/^[^:]*:[ \t]*/, ""); print; exit }' "$TMP/h"
}

# expect_hdr checks that the last answer's header $1 matches the extended
# regular expression $2 (anchored), naming the answer $3 on failure.
expect_hdr() {
	local v
	v="$(hdr "$1")"
	[[ "$v" =~ ^$2$ ]] || fail "$3: header $1 is \"$v\", want /^$2\$/ (headers: $(tr -d '\r' <"$TMP/h" | tr '\n' '|'))"
}

# --- module ------------------------------------------------------------------
e2e_build_caddy
# The list is read whole before it is searched: under pipefail, grep -q
# leaving early would fail the pipe with caddy's SIGPIPE.
modules="$(./caddy list-modules)" || fail "./caddy list-modules failed"
grep -qx 'http.handlers.sluice' <<<"$modules" ||
	fail "./caddy list-modules has no http.handlers.sluice"
./caddy adapt --config Caddyfile.example --adapter caddyfile --validate >"$TMP/adapt.json" 2>"$TMP/adapt.log" ||
	fail "Caddyfile.example does not adapt: $(cat "$TMP/adapt.log")"
for f in Caddyfile.example e2e/testdata/*.Caddyfile; do
	./caddy fmt "$f" 2>/dev/null | diff -u "$f" - >"$TMP/fmt.diff" ||
		fail "$f is not as caddy fmt writes it (Caddy warns on every run): $(cat "$TMP/fmt.diff")"
done
pass "module http.handlers.sluice is in ./caddy; Caddyfile.example adapts and validates; it and e2e/testdata's are caddy fmt's"

# --- proxy -------------------------------------------------------------------
# codes sends a request per header value of the remaining arguments to the
# URL $1 with the header $2 and prints the status codes, space-separated.
codes() {
	local url=$1 name=$2 v out=()
	shift 2
	for v in "$@"; do
		out+=("$(req -H "$name: $v" "$url")")
	done
	echo "${out[*]}"
}
# want_codes checks that codes' output $1 is $2, naming the requests $3.
want_codes() {
	[ "$1" = "$2" ] || fail "proxy, $3: status codes $1, want $2"
}
declare -A proxy_port
for site in xff strict forwarded; do
	proxy_port[$site]="$(free_port)"
done
SLUICE_E2E_PORT="${proxy_port[xff]}" SLUICE_E2E_STRICT="${proxy_port[strict]}" \
	SLUICE_E2E_FORWARDED="${proxy_port[forwarded]}" \
	e2e_start_caddy proxy e2e/testdata/proxy.Caddyfile "${proxy_port[@]}"
proxy_pid=$CADDY_PID
for site in xff strict forwarded; do
	url="http://127.0.0.1:${proxy_port[$site]}"
	if [ "$site" = forwarded ]; then
		name=Forwarded
		spoof=(for=198.51.100.{1..5}", for=203.0.113.5")
		victim=for=198.51.100.1
		spoof6=("for=\"[2001:db8:9::1]\", for=\"[2001:db8:1:2::7]:443\"" "for=\"[2001:db8:9::2]\";proto=http, for=\"[2001:db8:1:2::8]:443\"")
	else
		name=X-Forwarded-For
		spoof=(198.51.100.{1..5}", 203.0.113.5")
		victim=198.51.100.1
		spoof6=("2001:db8:9::1, 2001:db8:1:2::7" "2001:db8:9::2,2001:db8:1:2::8")
	fi
	want_codes "$(codes "$url/" "$name" "${spoof[@]}")" "200 429 429 429 429" \
		"$site: 5 requests from 203.0.113.5, each with a new address written left of it in $name"
	want_codes "$(codes "$url/" "$name" "$victim" "$victim")" "200 429" \
		"$site: the client 198.51.100.1 whose address the spoofer wrote"
	want_codes "$(codes "$url/net" "$name" "${spoof6[@]}")" "200 429" \
		"$site: 2 requests from one /64 with ipv6_prefix 64, each with a new address written left of it"
done
# The Forwarded site's key is not read from X-Forwarded-For: without
# Forwarded, every request is the balancer's own.
want_codes "$(codes "http://127.0.0.1:${proxy_port[forwarded]}/" X-Forwarded-For 192.0.2.{1..3})" "200 429 429" \
	"forwarded: 3 requests naming new clients in X-Forwarded-For only"
e2e_stop "$proxy_pid"
pass "proxy: behind a trusted balancer, a client that writes new addresses into X-Forwarded-For (with and without trusted_proxies_strict) or Forwarded keeps one bucket, with and without ipv6_prefix, and cannot spend another client's quota"

# --- example -----------------------------------------------------------------
port_open 8080 && fail "127.0.0.1:8080 is in use; Caddyfile.example needs it"
port_open 2019 && fail "localhost:2019 is in use; Caddyfile.example's admin endpoint needs it"
e2e_start_caddy example Caddyfile.example 8080
example_pid=$CADDY_PID
base=http://127.0.0.1:8080

code="$(req "$base/")"
[ "$code" = 200 ] || fail "GET / (first): status $code, want 200"
expect_hdr RateLimit-Policy '"per_ip";q=5;w=10' "GET / (first)"
expect_hdr RateLimit '"per_ip";r=4;t=[0-9]+' "GET / (first)"
expect_hdr X-RateLimit-Limit 5 "GET / (first)"
expect_hdr X-RateLimit-Remaining 4 "GET / (first)"
expect_hdr X-RateLimit-Reset '[0-9]+' "GET / (first)"
pass "an allowed answer carries RateLimit, RateLimit-Policy and X-RateLimit-*"

for i in 1 2 3; do
	code="$(req -X POST "$base/login")"
	[ "$code" = 200 ] || fail "POST /login #$i: status $code, want 200"
done
code="$(req -X POST "$base/login")"
[ "$code" = 429 ] || fail "POST /login #4: status $code, want 429"
expect_hdr RateLimit-Policy '"login";q=3;w=60' "POST /login #4"
pass "POST /login: 3 attempts admitted, the 4th answered 429 by zone login"

rejected_at=0
for ((i = 1; i <= 20; i++)); do
	code="$(req "$base/")"
	case "$code" in
	200) ;;
	429)
		rejected_at=$i
		break
		;;
	*) fail "GET / #$i: status $code, want 200 or 429" ;;
	esac
done
[ "$rejected_at" -gt 0 ] || fail "GET /: no 429 in 20 requests at 5/10s"
expect_hdr Retry-After '[1-9][0-9]*' "the 429"
expect_hdr RateLimit-Policy '"per_ip";q=5;w=10' "the 429"
expect_hdr RateLimit '"per_ip";r=0;t=[0-9]+' "the 429"
expect_hdr X-RateLimit-Limit 5 "the 429"
expect_hdr X-RateLimit-Remaining 0 "the 429"
expect_hdr X-RateLimit-Reset '[0-9]+' "the 429"
expect_hdr Content-Type 'application/json.*' "the 429"
grep -q '"error":"rate_limited"' "$TMP/b" || fail "the 429's body has no \"error\":\"rate_limited\": $(cat "$TMP/b")"
pass "GET / #$rejected_at answered 429 with Retry-After $(hdr Retry-After), RateLimit, RateLimit-Policy, X-RateLimit-* and $(cat "$TMP/b")"

# Spoofing: forwarded headers from a peer Caddy does not trust (no
# trusted_proxies in the example) do not change the key: the bucket stays
# the emptied one (a fresh key would have 4 left).
for spoof in "X-Forwarded-For: 203.0.113.99" "X-Real-IP: 203.0.113.98" "Forwarded: for=203.0.113.97" \
	"X-Forwarded-For: 203.0.113.96, 198.51.100.1"; do
	code="$(req -H "$spoof" "$base/")"
	[ "$(hdr X-RateLimit-Remaining)" = 0 ] ||
		fail "GET / with '$spoof' from an untrusted peer: status $code, X-RateLimit-Remaining $(hdr X-RateLimit-Remaining), want 0 (the same key)"
done
pass "forwarded headers from an untrusted peer (X-Forwarded-For, X-Real-IP, Forwarded) do not change the key"

# admin_req sends one request to an admin endpoint ($1: host:port) with
# method $2 and path $3; like req, it prints the status.
admin_req() {
	curl -sS --max-time 5 -X "$2" -D "$TMP/h" -o "$TMP/b" -w '%{http_code}' "http://$1$3" || echo 000
}

# The client is at 429 in zone per_ip: the admin API shows it spent,
# resets it, and its next request is admitted.
admin=localhost:2019
code="$(admin_req $admin GET /sluice/zones/per_ip/keys/127.0.0.1)"
[ "$code" = 200 ] || fail "admin GET per_ip key: status $code: $(cat "$TMP/b")"
grep -q '"present":true,"remaining":0' "$TMP/b" || fail "admin GET per_ip key: $(cat "$TMP/b"), want present with 0 remaining"
code="$(req "$base/")"
[ "$code" = 429 ] || fail "GET / after the admin GET: status $code, want 429 (a GET of the key charges nothing)"
code="$(admin_req $admin DELETE /sluice/zones/per_ip/keys/127.0.0.1)"
[ "$code" = 200 ] && grep -q '"deleted":true' "$TMP/b" || fail "admin DELETE per_ip key: status $code: $(cat "$TMP/b")"
code="$(req "$base/")"
[ "$code" = 200 ] || fail "GET / after the admin DELETE: status $code, want 200"
expect_hdr X-RateLimit-Remaining 4 "GET / after the admin DELETE"
code="$(admin_req $admin GET /sluice/zones)"
[ "$code" = 200 ] && grep -q '"id":"per_ip@:8080","name":"per_ip","server":"srv0","algorithm":"token_bucket"' "$TMP/b" ||
	fail "admin GET /sluice/zones: status $code: $(cat "$TMP/b")"
code="$(admin_req $admin GET '/sluice/zones/per_ip/top?n=3')"
[ "$code" = 200 ] && grep -q '"rejected":\[{"key":"127.0.0.1","count":[1-9]' "$TMP/b" ||
	fail "admin GET per_ip top: status $code: $(cat "$TMP/b")"
code="$(admin_req $admin POST /sluice/zones/per_ip/keys/127.0.0.1)"
[ "$code" = 405 ] || fail "admin POST per_ip key: status $code, want 405"
code="$(admin_req $admin GET /sluice/zones/nope/keys/127.0.0.1)"
[ "$code" = 404 ] || fail "admin GET of an unknown zone: status $code, want 404"
pass "admin API: the client at 429, reset by DELETE /sluice/zones/per_ip/keys/127.0.0.1, is admitted on its next request; /sluice/zones and /top show the zone and the client"

code="$(req "$base/account")"
[ "$code" = 401 ] || fail "GET /account without credentials: status $code, want 401"
code="$(req -u demo:demo "$base/account")"
[ "$code" = 200 ] || fail "GET /account as demo: status $code, want 200"
expect_hdr RateLimit-Policy '"per_user";q=10;w=60' "GET /account as demo"
grep -qx "hello, demo" "$TMP/b" || fail "GET /account as demo: body $(cat "$TMP/b")"
code="$(req "$base/slow")"
[ "$code" = 200 ] || fail "GET /slow: status $code, want 200"
expect_hdr RateLimit-Policy '"shaped";q=2;w=1' "GET /slow"
pass "/account keys on the basic_auth user; /slow answers through the shaping zone"

e2e_stop "$example_pid"

# --- admin -------------------------------------------------------------------
admin_port="$(free_port)"
port="$(free_port)"
SLUICE_E2E_PORT="$port" SLUICE_E2E_ADMIN_PORT="$admin_port" \
	e2e_start_caddy admin e2e/testdata/admin.Caddyfile "$port"
admin_pid=$CADDY_PID
admin="127.0.0.1:$admin_port"
# A bearer token of 220 bytes, as a JWT; /top names it "#" and the first 32
# hexadecimal digits of its SHA-256.
token="Bearer $(printf 'eyJhbGciOiJIUzI1NiJ9.%.0s' {1..10})e2e"
digest="#$(printf '%s' "$token" | sha256sum | cut -c1-32)"
# spend sends the token until the zone answers 429 (2 admitted a minute).
spend() {
	local i code
	for i in 1 2 3; do
		code="$(req -H "Authorization: $token" "http://127.0.0.1:$port/")"
		[ "$code" = 429 ] && return 0
		[ "$code" = 200 ] || fail "admin: request $i with the token: status $code"
	done
	fail "admin: the token was not answered 429 after 3 requests at 2/1m"
}
spend
code="$(admin_req "$admin" GET /sluice/zones/per_token/top)"
[ "$code" = 200 ] && grep -q "\"scope\":\"instance\".*\"rejected\":\[{\"key\":\"$digest\"" "$TMP/b" ||
	fail "admin GET top: status $code: $(cat "$TMP/b"), want scope instance and $digest rejected"
for name in "%23${digest#\#}" "${token// /%20}"; do
	code="$(admin_req "$admin" GET "/sluice/zones/per_token/keys/$name")"
	[ "$code" = 200 ] && grep -Eq "\"key\":\"$digest\",\"present\":true,\"remaining\":0(\.[0-9]+)?," "$TMP/b" ||
		fail "admin GET of the key by ${name:0:20}…: status $code: $(cat "$TMP/b"), want it present with none remaining"
	code="$(admin_req "$admin" DELETE "/sluice/zones/per_token/keys/$name")"
	[ "$code" = 200 ] && grep -q '"deleted":true' "$TMP/b" ||
		fail "admin DELETE of the key by ${name:0:20}…: status $code: $(cat "$TMP/b")"
	code="$(req -H "Authorization: $token" "http://127.0.0.1:$port/")"
	[ "$code" = 200 ] || fail "admin: the token after DELETE by ${name:0:20}…: status $code, want 200"
	spend
done
code="$(admin_req "$admin" GET /sluice/zones)"
[ "$code" = 200 ] && grep -q '"name":"per_token","server":"srv0","algorithm":"token_bucket","rate":"2/1m","quota":2,"period_seconds":60,"burst":2,' "$TMP/b" &&
	grep -q '"name":"upstream","server":"srv0","near_limit":0.1,"max_in_flight":8,' "$TMP/b" ||
	fail "admin GET /sluice/zones: status $code: $(cat "$TMP/b"), want the rate 2/1m, and no rate fields for upstream"
pass "admin API: the client at 429 with a ${#token}-byte token, which /top names $digest (scope instance), is read and reset by that name and by the token; rates as written, none for max_in_flight alone"

# Observe before enforcing: in dry_run every request is answered 200, and
# once a period is over the advice counts the key-periods and says what the
# configured limit (5 a second, a fixed window: exact) would have refused:
# the heavy client's periods, at least 20 of its 40 requests in one second,
# and not the light client's one request.
for i in $(seq 1 40); do
	code="$(req -H "X-Client: heavy" "http://127.0.0.1:$port/observed")"
	[ "$code" = 200 ] || fail "advice: dry_run request $i of the heavy client: status $code, want 200"
done
code="$(req -H "X-Client: light" "http://127.0.0.1:$port/observed")"
[ "$code" = 200 ] || fail "advice: the light client: status $code"
sleep 1.1 # the second of the requests is over: its key-periods are complete
code="$(admin_req "$admin" GET '/sluice/zones/observed/advice?candidate=100/1s')"
advice="$(cat "$TMP/b")"
[ "$code" = 200 ] &&
	grep -Eq '"keys":2,"key_periods":[23],"partial_key_periods":0,"followed_keys":2,"cost":41,' <<<"$advice" &&
	grep -Eq '"name":"configured","rate":"5/1s","allowance":5,"refused_key_periods":\{"value":0\.[3-9][0-9]*,' <<<"$advice" &&
	grep -Eq '"refused_keys":\{"value":0\.5,"low":0\.5,"high":0\.5\}' <<<"$advice" &&
	grep -Eq '"name":"asked","rate":"100/1s","allowance":100,"refused_key_periods":\{"value":0,"low":0,"high":0\}' <<<"$advice" ||
	fail "advice: status $code: $advice; want 2 keys asking 41 in 2 or 3 key-periods, the configured 5/1s refusing the heavy client's, 100/1s none"
code="$(admin_req "$admin" DELETE /sluice/zones/observed/advice)"
[ "$code" = 204 ] || fail "advice: DELETE: status $code, want 204"
code="$(admin_req "$admin" GET /sluice/zones/observed/advice)"
[ "$code" = 200 ] && grep -q '"keys":0,"key_periods":0,' "$TMP/b" || fail "advice after DELETE: status $code: $(cat "$TMP/b")"
pass "advice: a dry_run zone answered 41 requests 200; its advice counts 2 keys, and says 5/1s would have refused the heavy client's periods (half the keys) and 100/1s nothing; DELETE forgets them"
e2e_stop "$admin_pid"

# --- redis -------------------------------------------------------------------
e2e_need redis-server
redis_port="$(free_port)"
e2e_start_redis "$redis_port"
redis_pid=$REDIS_PID

# Instance a denies and instance b allows requests Redis cannot decide.
declare -A caddy_port admin_port
for name in a b; do
	policy=deny
	[ "$name" = b ] && policy=allow
	caddy_port[$name]="$(free_port)"
	admin_port[$name]="$(free_port)"
	SLUICE_E2E_PORT="${caddy_port[$name]}" SLUICE_E2E_ADMIN_PORT="${admin_port[$name]}" SLUICE_E2E_REDIS="127.0.0.1:$redis_port" \
		SLUICE_E2E_PREFIX="sluice-e2e-$$:" SLUICE_E2E_ON_STORE_ERROR="$policy" \
		e2e_start_caddy "caddy-$name" e2e/testdata/redis.Caddyfile "${caddy_port[$name]}"
done
url_a="http://127.0.0.1:${caddy_port[a]}/"
url_b="http://127.0.0.1:${caddy_port[b]}/"

# 40 requests for one key, alternating between the instances, 8 at a time.
quota=10
total=40
for ((i = 0; i < total; i++)); do
	if ((i % 2 == 0)); then echo "$url_a"; else echo "$url_b"; fi
done >"$TMP/urls"
xargs -P 8 -n 1 curl -sS --max-time 5 -o /dev/null -w '%{http_code}\n' -H 'X-E2E-Client: quota' \
	<"$TMP/urls" >"$TMP/codes" || true
admitted="$(grep -cx 200 "$TMP/codes" || true)"
limited="$(grep -cx 429 "$TMP/codes" || true)"
if [ "$admitted" -ne "$quota" ] || [ "$limited" -ne $((total - quota)) ]; then
	fail "redis: $admitted admitted and $limited limited of $total (codes: $(sort "$TMP/codes" | uniq -c | tr '\n' ' ')), want $quota and $((total - quota))"
fi
pass "redis: two instances admitted exactly $admitted of $total requests (quota $quota), $limited answered 429"

# The spent key, reset through instance a's admin API, is admitted by
# instance b: the API deleted the Redis keys both instances share.
code="$(req -H 'X-E2E-Client: quota' "$url_b")"
[ "$code" = 429 ] || fail "redis: the spent key: status $code, want 429"
code="$(admin_req "127.0.0.1:${admin_port[a]}" GET /sluice/zones/shared/keys/quota)"
[ "$code" = 200 ] && grep -q '"present":true,"remaining":0' "$TMP/b" ||
	fail "redis: admin GET of the spent key: status $code: $(cat "$TMP/b")"
code="$(admin_req "127.0.0.1:${admin_port[a]}" DELETE /sluice/zones/shared/keys/quota)"
[ "$code" = 200 ] && grep -q '"deleted":true' "$TMP/b" || fail "redis: admin DELETE of the spent key: status $code: $(cat "$TMP/b")"
code="$(req -H 'X-E2E-Client: quota' "$url_b")"
[ "$code" = 200 ] || fail "redis: the key reset through instance a, at instance b: status $code, want 200"
expect_hdr X-RateLimit-Remaining 9 "redis: the key reset through instance a, at instance b"
pass "redis: the key at 429, reset by DELETE on instance a's admin API, is admitted by instance b with 9 left"

# check_store_error sends a request that Redis would admit to each instance
# and expects a 429 from a (deny) and a 200 from b (allow) within 2 seconds
# (the store timeout is 300ms). It sets timings to what it saw.
timings=""
check_store_error() {
	local what=$1 name want out code secs
	timings=""
	for name in a b; do
		want=200
		[ "$name" = a ] && want=429
		out="$(curl -sS --max-time 5 -D "$TMP/h" -o "$TMP/b" -w '%{http_code} %{time_total}' \
			-H 'X-E2E-Client: fresh' "http://127.0.0.1:${caddy_port[$name]}/" || echo "000 5")"
		read -r code secs <<<"$out"
		[ "$code" = "$want" ] || fail "redis $what: instance $name answered $code, want $want"
		awk -v s="$secs" 'BEGIN { exit !(s < 2) }' ||
			fail "redis $what: instance $name took ${secs}s, want under 2s"
		[ "$name" = b ] || expect_hdr Retry-After 1 "redis $what, instance a"
		timings+="${timings:+, }$name: $code in ${secs}s"
	done
}
kill -STOP "$redis_pid"
check_store_error frozen
pass "redis frozen: on_store_error deny answered 429, allow 200 ($timings)"
e2e_stop "$redis_pid"
check_store_error stopped
pass "redis stopped: on_store_error deny answered 429, allow 200 ($timings)"

# --- in flight ---------------------------------------------------------------
# Two instances share max_in_flight 3 in a new Redis
# (e2e/testdata/inflight.Caddyfile, lease_ttl 2s) in front of e2e/backend,
# which holds a request for its ?sleep= duration.
e2e_build e2e/backend
backend_port="$(free_port)"
e2e_start_backend "$backend_port"
redis_port="$(free_port)"
e2e_start_redis "$redis_port"
declare -A flight_port flight_pid
for name in a b; do
	flight_port[$name]="$(free_port)"
	SLUICE_E2E_PORT="${flight_port[$name]}" SLUICE_E2E_REDIS="127.0.0.1:$redis_port" \
		SLUICE_E2E_PREFIX="sluice-e2e-flight-$$:" SLUICE_E2E_BACKEND="127.0.0.1:$backend_port" \
		e2e_start_caddy "flight-$name" e2e/testdata/inflight.Caddyfile "${flight_port[$name]}"
	flight_pid[$name]=$CADDY_PID
done
fa="http://127.0.0.1:${flight_port[a]}" fb="http://127.0.0.1:${flight_port[b]}"

# Four requests at once, two through each instance, each held 1.5 s
# upstream: exactly three get a slot.
printf '%s\n' "$fa/?sleep=1500ms" "$fb/?sleep=1500ms" "$fa/?sleep=1500ms" "$fb/?sleep=1500ms" >"$TMP/flight-urls"
xargs -P 4 -n 1 curl -sS --max-time 10 -o /dev/null -w '%{http_code}\n' <"$TMP/flight-urls" >"$TMP/flight-codes" || true
admitted="$(grep -cx 200 "$TMP/flight-codes" || true)"
limited="$(grep -cx 429 "$TMP/flight-codes" || true)"
if [ "$admitted" -ne 3 ] || [ "$limited" -ne 1 ]; then
	fail "in flight: codes $(sort "$TMP/flight-codes" | uniq -c | tr '\n' ' ')for 4 slow requests at once, want 3 × 200 and 1 × 429"
fi
pass "in flight: 4 slow requests at once through two instances sharing max_in_flight 3 in Redis: $admitted admitted, $limited answered 429"

# Three requests held through instance a take every slot; a is killed; its
# leases, renewed every third of lease_ttl, expire within lease_ttl.
# A probe holds a slot for a moment, and may so turn away a held request
# that arrives meanwhile: each one that ended is replaced.
held=()
hold() {
	curl -sS --max-time 30 -o /dev/null "$fa/?sleep=20s" >/dev/null 2>&1 &
	PIDS+=("$!")
	held+=("$!")
}
for i in 1 2 3; do hold; done
sleep 0.3
for ((i = 0; i < 50; i++)); do
	code="$(req "$fb/")"
	[ "$code" = 429 ] && break
	live=0
	for p in "${held[@]}"; do
		! kill -0 "$p" 2>/dev/null || live=$((live + 1))
	done
	for ((j = live; j < 3; j++)); do hold; done
	sleep 0.1
done
[ "$code" = 429 ] || fail "in flight: with 3 requests held through instance a, instance b answered $code, want 429"
expect_hdr RateLimit-Policy '"upstream";q=3;qu="concurrent-requests"' "in flight, the 429"
expect_hdr RateLimit '"upstream";r=0;t=1' "in flight, the 429"
expect_hdr Retry-After 1 "in flight, the 429"
sleep 1 # past a renewal
kill -KILL "${flight_pid[a]}"
killed="$(date +%s%N)"
wait "${flight_pid[a]}" 2>/dev/null || true
freed=0
for ((i = 0; i < 100; i++)); do
	code="$(req "$fb/")"
	if [ "$code" = 200 ]; then
		freed="$(date +%s%N)"
		break
	fi
	sleep 0.05
done
[ "$freed" -gt 0 ] || fail "in flight: the slots of the killed instance a were still taken after 5 s (lease_ttl 2s)"
ms=$(((freed - killed) / 1000000))
if ((ms > 2300)); then
	fail "in flight: the slots of the killed instance a were free again after ${ms} ms, want at most lease_ttl 2s (and 300 ms of polling)"
fi
pass "in flight: the slots of instance a, killed with 3 requests in progress, were free again ${ms} ms after SIGKILL (lease_ttl 2s, renewed every 667 ms)"
