#!/usr/bin/env bash
# End-to-end run of the recipes of docs/recipes.md, as the files of
# examples/ hold them, each against its promise, with a real upstream
# (e2e/backend) and a real Redis. Everything listens on 127.0.0.1; every wait
# is bounded; every process started here is stopped on exit.
#
# Caddy (./caddy, built by ./xcaddy.sh), each recipe run as written, but for
# its addresses: the site :8080 becomes http://127.0.0.1:<port>, the upstream
# localhost:9000 e2e/backend's port, Redis's localhost:6379 a redis-server of
# this script's, and the admin endpoint (CADDY_ADMIN) a port of its own:
#
#   login            20 successful logins on /login (the upstream's 200) and
#                    5 failed ones among them (its 401, ?status=401) are all
#                    answered; the 6th failure is refused before the upstream,
#                    429 with the policy "login";q=5;w=60 and the penalty's
#                    Retry-After near 900; then a successful login is held
#                    out too; / is not limited
#   tokens           a key's 3 answers of 4,000 tokens (the upstream's
#                    X-Tokens-Used, ?tokens=4000) are all answered and leave
#                    it 2,000 in debt: the next is refused, 429 with the
#                    policy "tokens";q=10000;w=60 and a Retry-After of the
#                    debt's repayment, 12 s (10 to 12); another key is not;
#                    a streamed completion (?events=3, one every 700 ms)
#                    reaches its client event by event and is charged the
#                    6,000 tokens of its trailer; a client that leaves a
#                    stream whose header states 3,000 tokens is charged
#                    them; the same on a Redis store
#   downloads        a client's 3 downloads of 4 MB (?bytes=4000000) are
#                    served and leave it 2 MB over: the next is refused with
#                    a Retry-After of 10 to 12 s; another client (from
#                    127.0.0.2) is not
#   api-quota        a key's answers carry the policy "daily";q=1000;w=86400,
#                    X-RateLimit-Limit 1000, and X-RateLimit-Reset at the
#                    next 00:00 UTC (the window's end); a request without the
#                    key passes unlimited
#   expensive        3 slow requests at once give 2 × 200 and a 429 with the
#                    concurrency policy; then the quota of 10 in any minute,
#                    over every path under /reports/, is spent and the next
#                    refused until the oldest admission is a minute old
#   three-instances  three Caddys on one Redis admit one client 100 requests
#                    in all, then 429 from each; with Redis gone, an instance
#                    admits its third (33) from its own memory
#   custom-429       the 101st request gets handle_errors' page, with status
#                    429, Retry-After and the rate-limit headers
#   dry-run          40 requests all pass; the candidate counts its would-be
#                    refusals (dry_run_rejected) in the metrics
#
# Traefik (scripts/build-traefik.sh's v3.6.12, cached): examples/traefik-local
# run by its run.sh (which copies the plugin, .traefik.yml included) answers
# 5 × 200 then 429; then the same Traefik, its file provider watching,
# loads each Traefik recipe's file in turn and holds it to the same
# promises (three-instances with one Traefik: 100 admitted through Redis;
# login's, tokens' and downloads' checks as in Caddy).
#
# Prints PASS lines and FAIL lines, and fails if any check failed. About 15
# seconds once Caddy and Traefik are built.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"
source e2e/testdata/traefik/lib.sh

e2e_keep_going
e2e_need go curl redis-server redis-cli
e2e_build e2e/backend
e2e_build_caddy

# req URL [curl args...] sends one request and sets CODE, and H and B (the
# files of the answer's headers and body).
req() {
	local url="$1"
	shift
	H="$TMP/h" B="$TMP/b"
	CODE="$(curl -s -o "$B" -D "$H" -w '%{http_code}' --max-time 5 "$@" "$url" 2>/dev/null || echo 000)"
}
# hdr NAME prints the last answer's header NAME.
hdr() { sed -n "s/^$1: *//Ip" "$H" | tr -d '\r' | head -n 1; }
# codes N URL [curl args...] sends N requests to URL from one curl, one after
# the other, and prints their status codes, space-separated.
codes() {
	local n="$1" url="$2" i args=()
	shift 2
	for ((i = 0; i < n; i++)); do args+=(-o /dev/null "$url"); done
	curl -s --max-time 5 -w '%{http_code} ' "$@" "${args[@]}" 2>/dev/null | sed 's/ $//' || true
}
# count CODE LIST prints how many of LIST (codes's output) are CODE.
count() { tr ' ' '\n' <<<"$2" | grep -cx "$1" || true; }
# parallel3 URL sends 3 requests at once and prints their codes, sorted;
# the headers of request i are in $TMP/p<i>.h, its code in $TMP/p<i>.code.
parallel3() {
	local i
	for i in 1 2 3; do
		curl -s -o /dev/null -D "$TMP/p$i.h" -w '%{http_code}\n' --max-time 10 "$1" >"$TMP/p$i.code" 2>/dev/null &
	done
	wait
	cat "$TMP"/p[123].code | sort | tr '\n' ' ' | sed 's/ $//'
}
# req_refused URL [curl args...] is req, sent again (10 times at most)
# until the answer is a 429: a bucket spent a moment ago may have refilled a
# token, or with a maximum delay admit the next request after a wait.
req_refused() {
	local i
	for ((i = 0; i < 10; i++)); do
		req "$@"
		[ "$CODE" != 429 ] || return 0
	done
}
# expect DESC GOT WANT passes when GOT equals WANT.
expect() {
	if [ "$2" = "$3" ]; then pass "$1"; else fail "$1: got '$2', want '$3'"; fi
}
# expect_in DESC GOT LO HI passes when the integer GOT is in [LO, HI].
expect_in() {
	if [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] && [ "$2" -le "$4" ]; then
		pass "$1 ($2)"
	else
		fail "$1: got '$2', want an integer in [$3, $4]"
	fi
}

# login_checks HOST URL holds the login recipe served at URL by HOST to its
# promise: only failed attempts count, 5 a minute, then 15 minutes out. The
# upstream answers ?status=401 with 401, a failed login.
login_checks() {
	local got
	got="$(codes 10 "$2/login?status=200") $(codes 4 "$2/login?status=401") $(codes 10 "$2/login?status=200") $(codes 1 "$2/login?status=401")"
	expect "$1 login: 20 successful logins and 5 failed ones among them are all answered (200s, 401s)" \
		"$(count 200 "$got") $(count 401 "$got")" "20 5"
	req "$2/login?status=401"
	expect "$1 login: the 6th failure is refused with the policy" "$CODE $(hdr RateLimit-Policy)" '429 "login";q=5;w=60'
	expect_in "$1 login: the penalty holds the client out for 15 minutes (the 429's Retry-After)" "$(hdr Retry-After)" 890 900
	req "$2/login?status=200"
	expect "$1 login: during the penalty a successful login is refused too" "$CODE" 429
	expect_in "$1 login: with the time left (Retry-After)" "$(hdr Retry-After)" 840 900
}

# expensive_quota HOST URL holds the expensive recipe served at URL by HOST
# to its quota, 10 in any minute for every client together, once its 3
# requests at once have spent 2 (the one refused a slot is charged nothing):
# of 12 more, 8 are admitted, and the refusal's Retry-After is the time
# until the oldest admission is a minute old, not the 6 s in which a bucket
# of 10 a minute would admit one more. start is when the 2 were admitted.
expensive_quota() {
	local got
	got="$(codes 5 "$2/reports/a") $(codes 7 "$2/reports/b")"
	if [ $((SECONDS - start)) -ge 50 ]; then
		fail "$1 expensive: took more than 50 s, too near the minute to check"
		return
	fi
	expect "$1 expensive: requests admitted after the 2 in flight, of 12" "$(count 200 "$got")" 8
	req "$2/reports/c"
	expect "$1 expensive: the next is refused" "$CODE" 429
	expect_in "$1 expensive: until the oldest admission is a minute old (Retry-After)" "$(hdr Retry-After)" 50 60
}

# tokens_checks HOST URL holds the token recipe served at URL by HOST to its
# promise: 10,000 tokens a minute per API key, charged what the answer's
# X-Tokens-Used says, the debt refused until the rate repays it.
tokens_checks() {
	local got
	got="$(codes 3 "$2/v1/chat?tokens=4000" -H "Authorization: Bearer k-$3")"
	expect "$1 tokens: 3 answers of 4,000 tokens, let through while the key had tokens left" "$got" "200 200 200"
	req "$2/v1/chat?tokens=10" -H "Authorization: Bearer k-$3"
	expect "$1 tokens: then the key, 2,000 in debt, is refused with the policy" "$CODE $(hdr RateLimit-Policy)" '429 "tokens";q=10000;w=60'
	expect_in "$1 tokens: until 10,000 a minute has repaid the 2,000 (Retry-After)" "$(hdr Retry-After)" 10 12
	req "$2/v1/chat?tokens=10" -H "Authorization: Bearer other-$3"
	expect "$1 tokens: another key is let through" "$CODE" 200
	tokens_stream_checks "$@"
}

# tokens_stream_checks HOST URL KEY: a streamed completion (server-sent
# events, one every 700 ms) through the token recipe reaches its client
# event by event, and is charged the tokens its trailer states at its end.
tokens_stream_checks() {
	local t0 first=0 last=0 n=0 line r
	t0="$(date +%s%N)"
	while IFS= read -r line; do
		[[ "$line" == data:* ]] || continue
		n=$((n + 1))
		[ "$n" != 1 ] || first="$(date +%s%N)"
		last="$(date +%s%N)"
	done < <(curl -sN --max-time 10 "$2/v1/chat?events=3&every=700ms&tokens=6000" -H "Authorization: Bearer s-$3" || true)
	expect "$1 tokens: a streamed completion's 3 events" "$n" 3
	expect_in "$1 tokens: its first event arrives as it is sent (ms)" "$(((first - t0) / 1000000))" 0 600
	expect_in "$1 tokens: its last, 1.4 s later (ms)" "$(((last - t0) / 1000000))" 1400 5000
	req "$2/v1/chat?tokens=10" -H "Authorization: Bearer s-$3"
	r="$(hdr RateLimit | sed -n 's/.*;r=\([0-9]*\).*/\1/p')"
	expect_in "$1 tokens: charged the 6,000 of its trailer (RateLimit's r)" "${r:-none}" 3900 4500
	# A client that leaves a stream whose header states 3,000 tokens after
	# its first event (0.5 s) is charged them.
	curl -sN --max-time 0.5 "$2/v1/chat?events=3&every=1s&tokens=3000&at=start" -H "Authorization: Bearer h-$3" >/dev/null || true
	sleep 0.5
	req "$2/v1/chat?tokens=10" -H "Authorization: Bearer h-$3"
	r="$(hdr RateLimit | sed -n 's/.*;r=\([0-9]*\).*/\1/p')"
	expect_in "$1 tokens: a client that leaves a stream is charged its header's 3,000 (RateLimit's r)" "${r:-none}" 6900 7400
}

# downloads_checks HOST URL holds the download recipe served at URL by HOST
# to its promise: 10 MB a minute per client, charged the bodies' bytes.
downloads_checks() {
	local got
	got="$(codes 3 "$2/files/a?bytes=4000000")"
	expect "$1 downloads: 3 downloads of 4 MB are served" "$got" "200 200 200"
	req "$2/files/b?bytes=10"
	expect "$1 downloads: then the client, 2 MB over, is refused" "$CODE" 429
	expect_in "$1 downloads: until 10 MB a minute has repaid the 2 MB (Retry-After)" "$(hdr Retry-After)" 10 12
	req "$2/files/b?bytes=10" --interface 127.0.0.2
	expect "$1 downloads: another client is served" "$CODE" 200
}

backend="$(free_port)"
e2e_start_backend "$backend"
redis="$(free_port)"
e2e_start_redis "$redis"

# --- Caddy -------------------------------------------------------------------
# caddy_recipe NAME [PORT ADMIN] starts examples/caddy/NAME.Caddyfile on PORT
# (default: a free one, set in PORT) with its admin endpoint on ADMIN, and
# sets URL.
caddy_recipe() {
	PORT="${2:-$(free_port)}" ADMIN="${3:-$(free_port)}"
	sed -e "s|^:8080 {|http://127.0.0.1:$PORT {|" -e "s|localhost:9000|127.0.0.1:$backend|" \
		-e "s|localhost:6379|127.0.0.1:$redis|" "examples/caddy/$1.Caddyfile" >"$TMP/$1-$PORT.Caddyfile"
	grep -q "127.0.0.1:$PORT" "$TMP/$1-$PORT.Caddyfile" || die "examples/caddy/$1.Caddyfile: no site :8080"
	CADDY_ADMIN="127.0.0.1:$ADMIN" e2e_start_caddy "$1-$PORT" "$TMP/$1-$PORT.Caddyfile" "$PORT"
	URL="http://127.0.0.1:$PORT"
}

# login
caddy_recipe login
login_checks caddy "$URL"
req "$URL/"
expect "caddy login: / is not limited" "$CODE $(hdr RateLimit-Policy)" "200 "
e2e_stop "$CADDY_PID"

# tokens, in memory and on Redis (the recipe with a store redis block)
caddy_recipe tokens
tokens_checks caddy "$URL" memory
e2e_stop "$CADDY_PID"
sed -i "s|^\tsluice {\$|\tsluice {\n\t\tstore redis {\n\t\t\taddress 127.0.0.1:$redis\n\t\t}|" "$TMP/tokens-$PORT.Caddyfile"
grep -q "address 127.0.0.1:$redis" "$TMP/tokens-$PORT.Caddyfile" || die "examples/caddy/tokens.Caddyfile: no sluice block"
CADDY_ADMIN="127.0.0.1:$ADMIN" e2e_start_caddy "tokens-redis-$PORT" "$TMP/tokens-$PORT.Caddyfile" "$PORT"
tokens_checks "caddy (redis)" "$URL" redis
keys="$(redis-cli -p "$redis" --scan --pattern 'sluice:*tokens*' | wc -l)"
expect_in "caddy (redis) tokens: the keys' counters are in Redis" "$keys" 2 6
e2e_stop "$CADDY_PID"

# downloads
caddy_recipe downloads
downloads_checks caddy "$URL"
e2e_stop "$CADDY_PID"

# api-quota
caddy_recipe api-quota
req "$URL/items" -H "X-API-Key: k-123"
midnight=$((($(date +%s) / 86400 + 1) * 86400))
reset="$(hdr X-RateLimit-Reset)"
if [ "$CODE" = 200 ] && [ "$(hdr RateLimit-Policy)" = '"daily";q=1000;w=86400' ] && [ "$(hdr X-RateLimit-Limit)" = 1000 ] &&
	[ "$(hdr X-RateLimit-Remaining)" = 999 ] && { [ "$reset" = "$midnight" ] || [ "$reset" = $((midnight + 86400)) ]; }; then
	pass "caddy api-quota: a window of a day and 1000 (RateLimit-Policy $(hdr RateLimit-Policy), 999 left, reset at the next 00:00 UTC, $reset)"
else
	fail "caddy api-quota: code $CODE, RateLimit-Policy '$(hdr RateLimit-Policy)', X-RateLimit-Limit '$(hdr X-RateLimit-Limit)', -Remaining '$(hdr X-RateLimit-Remaining)', -Reset '$reset' (want $midnight)"
fi
req "$URL/items"
expect "caddy api-quota: a request without the key passes, unlimited" "$CODE $(hdr RateLimit-Policy)" "200 "
e2e_stop "$CADDY_PID"

# expensive
caddy_recipe expensive
start=$SECONDS
got="$(parallel3 "$URL/reports/q3?sleep=1s")"
policy="$(sed -n 's/^RateLimit-Policy: *//Ip' "$(grep -l '^429$' "$TMP"/p[123].code | head -n 1 | sed 's/code$/h/')" 2>/dev/null | tr -d '\r')"
if [ "$got" = "200 200 429" ] && [ "$policy" = '"reports";q=2;qu="concurrent-requests"' ]; then
	pass "caddy expensive: 3 at once give 2 × 200 and a 429 with the policy $policy"
else
	fail "caddy expensive: 3 at once gave '$got', concurrency policy '$policy'"
fi
expensive_quota caddy "$URL"
e2e_stop "$CADDY_PID"

# three-instances: three Caddys serve the site as written, :8080 (here one
# free port), each bound to an address of its own, 127.0.0.1 to 127.0.0.3, as
# three hosts would. A site's name leaves out the address it binds, so the
# three name the zone alike (per_client@:<port>) and count on one Redis key;
# sites on ports of their own would need an id.
port="$(free_port)"
urls=() pids=()
for n in 1 2 3; do
	sed -e "s|^:8080 {|:$port {\n\tbind 127.0.0.$n|" -e "s|localhost:6379|127.0.0.1:$redis|" \
		-e "s|localhost:9000|127.0.0.1:$backend|" examples/caddy/three-instances.Caddyfile >"$TMP/three-instances-$n.Caddyfile"
	grep -q "bind 127.0.0.$n" "$TMP/three-instances-$n.Caddyfile" || die "examples/caddy/three-instances.Caddyfile: no site :8080"
	CADDY_ADMIN="127.0.0.1:$(free_port)" e2e_start_caddy "three-instances-$n" "$TMP/three-instances-$n.Caddyfile"
	pids+=("$CADDY_PID") urls+=("http://127.0.0.$n:$port")
	# Wait for the listener without a request, which would spend the quota.
	for ((i = 0; i < 300; i++)); do
		! (exec 3<>"/dev/tcp/127.0.0.$n/$port") 2>/dev/null || break
		kill -0 "$CADDY_PID" 2>/dev/null || die "caddy (three-instances-$n) exited"
		sleep 0.1
	done
done
start=$SECONDS
all=""
for ((i = 0; i < 40; i++)); do
	all+=" $(curl -s --max-time 5 -w '%{http_code} ' -o /dev/null "${urls[0]}/" -o /dev/null "${urls[1]}/" -o /dev/null "${urls[2]}/" || true)"
done
admitted="$(count 200 "$(xargs <<<"$all")")"
# 100 a minute: one more per 0.6 s elapsed.
expect_in "caddy three-instances: one client's 120 requests over three Caddys on one Redis, admitted" "$admitted" 100 $((101 + (SECONDS - start) * 10 / 6))
# A token comes back every 0.6 s, which a loaded machine may let one of
# three requests in a row find: ask again, 5 times at most.
for ((i = 0; i < 5; i++)); do
	last="$(codes 1 "${urls[0]}/") $(codes 1 "${urls[1]}/") $(codes 1 "${urls[2]}/")"
	[ "$last" = "429 429 429" ] && break
done
expect "caddy three-instances: then each instance refuses" "$last" "429 429 429"
e2e_stop "$REDIS_PID"
start=$SECONDS
got="$(codes 40 "${urls[0]}/")"
# A third of 100, refilled at a third of 100 a minute.
expect_in "caddy three-instances: with Redis gone, one instance admits its share" "$(count 200 "$got")" 33 $((34 + (SECONDS - start)))
e2e_stop "${pids[@]}"
e2e_start_redis "$redis"

# custom-429
caddy_recipe custom-429
got="$(codes 100 "$URL/")"
expect "caddy custom-429: 100 requests pass" "$(count 200 "$got")" 100
req_refused "$URL/"
if [ "$CODE" = 429 ] && grep -q '<h1>Slow down</h1>' "$B" && [[ "$(hdr Content-Type)" == text/html* ]] &&
	[[ "$(hdr Retry-After)" =~ ^[0-9]+$ ]] && [ -n "$(hdr RateLimit)" ]; then
	pass "caddy custom-429: the 429 is handle_errors' page, with Retry-After $(hdr Retry-After) and RateLimit $(hdr RateLimit)"
else
	fail "caddy custom-429: code $CODE, Content-Type '$(hdr Content-Type)', Retry-After '$(hdr Retry-After)', RateLimit '$(hdr RateLimit)', body: $(head -c 200 "$B")"
fi
e2e_stop "$CADDY_PID"

# dry-run
caddy_recipe dry-run
got="$(codes 40 "$URL/")"
expect "caddy dry-run: 40 requests all pass" "$(count 200 "$got")" 40
metrics="$(curl -s --max-time 5 "http://127.0.0.1:$ADMIN/metrics" | grep '^sluice_decisions_total' || true)"
would="$(sed -n 's/^sluice_decisions_total{outcome="dry_run_rejected",zone="candidate[^"]*"} //p' <<<"$metrics")"
expect_in "caddy dry-run: the candidate (30/min) counts would-be refusals" "${would:-none}" 9 10
e2e_stop "$CADDY_PID"

# --- Traefik -----------------------------------------------------------------
tl_traefik
tport="$(free_port)" aport="$(free_port)"
run="$TMP/traefik-local"
cp -a examples/traefik-local "$run"
sed -i -e "s|127.0.0.1:8080|127.0.0.1:$tport|" \
	-e "s|^entryPoints:\$|entryPoints:\n  traefik:\n    address: 127.0.0.1:$aport|" \
	-e "s|^    filename: dynamic.yml\$|    filename: dynamic.yml\n    watch: true\n  providersThrottleDuration: 0s|" "$run/static.yml"
printf 'api:\n  insecure: true\n' >>"$run/static.yml"
SLUICE_SRC="$REPO" TRAEFIK="$TRAEFIK" e2e_start "$TMP/traefik.log" "$run/run.sh"
traefik_pid=$LAST_PID
# Traefik's /ping router answers before the plugin's; wait for the plugin.
tl_wait_traefik "$tport" "$TMP/traefik.log" /ping 120 || die "Traefik (examples/traefik-local/run.sh) did not come up"
[ -e "$run/plugins-local/src/github.com/sluicehq/sluice/.traefik.yml" ] ||
	fail "traefik-local: run.sh did not copy .traefik.yml"
got="$(codes 6 "http://127.0.0.1:$tport/")"
expect "traefik-local: run.sh's Traefik answers 5 × 200, then 429" "$got" "200 200 200 200 200 429"

# traefik_recipe NAME MIDDLEWARE TEXT puts examples/traefik/NAME.yml in
# place of the dynamic configuration and waits until Traefik's API shows
# MIDDLEWARE enabled with TEXT in its configuration (10 s at most).
traefik_recipe() {
	local i api
	sed -e "s|http://localhost:9000|http://127.0.0.1:$backend|" -e "s|localhost:6379|127.0.0.1:$redis|" \
		-e "s|127.0.0.1:9180|127.0.0.1:$mport|" "examples/traefik/$1.yml" >"$run/dynamic.tmp"
	mv "$run/dynamic.tmp" "$run/dynamic.yml"
	for ((i = 0; i < 100; i++)); do
		api="$(curl -s --max-time 2 "http://127.0.0.1:$aport/api/http/middlewares/$2@file" || true)"
		[[ "$api" == *'"status":"enabled"'* && "$api" == *"$3"* ]] && return 0
		sleep 0.1
	done
	fail "traefik $1: middleware $2 not enabled with $3 after 10 s: $api"
	return 1
}
T="http://127.0.0.1:$tport"
mport="$(free_port)"

if traefik_recipe login login-limit sliding_window_log; then
	login_checks traefik "$T"
fi
if traefik_recipe tokens tokens-limit X-Tokens-Used; then
	tokens_checks traefik "$T" traefik
fi
if traefik_recipe downloads downloads-limit 10000000; then
	downloads_checks traefik "$T"
fi
if traefik_recipe api-quota api-quota fixed_window; then
	req "$T/api/items" -H "X-API-Key: k-123"
	expect "traefik api-quota: a window of a day and 1000" "$CODE $(hdr RateLimit-Policy) $(hdr X-RateLimit-Limit)" '200 "daily";q=1000;w=86400 1000'
fi
if traefik_recipe expensive reports-limit const:global; then
	start=$SECONDS
	got="$(parallel3 "$T/reports/q3?sleep=1s")"
	expect "traefik expensive: 3 at once" "$got" "200 200 429"
	expensive_quota traefik "$T"
fi
if traefik_recipe three-instances per-client "127.0.0.1:$redis"; then
	start=$SECONDS
	got="$(codes 101 "$T/")"
	# 100 a minute: one more per 0.6 s elapsed.
	expect_in "traefik three-instances: admitted through Redis, of 101" "$(count 200 "$got")" 100 $((101 + (SECONDS - start) * 10 / 6))
	keys="$(redis-cli -p "$redis" --scan --pattern 'sluice:*per_client*' | wc -l)"
	expect_in "traefik three-instances: the counters are in Redis" "$keys" 1 5
fi
# The recipes' middleware per-client keeps its counters from one
# configuration to the next (as Traefik reloads do): dry-run, which needs
# them unspent, comes before custom-429, which spends them.
if traefik_recipe dry-run candidate dry_run; then
	got="$(codes 40 "$T/")"
	expect "traefik dry-run: 40 requests all pass" "$(count 200 "$got")" 40
	would="$(curl -s --max-time 5 "http://127.0.0.1:$mport/metrics" | grep '^sluice_decisions_total{.*zone="candidate' |
		sed -n 's/.*outcome="dry_run_rejected"[^}]*} //p' | head -n 1)"
	expect_in "traefik dry-run: the candidate counts would-be refusals" "${would:-none}" 9 10
fi
if traefik_recipe custom-429 per-client problem; then
	codes 100 "$T/" >/dev/null
	req_refused "$T/"
	expect "traefik custom-429: a problem document with the legacy headers" "$CODE $(hdr Content-Type) $(hdr RateLimit-Limit)" "429 application/problem+json 100"
fi
e2e_stop "$traefik_pid"
e2e_verdict "recipes (${SECONDS}s)"
