#!/usr/bin/env bash
# Builds Traefik v3.6.12 (which runs plugins with Yaegi v0.16.1) from the Go
# module proxy and prints the binary's path as its last line of stdout.
#
# The binary is cached outside the repository, at
#   ${SLUICE_CACHE:-$HOME/.cache/sluice}/bin/traefik-v3.6.12
# and reused while it runs. A cold build takes about 8 minutes on 2 cores.
# Concurrent callers wait on a lock, so only one of them builds.
#
# `go install ...traefik/v3/cmd/traefik@v3.6.12` is refused (Traefik's go.mod
# has replace directives), so the module is built as the main module instead:
# go mod download, copy the read-only module directory, go build ./cmd/traefik.
set -euo pipefail

readonly module=github.com/traefik/traefik/v3
readonly version=v3.6.12
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
bin="$cache/bin/traefik-$version"

log() { printf 'build-traefik: %s\n' "$*" >&2; }
usable() { [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; }

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi

mkdir -p "$cache/bin"
if ! usable; then
	exec 9>"$bin.lock"
	if ! flock -n 9; then
		log "another build of $version is running; waiting for it"
		flock -w 3600 9 || { log "gave up waiting for the lock $bin.lock"; exit 1; }
	fi
	if ! usable; then
		log "building Traefik $version into $bin (about 8 minutes cold)"
		work="$(mktemp -d "$cache/traefik-build.XXXXXX")"
		trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work" "$bin.tmp"' EXIT
		export GOFLAGS=-mod=readonly GOWORK=off GOTOOLCHAIN=local
		src="$(cd "$work" && go mod download -json "$module@$version" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
		if [ -z "$src" ] || [ ! -d "$src" ]; then
			log "go mod download gave no module directory"
			exit 1
		fi
		cp -r "$src" "$work/src"
		chmod -R u+w "$work/src"
		(cd "$work/src" && go build -o "$bin.tmp" ./cmd/traefik)
		mv -f "$bin.tmp" "$bin"
		usable || { log "built $bin does not run"; exit 1; }
	fi
fi
echo "$bin"
