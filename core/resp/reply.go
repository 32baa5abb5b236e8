package resp

import (
	"bufio"
	"errors"
	"io"
	"strconv"
)

// Error is an error reply from Redis. Its text starts with the error code,
// as in "NOSCRIPT No matching script. Please use EVAL." or
// "WRONGPASS invalid username-password pair or user is disabled.".
// An Error leaves the connection usable.
//
// Under Yaegi, test for an Error with a type assertion on the error
// (err.(resp.Error)) or by its text (strings.HasPrefix(err.Error(),
// "NOSCRIPT ")), not with errors.As, which panics there; and do not
// compare two errors holding Errors with ==, which panics too.
type Error string

// Error returns the reply text.
func (e Error) Error() string { return string(e) }

// Limits on what readReplyAt accepts, so that a hostile or corrupt stream
// cannot make it allocate unboundedly or recurse deeply.
const (
	maxBulkLen  = 512 << 20 // bytes of a bulk string, Redis's own proto-max-bulk-len default
	maxArrayLen = 1 << 24   // elements of an array
	maxDepth    = 32        // nesting of arrays
	maxLineLen  = 64 << 10  // bytes of a simple string, error or length line
	// bulkChunk is the largest bulk string allocated at once; longer ones
	// grow as their bytes arrive, so memory follows the data received,
	// not the length announced.
	bulkChunk = 64 << 10
	// arrayHint is the largest array capacity allocated up front.
	arrayHint = 64
)

// protocolError returns the error of a reply that breaks RESP2 as told.
func protocolError(what string) error {
	return errors.New("resp: protocol error: " + what)
}

// readReplyAt reads one RESP2 reply from r, nested in depth arrays (0 for a
// whole reply), and decodes it: an integer as int64, a simple or bulk
// string as string, an array as []interface{}, a nil bulk string or nil
// array as nil, and an error reply as an Error returned as the error. An
// error reply nested in an array (from a script returning an error table
// inside a table) makes the whole reply that Error, the first one, once
// the array has been read: under Yaegi a value of a named string type
// inside an interface{} cannot be told from a string, so errors are never
// array elements.
//
// Any other error means the stream is unusable: io.EOF when it ended
// before the reply's first byte, io.ErrUnexpectedEOF when it ended inside
// it, or a protocol error.
//
// A caller that has already read the reply's first line from r with
// ReadSlice passes it as line, with the error ReadSlice returned, saving a
// call; with a nil line and err, readReplyAt reads the line itself.
//
// Under Yaegi every call pays for every value of the called function's
// body, executed or not: readReplyAt holds the scalars, and a short length
// is read by hand rather than by strconv; arrays are in readArray.
func readReplyAt(r *bufio.Reader, depth int, line []byte, err error) (interface{}, error) {
	if line == nil && err == nil {
		line, err = r.ReadSlice('\n')
	}
	n := len(line) - 2 // the line without its CRLF is line[:n]
	if err != nil || n < 1 || line[n] != '\r' {
		if line, err = checkLine(r, line, err); err != nil {
			return nil, err
		}
		n = len(line) - 2
	}
	t := line[0]
	if t == '+' {
		return string(line[1:n]), nil
	}
	if t == '-' {
		return nil, Error(string(line[1:n]))
	}
	if t != ':' && t != '$' && t != '*' {
		return nil, protocolError("unknown reply type")
	}
	// A number of up to 18 digits, optionally negative, by hand; longer
	// ones by strconv.
	k, neg, i := int64(0), line[1] == '-', 1
	if neg {
		i = 2
	}
	if i == n || n-i > 18 {
		if k, err = longNumber(line[1:n]); err != nil {
			return nil, err
		}
	} else {
		for ; i < n; i++ {
			d := line[i] - '0'
			if d > 9 {
				return nil, protocolError("bad number")
			}
			k = k*10 + int64(d)
		}
		if neg {
			k = -k
		}
	}
	if t == ':' {
		return k, nil
	}
	if k < 0 {
		if k == -1 {
			return nil, nil // nil bulk string or nil array
		}
		return nil, protocolError("negative length")
	}
	if t == '*' {
		return readArray(r, k, depth)
	}
	if k > maxBulkLen {
		return nil, protocolError("bulk string too long")
	}
	return readBulk(r, int(k))
}

// longNumber reads the number of a reply line too long for readReplyAt.
func longNumber(b []byte) (int64, error) {
	k, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, protocolError("bad number")
	}
	return k, nil
}

// readArray reads the k elements of an array nested in depth arrays.
func readArray(r *bufio.Reader, k int64, depth int) (interface{}, error) {
	if k > maxArrayLen {
		return nil, protocolError("array too long")
	}
	if depth >= maxDepth {
		return nil, protocolError("arrays nested too deep")
	}
	hint := k
	if hint > arrayHint {
		hint = arrayHint
	}
	a := make([]interface{}, 0, hint)
	var replyErr error
	for i := int64(0); i < k; i++ {
		v, err := readReplyAt(r, depth+1, nil, nil)
		if err != nil {
			// Read past error elements, to leave r at the next reply.
			if _, ok := err.(Error); !ok {
				return nil, unexpected(err)
			}
			if replyErr == nil {
				replyErr = err
			}
		}
		a = append(a, v)
	}
	if replyErr != nil {
		return nil, replyErr
	}
	return a, nil
}

// checkLine handles what ReadSlice returned when it was not a short line
// ending in CRLF: it reads the rest of a line longer than r's buffer (up to
// maxLineLen bytes) and returns the whole line with its CRLF, or the error.
func checkLine(r *bufio.Reader, line []byte, err error) ([]byte, error) {
	if err == bufio.ErrBufferFull {
		line = append([]byte(nil), line...)
		for err == bufio.ErrBufferFull && len(line) <= maxLineLen {
			var more []byte
			more, err = r.ReadSlice('\n')
			line = append(line, more...)
		}
		if len(line) > maxLineLen {
			return nil, protocolError("line too long")
		}
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	n := len(line) - 2
	if n < 0 || line[n] != '\r' {
		return nil, protocolError("line not terminated by CRLF")
	}
	if n == 0 {
		return nil, protocolError("empty line")
	}
	return line, nil
}

// readBulk reads a bulk string of n bytes and its CRLF.
func readBulk(r *bufio.Reader, n int) (interface{}, error) {
	var b []byte
	if n <= bulkChunk {
		b = make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, unexpected(err)
		}
	} else {
		for len(b) < n+2 {
			chunk := n + 2 - len(b)
			if chunk > bulkChunk {
				chunk = bulkChunk
			}
			b = append(b, make([]byte, chunk)...)
			if _, err := io.ReadFull(r, b[len(b)-chunk:]); err != nil {
				return nil, unexpected(err)
			}
		}
	}
	if b[n] != '\r' || b[n+1] != '\n' {
		return nil, protocolError("bulk string not terminated by CRLF")
	}
	return string(b[:n]), nil
}

// unexpected turns io.EOF inside a reply into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readText reads a reply expected to be a short bulk string without line
// feeds, as the Redis store's take script returns (see Run), in two
// ReadSlice calls and without copying but into the string returned: its
// header "$<up to 4 digits>\r\n", then the text and its CRLF. Any other
// reply is read by readReplyAt from the line already read, and a bulk
// string with a line feed or longer than r's buffer by readTextRest.
func readText(r *bufio.Reader) (interface{}, error) {
	line, err := r.ReadSlice('\n')
	if err != nil || len(line) < 4 || len(line) > 7 || line[0] != '$' || line[len(line)-2] != '\r' {
		return readReplyAt(r, 0, line, err)
	}
	n := 0
	for i := 1; i < len(line)-2; i++ {
		if line[i] < '0' || line[i] > '9' {
			return readReplyAt(r, 0, line, err)
		}
		n = n*10 + int(line[i]-'0')
	}
	if line, err = r.ReadSlice('\n'); err != nil || len(line) != n+2 || line[n] != '\r' {
		return readTextRest(r, n, line, err)
	}
	return string(line[:n]), nil
}

// readTextRest finishes readText for a bulk string of n bytes (fewer than
// 10000) of which ReadSlice returned got, with err: what readBulk would
// have returned reading the whole string.
func readTextRest(r *bufio.Reader, n int, got []byte, err error) (interface{}, error) {
	if len(got) < n+2 {
		if err != nil && err != bufio.ErrBufferFull {
			return nil, unexpected(err)
		}
		b := make([]byte, n+2)
		k := copy(b, got)
		if _, err := io.ReadFull(r, b[k:]); err != nil {
			return nil, unexpected(err)
		}
		got = b
	}
	if got[n] != '\r' || got[n+1] != '\n' {
		return nil, protocolError("bulk string not terminated by CRLF")
	}
	return string(got[:n]), nil
}
