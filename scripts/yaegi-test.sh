#!/usr/bin/env bash
# Runs the tests of every package under core/ and traefikplugin/ with the Yaegi
# interpreter (v0.16.1, the one Traefik v3.6 runs plugins with), the way Traefik
# loads the plugin: GOPATH mode, standard library only.
#
#   scripts/yaegi-test.sh [yaegi test flags, e.g. -v]
#
# Tests run with -short: the interpreter is some hundred times slower than
# compiled code, so floods and races shrink (they run in full under go test).
# A package directory may hold a file .yaegi-run whose first line is a regular
# expression passed as -run, to leave slow tests out under the interpreter.
# Needs yaegi on PATH (scripts/deps.sh installs it). Exits non-zero if any
# package fails.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v yaegi >/dev/null 2>&1 || { echo "yaegi-test: yaegi not on PATH (run scripts/deps.sh)" >&2; exit 1; }

module="$(go list -m)"
dirs=()
for d in core traefikplugin; do
	[ -d "$d" ] && dirs+=("./$d/...")
done
if [ "${#dirs[@]}" -eq 0 ]; then
	echo "yaegi-test: no core/ or traefikplugin/ packages"
	exit 0
fi
mapfile -t pkgs < <(go list -e -f '{{.ImportPath}}' "${dirs[@]}")

# Yaegi resolves imports through GOPATH: $gopath/src/<module> -> this checkout.
gopath="$(mktemp -d)"
trap 'rm -rf "$gopath"' EXIT
mkdir -p "$gopath/src/$(dirname "$module")"
ln -s "$root" "$gopath/src/$module"

passed=0
failed=0
for pkg in "${pkgs[@]}"; do
	rel="${pkg#"$module"}"
	rel="${rel#/}"
	args=(-short "$@")
	run=""
	if [ -f "$root/$rel/.yaegi-run" ]; then
		run="$(head -n 1 "$root/$rel/.yaegi-run" | tr -d '\r' | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')"
		[ -n "$run" ] && args+=(-run "$run")
	fi
	start=$SECONDS
	out="$gopath/out.txt"
	if (cd "$gopath" && GOPATH="$gopath" GO111MODULE=off timeout --kill-after=10 900 \
		yaegi test "${args[@]}" "$pkg") >"$out" 2>&1; then
		passed=$((passed + 1))
		status=ok
	else
		failed=$((failed + 1))
		status=FAIL
	fi
	if [ "$status" = FAIL ] || [ "$#" -gt 0 ]; then
		cat "$out"
	fi
	printf 'yaegi %-4s %s (%ds)%s\n' "$status" "$pkg" $((SECONDS - start)) "${run:+ -run $run}"
done
echo "yaegi-test: $passed package(s) passed, $failed failed"
[ "$failed" -eq 0 ]
