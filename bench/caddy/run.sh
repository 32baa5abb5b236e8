#!/usr/bin/env bash
# Measures what sluice costs Caddy: the throughput of Caddy answering "ok"
# with sluice (in-memory store, a limit never reached; sluice.Caddyfile)
# against the same Caddy without it (plain.Caddyfile); beside them, the
# floor of any limiter that answers with the same five rate-limit headers,
# Caddy's own header handler writing them (headers.Caddyfile), and sluice
# deciding without writing them (headers off, quiet.Caddyfile). The four
# run at once, as processes of the ./caddy that ./xcaddy.sh builds, on
# free loopback ports, and wrk loads them in turn, ROUNDS times each,
# interleaved (plain, headers, quiet, sluice, then in reverse, ...)
# after a short warm-up of each, so that drifts in the machine's load fall
# on all alike. Prints, for every round and as each side's median, the
# requests per second and the microseconds of Caddy CPU time per request
# (from /proc), then the ratios of the median throughputs to plain's
# (sluice's target is at least 0.97) and of the CPU costs, plain / side,
# which other processes on the machine disturb much less than throughput;
# then sluice against the floor. Last, it prints each side's resident
# memory after the rounds, and sluice's above plain's.
#
# With KEYS set (KEYS=100000), every request carries an X-Bench-Key header,
# one of KEYS keys drawn at random by keys.lua, on which sluice keys its
# zone instead of the client's address: the many-keys case, whose target
# for resident memory (at most 10 MB above plain) it checks at 100,000
# keys. Every side's requests are drawn the same way. wrk's script costs
# CPU on the same cores, so throughputs compare within such a run only.
#
# With SIDES set, it loads those sides instead of the four, each a
# <side>.Caddyfile here, plain and sluice always among them: the option
# sides (counted, penalty, costed) are sluice's zone with one option
# more, and each is printed against plain and against sluice, what the
# option adds to a limit without it. SIDES="counted penalty costed" runs
# plain, sluice and the three.
#
# Environment: ROUNDS (default 5), DURATION of each round in seconds
# (default 5), THREADS (default 2) and CONNECTIONS (default 32) of wrk, KEYS,
# SIDES.
# With the defaults it takes about two minutes plus the build. It
# fails if a server does not come up, if sluice or the floor answers
# without the five rate-limit headers (or quiet with any), or if wrk saw an
# error or an answer other than 2xx.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../e2e/testdata/lib.sh"

rounds="${ROUNDS:-5}"
duration="${DURATION:-5}"
threads="${THREADS:-2}"
connections="${CONNECTIONS:-32}"

log() { printf 'bench/caddy: %s\n' "$*" >&2; }

if ! command -v wrk >/dev/null 2>&1; then
	log "installing wrk"
	sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq wrk >/dev/null ||
		die "wrk is missing and could not be installed"
fi

e2e_build_caddy

# The key of sluice's zone (sluice.Caddyfile, quiet.Caddyfile) and what
# wrk adds to its requests.
script=()
export SLUICE_BENCH_KEY='{client_ip}'
if [ -n "${KEYS:-}" ]; then
	[[ "$KEYS" =~ ^[1-9][0-9]*$ ]] || die "KEYS must be a positive number, not $KEYS"
	export SLUICE_BENCH_KEY='{http.request.header.X-Bench-Key}'
	script=(-s "$here/keys.lua")
fi

declare -A port caddy_pid
sides="plain headers quiet sluice"
if [ -n "${SIDES:-}" ]; then
	sides="plain sluice"
	for side in $SIDES; do
		[ -f "$here/$side.Caddyfile" ] || die "no side $side: $here/$side.Caddyfile is missing"
		[[ " $sides " == *" $side "* ]] || sides+=" $side"
	done
fi
for side in $sides; do
	port[$side]="$(free_port)"
	SLUICE_BENCH_PORT="${port[$side]}" e2e_start_caddy "$side" "$here/$side.Caddyfile" "${port[$side]}"
	caddy_pid[$side]=$CADDY_PID
done
# sluice and the floor answer with the five headers, quiet with none (the
# header is the key of a zone keyed on it, with KEYS).
for side in $sides; do
	head="$(curl -sS --max-time 5 -D - -o /dev/null -H "X-Bench-Key: 1" "http://127.0.0.1:${port[$side]}/")" ||
		die "the $side side does not answer"
	n="$(grep -ciE '^(RateLimit|RateLimit-Policy|X-RateLimit-(Limit|Remaining|Reset)):' <<<"$head" || true)"
	want=5
	[ "$side" = plain ] || [ "$side" = quiet ] && want=0
	[ "$n" -eq "$want" ] || die "the $side side answers with $n rate-limit headers, not $want"
done

# cpu_ticks prints the CPU time, user and system, that process $1 has used,
# in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
tick_us=$((1000000 / $(getconf CLK_TCK)))

# load runs wrk against side $1 for $2 seconds and sets rps to the requests
# per second it measured and cpu to the microseconds of Caddy CPU time per
# request, failing on errors or non-2xx answers.
rps=0 cpu=0
load() {
	local out before after res
	before="$(cpu_ticks "${caddy_pid[$1]}")"
	out="$(timeout $(($2 + 30)) wrk -t"$threads" -c"$connections" -d"$2s" "${script[@]}" "http://127.0.0.1:${port[$1]}/")" ||
		die "wrk failed against $1"
	after="$(cpu_ticks "${caddy_pid[$1]}")"
	if grep -Eq 'Non-2xx|Socket errors' <<<"$out"; then
		die "wrk against $1 saw errors: $(grep -E 'Non-2xx|Socket errors' <<<"$out")"
	fi
	res="$(awk -v ticks=$((after - before)) -v us="$tick_us" '
		/ requests in / { n = $1 }
		/^Requests\/sec:/ { rps = $2 }
		END { if (n > 0 && rps > 0) printf "%s %.2f\n", rps, ticks * us / n; else exit 1 }' <<<"$out")" ||
		die "no throughput in wrk's output against $1: $out"
	read -r rps cpu <<<"$res"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

log "wrk -t$threads -c$connections -d${duration}s, $rounds rounds each side, interleaved${KEYS:+, $KEYS keys}"
for side in $sides; do
	load "$side" 1
	: >"$TMP/$side.rps" && : >"$TMP/$side.cpu"
done
for ((r = 1; r <= rounds; r++)); do
	order="$sides"
	((r % 2)) || order="$(tr ' ' '\n' <<<"$sides" | tac | tr '\n' ' ')"
	for side in $order; do
		load "$side" "$duration"
		echo "$rps" >>"$TMP/$side.rps"
		echo "$cpu" >>"$TMP/$side.cpu"
		printf 'round %d  %-7s  %8.0f req/s  %6.1f us CPU/req\n' "$r" "$side" "$rps" "$cpu"
	done
done
for side in $sides; do
	printf 'median    %-7s  %8.0f req/s  %6.1f us CPU/req\n' "$side" \
		"$(median <"$TMP/$side.rps")" "$(median <"$TMP/$side.cpu")"
done
if [ -z "${SIDES:-}" ]; then
	awk -v s="$(median <"$TMP/sluice.rps")" -v p="$(median <"$TMP/plain.rps")" -v h="$(median <"$TMP/headers.rps")" \
		-v q="$(median <"$TMP/quiet.rps")" -v qc="$(median <"$TMP/quiet.cpu")" \
		-v sc="$(median <"$TMP/sluice.cpu")" -v pc="$(median <"$TMP/plain.cpu")" -v hc="$(median <"$TMP/headers.cpu")" 'BEGIN {
		r = s / p
		printf "ratio     sluice/plain throughput %.3f (target >= 0.97: %s)\n", r, (r >= 0.97 ? "met" : "NOT met")
		printf "ratio     plain/sluice CPU per request %.3f (less sensitive to other load)\n", pc / sc
		printf "ratio     headers/plain throughput %.3f, plain/headers CPU per request %.3f (the floor: five headers written)\n", h / p, pc / hc
		printf "ratio     sluice/headers throughput %.3f, headers/sluice CPU per request %.3f (what deciding adds to the floor)\n", s / h, hc / sc
		printf "ratio     quiet/plain throughput %.3f, plain/quiet CPU per request %.3f (deciding, headers off)\n", q / p, pc / qc
	}'
else
	for side in $sides; do
		[ "$side" = plain ] || [ "$side" = sluice ] && continue
		awk -v side="$side" -v o="$(median <"$TMP/$side.rps")" -v oc="$(median <"$TMP/$side.cpu")" \
			-v s="$(median <"$TMP/sluice.rps")" -v sc="$(median <"$TMP/sluice.cpu")" \
			-v p="$(median <"$TMP/plain.rps")" -v pc="$(median <"$TMP/plain.cpu")" 'BEGIN {
			printf "ratio     %s/plain throughput %.3f, plain/%s CPU per request %.3f\n", side, o / p, side, pc / oc
			printf "ratio     %s/sluice throughput %.3f, sluice/%s CPU per request %.3f (%+.1f us: what the option adds)\n", side, o / s, side, sc / oc, oc - sc
		}'
	done
	awk -v s="$(median <"$TMP/sluice.rps")" -v p="$(median <"$TMP/plain.rps")" \
		-v sc="$(median <"$TMP/sluice.cpu")" -v pc="$(median <"$TMP/plain.cpu")" 'BEGIN {
		printf "ratio     sluice/plain throughput %.3f, plain/sluice CPU per request %.3f\n", s / p, pc / sc
	}'
fi
# rss prints the resident memory of process $1 in MB.
rss() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
for side in $sides; do
	printf 'rss       %-7s  %6s MB\n' "$side" "$(rss "${caddy_pid[$side]}")"
done
# The target, with KEYS=100000: at most 10 MB above plain.
awk -v s="$(rss "${caddy_pid[sluice]}")" -v p="$(rss "${caddy_pid[plain]}")" -v keys="${KEYS:-1}" 'BEGIN {
	printf "rss       sluice - plain %+.1f MB", s - p
	if (keys == 100000) printf " (target <= +10: %s)", (s - p <= 10 ? "met" : "NOT met")
	printf "\n"
}'
