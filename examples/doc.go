// Package examples holds the configurations the documentation shows: the
// recipes for Caddy (caddy/), Traefik (traefik/) and a runnable Traefik
// with the plugin loaded locally (traefik-local/). The Go recipes are
// Example functions of package sluicehttp.
//
// Its tests keep the documentation true: every Caddyfile of the
// repository's Markdown and of this directory is adapted and provisioned
// by Caddy, every Traefik configuration (file provider, labels, Kubernetes
// CRD) is decoded as Traefik decodes it and loaded by the plugin's New,
// and every block that quotes a file (after a line <!-- include: path -->,
// or <!-- include: path FuncName --> for a Go function) equals it. Run
// them with -update to rewrite the quoted blocks from their files.
// e2e/recipes.sh runs the recipes against a real upstream.
package examples
