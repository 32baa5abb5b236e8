#!/usr/bin/env bash
# End-to-end test of docs/prometheus/rules.yml and
# docs/grafana/sluice-dashboard.json against a real Prometheus (Debian's
# package, 2.42 on Debian 12) scraping every second the hosts named in JOBS
# below. Everything listens on 127.0.0.1, every wait is bounded, and every
# process started here is stopped on exit.
#
#   rules      promtool check rules passes on the rules file, and the
#              Prometheus started here loads every rule in it, healthy.
#   caddy      ./caddy (built or reused by ./xcaddy.sh) with three sluice
#              handlers: zone enforced (memory, 10/1h, near_limit 0.5), zone
#              observed (mode dry_run, 10/1s, whose periods end within the
#              test, for the demand families) and zone stored (the
#              redis-server, breaker 3 1m, on_store_error allow);
#              Prometheus scrapes its admin endpoint's /metrics, and its
#              metrics handler at /metrics serves the same families.
#   traefik    a real Traefik v3.6.12 (scripts/build-traefik.sh) with
#              sluice from plugins-local, its middlewares alike (enforced
#              4/1h, observed in dry_run, stored on the same redis-server),
#              every one with metrics on one listener, which Prometheus
#              scrapes.
#   load       in each host, 3 clients spend the enforced zone (its quota
#              of 20 requests each admitted) and the observed one, 10
#              requests go through Redis, then Redis is frozen (SIGSTOP)
#              and 10 more fail in the store, opening the breakers.
#   alert      SluiceRejectionsHigh goes pending (or firing) for zone
#              enforced of each host, read from Prometheus's /api/v1/alerts. Prometheus
#              evaluates the rules every second here, and an alert is
#              pending as soon as its expression holds, so the rule's
#              production `for: 10m` does not slow the test.
#   queries    every PromQL expression of the rules file (as Prometheus
#              parsed it) and every panel target and template variable of
#              the dashboard, evaluated with `promtool query instant`,
#              returns at least one sample of each job: the alerts' too,
#              their conditions being what the load above brought about.
#              In dashboard expressions $job is the job, $zone is .*, and
#              $__rate_interval is 1m.
#
# An expression is checked when every metric family it reads is in
# FAMILIES (directly, or through the recording rules it reads); the others
# are listed as "not checked yet", and a family that core/telemetry does
# not define fails the test (a typo). A job in JOBS needs a start_<job>
# function, which sets target[<job>] to the host:port Prometheus scrapes,
# metrics_path[<job>], base[<job>], the URL its routes hang from, and
# quota[<job>], its zone enforced's quota.
#
# Prints PASS/FAIL lines and exits non-zero on the first failure, after
# showing the logs of the servers it started.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testdata/lib.sh"
source e2e/testdata/traefik/lib.sh

# The Prometheus jobs, one per host, that every checked expression must
# return samples of.
JOBS=(caddy traefik)
# The metric families (core/telemetry) that every job in JOBS exports in
# this tree.
FAMILIES=(sluice_decisions_total sluice_decision_seconds sluice_store_breaker_state sluice_demand sluice_demand_key_periods_total)

readonly rules_file=docs/prometheus/rules.yml
readonly dashboard_file=docs/grafana/sluice-dashboard.json
# What the dashboard's expressions are evaluated with, besides $job.
readonly zone_value='.*' rate_interval=1m

e2e_need go curl redis-server prometheus promtool

# --- helpers -----------------------------------------------------------------
# $TMP/promjson reads the JSON this script needs.
e2e_build e2e/promjson

# The families core/telemetry defines: an expression that reads another
# sluice_ name has a typo.
telemetry="$(cat core/telemetry/telemetry.go)"
declare -A known_family checked_family
while read -r f; do
	known_family[$f]=1
done < <(grep -oE '"sluice_[a-z0-9_]+"' <<<"$telemetry" | tr -d '"')
[ "${#known_family[@]}" -ge 5 ] || fail "core/telemetry/telemetry.go names ${#known_family[@]} families, want at least 5"
for f in "${FAMILIES[@]}"; do
	[ -n "${known_family[$f]+x}" ] || fail "FAMILIES has $f, which core/telemetry does not define"
	checked_family[$f]=1
done

# recorded maps a recording rule's name to its expression (set once
# Prometheus has loaded the rules).
declare -A recorded
# add_families adds to the set fams the families the expression $1 reads,
# through the recording rules it reads; it fails on a name it cannot place.
# (No subshell, so that fail ends the script.)
declare -A fams
add_families() {
	local toks tok base
	toks="$(grep -oE '[A-Za-z_][A-Za-z0-9_:]*' <<<"$1" || true)"
	for tok in $toks; do
		if [[ "$tok" == *:* ]]; then
			[ -n "${recorded[$tok]+x}" ] || fail "expression reads $tok, which no recording rule in $rules_file records: $1"
			add_families "${recorded[$tok]}"
		elif [[ "$tok" == sluice_* ]]; then
			base="$tok"
			if [ -z "${known_family[$base]+x}" ]; then
				base="${tok%_bucket}" base="${base%_sum}" base="${base%_count}"
			fi
			[ -n "${known_family[$base]+x}" ] || fail "expression reads $tok, which core/telemetry does not define: $1"
			fams[$base]=1
		fi
	done
}
# set_missing sets missing to the families, space-separated, that the
# expression $1 reads and that are not in FAMILIES.
missing=""
set_missing() {
	local f
	fams=()
	add_families "$1"
	missing=""
	for f in $(printf '%s\n' "${!fams[@]}" | LC_ALL=C sort); do
		[ -n "${checked_family[$f]+x}" ] || missing+="${missing:+ }$f"
	done
}

# --- hosts -------------------------------------------------------------------
declare -A target metrics_path base quota

# One redis-server, which the hosts' zones stored share.
redis_port="$(free_port)"
e2e_start_redis "$redis_port"
redis_pid=$REDIS_PID

# start_caddy starts redis-server and ./caddy with three sluice handlers and
# sets target[caddy] to its admin endpoint, whose /metrics Prometheus scrapes.
start_caddy() {
	e2e_build_caddy

	cat >"$TMP/Caddyfile" <<'EOF'
{
	admin 127.0.0.1:{$SLUICE_E2E_ADMIN_PORT}
	persist_config off
	auto_https off
}

http://:{$SLUICE_E2E_PORT} {
	bind 127.0.0.1
	handle /metrics {
		metrics
	}
	handle /observed {
		sluice {
			zone observed {
				key {http.request.header.X-E2E-Client}
				rate 10/1s
			}
			mode dry_run
		}
		respond "ok"
	}
	handle /stored {
		sluice {
			zone stored {
				key {http.request.header.X-E2E-Client}
				rate 1000/1h
			}
			store redis {
				address {$SLUICE_E2E_REDIS}
				prefix {$SLUICE_E2E_PREFIX}
				timeout 100ms
				breaker 3 1m
			}
			on_store_error allow
		}
		respond "ok"
	}
	handle {
		sluice {
			zone enforced {
				key {http.request.header.X-E2E-Client}
				rate 10/1h
				near_limit 0.5
			}
		}
		respond "ok"
	}
}
EOF
	caddy_port="$(free_port)"
	caddy_admin_port="$(free_port)"
	SLUICE_E2E_PORT="$caddy_port" SLUICE_E2E_ADMIN_PORT="$caddy_admin_port" \
		SLUICE_E2E_REDIS="127.0.0.1:$redis_port" SLUICE_E2E_PREFIX="sluice-e2e-prom-$$:" \
		e2e_start_caddy caddy "$TMP/Caddyfile" "$caddy_port" "$caddy_admin_port"
	target[caddy]="127.0.0.1:$caddy_admin_port"
	metrics_path[caddy]=/metrics
	base[caddy]="http://127.0.0.1:$caddy_port"
	quota[caddy]=10
}

# start_traefik starts e2e/backend and a real Traefik (scripts/build-traefik.sh)
# with sluice from plugins-local: middlewares enforced (4 an hour, so that
# the last admission of a client, a near miss under the plugin's near-limit
# share of 0.1, is a quarter of them), observed (dry_run, 10/1s) and stored
# (the redis-server, onStoreError allow), each with metrics on one
# listener, which Prometheus scrapes.
start_traefik() {
	local dir="$TMP/traefik" backend_port traefik_port metrics_port
	tl_traefik
	e2e_build e2e/backend
	backend_port="$(free_port)"
	e2e_start_backend "$backend_port"
	traefik_port="$(free_port)"
	metrics_port="$(free_port)"
	tl_plugin_tree "$dir"
	{
		tl_backend "$backend_port"
		tl_router enforced / enforced
		tl_router observed /observed observed
		tl_router stored /stored stored
		cat <<YAML
  middlewares:
    enforced:
      plugin:
        sluice:
          average: 4
          period: 1h
          burst: 4
          sourceCriterion:
            requestHeaderName: X-E2E-Client
          metrics:
            address: "127.0.0.1:$metrics_port"
    observed:
      plugin:
        sluice:
          mode: dry_run
          average: 10
          period: 1s
          burst: 10
          sourceCriterion:
            requestHeaderName: X-E2E-Client
          metrics:
            address: "127.0.0.1:$metrics_port"
    stored:
      plugin:
        sluice:
          average: 1000
          period: 1h
          burst: 1000
          sourceCriterion:
            requestHeaderName: X-E2E-Client
          onStoreError: allow
          redis:
            endpoints: ["127.0.0.1:$redis_port"]
            timeout: 100ms
          metrics:
            address: "127.0.0.1:$metrics_port"
YAML
	} >"$dir/dynamic.yml"
	tl_static "$dir" "$traefik_port"
	tl_up "$dir" "$traefik_port" /observed
	target[traefik]="127.0.0.1:$metrics_port"
	metrics_path[traefik]=/metrics
	base[traefik]="http://127.0.0.1:$traefik_port"
	quota[traefik]=4
}

for job in "${JOBS[@]}"; do
	"start_$job"
done

# --- rules -------------------------------------------------------------------
out="$(promtool check rules "$rules_file" 2>&1)" || fail "promtool check rules $rules_file: $out"
nrules="$(sed -n 's/.*SUCCESS: \([0-9]*\) rules found.*/\1/p' <<<"$out")"
[ -n "$nrules" ] && [ "$nrules" -gt 0 ] || fail "promtool check rules found no rules: $out"
pass "promtool check rules $rules_file: $nrules rules"

# Every job up before any traffic, so that every counter's first sample is
# its zero.
scrape=()
for job in "${JOBS[@]}"; do
	scrape+=("$job=${target[$job]}${metrics_path[$job]}")
done
e2e_start_prometheus "$rules_file" "${scrape[@]}"
pass "Prometheus (127.0.0.1:$PROM_PORT) scrapes ${JOBS[*]} every second"

rules_json="$(curl -sS --max-time 5 "http://127.0.0.1:$PROM_PORT/api/v1/rules")" || fail "GET /api/v1/rules failed"
rules="$("$TMP/promjson" rules <<<"$rules_json")" || fail "reading /api/v1/rules: $rules_json"
nloaded=0
while IFS=$'\t' read -r type name health lasterr expr; do
	nloaded=$((nloaded + 1))
	[ "$type" = recording ] && recorded[$name]="$expr"
done <<<"$rules"
[ "$nloaded" -eq "$nrules" ] || fail "Prometheus loaded $nloaded rules, promtool found $nrules"
pass "Prometheus loaded the $nloaded rules of $rules_file"

# --- load --------------------------------------------------------------------
# spend sends $3 requests with the header X-E2E-Client: $4 to the path $2
# of job $1, over one connection, and prints their status codes,
# space-separated.
spend() {
	local args=() i
	for ((i = 0; i < $3; i++)); do
		args+=(-o /dev/null "${base[$1]}$2")
	done
	curl -sS --max-time 20 -w '%{http_code} ' -H "X-E2E-Client: $4" "${args[@]}" || true
}
# count_codes prints how many of the codes $1 are $2.
count_codes() {
	local c n=0
	for c in $1; do
		[ "$c" = "$2" ] && n=$((n + 1))
	done
	echo "$n"
}
for job in "${JOBS[@]}"; do
	q="${quota[$job]}"
	for client in c1 c2 c3; do
		codes="$(spend "$job" / 20 "$client")"
		[ "$(count_codes "$codes" 200)" = "$q" ] && [ "$(count_codes "$codes" 429)" = $((20 - q)) ] ||
			fail "$job: zone enforced ($q/1h), client $client: codes $codes, want $q × 200 then $((20 - q)) × 429"
		codes="$(spend "$job" /observed 20 "$client")"
		[ "$(count_codes "$codes" 200)" = 20 ] ||
			fail "$job: zone observed (dry_run), client $client: codes $codes, want 20 × 200"
	done
	codes="$(spend "$job" /stored 10 s1)"
	[ "$(count_codes "$codes" 200)" = 10 ] || fail "$job: zone stored, Redis up: codes $codes, want 10 × 200"
	pass "load, $job: zones enforced ($q/1h) and observed (dry_run, 10/1s) each decided 60 requests of 3 clients, zone stored 10 in Redis"
done

# --- alert -------------------------------------------------------------------
# Each host's enforced zone rejected most of its decisions:
# SluiceRejectionsHigh (share > 0.25 over 5m) holds at the next rule
# evaluation after the next scrape, and goes pending; firing would take its
# `for:`. Each host labels the zone by its ID: Caddy's by its site,
# enforced@:<port>; Traefik's after its middleware, enforced@file.
declare -A alert_state=()
for ((i = 0; i < 60; i++)); do
	alerts_json="$(curl -sS --max-time 5 "http://127.0.0.1:$PROM_PORT/api/v1/alerts")" || fail "GET /api/v1/alerts failed"
	alerts="$("$TMP/promjson" alerts <<<"$alerts_json")" || fail "reading /api/v1/alerts: $alerts_json"
	while IFS=$'\t' read -r name state job zone; do
		if [ "$name" = SluiceRejectionsHigh ] && { [ "$zone" = "enforced@:${caddy_port:-}" ] || [ "$zone" = enforced@file ]; }; then
			alert_state[$job]="$state"
		fi
	done <<<"$alerts"
	[ "${#alert_state[@]}" -lt "${#JOBS[@]}" ] || break
	sleep 0.5
done
for job in "${JOBS[@]}"; do
	[ "${alert_state[$job]:-}" = pending ] || [ "${alert_state[$job]:-}" = firing ] ||
		fail "SluiceRejectionsHigh not pending or firing for zone enforced of job $job after 30s (alerts: ${alerts//$'\n'/; })"
done
pass "SluiceRejectionsHigh is pending or firing for zone enforced of every job (${JOBS[*]}) $((i / 2))s after the load"

# Redis frozen: the stored zones' requests fail in the store (timeout
# 100ms) and are allowed; the failures in a row open the breakers (Caddy's
# after 3, for 1m; the plugin's after 5, probing again every second), and
# the rest are allowed without asking Redis.
kill -STOP "$redis_pid"
for job in "${JOBS[@]}"; do
	codes="$(spend "$job" /stored 10 s2)"
	[ "$(count_codes "$codes" 200)" = 10 ] || fail "$job: zone stored, Redis frozen, on_store_error allow: codes $codes, want 10 × 200"
done
pass "Redis frozen: zone stored allowed 10 requests in each of ${JOBS[*]} (on_store_error allow)"

# The metrics handler serves the same families as the admin endpoint; the
# demand quantiles once a period of the zone observed (1s) is over and
# folded, at the next sweep of its keys (at most 10 s).
for ((i = 0; i < 150; i++)); do
	m="$(curl -sS --max-time 5 "${base[caddy]}/metrics")" || fail "GET /metrics (the metrics handler) failed"
	missing_family=""
	for f in "${FAMILIES[@]}"; do
		[[ "$m" == *"# TYPE $f "* ]] || missing_family="$f"
	done
	[ -z "$missing_family" ] && break
	sleep 0.1
done
[ -z "$missing_family" ] || fail "caddy's metrics handler does not serve $missing_family after 15s"
pass "caddy's metrics handler at /metrics serves ${FAMILIES[*]}"

# --- queries -----------------------------------------------------------------
# checks holds one line per expression: "<what>\t<job>\t<want>\t<expr>",
# want being a label a sample must carry (or -: any sample).
checks=()
unchecked=()
dashboard="$("$TMP/promjson" panels <"$dashboard_file" 2>"$TMP/schema")" || fail "reading $dashboard_file: $(cat "$TMP/schema")"
grep -qx 'schemaVersion 39' "$TMP/schema" || fail "$dashboard_file: $(cat "$TMP/schema"), want 39"
for v in datasource job zone; do
	grep -q "^variable	$v	" <<<"$dashboard" || fail "$dashboard_file has no template variable $v"
done
while IFS=$'\t' read -r type name health lasterr expr; do
	[ "$health" = ok ] || fail "rule $name: health $health, last error $lasterr"
	set_missing "$expr"
	if [ -n "$missing" ]; then
		unchecked+=("$type rule $name (reads $missing)")
		continue
	fi
	for job in "${JOBS[@]}"; do
		checks+=("$type rule $name"$'\t'"$job"$'\t'"job=\"$job\""$'\t'"$expr")
	done
done <<<"$rules"
while IFS=$'\t' read -r kind name ref expr; do
	case "$kind" in
	panel) what="panel \"$name\" target $ref" ;;
	variable)
		[ "$ref" = query ] || continue
		what="variable $name ($expr)"
		# label_values(<selector>, <label>) lists the values of <label> in
		# the series of <selector>: those of count by (<label>) (<selector>).
		[[ "$expr" =~ ^label_values\((.*),[[:space:]]*([A-Za-z_]+)\)$ ]] ||
			fail "$dashboard_file: variable $name's query is not label_values(<selector>, <label>): $expr"
		expr="count by (${BASH_REMATCH[2]}) (${BASH_REMATCH[1]})"
		;;
	esac
	set_missing "$expr"
	if [ -n "$missing" ]; then
		unchecked+=("dashboard $what (reads $missing)")
		continue
	fi
	for job in "${JOBS[@]}"; do
		e="${expr//\$__rate_interval/$rate_interval}"
		e="${e//\$zone/$zone_value}"
		e="${e//\$job/$job}"
		[[ "$e" != *'$'* ]] || fail "$dashboard_file: $what: a template variable is left after substitution: $e"
		checks+=("dashboard $what"$'\t'"$job"$'\t-\t'"$e")
	done
done <<<"$dashboard"

# Every check passes within 20 s: the last requests reach the rules at the
# next scrape and evaluation.
deadline=$((SECONDS + 20))
while :; do
	failed=()
	for c in "${checks[@]}"; do
		IFS=$'\t' read -r what job want expr <<<"$c"
		out="$(e2e_query "$expr")"
		if [[ "$out" != *'=>'* ]] || { [ "$want" != - ] && [[ "$out" != *"$want"* ]]; }; then
			failed+=("$what, job $job: $expr → ${out:-no sample}")
		fi
	done
	[ "${#failed[@]}" -eq 0 ] || [ "$SECONDS" -ge "$deadline" ] && break
	sleep 1
done
if [ "${#failed[@]}" -gt 0 ]; then
	printf '  %s\n' "${failed[@]}"
	fail "${#failed[@]} of ${#checks[@]} expressions returned no sample of their job"
fi
pass "${#checks[@]} expressions (rules, alerts, dashboard targets and variables) each returned samples of job(s) ${JOBS[*]}"
for u in "${unchecked[@]}"; do
	echo "NOT CHECKED YET e2e/prometheus.sh: $u: a family not in FAMILIES"
done
