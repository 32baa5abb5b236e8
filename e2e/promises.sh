#!/usr/bin/env bash
# The promise checker (e2e/promises): sluice run as users deploy it, every
# bound of README.md and SECURITY.md held from the outside while the
# network between the hosts and Redis, and Redis itself, break on a
# schedule drawn from a seed.
#
#   two Caddys built by ./xcaddy.sh and a Go service (sluicehttp, run by
#   e2e/promises as a process of its own) sharing their limits through
#   one Redis; two Traefiks
#   v3.6.12 (scripts/build-traefik.sh) with sluice from plugins-local on
#   the same Redis; two Caddys on a Redis Cluster of three masters; every
#   host's Redis traffic through a toxiproxy proxy of its own; e2e/backend
#   behind the upstream routes, counting what reaches it.
#
# e2e/promises starts Redis, the Cluster, the proxies and the Go service
# and writes the hosts' configurations (hosts.env names them); this
# script then starts the Caddys and Traefiks, and e2e/promises runs the
# seeded workload, the faults, the reloads and the defect scenarios, and
# checks (the list and -only: go doc ./e2e/promises). Arguments go to
# e2e/promises:
#
#   bash e2e/promises.sh                      # small mode: 100 s of load, about 2 minutes in all (CI)
#   bash e2e/promises.sh -seed 42 -only bound,defect7
#   bash e2e/promises.sh -mode long           # 30 minutes of load, about a million requests, 375 faults
#
# Without arguments, CI (CI=true) runs seed 194973, so that a red run
# replays as it failed; anywhere else the seed is drawn afresh each run.
#
# On a violation it prints the seed, the fault schedule and the trace that
# shows it, and exits non-zero. $SLUICE_E2E_CADDY names another Caddy
# binary to test. Everything listens on 127.0.0.1 and is stopped on exit.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"
source e2e/testdata/traefik/lib.sh

if [ "${CI:-}" = true ] && [ "$#" -eq 0 ]; then
	set -- -seed 194973
fi

e2e_need go curl redis-server redis-cli
e2e_build e2e/promises e2e/backend
CADDY="${SLUICE_E2E_CADDY:-./caddy}"
[ -n "${SLUICE_E2E_CADDY:-}" ] || e2e_build_caddy
tl_traefik

backend_port="$(free_port)"
e2e_start_backend "$backend_port"

# e2e/promises first: Redis, the Cluster and the proxies the hosts dial.
"$TMP/promises" -dir "$TMP" -backend "127.0.0.1:$backend_port" -caddy "$CADDY" "$@" &
checker=$!
PIDS+=("$checker")
for ((i = 0; i < 600; i++)); do
	[ -f "$TMP/proxies.ready" ] && break
	kill -0 "$checker" 2>/dev/null || break
	sleep 0.1
done
if [ ! -f "$TMP/proxies.ready" ]; then
	wait "$checker" || true
	die "e2e/promises did not start Redis and its proxies"
fi

# shellcheck source=/dev/null
source "$TMP/hosts.env"
for c in $CADDYS; do
	read -r file port admin <<<"${!c}"
	e2e_start_caddy "caddy.$c" "$file" "$port" "$admin"
done
for tr in $TRAEFIKS; do
	read -r dir port <<<"${!tr}"
	tl_plugin_tree "$dir"
	tl_static "$dir" "$port"
	# The workload's reloads rewrite the dynamic configuration.
	sed -i -e 's/^    watch: false$/    watch: true/' -e 's/^providers:$/providers:\n  providersThrottleDuration: 0s/' "$dir/static.yml"
	tl_up "$dir" "$port" /ready
done
touch "$TMP/hosts.ready"

status=0
wait "$checker" || status=$?
exit "$status"
