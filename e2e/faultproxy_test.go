package e2e

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// faultProxy is a small fault-injecting HTTP proxy the soak puts between
// the nodes and MinIO, so object storage can fail on command without
// restarting MinIO: every node's --object-store points at the proxy. It
// forwards requests unchanged (the Host header too, so the S3 signatures
// the nodes computed for the proxy's address still verify), or, by mode:
//
//   - proxyDown: drops every request's connection without an answer, as a
//     stopped or unreachable MinIO does;
//   - proxySlow: holds every request for the configured delay before
//     forwarding it, as an overloaded one does;
//   - proxy500: answers every request 500 with an S3 InternalError body,
//     as a failing one does.
type faultProxy struct {
	srv   *http.Server
	addr  string
	rp    *httputil.ReverseProxy
	mode  atomic.Int32
	delay atomic.Int64 // proxySlow: per-request delay in nanoseconds
}

const (
	proxyPass int32 = iota
	proxyDown
	proxySlow
	proxy500
)

// startFaultProxy starts a proxy to target (an http:// URL) on a loopback
// port, stopped when the test ends.
func startFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{addr: ln.Addr().String(), rp: httputil.NewSingleHostReverseProxy(u)}
	p.rp.ErrorLog = log.New(io.Discard, "", 0) // a dropped request is the fault, not news
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

// URL is the proxy's base URL.
func (p *faultProxy) URL() string { return "http://" + p.addr }

// set switches the mode; delay matters for proxySlow only.
func (p *faultProxy) set(mode int32, delay time.Duration) {
	p.delay.Store(int64(delay))
	p.mode.Store(mode)
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch p.mode.Load() {
	case proxyDown:
		// The server closes the connection without writing anything.
		panic(http.ErrAbortHandler)
	case proxy500:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` +
			`<Error><Code>InternalError</Code><Message>injected by the soak's fault proxy</Message></Error>`))
		return
	case proxySlow:
		select {
		case <-time.After(time.Duration(p.delay.Load())):
		case <-r.Context().Done():
			return
		}
	}
	p.rp.ServeHTTP(w, r)
}
