package httpx

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// net/http answers some malformed HTTP/1.1 requests itself, before any
// handler runs (headers over MaxHeaderBytes, an unparseable request line, an
// unsupported transfer encoding), with a text/plain body. The node promises
// a JSON error for every error it writes, so JSONErrorListener rewrites
// those canned responses on the way out.
//
// They are recognisable exactly: net/http writes each one with a single
// Write straight to the connection, the status line followed by these two
// headers and nothing else. Every response that passes through a handler
// carries a Date header, so it never matches.
const cannedHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// CodeHeaderTooLarge is the code of a 431: the request's header block is
// larger than the server accepts.
const CodeHeaderTooLarge = "request_header_too_large"

// JSONErrorListener wraps a plaintext listener so that the HTTP server's own
// error responses are JSON errors like every other. (Under TLS net/http
// needs the *tls.Conn itself, so those stay as net/http writes them.)
func JSONErrorListener(ln net.Listener) net.Listener { return jsonErrorListener{ln} }

type jsonErrorListener struct{ net.Listener }

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonErrorConn{Conn: c}, nil
}

type jsonErrorConn struct{ net.Conn }

func (c *jsonErrorConn) Write(p []byte) (int, error) {
	if b, ok := rewriteCanned(p); ok {
		if _, err := c.Conn.Write(b); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// rewriteCanned returns the JSON form of p if p is one of net/http's canned
// error responses.
func rewriteCanned(p []byte) ([]byte, bool) {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(p, []byte(proto)) {
		return nil, false
	}
	i := bytes.Index(p, []byte(cannedHeaders))
	if i < 0 || bytes.IndexByte(p[:i], '\n') >= 0 {
		return nil, false // the headers do not directly follow the status line
	}
	statusLine := string(p[len(proto):i])
	status, err := strconv.Atoi(strings.SplitN(statusLine, " ", 2)[0])
	if err != nil || status < 400 {
		return nil, false
	}
	code := wire.CodeBadRequest
	switch status {
	case 431:
		code = CodeHeaderTooLarge
	case 501:
		code = wire.CodeNotImplemented
	}
	msg := string(p[i+len(cannedHeaders):])
	switch status {
	case 431:
		msg = "request header fields too large (the server's limit is --max-header-bytes)"
	case 400:
		if msg == "400 Bad Request" {
			msg = "malformed HTTP request (request line or header fields do not parse)"
		}
	}
	body, _ := json.Marshal(wire.ErrorBody{Error: wire.ErrorDetail{Code: code, Message: msg}})
	body = append(body, '\n')
	var b bytes.Buffer
	b.WriteString(proto + statusLine + "\r\n")
	b.WriteString("Content-Type: " + wire.MediaJSON + "\r\n")
	b.WriteString("X-Content-Type-Options: nosniff\r\n")
	b.WriteString(wire.HeaderErrorCode + ": " + code + "\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	b.WriteString("Connection: close\r\n\r\n")
	b.Write(body)
	return b.Bytes(), true
}

// Allow serves h for the listed methods and answers every other method with
// 405, an Allow header and a JSON error. The node's own endpoints use it:
// a PUT /healthz answered 200 would read as "created" to a script.
func Allow(h http.Handler, methods ...string) http.Handler {
	allow := strings.Join(methods, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range methods {
			if r.Method == m {
				h.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("Allow", allow)
		w.Header().Set(wire.HeaderErrorCode, wire.CodeMethodNotAllowed)
		WriteError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed,
			r.Method+" is not supported on "+r.URL.Path+" (allowed: "+allow+")")
	})
}
