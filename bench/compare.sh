#!/usr/bin/env bash
# Runs the sluice-versus-baseline benchmarks of this package and prints, per
# workload, the mean ns/op of each and their ratio sluice/baseline (below 1:
# sluice is faster). Offline: the ratios are computed from the raw output.
#
#   bench/compare.sh                 # -count 5 -benchtime 1s
#   COUNT=3 BENCHTIME=2s bench/compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."

raw="$(go test -run '^$' -bench . -benchmem -count "${COUNT:-5}" -benchtime "${BENCHTIME:-1s}" ./bench)"
printf '%s\n' "$raw"
printf '%s\n' "$raw" | awk '
/^Benchmark/ {
	name = $1
	sub(/-[0-9]+$/, "", name) # the -GOMAXPROCS suffix
	n = split(name, part, "/")
	if (n != 2) next
	for (i = 3; i < NF; i++) {
		if ($(i + 1) == "ns/op") { sum[part[1], part[2]] += $i; runs[part[1], part[2]]++ }
		if ($(i + 1) == "allocs/op") { allocs[part[1], part[2]] = $i }
	}
	if (!(part[1] in seen)) { seen[part[1]] = 1; order[++workloads] = part[1] }
}
END {
	printf "\n%-20s %14s %14s %8s %14s\n", "workload", "sluice ns/op", "baseline ns/op", "ratio", "allocs/op s/b"
	for (w = 1; w <= workloads; w++) {
		b = order[w]
		if (!runs[b, "sluice"] || !runs[b, "baseline"]) continue
		s = sum[b, "sluice"] / runs[b, "sluice"]
		r = sum[b, "baseline"] / runs[b, "baseline"]
		printf "%-20s %14.1f %14.1f %8.2f %9s/%s\n", b, s, r, s / r, allocs[b, "sluice"], allocs[b, "baseline"]
	}
}'
