package resp

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzReadReply feeds arbitrary bytes to the reply parser, which must
// never panic, must return a value or an error, and must read replies
// back to back until the input is exhausted or broken.
func FuzzReadReply(f *testing.F) {
	seeds := []string{
		"+OK\r\n",
		"-ERR wrong\r\n",
		":-12\r\n",
		"$3\r\nabc\r\n",
		"$-1\r\n",
		"*-1\r\n",
		"*0\r\n",
		"*3\r\n:1\r\n$1\r\nx\r\n*1\r\n-NOSCRIPT no\r\n",
		"*2\r\n*2\r\n:1\r\n:2\r\n$0\r\n\r\n+PONG\r\n",
		"$536870912\r\n",
		"$536870913\r\nx",
		"*16777216\r\n:1\r\n",
		"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n" +
			"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
		":99999999999999999999\r\n",
		"$3\r\nabcd\r\n",
		"+OK\n",
		"\r\n",
		"%1\r\n",
		"",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(data), 16)
		for i := 0; i <= len(data); i++ { // each reply consumes at least one byte
			v, err := readReplyAt(r, 0, nil, nil)
			if err != nil {
				if _, ok := err.(Error); ok {
					continue
				}
				if v != nil {
					t.Fatalf("value %#v with error %v", v, err)
				}
				return
			}
		}
		t.Fatalf("more than %d replies in %d bytes", len(data)+1, len(data))
	})
}
