#!/usr/bin/env bash
# Demand recorded for a fleet, end to end: two real Caddys built by
# ./xcaddy.sh and two real Traefiks v3.6.12 with sluice from plugins-local,
# all on one real redis-server, each with a zone (a middleware) in dry_run
# whose demand is recorded for the fleet (Caddy's demand_scope fleet,
# the plugin's metrics.demandScope: fleet). A trace of 40 clients (1,200
# requests over 3 s, their shares following Zipf's law; e2e/observe load)
# goes to each pair, request by request in turn, as a balancer spreading
# every client over both instances. Once the trace's periods are over and
# sent, the advice of each instance of a pair counts the 40 clients and the
# trace's whole cost, although each instance saw half of it, the same in
# both; a DELETE of the advice in one empties the other's.
#
# Prints PASS lines with the figures, or FAIL and the logs. Everything
# listens on 127.0.0.1; every wait is bounded. About 30 s, plus the builds
# (Traefik's is cached by scripts/build-traefik.sh).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"
source e2e/testdata/traefik/lib.sh

e2e_need go curl redis-server
e2e_build e2e/observe e2e/backend
e2e_build_caddy
tl_traefik

rport="$(free_port)"
e2e_start_redis "$rport"

# The zone's limit: a period of 10 s, so that the 3 s trace falls in one
# or two periods, all in the advice's window of 24.
readonly average=5 period=10s

# --- two caddys ----------------------------------------------------------------
caddy_urls=() caddy_advice=()
for i in 1 2; do
	port="$(free_port)" admin="$(free_port)"
	cat >"$TMP/Caddyfile.$i" <<EOF
{
	admin 127.0.0.1:$admin
	persist_config off
	auto_https off
}

http://:$port {
	bind 127.0.0.1
	sluice {
		id fleet # the instances' ports differ: one name for the zone in both
		mode dry_run
		zone api {
			key {http.request.header.X-Client}
			rate $average/$period
			demand_scope fleet
		}
		store redis {
			address 127.0.0.1:$rport
		}
	}
	respond "ok"
}
EOF
	e2e_start_caddy "caddy.$i" "$TMP/Caddyfile.$i" "$port" "$admin"
	caddy_urls+=("http://127.0.0.1:$port/")
	caddy_advice+=("http://127.0.0.1:$admin/sluice/zones/api/advice")
done

# --- two traefiks --------------------------------------------------------------
backend_port="$(free_port)"
e2e_start_backend "$backend_port"
traefik_urls=() traefik_advice=()
for i in 1 2; do
	port="$(free_port)" metrics="$(free_port)" dir="$TMP/traefik$i"
	tl_plugin_tree "$dir"
	{
		tl_one_plugin "$backend_port" api
		cat <<EOF
          mode: dry_run
          average: "$average"
          period: "$period"
          sourceCriterion:
            requestHeaderName: "X-Client"
          redis:
            endpoints: ["127.0.0.1:$rport"]
          metrics:
            address: "127.0.0.1:$metrics"
            demandScope: fleet
EOF
	} >"$dir/dynamic.yml"
	tl_static "$dir" "$port"
	tl_up "$dir" "$port" /
	traefik_urls+=("http://127.0.0.1:$port/")
	traefik_advice+=("http://127.0.0.1:$metrics/sluice/zones/api@file/advice")
done

# --- the trace, spread over each pair ----------------------------------------
# Both pairs at once; then wait for the end of the trace's last period and
# 3.1 s more, until every instance has sent it (redisstore.Demand).
trace=(-clients 40 -requests 1200 -seconds 3)
"$TMP/observe" load -url "$(IFS=,; echo "${caddy_urls[*]}")" "${trace[@]}" >"$TMP/caddy.load" 2>&1 &
caddy_load=$!
"$TMP/observe" load -url "$(IFS=,; echo "${traefik_urls[*]}")" "${trace[@]}" >"$TMP/traefik.load" 2>&1 &
traefik_load=$!
wait "$caddy_load" || fail "caddy: the trace: $(cat "$TMP/caddy.load")"
wait "$traefik_load" || fail "traefik: the trace: $(cat "$TMP/traefik.load")"
now_ms=$(($(date +%s%N) / 1000000))
sleep "$(awk -v ms="$now_ms" 'BEGIN { printf "%.3f", (10000 - ms % 10000) / 1000 + 3.5 }')"

# field JSON NAME prints the number NAME of the advice JSON.
field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | head -1 | cut -d: -f2; }

# check_pair HOST EXTRA ADVICE_URL... checks the advice of each instance of
# HOST: scope fleet, the 40 clients (EXTRA more keys at most: Traefik's
# readiness probes, without X-Client, one key) and the trace's whole cost
# (EXTRA × 10 more at most, the probes), the same in every instance.
check_pair() {
	local host="$1" extra="$2" first="" adv keys cost
	shift 2
	for url in "$@"; do
		adv="$(curl -sS --max-time 10 "$url")" || fail "$host: GET $url failed"
		[[ "$adv" == *'"scope":"fleet"'* ]] || fail "$host: the advice at $url is not the fleet's: $adv"
		keys="$(field "$adv" keys)" cost="$(field "$adv" cost)"
		awk -v k="$keys" -v c="$cost" -v x="$extra" 'BEGIN { exit !(k >= 40 && k <= 40 + x && c >= 1200 && c <= 1200 + 10 * x) }' ||
			fail "$host: the advice at $url counts $keys keys asking $cost; want the 40 clients asking the trace's 1200 (each instance saw half): $adv"
		if [ -z "$first" ]; then
			first="$keys $cost $(field "$adv" key_periods)"
		elif [ "$first" != "$keys $cost $(field "$adv" key_periods)" ]; then
			fail "$host: the instances' advices differ: $first against $keys $cost $(field "$adv" key_periods)"
		fi
	done
	pass "$host: two instances each saw half of a trace of 40 clients and 1200 requests; the advice of both counts $keys keys, $(field "$adv" key_periods) key-periods asking $cost (scope fleet)"
	local code
	code="$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -X DELETE "$1")"
	[ "$code" = 204 ] || fail "$host: DELETE $1: $code, want 204"
	adv="$(curl -sS --max-time 10 "$2")"
	[ "$(field "$adv" key_periods)" = 0 ] || fail "$host: after a DELETE in the first instance, the second's advice still has key-periods: $adv"
	pass "$host: DELETE of the advice in one instance empties the other's"
}
check_pair caddy 0 "${caddy_advice[@]}"
check_pair traefik 1 "${traefik_advice[@]}"
e2e_verdict fleet
