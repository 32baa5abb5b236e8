package core

import (
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/core/clientip"
)

// mustPrefixes parses list with clientip.ParsePrefixes and fails the test
// on an error.
func mustPrefixes(tb testing.TB, list ...string) []netip.Prefix {
	tb.Helper()
	p, err := clientip.ParsePrefixes(list)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
