#!/usr/bin/env bash
# Resident memory of the real Caddy (./caddy, built by ./xcaddy.sh) and
# Traefik v3.6.12 with and without sluice's in-memory store: each process
# idle (started, ten requests served) and after e2e/soak has sent it
# KEYS (default 100000) distinct keys, one request each. Plain and sluice
# processes run side by side and get the same requests, so what the table
# shows beside each sluice figure is what the same process costs without it.
#
#   bench/rss.sh            # about a minute
#   KEYS=1000000 bench/rss.sh
#
# Caddy's zone is keyed on an API key header, 10/h; Traefik's middleware
# likewise (key header:X-API-Key); both with the default max_keys. Prints
# one line per host: idle RSS plain and with sluice, then after the keys;
# and for Traefik a line against a Traefik running a plugin that sets one
# header, which isolates what Yaegi costs any plugin.
# Everything listens on 127.0.0.1.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../e2e/testdata/lib.sh"
source e2e/testdata/traefik/lib.sh
keys="${KEYS:-100000}"

# rss PID prints the resident set of PID in MB.
rss() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
# settle URL sends ten requests and waits two seconds.
settle() {
	for _ in 1 2 3 4 5 6 7 8 9 10; do tl_status "$1" >/dev/null; done
	sleep 2
}
# flood URL sends the keys.
flood() { "$TMP/soak" -victim=false -max 600s -url "$1" -keys "$keys" -mode header -header X-API-Key >/dev/null 2>&1 || true; }

e2e_build e2e/soak
e2e_build_caddy # incremental: a ./caddy older than the source would measure old code

# --- caddy -------------------------------------------------------------------
declare -A cport cpid
for side in plain sluice; do
	cport[$side]="$(free_port)"
	block=""
	if [ "$side" = sluice ]; then
		block='sluice {
		zone api {
			key {http.request.header.X-API-Key}
			rate 10/h
		}
	}'
	fi
	cat >"$TMP/$side.Caddyfile" <<CADDY
{
	admin off
}
http://127.0.0.1:${cport[$side]} {
	$block
	respond "ok"
}
CADDY
	e2e_start_caddy "caddy-$side" "$TMP/$side.Caddyfile" "${cport[$side]}"
	cpid[$side]=$CADDY_PID
done
for side in plain sluice; do settle "http://127.0.0.1:${cport[$side]}/"; done
ci_plain="$(rss "${cpid[plain]}")" ci_sluice="$(rss "${cpid[sluice]}")"
for side in plain sluice; do flood "http://127.0.0.1:${cport[$side]}/"; done
cf_plain="$(rss "${cpid[plain]}")" cf_sluice="$(rss "${cpid[sluice]}")"

# --- traefik -----------------------------------------------------------------
tl_traefik
e2e_build e2e/backend
backend_port="$(free_port)"
e2e_start_backend "$backend_port"
declare -A tport tpid
for side in plain trivial sluice; do
	run="$TMP/traefik-$side"
	mkdir -p "$run"
	tport[$side]="$(free_port)"
	case "$side" in
	plain) { tl_backend "$backend_port" && tl_router api /; } >"$run/dynamic.yml" ;;
	sluice)
		tl_plugin_tree "$run"
		tl_one_plugin "$backend_port" api '{average: 10, period: 1h, key: "header:X-API-Key"}' >"$run/dynamic.yml"
		;;
	trivial)
		tl_bench_tree "$run" trivial
		tl_one_plugin "$backend_port" api '{}' >"$run/dynamic.yml"
		;;
	esac
	tl_static "$run" "${tport[$side]}"
	case "$side" in
	plain) sed -i '/^experimental:/,$d' "$run/static.yml" ;; # no plugin at all
	trivial) sed -i 's|moduleName: github.com/sluicehq/sluice|moduleName: example.com/trivial|' "$run/static.yml" ;;
	esac
	LOGS+=("$run/traefik.log")
	tl_start_traefik "$TRAEFIK" "$run" "$run/static.yml"
	tpid[$side]=$LAST_PID
done
deadline=$((SECONDS + 60))
for side in plain trivial sluice; do
	until [ "$(tl_status "http://127.0.0.1:${tport[$side]}/")" = 200 ]; do
		[ "$SECONDS" -lt "$deadline" ] || die "traefik ($side) not ready"
		sleep 0.2
	done
done
for side in plain trivial sluice; do settle "http://127.0.0.1:${tport[$side]}/"; done
ti_plain="$(rss "${tpid[plain]}")" ti_trivial="$(rss "${tpid[trivial]}")" ti_sluice="$(rss "${tpid[sluice]}")"
for side in plain trivial sluice; do flood "http://127.0.0.1:${tport[$side]}/"; done
tf_plain="$(rss "${tpid[plain]}")" tf_trivial="$(rss "${tpid[trivial]}")" tf_sluice="$(rss "${tpid[sluice]}")"

printf '%-8s %-28s %-28s\n' host "idle: plain / sluice" "$keys keys: plain / sluice"
awk -v a="$ci_plain" -v b="$ci_sluice" -v c="$cf_plain" -v d="$cf_sluice" 'BEGIN {
	printf "%-8s %6.1f / %6.1f MB (%+5.1f)  %6.1f / %6.1f MB (%+5.1f)\n", "caddy", a, b, b - a, c, d, d - c }'
awk -v a="$ti_plain" -v b="$ti_sluice" -v c="$tf_plain" -v d="$tf_sluice" 'BEGIN {
	printf "%-8s %6.1f / %6.1f MB (%+5.1f)  %6.1f / %6.1f MB (%+5.1f)\n", "traefik", a, b, b - a, c, d, d - c }'
awk -v a="$ti_trivial" -v b="$ti_sluice" -v c="$tf_trivial" -v d="$tf_sluice" 'BEGIN {
	printf "%-8s %6.1f / %6.1f MB (%+5.1f)  %6.1f / %6.1f MB (%+5.1f)  (plain: Traefik with a one-header plugin)\n", "traefik", a, b, b - a, c, d, d - c }'
