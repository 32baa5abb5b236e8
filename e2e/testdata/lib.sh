# shellcheck shell=bash
# Shell helpers shared by the e2e scripts (e2e/*.sh) and the bench scripts
# that start real servers (bench/*.sh, bench/*/run.sh), sourced right after
# `set -euo pipefail` (bash); e2e/testdata/traefik/lib.sh builds on it.
# Sourcing it, once:
#
#   - sets REPO to the repository root and changes to it; puts
#     /usr/local/go/bin on PATH when go is not on it; sources
#     scripts/ports.sh (port_open, free_port, port_wait);
#   - makes TMP, the script's temporary directory, where Caddy's autosaved
#     config and data go too (XDG_CONFIG_HOME, XDG_DATA_HOME), not $HOME;
#   - sets the EXIT trap to e2e_cleanup, and exits 130 on SIGINT or SIGTERM.
#
# The processes started here join PIDS, stopped on exit; the logs they write
# join LOGS, whose last lines die shows. Everything listens on 127.0.0.1
# only, and every wait is bounded.

! declare -F e2e_cleanup >/dev/null || return 0 # sourced already

# The script that sourced this, from the repository root (e2e/caddy.sh): the
# name its PASS and FAIL lines carry.
E2E_SCRIPT="$(cd "$(dirname "${BASH_SOURCE[-1]}")" && pwd)/$(basename "${BASH_SOURCE[-1]}")"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
E2E_SCRIPT="${E2E_SCRIPT#"$REPO"/}"
cd "$REPO"
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
# port_open, free_port and port_wait.
source "$REPO/scripts/ports.sh"

E2E_TAG=" $E2E_SCRIPT" # after PASS and FAIL; empty after e2e_keep_going
E2E_KEEP_GOING=0
FAILURES=0  # checks fail counted, after e2e_keep_going
PIDS=()     # processes started here, oldest first: stopped by e2e_cleanup
LOGS=()     # logs shown by die
LAST_PID="" # the process e2e_start (or tl_start_traefik) started last
CADDY=./caddy
TMP="$(mktemp -d "${TMPDIR:-/tmp}/sluice-$(tr / - <<<"${E2E_SCRIPT%.sh}").XXXXXX")"
export XDG_CONFIG_HOME="$TMP/config" XDG_DATA_HOME="$TMP/data"
trap e2e_cleanup EXIT
trap 'exit 130' INT TERM

# pass MESSAGE prints the PASS line of a check, "PASS e2e/NAME.sh: MESSAGE"
# ("PASS: MESSAGE" after e2e_keep_going).
pass() { echo "PASS$E2E_TAG: $*"; }

# fail MESSAGE prints the FAIL line of a check and ends the script as die
# does; after e2e_keep_going, it counts the failure in FAILURES instead, for
# e2e_verdict, and returns.
fail() {
	[ "$E2E_KEEP_GOING" = 1 ] || die "$@"
	echo "FAIL$E2E_TAG: $*"
	FAILURES=$((FAILURES + 1))
}

# die MESSAGE prints the FAIL line MESSAGE and the last 20 lines of every
# log in LOGS, and exits 1: a failure past which nothing can be checked.
die() {
	local f
	echo "FAIL$E2E_TAG: $*"
	for f in "${LOGS[@]}"; do
		echo "--- last lines of $(basename "$f")"
		tail -n 20 "$f" || true
	done
	exit 1
}

# e2e_keep_going makes fail count a failed check and return, for a script
# that goes on to its other checks and ends with e2e_verdict; its PASS and
# FAIL lines then carry no script name ("FAIL: MESSAGE").
e2e_keep_going() { E2E_KEEP_GOING=1 E2E_TAG=""; }

# e2e_verdict NAME prints "NAME: all checks passed", or "NAME: N check(s)
# FAILED" and returns 1 when fail counted N failures: a script's last
# command, its exit status.
e2e_verdict() {
	if [ "$FAILURES" -gt 0 ]; then
		echo "$1: $FAILURES check(s) FAILED"
		return 1
	fi
	echo "$1: all checks passed"
}

# e2e_need TOOL... dies unless every TOOL is a command on PATH.
e2e_need() {
	local tool
	for tool in "$@"; do
		command -v "$tool" >/dev/null 2>&1 || die "$tool not found (run ./test.sh deps, which installs it)"
	done
}

# e2e_build PACKAGE... builds each Go package of the repository (e2e/backend)
# into TMP, named after its last element ($TMP/backend), or dies.
e2e_build() {
	local pkg
	for pkg in "$@"; do
		go build -o "$TMP/$(basename "$pkg")" "./$pkg" || die "building $pkg failed"
	done
}

# e2e_build_caddy builds ./caddy from this tree with ./xcaddy.sh (which
# rebuilds only when a source is newer; 30 minutes at most), or dies.
e2e_build_caddy() {
	timeout 1800 ./xcaddy.sh build || die "./xcaddy.sh build failed"
}

# e2e_start LOG COMMAND... runs COMMAND in the background, its output
# appended to LOG, which joins LOGS; its pid joins PIDS and is left in
# LAST_PID. The environment of the call reaches COMMAND
# (NAME=VALUE e2e_start ...).
e2e_start() {
	local log="$1"
	shift
	[[ " ${LOGS[*]} " == *" $log "* ]] || LOGS+=("$log")
	"$@" >>"$log" 2>&1 &
	LAST_PID=$!
	PIDS+=("$LAST_PID")
}

# e2e_wait_port PORT PID NAME waits up to 30 seconds for the process PID,
# called NAME, to listen on 127.0.0.1:PORT, without sending it a request
# (which would spend quota); it dies if the process exits first or the time
# runs out.
e2e_wait_port() {
	port_wait "$1" 30 "$2" && return 0
	kill -0 "$2" 2>/dev/null || die "$3 exited before listening on 127.0.0.1:$1"
	die "$3 not listening on 127.0.0.1:$1 after 30s"
}

# e2e_start_redis PORT starts a redis-server on 127.0.0.1:PORT without
# persistence, logging to $TMP/redis-PORT.log, waits for it and sets
# REDIS_PID.
e2e_start_redis() {
	e2e_start "$TMP/redis-$1.log" redis-server --bind 127.0.0.1 --port "$1" --save "" --appendonly no
	REDIS_PID=$LAST_PID
	e2e_wait_port "$1" "$REDIS_PID" redis-server
}

# e2e_start_backend PORT starts e2e/backend, which e2e_build e2e/backend put
# in TMP, on 127.0.0.1:PORT, logging to $TMP/backend.log, and waits for it.
e2e_start_backend() {
	e2e_start "$TMP/backend.log" "$TMP/backend" -addr "127.0.0.1:$1"
	e2e_wait_port "$1" "$LAST_PID" backend
}

# e2e_start_caddy NAME CONFIG PORT... runs $CADDY (./caddy unless the script
# set it) with the Caddyfile CONFIG (JSON if its name ends in .json), its
# output in $TMP/NAME.log, waits until it listens on every PORT and sets
# CADDY_PID. The environment of the call reaches Caddy
# (SLUICE_E2E_PORT=... e2e_start_caddy ...).
e2e_start_caddy() {
	local name="$1" config="$2" port adapter=(--adapter caddyfile)
	shift 2
	[[ "$config" != *.json ]] || adapter=()
	e2e_start "$TMP/$name.log" "$CADDY" run --config "$config" "${adapter[@]}"
	CADDY_PID=$LAST_PID
	for port in "$@"; do
		e2e_wait_port "$port" "$CADDY_PID" "caddy ($name)"
	done
}

# e2e_start_prometheus RULES JOB=TARGET... starts Prometheus on a free port,
# PROM_PORT, evaluating the rules file RULES (from the repository root) and
# scraping each TARGET (host:port, then a path, /metrics if none) as job JOB,
# both every second, and waits until every job is up (20 s at most for each).
e2e_start_prometheus() {
	local rules="$1" job name target path out i
	shift
	PROM_PORT="$(free_port)"
	{
		printf 'global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n'
		printf 'rule_files:\n  - %s\nscrape_configs:\n' "$REPO/$rules"
		for job in "$@"; do
			target="${job#*=}" path=/metrics
			if [[ "$target" == */* ]]; then
				path="/${target#*/}" target="${target%%/*}"
			fi
			printf '  - job_name: %s\n    metrics_path: %s\n    static_configs:\n      - targets: ['\''%s'\'']\n' \
				"${job%%=*}" "$path" "$target"
		done
	} >"$TMP/prometheus.yml"
	e2e_start "$TMP/prometheus.log" prometheus --config.file="$TMP/prometheus.yml" \
		--storage.tsdb.path="$TMP/prometheus-data" --web.listen-address="127.0.0.1:$PROM_PORT"
	e2e_wait_port "$PROM_PORT" "$LAST_PID" prometheus
	for job in "$@"; do
		name="${job%%=*}"
		for ((i = 0; i < 100; i++)); do
			out="$(e2e_query "up{job=\"$name\"} == 1")"
			[[ "$out" == *'=>'* ]] && break
			sleep 0.2
		done
		[[ "$out" == *'=>'* ]] || die "Prometheus has not scraped job $name (${job#*=}) after 20s: $out"
	done
}

# e2e_query EXPR prints the answer of the Prometheus on PROM_PORT to the
# instant query EXPR, as promtool writes it ({labels} => value @[time], a
# sample a line), or promtool's error.
e2e_query() { promtool query instant "http://127.0.0.1:$PROM_PORT" "$1" 2>&1 || true; }

# e2e_stop PID... stops the processes PID: SIGCONT (for one frozen by
# SIGSTOP) and SIGTERM, then SIGKILL for any still running 5 seconds later;
# they leave PIDS.
e2e_stop() {
	local pid i alive kept=()
	for pid in "$@"; do
		kill -CONT "$pid" 2>/dev/null || true
		kill -TERM "$pid" 2>/dev/null || true
	done
	for ((i = 0; i < 50; i++)); do
		alive=0
		for pid in "$@"; do
			! kill -0 "$pid" 2>/dev/null || alive=1
		done
		[ "$alive" = 1 ] || break
		sleep 0.1
	done
	for pid in "$@"; do
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		[[ " $* " == *" $pid "* ]] || kept+=("$pid")
	done
	PIDS=("${kept[@]}")
}

# e2e_cleanup, the EXIT trap, stops every process in PIDS, newest first, and
# every daemon that left its pid in a file $TMP/*.pid, then removes TMP.
e2e_cleanup() {
	local i f newest=()
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		newest+=("${PIDS[$i]}")
	done
	[ "${#newest[@]}" -eq 0 ] || e2e_stop "${newest[@]}"
	for f in "$TMP"/*.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
	done
	rm -rf "$TMP"
}
