// Package h1 is the Go client's lean HTTP/1.1 transport: an
// http.RoundTripper for the SDK's own small requests (appends, creates,
// deletes, HEADs) over cleartext connections, run entirely in the calling
// goroutine.
//
// Why: net/http's Transport hands every request to two goroutines per
// connection (a writer and a reader) and back over channels, and builds
// the request's bytes through several layers. On a machine where the load
// generator shares the CPU with the server, that machinery cost the client
// more CPU per append than the server spent on the append. This transport
// writes the request in one write from pre-built bytes and reads the
// answer in the caller's goroutine with net/http's own parser
// (http.ReadResponse), so the response semantics — status line, header
// canonicalisation, Content-Length, chunked bodies and trailers, HEAD, 204
// and 304 without bodies, Connection: close — are net/http's. Plain
// answers (a complete buffered head, Content-Length framing, nothing
// unusual: see parseSimple) are parsed by a smaller parser of its own that
// makes exactly what http.ReadResponse makes of them (fuzzed against it),
// for less CPU.
//
// What it does not do, by design (the SDK keeps net/http for those): TLS,
// proxies, HTTP/2, streaming request bodies, Expect: 100-continue,
// protocol upgrades, transparent gzip. Its owner decides per request which
// transport to use.
//
// # Connections
//
// Connections are pooled per host:port, one request at a time each. A
// connection returns to the pool only after the response's body has been
// read to its end (or when the response has no body) and the server did
// not ask to close it; a body closed early closes its connection. At most
// MaxIdlePerHost idle connections are kept per host, each for at most
// IdleTimeout.
//
// # Stale connections
//
// A pooled connection may have been closed by the server while idle.
// Before reusing one, the transport checks, without blocking, that the
// server has neither closed it nor sent anything unasked (see probe); such
// a connection is discarded. The check cannot close the race of a server
// closing the connection just after it, so the rule net/http applies is
// applied too: when a request on a reused connection fails before any byte
// of a response arrived, it is sent again once on a new connection only if
// nothing of it was written, or if it is replayable — its method is GET,
// HEAD, OPTIONS or TRACE, or it carries an Idempotency-Key or
// X-Idempotency-Key header. Any other request fails with the error, since
// the server may have processed it; the caller's own retry policy decides.
// A request on a new connection is never resent.
//
// # Cancellation
//
// The request's context bounds the dial, the write, the wait for the
// response and the reading of its body: when it ends, the connection's
// deadline is set to the past, which aborts any blocked read or write, and
// the connection is discarded.
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Defaults, net/http's for its default transport with the SDK's
// MaxIdleConnsPerHost.
const (
	DefaultMaxIdlePerHost = 64
	DefaultIdleTimeout    = 90 * time.Second
)

// maxInterim bounds the 1xx responses skipped before the final one (a
// server sending them forever must not hold the caller).
const maxInterim = 5

// readBufSize is the per-connection read buffer.
const readBufSize = 4 << 10

// ErrServerClosedIdle is returned when the server closed a reused
// connection before answering a request that may not be resent.
var ErrServerClosedIdle = errors.New("h1: server closed idle connection")

// Transport is a pool of HTTP/1.1 connections; see the package
// documentation. The zero value is ready to use; it must not be copied
// after first use.
type Transport struct {
	// MaxIdlePerHost bounds the idle connections kept per host:port
	// (DefaultMaxIdlePerHost when 0).
	MaxIdlePerHost int
	// IdleTimeout is how long an idle connection is kept
	// (DefaultIdleTimeout when 0).
	IdleTimeout time.Duration
	// DialContext dials new connections (a net.Dialer with net/http's
	// default timeouts when nil). Its errors are returned unwrapped, so a
	// *net.OpError of Op "dial" stays recognisable.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	mu      sync.Mutex
	idle    map[string][]*conn // per host:port, oldest first
	janitor *time.Timer        // armed while any connection is idle
}

// conn is one pooled connection.
type conn struct {
	nc     net.Conn
	br     *bufio.Reader
	addr   string
	idleAt time.Time // when it was last put in the pool
	reused bool      // it has carried a request before
	probe  *probe    // its liveness check before reuse (nil: none)
}

var defaultDialer = net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}

func (t *Transport) maxIdle() int {
	if t.MaxIdlePerHost > 0 {
		return t.MaxIdlePerHost
	}
	return DefaultMaxIdlePerHost
}

func (t *Transport) idleTimeout() time.Duration {
	if t.IdleTimeout > 0 {
		return t.IdleTimeout
	}
	return DefaultIdleTimeout
}

// Supports reports whether RoundTrip can send req: cleartext http, a body
// that is absent or can be re-obtained in full (GetBody, as
// http.NewRequest sets for in-memory readers), and none of the features
// this transport leaves to net/http. It does not look at proxies: the
// caller decides that.
func Supports(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil || req.ContentLength > 0 && req.GetBody == nil {
		return false
	}
	if req.ContentLength < 0 || len(req.TransferEncoding) > 0 || req.Close {
		return false
	}
	for _, k := range [...]string{"Expect", "Upgrade", "Connection", "Transfer-Encoding", "Te", "Trailer"} {
		if _, ok := req.Header[k]; ok {
			return false
		}
	}
	return req.Trailer == nil
}

// RoundTrip sends req and returns the response; see the package
// documentation for connection reuse, stale connections and
// cancellation. req must satisfy Supports.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !Supports(req) {
		return nil, fmt.Errorf("h1: unsupported request %s %s", req.Method, req.URL.Redacted())
	}
	if req.Body != nil {
		// RoundTrip must close the request body, as net/http's does.
		defer req.Body.Close()
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	msg, err := buildRequest(req)
	if err != nil {
		return nil, err
	}
	defer putBuf(msg)
	return t.exchange(ctx, canonicalAddr(req), *msg, req, replayable(req))
}

// RoundTripMessage is RoundTrip for a request its caller has rendered
// itself: msg is the complete HTTP/1.1 request (request line, Host,
// headers, Content-Length, body), valid header fields only, and req
// describes it for reading the answer (its Method; it becomes the
// response's Request and is not modified or sent). addr is the server's
// host:port and replay says whether msg may be sent twice (see the
// package documentation on stale connections). msg may be reused once it
// returns.
//
// Why: a producer sends the same request shape again and again; building
// an http.Request for each and rendering it here cost more CPU than
// rendering its bytes directly from what the caller keeps per stream,
// and on the live tail's path that CPU runs with caches gone cold between
// appends (docs/benchmarks.md).
func (t *Transport) RoundTripMessage(ctx context.Context, addr string, msg []byte, req *http.Request, replay bool) (*http.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.exchange(ctx, addr, msg, req, replay)
}

// exchange sends msg to addr on a pooled or new connection and returns
// the answer, resending it once on a new connection when a reused one
// failed before anything came back and the rule allows it.
func (t *Transport) exchange(ctx context.Context, addr string, msg []byte, req *http.Request, replay bool) (*http.Response, error) {
	c, err := t.get(ctx, addr)
	if err != nil {
		return nil, err
	}
	resp, err := t.roundTrip(ctx, c, req, msg)
	if err == nil {
		return resp, nil
	}
	var nr *nothingReceived
	if !c.reused || !errors.As(err, &nr) {
		return nil, err
	}
	if !nr.nothingWritten && !replay {
		// The server may have read and processed the request.
		if isEOF(nr.err) {
			return nil, fmt.Errorf("%w (%v)", ErrServerClosedIdle, nr.err)
		}
		return nil, err
	}
	// A reused connection failed before anything came back and the
	// request may be sent again: once, on a new connection.
	if c, err = t.dial(ctx, addr); err != nil {
		return nil, err
	}
	return t.roundTrip(ctx, c, req, msg)
}

// nothingReceived marks a failure before any byte of a response arrived:
// the condition under which a request on a reused connection may be
// resent.
type nothingReceived struct {
	err            error
	nothingWritten bool
}

func (e *nothingReceived) Error() string { return e.err.Error() }
func (e *nothingReceived) Unwrap() error { return e.err }

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// replayable is net/http's definition: a request that can be sent twice
// without harm, by its method or an idempotency key.
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

// roundTrip sends msg on c and reads the response head. On error c is
// closed; the error is a *nothingReceived when nothing of a response had
// arrived.
func (t *Transport) roundTrip(ctx context.Context, c *conn, req *http.Request, msg []byte) (resp *http.Response, err error) {
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
	}
	fail := func(err error) (*http.Response, error) {
		if stop != nil {
			stop()
		}
		c.nc.Close()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
	n, err := c.nc.Write(msg)
	if err != nil {
		return fail(&nothingReceived{err: fmt.Errorf("h1: writing the request: %w", err), nothingWritten: n == 0})
	}
	// Nothing received yet: a failure here is one net/http may retry.
	if _, err := c.br.Peek(1); err != nil {
		return fail(&nothingReceived{err: fmt.Errorf("h1: reading the response: %w", err)})
	}
	resp, err = readResponse(c.br, req)
	if err != nil {
		return fail(err)
	}
	c.reused = true
	release := func(reuse bool) {
		if reuse {
			t.put(c)
		} else {
			c.nc.Close()
		}
	}
	return wrapBody(ctx, resp, stop, release), nil
}

// readResponse reads the final response to req from br, skipping interim
// (1xx) responses as net/http's Transport does. The parsing is
// http.ReadResponse's, or parseSimple's for the plain responses whose
// result it makes exactly as http.ReadResponse would.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	for interim := 0; ; interim++ {
		if resp, ok := parseSimple(br, req); ok {
			return resp, nil // a final response: parseSimple takes no 1xx
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, fmt.Errorf("h1: reading the response: %w", err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode < 100 {
			return resp, nil
		}
		// 1xx: an interim response without a body, followed by the
		// real one. 101 would switch protocols, which was not asked for.
		if resp.StatusCode == http.StatusSwitchingProtocols || interim >= maxInterim {
			return nil, fmt.Errorf("h1: unexpected %s response", resp.Status)
		}
	}
}

// wrapBody makes resp's body call release once the exchange is over:
// release(true) when the body was read to its end (or there is none), the
// server did not ask to close the connection and the context did not
// interrupt it (stop, the context's AfterFunc's stop, succeeded or is
// nil); release(false) otherwise.
func wrapBody(ctx context.Context, resp *http.Response, stop func() bool, release func(reuse bool)) *http.Response {
	b := &body{release: release, stop: stop, ctx: ctx, keep: !resp.Close}
	if resp.Body == http.NoBody || resp.Body == nil {
		resp.Body = http.NoBody
		b.finish(true)
		return resp
	}
	b.rc = resp.Body
	resp.Body = b
	return resp
}

// aLongTimeAgo is a deadline in the past: setting it aborts blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)

// body is a response body that gives its connection back to the pool at
// its end.
type body struct {
	release func(reuse bool)
	rc      io.ReadCloser
	stop    func() bool // stops the context's AfterFunc; nil without one
	ctx     context.Context
	keep    bool // the server did not ask to close the connection

	mu  sync.Mutex
	err error // what Read returns once the exchange has ended
}

var errBodyClosed = errors.New("h1: read on closed response body")

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	err := b.err
	b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.end(true, io.EOF)
	case err != nil:
		if ctxErr := b.ctx.Err(); ctxErr != nil {
			err = ctxErr
		}
		b.end(false, err)
	}
	return n, err
}

// Close closes the connection unless the body was read to its end: what
// is left of the body is not read.
func (b *body) Close() error {
	b.end(false, errBodyClosed)
	return nil
}

// finish ends an exchange without a body to read.
func (b *body) finish(complete bool) { b.end(complete, io.EOF) }

// end ends the exchange once, leaving err for later Reads: the connection
// goes back to the pool if the body was read to its end, the server keeps
// it open and the context did not interrupt it; otherwise it is closed.
func (b *body) end(complete bool, err error) {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return
	}
	b.err = err
	b.mu.Unlock()
	intact := b.stop == nil || b.stop()
	b.release(complete && b.keep && intact)
}

// canonicalAddr is req's host:port, port 80 by default.
func canonicalAddr(req *http.Request) string { return Addr(req.URL) }

// Addr is the host:port RoundTrip connects to for a request to u (port 80
// by default), for RoundTripMessage's callers.
func Addr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// get returns an idle connection to addr that is still open, or a new one.
func (t *Transport) get(ctx context.Context, addr string) (*conn, error) {
	now := time.Now()
	for {
		t.mu.Lock()
		list := t.idle[addr]
		if len(list) == 0 {
			t.mu.Unlock()
			return t.dial(ctx, addr)
		}
		c := list[len(list)-1] // the most recently used: the likeliest open
		list[len(list)-1] = nil
		t.idle[addr] = list[:len(list)-1]
		t.mu.Unlock()
		if now.Sub(c.idleAt) < t.idleTimeout() && c.br.Buffered() == 0 && c.probe.alive() {
			return c, nil
		}
		c.nc.Close()
	}
}

func (t *Transport) dial(ctx context.Context, addr string) (*conn, error) {
	dial := t.DialContext
	if dial == nil {
		dial = defaultDialer.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, readBufSize), addr: addr, probe: newProbe(nc)}, nil
}

// put returns c to the pool, or closes it when the pool is full.
func (t *Transport) put(c *conn) {
	// No deadline to clear: the only one ever set (by a context's end)
	// keeps the connection out of the pool.
	c.idleAt = time.Now()
	t.mu.Lock()
	if t.idle == nil {
		t.idle = make(map[string][]*conn)
	}
	list := t.idle[c.addr]
	if len(list) >= t.maxIdle() {
		t.mu.Unlock()
		c.nc.Close()
		return
	}
	t.idle[c.addr] = append(list, c)
	if t.janitor == nil {
		t.janitor = time.AfterFunc(t.idleTimeout(), t.prune)
	}
	t.mu.Unlock()
}

// prune closes connections idle for longer than the idle timeout, so that
// an unused client does not keep them open, and re-arms itself while any
// remain.
func (t *Transport) prune() {
	timeout := t.idleTimeout()
	now := time.Now()
	var stale []*conn
	t.mu.Lock()
	oldest := now
	for addr, list := range t.idle {
		i := 0
		for i < len(list) && now.Sub(list[i].idleAt) >= timeout {
			stale = append(stale, list[i])
			i++
		}
		if i == len(list) {
			delete(t.idle, addr)
			continue
		}
		t.idle[addr] = append(list[:0], list[i:]...)
		if first := t.idle[addr][0].idleAt; first.Before(oldest) {
			oldest = first
		}
	}
	if len(t.idle) > 0 {
		t.janitor = time.AfterFunc(oldest.Add(timeout).Sub(now), t.prune)
	} else {
		t.janitor = nil
	}
	t.mu.Unlock()
	for _, c := range stale {
		c.nc.Close()
	}
}

// CloseIdleConnections closes the pooled connections; connections in use
// are closed when their response ends.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	if t.janitor != nil {
		t.janitor.Stop()
		t.janitor = nil
	}
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.nc.Close()
		}
	}
}

// bufPool holds request buffers.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledBuf keeps large request buffers out of the pool.
const maxPooledBuf = 64 << 10

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBuf {
		*b = (*b)[:0]
		bufPool.Put(b)
	}
}

// AppendHeader appends h's fields to b as HTTP/1.1 header lines, leaving
// out the names in skip. An invalid name or value is an error, and what
// was appended is then not to be sent. buildRequest and the SDK's
// pre-rendered appends (sendMessage) both write their headers with it.
func AppendHeader(b []byte, h http.Header, skip ...string) ([]byte, error) {
	for k, vs := range h {
		if slices.Contains(skip, k) {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return b, fmt.Errorf("h1: invalid header field name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return b, fmt.Errorf("h1: invalid header field value for %q", k)
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	return b, nil
}

// buildRequest renders req, head and body, into one pooled buffer.
func buildRequest(req *http.Request) (*[]byte, error) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !httpguts.ValidHeaderFieldValue(host) {
		return nil, fmt.Errorf("h1: invalid Host %q", host)
	}
	bp := bufPool.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, req.URL.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	if _, ok := req.Header["User-Agent"]; !ok {
		b = append(b, "User-Agent: Go-http-client/1.1\r\n"...)
	}
	// Host and Content-Length are written from the request's fields.
	b, err := AppendHeader(b, req.Header, "Host", "Content-Length")
	if err != nil {
		*bp = b
		putBuf(bp)
		return nil, err
	}
	// net/http sends a Content-Length of 0 for bodiless requests of the
	// methods that usually carry one.
	if req.ContentLength > 0 || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, req.ContentLength, 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	if req.ContentLength > 0 {
		// Read the body from GetBody, not req.Body, so that a retry on a
		// new connection sends the same bytes.
		rc, err := req.GetBody()
		if err != nil {
			*bp = b
			putBuf(bp)
			return nil, fmt.Errorf("h1: request body: %w", err)
		}
		start := len(b)
		b = slices.Grow(b, int(req.ContentLength))[:start+int(req.ContentLength)]
		_, err = io.ReadFull(rc, b[start:])
		rc.Close()
		if err != nil {
			*bp = b
			putBuf(bp)
			return nil, fmt.Errorf("h1: request body: %w", err)
		}
	}
	*bp = b
	return bp, nil
}
