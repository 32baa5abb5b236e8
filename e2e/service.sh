#!/usr/bin/env bash
# End-to-end test of a limit shared by a real Caddy v2.11.9 (built by
# ./xcaddy.sh) and a Go service (e2e/service: the sluicehttp middleware),
# through one real Redis. Both front e2e/backend; Caddy's sluice handler is
# in the share group svc (e2e/testdata/service.Caddyfile) and the service's
# middleware names the same group, limits and Redis prefix. Everything
# listens on free 127.0.0.1 ports and is stopped on exit.
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

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi

tmp="$(mktemp -d)"
# Caddy's autosaved config and data go here, not to $HOME.
export XDG_CONFIG_HOME="$tmp/config" XDG_DATA_HOME="$tmp/data"
pids=()
logs=()

# stop ends the processes this script started: SIGTERM, then SIGKILL for
# any still running 5 seconds later.
stop() {
	local pid i
	for pid in "$@"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "$@"; do
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
}
cleanup() {
	[ "${#pids[@]}" -eq 0 ] || stop "${pids[@]}"
	rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
	local f
	echo "FAIL e2e/service.sh: $*"
	for f in "${logs[@]}"; do
		echo "--- last lines of $(basename "$f")"
		tail -n 20 "$f" || true
	done
	exit 1
}
pass() { echo "PASS e2e/service.sh: $*"; }

# port_open and free_port.
source scripts/ports.sh

# wait_port waits up to 20 seconds for the process pid to listen on port,
# without sending it a request (which would spend quota).
wait_port() {
	local port=$1 pid=$2 name=$3 i
	for ((i = 0; i < 200; i++)); do
		kill -0 "$pid" 2>/dev/null || fail "$name exited before listening on $port"
		port_open "$port" && return 0
		sleep 0.1
	done
	fail "$name not listening on 127.0.0.1:$port after 20s"
}

# req sends one request with curl's remaining arguments; it writes the
# answer's headers to $tmp/h and body to $tmp/b and prints its status code.
req() {
	curl -sS --max-time 10 -D "$tmp/h" -o "$tmp/b" -w '%{http_code}' "$@" || echo 000
}

# hdr prints the value of the last answer's header $1.
hdr() {
	awk -v n="$1" '{ sub(/\r$/, "") } index(tolower($0), tolower(n) ":") == 1 { sub(/^[^:]*:[ \t]*/, ""); print; exit }' "$tmp/h"
}

# --- start -------------------------------------------------------------------
command -v redis-server >/dev/null 2>&1 || fail "redis-server not found (scripts/deps.sh installs it)"
command -v redis-cli >/dev/null 2>&1 || fail "redis-cli not found (scripts/deps.sh installs it)"
timeout 1800 ./xcaddy.sh build || fail "./xcaddy.sh build failed"
go build -o "$tmp/backend" ./e2e/backend || fail "building e2e/backend failed"
go build -o "$tmp/service" ./e2e/service || fail "building e2e/service failed"

redis_port="$(free_port)"
logs+=("$tmp/redis.log")
redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
	--logfile "$tmp/redis.log" &
redis_pid=$!
pids+=("$redis_pid")
wait_port "$redis_port" "$redis_pid" redis-server

backend_port="$(free_port)"
logs+=("$tmp/backend.log")
"$tmp/backend" -addr "127.0.0.1:$backend_port" >"$tmp/backend.log" 2>&1 &
backend_pid=$!
pids+=("$backend_pid")
wait_port "$backend_port" "$backend_pid" backend

prefix="sluice-e2e-service-$$:"
caddy_port="$(free_port)"
admin_port="$(free_port)"
logs+=("$tmp/caddy.log")
SLUICE_E2E_PORT="$caddy_port" SLUICE_E2E_ADMIN_PORT="$admin_port" SLUICE_E2E_REDIS="127.0.0.1:$redis_port" \
	SLUICE_E2E_PREFIX="$prefix" SLUICE_E2E_BACKEND="127.0.0.1:$backend_port" \
	./caddy run --config e2e/testdata/service.Caddyfile --adapter caddyfile >"$tmp/caddy.log" 2>&1 &
caddy_pid=$!
pids+=("$caddy_pid")

service_port="$(free_port)"
logs+=("$tmp/service.log")
"$tmp/service" -addr "127.0.0.1:$service_port" -redis "127.0.0.1:$redis_port" -prefix "$prefix" \
	-share svc -backend "127.0.0.1:$backend_port" >"$tmp/service.log" 2>&1 &
service_pid=$!
pids+=("$service_pid")
wait_port "$caddy_port" "$caddy_pid" caddy
wait_port "$service_port" "$service_pid" service
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
		grep -q '"error":"rate_limited".*"policy":"shared"' "$tmp/b" || fail "quota: the 429 of $side has the body $(cat "$tmp/b")"
	fi
done
pass "quota: one client alternating over Caddy and the service: ${got[*]}"

# A new client, 40 requests over both, 8 at a time.
total=40
for ((i = 0; i < total; i++)); do
	if ((i % 2 == 0)); then echo "$caddy/"; else echo "$service/"; fi
done >"$tmp/urls"
xargs -P 8 -n 1 curl -sS --max-time 10 -o /dev/null -w '%{http_code}\n' -H 'X-E2E-Client: parallel' \
	<"$tmp/urls" >"$tmp/codes" || true
admitted="$(grep -cx 200 "$tmp/codes" || true)"
limited="$(grep -cx 429 "$tmp/codes" || true)"
if [ "$admitted" -ne "$quota" ] || [ "$limited" -ne $((total - quota)) ]; then
	fail "quota: $total requests 8 at a time over both: $admitted admitted and $limited answered 429, want $quota and $((total - quota)) ($(sort "$tmp/codes" | uniq -c | tr '\n' ' '))"
fi
redis-cli -p "$redis_port" --scan --pattern "$prefix*" | sort >"$tmp/keys"
[ "$(wc -l <"$tmp/keys")" -eq 2 ] && [ "$(grep -c "^${prefix}{shared:token_bucket:#[0-9a-f]\{32\}}\$" "$tmp/keys")" -eq 2 ] ||
	fail "quota: Redis keys $(tr '\n' ' ' <"$tmp/keys"), want one per client in the namespace shared:token_bucket"
pass "quota: $total requests of a new client, 8 at a time over both: $admitted admitted, $limited answered 429; Redis holds one key per client: $(tr '\n' ' ' <"$tmp/keys")"

# --- reset -------------------------------------------------------------------
code="$(curl -sS --max-time 5 -o "$tmp/b" -w '%{http_code}' -X DELETE "http://127.0.0.1:$admin_port/sluice/zones/shared/keys/alternate")" || true
[ "$code" = 200 ] && grep -q '"deleted":true' "$tmp/b" || fail "reset: Caddy's admin DELETE: status $code: $(cat "$tmp/b")"
code="$(req -H 'X-E2E-Client: alternate' "$service/")"
[ "$code" = 200 ] && [ "$(hdr X-RateLimit-Remaining)" = $((quota - 1)) ] ||
	fail "reset: the service after Caddy's reset: status $code, X-RateLimit-Remaining $(hdr X-RateLimit-Remaining), want 200 and $((quota - 1))"
pass "reset: the client at 429, reset through Caddy's admin API, is admitted by the service with $((quota - 1)) left"

# --- inflight ----------------------------------------------------------------
# check_flight holds a slow request through $1 and checks that $2 answers
# 429 meanwhile and 200 once it ended.
check_flight() {
	local hold=$1 other=$2 key=$3 held i code
	curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -H "X-E2E-Conc: $key" "$hold/?sleep=1500ms" >"$tmp/held" &
	held=$!
	pids+=("$held")
	code=000
	for ((i = 0; i < 10; i++)); do
		sleep 0.1 # the held request first
		code="$(req -H "X-E2E-Conc: $key" "$other/")"
		[ "$code" = 429 ] && break
	done
	[ "$code" = 429 ] || fail "inflight: while $hold holds the slot, $other answered $code, want 429"
	[ "$(hdr RateLimit-Policy)" = '"conc";q=1;qu="concurrent-requests"' ] ||
		fail "inflight: the 429 of $other has RateLimit-Policy \"$(hdr RateLimit-Policy)\""
	wait "$held" && [ "$(cat "$tmp/held")" = 200 ] || fail "inflight: the held request through $hold: status $(cat "$tmp/held"), want 200"
	code="$(req -H "X-E2E-Conc: $key" "$other/")"
	[ "$code" = 200 ] || fail "inflight: once the request through $hold ended, $other answered $code, want 200"
}
check_flight "$caddy" "$service" c1
check_flight "$service" "$caddy" c2
pass "inflight: max_in_flight 1 over both: a slow request through either takes the slot from the other, which admits once it ended"
