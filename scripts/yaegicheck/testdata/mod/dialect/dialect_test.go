package dialect

import (
	"strconv"
	"testing"
)

var atoi = strconv.Atoi

func format(n int, s string) string {
	s = strconv.Itoa(n)
	return s
}

func TestFormat(t *testing.T) {
	if got, _ := atoi(format(1, "")); got != 1 {
		t.Fatalf("atoi(format(1)) = %d, want 1", got)
	}
	if got := Format(12, nil); got != "12" {
		t.Fatalf("Format(12) = %q, want 12", got)
	}
}
