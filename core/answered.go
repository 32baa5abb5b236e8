package core

import (
	"bufio"
	"net"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/core/model"
)

// ServeAnswered passes r, which the verdict v on asks admitted, to next
// through a writer that keeps its response's status and counts the bytes
// of its body, then settles v with Answered: the status next wrote, 200
// when it wrote nothing, none (the charges kept) when it hijacked the
// connection or panicked before writing; the header next set, trailers
// included; the bytes it wrote. A panic after next began its response is
// settled by Aborted, and goes on. The writer passes everything through,
// flushing and hijacking included, and unwraps for
// http.ResponseController. Hosts call it only for limits that must see
// their response (AnswerCounts), so that other requests reach next with
// their writer untouched.
func (g *Gate) ServeAnswered(next http.Handler, w http.ResponseWriter, r *http.Request, asks []model.Ask, v *Verdict) {
	(&statusWriter{ResponseWriter: w, gate: g, asks: asks, v: v, aborts: true}).serve(next, r)
}

// serve is ServeAnswered through w, which wraps its writer and holds
// what it settles. When w.aborts, a handler that panics once its
// response began, as a proxy aborts a response whose client or upstream
// left, has it settled by Aborted (w.abort); one that panics before
// keeps its charges. Only a cost from the response needs aborts: for a
// limit that counts statuses, Aborted keeps the charges too, and a
// deferred call costs the interpreter some 65 allocations.
func (w *statusWriter) serve(next http.Handler, r *http.Request) {
	if w.aborts {
		defer w.abort()
	}
	next.ServeHTTP(w, r)
	w.settled = true
	switch w.status {
	case 0:
		w.status = http.StatusOK // as net/http answers a handler that wrote nothing
	case hijacked:
		w.status = 0
	}
	w.gate.answered(r.Context().Err() != nil, w.asks, w.v, w.status, w.ResponseWriter.Header(), w.bytes)
}

// abort settles as Aborted does the response of a handler that panicked
// once it began, unless serve settled it.
func (w *statusWriter) abort() {
	if !w.settled && w.status > 0 {
		w.gate.answered(true, w.asks, w.v, w.status, w.ResponseWriter.Header(), w.bytes)
	}
}

// statusWriter is ServeAnswered's writer. status is the response's, once
// written, or hijacked once the connection is, which counts as no
// response; bytes counts the body written.
//
// A writer made with flushStreams set also flushes a streamed response
// (one without a Content-Length when its header is written, as a chunked
// body, or of server-sent events) at its header and after each write, as
// net/http/httputil.ReverseProxy flushes one: for hosts whose handlers
// cannot call its Flush. Traefik's interpreter hands statusWriter on as
// a writer with the methods of http.ResponseWriter and http.Hijacker only,
// so its proxy cannot flush; without this, a stream would reach the
// client only as buffers fill.
type statusWriter struct {
	http.ResponseWriter
	status       int
	bytes        int64
	flushStreams bool
	flusher      *http.ResponseController // set when each write is flushed
	// What serve settles: gate's verdict v on asks; whether it
	// settles a response aborted once it began (abort), and whether it has
	// been settled.
	gate    *Gate
	asks    []model.Ask
	v       *Verdict
	aborts  bool
	settled bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
		w.streaming()
	}
	w.ResponseWriter.WriteHeader(code)
	if w.flusher != nil {
		_ = w.flusher.Flush() // a stream's header at once, before its first event
	}
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
		w.streaming()
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	if w.flusher != nil && err == nil {
		_ = w.flusher.Flush()
	}
	return n, err
}

// streaming sets w.flusher when w flushes streams and the response about
// to be written, not a 101, is a stream as httputil.ReverseProxy tells
// one: no Content-Length, or server-sent events.
func (w *statusWriter) streaming() {
	if !w.flushStreams || w.status == http.StatusSwitchingProtocols {
		return
	}
	if h := w.ResponseWriter.Header(); h.Get("Content-Length") == "" || strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		w.flusher = http.NewResponseController(w.ResponseWriter)
	}
}

// hijacked is statusWriter.status after a Hijack.
const hijacked = -1

// Flush flushes the response, when the writer it wraps can.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
		w.streaming()
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection to the handler, as the writer it wraps
// does; a hijacked request keeps its charge.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.status = hijacked
	}
	return c, rw, err
}

// Unwrap returns the writer w wraps, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
