package h1lane

import (
	"bytes"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// chunkAfter is how much body is buffered before the response is sent
// chunked (unless the handler declared a Content-Length): net/http's
// figure.
const chunkAfter = 2048

// response is the lane's http.ResponseWriter: the status line and
// headers are formatted at WriteHeader (so later header changes have no
// effect, as with net/http), the body is buffered, and the whole response
// goes into the connection's write buffer when the handler returns —
// unless the body outgrows chunkAfter or the handler flushes, when it is
// sent as it comes (chunked, or raw after a declared Content-Length).
type response struct {
	c      *conn
	req    *http.Request
	header http.Header

	status      int
	wroteHeader bool
	sent        bool  // status line and headers are in the write buffer
	declared    int64 // the handler's Content-Length, -1 if none
	written     int64
	chunked     bool
	hasDate     bool
	hasType     bool
	closeAfter  bool
	head        *bytes.Buffer // status line and handler headers (the connection's)
	body        []byte
	err         error // a write to the connection failed
}

func (w *response) reset(r *http.Request) {
	clear(w.header)
	*w = response{c: w.c, req: r, header: w.header, head: w.head, body: w.body[:0], declared: -1,
		closeAfter: r.Close}
	w.head.Reset()
}

func (w *response) Header() http.Header { return w.header }

// WrittenStatus is the status sent, 0 before any: the node's request
// metrics read it instead of wrapping the writer (api/httpx.Instrument).
func (w *response) WrittenStatus() int {
	if !w.wroteHeader {
		return 0
	}
	return w.status
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199 || status == http.StatusNoContent || status == http.StatusNotModified)
}

// WriteHeader formats the status line and headers. Interim (1xx)
// responses are not sent: no handler of the node uses them.
func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.wroteHeader || code < 200 {
		return
	}
	w.wroteHeader, w.status = true, code
	h := w.header
	if te, ok := h["Transfer-Encoding"]; ok {
		// Framing is the lane's: a handler's chunked is what it does anyway
		// without a Content-Length.
		delete(h, "Transfer-Encoding")
		if len(te) > 0 {
			delete(h, "Content-Length")
		}
	}
	if cl := h.Get("Content-Length"); cl != "" {
		if n, ok := parseLength(strings.TrimSpace(cl)); ok && bodyAllowed(code) {
			w.declared = n
		} else {
			delete(h, "Content-Length")
		}
	}
	_, w.hasDate = h["Date"]
	_, w.hasType = h["Content-Type"]
	w.hasType = w.hasType || h.Get("Content-Encoding") != "" // net/http sniffs neither
	if !w.closeAfter {
		w.closeAfter = hasToken(h["Connection"], "close")
	}
	b := w.head
	b.WriteString("HTTP/1.1 ")
	b.WriteString(strconv.Itoa(code))
	b.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		b.WriteString(text)
	} else {
		b.WriteString("status code " + strconv.Itoa(code))
	}
	b.WriteString("\r\n")
	writeHeader(b, h)
}

// writeHeader writes h as net/http does (invalid names skipped, values
// trimmed, CR and LF in values turned into spaces), minus the sorting
// by name, which the wire does not need.
func writeHeader(b *bytes.Buffer, h http.Header) {
	for k, vs := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vs {
			b.WriteString(k)
			b.WriteString(": ")
			v = textproto.TrimString(v)
			if hasCRLF(v) {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			b.WriteString(v)
			b.WriteString("\r\n")
		}
	}
}

// hasCRLF is strings.ContainsAny(v, "\r\n") without its set built per call.
func hasCRLF(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] == '\r' || v[i] == '\n' {
			return true
		}
	}
	return false
}

func hasToken(vs []string, token string) bool {
	for _, v := range vs {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	if w.err != nil {
		return 0, w.err
	}
	w.written += int64(len(p))
	if !w.sent {
		if len(w.body)+len(p) <= chunkAfter {
			w.body = append(w.body, p...)
			return len(p), nil
		}
		w.send()
	}
	w.writeBody(p)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// WriteString lets io.WriteString skip a conversion.
func (w *response) WriteString(s string) (int, error) {
	if !w.sent && w.wroteHeader && bodyAllowed(w.status) && w.err == nil && len(w.body)+len(s) <= chunkAfter &&
		(w.declared < 0 || w.written+int64(len(s)) <= w.declared) {
		w.body = append(w.body, s...)
		w.written += int64(len(s))
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// send writes the status line and headers, framing the rest as streamed
// (chunked unless declared), and the body buffered so far.
func (w *response) send() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.sent = true
	if bodyAllowed(w.status) && w.declared < 0 {
		w.chunked = true
	}
	w.writeHead(w.chunked)
	body := w.body
	w.body = w.body[:0]
	if len(body) > 0 {
		w.writeBody(body)
	}
}

// writeHead writes the formatted head plus the headers only known now.
func (w *response) writeHead(chunked bool) {
	bw := w.c.bw
	_, _ = bw.Write(w.head.Bytes())
	if !w.hasDate {
		bw.WriteString("Date: ")
		bw.WriteString(httpDate())
		bw.WriteString("\r\n")
	}
	if !w.hasType && len(w.body) > 0 && bodyAllowed(w.status) {
		bw.WriteString("Content-Type: ")
		bw.WriteString(http.DetectContentType(w.body))
		bw.WriteString("\r\n")
	}
	switch {
	case chunked:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case w.declared < 0 && bodyAllowed(w.status):
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.Itoa(len(w.body)))
		bw.WriteString("\r\n")
	}
	if w.closeAfter && !hasToken(w.header["Connection"], "close") {
		bw.WriteString("Connection: close\r\n")
	}
	_, err := bw.WriteString("\r\n")
	w.fail(err)
}

func (w *response) writeBody(p []byte) {
	bw := w.c.bw
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, err := bw.WriteString("\r\n")
		w.fail(err)
		return
	}
	_, err := bw.Write(p)
	w.fail(err)
}

func (w *response) fail(err error) {
	if err != nil && w.err == nil {
		w.err = err
		w.closeAfter = true
	}
}

// finish completes the response after the handler returned.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent {
		if w.declared >= 0 && int64(len(w.body)) < w.declared {
			w.closeAfter = true // the client would wait for bytes that never come
		}
		w.sent = true
		w.writeHead(false)
		if len(w.body) > 0 {
			_, err := w.c.bw.Write(w.body)
			w.fail(err)
		}
		return
	}
	if w.chunked {
		_, err := w.c.bw.WriteString("0\r\n\r\n")
		w.fail(err)
	} else if w.declared >= 0 && w.written < w.declared {
		w.closeAfter = true
	}
}

// Flush sends what is buffered (http.Flusher).
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *response) FlushError() error {
	if !w.sent {
		w.send()
	}
	if w.err != nil {
		return w.err
	}
	w.fail(w.c.bw.Flush())
	return w.err
}

// SetReadDeadline bounds the reading of the request body (the node's
// --body-timeout goes through http.ResponseController); the socket gets
// it only if a body read has to wait for it.
func (w *response) SetReadDeadline(t time.Time) error {
	w.c.setReadDeadline(t)
	return nil
}

// SetWriteDeadline bounds the writing of the response.
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.rwc.SetWriteDeadline(t) }

// dateCache is the Date header value of the current second.
var dateCache atomic.Pointer[struct {
	sec int64
	s   string
}]

func httpDate() string {
	now := time.Now()
	if d := dateCache.Load(); d != nil && d.sec == now.Unix() {
		return d.s
	}
	d := &struct {
		sec int64
		s   string
	}{now.Unix(), now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}
