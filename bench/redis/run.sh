#!/usr/bin/env bash
# Measures sluice's RedisStore against redis-benchmark sending the very same
# EVALSHA (same script, key and arguments) to the same server, at 1, 8 and
# 64 concurrent callers, and prints decisions per second and their ratio
# store/redis-benchmark. The store is measured twice: with one connection
# per caller, like redis-benchmark, so that every decision is one round
# trip ("store": what the Go side, core/resp, argument building and reply
# decoding, costs on top of the script itself), and with the callers
# sharing POOL connections (default 4), where the decisions that find them
# all busy are written together ("batched", core/resp's natural batching).
# Each rate is the best of ROUNDS measurements, taken alternately, as other
# load on the machine only ever lowers them.
#
# It also prints the 99th percentile of one decision's latency through the
# store, both ways, beside those of redis-benchmark's EVALSHA and PING at
# the same number of callers, and that of a PING sent on a connection of
# its own by the store's process during the same measurement (each p99 the
# lowest of its rounds). The ratios of a decision's p99 to that PING's, one
# connection per caller and batched, are what a decision adds to the
# server's own round trip under the same load (target: at most 1.5). That
# PING is one serial caller of the same process, so its p99 holds the
# process's own scheduling delays too, which a decision's includes; the
# last column is the batched p99 against redis-benchmark's PING, sent
# alone, without the decisions' load or the process.
#
#   bench/redis/run.sh                     # 3 rounds of 3 s per measurement
#   DURATION=5s ROUNDS=1 CONCURRENCY="1 16" POOL=2 PORT=16400 bench/redis/run.sh
#
# Needs redis-server, redis-cli and redis-benchmark on PATH. The server runs
# on 127.0.0.1:$PORT without persistence and is stopped on exit.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../../e2e/testdata/lib.sh"

port="${PORT:-16391}"
duration="${DURATION:-3s}"
concurrency="${CONCURRENCY:-1 8 64}"
pool="${POOL:-4}"
rounds="${ROUNDS:-3}"
seconds="${duration%s}"

e2e_need redis-server redis-cli redis-benchmark
e2e_start_redis "$port"
# $TMP/redis, the store's side of the measurement.
e2e_build bench/redis
# One decision through the store writes the script and its EVALSHA arguments.
"$TMP/redis" -addr "127.0.0.1:$port" -dump "$TMP" -c 1 -d 10ms >/dev/null
mapfile -t args <"$TMP/evalsha.args"
sha="$(redis-cli -p "$port" -x SCRIPT LOAD <"$TMP/script.lua")"
if [ "$sha" != "${args[0]}" ]; then
	echo "SCRIPT LOAD returned $sha, the store sends ${args[0]}" >&2
	exit 1
fi
redis-server --version
echo "EVALSHA ${args[*]:0:3} ... ($(( ${#args[@]} - 3 )) arguments)"

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); best of $rounds rounds of $duration, alternating"
printf '\n%8s %14s %14s %22s %10s %10s %10s %12s %12s %12s %12s %12s %12s %12s %12s\n' callers "store dec/s" "batched dec/s" "redis-benchmark req/s" \
	"store/rb" "batched/rb" "store p99" "batched p99" "PING p99 (s)" "PING p99 (b)" "EVALSHA p99" "PING p99" "store/PING" "batched/PING" "batched/rb PING"
# low A B prints the lower of A and B, A empty meaning none yet.
low() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b < a) ? b : a }'; }
for c in $concurrency; do
	best_store=0 best_batched=0 best_rb=0 p99_store="" p99_batched="" p99_rb="" p99_ping="" p99_sping="" p99_bping=""
	for r in $(seq "$rounds"); do
		read -r _ store p99 sping < <("$TMP/redis" -addr "127.0.0.1:$port" -c "$c" -d "$duration")
		read -r _ batched bp99 bping < <("$TMP/redis" -addr "127.0.0.1:$port" -c "$c" -d "$duration" -pool "$pool")
		n="$(awk -v r="$store" -v s="$seconds" 'BEGIN { n = int(r * s); if (n < 10000) n = 10000; print n }')"
		# The rate and the p99, from redis-benchmark's CSV line.
		read -r rb rb99 < <(redis-benchmark -p "$port" -c "$c" -n "$n" --csv EVALSHA "${args[@]}" |
			awk -F'"' 'NR == 2 { print $4, $14 }')
		read -r _ ping99 < <(redis-benchmark -p "$port" -c "$c" -n "$n" --csv PING |
			awk -F'"' 'NR == 2 { print $4, $14 }')
		best_store="$(awk -v a="$best_store" -v b="$store" 'BEGIN { print (b > a ? b : a) }')"
		best_batched="$(awk -v a="$best_batched" -v b="$batched" 'BEGIN { print (b > a ? b : a) }')"
		best_rb="$(awk -v a="$best_rb" -v b="$rb" 'BEGIN { print (b > a ? b : a) }')"
		p99_store="$(low "$p99_store" "$p99")"
		p99_batched="$(low "$p99_batched" "$bp99")"
		p99_rb="$(low "$p99_rb" "$rb99")"
		p99_ping="$(low "$p99_ping" "$ping99")"
		p99_sping="$(low "$p99_sping" "$sping")"
		p99_bping="$(low "$p99_bping" "$bping")"
	done
	awk -v c="$c" -v s="$best_store" -v t="$best_batched" -v b="$best_rb" -v ps="$p99_store" -v pt="$p99_batched" \
		-v pr="$p99_rb" -v pp="$p99_ping" -v qs="$p99_sping" -v qb="$p99_bping" \
		'BEGIN { printf "%8d %14.0f %14.0f %22.0f %10.2f %10.2f %10.3f %12.3f %12.3f %12.3f %12.3f %12.3f %12.2f %12.2f %12.2f\n",
			c, s, t, b, s / b, t / b, ps, pt, qs, qb, pr, pp, ps / qs, pt / qb, pt / pp }'
done
