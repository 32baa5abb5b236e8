# shellcheck shell=bash
# Shell helpers for running the real Traefik with sluice as a local plugin,
# sourced by e2e/traefik.sh and bench/traefik/run.sh (bash, set -euo pipefail).
# The sourcing script sets REPO (the repository root) and TMP (its temporary
# directory) and calls tl_cleanup from its EXIT trap. Everything listens on
# 127.0.0.1 only, and every wait is bounded.

TL_PIDS=() # processes started here, killed by tl_cleanup

# port_open and free_port.
source "$REPO/scripts/ports.sh"

# tl_wait_port PORT SECONDS waits until something accepts on 127.0.0.1:PORT.
tl_wait_port() {
	local deadline=$((SECONDS + $2))
	while [ "$SECONDS" -lt "$deadline" ]; do
		port_open "$1" && return 0
		sleep 0.1
	done
	return 1
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

# tl_build_backend OUT builds e2e/backend into OUT.
tl_build_backend() {
	(cd "$REPO" && go build -o "$1" ./e2e/backend)
}

# tl_start_backend BIN PORT starts the backend on 127.0.0.1:PORT and waits
# for it.
tl_start_backend() {
	"$1" -addr "127.0.0.1:$2" 2>>"$TMP/backend.log" &
	TL_PIDS+=("$!")
	tl_wait_port "$2" 10 || { echo "backend did not listen on 127.0.0.1:$2" >&2; return 1; }
}

# tl_start_traefik BIN DIR STATIC starts Traefik from DIR (which holds
# plugins-local/) with the static configuration file STATIC; the variable
# TL_LAST_PID is set to its pid.
tl_start_traefik() {
	(cd "$2" && exec "$1" --configFile="$3" >>"$3.out" 2>&1) &
	TL_LAST_PID=$!
	TL_PIDS+=("$TL_LAST_PID")
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

# tl_cleanup kills every process started here, newest first, and waits for
# them (bounded).
tl_cleanup() {
	local i pid
	for ((i = ${#TL_PIDS[@]} - 1; i >= 0; i--)); do
		pid="${TL_PIDS[$i]}"
		kill -CONT "$pid" 2>/dev/null || true
		kill "$pid" 2>/dev/null || true
	done
	for i in $(seq 1 50); do
		local alive=0
		for pid in "${TL_PIDS[@]}"; do
			kill -0 "$pid" 2>/dev/null && alive=1
		done
		[ "$alive" = 0 ] && break
		sleep 0.1
	done
	for pid in "${TL_PIDS[@]}"; do
		kill -9 "$pid" 2>/dev/null || true
	done
}
