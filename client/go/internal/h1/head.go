package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"

	"golang.org/x/net/http/httpguts"
)

// parseSimple reads the response to req from br without net/http's
// parser when the response has the plain shape PicoMQ's answers to writes
// have, and otherwise leaves br untouched and reports false, for
// http.ReadResponse to read it.
//
// Why: header parsing in http.ReadResponse (textproto's map building and
// per-line allocations) was about a tenth of the load generator's CPU.
//
// The plain shape, for which the result is exactly http.ReadResponse's
// (FuzzParseSimple checks that on arbitrary bytes): the whole head is
// already buffered; an "HTTP/1.1 ddd reason" status line with a status
// from 200 to 599 other than 204 and 304; CRLF-terminated "Name: value"
// lines of token names and printable ASCII values (tabs allowed), no
// continuation lines; exactly one Content-Length of decimal digits; no
// Transfer-Encoding, Connection, Trailer or Pragma header; a request that
// is not a HEAD. Anything else — chunked bodies, close framing, 1xx, odd
// bytes — goes to http.ReadResponse.
func parseSimple(br *bufio.Reader, req *http.Request) (*http.Response, bool) {
	if req != nil && req.Method == http.MethodHead {
		return nil, false
	}
	if br.Buffered() == 0 {
		if _, err := br.Peek(1); err != nil {
			return nil, false
		}
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, crlfcrlf)
	if end < 0 {
		return nil, false
	}
	head := buf[:end+2] // every line with its CRLF
	nl := bytes.IndexByte(head, '\n')
	if nl < 1 || head[nl-1] != '\r' {
		return nil, false
	}
	line := head[:nl-1]
	// "HTTP/1.1 200 OK": a three-digit status, one space, a reason.
	if len(line) < 13 || string(line[:9]) != "HTTP/1.1 " || line[12] != ' ' {
		return nil, false
	}
	d0, d1, d2 := line[9], line[10], line[11]
	if d0 < '2' || d0 > '5' || d1 < '0' || d1 > '9' || d2 < '0' || d2 > '9' {
		return nil, false
	}
	code := int(d0-'0')*100 + int(d1-'0')*10 + int(d2-'0')
	if code == http.StatusNoContent || code == http.StatusNotModified || !printable(line[13:], false) {
		return nil, false
	}
	rest := head[nl+1:]
	// Count the lines first: one map and one value array of that size.
	n := bytes.Count(rest, crlf)
	if n == 0 {
		return nil, false // no Content-Length
	}
	// One string holds the status text and every value.
	s := string(buf[9:end])
	hdr := make(http.Header, n)
	vals := make([]string, n)
	contentLength := int64(-1)
	off := nl + 1 - 9 // rest's offset in s
	for len(rest) > 0 {
		i := bytes.Index(rest, crlf)
		kv := rest[:i]
		colon := bytes.IndexByte(kv, ':')
		if colon <= 0 || !printable(kv[colon+1:], true) {
			return nil, false
		}
		key, ok := headerKey(kv[:colon])
		if !ok {
			return nil, false
		}
		// The value without the spaces and tabs around it, as
		// textproto trims them.
		vs, ve := colon+1, len(kv)
		for vs < ve && (kv[vs] == ' ' || kv[vs] == '\t') {
			vs++
		}
		for ve > vs && (kv[ve-1] == ' ' || kv[ve-1] == '\t') {
			ve--
		}
		v := s[off+vs : off+ve]
		switch key {
		case "Transfer-Encoding", "Connection", "Trailer", "Pragma":
			return nil, false
		case "Content-Length":
			if contentLength >= 0 || len(v) == 0 || len(v) > 18 {
				return nil, false
			}
			contentLength = 0
			for j := 0; j < len(v); j++ {
				if v[j] < '0' || v[j] > '9' {
					return nil, false
				}
				contentLength = contentLength*10 + int64(v[j]-'0')
			}
		}
		if vv := hdr[key]; vv != nil {
			hdr[key] = append(vv, v)
		} else {
			vals[0] = v
			hdr[key] = vals[:1:1]
			vals = vals[1:]
		}
		rest = rest[i+2:]
		off += i + 2
	}
	if contentLength < 0 {
		return nil, false
	}
	resp := &http.Response{
		Status:        s[:len(line)-9],
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        hdr,
		ContentLength: contentLength,
		Request:       req,
		Body:          http.NoBody,
	}
	if _, err := br.Discard(end + 4); err != nil {
		return nil, false // cannot happen: the head is buffered
	}
	if contentLength > 0 {
		resp.Body = &fixedBody{r: br, n: contentLength}
	}
	return resp, true
}

var (
	crlf     = []byte("\r\n")
	crlfcrlf = []byte("\r\n\r\n")
)

// printable reports whether b has only printable ASCII (and tabs, when
// tab): no line breaks, controls or bytes above 0x7e, which are left to
// net/http's rules.
func printable(b []byte, tab bool) bool {
	for _, c := range b {
		if (c < ' ' || c > '~') && !(tab && c == '\t') {
			return false
		}
	}
	return true
}

// headerKey is the canonical form of the header name k, without an
// allocation for the names PicoMQ's answers carry; false if k is not a
// token.
func headerKey(k []byte) (string, bool) {
	switch string(k) {
	case "Content-Type":
		return "Content-Type", true
	case "Content-Length":
		return "Content-Length", true
	case "Date":
		return "Date", true
	case "Location":
		return "Location", true
	case "Pico-Offset":
		return "Pico-Offset", true
	case "Pico-Next-Offset":
		return "Pico-Next-Offset", true
	case "Pico-Timestamp":
		return "Pico-Timestamp", true
	case "Pico-Record-Count":
		return "Pico-Record-Count", true
	case "Pico-Served-By":
		return "Pico-Served-By", true
	case "Stream-Next-Offset":
		return "Stream-Next-Offset", true
	}
	if !httpguts.ValidHeaderFieldName(string(k)) {
		return "", false
	}
	return textproto.CanonicalMIMEHeaderKey(string(k)), true
}

// fixedBody is a body of a known length read from the connection's
// buffer, ending as net/http's does: io.EOF with the last bytes,
// io.ErrUnexpectedEOF if the connection ends first.
type fixedBody struct {
	r *bufio.Reader
	n int64
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	if b.n == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *fixedBody) Close() error { return nil }
