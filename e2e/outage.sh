#!/usr/bin/env bash
# Redis outages under load against the real Caddy v2.11.9 and Traefik
# v3.6.12 (e2e/outage): with a steady load on three endpoints limited in
# Redis, one per failure policy (allow, deny, fallback local), Redis gets
# SCRIPT FLUSH, CLIENT KILL TYPE normal, SIGSTOP (hung), SIGKILL (gone) and
# a restart, on a fixed 11-second schedule. Checks, per host and policy:
# no failed request and no 5xx; every answer from Redis while it works
# (but for at most two, see run_outage);
# the policy's answers, each within 300 ms, while it is hung or gone;
# Redis deciding again within 2 s of the restart; once Redis answers again,
# every answer from Redis within 1.2 s (the breaker's backoff and twice the
# store's timeout), which admits at most its quota, and before that allow
# admitting all, deny none, fallback at most its local share; and the
# host's open file descriptors no more than its Redis pool can add. A fourth endpoint, max_in_flight 4 with fallback local and
# instances 1 in front of e2e/backend's requests held 1 s, gets the same
# load, more at once than the limit, through the same outage: no failed
# request, admissions in every phase, and the backend never has more than
# 4 of its requests in progress at once (and has 4). Then, on a fifth
# endpoint whose store follows the master a Redis Sentinel names (a
# master, a replica, one Sentinel), SENTINEL
# FAILOVER under load: the new master running the host's scripts within
# 4 s (the recovery, printed in seconds), no failed request, the policy
# answering for at most 4 s, no admission beyond the quota (the new master
# holds the counters it replicated). Everything listens on 127.0.0.1 and is
# stopped on exit; about 50 s in all.
set -euo pipefail

# The Redis servers here are daemons, whose pid files in TMP e2e_cleanup
# reads.
source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"
source e2e/testdata/traefik/lib.sh
e2e_keep_going
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

# start_redis PORT starts a redis-server without persistence and sets
# REDIS_PID; RESTART is the command that starts it again.
start_redis() {
	RESTART="redis-server --bind 127.0.0.1 --port $1 --save '' --appendonly no --logfile $TMP/redis-$1.log --daemonize yes --pidfile $TMP/redis-$1.pid"
	sh -c "$RESTART"
	port_wait "$1" 10 || die "redis-server did not listen on 127.0.0.1:$1"
	REDIS_PID="$(cat "$TMP/redis-$1.pid")"
}
# run_outage HOST HOST_PID PORT BASE COUNTS: the schedule against HOST's
# four endpoints under BASE, Redis on PORT; COUNTS is the address of the
# backend behind the in-flight endpoint.
#
# While Redis works, at most two answers per endpoint may come from the
# failure policy (the bound binds allow and deny: fallback's local answers
# carry X-RateLimit-Limit too, and inflight has checks of its own): a
# decision written to a connection just before CLIENT KILL drops it fails
# rather than being sent again, because Redis may have run it and dropped
# only its reply. In Caddy that is a decision in flight at the kill, or a
# batch of them in go-redis's automatic pipeline (go-redis checks an idle
# pooled connection before writing to it, here on plain TCP, so it writes
# none to a connection dropped while idle); CI saw one such answer in
# Caddy. The plugin's RESP client cannot make that check (it needs
# syscall, refused under Yaegi), so it may also write to a connection
# dropped while idle; the failed call closes the pool's idle connections.
# At this load that is one or two decisions.
run_outage() {
	local host="$1" hpid="$2" rport="$3" base="$4" counts="$5" before after line i warm=()
	# Four requests at once through the in-flight endpoint (a path the
	# backend counts apart) open the upstream connections its load reuses,
	# so that they count before the outage.
	for i in 1 2 3 4; do
		curl -s -o /dev/null --max-time 5 "$base/count/inflight-warm?sleep=300ms" &
		warm+=("$!")
	done
	wait "${warm[@]}" || true
	before="$(fds "$hpid")"
	while IFS= read -r line; do
		case "$line" in
		PASS:*) pass "$host: ${line#PASS: }" ;;
		FAIL:*) fail "$host: ${line#FAIL: }" ;;
		*) echo "$host: $line" ;;
		esac
	done < <("$TMP/outage" -redis "127.0.0.1:$rport" -pid "$REDIS_PID" -restart "$RESTART" \
		-counts "http://$counts/_counts?path=/count/inflight" -max-in-flight 4 -dropped 2 \
		"allow=$base/allow" "deny=$base/deny" "fallback=$base/fallback" "inflight=$base/count/inflight?sleep=1s" 2>&1 || true)
	# The last answers close their connections: wait for them, 5 s at most
	# (a loaded machine took more than the 1 s this waited before).
	for i in $(seq 10); do
		sleep 0.5
		after="$(fds "$hpid")"
		[ "$after" -le $((before + 12)) ] && break
	done
	# The Redis pools (10 connections each at most) may have grown.
	if [ "$after" -le $((before + 12)) ]; then
		pass "$host: $before open file descriptors before the outage, $after after (the Redis pool holds at most 10)"
	else
		fail "$host: $before open file descriptors before the outage, $after after: more than the Redis pool can hold"
	fi
	[ -f "$TMP/redis-$rport.pid" ] && kill "$(cat "$TMP/redis-$rport.pid")" 2>/dev/null || true
}

# wait_for SECONDS COMMAND... retries COMMAND every 0.1 s until it succeeds
# or SECONDS pass.
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.1
	done
}
# start_sentinel NAME starts a master, its replica and a Sentinel (quorum 1)
# monitoring them as mymaster, on loopback ports, and sets SENTINEL_PORT once
# the replica is in sync and the Sentinel knows it.
start_sentinel() {
	local dir="$TMP/sentinel-$1" m r s
	mkdir -p "$dir"
	m="$(free_port)"
	redis-server --bind 127.0.0.1 --port "$m" --dir "$dir" --save "" --appendonly no --repl-diskless-sync-delay 0 \
		--logfile "$dir/master.log" --daemonize yes --pidfile "$TMP/redis-$m.pid"
	port_wait "$m" 10 || die "the Sentinel's master did not listen"
	r="$(free_port)"
	redis-server --bind 127.0.0.1 --port "$r" --dir "$dir" --save "" --appendonly no --repl-diskless-sync-delay 0 --replicaof 127.0.0.1 "$m" \
		--logfile "$dir/replica.log" --daemonize yes --pidfile "$TMP/redis-$r.pid"
	wait_for 15 sh -c "redis-cli -p $m INFO replication | grep -q 'state=online'" || die "the replica did not sync"
	s="$(free_port)"
	printf 'port %s\nbind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor mymaster 127.0.0.1 %s 1\nsentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 2000\n' \
		"$s" "$dir" "$m" >"$dir/sentinel.conf"
	redis-server "$dir/sentinel.conf" --sentinel --logfile "$dir/sentinel.log" --daemonize yes --pidfile "$TMP/redis-$s.pid"
	wait_for 15 sh -c "redis-cli -p $s SENTINEL replicas mymaster | grep -qx $r" || die "the Sentinel did not learn of the replica: $(tail -5 "$dir/sentinel.log")"
	SENTINEL_PORT=$s
}
# run_failover HOST URL: SENTINEL FAILOVER under load of URL, whose store
# follows the Sentinel's master; then the Sentinel's servers are stopped.
run_failover() {
	local host="$1" line f
	while IFS= read -r line; do
		case "$line" in
		PASS:*) pass "$host: ${line#PASS: }" ;;
		FAIL:*) fail "$host: ${line#FAIL: }" ;;
		*) echo "$host: $line" ;;
		esac
	done < <("$TMP/outage" -sentinel "127.0.0.1:$SENTINEL_PORT" -master mymaster "allow=$2" 2>&1 || true)
	for f in "$TMP"/redis-*.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null && rm -f "$f"
	done
	return 0
}

e2e_build e2e/outage e2e/backend

# --- caddy -------------------------------------------------------------------
# $SLUICE_E2E_CADDY names another Caddy binary to test (one built from an
# older tree, say).
CADDY="${SLUICE_E2E_CADDY:-./caddy}"
[ -x "$CADDY" ] || e2e_build_caddy
backend_port="$(free_port)"
e2e_start_backend "$backend_port"
rport="$(free_port)"
start_redis "$rport"
start_sentinel caddy
port="$(free_port)"
{
	echo "{"
	echo "	admin off"
	echo "}"
	echo "http://127.0.0.1:$port {"
	for policy in allow deny fallback; do
		echo "	handle /$policy {"
		echo "		sluice {"
		rate=1/h
		[ "$policy" = fallback ] && rate=2/h
		echo "			zone $policy {"
		echo "				rate $rate"
		echo "			}"
		echo "			store redis {"
		echo "				address 127.0.0.1:$rport"
		echo "			}"
		if [ "$policy" = fallback ]; then
			echo "			fallback local"
			echo "			instances 2"
		else
			echo "			on_store_error $policy"
		fi
		echo "		}"
		echo "		respond \"ok\""
		echo "	}"
	done
	echo "	handle /count/inflight* {"
	echo "		sluice {"
	echo "			zone inflight {"
	echo "				key global"
	echo "				max_in_flight 4"
	echo "			}"
	echo "			store redis {"
	echo "				address 127.0.0.1:$rport"
	echo "			}"
	echo "			fallback local"
	echo "			instances 1"
	echo "		}"
	echo "		reverse_proxy 127.0.0.1:$backend_port"
	echo "	}"
	echo "	handle /failover {"
	echo "		sluice {"
	echo "			zone failover {"
	echo "				rate 1/h"
	echo "			}"
	echo "			store redis {"
	echo "				sentinel mymaster 127.0.0.1:$SENTINEL_PORT"
	echo "			}"
	echo "		}"
	echo "		respond \"ok\""
	echo "	}"
	echo "}"
} >"$TMP/Caddyfile"
e2e_start_caddy caddy "$TMP/Caddyfile" "$port"
caddy_pid=$CADDY_PID
run_outage caddy "$caddy_pid" "$rport" "http://127.0.0.1:$port" "127.0.0.1:$backend_port"
run_failover caddy "http://127.0.0.1:$port/failover"

# --- traefik -----------------------------------------------------------------
tl_traefik
rport="$(free_port)"
start_redis "$rport"
start_sentinel traefik
backend_port="$(free_port)" tport="$(free_port)"
e2e_start_backend "$backend_port"
run="$TMP/run"
tl_plugin_tree "$run"
{
	tl_backend "$backend_port"
	for policy in allow deny fallback failover; do
		tl_router "$policy" "/$policy" "$policy"
	done
	tl_router inflight /count/inflight inflight
	echo "  middlewares:"
	for policy in allow deny fallback; do
		opt="average: 1, onStoreError: $policy"
		[ "$policy" = fallback ] && opt="average: 2, fallback: local, instances: 2"
		echo "    $policy:"
		echo "      plugin:"
		echo "        sluice: {$opt, period: 1h, redis: {endpoints: [\"127.0.0.1:$rport\"]}}"
	done
	echo "    inflight:"
	echo "      plugin:"
	echo "        sluice: {maxInFlight: 4, key: [\"const:inflight\"], fallback: local, instances: 1, redis: {endpoints: [\"127.0.0.1:$rport\"]}}"
	echo "    failover:"
	echo "      plugin:"
	echo "        sluice: {average: 1, period: 1h, redis: {sentinel: {masterName: mymaster, endpoints: [\"127.0.0.1:$SENTINEL_PORT\"]}}}"
} >"$run/dynamic.yml"
tl_static "$run" "$tport"
tl_up "$run" "$tport" /allow
traefik_pid=$LAST_PID
# The readiness probe took /allow's one request: Redis holds its state.
run_outage traefik "$traefik_pid" "$rport" "http://127.0.0.1:$tport" "127.0.0.1:$backend_port"
run_failover traefik "http://127.0.0.1:$tport/failover"

e2e_verdict outage
