#!/usr/bin/env bash
# End-to-end test of a limit shared by a real Caddy v2.11.9 (built by
# ./xcaddy.sh) and a Go service (e2e/service: the sluicehttp middleware),
# through one real Redis. Both front e2e/backend; Caddy's sluice handler
# (e2e/testdata/service.Caddyfile) is in the share group SLUICE_E2E_SHARE
# (default svc), and the service's middleware has the same limits and
# reads the same group, Redis and prefix from the same environment.
# Everything listens on free 127.0.0.1 ports and is stopped on exit.
#
#   quota     one client's 20 requests, alternating between Caddy and the
#             service: the first 10 admitted (5 by each), the next 10
#             answered 429 by both, with the same RateLimit-Policy; 40
#             requests of a new client, 8 at a time over both: exactly 10
#             admitted. Redis holds one key per client, the one both
#             write.
#   reset     the client at 429, reset through Caddy's admin API, is
#             admitted by the service.
#   inflight  max_in_flight 1 over both: while a slow request holds the
#             slot through Caddy, the service answers 429 with the
#             concurrency policy, and admits once it ended; and the other
#             way round.
#
# Run it under the e2e lock, as the other scripts:
#   flock /tmp/sluice-e2e.lock bash e2e/service.sh
# Prints PASS or FAIL lines and exits non-zero on the first failure, after
# showing the logs of the processes it started.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"

# req sends one request with curl's remaining arguments; it writes the
# answer's headers to $TMP/h and body to $TMP/b and prints its status code.
req() {
	curl -sS --max-time 10 -D "$TMP/h" -o "$TMP/b" -w '%{http_code}' "$@" || echo 000
}

# hdr prints the value of the last answer's header $1 (a name without
# regular expression characters but "-").
hdr() {
	sed -n "s/^$1:[[:space:]]*\([^\r]*\)\r\?\$/\1/Ip" "$TMP/h" | head -n 1
}

# --- start -------------------------------------------------------------------
e2e_need redis-server redis-cli
e2e_build_caddy
e2e_build e2e/backend e2e/service

redis_port="$(free_port)"
e2e_start_redis "$redis_port"
backend_port="$(free_port)"
e2e_start_backend "$backend_port"

# The same settings for both: e2e/testdata/service.Caddyfile and
# e2e/service read them from the environment.
export SLUICE_E2E_REDIS="127.0.0.1:$redis_port" SLUICE_E2E_PREFIX="sluice-e2e-service-$$:" \
	SLUICE_E2E_SHARE="${SLUICE_E2E_SHARE:-svc}" SLUICE_E2E_BACKEND="127.0.0.1:$backend_port"
caddy_port="$(free_port)"
admin_port="$(free_port)"
SLUICE_E2E_PORT="$caddy_port" SLUICE_E2E_ADMIN_PORT="$admin_port" \
	e2e_start_caddy caddy e2e/testdata/service.Caddyfile "$caddy_port"
service_port="$(free_port)"
SLUICE_E2E_SERVICE_PORT="$service_port" e2e_start "$TMP/service.log" "$TMP/service"
e2e_wait_port "$service_port" "$LAST_PID" service
caddy="http://127.0.0.1:$caddy_port"
service="http://127.0.0.1:$service_port"

# --- quota -------------------------------------------------------------------
# One client, alternating: Caddy, service, Caddy, ...
quota=10
got=()
for ((i = 0; i < 2 * quota; i++)); do
	url=$caddy side=caddy
	if ((i % 2 == 1)); then url=$service side=service; fi
	code="$(req -H 'X-E2E-Client: alternate' "$url/")"
	got+=("$side:$code")
	policy="$(hdr RateLimit-Policy)"
	[ "$policy" = '"shared";q=10;w=3600' ] ||
		fail "quota: request $((i + 1)) ($side) has RateLimit-Policy \"$policy\", want \"shared\";q=10;w=3600"
	if ((i < quota)); then
		[ "$code" = 200 ] || fail "quota: request $((i + 1)) ($side): status $code, want 200 (got ${got[*]})"
		[ "$(hdr X-RateLimit-Remaining)" = $((quota - 1 - i)) ] ||
			fail "quota: request $((i + 1)) ($side): X-RateLimit-Remaining $(hdr X-RateLimit-Remaining), want $((quota - 1 - i)) (one count over both)"
	else
		[ "$code" = 429 ] || fail "quota: request $((i + 1)) ($side): status $code, want 429 (got ${got[*]})"
		[[ "$(hdr Retry-After)" =~ ^[1-9][0-9]*$ ]] || fail "quota: the 429 of $side has Retry-After \"$(hdr Retry-After)\""
		grep -q '"error":"rate_limited".*"policy":"shared"' "$TMP/b" || fail "quota: the 429 of $side has the body $(cat "$TMP/b")"
	fi
done
pass "quota: one client alternating over Caddy and the service: ${got[*]}"

# A new client, 40 requests over both, 8 at a time.
for ((i = 0; i < 20; i++)); do
	printf '%s/\n' "$caddy" "$service"
done | xargs -P 8 -n 1 curl -sS --max-time 10 -o /dev/null -w '%{http_code}\n' -H 'X-E2E-Client: parallel' >"$TMP/codes" || true
counts="$(sort "$TMP/codes" | uniq -c | awk '{ printf "%sx%s ", $1, $2 }')"
[ "$counts" = "10x200 30x429 " ] || fail "quota: 40 requests 8 at a time over both: $counts, want 10x200 30x429"
redis-cli -p "$redis_port" --scan --pattern "$SLUICE_E2E_PREFIX*" | sort >"$TMP/keys"
[ "$(wc -l <"$TMP/keys")" -eq 2 ] && [ "$(grep -c "^${SLUICE_E2E_PREFIX}{shared:token_bucket:#[0-9a-f]\{32\}}\$" "$TMP/keys")" -eq 2 ] ||
	fail "quota: Redis keys $(tr '\n' ' ' <"$TMP/keys"), want one per client in the namespace shared:token_bucket"
pass "quota: 40 requests of a new client, 8 at a time over both: $counts; Redis holds one key per client: $(tr '\n' ' ' <"$TMP/keys")"

# --- reset -------------------------------------------------------------------
code="$(curl -sS --max-time 5 -o "$TMP/b" -w '%{http_code}' -X DELETE "http://127.0.0.1:$admin_port/sluice/zones/shared/keys/alternate")" || true
[ "$code" = 200 ] && grep -q '"deleted":true' "$TMP/b" || fail "reset: Caddy's admin DELETE: status $code: $(cat "$TMP/b")"
code="$(req -H 'X-E2E-Client: alternate' "$service/")"
[ "$code" = 200 ] && [ "$(hdr X-RateLimit-Remaining)" = $((quota - 1)) ] ||
	fail "reset: the service after Caddy's reset: status $code, X-RateLimit-Remaining $(hdr X-RateLimit-Remaining), want 200 and $((quota - 1))"
pass "reset: the client at 429, reset through Caddy's admin API, is admitted by the service with $((quota - 1)) left"

# --- inflight ----------------------------------------------------------------
# check_flight holds a slow request through $1 and checks that $2 answers
# 429 meanwhile and 200 once it ended.
check_flight() {
	local hold=$1 other=$2 key=$3 held i code
	curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -H "X-E2E-Conc: $key" "$hold/?sleep=1500ms" >"$TMP/held" &
	held=$!
	PIDS+=("$held")
	code=000
	for ((i = 0; i < 10; i++)); do
		sleep 0.1 # the held request first
		code="$(req -H "X-E2E-Conc: $key" "$other/")"
		[ "$code" = 429 ] && break
	done
	[ "$code" = 429 ] || fail "inflight: while $hold holds the slot, $other answered $code, want 429"
	[ "$(hdr RateLimit-Policy)" = '"conc";q=1;qu="concurrent-requests"' ] ||
		fail "inflight: the 429 of $other has RateLimit-Policy \"$(hdr RateLimit-Policy)\""
	wait "$held" && [ "$(cat "$TMP/held")" = 200 ] || fail "inflight: the held request through $hold: status $(cat "$TMP/held"), want 200"
	code="$(req -H "X-E2E-Conc: $key" "$other/")"
	[ "$code" = 200 ] || fail "inflight: once the request through $hold ended, $other answered $code, want 200"
}
check_flight "$caddy" "$service" c1
check_flight "$service" "$caddy" c2
pass "inflight: max_in_flight 1 over both: a slow request through either takes the slot from the other, which admits once it ended"
