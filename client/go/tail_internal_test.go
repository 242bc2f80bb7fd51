package picomq

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// tailServer is a loopback stand-in for a node on the live tail's path:
// it answers every POST with a canned ack and, before the ack, writes the
// appended record to every live SSE connection as the node does (one
// chunk per append holding the data and control events of
// api/pico.appendSSEPage, in net/http's chunked framing). It does as
// little as it can, so that a benchmark against it measures the client.
type tailServer struct {
	ln   net.Listener
	mu   sync.Mutex
	subs []net.Conn
	next int64
}

func newTailServer(tb testing.TB) *tailServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &tailServer{ln: ln}
	go s.serve()
	tb.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.subs {
			c.Close()
		}
		s.mu.Unlock()
	})
	return s
}

func (s *tailServer) url() string { return "http://" + s.ln.Addr().String() }

func (s *tailServer) serve() {
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.conn(nc)
	}
}

// tailAck is a node's answer to a one-record append (picomq serve's).
const tailAck = "HTTP/1.1 200 OK\r\nPico-Offset: 0\r\nPico-Next-Offset: 1\r\nPico-Timestamp: 1796227362118\r\n" +
	"Pico-Record-Count: 1\r\nContent-Type: application/json\r\nPico-Served-By: vm\r\n" +
	"Date: Wed, 02 Dec 2026 16:02:42 GMT\r\nContent-Length: 64\r\n\r\n" +
	`{"offset":0,"nextOffset":1,"timestamp":1796227362118,"count":1}` + "\n"

// tailSSEHead is the head of a node's SSE answer.
const tailSSEHead = "HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\nContent-Type: text/event-stream\r\n" +
	"Pico-Served-By: vm\r\nPico-Start-Offset: 0\r\nX-Accel-Buffering: no\r\n" +
	"Date: Wed, 02 Dec 2026 16:02:42 GMT\r\nTransfer-Encoding: chunked\r\n\r\n"

func tailChunk(dst []byte, events string) []byte {
	return fmt.Appendf(dst, "%x\r\n%s\r\n", len(events), events)
}

// tailEvents is the chunk of the append of offset off: a 100 B record and
// the control event after it.
func tailEvents(off int64) []byte {
	return tailChunk(nil, fmt.Sprintf("event: data\nid: %d\ndata: [{\"offset\":%d,\"timestamp\":1796227362118,\"value\":\"%s\"}]\n\n"+
		"event: control\nid: %d\ndata: {\"nextOffset\":%d,\"upToDate\":true,\"closed\":false,\"cursor\":\"c%d\"}\n\n",
		off+1, off, strings.Repeat("x", 100), off+1, off+1, off+1))
}

// readRequestHead reads a request's header lines, after its request line,
// up to the blank line, and returns its Content-Length (0 without one):
// all the client's fake servers need of a head.
func readRequestHead(tr *textproto.Reader) (int, error) {
	n := 0
	for {
		line, err := tr.ReadLine()
		if err != nil {
			return 0, err
		}
		if line == "" {
			return n, nil
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Content-Length") {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
}

// ReadRequestHead is readRequestHead for the external tests' fake servers.
var ReadRequestHead = readRequestHead

func (s *tailServer) conn(nc net.Conn) {
	defer nc.Close()
	tr := textproto.NewReader(bufio.NewReader(nc))
	for {
		reqLine, err := tr.ReadLine()
		if err != nil {
			return
		}
		n, err := readRequestHead(tr)
		if err != nil {
			return
		}
		if strings.HasPrefix(reqLine, "GET ") {
			// A subscription: the head and a control event, then the
			// appends write to the connection.
			s.mu.Lock()
			b := tailChunk([]byte(tailSSEHead), fmt.Sprintf("event: control\nid: %d\ndata: {\"nextOffset\":%d,\"upToDate\":true,\"closed\":false,\"cursor\":\"c\"}\n\n", s.next, s.next))
			_, err := nc.Write(b)
			s.subs = append(s.subs, nc)
			s.mu.Unlock()
			if err != nil {
				return
			}
			_, _ = tr.R.Discard(1 << 30) // until the client closes it
			return
		}
		if _, err := tr.R.Discard(n); err != nil {
			return
		}
		s.mu.Lock()
		ev := tailEvents(s.next)
		s.next++
		for _, c := range s.subs {
			_, _ = c.Write(ev)
		}
		s.mu.Unlock()
		if _, err := nc.Write([]byte(tailAck)); err != nil {
			return
		}
	}
}

// stampConn notes when the client enters its write and when its last read
// returned data: the ends of the client's steps on the live tail.
type stampConn struct {
	net.Conn
	wrote, read *time.Time
}

func (c stampConn) Write(b []byte) (int, error) {
	*c.wrote = time.Now()
	return c.Conn.Write(b)
}

// SyscallConn keeps the lean transport's liveness check (h1's alive) on
// the wrapped socket, as it is without the wrapper.
func (c stampConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

func (c stampConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		*c.read = time.Now()
	}
	return n, err
}

// BenchmarkTailSteps is the client's share of a live tail's record, one
// 100 B Stream.Append and the delivery of its record to OnEvent, closed
// loop, against tailServer. It reports the client's two steps on the
// record's path, as means: append-to-write-µs, from the Append call to
// the append's write to the socket (request build, connection pick and
// its liveness check), and read-to-event-µs, from the subscription's read
// of the event's bytes returning to OnEvent (net/http's chunked body, SSE
// parse, decode). allocs/op counts both sides (and the test's own
// channel hand-over).
//
// The paced variant sleeps 5 ms before each append, as the live-tail row
// does (200 appends/s): its caches are then as cold as the row's, and its
// steps take several times their hot-loop time.
func BenchmarkTailSteps(b *testing.B) {
	b.Run("hot", func(b *testing.B) { benchTailSteps(b, 0) })
	b.Run("paced", func(b *testing.B) { benchTailSteps(b, 5*time.Millisecond) })
}

func benchTailSteps(b *testing.B, pace time.Duration) {
	srv := newTailServer(b)
	c, err := newClient(ProtocolPico, srv.url(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var appendWrote, appendRead, sseWrote, sseRead time.Time
	wrap := func(w, r *time.Time) func(ctx context.Context, network, addr string) (net.Conn, error) {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return stampConn{Conn: nc, wrote: w, read: r}, nil
		}
	}
	c.rt.lean.DialContext = wrap(&appendWrote, &appendRead)
	c.rt.std.DialContext = wrap(&sseWrote, &sseRead)
	s := c.Stream("/bench/tail")
	type delivered struct {
		pos  string
		read time.Duration
	}
	got := make(chan delivered, 1)
	ctx := context.Background()
	sub, err := s.Subscribe(ctx, "0", SubscribeOptions{OnEvent: func(e Event) {
		if e.Type == EventData {
			got <- delivered{e.Records[0].Position, time.Since(sseRead)}
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	rec := AppendRecord{Body: make([]byte, 100)}
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	var toWrite, toEvent []time.Duration
	var i int64
	b.ReportAllocs()
	for b.Loop() {
		if pace > 0 {
			time.Sleep(pace)
		}
		start := time.Now()
		if _, err := s.Append(ctx, rec); err != nil {
			b.Fatal(err)
		}
		toWrite = append(toWrite, appendWrote.Sub(start))
		select {
		case d := <-got:
			if want := strconv.FormatInt(i, 10); d.pos != want {
				b.Fatalf("event at %s, want %s", d.pos, want)
			}
			toEvent = append(toEvent, d.read)
			i++
		case <-timeout.C:
			b.Fatal("no event within a minute")
		}
	}
	b.ReportMetric(medianMicros(toWrite), "append-to-write-µs")
	b.ReportMetric(medianMicros(toEvent), "read-to-event-µs")
}

func medianMicros(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Nanoseconds()) / 1e3
}
