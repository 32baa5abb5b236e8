package core

import (
	"strings"
	"testing"
)

// TestSharePrefix: a share group's prefix escapes the bytes that structure
// prefixes, so that no group's prefix begins another's nor that of a
// server's zones ("<server>/", "<server>#<n>/").
func TestSharePrefix(t *testing.T) {
	if got, want := SharePrefix("a/b=c#d%e"), "=a%2Fb%3Dc%23d%25e/"; got != want {
		t.Errorf("SharePrefix = %q, want %q", got, want)
	}
	prefixes := []string{SharePrefix("edge"), SharePrefix("edge/x"), SharePrefix("edge#1"), SharePrefix(""), SharePrefix("=edge"),
		EscapePrefix("srv0") + "/", EscapePrefix("=edge") + "/", EscapePrefix("srv0") + "#1/"}
	for i, a := range prefixes {
		for j, b := range prefixes {
			if i != j && strings.HasPrefix(b, a) {
				t.Errorf("prefix %q begins %q", a, b)
			}
		}
	}
}
