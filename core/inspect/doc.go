// Package inspect is what sluice's Caddy module shows operators of its
// limits: the keys a zone sees most rejected, admitted or near its limit,
// ranked in constant memory (HeavyHitters).
//
// It is apart from package core so that the Traefik plugin, which imports
// core but never ranks keys, does not load this code under Yaegi. It
// imports the standard library and core only.
package inspect
