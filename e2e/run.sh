#!/usr/bin/env bash
# Runs every e2e/*.sh except this one, in name order, each from the repository
# root with bash. Runs them all, then exits non-zero if any failed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts=()
while IFS= read -r f; do
	[ "$f" = e2e/run.sh ] || scripts+=("$f")
done < <(find e2e -maxdepth 1 -type f -name '*.sh' | LC_ALL=C sort)

if [ "${#scripts[@]}" -eq 0 ]; then
	echo "e2e: no e2e scripts"
	exit 0
fi

failed=()
for f in "${scripts[@]}"; do
	echo "--- e2e: $f"
	start=$SECONDS
	if bash "$f"; then
		echo "--- e2e: $f ok ($((SECONDS - start))s)"
	else
		echo "--- e2e: $f FAILED, exit $? ($((SECONDS - start))s)"
		failed+=("$f")
	fi
done
if [ "${#failed[@]}" -gt 0 ]; then
	echo "e2e: failed: ${failed[*]}"
	exit 1
fi
echo "e2e: all ${#scripts[@]} script(s) passed"
