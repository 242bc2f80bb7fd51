// Package faultproxy is a small fault-injecting HTTP reverse proxy for
// tests: put between a node and MinIO (or any HTTP server), it forwards
// requests unchanged (the Host header too, so S3 signatures computed for
// the proxy's address still verify) or fails them on command, the ways an
// object store fails across a network.
package faultproxy

import (
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"
)

// Mode is what the proxy does with each request.
type Mode int32

const (
	// Pass forwards requests.
	Pass Mode = iota
	// Down closes every request's connection without an answer, as a
	// stopped or unreachable server does.
	Down
	// Slow holds every request for the configured delay, then forwards
	// it, as an overloaded server does.
	Slow
	// Error answers every request 500 with an S3 InternalError body.
	Error
	// Cut forwards GETs but aborts the connection after the headers and
	// a random 1 byte to 64 KiB of the body; other requests pass.
	Cut
)

// Proxy is a running fault proxy.
type Proxy struct {
	srv   *http.Server
	addr  string
	rp    *httputil.ReverseProxy
	mode  atomic.Int32
	delay atomic.Int64 // Slow: per-request delay in nanoseconds
}

// Start starts a proxy to target (an http:// URL) on a loopback port.
func Start(target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{addr: ln.Addr().String(), rp: httputil.NewSingleHostReverseProxy(u)}
	p.rp.ErrorLog = log.New(io.Discard, "", 0) // a dropped request is the fault, not news
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's base URL.
func (p *Proxy) URL() string { return "http://" + p.addr }

// Set switches the mode; delay matters for Slow only.
func (p *Proxy) Set(m Mode, delay time.Duration) {
	p.delay.Store(int64(delay))
	p.mode.Store(int32(m))
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() error { return p.srv.Close() }

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch Mode(p.mode.Load()) {
	case Down:
		// The server closes the connection without writing anything.
		panic(http.ErrAbortHandler)
	case Error:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
			`<Error><Code>InternalError</Code><Message>injected by a test's fault proxy</Message></Error>`)
		return
	case Slow:
		select {
		case <-time.After(time.Duration(p.delay.Load())):
		case <-r.Context().Done():
			return
		}
	case Cut:
		if r.Method == http.MethodGet {
			p.rp.ServeHTTP(&cutWriter{ResponseWriter: w, left: 1 + rand.IntN(64<<10)}, r)
			return
		}
	}
	p.rp.ServeHTTP(w, r)
}

// cutWriter passes the headers and the first left bytes of a body on,
// then aborts the connection.
type cutWriter struct {
	http.ResponseWriter
	left int
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if len(b) > c.left {
		_, _ = c.ResponseWriter.Write(b[:c.left])
		if f, ok := c.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		panic(http.ErrAbortHandler)
	}
	c.left -= len(b)
	return c.ResponseWriter.Write(b)
}
