# shellcheck shell=bash
# Shell helpers for running the real Traefik with sluice as a local plugin,
# sourced by the e2e and bench scripts that start Traefik (bash, set -euo
# pipefail), after e2e/testdata/lib.sh, on which they build (REPO, TMP,
# PIDS, LOGS, die): it is sourced here too if it was not. Everything
# listens on 127.0.0.1 only, and every wait is bounded.

# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# tl_traefik sets TRAEFIK to the Traefik binary that
# scripts/build-traefik.sh builds (cached outside the tree), or dies.
tl_traefik() {
	TRAEFIK="$(bash "$REPO/scripts/build-traefik.sh" | tail -n 1)" || die "scripts/build-traefik.sh failed"
	[ -x "$TRAEFIK" ] || die "scripts/build-traefik.sh gave no Traefik binary: '$TRAEFIK'"
}

# tl_plugin_tree DIR lays out DIR/plugins-local/src/github.com/sluicehq/sluice/
# with what Traefik's local plugin loader needs: go.mod, .traefik.yml and the
# non-test Go files of core/ and traefikplugin/.
tl_plugin_tree() {
	local dst="$1/plugins-local/src/github.com/sluicehq/sluice" f
	mkdir -p "$dst"
	cp "$REPO/go.mod" "$REPO/.traefik.yml" "$dst/"
	while IFS= read -r f; do
		mkdir -p "$dst/$(dirname "$f")"
		cp "$REPO/$f" "$dst/$f"
	done < <(cd "$REPO" && find core traefikplugin -type f -name '*.go' ! -name '*_test.go')
}

# tl_bench_tree DIR NAME lays out in DIR/plugins-local the local plugin
# bench/testdata/NAME, imported as example.com/NAME: trivial sets one header
# (what any Yaegi plugin costs Traefik), floor is a bare token bucket with
# sluice's five headers (bench/rss.sh, bench/traefik/run.sh), redisfloor
# the same decided by one EVALSHA per request (bench/traefik/run.sh).
tl_bench_tree() {
	local dst="$1/plugins-local/src/example.com/$2"
	mkdir -p "$dst"
	cp "$REPO/bench/testdata/$2/go.mod" "$REPO/bench/testdata/$2/.traefik.yml" \
		"$REPO/bench/testdata/$2/$2.go" "$dst/"
}

# tl_render TEMPLATE OUT NAME=VALUE... copies TEMPLATE to OUT, replacing
# every @NAME@ by VALUE.
tl_render() {
	local in="$1" out="$2" kv expr=()
	shift 2
	for kv in "$@"; do
		expr+=(-e "s|@${kv%%=*}@|${kv#*=}|g")
	done
	sed "${expr[@]}" "$in" >"$out"
}

# tl_static DIR PORT writes DIR/static.yml: e2e/testdata/traefik/static.yml
# for the entry point 127.0.0.1:PORT, the dynamic configuration
# DIR/dynamic.yml and the log DIR/traefik.log.
tl_static() {
	tl_render "$REPO/e2e/testdata/traefik/static.yml" "$1/static.yml" \
		"PORT=$2" "DYNAMIC=$1/dynamic.yml" "LOG=$1/traefik.log"
}

# tl_backend PORT prints the start of a dynamic configuration: the service
# backend, e2e/backend on 127.0.0.1:PORT, and the key of the routers, which
# tl_router prints.
tl_backend() {
	printf 'http:\n  services:\n    backend:\n      loadBalancer:\n        servers:\n'
	printf '          - url: "http://127.0.0.1:%s"\n  routers:\n' "$1"
}

# tl_router NAME PREFIX [MIDDLEWARE] prints the router NAME, which sends the
# requests whose path starts with PREFIX to backend, through MIDDLEWARE if
# given.
tl_router() {
	printf '    %s:\n      rule: "PathPrefix(`%s`)"\n      service: backend\n' "$1" "$2"
	[ -z "${3:-}" ] || printf '      middlewares: [%s]\n' "$3"
}

# tl_one_plugin PORT NAME [OPTIONS] prints a dynamic configuration whose one
# router, NAME, sends every request to backend (tl_backend PORT) through the
# middleware NAME, the plugin sluice with the options OPTIONS (a YAML flow
# mapping); without OPTIONS it ends with the plugin's key ("        sluice:"),
# for the caller to print the options under it, indented by 10 spaces.
tl_one_plugin() {
	tl_backend "$1"
	tl_router "$2" / "$2"
	printf '  middlewares:\n    %s:\n      plugin:\n        sluice:%s\n' "$2" "${3:+ $3}"
}

# tl_start_traefik BIN DIR STATIC starts Traefik from DIR (which holds
# plugins-local/) with the static configuration file STATIC; the variable
# LAST_PID is set to its pid, which joins PIDS.
tl_start_traefik() {
	(cd "$2" && exec "$1" --configFile="$3" >>"$3.out" 2>&1) &
	LAST_PID=$!
	PIDS+=("$LAST_PID")
}

# tl_up DIR PORT PATH starts $TRAEFIK (tl_traefik) from DIR with
# DIR/static.yml (tl_static), whose log DIR/traefik.log joins LOGS, and
# waits for it as tl_wait_traefik does, 120 s at most, or dies; LAST_PID is
# its pid.
tl_up() {
	LOGS+=("$1/traefik.log")
	tl_start_traefik "$TRAEFIK" "$1" "$1/static.yml"
	tl_wait_traefik "$2" "$1/traefik.log" "$3" 120 || die "Traefik ($1) did not come up"
}

# tl_wait_traefik PORT LOG PATH SECONDS waits until Traefik on PORT answers
# GET /ping with 200, has logged "Plugins loaded", and answers GET PATH
# (a router behind a plugin middleware) with 200.
tl_wait_traefik() {
	local port="$1" log="$2" path="$3" deadline=$((SECONDS + $4))
	local ping=0 loaded=0
	while [ "$SECONDS" -lt "$deadline" ]; do
		[ "$ping" = 1 ] || [ "$(tl_status "http://127.0.0.1:$port/ping")" != 200 ] || ping=1
		[ "$loaded" = 1 ] || ! grep -q 'Plugins loaded' "$log" 2>/dev/null || loaded=1
		if [ "$ping" = 1 ] && [ "$loaded" = 1 ]; then
			[ "$(tl_status "http://127.0.0.1:$port$path")" = 200 ] && return 0
		fi
		sleep 0.2
	done
	echo "Traefik on port $port not ready after $4 s (ping ok: $ping, plugins loaded: $loaded, or GET $path not 200)" >&2
	return 1
}

# tl_status URL prints the status code of GET URL (000 when it fails).
tl_status() {
	curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1" 2>/dev/null || true
}
