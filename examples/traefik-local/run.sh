#!/usr/bin/env bash
# Runs Traefik (v3.6 or later) with sluice as a local plugin, from a copy
# of this repository, on http://127.0.0.1:8080:
#
#   ./run.sh                             # traefik from PATH
#   TRAEFIK=/path/to/traefik ./run.sh
#
# then, in another terminal, five 200s and a 429:
#
#   for i in 1 2 3 4 5 6; do curl -si http://127.0.0.1:8080/ | head -1; done
#
# DYNAMIC names another dynamic configuration to serve in place of
# dynamic.yml, such as a recipe of ../traefik:
#
#   DYNAMIC=../traefik/login.yml ./run.sh
#
# SLUICE_SRC names another copy of sluice to load (default: the repository
# this directory is in).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "${SLUICE_SRC:-$here/../..}" && pwd)"
dst="$here/plugins-local/src/github.com/sluicehq/sluice"

# What Traefik loads: the manifest .traefik.yml (a dotfile, which `cp *`
# would miss), go.mod, and the packages the plugin imports.
rm -rf "$here/plugins-local"
mkdir -p "$dst"
cp -a "$src/.traefik.yml" "$src/go.mod" "$src/core" "$src/traefikplugin" "$dst/"

# With DYNAMIC, a copy of static.yml that reads it instead of dynamic.yml.
static=static.yml
if [ -n "${DYNAMIC:-}" ]; then
	[ -f "$DYNAMIC" ] || { echo "run.sh: DYNAMIC=$DYNAMIC: no such file" >&2; exit 1; }
	dynamic="$(cd "$(dirname "$DYNAMIC")" && pwd)/$(basename "$DYNAMIC")"
	static=plugins-local/static.yml
	sed "s|^    filename: dynamic.yml\$|    filename: $dynamic|" "$here/static.yml" >"$here/$static"
	grep -qF "filename: $dynamic" "$here/$static" || { echo "run.sh: static.yml has no 'filename: dynamic.yml'" >&2; exit 1; }
fi

cd "$here"
exec "${TRAEFIK:-traefik}" --configFile="$static"
