#!/usr/bin/env bash
# Installs what the test suite needs and is missing, and nothing else:
#   - from Debian: redis-server and redis-cli (tests start their own servers on
#     loopback; nothing here starts Redis), wrk and hey (load generators),
#     curl (the e2e scripts), prometheus and promtool (e2e/prometheus.sh
#     starts its own Prometheus on loopback; the service the package may
#     start on :9090 is stopped and disabled right after the install);
#   - from the Go module proxy, pinned: yaegi (the interpreter Traefik v3.6 runs
#     plugins with) and xcaddy (builds Caddy with the sluice module).
# Go tools go to $(go env GOBIN), or $(go env GOPATH)/bin when GOBIN is unset;
# callers put that directory on PATH (test.sh does). Safe to run repeatedly: when
# everything is present it only checks, in well under a second.
set -euo pipefail

# Pinned Go tools: "binary module-path version package-to-install".
readonly GO_TOOLS=(
	"yaegi github.com/traefik/yaegi v0.16.1 github.com/traefik/yaegi/cmd/yaegi"
	"xcaddy github.com/caddyserver/xcaddy v0.4.5 github.com/caddyserver/xcaddy/cmd/xcaddy"
)

# Debian packages: "command package".
readonly APT_TOOLS=(
	"redis-server redis-server"
	"redis-cli redis-tools"
	"wrk wrk"
	"hey hey"
	"curl curl"
	"prometheus prometheus" # v2.42 on Debian 12; brings promtool too
	"promtool prometheus"
	"gcc gcc" # go test -race needs cgo
)

log() { printf 'deps: %s\n' "$*"; }

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { log "go not found (need Go 1.26)"; exit 1; }

# --- Debian packages ---------------------------------------------------------
missing=()
for entry in "${APT_TOOLS[@]}"; do
	read -r cmd pkg <<<"$entry"
	if ! command -v "$cmd" >/dev/null 2>&1 && [[ " ${missing[*]} " != *" $pkg "* ]]; then
		missing+=("$pkg")
	fi
done
if [ "${#missing[@]}" -gt 0 ]; then
	sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || { log "need root or sudo to install: ${missing[*]}"; exit 1; }
		sudo=(sudo)
	fi
	log "apt-get install ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get update -qq
	"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	# The package's maintainer script starts a Prometheus service on :9090
	# where the init system lets it (systemd, or sysvinit without a
	# policy-rc.d that forbids it). The tests start their own; stop and
	# disable the one installed here (and only when installed here).
	if [[ " ${missing[*]} " == *" prometheus "* ]]; then
		if [ -d /run/systemd/system ]; then
			"${sudo[@]}" systemctl disable --now prometheus.service >/dev/null 2>&1 || true
		elif [ -x /etc/init.d/prometheus ]; then
			"${sudo[@]}" invoke-rc.d prometheus stop >/dev/null 2>&1 || true
			"${sudo[@]}" update-rc.d prometheus disable >/dev/null 2>&1 || true
		fi
	fi
fi

# --- Go tools ----------------------------------------------------------------
bindir="$(go env GOBIN)"
[ -n "$bindir" ] || bindir="$(go env GOPATH)/bin"
for entry in "${GO_TOOLS[@]}"; do
	read -r bin mod version pkg <<<"$entry"
	have=""
	if [ -x "$bindir/$bin" ]; then
		# The "mod" line of the build info names the module version it was built from.
		have="$(go version -m "$bindir/$bin" 2>/dev/null | awk -v m="$mod" '$1 == "mod" && $2 == m { print $3 }')"
	fi
	if [ "$have" != "$version" ]; then
		log "go install $pkg@$version${have:+ (found $have)}"
		go install "$pkg@$version"
	fi
done

for entry in "${APT_TOOLS[@]}"; do
	read -r cmd _ <<<"$entry"
	command -v "$cmd" >/dev/null 2>&1 || { log "$cmd still missing after install"; exit 1; }
done
summary="redis-server $(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p'), wrk, hey, curl"
summary+=", prometheus $(prometheus --version 2>&1 | sed -n '1s/^prometheus, version \([^ ]*\).*/\1/p')"
for entry in "${GO_TOOLS[@]}"; do
	read -r bin _ version _ <<<"$entry"
	summary+=", $bin $version"
done
log "ok: $summary (Go tools in $bindir)"
