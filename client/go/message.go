package picomq

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"golang.org/x/net/http/httpguts"

	"github.com/PicoMQ/picomq/client/go/internal/h1"
)

// Appends skip net/http's request machinery. Every append used to build
// an http.Request (its header map, body reader and GetBody closure, a
// URL parse), be checked by the routing transport (the proxy settings,
// h1.Supports) and be rendered by the lean transport (header validation,
// the body copied through GetBody): some 15 allocations and a few µs of
// CPU before its write, and on the live tail, where the appender sleeps
// 5 ms between appends, that code runs with cold caches: 19-46 µs from
// Stream.Append to the write (BenchmarkTailSteps/paced; 21-48 µs p50 in
// the row's traces, docs/benchmarks.md), 10-14 µs since. What of it depends only on the stream's target
// URL (its request URI, Host, host:port, whether the lean transport may
// carry it) is now worked out once, when the target is first cached, and
// an append renders its bytes directly (sendMessage) for
// h1.Transport.RoundTripMessage, which keeps the lean transport's pool,
// stale-connection rule, cancellation and answer parsing.

// leanTarget is what an append to a cached target needs that does not
// change between appends.
type leanTarget struct {
	addr string // host:port to connect to
	uri  string // request URI
	host string // Host header
	// post describes the POSTs rendered for this target to the lean
	// transport, and is their response's Request. Shared, never
	// modified.
	post *http.Request
}

// leanTargetFor returns the leanTarget of req's URL, or nil when its
// requests must go through send: when the client has no routing transport
// of its own (WithHTTPClient, WithStdTransport), for https, user info in
// the URL (basic authentication by http.Client), a proxy, or header
// values the lean transport would refuse (those requests fail in send
// with the transport's error).
func (c *client) leanTargetFor(req *http.Request) *leanTarget {
	u := req.URL
	if c.rt == nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
		return nil
	}
	if !httpguts.ValidHeaderFieldValue(req.Host) || !httpguts.ValidHeaderFieldValue(c.userAgent) || !httpguts.ValidHeaderFieldValue(c.token) {
		return nil
	}
	if c.rt.std.Proxy != nil {
		// The proxy settings are read once per process
		// (http.ProxyFromEnvironment), so the answer for this URL holds
		// for its later requests.
		if p, err := c.rt.std.Proxy(req); err != nil || p != nil {
			return nil
		}
	}
	return &leanTarget{
		addr: h1.Addr(u),
		uri:  u.RequestURI(),
		host: req.Host,
		post: &http.Request{Method: http.MethodPost, URL: u, Host: req.Host, Header: http.Header{},
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1},
	}
}

// messagePool holds rendered requests.
var messagePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledMessage keeps large rendered requests out of the pool.
const maxPooledMessage = 64 << 10

// sendMessage renders cl, a POST, as the bytes newRequest and the lean
// transport would send for it (the same request line, Host, User-Agent,
// Authorization, headers, Content-Length and body; header order aside) and
// sends it through RoundTripMessage. ok is false, and nothing is sent,
// when cl has a header the lean transport does not take or an invalid
// one: send then handles it as before.
func (c *client) sendMessage(ctx context.Context, cl *call, lt *leanTarget) (resp *http.Response, ok bool, err error) {
	if cl.method != http.MethodPost {
		return nil, false, nil
	}
	replay := false
	for k := range cl.header {
		switch k {
		case "Host", "Content-Length", "User-Agent", "Authorization",
			"Expect", "Upgrade", "Connection", "Transfer-Encoding", "Te", "Trailer":
			return nil, false, nil
		case "Idempotency-Key", "X-Idempotency-Key":
			replay = true
		}
	}
	bp := messagePool.Get().(*[]byte)
	b := append((*bp)[:0], "POST "...)
	b = append(b, lt.uri...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, lt.host...)
	b = append(b, "\r\nUser-Agent: "...)
	if c.userAgent != "" {
		b = append(b, c.userAgent...)
	} else {
		b = append(b, "Go-http-client/1.1"...)
	}
	b = append(b, "\r\n"...)
	if c.token != "" {
		b = append(b, "Authorization: Bearer "...)
		b = append(b, c.token...)
		b = append(b, "\r\n"...)
	}
	b, err = h1.AppendHeader(b, cl.header)
	if err != nil {
		// An invalid name or value: nothing is sent here, and send
		// refuses it as before.
		*bp = b[:0]
		messagePool.Put(bp)
		return nil, false, nil
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(cl.body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, cl.body...)
	resp, err = c.rt.lean.RoundTripMessage(ctx, lt.addr, b, lt.post, replay)
	if cap(b) <= maxPooledMessage {
		*bp = b[:0]
		messagePool.Put(bp)
	}
	if err != nil {
		// As send wraps the lean transport's errors (and http.Client.Do
		// any transport's).
		return nil, true, &url.Error{Op: "Post", URL: lt.post.URL.String(), Err: err}
	}
	return resp, true, nil
}
