#!/usr/bin/env bash
# Key floods against the real Caddy v2.11.9 and Traefik v3.6.12 (e2e/soak):
# distinct keys sent as fast as two cores allow while a victim whose quota
# is spent keeps asking. Checks that the victim stays limited through the
# flood (eviction prefers idle and expired states), that no request fails,
# and that the server's RSS stays under a bound.
#
#   caddy    zone keyed on {client_ip}, 10/h, max_keys 100000, the client
#            address in X-Forwarded-For from the trusted loopback peer:
#            SOAK_KEYS (default 250000) distinct addresses, 2.5 × the cap.
#            RSS bound: 60 MB over the RSS before the flood.
#   traefik  the plugin keyed on header:X-API-Key, 10/h, in the process-wide
#            store (1M keys): SOAK_TRAEFIK_KEYS (default 100000) API keys.
#            RSS bound: 150 MB over the RSS before the flood.
#
# Every flood is bounded by SOAK_MAX (default 60s); everything listens on
# 127.0.0.1 and is stopped on exit. Prints PASS/FAIL lines; exits non-zero
# if any check failed.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
keys="${SOAK_KEYS:-250000}"
tkeys="${SOAK_TRAEFIK_KEYS:-100000}"
most="${SOAK_MAX:-60s}"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/sluice-soak.XXXXXX")"
# shellcheck source-path=SCRIPTDIR source=testdata/traefik/lib.sh
source "$REPO/e2e/testdata/traefik/lib.sh"
cleanup() {
	tl_cleanup
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export XDG_CONFIG_HOME="$TMP/config" XDG_DATA_HOME="$TMP/data"

failures=0
pass() { echo "PASS: $*"; }
fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}
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

go build -o "$TMP/soak" ./e2e/soak

# --- caddy -------------------------------------------------------------------
[ -x ./caddy ] || timeout 1800 ./xcaddy.sh build
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
		}
		store memory {
			max_keys 100000
		}
	}
	respond "ok"
}
CADDY
./caddy run --config "$TMP/Caddyfile" --adapter caddyfile >"$TMP/caddy.log" 2>&1 &
caddy_pid=$!
TL_PIDS+=("$caddy_pid")
tl_wait_port "$port" 30 || { echo "FAIL: caddy did not listen on 127.0.0.1:$port"; tail -20 "$TMP/caddy.log"; exit 1; }
flood "caddy, $keys client addresses, max_keys 100000" "$caddy_pid" 60 -url "http://127.0.0.1:$port/" -keys "$keys" -mode xff

# --- traefik -----------------------------------------------------------------
traefik="$(bash scripts/build-traefik.sh | tail -n 1)"
[ -x "$traefik" ] || { echo "FAIL: no Traefik binary: '$traefik'"; exit 1; }
tl_build_backend "$TMP/backend"
backend_port="$(free_port)" tport="$(free_port)"
tl_start_backend "$TMP/backend" "$backend_port"
run="$TMP/run"
mkdir -p "$run"
tl_plugin_tree "$run"
cat >"$run/dynamic.yml" <<YAML
http:
  services:
    backend:
      loadBalancer:
        servers:
          - url: "http://127.0.0.1:$backend_port"
  routers:
    flood:
      rule: "PathPrefix(\`/\`)"
      service: backend
      middlewares: [flood]
  middlewares:
    flood:
      plugin:
        sluice: {average: 10, period: 1h, burst: 10, key: "header:X-API-Key"}
YAML
tl_render "$REPO/e2e/testdata/traefik/static.yml" "$run/static.yml" "PORT=$tport" "DYNAMIC=$run/dynamic.yml" "LOG=$run/traefik.log"
tl_start_traefik "$traefik" "$run" "$run/static.yml"
traefik_pid=$TL_LAST_PID
if ! tl_wait_traefik "$tport" "$run/traefik.log" /flood 60; then
	echo "FAIL: Traefik did not load the plugin"
	tail -20 "$run/traefik.log"
	exit 1
fi
flood "traefik, $tkeys API keys" "$traefik_pid" 150 -url "http://127.0.0.1:$tport/flood" -keys "$tkeys" -mode header -header X-API-Key

if [ "$failures" -gt 0 ]; then
	echo "soak: $failures check(s) FAILED"
	exit 1
fi
echo "soak: all checks passed"
