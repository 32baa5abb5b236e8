package redistest

import "testing"

func TestRespEnd(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"+OK", 0},
		{"+OK\r\n+PONG\r\n", 5},
		{"-ERR x\r\n", 8},
		{":12\r\n", 5},
		{"$3\r\nab", 0},
		{"$3\r\nabc\r\n:1\r\n", 9},
		{"$-1\r\n", 5},
		{"*2\r\n$1\r\na\r\n", 0},
		{"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", 19},
		{"*-1\r\n", 5},
		{"PING\r\n", -1},
		{"\r\n", -1},
		{"*x\r\n", -1},
	} {
		if got := respEnd([]byte(c.in)); got != c.want {
			t.Errorf("respEnd(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	if got := commandName([]byte("*2\r\n$7\r\nEVALSHA\r\n$1\r\nx\r\n")); got != "EVALSHA" {
		t.Errorf("commandName = %q, want EVALSHA", got)
	}
	if got := commandName([]byte(":1\r\n")); got != "" {
		t.Errorf("commandName of an integer = %q, want \"\"", got)
	}
}
