#!/usr/bin/env bash
# Key floods against the real Caddy v2.11.9 and Traefik v3.6.12 (e2e/soak):
# distinct keys sent as fast as two cores allow while a victim whose quota
# is spent keeps asking. Checks that the victim stays limited through the
# flood (eviction prefers idle and expired states), that no request fails,
# and that the server's RSS stays under a bound.
#
#   caddy    zone keyed on {client_ip}, 10/h, burst 1 (a spent victim's
#            state then expires as soon as a new key's: only its
#            rejections keep it), max_keys 100000, the client address in
#            X-Forwarded-For from the trusted loopback peer:
#            SOAK_KEYS (default 250000) distinct addresses, 2.5 × the cap.
#            RSS bound: 60 MB over the RSS before the flood.
#   traefik  the plugin keyed on header:X-API-Key, 11/h (the built-in's
#            burst of 1), in a store of its own of SOAK_TRAEFIK_MAXKEYS
#            (default 20000) keys: SOAK_TRAEFIK_KEYS (default 100000) API
#            keys, 5 × the cap. RSS bound: 150 MB over the RSS before the
#            flood. Then, in a second Traefik, 1000 calls of New by reloads of its
#            file-provider configuration under traffic (10 routers use the
#            middleware), with goroutines, file descriptors and RSS flat.
#
#   ipv6     8 addresses rotated inside one /64 share its quota in Caddy
#            with ipv6_prefix 64.
#   reload   1000 Caddy reloads through its admin API under traffic:
#            counters kept, no error answer (Caddy's own server swap drops a
#            few connections, counted apart), goroutines, file descriptors
#            and RSS flat.
#
# Every flood is bounded by SOAK_MAX (default 60s); everything listens on
# 127.0.0.1 and is stopped on exit. Prints PASS/FAIL lines; exits non-zero
# if any check failed.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"
source e2e/testdata/traefik/lib.sh
e2e_keep_going
keys="${SOAK_KEYS:-250000}"
tkeys="${SOAK_TRAEFIK_KEYS:-100000}"
tmax="${SOAK_TRAEFIK_MAXKEYS:-20000}"
most="${SOAK_MAX:-60s}"

# fds PID prints how many file descriptors PID has open.
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
# rss PID prints the resident set of PID in MB.
rss() { awk '/^VmRSS:/ { printf "%d", $2 / 1024 }' "/proc/$1/status"; }
# flood NAME PID BOUND_MB ARGS... runs e2e/soak and checks PID's RSS growth.
flood() {
	local name="$1" pid="$2" bound="$3" before after line
	shift 3
	before="$(rss "$pid")"
	line="$("$TMP/soak" -max "$most" "$@" 2>&1)" || true
	after="$(rss "$pid")"
	case "$line" in
	PASS:*) pass "$name: ${line#PASS: }" ;;
	*) fail "$name: ${line#FAIL: }" ;;
	esac
	if [ $((after - before)) -le "$bound" ]; then
		pass "$name: RSS $before MB before the flood, $after MB after (bound: +$bound MB)"
	else
		fail "$name: RSS $before MB before the flood, $after MB after, more than +$bound MB"
	fi
}

e2e_build e2e/soak

# --- caddy -------------------------------------------------------------------
e2e_build_caddy # incremental: a ./caddy older than the source would test old code
port="$(free_port)"
cat >"$TMP/Caddyfile" <<CADDY
{
	admin off
	servers {
		trusted_proxies static 127.0.0.1/32
	}
}
http://127.0.0.1:$port {
	sluice {
		zone flood {
			key {client_ip}
			rate 10/h
			burst 1
		}
		store memory {
			max_keys 100000
		}
	}
	respond "ok"
}
CADDY
e2e_start_caddy caddy "$TMP/Caddyfile" "$port"
caddy_pid=$CADDY_PID
flood "caddy, $keys client addresses, max_keys 100000" "$caddy_pid" 60 -url "http://127.0.0.1:$port/" -keys "$keys" -mode xff

# --- caddy reload storm ------------------------------------------------------
# SOAK_RELOADS (default 1000) loads through Caddy's admin API, the zone's
# rate alternating between 10/h and 11/h, while a client loops on another
# key: the victim, spent before, stays limited (the counters survive every
# reload), no request fails, and goroutines, file descriptors and RSS stay
# flat.
reloads="${SOAK_RELOADS:-1000}"
port="$(free_port)" admin="$(free_port)"
for rate in 10 11; do
	cat >"$TMP/reload-$rate.Caddyfile" <<CADDY
{
	admin 127.0.0.1:$admin
	servers {
		trusted_proxies static 127.0.0.1/32
	}
}
http://127.0.0.1:$port {
	handle /v6 {
		sluice {
			zone v6 {
				key {client_ip}
				rate 3/h
				ipv6_prefix 64
			}
		}
		respond "ok"
	}
	sluice {
		zone storm {
			key {client_ip}
			rate $rate/h
		}
	}
	respond "ok"
}
CADDY
	./caddy adapt --config "$TMP/reload-$rate.Caddyfile" --adapter caddyfile >"$TMP/reload-$rate.json" 2>/dev/null
done
e2e_start_caddy caddy-reload "$TMP/reload-10.json" "$port"
reload_pid=$CADDY_PID
# IPv6 rotation: with ipv6_prefix 64, addresses of one /64 share a bucket,
# whatever their last 64 bits; another /64 has its own.
v6=""
for i in $(seq 1 8); do
	v6+="$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "X-Forwarded-For: 2001:db8:5:6:$i:$((i * 7)):$((i * 13)):$i" "http://127.0.0.1:$port/v6") "
done
v6+="$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "X-Forwarded-For: 2001:db8:5:7::1" "http://127.0.0.1:$port/v6")"
if [ "$v6" = "200 200 200 429 429 429 429 429 200" ]; then
	pass "caddy: 8 addresses rotated inside one IPv6 /64 share its quota of 3 (ipv6_prefix 64); another /64 has its own"
else
	fail "caddy: IPv6 rotation inside one /64: $v6, want 200 200 200 429 429 429 429 429 200"
fi
goroutines() { curl -s --max-time 5 "http://127.0.0.1:$admin/debug/pprof/goroutine?debug=1" | sed -n 's/^goroutine profile: total //p'; }
victim() { curl -s -o /dev/null -D - --max-time 5 -H "X-Forwarded-For: 192.0.2.77" "http://127.0.0.1:$port/" | tr -d '\r'; }
for i in $(seq 1 12); do victim >/dev/null; done
g0="$(goroutines)" f0="$(fds "$reload_pid")" r0="$(rss "$reload_pid")"
# Traffic on another key throughout.
(
	bad=0
	while [ ! -e "$TMP/reload-done" ]; do
		code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "X-Forwarded-For: 192.0.2.78" "http://127.0.0.1:$port/" || true)"
		# 000: the connection failed. Caddy itself drops a few connections
		# while it swaps servers (plain Caddy, no sluice: 18 in 300 reloads
		# on these machines); those are counted apart.
		case "$code" in 200 | 429) ;; 000) echo "$code" >>"$TMP/reload-codes" ;; *)
			bad=$((bad + 1))
			echo "$code" >>"$TMP/reload-codes"
			;;
		esac
	done
	echo "$bad" >"$TMP/reload-bad"
) &
traffic_pid=$!
started=$SECONDS lost=0 failed_loads=0
for i in $(seq 1 "$reloads"); do
	curl -s -o /dev/null -f --max-time 10 -X POST -H 'Content-Type: application/json' \
		--data-binary "@$TMP/reload-$((10 + i % 2)).json" "http://127.0.0.1:$admin/load" || failed_loads=$((failed_loads + 1))
	if [ $((i % 50)) = 0 ]; then
		h="$(victim)"
		case "$h" in *" 429"*) ;; *) lost=$((lost + 1)) ;; esac
	fi
done
took=$((SECONDS - started))
touch "$TMP/reload-done"
wait "$traffic_pid" || true
sleep 1
g1="$(goroutines)" f1="$(fds "$reload_pid")" r1="$(rss "$reload_pid")"
bad="$(cat "$TMP/reload-bad" 2>/dev/null || echo '?')"
drops="$(grep -c '^000$' "$TMP/reload-codes" 2>/dev/null || true)"
if [ "$failed_loads" = 0 ] && [ "$lost" = 0 ] && [ "$bad" = 0 ]; then
	pass "caddy: $reloads reloads through the admin API in $took s under traffic: every load accepted, no error answer (${drops:-0} connections dropped by Caddy's server swap), the spent victim limited at every check"
else
	fail "caddy: $reloads reloads: $failed_loads loads refused, $bad requests failed ($(sort "$TMP/reload-codes" 2>/dev/null | uniq -c | tr -s " \n" " ")), the victim let through $lost times"
fi
if [ "$g1" -le $((g0 + 20)) ] && [ "$f1" -le $((f0 + 10)) ] && [ "$r1" -le $((r0 + 50)) ]; then
	pass "caddy: after $reloads reloads goroutines $g0 → $g1, file descriptors $f0 → $f1, RSS $r0 → $r1 MB"
else
	fail "caddy: after $reloads reloads goroutines $g0 → $g1, file descriptors $f0 → $f1, RSS $r0 → $r1 MB: not flat"
fi

# --- traefik -----------------------------------------------------------------
tl_traefik
e2e_build e2e/backend
backend_port="$(free_port)" tport="$(free_port)"
e2e_start_backend "$backend_port"
run="$TMP/run"
tl_plugin_tree "$run"
tl_one_plugin "$backend_port" flood "{average: 11, period: 1h, key: \"header:X-API-Key\", maxKeys: $tmax}" >"$run/dynamic.yml"
tl_static "$run" "$tport"
tl_up "$run" "$tport" /flood
traefik_pid=$LAST_PID
flood "traefik, $tkeys API keys, maxKeys $tmax" "$traefik_pid" 150 -url "http://127.0.0.1:$tport/flood" -keys "$tkeys" -mode header -header X-API-Key
e2e_stop "$traefik_pid"

# --- traefik reload storm ----------------------------------------------------
# Traefik calls the plugin's New once per router using a middleware on every
# configuration reload. A second Traefik watches its file-provider
# configuration (without throttling), with debug logs and its debug API on
# a loopback entryPoint: 10 routers use one middleware, and the file is
# rewritten, the average alternating between 10 and 11 per hour, until
# Traefik has called New SOAK_TRAEFIK_NEWS (default 1000) times, counted in
# its log ("Adding tracing to middleware", which it logs when a middleware's
# constructor returns; a write Traefik has not applied yet when the next
# comes is coalesced with it), while a client loops on one router: the
# spent victim stays limited, the last rate applies, no error answer,
# goroutines, file descriptors and RSS flat. At most 600 writes and 60 s.
news="${SOAK_TRAEFIK_NEWS:-1000}"
routers=10
tport="$(free_port)" aport="$(free_port)"
storm="$TMP/storm"
tl_plugin_tree "$storm"
storm_config() {
	tl_backend "$backend_port"
	for r in $(seq 1 "$routers"); do
		tl_router "r$r" "/r$r" storm
	done
	echo "  middlewares:"
	echo "    storm:"
	echo "      plugin:"
	echo "        sluice: {average: $1, period: 1h, key: \"header:X-API-Key\", maxKeys: 100000}"
}
storm_config 11 >"$storm/dynamic.yml"
tl_static "$storm" "$tport"
sed -i -e 's/^    watch: false$/    watch: true/' -e 's/^providers:$/providers:\n  providersThrottleDuration: 0s/' \
	-e 's/^  level: INFO$/  level: DEBUG/' -e "s/^entryPoints:\$/entryPoints:\n  traefik:\n    address: \"127.0.0.1:$aport\"/" "$storm/static.yml"
printf 'api:\n  insecure: true\n  debug: true\n' >>"$storm/static.yml"
tl_up "$storm" "$tport" /r1
storm_pid=$LAST_PID
# tgoroutines counts Traefik's goroutines after a garbage collection (the
# heap profile's gc=1) and a moment for finalizers: Traefik keeps caches
# (patrickmn/go-cache) whose janitor goroutine ends only when a collection
# finds the cache of an old configuration unreachable.
tgoroutines() {
	curl -s --max-time 5 -o /dev/null "http://127.0.0.1:$aport/debug/pprof/heap?gc=1"
	sleep 0.5
	curl -s --max-time 5 "http://127.0.0.1:$aport/debug/pprof/goroutine?debug=1" | sed -n 's/^goroutine profile: total //p'
}
tvictim() { curl -s -o /dev/null -D - --max-time 5 -H "X-API-Key: victim" "http://127.0.0.1:$tport/r1" | tr -d '\r'; }
newcalls() { grep -c 'Adding tracing to middleware.*middlewareName=storm@file' "$storm/traefik.log" || true; }
for i in $(seq 1 12); do tvictim >/dev/null; done
n0="$(newcalls)" g0="$(tgoroutines)" f0="$(fds "$storm_pid")" r0="$(rss "$storm_pid")"
rm -f "$TMP/reload-done" "$TMP/reload-codes"
(
	bad=0
	while [ ! -e "$TMP/reload-done" ]; do
		code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "X-API-Key: bystander" "http://127.0.0.1:$tport/r1" || true)"
		case "$code" in 200 | 429) ;; *) bad=$((bad + 1)) ;; esac
	done
	echo "$bad" >"$TMP/reload-bad"
) &
traffic_pid=$!
started=$SECONDS lost=0 writes=0 n1="$n0"
while [ $((n1 - n0)) -lt "$news" ] && [ "$writes" -lt 600 ] && [ $((SECONDS - started)) -lt 60 ]; do
	writes=$((writes + 1))
	storm_config $((10 + writes % 2)) >"$storm/dynamic.tmp"
	mv "$storm/dynamic.tmp" "$storm/dynamic.yml"
	sleep 0.02
	if [ $((writes % 10)) = 0 ]; then
		case "$(tvictim)" in *" 429"*) ;; *) lost=$((lost + 1)) ;; esac
		n1="$(newcalls)"
	fi
done
took=$((SECONDS - started))
# The last write applied: its rate is the one in effect.
sleep 1
n1="$(newcalls)"
policy="$(tvictim | sed -n 's/^Ratelimit-Policy: //Ip')"
touch "$TMP/reload-done"
wait "$traffic_pid" || true
sleep 1
g1="$(tgoroutines)" f1="$(fds "$storm_pid")" r1="$(rss "$storm_pid")"
bad="$(cat "$TMP/reload-bad" 2>/dev/null || echo '?')"
calls=$((n1 - n0))
want="q=$((10 + writes % 2));"
if [ "$calls" -ge "$news" ] && [ "$lost" = 0 ] && [ "$bad" = 0 ] && [[ "$policy" == *"$want"* ]]; then
	pass "traefik: $calls calls of New ($((calls / routers)) reloads applied of $writes file writes, $routers routers) in $took s under traffic: no error answer, the spent victim limited at every check, the last rate applied ($policy)"
else
	fail "traefik: $calls calls of New (want $news) from $writes file writes in $took s: $bad error answers, the victim let through $lost times, RateLimit-Policy '$policy' (want $want)"
fi
if [ "$g1" -le $((g0 + 20)) ] && [ "$f1" -le $((f0 + 10)) ] && [ "$r1" -le $((r0 + 60)) ]; then
	pass "traefik: after $calls calls of New goroutines $g0 → $g1, file descriptors $f0 → $f1, RSS $r0 → $r1 MB"
else
	fail "traefik: after $calls calls of New goroutines $g0 → $g1, file descriptors $f0 → $f1, RSS $r0 → $r1 MB: not flat"
fi

e2e_verdict soak
