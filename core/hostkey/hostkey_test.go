package hostkey

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core/keyspec"
)

func TestKey(t *testing.T) {
	long := strings.Repeat("k", keyspec.MaxKeyLength+1)
	for in, want := range map[string]string{
		"":         "",
		"a":        "a",
		"\x00miss": "\x01\x00miss",
		"\x01x":    "\x01\x01x",
		"\x02x":    "\x02x",
		long:       keyspec.BoundKey(long),
	} {
		if got := Key(in); got != want {
			t.Errorf("Key(%q) = %q, want %q", in, got, want)
		}
	}
}

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

func TestResolve(t *testing.T) {
	tests := []struct {
		m       keyspec.MissingKey
		key     string
		ok      bool
		wantKey string
		wantOK  bool
	}{
		{keyspec.MissingSkip, "k", true, "k", true},
		{keyspec.MissingSkip, "", false, "", false},
		{keyspec.MissingSkip, "", true, "", false},
		{keyspec.MissingShared, "k", true, "k", true},
		{keyspec.MissingShared, "", false, "\x00missing", true},
		{keyspec.MissingShared, "", true, "\x00missing", true},
		{keyspec.MissingShared, "stale", false, "\x00missing", true},
		{keyspec.MissingKey(7), "", false, "", false},
	}
	for _, tt := range tests {
		key, ok := Resolve(tt.m, tt.key, tt.ok)
		if key != tt.wantKey || ok != tt.wantOK {
			t.Errorf("Resolve(%d, %q, %v) = %q, %v; want %q, %v", tt.m, tt.key, tt.ok, key, ok, tt.wantKey, tt.wantOK)
		}
	}
}
