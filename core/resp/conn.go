package resp

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"
)

// conn is one connection to the server with its read buffer and a reused
// buffer for encoding commands.
type conn struct {
	nc   net.Conn
	br   *bufio.Reader
	wbuf []byte
}

// Buffer sizes of a connection. A command encoded in more than
// maxKeptWrite bytes leaves its buffer to the garbage collector.
const (
	readBufferSize = 4096
	maxKeptWrite   = 64 << 10
)

// dial opens a connection to o.Addr: TCP, then TLS when o.TLS is set,
// then AUTH and SELECT as configured. All of it must finish within
// o.DialTimeout and before ctx's deadline; ctx's cancellation aborts the
// TCP dial and the TLS handshake.
func dial(ctx context.Context, o *Options) (*conn, error) {
	deadline := time.Now().Add(o.DialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	d := net.Dialer{Deadline: deadline}
	nc, err := d.DialContext(ctx, "tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("resp: %w", err)
	}
	if o.TLS != nil {
		nc.SetDeadline(deadline) // bounds the handshake
		tc := tls.Client(nc, o.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("resp: TLS handshake with %s: %w", o.Addr, err)
		}
		nc = tc
	}
	cn := &conn{nc: nc, br: bufio.NewReaderSize(nc, readBufferSize)}
	if o.Password != "" {
		auth := []string{"AUTH", o.Password}
		if o.Username != "" {
			auth = []string{"AUTH", o.Username, o.Password}
		}
		if err := cn.setup(deadline, auth, "AUTH"); err != nil {
			return nil, err
		}
	}
	if o.DB != 0 {
		db := strconv.Itoa(o.DB)
		if err := cn.setup(deadline, []string{"SELECT", db}, "SELECT "+db); err != nil {
			return nil, err
		}
	}
	return cn, nil
}

// setup runs a connection-setup command before deadline, closing the
// connection if it fails; what names the command in errors.
func (cn *conn) setup(deadline time.Time, args []string, what string) error {
	_, _, err := roundTrip(cn, deadline, args, nil, nil, nil)
	if err == nil {
		return nil
	}
	cn.nc.Close()
	if _, ok := err.(Error); ok {
		return fmt.Errorf("resp: %s failed: %w", what, err)
	}
	return fmt.Errorf("resp: %s to %s: %w", what, cn.nc.RemoteAddr(), err)
}

// roundTrip sends the command made of a, b and c (in that order), or raw
// when not nil, a command already encoded, and reads its reply, all before
// deadline. sent reports whether the command may have run: false only
// when writing it failed, so that the server got at most a part of it,
// which it never runs. Once written, a command may have run even if the
// connection then ends without a reply (the server ran it and went down,
// or dropped the connection before answering), however soon it ends.
//
// It is a function: under Yaegi a method call costs four times as much.
func roundTrip(cn *conn, deadline time.Time, a, b, c []string, raw []byte) (v interface{}, sent bool, err error) {
	if err := cn.nc.SetDeadline(deadline); err != nil {
		return nil, false, err
	}
	buf := raw
	if buf == nil {
		if buf = appendCommand(cn.wbuf[:0], a, b, c); cap(buf) <= maxKeptWrite {
			cn.wbuf = buf
		}
	}
	if _, err := cn.nc.Write(buf); err != nil {
		return nil, false, err
	}
	v, err = readReplyAt(cn.br, 0, nil, nil)
	return v, true, err
}

// appendCommand appends the command made of a, b and c, in that order, as
// a RESP array of bulk strings. Each argument is one statement, and the
// header of a short one comes from bulkHeads: under Yaegi, statements and
// calls are what costs.
func appendCommand(buf []byte, a, b, c []string) []byte {
	buf = append(strconv.AppendInt(append(buf, '*'), int64(len(a)+len(b)+len(c)), 10), '\r', '\n')
	parts := [3][]string{a, b, c}
	for _, args := range parts {
		for _, s := range args {
			if len(s) < shortBulk {
				buf = append(append(append(buf, bulkHeads[len(s)]...), s...), '\r', '\n')
			} else {
				buf = append(append(append(strconv.AppendInt(append(buf, '$'), int64(len(s)), 10), '\r', '\n'), s...), '\r', '\n')
			}
		}
	}
	return buf
}

// shortBulk bounds the lengths whose bulk string headers bulkHeads holds.
const shortBulk = 128

// bulkHeads[n] is the header of a bulk string of n bytes, "$n\r\n".
var bulkHeads = func() (h [shortBulk]string) {
	for i := range h {
		h[i] = "$" + strconv.Itoa(i) + "\r\n"
	}
	return h
}()
