#!/usr/bin/env bash
# Builds Caddy v2.11.9 with sluice's module (http.handlers.sluice) from this
# working tree, using xcaddy v0.4.5, into ./caddy at the repository root.
#
#   ./xcaddy.sh [build]      build ./caddy if it is missing or out of date
#   ./xcaddy.sh run [args]   build if needed, then run Caddyfile.example
#                            (http://127.0.0.1:8080, in-memory store)
#   ./xcaddy.sh <args>       build if needed, then ./caddy <args>,
#                            e.g. ./xcaddy.sh list-modules
#
# Needs only Go: xcaddy is installed with go install when missing. ./caddy is
# out of date when any .go, go.mod or go.sum file of the repository, or this
# script, is newer than it. A cold build downloads Caddy's dependencies from
# the Go module proxy and takes a few minutes; a warm one about 20 seconds.
# Concurrent callers wait on a lock, so only one of them builds.
#
# xcaddy always runs `go get github.com/sluicehq/sluice/caddymodule`, which
# asks the module proxy for the module's versions even though a replace
# directive points it at this tree; a proxy that does not know an unpublished
# module refuses and the build stops. So a file-based proxy that knows the
# module but lists no version is put in front of the configured one.
set -euo pipefail

readonly caddy_version=v2.11.9
readonly xcaddy_module=github.com/caddyserver/xcaddy
readonly xcaddy_version=v0.4.5
readonly module=github.com/sluicehq/sluice

root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$root"
bin="$root/caddy"

log() { printf 'xcaddy.sh: %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { log "go not found (need Go 1.26)"; exit 1; }

# stale succeeds when ./caddy is missing or older than a Go source file, a
# go.mod or go.sum, or this script. Trees the e2e tests lay out for Traefik
# (plugins-local/) are copies, not sources.
stale() {
	[ -x "$bin" ] || return 0
	[ "$root/xcaddy.sh" -nt "$bin" ] && return 0
	local newer
	newer="$(find "$root" \( -name .git -o -name plugins-local \) -prune -o \
		-type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$bin" -print -quit)"
	[ -n "$newer" ]
}

# install_xcaddy puts xcaddy $xcaddy_version in Go's bin directory unless it
# is there already, and prints its path.
install_xcaddy() {
	local dir have
	dir="$(go env GOBIN)"
	[ -n "$dir" ] || dir="$(go env GOPATH)/bin"
	if [ -x "$dir/xcaddy" ]; then
		have="$(go version -m "$dir/xcaddy" 2>/dev/null |
			awk -v m="$xcaddy_module" '$1 == "mod" && $2 == m { print $3 }')"
	fi
	if [ "${have:-}" != "$xcaddy_version" ]; then
		log "go install $xcaddy_module/cmd/xcaddy@$xcaddy_version${have:+ (found $have)}"
		GOWORK=off go install "$xcaddy_module/cmd/xcaddy@$xcaddy_version" >&2
	fi
	echo "$dir/xcaddy"
}

build() {
	local xcaddy proxy tmp start
	xcaddy="$(install_xcaddy)"
	proxy="$(mktemp -d)"
	tmp="$root/.caddy.build.$$"
	trap 'rm -rf "$proxy" "$tmp"' EXIT
	mkdir -p "$proxy/$module/@v"
	: >"$proxy/$module/@v/list"
	log "building Caddy $caddy_version with $module/caddymodule into $bin"
	start=$SECONDS
	# xcaddy's own output goes to stderr, so that stdout stays the command's.
	(
		cd "$proxy"
		GOPROXY="file://$proxy,$(go env GOPROXY)" GOWORK=off \
			"$xcaddy" build "$caddy_version" \
			--with "$module/caddymodule" \
			--replace "$module=$root" \
			--output "$tmp"
	) >&2
	"$tmp" version >/dev/null || { log "the built binary does not run"; exit 1; }
	mv -f "$tmp" "$bin"
	rm -rf "$proxy"
	trap - EXIT
	log "built $bin in $((SECONDS - start))s"
}

# The lock is this script itself, so that no lock file is left behind.
exec 9<"$root/xcaddy.sh"
if stale; then
	if ! flock -n 9; then
		log "another build is running; waiting for it"
		flock -w 1800 9 || { log "gave up waiting for the build lock"; exit 1; }
	fi
	if stale; then
		build
	fi
fi
exec 9<&-

case "${1:-build}" in
build)
	[ "$#" -le 1 ] || { log "build takes no arguments"; exit 2; }
	;;
run)
	shift
	exec "$bin" run --config "$root/Caddyfile.example" --adapter caddyfile "$@"
	;;
*)
	exec "$bin" "$@"
	;;
esac
