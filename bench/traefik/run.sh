#!/usr/bin/env bash
# Throughput of the real Traefik v3.6.12 in front of a fast loopback backend
# (e2e/backend) through (a) no middleware, (b) the built-in rateLimit and
# (c) the sluice plugin under Yaegi, the two limiters with limits the load
# never reaches (average and burst 100000000), (d) a plugin that only sets
# one header: what any Yaegi plugin costs, and (e) bench/testdata/floor, a
# bare token bucket that writes sluice's five headers and has none of its
# guarantees: about the least such a limiter costs under Yaegi. All five
# run in one Traefik process, and rounds interleave a b c d e so that drift
# on a shared machine hits all of them.
#
# With REDIS=1, (b), (c) and (e) decide in a redis-server on loopback
# instead of in memory: the built-in rateLimit with redis.endpoints, sluice
# with redis.endpoints, and bench/testdata/redisfloor, a bare token bucket
# that sends one EVALSHA per request over a pooled connection and writes
# the same five headers: about the least a Redis limiter costs under Yaegi;
# and a sixth variant, (f) sluice on Redis with lease 1000, whose one key
# (wrk's one address) is what a global limit is: decided from leases, a
# script call per lease instead of per request.
#
#   bench/traefik/run.sh                  # 3 rounds of wrk -t2 -c32 -d5s
#   ROUNDS=5 DURATION=10s bench/traefik/run.sh
#   REDIS=1 ROUNDS=8 bench/traefik/run.sh
#   PROFILE="sluice builtin" bench/traefik/run.sh
#
# With PROFILE set, it instead takes a 15 s CPU profile of Traefik
# (/debug/pprof on its own loopback entry point) under wrk for each
# variant named (none, builtin, sluice, trivial, floor, builtin-redis,
# sluice-redis, redisfloor, sluice-lease), writes it to
# $PROFILE_DIR/NAME.pb.gz (default /tmp/sluice-profiles) beside its
# req/s, and prints the Traefik CPU per request, the middleware's own
# (its ServeHTTP without the proxying after it) and the garbage
# collector's.
#
# Prints req/s per round and variant, the medians of req/s and of the p99
# latencies, and the ratios c/b (target ≥ 0.9, p99 ≤ 1.2×), c/a, d/b and
# e/b. Everything listens on 127.0.0.1; the backend, wrk and Traefik share
# the machine's cores, so absolute numbers are low and only the ratios mean
# much. Takes about 1.5 minutes with the defaults.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../../e2e/testdata/lib.sh"
source e2e/testdata/traefik/lib.sh
rounds="${ROUNDS:-3}"
duration="${DURATION:-5s}"
threads="${THREADS:-2}"
conns="${CONNECTIONS:-32}"

if ! command -v wrk >/dev/null 2>&1; then
	sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	"${sudo[@]}" apt-get install -y -qq wrk >/dev/null
fi
e2e_need go curl wrk redis-server

tl_traefik
e2e_build e2e/backend
backend_port="$(free_port)"
e2e_start_backend "$backend_port"

redis_port="$(free_port)"
e2e_start_redis "$redis_port"

run="$TMP/run"
tl_plugin_tree "$run"
tl_bench_tree "$run" trivial
tl_bench_tree "$run" floor
tl_bench_tree "$run" redisfloor
port="$(free_port)"
tl_render "$REPO/bench/traefik/dynamic.yml" "$run/dynamic.yml" "BACKEND=127.0.0.1:$backend_port" "REDIS=127.0.0.1:$redis_port"
tl_static "$run" "$port"
printf '    trivial:\n      moduleName: example.com/trivial\n    floor:\n      moduleName: example.com/floor\n    redisfloor:\n      moduleName: example.com/redisfloor\n' >>"$run/static.yml"
if [ -n "${PROFILE:-}" ]; then
	api_port="$(free_port)"
	# The API's debug endpoints on an entry point of their own.
	sed -i "s|^entryPoints:|api:\n  debug: true\n  insecure: true\nentryPoints:\n  traefik:\n    address: \"127.0.0.1:$api_port\"|" "$run/static.yml"
fi
LOGS+=("$run/static.yml.out")
tl_up "$run" "$port" /sluice
base="http://127.0.0.1:$port"
# The variants (a) to (e), by path.
variants=(none builtin sluice trivial floor)
store=memory
if [ "${REDIS:-}" = 1 ]; then
	variants=(none builtin-redis sluice-redis trivial redisfloor sluice-lease)
	store="Redis at 127.0.0.1:$redis_port"
fi
for v in "${variants[@]}"; do
	[ "$(tl_status "$base/$v")" = 200 ] || { echo "bench: GET /$v is not 200"; exit 1; }
done

if [ -n "${PROFILE:-}" ]; then
	out="${PROFILE_DIR:-/tmp/sluice-profiles}"
	mkdir -p "$out"
	for v in $PROFILE; do
		wrk -t"$threads" -c"$conns" -d20s "$base/$v" >"$out/$v.wrk.txt" 2>&1 &
		wpid=$!
		sleep 3
		curl -fsS -o "$out/$v.pb.gz" "http://127.0.0.1:$api_port/debug/pprof/profile?seconds=15"
		wait "$wpid"
		rps="$(awk '/^Requests\/sec:/ { print $2 }' "$out/$v.wrk.txt")"
		go tool pprof -top -cum -nodecount=100000 "$out/$v.pb.gz" 2>/dev/null | awk -v v="$v" -v rps="$rps" '
			/Total samples =/ { for (i = 1; i <= NF; i++) if ($i == "=") total = $(i + 1) + 0 }
			function sec(x) { return (x ~ /ms$/) ? x / 1000 : x + 0 }
			$NF ~ /genFunctionWrapper\.func1\.1$/ { plugin = sec($4) }
			$NF ~ /ratelimiter\.\(\*rateLimiter\)\.ServeHTTP$/ { plugin = sec($4) }
			$NF ~ /wrr\.\(\*Balancer\)\.ServeHTTP$/ { next_ = sec($4) }
			$NF == "runtime.gcBgMarkWorker" { gc = sec($4) }
			END {
				n = rps * 15
				own = (plugin > 0) ? sprintf("%.1f", (plugin - next_) * 1e6 / n) : "-"
				printf "profiled %-8s %9.0f req/s; Traefik CPU per request %6.1f µs, middleware alone %5s µs, background GC %5.1f µs\n",
					v, rps, total * 1e6 / n, own, gc * 1e6 / n
			}'
	done
	echo "profiles in $out (go tool pprof -top -cum $out/NAME.pb.gz)"
	exit 0
fi

# load PATH DURATION prints the req/s and the p99 latency in ms of one wrk
# run, failing on any error or non-2xx answer.
load() {
	local out rps p99
	out="$(wrk --latency -t"$threads" -c"$conns" -d"$2" "$base/$1" 2>&1)"
	rps="$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")"
	p99="$(awk '$1 == "99%" { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
		print (u == "us") ? v / 1000 : (u == "s") ? v * 1000 : v }' <<<"$out")"
	if [ -z "$rps" ] || [ -z "$p99" ] || grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
		echo "bench: wrk on /$1 failed or saw errors:" >&2
		echo "$out" >&2
		return 1
	fi
	echo "$rps $p99"
}

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "bench: Traefik v3.6.12, wrk -t$threads -c$conns -d$duration, $rounds rounds of a b c d e ($(nproc) cores), limiters in $store"
declare -A all=() lat=()
for v in "${variants[@]}"; do
	load "$v" 1s >/dev/null # warm-up: connections, Yaegi's first calls
	all[$v]=""
	lat[$v]=""
done
heads=("(a) none" "(b) rateLimit" "(c) sluice" "(d) one header" "(e) floor" "(f) lease")
printf '%-6s' round
printf ' %14s' "${heads[@]:0:${#variants[@]}}"
printf ' %8s\n' "(c)/(b)"
ratios=""
for r in $(seq 1 "$rounds"); do
	row=()
	for v in "${variants[@]}"; do
		read -r rps p99 < <(load "$v" "$duration")
		[ -n "$rps" ] || exit 1
		all[$v]+="$rps "
		lat[$v]+="$p99 "
		row+=("$rps")
	done
	ratio="$(awk -v b="${row[1]}" -v c="${row[2]}" 'BEGIN { printf "%.3f", c / b }')"
	ratios+="$ratio "
	printf '%-6s' "$r"
	printf ' %14s' "${row[@]}"
	printf ' %8s\n' "$ratio"
done
ma="$(median <<<"${all[${variants[0]}]}")"
mb="$(median <<<"${all[${variants[1]}]}")"
mc="$(median <<<"${all[${variants[2]}]}")"
md="$(median <<<"${all[${variants[3]}]}")"
me="$(median <<<"${all[${variants[4]}]}")"
printf '%-6s %14.0f %14.0f %14.0f %14.0f %14.0f' median "$ma" "$mb" "$mc" "$md" "$me"
mf=""
if [ "${#variants[@]}" -gt 5 ]; then
	mf="$(median <<<"${all[${variants[5]}]}")"
	printf ' %14.0f' "$mf"
fi
echo
la="$(median <<<"${lat[${variants[0]}]}")" lb="$(median <<<"${lat[${variants[1]}]}")"
lc="$(median <<<"${lat[${variants[2]}]}")" ld="$(median <<<"${lat[${variants[3]}]}")" le="$(median <<<"${lat[${variants[4]}]}")"
printf '%-6s %14s %14s %14s %14s %14s\n' "p99 ms" "$la" "$lb" "$lc" "$ld" "$le"
lo="$(tr ' ' '\n' <<<"$ratios" | sed '/^$/d' | sort -g | head -n 1)"
hi="$(tr ' ' '\n' <<<"$ratios" | sed '/^$/d' | sort -g | tail -n 1)"
awk -v a="$ma" -v b="$mb" -v c="$mc" -v d="$md" -v e="$me" -v le="$le" -v lo="$lo" -v hi="$hi" -v lb="$lb" -v lc="$lc" 'BEGIN {
	printf "ratio (c)/(b) sluice/rateLimit: %.3f (target >= 0.9: %s), rounds %.3f to %.3f\n", c / b, (c / b >= 0.9) ? "met" : "NOT met", lo, hi
	printf "p99 (c)/(b) sluice/rateLimit:   %.3f (target <= 1.2: %s)\n", lc / lb, (lc / lb <= 1.2) ? "met" : "NOT met"
	printf "ratio (c)/(a) sluice/none:      %.3f\n", c / a
	printf "ratio (b)/(a) rateLimit/none:   %.3f\n", b / a
	printf "ratio (d)/(b) one header/rateLimit: %.3f (any Yaegi plugin)\n", d / b
	printf "ratio (c)/(d) sluice/one header:    %.3f\n", c / d
	printf "ratio (e)/(b) floor/rateLimit:      %.3f, p99 %.3f (a bare token bucket with the five headers)\n", e / b, le / lb
	printf "ratio (c)/(e) sluice/floor:         %.3f\n", c / e
}'
if [ -n "$mf" ]; then
	awk -v b="$mb" -v c="$mc" -v f="$mf" 'BEGIN {
	printf "ratio (f)/(b) lease/rateLimit:      %.3f\n", f / b
	printf "ratio (f)/(c) lease/sluice:         %.3f\n", f / c
}'
fi
