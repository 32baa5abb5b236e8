package core

import "strings"

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
