package replication

// The replication connection: one per owner and follower node pair, kept
// open, requests pipelined on it (docs/durability.md, "Replicated").
//
// An owner opens it with an HTTP/1.1 upgrade on the follower's listener
// (GET /_sys/replica/stream, Upgrade: picomq-replication/1, the cluster
// secret as bearer token), so it needs no port of its own and passes the
// same TLS. After the 101 answer both sides exchange messages:
//
//	+------------+----------+---------+--------------------------------+
//	| length (4) | kind (1) | seq (8) | body (length - 9 bytes)        |
//	+------------+----------+---------+--------------------------------+
//
// big-endian. The owner sends kindAppend messages (body: the frames,
// stream.AppendReplicaFrames) numbered 1, 2, 3...; the follower answers
// each, in order, with kindResults (stream.AppendReplicaResults) or
// kindError (body: the error text), carrying the request's seq. A
// frame names its stream only the first time the connection carries it
// (the follower remembers the name per connection). A follower enqueues
// each request in its WAL as soon as it has read it and
// answers once the entries are fsynced, so several requests can be in
// flight. Either side closes the connection on any error; the owner
// reconnects and resends what was not answered.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

const (
	// PathStream is the upgrade path of the replication connection.
	PathStream = "/_sys/replica/stream"
	// UpgradeProtocol names the protocol in the Upgrade header.
	UpgradeProtocol = "picomq-replication/1"

	kindAppend  byte = 1
	kindResults byte = 2
	kindError   byte = 3

	msgHeader = 13 // length (4), kind (1), seq (8)
)

// Time bounds of a replication connection.
const (
	// dialTimeout bounds the TCP (and TLS) handshake and the upgrade.
	dialTimeout = 5 * time.Second
	// writeTimeout bounds writing one message.
	writeTimeout = 10 * time.Second
	// serverIdle: a follower closes a connection with no request for this
	// long (the owner closes it after half as long unused).
	serverIdle = 2 * time.Minute
	// clientIdle: the owner's read deadline while nothing is in flight.
	clientIdle = 3 * time.Minute
)

var errMessage = errors.New("replication: malformed message")

// appendMessage appends one message to dst: its header, then body.
func appendMessage(dst []byte, kind byte, seq uint64, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(1+8+len(body)))
	dst = append(dst, kind)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	return append(dst, body...)
}

// readMessage reads one message from r into buf (grown as needed; body
// aliases it). A length below the header's or above max is an error.
func readMessage(r io.Reader, buf []byte, max int) (kind byte, seq uint64, body, next []byte, err error) {
	var h [msgHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, buf, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n < 9 || uint64(n)-9 > uint64(max) {
		return 0, 0, nil, buf, fmt.Errorf("%w: length %d", errMessage, n)
	}
	kind, seq = h[4], binary.BigEndian.Uint64(h[5:13])
	if kind != kindAppend && kind != kindResults && kind != kindError {
		return 0, 0, nil, buf, fmt.Errorf("%w: kind %d", errMessage, kind)
	}
	size := int(n) - 9
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	body = buf[:size]
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, 0, nil, buf, fmt.Errorf("replication: message body: %w", err)
	}
	return kind, seq, body, buf, nil
}

// Dial implements stream.Transport: it opens a replication connection to
// node's listener.
func (t *Transport) Dial(ctx context.Context, node string) (stream.ReplicaConn, error) {
	base, err := t.nodeURL(ctx, node)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("replication: %s advertises %q: %w", node, base, err)
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[bool]string{true: "443", false: "80"}[u.Scheme == "https"])
	}
	var nc net.Conn
	d := &net.Dialer{KeepAlive: 30 * time.Second}
	if u.Scheme == "https" {
		td := &tls.Dialer{NetDialer: d, Config: &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}}
		nc, err = td.DialContext(ctx, "tcp", host)
	} else {
		nc, err = d.DialContext(ctx, "tcp", host)
	}
	if err != nil {
		return nil, fmt.Errorf("replication: dial %s: %w", node, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	req := "GET " + strings.TrimSuffix(u.Path, "/") + PathStream + " HTTP/1.1\r\nHost: " + u.Host +
		"\r\nAuthorization: " + t.auth + "\r\nConnection: Upgrade\r\nUpgrade: " + UpgradeProtocol + "\r\n\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		nc.Close()
		return nil, fmt.Errorf("replication: upgrade to %s: %w", node, err)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("replication: upgrade to %s: %w", node, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		nc.Close()
		if resp.StatusCode == http.StatusMethodNotAllowed {
			// A node of the previous release: its replication endpoints
			// take POST only, and it has no replication connection.
			return newPostConn(t, node), nil
		}
		return nil, fmt.Errorf("replication: upgrade to %s: %s: %s", node, resp.Status, strings.TrimSpace(string(body)))
	}
	_ = nc.SetDeadline(time.Time{})
	c := &clientConn{t: t, node: node, nc: nc, br: br}
	_ = nc.SetReadDeadline(time.Now().Add(clientIdle))
	return c, nil
}

// clientConn is the owner's end of a replication connection.
type clientConn struct {
	t    *Transport
	node string
	nc   net.Conn
	br   *bufio.Reader

	wmu   sync.Mutex
	wbuf  []byte
	seq   uint64              // last sent
	named map[uint64]struct{} // streams whose name this connection carried
	send  []stream.ReplicaFrame

	dmu      sync.Mutex // orders read-deadline updates with the in-flight count
	inFlight int

	rbuf   []byte
	expect uint64 // seq of the next answer
	closed atomic.Bool
}

// RequestTimeout bounds the wait for each answer: a follower answers
// after its fsync, so an answer that takes longer means it is stuck.
const RequestTimeout = 5 * time.Second

func (c *clientConn) Send(frames []stream.ReplicaFrame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.seq++
	// A stream's name goes once per connection: it is most of a frame's
	// framing.
	c.send = append(c.send[:0], frames...)
	for i := range c.send {
		if _, ok := c.named[c.send[i].StreamID]; ok {
			c.send[i].Name = ""
		} else if c.send[i].Name != "" {
			if c.named == nil {
				c.named = map[uint64]struct{}{}
			}
			c.named[c.send[i].StreamID] = struct{}{}
		}
	}
	c.wbuf = appendMessage(c.wbuf[:0], kindAppend, c.seq, nil)
	c.wbuf = stream.AppendReplicaFrames(c.wbuf, c.send)
	clear(c.send)
	binary.BigEndian.PutUint32(c.wbuf, uint32(len(c.wbuf)-4))
	if len(c.wbuf)-msgHeader > MaxBody {
		return fmt.Errorf("replication: a request of %d bytes to %s is over the limit of %d", len(c.wbuf)-msgHeader, c.node, MaxBody)
	}
	c.dmu.Lock()
	if c.inFlight == 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(RequestTimeout))
	}
	c.inFlight++
	c.dmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return fmt.Errorf("replication: send to %s: %w", c.node, err)
	}
	c.t.SentBytes.Add(int64(len(c.wbuf)))
	if cap(c.wbuf) > 1<<20 {
		c.wbuf = nil // do not keep a catch-up's buffer
	}
	return nil
}

func (c *clientConn) Recv() ([]stream.ReplicaResult, error) {
	kind, seq, body, buf, err := readMessage(c.br, c.rbuf, MaxBody)
	c.rbuf = buf
	if err != nil {
		return nil, fmt.Errorf("replication: answer from %s: %w", c.node, err)
	}
	c.t.ReceivedBytes.Add(int64(msgHeader + len(body)))
	c.expect++
	if seq != c.expect {
		return nil, fmt.Errorf("replication: %s answered request %d, expected %d", c.node, seq, c.expect)
	}
	c.dmu.Lock()
	c.inFlight--
	if c.inFlight > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(RequestTimeout))
	} else {
		_ = c.nc.SetReadDeadline(time.Now().Add(clientIdle))
	}
	c.dmu.Unlock()
	switch kind {
	case kindResults:
		res, err := stream.DecodeReplicaResults(body)
		if err != nil {
			return nil, fmt.Errorf("replication: answer from %s: %w", c.node, err)
		}
		return res, nil
	case kindError:
		return nil, fmt.Errorf("replication: %s refused request %d: %s", c.node, seq, body[:min(len(body), 512)])
	default:
		return nil, fmt.Errorf("%w: %s answered with kind %d", errMessage, c.node, kind)
	}
}

func (c *clientConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.nc.Close()
}

// serveStream upgrades an authenticated request to a replication
// connection and serves it until either side closes it.
func (t *Transport) serveStream(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), UpgradeProtocol) || r.ProtoMajor != 1 {
		w.Header().Set("Upgrade", UpgradeProtocol)
		httpx.WriteError(w, http.StatusUpgradeRequired, wire.CodeBadRequest, "the replication connection needs an HTTP/1.1 upgrade to "+UpgradeProtocol)
		return
	}
	svc := t.service()
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		httpx.WriteError(w, http.StatusInternalServerError, wire.CodeInternal, "replication: cannot take over the connection: "+err.Error())
		return
	}
	if !t.track(nc, true) {
		nc.Close()
		return
	}
	defer t.track(nc, false)
	defer nc.Close()
	_ = nc.SetDeadline(time.Time{})
	_ = nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+UpgradeProtocol+"\r\n\r\n"); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc := &serverConn{nc: nc, svc: svc, queue: make(chan answer, 64)}
	done := make(chan struct{})
	go func() { defer close(done); sc.answerLoop(ctx) }()
	err = sc.readLoop(ctx, brw.Reader)
	cancel()
	close(sc.queue)
	<-done
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		t.logf("replication connection from %s closed: %v", r.RemoteAddr, err)
	}
}

// serverConn is the follower's end of a replication connection.
type serverConn struct {
	nc  net.Conn
	svc Service
	// queue: requests enqueued in the WAL, waiting for their fsync to
	// be answered, in order; pending counts them (and one answered inline).
	queue   chan answer
	pending atomic.Int32
	named   map[uint64]string // stream names this connection carried (readLoop only)
	wmu     sync.Mutex
	wbuf    []byte
	failed  atomic.Bool
}

type answer struct {
	seq  uint64
	res  []stream.ReplicaResult
	wait func(context.Context) error
	err  error
}

// readLoop reads requests, enqueues each in the WAL and hands it to
// answerLoop, or answers it itself when nothing is pending and no other
// request is buffered (a lone request then costs no goroutine hand-off),
// until the connection fails or ends: it returns why.
func (sc *serverConn) readLoop(ctx context.Context, br *bufio.Reader) error {
	var buf []byte
	var last uint64
	for {
		_ = sc.nc.SetReadDeadline(time.Now().Add(serverIdle))
		kind, seq, body, nb, err := readMessage(br, buf, MaxBody)
		buf = nb
		if err != nil {
			return err
		}
		if kind != kindAppend || seq != last+1 {
			return fmt.Errorf("%w: kind %d seq %d after %d", errMessage, kind, seq, last)
		}
		last = seq
		a := answer{seq: seq}
		frames, err := stream.DecodeReplicaFrames(body)
		if err == nil {
			err = sc.names(frames)
		}
		if err == nil {
			a.res, a.wait, err = sc.svc.StartReplica(frames)
		}
		a.err = err
		if sc.failed.Load() {
			return errors.New("answer failed")
		}
		if sc.pending.Add(1) == 1 && br.Buffered() == 0 {
			sc.answer(ctx, a)
			sc.pending.Add(-1)
		} else {
			sc.queue <- a
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
	}
}

// names fills in the names the owner sent earlier on this connection and
// remembers new ones.
func (sc *serverConn) names(frames []stream.ReplicaFrame) error {
	for i := range frames {
		f := &frames[i]
		if f.Name != "" {
			if sc.named == nil {
				sc.named = map[uint64]string{}
			}
			sc.named[f.StreamID] = f.Name
			continue
		}
		name, ok := sc.named[f.StreamID]
		if !ok {
			return fmt.Errorf("%w: a frame of stream %d without a name, never named on this connection", errMessage, f.StreamID)
		}
		f.Name = name
	}
	return nil
}

func (sc *serverConn) answerLoop(ctx context.Context) {
	for a := range sc.queue {
		sc.answer(ctx, a)
		sc.pending.Add(-1)
	}
}

// answer waits for a's fsync and writes its answer; a failed write closes
// the connection.
func (sc *serverConn) answer(ctx context.Context, a answer) {
	if a.err == nil && a.wait != nil {
		a.err = a.wait(ctx)
	}
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	if a.err != nil {
		sc.wbuf = appendMessage(sc.wbuf[:0], kindError, a.seq, []byte(a.err.Error()))
	} else {
		sc.wbuf = appendMessage(sc.wbuf[:0], kindResults, a.seq, nil)
		sc.wbuf = stream.AppendReplicaResults(sc.wbuf, a.res)
		binary.BigEndian.PutUint32(sc.wbuf, uint32(len(sc.wbuf)-4))
	}
	_ = sc.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := sc.nc.Write(sc.wbuf); err != nil || a.err != nil {
		// After an error the owner resends from what it knows: nothing
		// more on this connection.
		sc.failed.Store(true)
		_ = sc.nc.Close()
	}
}

// track adds (or removes) a served connection, so Close can end them; it
// reports false once the transport is closed.
func (t *Transport) track(nc net.Conn, add bool) bool {
	t.connMu.Lock()
	defer t.connMu.Unlock()
	if !add {
		delete(t.conns, nc)
		return true
	}
	if t.closed {
		return false
	}
	if t.conns == nil {
		t.conns = map[net.Conn]struct{}{}
	}
	t.conns[nc] = struct{}{}
	return true
}

// Close ends the replication connections this node serves (net/http's
// shutdown does not see them once upgraded) and refuses new ones.
func (t *Transport) Close() {
	t.connMu.Lock()
	t.closed = true
	conns := t.conns
	t.conns = nil
	t.connMu.Unlock()
	for nc := range conns {
		_ = nc.Close()
	}
}

// postConn ships to a follower of the previous release, which has no
// replication connection: each request is a POST to /_sys/replica/append,
// one at a time in order (that node applies concurrent requests in any
// order), so a rolling upgrade can update owners before followers.
type postConn struct {
	t      *Transport
	node   string
	ctx    context.Context
	cancel context.CancelFunc
	reqs   chan *postCall // sent, in order; the worker takes them one by one
	done   chan *postCall // answered, in order
}

type postCall struct {
	body []byte
	res  []stream.ReplicaResult
	err  error
}

func newPostConn(t *Transport, node string) *postConn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &postConn{t: t, node: node, ctx: ctx, cancel: cancel, reqs: make(chan *postCall, 64), done: make(chan *postCall, 64)}
	go c.work()
	return c
}

func (c *postConn) work() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case call := <-c.reqs:
			rctx, cancel := context.WithTimeout(c.ctx, RequestTimeout)
			data, err := c.t.post(rctx, c.node, PathAppend, call.body)
			cancel()
			if err == nil {
				call.res, err = stream.DecodeReplicaResults(data)
			}
			call.err = err
			select {
			case c.done <- call:
			case <-c.ctx.Done():
				return
			}
		}
	}
}

func (c *postConn) Send(frames []stream.ReplicaFrame) error {
	select {
	case c.reqs <- &postCall{body: stream.AppendReplicaFrames(nil, frames)}:
		return nil
	case <-c.ctx.Done():
		return fmt.Errorf("replication: connection to %s closed", c.node)
	}
}

func (c *postConn) Recv() ([]stream.ReplicaResult, error) {
	select {
	case call := <-c.done:
		return call.res, call.err
	case <-c.ctx.Done():
		return nil, fmt.Errorf("replication: connection to %s closed", c.node)
	}
}

func (c *postConn) Close() error {
	c.cancel()
	return nil
}
