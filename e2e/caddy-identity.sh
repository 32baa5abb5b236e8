#!/usr/bin/env bash
# End-to-end test that a Caddy zone's identity is the site it serves, in a
# real Caddy v2.11.9 built by ./xcaddy.sh, with a redis-server; everything
# on 127.0.0.1, stopped on exit.
#
#   instances  a Caddy runs a site whose zone per_ip (Redis, 3 an hour per
#              X-Client) and zone local (memory, /mem) admit 2 of a
#              client's requests; it stops, and another Caddy runs a
#              Caddyfile that differs elsewhere (another site before it,
#              with a zone per_ip of its own, and global options): it
#              admits the client's third request to per_ip and refuses the
#              fourth, the quota shared through Redis (local starts afresh:
#              memory is per process).
#   reload     that Caddy reloads (caddy reload) a Caddyfile that adds
#              another site before the zone's: the client stays at 429 in
#              both zones, the Redis key's name is unchanged, the added
#              site's zone per_ip counts apart, /sluice/zones lists both
#              IDs, and sluice_decisions_total keeps counting the zone's
#              decisions across the reload, in a series of its own.
#
# Releases that named zones by their server (srv0, srv1: the order of the
# sites' addresses) failed each stage: the added site took srv0 and moved
# the zone to srv1, with fresh counters and a new series.
#
# Prints PASS or FAIL lines and exits non-zero on the first failure, after
# showing the logs of the servers it started.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"

e2e_need redis-cli curl
e2e_build_caddy
redis_port="$(free_port)"
e2e_start_redis "$redis_port"
admin="$(free_port)"
# Two ports, the added site's address sorting first, as the Caddyfile
# adapter numbers servers.
p0="$(free_port)" port="$(free_port)"
[ "127.0.0.1:$p0" \< "127.0.0.1:$port" ] || { t=$p0 p0=$port port=$t; }
url="http://127.0.0.1:$port"
other="http://127.0.0.1:$p0"
zone="per_ip@:$port"
key="sluice:{per_ip:token_bucket::$port/a}"

# site PORT BODY prints a site on 127.0.0.1:PORT answering BODY, with the
# zone per_ip in Redis and, on /mem, the zone local in memory.
site() {
	cat <<EOF
http://:$1 {
	bind 127.0.0.1
	handle /mem {
		sluice {
			zone local {
				key {header.X-Client}
				rate 3/1h
			}
		}
		respond "$2"
	}
	handle {
		sluice {
			zone per_ip {
				key {header.X-Client}
				rate 3/1h
			}
			store redis {
				address 127.0.0.1:$redis_port
				readable_keys
			}
		}
		respond "$2"
	}
}
EOF
}

# global [OPTION...] prints the global options block, with OPTIONs.
global() {
	printf '{\n\tadmin 127.0.0.1:%s\n\tpersist_config off\n\tauto_https off\n' "$admin"
	local o
	for o in "$@"; do printf '\t%s\n' "$o"; done
	printf '}\n\n'
}

# codes URL N prints the statuses of N requests of client a to URL.
codes() {
	local i out=""
	for ((i = 0; i < $2; i++)); do
		out+="$(curl -sS --max-time 5 -o /dev/null -w '%{http_code}' -H 'X-Client: a' "$1" || echo 000) "
	done
	echo "${out% }"
}

# metric ZONE OUTCOME prints sluice_decisions_total{zone,outcome} of the
# admin endpoint's /metrics, 0 when absent.
metric() {
	curl -sS --max-time 5 "http://127.0.0.1:$admin/metrics" |
		awk -v z="zone=\"$1\"" -v o="outcome=\"$2\"" '/^sluice_decisions_total\{/ && index($0, z) && index($0, o) { v = $NF } END { print v + 0 }'
}

# --- instances -----------------------------------------------------------------
{ global; site "$port" one; } >"$TMP/one.Caddyfile"
e2e_start_caddy one "$TMP/one.Caddyfile" "$port" "$admin"
got="$(codes "$url/" 2) $(codes "$url/mem" 2)"
[ "$got" = "200 200 200 200" ] || fail "instances: the first Caddy: $got, want 200 × 4"
redis-cli -p "$redis_port" exists "$key" | grep -qx 1 || fail "instances: no Redis key $key"
e2e_stop "$CADDY_PID"

{ global "grace_period 1s"; site "$p0" other; site "$port" two; } >"$TMP/two.Caddyfile"
e2e_start_caddy two "$TMP/two.Caddyfile" "$port" "$p0" "$admin"
got="$(codes "$url/" 2)"
[ "$got" = "200 429" ] || fail "instances: per_ip in the second Caddy: $got, want 200 429 (2 of 3 spent by the first)"
mem="$(codes "$url/mem" 3)"
[ "$mem" = "200 200 200" ] || fail "instances: local in the second Caddy: $mem, want 200 × 3 (memory is per process)"
pass "instances: a Caddyfile with another site before the zone's and other global options shares the zone's quota in Redis: $got after 2 × 200 in the first"

# --- reload --------------------------------------------------------------------
before="$(metric "$zone" allowed)"
[ "$before" = 1 ] || fail "reload: $zone allowed $before before the reload, want 1"
# A third site, its address also sorting before the zone's.
for ((i = 0; i < 100; i++)); do
	p1="$(free_port)"
	[ "$p1" != "$p0" ] && [ "127.0.0.1:$p1" \< "127.0.0.1:$port" ] && break
done
[ "$i" -lt 100 ] || die "reload: no free port whose address sorts before 127.0.0.1:$port"
{ global "grace_period 1s"; site "$p1" added; site "$p0" other; site "$port" three; } >"$TMP/three.Caddyfile"
./caddy reload --config "$TMP/three.Caddyfile" --adapter caddyfile --address "127.0.0.1:$admin" >>"$TMP/two.log" 2>&1 ||
	fail "reload: caddy reload failed"
for ((i = 0; i < 50; i++)); do
	[ "$(curl -sS --max-time 5 -H "X-Client: await-$i" "$url/")" = three ] && break
	sleep 0.1
done
[ "$i" -lt 50 ] || fail "reload: $url never answered from the new config"
got="$(codes "$url/" 1) $(codes "$url/mem" 1)"
[ "$got" = "429 429" ] || fail "reload: the client in per_ip and local after the reload: $got, want 429 429 (the counters kept)"
redis-cli -p "$redis_port" exists "$key" | grep -qx 1 || fail "reload: the Redis key $key is gone"
got="$(codes "$other/" 1)"
[ "$got" = 200 ] || fail "reload: the client at the other site: $got, want 200 (a zone of its own)"
curl -sS --max-time 5 -o "$TMP/zones" "http://127.0.0.1:$admin/sluice/zones" || fail "reload: GET /sluice/zones failed"
grep -qF "\"id\":\"$zone\"" "$TMP/zones" && grep -qF "\"id\":\"per_ip@:$p0\"" "$TMP/zones" ||
	fail "reload: /sluice/zones: $(cat "$TMP/zones"), want $zone and per_ip@:$p0"
# The zone's decisions: before the reload, 1 allowed and 1 rejected; then
# the i+1 awaiting clients', each allowed (by either config, into the same
# series), and the client's rejection.
after="$(metric "$zone" allowed)" rejected="$(metric "$zone" rejected)"
[ "$after" = $((before + i + 1)) ] && [ "$rejected" = 2 ] ||
	fail "reload: $zone allowed $after, rejected $rejected; want $((before + i + 1)) and 2 (counted on)"
[ "$(metric "per_ip@:$p0" allowed)" = 1 ] || fail "reload: per_ip@:$p0 allowed $(metric "per_ip@:$p0" allowed), want 1, a series of its own"
pass "reload: sites added before the zone's keep its counters (429 in Redis and memory, key $key), its ID and its metrics ($after allowed, $rejected rejected, counted on), the other site's zone per_ip apart"
