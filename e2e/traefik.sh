#!/usr/bin/env bash
# End-to-end test of the Traefik plugin in a real Traefik v3.6.12 (Yaegi
# v0.16.1), loaded as a local plugin, with real redis-server processes.
# Everything listens on 127.0.0.1; every wait is bounded; every process
# started here is killed on exit.
#
#   1 builtin-style  the built-in rateLimit's options in typed YAML: 5 × 200,
#                    then 429 with Retry-After, RateLimit headers, JSON body
#   2 labels-style   every value a string, as Docker labels give them
#   3 kv-labels      the configuration from Traefik's Redis KV provider, which
#                    builds it as it builds labels (strings, limits[0].name)
#   3b metrics       metrics.address (from the KV provider, as labels give it):
#                    GET /metrics on the plugin's own listener counts the
#                    middleware's requests by outcome; nothing on the entryPoint;
#                    GET /sluice/zones lists the middleware as Traefik names
#                    it; a metrics port already taken costs no traffic (the
#                    router answers, the error is logged); a middleware removed
#                    from the configuration leaves the scrape, one kept stays
#   4 dry-run        mode dry_run lets everything through, marks the upstream
#   5 redis-shared   two Traefik processes share one Redis quota exactly
#   5b in-flight     inFlightReq's amount (memory) and maxInFlight over both
#                    Traefiks (Redis) of 2: 3 slow requests at once (e2e/backend's
#                    ?sleep=) give 2 × 200 and a 429 with the concurrency policy
#   6 rate table     Traefik's own rate table (its TestRateLimit, the cases of
#                    a minute included) replayed against the built-in and
#                    sluice (memory and Redis) with the same options: sluice
#                    admits what the built-in admits (e2e/ratetable)
#   7 redis-down     Redis hung, then killed: onStoreError deny → 429,
#                    allow → 200, fallback local → half the quota, promptly;
#                    then Redis restarted: Redis decides again
#
# It prints PASS/FAIL lines and exits non-zero if any check failed, after
# printing the Traefik logs. Needs go, curl, redis-server, redis-cli; gets
# Traefik from scripts/build-traefik.sh (cached; about 8 minutes cold).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"
source e2e/testdata/traefik/lib.sh
e2e_keep_going
e2e_need go curl redis-server redis-cli

readonly TESTDATA="$REPO/e2e/testdata/traefik"
# expect DESC GOT WANT: passes when GOT equals WANT.
expect() {
	if [ "$2" = "$3" ]; then pass "$1"; else fail "$1: got '$2', want '$3'"; fi
}
# expect_re DESC GOT REGEX: passes when GOT matches the extended REGEX.
expect_re() {
	if [[ "$2" =~ $3 ]]; then pass "$1"; else fail "$1: got '$2', want /$3/"; fi
}
# expect_in DESC GOT LO HI: passes when GOT is an integer in [LO, HI].
expect_in() {
	if [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] && [ "$2" -le "$4" ]; then
		pass "$1 ($2)"
	else
		fail "$1: got '$2', want an integer in [$3, $4]"
	fi
}

# req URL [curl args...] sends GET URL and sets CODE (000 when curl fails),
# SECS (total time in seconds), H and B (files holding the response's headers
# and body).
mkdir -p "$TMP/req"
nreq=0
req() {
	local out url="$1"
	shift
	nreq=$((nreq + 1))
	H="$TMP/req/$nreq.h" B="$TMP/req/$nreq.b"
	: >"$H"
	: >"$B"
	out="$(curl -s -o "$B" -D "$H" -w '%{http_code} %{time_total}' --max-time 3 "$@" "$url" 2>/dev/null)" || true
	[ -n "$out" ] || out="000 3"
	CODE="${out% *}" SECS="${out#* }"
}
# hdr NAME prints the value of header NAME in the last response.
hdr() { sed -n "s/^$1: *//Ip" "$H" | tr -d '\r' | head -n 1; }
# slower A B: succeeds when seconds A > seconds B.
slower() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

# start_redis PORT starts a redis-server without persistence on
# 127.0.0.1:PORT and sets REDIS_PID.
start_redis() {
	e2e_start_redis "$1"
	disown "$REDIS_PID" # no "Killed" notice when the test kills it
}

echo "traefik e2e: getting Traefik v3.6.12 (scripts/build-traefik.sh)"
tl_traefik

e2e_build e2e/backend e2e/ratetable
backend_port="$(free_port)"
e2e_start_backend "$backend_port"

# The Redis the plugin keeps its counters in (stopped by test 7) ...
redis_port="$(free_port)"
start_redis "$redis_port"
redis_pid=$REDIS_PID
# ... and the one Traefik a reads the kv-labels configuration from, with
# kv-metered's metrics address.
kv_port="$(free_port)"
start_redis "$kv_port"
metrics_port="$(free_port)"
while read -r key value; do
	case "$key" in '' | '#'*) continue ;; esac
	value="${value//@METRICS@/127.0.0.1:$metrics_port}"
	redis-cli -h 127.0.0.1 -p "$kv_port" set "$key" "${value//@TAKEN@/127.0.0.1:$backend_port}" >/dev/null
done <"$TESTDATA/kv.txt"

# Two Traefik processes from one directory holding plugins-local/, with the
# same file-provider configuration and their own entryPoints and logs; a
# also has the Redis KV provider.
run="$TMP/run"
mkdir -p "$run"
tl_plugin_tree "$run"
tl_render "$TESTDATA/dynamic.yml" "$run/dynamic.yml" "BACKEND=127.0.0.1:$backend_port" "REDIS=127.0.0.1:$redis_port"
"$TMP/ratetable" -into "$run/dynamic.yml" -redis "127.0.0.1:$redis_port"
port_a="$(free_port)" port_b="$(free_port)"
for i in a b; do
	port_var="port_$i"
	tl_render "$TESTDATA/static.yml" "$run/static-$i.yml" "PORT=${!port_var}" \
		"DYNAMIC=$run/dynamic.yml" "LOG=$run/traefik-$i.log"
done
awk -v ep="127.0.0.1:$kv_port" '{ print } /^providers:$/ {
	print "  redis:"; print "    endpoints: [\"" ep "\"]"; print "    rootKey: traefik"
}' "$run/static-a.yml" >"$run/static-a.tmp"
mv "$run/static-a.tmp" "$run/static-a.yml"
for i in a b; do
	tl_start_traefik "$TRAEFIK" "$run" "$run/static-$i.yml"
done
A="http://127.0.0.1:$port_a" A2="http://127.0.0.1:$port_b"

print_logs() {
	local f
	for f in "$run"/traefik-*.log "$run"/static-*.yml.out; do
		[ -s "$f" ] || continue
		echo "----- $f (last 60 lines)"
		tail -n 60 "$f"
	done
	echo "-----"
}

started=$SECONDS
for i in a b; do
	port_var="port_$i"
	if ! tl_wait_traefik "${!port_var}" "$run/traefik-$i.log" /ready 60; then
		echo "FAIL: Traefik $i did not load the plugin and serve /ready"
		print_logs
		exit 1
	fi
done
pass "two Traefik processes loaded the sluice plugin and serve through it ($((SECONDS - started)) s)"

# --- 1 builtin-style ---------------------------------------------------------
codes=""
for i in 1 2 3 4 5 6; do
	req "$A/builtin-style"
	codes+="$CODE "
	if [ "$i" = 1 ]; then
		expect "builtin-style: RateLimit-Policy on 200" "$(hdr RateLimit-Policy)" '"default";q=5;w=3600'
		expect "builtin-style: RateLimit on the first 200" "$(hdr RateLimit)" '"default";r=4;t=720'
		expect "builtin-style: backend body passes through" "$(cat "$B")" ok
	fi
done
expect "builtin-style: average 5, burst 5 → 5 × 200, then 429" "$codes" "200 200 200 200 200 429 "
# A token comes back every 720 s, counted from the first request: the 429's
# Retry-After and its RateLimit t both say when.
retry="$(hdr Retry-After)"
expect_in "builtin-style: 429 Retry-After, seconds to the next token" "$retry" 600 720
expect "builtin-style: 429 RateLimit t, seconds until more quota: its Retry-After" \
	"$(hdr RateLimit | sed -n 's/^"default";r=0;t=\([0-9]*\)$/\1/p')" "$retry"
expect "builtin-style: 429 X-RateLimit-Limit" "$(hdr X-RateLimit-Limit)" 5
expect "builtin-style: 429 X-RateLimit-Remaining" "$(hdr X-RateLimit-Remaining)" 0
expect_re "builtin-style: 429 X-RateLimit-Reset is a Unix time" "$(hdr X-RateLimit-Reset)" '^[0-9]{10}$'
expect_re "builtin-style: 429 Content-Type" "$(hdr Content-Type)" '^application/json'
expect_re "builtin-style: 429 JSON body" "$(cat "$B")" \
	"^\\{\"error\":\"rate_limited\",\"retryable\":true,\"retry_after\":$retry,\"policy\":\"default\"\\}"
# Spoofing: Traefik's entryPoint trusts no peer here, so forwarded headers a
# client sends do not change its key (the built-in's rule, which the plugin
# follows): still the emptied bucket.
spoofed=""
for spoof in "X-Forwarded-For: 203.0.113.99" "X-Real-IP: 203.0.113.98" "X-Forwarded-For: 203.0.113.96, 198.51.100.1"; do
	req "$A/builtin-style" -H "$spoof"
	spoofed+="$CODE/$(hdr X-RateLimit-Remaining) "
done
expect "builtin-style: forwarded headers from an untrusted client do not change the key" "$spoofed" "429/0 429/0 429/0 "

# --- 2 labels-style ----------------------------------------------------------
codes=""
for i in 1 2 3 4 5 6; do
	req "$A/labels-style" -H 'X-Client: a'
	codes+="$CODE "
done
expect "labels-style: string values → 5 × 200, then 429" "$codes" "200 200 200 200 200 429 "
expect_in "labels-style: 429 Retry-After" "$(hdr Retry-After)" 600 720
expect "labels-style: 429 RateLimit-Policy" "$(hdr RateLimit-Policy)" '"default";q=5;w=3600'
expect "labels-style: headers \"ietf,legacy,x\" → RateLimit-Limit" "$(hdr RateLimit-Limit)" 5
expect "labels-style: headers \"ietf,legacy,x\" → X-RateLimit-Remaining" "$(hdr X-RateLimit-Remaining)" 0
expect_re "labels-style: 429 JSON body" "$(cat "$B")" '"error":"rate_limited"'
req "$A/labels-style" -H 'X-Client: b'
expect "labels-style: sourceCriterion.requestHeaderName → another client has its own quota" "$CODE" 200

# --- 3 kv-labels -------------------------------------------------------------
started=$SECONDS
while [ $((SECONDS - started)) -lt 20 ] && [ "$(tl_status "$A/kv-ready")" != 200 ]; do
	sleep 0.2
done
codes=""
for i in 1 2 3; do
	req "$A/kv-labels" -H 'X-Client: c' -H 'X-API-Key: k1'
	codes+="$CODE "
done
expect "kv-labels: limits[0] per-key (2 per hour) → 200, 200, 429" "$codes" "200 200 429 "
expect_re "kv-labels: the 429 names the per-key limit" "$(cat "$B")" '"policy":"per-key"'
expect "kv-labels: the 429's RateLimit-Policy is the per-key limit's" "$(hdr RateLimit-Policy)" '"per-key";q=2;w=3600'
codes=""
for i in 1 2 3 4; do
	req "$A/kv-labels" -H 'X-Client: c'
	codes+="$CODE "
done
expect "kv-labels: no X-API-Key → per-key skipped; top-level 5 per client, 2 used → 200 × 3, 429" \
	"$codes" "200 200 200 429 "
expect_re "kv-labels: the 429 names the top-level limit" "$(cat "$B")" '"policy":"default"'
expect "kv-labels: the 429's RateLimit-Policy is the top-level limit's" "$(hdr RateLimit-Policy)" '"default";q=5;w=3600'

# --- 3b metrics --------------------------------------------------------------
# metric NAME{LABELS} prints the value of that sample in the last scrape.
metric() { grep -F "$1 " "$B" | sed 's/.* //' | head -n 1; }
codes=""
for i in 1 2 3 4 5; do
	req "$A/kv-metered"
	codes+="$CODE "
done
expect "metrics: kv-metered (3 per hour) → 200 × 3, 429 × 2" "$codes" "200 200 200 429 429 "
req "http://127.0.0.1:$metrics_port/metrics"
expect "metrics: GET /metrics on metrics.address" "$CODE" 200
expect "metrics: Content-Type of the text format" "$(hdr Content-Type)" "text/plain; version=0.0.4; charset=utf-8"
zone='zone="kv-metered@redis"'
expect "metrics: allowed requests" "$(metric "sluice_decisions_total{$zone,outcome=\"allowed\"}")" 3
expect "metrics: rejected requests" "$(metric "sluice_decisions_total{$zone,outcome=\"rejected\"}")" 2
expect "metrics: near_limit among the allowed (less than 10 % of 3 left)" "$(metric "sluice_decisions_total{$zone,outcome=\"near_limit\"}")" 1
expect "metrics: every decision timed, by middleware" "$(metric 'sluice_decision_seconds_count{middleware="kv-metered@redis"}')" 5
expect "metrics: a middleware without metrics is not exported" "$(grep -c 'zone="kv-labels' "$B" || true)" 0
req "$A/metrics"
expect "metrics: nothing on Traefik's entryPoint" "$CODE" 404
req "http://127.0.0.1:$metrics_port/sluice/zones"
expect_re "metrics: GET /sluice/zones lists the middleware as Traefik names it" "$(cat "$B")" \
	'\{"id":"kv-metered@redis","name":"default","middleware":"kv-metered@redis","algorithm":"token_bucket","rate":"3/1h"'
req "$A/kv-taken"
expect "metrics: a metrics port already taken costs no traffic" "$CODE" 200
expect_re "metrics: and is logged at error level" "$(grep ' ERR ' "$run/traefik-a.log" || true)" \
	"sluice kv-taken@redis: metrics.address \"127.0.0.1:$backend_port\": listen tcp 127.0.0.1:$backend_port: bind: address already in use"
# kv-metered removed from the configuration (its keys deleted), kv-kept
# kept: kv-metered leaves the scrape 10 s after a scrape has seen the new
# configuration; kv-kept stays, counting on.
req "$A/kv-kept"
for key in $(redis-cli -h 127.0.0.1 -p "$kv_port" --scan --pattern 'traefik/http/*/kv-metered/*'); do
	redis-cli -h 127.0.0.1 -p "$kv_port" del "$key" >/dev/null
done
started=$SECONDS
while [ $((SECONDS - started)) -lt 40 ]; do
	sleep 1
	req "http://127.0.0.1:$metrics_port/metrics"
	[ "$CODE" != 200 ] || grep -q 'kv-metered' "$B" || break
done
expect "metrics: kv-metered, removed, leaves the scrape (after $((SECONDS - started)) s)" "$(grep -c 'kv-metered' "$B" || true)" 0
expect "metrics: kv-kept, kept, stays with its count" "$(metric 'sluice_decisions_total{zone="kv-kept@redis",outcome="allowed"}')" 1

# --- 4 dry-run ---------------------------------------------------------------
codes="" marks=""
for i in 1 2 3; do
	req "$A/dry-run"
	codes+="$CODE "
	marks+="$(hdr X-Seen-Dry-Run)-"
done
expect "dry-run: every request passes" "$codes" "200 200 200 "
expect "dry-run: the upstream sees X-Sluice-Dry-Run on those over the limit" "$marks" "-rejected-rejected-"

# --- 5 redis-shared ----------------------------------------------------------
codes="" ok_a=0 ok_b=0
for i in $(seq 1 12); do
	req "$A/redis-shared"
	codes+="$CODE "
	[ "$CODE" != 200 ] || ok_a=$((ok_a + 1))
	req "$A2/redis-shared"
	codes+="$CODE "
	[ "$CODE" != 200 ] || ok_b=$((ok_b + 1))
done
expect "redis-shared: two Traefiks, 24 alternating requests, quota 10 → 200s" "$((ok_a + ok_b))" 10
expect "redis-shared: the quota is split between the instances" "$ok_a/$ok_b" "5/5"
expect "redis-shared: the rest are 429" "$(grep -o 429 <<<"$codes" | wc -l | tr -d ' ')" 14
keys="$(redis-cli -h 127.0.0.1 -p "$redis_port" dbsize 2>/dev/null || echo 0)"
expect_re "redis-shared: the counters are in Redis" "$keys" '^[1-9][0-9]*$'

# --- 5b in-flight -------------------------------------------------------------
# at_once URL... requests every URL at the same time and prints the status
# codes, sorted.
at_once() {
	printf '%s\n' "$@" | xargs -P "$#" -n 1 curl -s -o /dev/null -w '%{http_code}\n' --max-time 10 | sort | tr '\n' ' '
}
slow="inflight-memory?sleep=1500ms"
expect "in-flight (memory, inFlightReq's amount 2): 3 slow requests at once" "$(at_once "$A/$slow" "$A/$slow" "$A/$slow")" "200 200 429 "
slow="inflight-redis?sleep=1500ms"
expect "in-flight (Redis, maxInFlight 2 over both Traefiks): 3 slow requests at once" \
	"$(at_once "$A/$slow" "$A2/$slow" "$A/$slow")" "200 200 429 "
# A probe holds a slot for a moment, and may so turn away a held request
# that arrives meanwhile: each one that ended is replaced.
held=()
hold() {
	curl -s -o /dev/null --max-time 10 "$A/inflight-redis?sleep=2s" &
	held+=("$!")
}
hold
hold
sleep 0.3
for i in $(seq 1 30); do
	req "$A2/inflight-redis"
	[ "$CODE" != 429 ] || break
	live=0
	for p in "${held[@]}"; do
		! kill -0 "$p" 2>/dev/null || live=$((live + 1))
	done
	for ((j = live; j < 2; j++)); do hold; done
	sleep 0.1
done
expect "in-flight: with 2 requests held through Traefik a, Traefik b answers" "$CODE" 429
expect "in-flight: the 429's RateLimit-Policy" "$(hdr RateLimit-Policy)" '"default";q=2;qu="concurrent-requests"'
expect "in-flight: the 429's Retry-After" "$(hdr Retry-After)" 1
wait "${held[@]}" 2>/dev/null || true
req "$A2/inflight-redis"
expect "in-flight: once they are done, Traefik b admits" "$CODE" 200

# --- 6 rate table ------------------------------------------------------------
# About 75 s: the cases of 2 s one after another, then the two of a minute.
rows=0
while IFS= read -r line; do
	case "$line" in
	PASS:*)
		pass "${line#PASS: }"
		rows=$((rows + 1))
		;;
	FAIL:*)
		fail "${line#FAIL: }"
		rows=$((rows + 1))
		;;
	*) echo "$line" ;;
	esac
done < <("$TMP/ratetable" -base "$A" -long 2>&1 || true)
[ "$rows" = 9 ] || fail "rate table: $rows of its 9 cases reported"

# --- 7 redis-down ------------------------------------------------------------
req "$A/redis-deny"
expect "redis-down: redis-deny with Redis up → 200" "$CODE" 200
codes=""
for i in 1 2; do
	req "$A/redis-allow"
	codes+="$CODE "
done
expect "redis-down: redis-allow (quota 1) with Redis up → Redis decides: 200, 429" "$codes" "200 429 "

# down_round LABEL LIMIT: six rounds of deny, allow; every answer in under
# LIMIT seconds.
down_round() {
	local label="$1" limit="$2" deny="" allow="" worst=0 i
	for i in 1 2 3 4 5 6; do
		req "$A/redis-deny"
		deny+="$CODE "
		! slower "$SECS" "$worst" || worst="$SECS"
		req "$A/redis-allow"
		allow+="$CODE "
		! slower "$SECS" "$worst" || worst="$SECS"
	done
	expect "redis-down ($label): onStoreError deny → 429" "$deny" "429 429 429 429 429 429 "
	expect "redis-down ($label): onStoreError allow → 200 (past its quota of 1)" "$allow" "200 200 200 200 200 200 "
	if slower "$worst" "$limit"; then
		fail "redis-down ($label): slowest answer ${worst} s, want under $limit s"
	else
		pass "redis-down ($label): slowest of 12 answers ${worst} s (under $limit s)"
	fi
}

# Hung: connections open, no answers; the plugin's redis timeouts are
# 200 ms each way, and its circuit breaker opens after 5 failures.
kill -STOP "$redis_pid"
down_round "Redis hung, SIGSTOP" 1.5
kill -KILL "$redis_pid"
for i in $(seq 1 50); do
	kill -0 "$redis_pid" 2>/dev/null || break
	sleep 0.1
done
down_round "Redis killed" 1.0

codes=""
for i in 1 2 3 4; do
	req "$A/redis-fallback"
	codes+="$CODE "
done
expect "redis-down: fallback local, instances 2 → half the quota of 4 in memory" "$codes" "200 200 429 429 "

start_redis "$redis_port"
# While Redis is down redis-allow answers 200 only; a 429 is Redis deciding
# (its quota of 1 used up in the new server).
started=$SECONDS
recovered="" seen=""
while [ $((SECONDS - started)) -lt 15 ]; do
	req "$A/redis-allow"
	seen+="$CODE "
	[ "$CODE" != 429 ] || { recovered=yes; break; }
	sleep 0.2
done
if [ -n "$recovered" ]; then
	pass "redis-down: Redis restarted → Redis decides again (quota 1 used up: 429) within $((SECONDS - started)) s (saw: $seen)"
else
	fail "redis-down: Redis restarted, but redis-allow never answered 429 (Redis deciding) within 15 s (saw: $seen)"
fi

# kv-labels' per-key limit skips requests without X-API-Key: the remark that
# clients bypass it is at error level, which Traefik shows by default.
expect_re "logs: the onMissingKey skip remark is at error level" "$(grep ' ERR ' "$run/traefik-a.log" || true)" \
	'limit "per-key": a request without header:X-API-Key is not limited by it \(onMissingKey: skip\)'

# The plugin writes to os.Stdout and os.Stderr, which under Yaegi are the
# process's own streams (Traefik's logger gets only fmt.Print* and log.*).
echo "----- plugin output of Traefik a (its stdout and stderr):"
tail -n 12 "$run/static-a.yml.out" || true
echo "----- error lines in the log of Traefik a:"
grep ' ERR ' "$run/traefik-a.log" | tail -n 12 || true
echo "-----"
e2e_verdict "traefik e2e" || {
	print_logs
	exit 1
}
