#!/usr/bin/env bash
# End-to-end "observe before enforce" (seed 004's method, docs/observability.md)
# in both hosts: a real Caddy built by ./xcaddy.sh and a real Traefik v3.6.12
# with sluice from plugins-local, each scraped every second by a real
# Prometheus (Debian's) with docs/prometheus/rules.yml loaded. For each host:
#
#   observe  a zone in dry_run (5/1s, burst 5, keyed on X-Client) answers
#            every request of a trace 200: 1,200 requests of 40 clients over
#            3 s, their shares following Zipf's law (e2e/observe load);
#   advise   once its periods are over, the zone's advice (Caddy's admin API,
#            the plugin's metrics listener) counts the clients and
#            key-periods, and its candidate double (10/1s, burst 10: what
#            the operator picks, the configured limit being too tight for
#            the heavy clients) is picked (e2e/observe pick);
#            `sluice calc --demand` explains the advice in words;
#   enforce  the zone is switched to enforce with the picked limit (caddy
#            reload; Traefik's file provider watching its file), and the
#            same trace is sent again: some requests are refused now, at
#            least half the share of cost the advice said the limit would
#            refuse at least (timing moves requests across periods);
#   watch    Prometheus holds, for the host's job, the dry-run rejections
#            and the enforced ones, the demand quantiles and the recording
#            rules the dashboard reads, as promtool query instant shows.
#
# Prints PASS lines with the figures, or FAIL and the logs. Everything
# listens on 127.0.0.1; every wait is bounded. About a minute, plus the
# builds (Traefik's is cached by scripts/build-traefik.sh).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"
source e2e/testdata/traefik/lib.sh

e2e_need go curl prometheus promtool
e2e_build e2e/observe cmd/sluice e2e/backend
e2e_build_caddy
tl_traefik

# The zone's limit while it is observed, and the trace both phases send.
readonly rate=5/1s burst=5
trace=(-clients 40 -requests 1200 -seconds 3)

# --- caddy -------------------------------------------------------------------
caddy_port="$(free_port)"
caddy_admin="$(free_port)"
# caddy_config MODE RATE BURST writes the Caddyfile of the zone api.
caddy_config() {
	cat >"$TMP/Caddyfile" <<EOF
{
	admin 127.0.0.1:$caddy_admin
	persist_config off
	auto_https off
}

http://:$caddy_port {
	bind 127.0.0.1
	sluice {
		mode $1
		zone api {
			key {http.request.header.X-Client}
			rate $2
			burst $3
		}
	}
	respond "ok"
}
EOF
}
caddy_config dry_run "$rate" "$burst"
e2e_start_caddy caddy "$TMP/Caddyfile" "$caddy_port" "$caddy_admin"

# --- traefik -----------------------------------------------------------------
backend_port="$(free_port)"
e2e_start_backend "$backend_port"
traefik_port="$(free_port)"
traefik_metrics="$(free_port)"
tl_plugin_tree "$TMP/traefik"
# traefik_config MODE AVERAGE PERIOD BURST writes the dynamic configuration
# of the middleware api (written whole, then moved, so that the watching
# provider never reads half a file).
traefik_config() {
	{
		tl_one_plugin "$backend_port" api
		cat <<EOF
          mode: "$1"
          average: "$2"
          period: "$3"
          burst: "$4"
          sourceCriterion:
            requestHeaderName: "X-Client"
          metrics:
            address: "127.0.0.1:$traefik_metrics"
EOF
	} >"$TMP/traefik/dynamic.new"
	mv "$TMP/traefik/dynamic.new" "$TMP/traefik/dynamic.yml"
}
traefik_config dry_run "${rate%/*}" "${rate#*/}" "$burst"
tl_static "$TMP/traefik" "$traefik_port"
sed -i 's/^    watch: false$/    watch: true/' "$TMP/traefik/static.yml"
grep -q '^    watch: true$' "$TMP/traefik/static.yml" || fail "could not turn the file provider's watch on"
tl_up "$TMP/traefik" "$traefik_port" /

# --- prometheus --------------------------------------------------------------
e2e_start_prometheus docs/prometheus/rules.yml "caddy=127.0.0.1:$caddy_admin" "traefik=127.0.0.1:$traefik_metrics"

# wait_query EXPR WHAT waits (10 s at most) until EXPR has a sample, and
# prints the answer.
wait_query() {
	local out i
	for ((i = 0; i < 50; i++)); do
		out="$(e2e_query "$1")"
		[[ "$out" == *'=>'* ]] && break
		sleep 0.2
	done
	[[ "$out" == *'=>'* ]] || fail "$2: Prometheus has no sample of $1 after 10 s: $out"
	echo "$out"
}
pass "Prometheus (127.0.0.1:$PROM_PORT) scrapes caddy (admin /metrics) and traefik (the plugin's metrics listener) every second"

# --- the sequence, in each host ----------------------------------------------
# observe_host HOST URL ZONE ADVICE_URL runs observe, advise, enforce and
# watch on one host; enforce_HOST RATE BURST switches its zone.
enforce_caddy() {
	caddy_config enforce "$1" "$2"
	./caddy reload --config "$TMP/Caddyfile" --adapter caddyfile --address "127.0.0.1:$caddy_admin" >>"$TMP/caddy.log" 2>&1 ||
		fail "caddy reload failed"
}
enforce_traefik() {
	traefik_config enforce "${1%/*}" "${1#*/}" "$2"
}
observe_host() {
	local host="$1" url="$2" zone="$3" advice="$4" out sent refused picked prate pburst predicted i
	out="$("$TMP/observe" load -url "$url" "${trace[@]}")" || fail "$host: the dry_run trace: $out"
	read -r _ sent _ _ _ refused _ _ <<<"$out"
	[ "$refused" = 0 ] || fail "$host: in dry_run, $refused of $sent requests were refused: $out"
	sleep 1.1 # the trace's last period is over
	picked="$("$TMP/observe" pick -advice "$advice" -out "$TMP/$host-advice.json")" || fail "$host: advice: $picked"
	read -r prate pburst predicted <<<"$picked"
	# 40 clients; in Traefik 41, its readiness probe (tl_wait_traefik,
	# without X-Client) being one more.
	grep -Eq '"keys":4[01],' "$TMP/$host-advice.json" || fail "$host: the advice does not count the 40 clients: $(cat "$TMP/$host-advice.json")"
	out="$("$TMP/sluice" calc --demand "$TMP/$host-advice.json")" || fail "$host: sluice calc --demand: $out"
	[[ "$out" == *double*"$prate"* ]] || fail "$host: sluice calc --demand does not show the candidate double ($prate): $out"
	pass "$host: observe: zone $zone in dry_run answered all $sent requests 200; its advice counts $(grep -o '"keys":[0-9]*' "$TMP/$host-advice.json" | cut -d: -f2) clients in $(grep -o '"key_periods":[0-9]*' "$TMP/$host-advice.json" | cut -d: -f2) key-periods, p99 $(grep -o '"p99":[0-9.]*' "$TMP/$host-advice.json" | cut -d: -f2) a period; the pick, the configured limit doubled: $prate burst $pburst, refusing at least $predicted of the cost; sluice calc --demand explains it"

	"enforce_$host" "$prate" "$pburst"
	for ((i = 0; i < 100; i++)); do # the new limit answers (Traefik's provider throttles reloads)
		curl -sS --max-time 2 -D "$TMP/h" -o /dev/null -H "X-Client: probe-$i" "$url" >/dev/null 2>&1 || true
		grep -qix "X-RateLimit-Limit: $pburst.\{0,1\}" "$TMP/h" 2>/dev/null && break
		sleep 0.1
	done
	grep -qix "X-RateLimit-Limit: $pburst.\{0,1\}" "$TMP/h" || fail "$host: the zone does not answer with a capacity of $pburst 10 s after switching: $(tr -d '\r' <"$TMP/h" | tr '\n' '|')"
	out="$("$TMP/observe" load -url "$url" "${trace[@]}")" || fail "$host: the enforced trace: $out"
	read -r _ sent _ _ _ refused _ share <<<"$out"
	awk -v s="$share" -v p="$predicted" 'BEGIN { exit !(s > 0 && s >= p / 2) }' ||
		fail "$host: enforced, $refused of $sent refused (share $share), the advice said at least $predicted of the cost"
	pass "$host: enforce: $prate burst $pburst refused $refused of the same $sent requests (share $share; the advice: at least $predicted of the cost)"

	# Prometheus saw the dry run, the enforcement and the demand.
	wait_query "sum by (job) (increase(sluice_decisions_total{job=\"$host\",outcome=\"dry_run_rejected\"}[5m])) > 0" "$host: dry-run rejections" >/dev/null
	out="$(wait_query "sum by (job) (increase(sluice_decisions_total{job=\"$host\",outcome=\"rejected\"}[5m])) > 0" "$host: rejections")"
	wait_query "sluice_demand{job=\"$host\",quantile=\"0.99\"}" "$host: demand" >/dev/null
	wait_query "job_zone:sluice_decisions_rejected:ratio_rate5m{job=\"$host\"}" "$host: the rejected share the dashboard reads" >/dev/null
	pass "$host: watch: Prometheus holds its dry-run rejections, its rejections ($(sed -n 's/.*=> \([0-9]*\).*/\1/p' <<<"$out" | head -1) in 5m, as increase() extrapolates), the demand's p99 and the rejected share of the recording rules"
}

observe_host caddy "http://127.0.0.1:$caddy_port/" api "http://127.0.0.1:$caddy_admin/sluice/zones/api/advice"
observe_host traefik "http://127.0.0.1:$traefik_port/" api@file "http://127.0.0.1:$traefik_metrics/sluice/zones/api@file/advice"
