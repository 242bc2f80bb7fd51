package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/node/stream/streamtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testServer is a Kafka frontend over a real stream service (real WAL, real
// embedded etcd) on a loopback port.
type testServer struct {
	t    *testing.T
	env  *streamtest.Env
	srv  *Server
	addr string
	cfg  Config
	// wrap, when set, stands between the frontend and the service (a
	// test that changes one answer of the service).
	wrap func(Streams) Streams
}

func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	ts := &testServer{t: t, env: streamtest.New(t, stream.Config{}), cfg: cfg}
	ts.serve()
	return ts
}

func (ts *testServer) serve() {
	t := ts.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := ts.cfg
	cfg.AdvertiseAddr, cfg.ClusterID, cfg.Logger = ln.Addr().String(), "test-cluster", quiet
	ts.addr = ln.Addr().String()
	var svc Streams = ts.env.Svc
	if ts.wrap != nil {
		svc = ts.wrap(svc)
	}
	ts.srv = New(svc, cfg)
	done := make(chan error, 1)
	go func() { done <- ts.srv.Serve(ln) }()
	srv := ts.srv
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
		<-done
	})
}

// restart restarts the stream service (WAL replay, registry reload) and the
// frontend on a new port, as a node restart does.
func (ts *testServer) restart() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = ts.srv.Close(ctx)
	ts.env.Restart()
	ts.serve()
}

func (ts *testServer) client(opts ...kgo.Opt) *kgo.Client {
	ts.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(ts.addr)}, opts...)...)
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.t.Cleanup(cl.Close)
	return cl
}

func (ts *testServer) createTopic(name string, partitions int32) {
	ts.t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), ts.client())
	if err != nil {
		ts.t.Fatal(err)
	}
	if c := resp.Topics[0].ErrorCode; c != 0 {
		ts.t.Fatalf("create topic %s: error %d", name, c)
	}
}

// rawConn speaks the framing directly, for what a client library would
// never send.
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func (ts *testServer) raw() *rawConn {
	ts.t.Helper()
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.t.Cleanup(func() { c.Close() })
	return &rawConn{t: ts.t, c: c, r: bufio.NewReader(c)}
}

// send writes one request with correlation id corr.
func (rc *rawConn) send(req kmsg.Request, corr int32) {
	rc.t.Helper()
	body := appendFrame([]byte{0, 0, 0, 0}, req, corr, "test")
	binary.BigEndian.PutUint32(body, uint32(len(body)-4))
	if _, err := rc.c.Write(body); err != nil {
		rc.t.Fatal(err)
	}
}

// recv reads one response frame and returns its correlation id and body
// (after the header; flexible says whether to skip the header tag byte).
func (rc *rawConn) recv(flexible bool, within time.Duration) (int32, []byte, error) {
	_ = rc.c.SetReadDeadline(time.Now().Add(within))
	var hdr [4]byte
	if _, err := io.ReadFull(rc.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	frame := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(rc.r, frame); err != nil {
		return 0, nil, err
	}
	corr := int32(binary.BigEndian.Uint32(frame))
	body := frame[4:]
	if flexible {
		body = body[1:]
	}
	return corr, body, nil
}

// roundTrip sends req and decodes its response.
func (rc *rawConn) roundTrip(req kmsg.Request, corr int32) kmsg.Response {
	rc.t.Helper()
	rc.send(req, corr)
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	got, body, err := rc.recv(resp.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16(), 10*time.Second)
	if err != nil {
		rc.t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	if got != corr {
		rc.t.Fatalf("correlation id %d, want %d", got, corr)
	}
	if err := resp.ReadFrom(body); err != nil {
		rc.t.Fatalf("decode %s response: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}
