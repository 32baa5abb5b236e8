#!/usr/bin/env bash
# Shaping with clients that hang up, in a real Caddy v2.11.9 (built by
# ./xcaddy.sh, or the binary $SLUICE_E2E_CADDY names), on memory and on a
# redis-server (issue 20, item 2). Four endpoints of one Caddy
# (e2e/testdata/shaping.Caddyfile) reach e2e/backend, which records when
# each request arrives: a leaky_bucket 10/1s with burst 10, and a
# token_bucket 10/1s with burst 1 and max_delay 1s, each on memory and on
# Redis. Per endpoint, e2e/shaping fills the queue (10 requests, 11 for the
# token bucket, 10 ms apart, on connections opened beforehand), hangs up
# four of them while they are held (the 3rd to the 6th, at 150 ms), then
# sends a request every 20 ms until 2.5 s, which keeps the queue full. The
# upstream must see at most 10 requests in any 900 ms: the period less
# 100 ms (one request's interval) of slack for the scheduling jitter of a
# shared machine, in which the leaky bucket admits at most its quota and
# the token bucket B + r·T = 1 + 9 (see e2e/shaping). A refund that moved
# the queue's end back under requests still held would let 13 or more
# through. Everything listens on 127.0.0.1 and is stopped on exit; about
# 15 s with ./caddy built.
#
# Prints PASS or FAIL lines and exits non-zero if a check failed, after
# showing the logs of the servers it started.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"

e2e_need redis-server
if [ -n "${SLUICE_E2E_CADDY:-}" ]; then
	CADDY=$SLUICE_E2E_CADDY
else
	e2e_build_caddy
fi
e2e_build e2e/backend e2e/shaping

backend_port="$(free_port)"
e2e_start_backend "$backend_port"
redis_port="$(free_port)"
e2e_start_redis "$redis_port"

# One endpoint per limit and store, /count/<limit>-<store>.
port="$(free_port)"
SLUICE_E2E_PORT="$port" SLUICE_E2E_BACKEND="127.0.0.1:$backend_port" SLUICE_E2E_REDIS="127.0.0.1:$redis_port" \
	SLUICE_E2E_PREFIX="sluice-e2e-shaping-$$:" \
	e2e_start_caddy caddy e2e/testdata/shaping.Caddyfile "$port"

failed=0
for store in memory redis; do
	for limit in leaky token; do
		first=10
		[ "$limit" = token ] && first=11 # the burst of 1 and 10 waiting up to max_delay
		path="/count/$limit-$store"
		"$TMP/shaping" -name "$limit-$store" -url "http://127.0.0.1:$port$path" -warm "http://127.0.0.1:$port/" \
			-counts "http://127.0.0.1:$backend_port/_counts?path=$path" -first "$first" -most 10 |
			sed 's/^\(PASS\|FAIL\): /\1 e2e\/shaping.sh: /' || failed=1
	done
done
[ "$failed" = 0 ] || fail "a shaping limit let more than its rate through"
