package clientip

import (
	"net/netip"
	"testing"
)

func mustPrefixes(t testing.TB, list ...string) []netip.Prefix {
	t.Helper()
	p, err := ParsePrefixes(list)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
