// Package model holds what every other package of sluice's engine shares:
// the typed errors of a configuration that core refuses. Each host names
// the field at fault in its own words (Caddyfile subdirective, JSON path,
// Traefik option) from a FieldError's Field, Value and Reason, never from
// the error's text.
//
// It imports the standard library only, so that Traefik's Yaegi interpreter
// can run it unchanged.
package model
