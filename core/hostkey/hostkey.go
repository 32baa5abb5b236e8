// Package hostkey holds the rules for the keys and key prefixes that hosts
// build themselves, shared by the Caddy module and package sluicehttp: a
// key a host built made a built key as a keyspec.Spec makes one (Key), the
// key to charge when a request has none (Resolve), and the prefix of a
// share group's limits (SharePrefix).
//
// It is apart from core and core/keyspec so that the Traefik plugin, whose
// keys a Spec builds and which shares no group, does not load it under
// Yaegi. It imports the standard library and core/keyspec only.
package hostkey

import (
	"strings"

	"github.com/sluicehq/sluice/core/keyspec"
)

// Key returns k, a key that a host built (from Caddy's placeholders, or
// a caller's own), as a built key, the rules keyspec.Spec.Key applies to
// a single part's value: one that begins with byte 0x00 or 0x01 gets a
// 0x01 prefix, so that no built key equals keyspec.SharedKey, and a long
// one is bounded by keyspec.BoundKey.
func Key(k string) string {
	if k != "" && k[0] <= 1 {
		k = "\x01" + k
	}
	return keyspec.BoundKey(k)
}

// Resolve returns the key to charge for a request whose key is (key, ok),
// as keyspec.Spec.Key or a host's own key function returns it, under the
// policy m, and whether the limit applies at all. A built key (ok and
// non-empty) is used as is. Otherwise keyspec.MissingShared charges the
// fixed key keyspec.SharedKey, which no built key can equal, and
// keyspec.MissingSkip (or an unknown policy) reports that the limit does
// not apply. An empty key is treated as missing, never as a key. The
// Traefik plugin's lane (core.Lane) resolves its keys inline, as this
// does.
func Resolve(m keyspec.MissingKey, key string, ok bool) (string, bool) {
	if ok && key != "" {
		return key, true
	}
	if m == keyspec.MissingShared {
		return keyspec.SharedKey, true
	}
	return "", false
}

// SharePrefix is the prefix that the limits of the share group named
// group put before their clients' keys: "=" + EscapePrefix(group) + "/".
// Caddy's handlers with `share <group>` and the sluicehttp middleware with
// Config.Share both use it, so a limit of the same name and algorithm
// counts a client on the same store key in each of them. Prefixes of
// different groups never begin one another, nor those of Caddy's handlers
// outside any group, which begin with an escaped site name or handler ID.
func SharePrefix(group string) string {
	return "=" + EscapePrefix(group) + "/"
}

// EscapePrefix escapes the bytes that structure key prefixes ("%", "/",
// "=" and "#", as %25, %2F, %3D and %23) in a name that a prefix holds.
func EscapePrefix(name string) string { return prefixEscaper.Replace(name) }

var prefixEscaper = strings.NewReplacer("%", "%25", "/", "%2F", "=", "%3D", "#", "%23")
