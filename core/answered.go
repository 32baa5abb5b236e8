package core

import (
	"bufio"
	"net"
	"net/http"

	"github.com/sluicehq/sluice/core/model"
)

// ServeAnswered passes r, which the verdict v on asks admitted, to next
// through a writer that keeps its response's status and counts the bytes
// of its body, then settles v with Answered: the status next wrote, 200
// when it wrote nothing, none (the charges kept) when it hijacked the
// connection or panicked; the header next set; the bytes it wrote. The
// writer passes everything through, flushing and hijacking included, and
// unwraps for http.ResponseController. Hosts call it only for limits
// that must see their response (AnswerCounts), so that other requests
// reach next with their writer untouched.
func (g *Gate) ServeAnswered(next http.Handler, w http.ResponseWriter, r *http.Request, asks []model.Ask, v *Verdict) {
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	// Not deferred: a request whose handler panics keeps its charge.
	switch sw.status {
	case 0:
		sw.status = http.StatusOK // as net/http answers a handler that wrote nothing
	case hijacked:
		sw.status = 0
	}
	g.Answered(r.Context(), asks, v, sw.status, w.Header(), sw.bytes)
}

// statusWriter is ServeAnswered's writer. status is the response's, once
// written, or hijacked once the connection is, which counts as no
// response; bytes counts the body written.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// hijacked is statusWriter.status after a Hijack.
const hijacked = -1

// Flush flushes the response, when the writer it wraps can.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
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
