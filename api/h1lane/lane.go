// Package h1lane serves simple HTTP/1.1 requests (appends: a POST, PUT or
// DELETE with a Content-Length) on a connection with a small loop of its
// own, and hands a connection to the standard net/http server the moment
// a request is anything else — chunked, Expect: 100-continue, an upgrade,
// h2c, a GET (long-polls, SSE), a malformed head — where it stays for the
// rest of its life, the bytes already read replayed first.
//
// Why: per request, net/http starts a background read goroutine, a
// cancellable context, a response struct and a chunking writer, and
// canonicalises headers through textproto; measured on loopback that is
// 10-30 µs of server CPU per request, as much as the node's own append
// work. The lane reads the request head without consuming it (so a hand-
// off loses nothing), calls the same http.Handler, buffers the response
// and writes it in one piece, and flushes only when no pipelined request
// is already waiting.
package h1lane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PicoMQ/picomq/internal/netx"
)

// Config is what the lane needs from the server it sits in front of.
type Config struct {
	Handler http.Handler
	// MaxHeaderBytes bounds the heads the lane parses; a larger head is
	// handed off (net/http then answers 431 when it is over its limit).
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds a new connection's first request head
	// from the accept, and every later head from its first byte;
	// IdleTimeout is the wait for a keep-alive connection's next request;
	// BodyTimeout bounds a request body from the end of its head, read by
	// the handler or drained after it (the node's stage table:
	// docs/security.md, "Connection bounds"). The head deadline carries
	// over to net/http when the connection is handed off mid-head.
	ReadHeaderTimeout, IdleTimeout, BodyTimeout time.Duration
	Logger                                      *slog.Logger
}

// bufSize is the size of each connection's read and write buffer; a head
// must fit the read buffer to be served here.
const bufSize = 4 << 10

// maxDrain is how much of a body the handler left unread is discarded to
// keep the connection; beyond it the connection is closed (net/http's
// figure).
const maxDrain = 256 << 10

// Server is the lane in front of one net/http server.
type Server struct {
	cfg     Config
	handoff *chanListener
	baseCtx context.Context
	cancel  context.CancelFunc

	closing atomic.Bool
	mu      sync.Mutex
	ln      net.Listener
	conns   map[*conn]struct{} // under mu; each one's idle state is its own (conn.state)
}

// New returns a lane serving cfg.Handler; the connections it does not
// serve are accepted from HandOff.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxHeaderBytes <= 0 || cfg.MaxHeaderBytes > bufSize {
		cfg.MaxHeaderBytes = min(bufSize, max(cfg.MaxHeaderBytes, http.DefaultMaxHeaderBytes))
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, baseCtx: ctx, cancel: cancel, conns: map[*conn]struct{}{},
		handoff: &chanListener{ch: make(chan net.Conn), closed: make(chan struct{})}}
}

// HandOff is the listener the net/http server serves: it yields the
// connections the lane gave up on, each replaying what the lane had read.
func (s *Server) HandOff() net.Listener { return s.handoff }

// Serve accepts connections from ln until Shutdown or Close and returns
// http.ErrServerClosed then.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	s.handoff.addr.Store(ln.Addr())
	if s.closing.Load() {
		_ = ln.Close()
		return http.ErrServerClosed
	}
	var backoff netx.Backoff
	for {
		rwc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if netx.Temporary(err) {
				// Out of file descriptors, say: the connections waiting in
				// the backlog are accepted once some are closed.
				if !backoff.Failing() {
					s.cfg.Logger.Error("http: accept failing; retrying with back-off", "err", err)
				}
				time.Sleep(backoff.Next())
				continue
			}
			return err
		}
		if backoff.Failing() {
			s.cfg.Logger.Info("http: accepting again")
			backoff.Reset()
		}
		c := &conn{s: s, rwc: rwc, fresh: true}
		if s.cfg.ReadHeaderTimeout > 0 {
			c.headBy = time.Now().Add(s.cfg.ReadHeaderTimeout)
		}
		c.state.Store(connIdle)
		if !s.track(c) {
			_ = rwc.Close()
			continue
		}
		go c.serve()
	}
}

// track adds c or reports false when shutting down.
func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// numConns is how many connections the lane serves (tests).
func (s *Server) numConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// A connection's state: busy while it reads or serves a request, idle
// while it waits for the next one, closed once Shutdown closed it idle.
// The connection moves itself between idle and busy with atomics, so the
// 64 connections of a loaded node do not meet on the server's mutex twice
// per request; Shutdown claims an idle one with a compare-and-swap.
const (
	connBusy int32 = iota
	connIdle
	connClosed
)

// setIdle marks c idle; false means c is to stop because the lane is
// shutting down. The store comes before the load of closing, and
// Shutdown sets closing before it looks for idle connections, so either
// Shutdown sees c idle and closes it, or c sees closing here.
func (c *conn) setIdle() bool {
	c.state.Store(connIdle)
	return !c.s.closing.Load()
}

// setBusy marks c busy when a request starts arriving; false means
// Shutdown closed it while it waited.
func (c *conn) setBusy() bool {
	return c.state.CompareAndSwap(connIdle, connBusy)
}

// Shutdown stops accepting, closes idle connections, and waits for the
// requests in progress to be answered (each connection closes after its
// response) until ctx ends; then it closes everything (Close). Handed-off
// connections are the net/http server's to shut down.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopAccepting()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if s.closeIdle() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			_ = s.Close()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Close closes the listener and every connection at once and cancels the
// contexts of the requests in progress.
func (s *Server) Close() error {
	s.stopAccepting()
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.rwc.Close()
	}
	return nil
}

func (s *Server) stopAccepting() {
	s.mu.Lock()
	first := !s.closing.Swap(true)
	ln := s.ln
	s.mu.Unlock()
	if first {
		if ln != nil {
			_ = ln.Close()
		}
		s.handoff.close()
	}
}

// closeIdle closes the idle connections and returns how many are left.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(connIdle, connClosed) {
			_ = c.rwc.Close()
			delete(s.conns, c)
		}
	}
	return len(s.conns)
}

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bufSize) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bufSize) }}
)

// conn is one connection served by the lane.
type conn struct {
	s      *Server
	rwc    net.Conn
	state  atomic.Int32 // connBusy, connIdle, connClosed
	br     *bufio.Reader
	bw     *bufio.Writer
	remote string
	ctx    context.Context
	cancel context.CancelFunc
	hdr    http.Header // the request header, reused
	// readDeadline is the deadline the connection's next read from the
	// socket must have (idle, head, body); it is given to the socket only
	// before such a read (armReadDeadline). A head and a body that arrived
	// with the first bytes of a request are read from the buffer, so a
	// loaded connection sets one deadline per request instead of three
	// (each a timer update in the runtime).
	readDeadline      time.Time
	readDeadlineArmed bool // the socket has readDeadline
	// fresh: no request has been read yet, so the first byte and the
	// head are due by headBy, counted from the accept (as net/http does),
	// not after an idle wait. headBy is the deadline of the head being
	// read; a hand-off passes it on.
	fresh  bool
	headBy time.Time
	h      head
	w      response
	body   body
}

func (c *conn) serve() {
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(c.rwc)
	c.bw = writers.Get().(*bufio.Writer)
	c.bw.Reset(c.rwc)
	c.remote = c.rwc.RemoteAddr().String()
	c.ctx, c.cancel = context.WithCancel(c.s.baseCtx)
	c.hdr = make(http.Header)
	c.w.c = c
	c.w.header = make(http.Header)
	c.w.head = new(bytes.Buffer)
	handedOff := false
	defer func() {
		if p := recover(); p != nil && p != http.ErrAbortHandler {
			buf := make([]byte, 16<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.s.cfg.Logger.Error("http: panic serving request", "remote", c.remote, "panic", fmt.Sprint(p), "stack", string(buf))
		}
		c.cancel()
		c.s.untrack(c)
		if !handedOff {
			_ = c.rwc.Close()
		}
		c.br.Reset(nil)
		readers.Put(c.br)
		c.bw.Reset(nil)
		writers.Put(c.bw)
	}()
	for {
		served, ok := c.next()
		if !ok {
			return
		}
		if !served {
			handedOff = c.handOff()
			return
		}
		if c.w.closeAfter || c.s.closing.Load() {
			if c.body.n > 0 && c.body.err == nil {
				c.lingerClose()
			}
			_ = c.bw.Flush()
			return
		}
		if c.br.Buffered() == 0 {
			if c.bw.Flush() != nil {
				return
			}
		}
	}
}

// setReadDeadline sets the deadline of the connection's next socket read.
func (c *conn) setReadDeadline(t time.Time) {
	if !t.Equal(c.readDeadline) {
		c.readDeadline, c.readDeadlineArmed = t, false
	}
}

// armReadDeadline gives the socket the deadline before a read from it.
func (c *conn) armReadDeadline() {
	if !c.readDeadlineArmed {
		_ = c.rwc.SetReadDeadline(c.readDeadline)
		c.readDeadlineArmed = true
	}
}

// next waits for a request and serves it if it is simple. served false
// with ok true means: hand the connection off; ok false: close it.
func (c *conn) next() (served, ok bool) {
	cfg := &c.s.cfg
	if c.br.Buffered() == 0 {
		if !c.setIdle() {
			return false, false
		}
		wait := c.headBy // a new connection: its first byte is part of the head
		if !c.fresh {
			wait = time.Time{}
			if cfg.IdleTimeout > 0 {
				wait = time.Now().Add(cfg.IdleTimeout)
			}
		}
		c.setReadDeadline(wait)
		c.armReadDeadline()
		_, err := c.br.Peek(1)
		if !c.setBusy() || err != nil {
			return false, false
		}
	}
	if !c.fresh {
		c.headBy = time.Time{}
		if cfg.ReadHeaderTimeout > 0 {
			c.headBy = time.Now().Add(cfg.ReadHeaderTimeout)
		}
	}
	c.fresh = false
	c.setReadDeadline(c.headBy)
	b, err := c.peekHead()
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return false, false // what net/http does when the head is late
		}
		return false, true // net/http reads the partial head and answers it
	}
	if b == nil || !parseHead(b, &c.h, c.hdr) {
		return false, true
	}
	_, _ = c.br.Discard(len(b))
	return true, c.serveRequest()
}

// peekHead returns the buffered request head (ending in CRLF CRLF)
// without consuming it, reading more as needed; nil as soon as it cannot
// be a simple request (another method, a bare LF or CR, over the limit),
// so net/http gets the connection without waiting for more bytes.
func (c *conn) peekHead() ([]byte, error) {
	from := 0
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if !simpleMethodPrefix(buf) {
			return nil, nil
		}
		for i := from; i < len(buf); i++ {
			switch {
			case buf[i] == '\n' && (i == 0 || buf[i-1] != '\r'):
				return nil, nil
			case i > 0 && buf[i-1] == '\r' && buf[i] != '\n':
				return nil, nil
			case buf[i] == '\n' && i >= 3 && buf[i-2] == '\n':
				if i+1 > c.s.cfg.MaxHeaderBytes {
					return nil, nil
				}
				return buf[:i+1], nil
			}
		}
		from = len(buf)
		if len(buf) >= c.s.cfg.MaxHeaderBytes {
			return nil, nil
		}
		c.armReadDeadline()
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return nil, err
		}
	}
}

// simpleMethodPrefix reports whether b can start a request the lane
// serves (b may be shorter than the method).
func simpleMethodPrefix(b []byte) bool {
	for _, m := range [...]string{"POST ", "PUT ", "DELETE "} {
		n := min(len(b), len(m))
		if string(b[:n]) == m[:n] {
			return true
		}
	}
	return false
}

var zeroRequest http.Request

// serveRequest runs the handler on the parsed head and writes the
// response into the write buffer; false means close the connection.
func (c *conn) serveRequest() bool {
	h := &c.h
	ctx := &reqContext{conn: c.ctx}
	defer ctx.end()
	r := zeroRequest.WithContext(ctx)
	r.Method = h.method
	r.URL = h.url
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	r.Header = c.hdr
	r.ContentLength = h.contentLength
	r.Close = h.close
	r.Host = h.host
	r.RemoteAddr = c.remote
	r.RequestURI = h.target
	r.Body = http.NoBody
	c.body = body{c: c, n: h.contentLength}
	if h.contentLength > 0 {
		r.Body = &c.body
		// The body is due within BodyTimeout of the head, whether the
		// handler reads it or leaves it to be drained below.
		if c.s.cfg.BodyTimeout > 0 {
			c.setReadDeadline(time.Now().Add(c.s.cfg.BodyTimeout))
		}
	}
	w := &c.w
	w.reset(r)
	c.s.cfg.Handler.ServeHTTP(w, r)

	// What the handler left of the body decides whether the connection
	// can carry another request: a short rest is discarded.
	if c.body.err != nil || c.body.n > maxDrain || c.s.closing.Load() {
		w.closeAfter = true // closing: the last response says so
	}
	w.finish()
	if !w.closeAfter && c.body.n > 0 {
		// Drain the rest under the body's deadline. The answer goes out
		// first: a client that withholds its body still gets it.
		if int64(c.br.Buffered()) < c.body.n {
			if w.err != nil || c.bw.Flush() != nil {
				return false
			}
			c.armReadDeadline()
		}
		if _, err := c.br.Discard(int(c.body.n)); err != nil {
			return false
		}
	}
	return w.err == nil
}

// lingerDelay is how long a connection closed with request body unread
// keeps reading (and discarding) it: closing at once would make the
// client's write fail with a reset, and many TCP stacks then drop the
// response it had not read yet. net/http waits as long.
const lingerDelay = 500 * time.Millisecond

// lingerClose sends the response, then reads what the client still sends
// for lingerDelay, so it can read the response before the close.
func (c *conn) lingerClose() {
	if c.bw.Flush() != nil {
		return
	}
	c.setReadDeadline(time.Now().Add(lingerDelay))
	c.armReadDeadline()
	_, _ = io.Copy(io.Discard, c.br)
}

// handOff gives the connection to the net/http server with the bytes
// already buffered in front; false if the lane is shutting down.
func (c *conn) handOff() bool {
	if c.bw.Flush() != nil {
		return false
	}
	c.s.untrack(c)
	var pending []byte
	if n := c.br.Buffered(); n > 0 {
		b, _ := c.br.Peek(n)
		pending = append([]byte(nil), b...)
	}
	_ = c.rwc.SetDeadline(time.Time{})
	c.readDeadlineArmed = true
	return c.s.handoff.give(&replayConn{Conn: c.rwc, pending: pending, headBy: c.headBy})
}

// replayConn reads pending before the connection itself, and keeps the
// head deadline the lane started: net/http sets a fresh header deadline
// when it takes the connection, which would otherwise give a client that
// trickled most of a head to the lane a second --read-header-timeout.
type replayConn struct {
	net.Conn
	pending []byte
	// headBy caps the read deadlines net/http sets until it has read the
	// head (its first zero deadline, after the head); zero: no cap.
	headBy time.Time
}

func (c *replayConn) SetReadDeadline(t time.Time) error {
	if !c.headBy.IsZero() {
		if t.IsZero() {
			c.headBy = time.Time{}
		} else if t.After(c.headBy) {
			t = c.headBy
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *replayConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// chanListener is the listener of the net/http server: Accept returns
// the connections the lane hands off.
type chanListener struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
	addr   atomic.Value // net.Addr: the lane's listener's, once it serves
}

func (l *chanListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) close() { l.once.Do(func() { close(l.closed) }) }

// Close is the net/http server's: the lane itself decides when no more
// connections come (stopAccepting).
func (l *chanListener) Close() error { l.close(); return nil }

func (l *chanListener) Addr() net.Addr {
	if a, ok := l.addr.Load().(net.Addr); ok {
		return a
	}
	return &net.TCPAddr{}
}

// body is a request body of known length read from the connection's
// buffer.
type body struct {
	c      *conn
	n      int64 // bytes not read yet
	err    error // the connection's read error, if any
	closed bool
}

var errBodyClosed = errors.New("http: invalid Read on closed Body")

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errBodyClosed
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	if b.c.br.Buffered() == 0 {
		b.c.armReadDeadline() // the read goes to the socket
	}
	n, err := b.c.br.Read(p)
	b.n -= int64(n)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		b.err = err
		return n, err
	}
	if b.n == 0 {
		return n, io.EOF
	}
	return n, nil
}

func (b *body) Close() error {
	b.closed = true
	return nil
}
