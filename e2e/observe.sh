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

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi

TMP="$(mktemp -d)"
export XDG_CONFIG_HOME="$TMP/config" XDG_DATA_HOME="$TMP/data"
source e2e/testdata/traefik/lib.sh
logs=()
cleanup() {
	tl_cleanup
	rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
	local f
	echo "FAIL e2e/observe.sh: $*"
	for f in "${logs[@]}"; do
		echo "--- last lines of $(basename "$f")"
		tail -n 20 "$f" || true
	done
	exit 1
}
pass() { echo "PASS e2e/observe.sh: $*"; }

for tool in go curl prometheus promtool; do
	command -v "$tool" >/dev/null 2>&1 || fail "$tool not found (run ./test.sh deps, which installs it)"
done
go build -o "$TMP/observe" ./e2e/observe || fail "building e2e/observe failed"
go build -o "$TMP/sluice" ./cmd/sluice || fail "building cmd/sluice failed"
tl_build_backend "$TMP/backend" || fail "building e2e/backend failed"
timeout 1800 ./xcaddy.sh build >"$TMP/xcaddy.log" 2>&1 || fail "./xcaddy.sh build failed: $(tail -5 "$TMP/xcaddy.log")"
traefik="$(bash scripts/build-traefik.sh | tail -n 1)"
[ -x "$traefik" ] || fail "scripts/build-traefik.sh gave no Traefik binary: $traefik"

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
logs+=("$TMP/caddy.log")
./caddy run --config "$TMP/Caddyfile" --adapter caddyfile >"$TMP/caddy.log" 2>&1 &
TL_PIDS+=("$!")
tl_wait_port "$caddy_port" 20 || fail "caddy did not listen on $caddy_port"
tl_wait_port "$caddy_admin" 20 || fail "caddy's admin endpoint did not listen on $caddy_admin"

# --- traefik -----------------------------------------------------------------
backend_port="$(free_port)"
tl_start_backend "$TMP/backend" "$backend_port" || fail "the backend did not start"
traefik_port="$(free_port)"
traefik_metrics="$(free_port)"
mkdir -p "$TMP/traefik"
tl_plugin_tree "$TMP/traefik"
# traefik_config MODE AVERAGE PERIOD BURST writes the dynamic configuration
# of the middleware api (written whole, then moved, so that the watching
# provider never reads half a file).
traefik_config() {
	cat >"$TMP/traefik/dynamic.new" <<EOF
http:
  services:
    backend:
      loadBalancer:
        servers:
          - url: "http://127.0.0.1:$backend_port"
  routers:
    api:
      rule: "PathPrefix(\`/\`)"
      service: backend
      middlewares: [api]
  middlewares:
    api:
      plugin:
        sluice:
          mode: "$1"
          average: "$2"
          period: "$3"
          burst: "$4"
          sourceCriterion:
            requestHeaderName: "X-Client"
          metrics:
            address: "127.0.0.1:$traefik_metrics"
EOF
	mv "$TMP/traefik/dynamic.new" "$TMP/traefik/dynamic.yml"
}
traefik_config dry_run "${rate%/*}" "${rate#*/}" "$burst"
tl_render e2e/testdata/traefik/static.yml "$TMP/traefik/static.yml" \
	PORT="$traefik_port" DYNAMIC="$TMP/traefik/dynamic.yml" LOG="$TMP/traefik/traefik.log"
sed -i 's/^    watch: false$/    watch: true/' "$TMP/traefik/static.yml"
grep -q '^    watch: true$' "$TMP/traefik/static.yml" || fail "could not turn the file provider's watch on"
logs+=("$TMP/traefik/traefik.log")
tl_start_traefik "$traefik" "$TMP/traefik" "$TMP/traefik/static.yml"
tl_wait_traefik "$traefik_port" "$TMP/traefik/traefik.log" / 120 || fail "Traefik did not come up"

# --- prometheus --------------------------------------------------------------
prom_port="$(free_port)"
cat >"$TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $REPO/docs/prometheus/rules.yml
scrape_configs:
  - job_name: caddy
    static_configs:
      - targets: ['127.0.0.1:$caddy_admin']
  - job_name: traefik
    static_configs:
      - targets: ['127.0.0.1:$traefik_metrics']
EOF
logs+=("$TMP/prometheus.log")
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/prometheus-data" \
	--web.listen-address="127.0.0.1:$prom_port" >"$TMP/prometheus.log" 2>&1 &
TL_PIDS+=("$!")
tl_wait_port "$prom_port" 20 || fail "prometheus did not listen on $prom_port"

# query EXPR prints promtool's instant answer on EXPR.
query() { promtool query instant "http://127.0.0.1:$prom_port" "$1" 2>&1 || true; }
# wait_query EXPR WHAT waits (10 s at most) until EXPR has a sample, and
# prints the answer.
wait_query() {
	local out i
	for ((i = 0; i < 50; i++)); do
		out="$(query "$1")"
		[[ "$out" == *'=>'* ]] && break
		sleep 0.2
	done
	[[ "$out" == *'=>'* ]] || fail "$2: Prometheus has no sample of $1 after 10 s: $out"
	echo "$out"
}
for job in caddy traefik; do
	wait_query "up{job=\"$job\"} == 1" "scraping $job" >/dev/null
done
pass "Prometheus (127.0.0.1:$prom_port) scrapes caddy (admin /metrics) and traefik (the plugin's metrics listener) every second"

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
