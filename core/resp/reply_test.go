package resp

import (
	"bufio"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestReadReply(t *testing.T) {
	long := strings.Repeat("x", 70000) // longer than the read buffer and bulkChunk
	tests := []struct {
		name string
		in   string
		want interface{}
		err  string // substring of the error; "" for none
	}{
		{"simple", "+OK\r\n", "OK", ""},
		{"empty simple", "+\r\n", "", ""},
		{"integer", ":42\r\n", int64(42), ""},
		{"negative integer", ":-7\r\n", int64(-7), ""},
		{"max int64", ":9223372036854775807\r\n", int64(9223372036854775807), ""},
		{"min int64", ":-9223372036854775808\r\n", int64(-9223372036854775808), ""},
		{"bulk", "$5\r\nhello\r\n", "hello", ""},
		{"bulk with CRLF inside", "$4\r\na\r\nb\r\n", "a\r\nb", ""},
		{"empty bulk", "$0\r\n\r\n", "", ""},
		{"long bulk", "$70000\r\n" + long + "\r\n", long, ""},
		{"nil bulk", "$-1\r\n", nil, ""},
		{"nil array", "*-1\r\n", nil, ""},
		{"empty array", "*0\r\n", []interface{}{}, ""},
		{"array", "*3\r\n:1\r\n$1\r\na\r\n$-1\r\n", []interface{}{int64(1), "a", nil}, ""},
		{"nested array", "*2\r\n*1\r\n+x\r\n:2\r\n", []interface{}{[]interface{}{"x"}, int64(2)}, ""},
		{"error in array", "*3\r\n-ERR boom\r\n*1\r\n-ERR second\r\n:1\r\n", nil, "ERR boom"},
		{"error", "-NOSCRIPT No matching script\r\n", nil, "NOSCRIPT No matching script"},
		{"long error", "-ERR " + long[:5000] + "\r\n", nil, "ERR xxx"},

		{"empty input", "", nil, "EOF"},
		{"unknown type", "!3\r\nabc\r\n", nil, "unknown reply type"},
		{"RESP3 double", ",1.5\r\n", nil, "unknown reply type"},
		{"no CR", "+OK\n", nil, "not terminated by CRLF"},
		{"no newline", "+OK", nil, "unexpected EOF"},
		{"empty line", "\r\n", nil, "empty line"},
		{"bad integer", ":12a\r\n", nil, "bad number"},
		{"spaces", ": 1\r\n", nil, "bad number"},
		{"empty integer", ":\r\n", nil, "bad number"},
		{"integer overflow", ":9223372036854775808\r\n", nil, "bad number"},
		{"integer underflow", ":-9223372036854775809\r\n", nil, "bad number"},
		{"bad bulk length", "$1x\r\n", nil, "bad number"},
		{"bulk -2", "$-2\r\n", nil, "negative length"},
		{"bulk too long", "$536870913\r\n", nil, "bulk string too long"},
		{"bulk huge, no data", "$536870912\r\n", nil, "unexpected EOF"},
		{"bulk short", "$5\r\nabc\r\n", nil, "unexpected EOF"},
		{"bulk bad terminator", "$3\r\nabcde", nil, "not terminated by CRLF"},
		{"array -2", "*-2\r\n", nil, "negative length"},
		{"array too long", "*16777217\r\n", nil, "array too long"},
		{"array short", "*3\r\n:1\r\n", nil, "unexpected EOF"},
		{"array huge, no data", "*16777216\r\n", nil, "unexpected EOF"},
		{"too deep", strings.Repeat("*1\r\n", maxDepth+1) + ":1\r\n", nil, "nested too deep"},
		{"line too long", "+" + strings.Repeat("y", maxLineLen+10) + "\r\n", nil, "line too long"},
	}
	for _, tt := range tests {
		r := bufio.NewReaderSize(strings.NewReader(tt.in), 16)
		got, err := readReplyAt(r, 0, nil, nil)
		if tt.err == "" {
			if err != nil {
				t.Errorf("%s: error %v", tt.name, err)
			} else if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s: got %#v, want %#v", tt.name, got, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: got (%#v, %v), want error containing %q", tt.name, got, err, tt.err)
		}
	}
}

func TestReadReplyDepthLimit(t *testing.T) {
	in := strings.Repeat("*1\r\n", maxDepth) + ":1\r\n"
	v, err := readReplyAt(bufio.NewReader(strings.NewReader(in)), 0, nil, nil)
	if err != nil {
		t.Fatalf("%d nested arrays: %v", maxDepth, err)
	}
	for i := 0; i < maxDepth; i++ {
		a, ok := v.([]interface{})
		if !ok || len(a) != 1 {
			t.Fatalf("level %d: %#v", i, v)
		}
		v = a[0]
	}
	if v != int64(1) {
		t.Fatalf("innermost value %#v", v)
	}
}

func TestReadReplyErrorType(t *testing.T) {
	_, err := readReplyAt(bufio.NewReader(strings.NewReader("-WRONGTYPE Operation\r\n")), 0, nil, nil)
	e, ok := err.(Error)
	if !ok || e.Error() != "WRONGTYPE Operation" {
		t.Fatalf("got %T %v, want Error(\"WRONGTYPE Operation\")", err, err)
	}
}

func TestReadReplyEOFAtStart(t *testing.T) {
	// io.EOF exactly at a reply's first byte tells exec that nothing was
	// answered; any later end of stream is io.ErrUnexpectedEOF.
	tests := []struct {
		in   string
		want error
	}{
		{"", io.EOF},
		{"+O", io.ErrUnexpectedEOF},
		{"*2\r\n:1\r\n", io.ErrUnexpectedEOF},
		{"$3\r\n", io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		_, err := readReplyAt(bufio.NewReader(strings.NewReader(tt.in)), 0, nil, nil)
		if err != tt.want {
			t.Errorf("%q: got %v, want %v", tt.in, err, tt.want)
		}
	}
}

func TestAppendCommand(t *testing.T) {
	tests := []struct {
		a, b, c []string
		want    string
	}{
		{[]string{"PING"}, nil, nil, "*1\r\n$4\r\nPING\r\n"},
		{[]string{"SET", "k", ""}, nil, nil, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"},
		{[]string{"EVALSHA", "abc", "1"}, []string{"key"}, []string{"1234567890"},
			"*5\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$3\r\nkey\r\n$10\r\n1234567890\r\n"},
	}
	for _, tt := range tests {
		got := string(appendCommand([]byte("old"), tt.a, tt.b, tt.c))[3:]
		if got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}
