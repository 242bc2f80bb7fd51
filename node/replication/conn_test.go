package replication

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
)

// recorder stands in for the stream service (one function under test:
// the connection); it answers every frame OK at From+len(Entries), after
// its wait is released.
type recorder struct {
	url     string
	mu      sync.Mutex
	got     []stream.ReplicaFrame
	release chan struct{} // nil: answer at once
}

func (r *recorder) ApplyReplica(ctx context.Context, frames []stream.ReplicaFrame) ([]stream.ReplicaResult, error) {
	res, wait, err := r.StartReplica(frames)
	if err != nil {
		return nil, err
	}
	return res, wait(ctx)
}

func (r *recorder) StartReplica(frames []stream.ReplicaFrame) ([]stream.ReplicaResult, func(context.Context) error, error) {
	r.mu.Lock()
	r.got = append(r.got, frames...)
	release := r.release
	r.mu.Unlock()
	out := make([]stream.ReplicaResult, len(frames))
	for i, f := range frames {
		if f.Name == "" {
			return nil, nil, errors.New("a frame reached the service without its stream's name")
		}
		out[i] = stream.ReplicaResult{StreamID: f.StreamID, Status: stream.ReplicaOK, Epoch: f.Epoch, Next: f.From + int64(len(f.Entries))}
	}
	return out, func(ctx context.Context) error {
		if release == nil {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil
}

func (r *recorder) ReplicaTail(context.Context, uint64, int64, int64) (stream.ReplicaFrame, error) {
	return stream.ReplicaFrame{}, errors.New("not used")
}

func (r *recorder) Members(context.Context) ([]stream.Member, error) {
	return []stream.Member{{NodeID: "f", AdvertiseURL: r.url}}, nil
}

func startFollower(t *testing.T, secret string, rec *recorder) *Transport {
	t.Helper()
	tr := New(secret)
	srv := httptest.NewServer(tr.Route(http.NotFoundHandler()))
	t.Cleanup(func() { tr.Close(); srv.Close() })
	rec.url = srv.URL
	tr.SetService(rec)
	return tr
}

func entry(n int) []byte { return bytes.Repeat([]byte{byte(n)}, 40) }

// Requests sent back to back, before any answer is read, are all answered,
// in order, by sequence; a stream's name crosses the wire once per
// connection yet reaches the service every time. (The follower answers a
// lone request in its reading goroutine, so how many it starts before the
// first fsync completes depends on timing; the order of answers does not.)
func TestConnPipelinesInOrder(t *testing.T) {
	rec := &recorder{release: make(chan struct{})}
	startFollower(t, "s3cret", rec)
	owner := New("s3cret")
	owner.SetService(rec) // the owner looks the follower's URL up here
	c, err := owner.Dial(context.Background(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 5
	var sizes []int64
	for i := range n {
		before := owner.SentBytes.Load()
		f := stream.ReplicaFrame{StreamID: 9, Name: "/a/long/stream/name", Epoch: 1, From: int64(i), Entries: [][]byte{entry(i)}}
		if err := c.Send([]stream.ReplicaFrame{f}); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, owner.SentBytes.Load()-before)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec.mu.Lock()
		k := len(rec.got)
		rec.mu.Unlock()
		if k > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the follower started no request in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	close(rec.release)
	for i := range n {
		res, err := c.Recv()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if len(res) != 1 || res[0].Next != int64(i)+1 {
			t.Fatalf("answer %d: %+v, want the answer to request %d", i, res, i)
		}
	}
	if sizes[1] != sizes[0]-int64(len("/a/long/stream/name")) {
		t.Errorf("request sizes %v: the second should be the first without the name", sizes)
	}
}

// The cluster secret is required, and a follower closes a connection on a
// malformed message.
func TestConnAuthAndHostileBytes(t *testing.T) {
	rec := &recorder{}
	startFollower(t, "s3cret", rec)
	bad := New("wrong")
	bad.SetService(rec)
	if _, err := bad.Dial(context.Background(), "f"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("dial with a wrong secret: %v, want 401", err)
	}
	for name, msg := range map[string][]byte{
		"huge length":  {0xff, 0xff, 0xff, 0xff, kindAppend, 0, 0, 0, 0, 0, 0, 0, 1},
		"short length": {0, 0, 0, 3, kindAppend, 0, 0, 0, 0, 0, 0, 0, 1},
		"answer kind":  appendMessage(nil, kindResults, 1, nil),
		"seq skipped":  appendMessage(nil, kindAppend, 2, stream.AppendReplicaFrames(nil, nil)),
		"no name":      appendMessage(nil, kindAppend, 1, stream.AppendReplicaFrames(nil, []stream.ReplicaFrame{{StreamID: 3}})),
		"bad frames":   appendMessage(nil, kindAppend, 1, []byte{7, 7, 7}),
	} {
		nc := rawUpgrade(t, rec.url, "s3cret")
		if _, err := nc.Write(msg); err != nil {
			t.Fatal(err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		// Whatever it answers first (an error message, or nothing), the
		// follower then closes the connection.
		_, err := io.Copy(io.Discard, nc)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the follower kept the connection open", name)
		}
		nc.Close()
	}
}

func rawUpgrade(t *testing.T, base, secret string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(nc, "GET "+PathStream+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+secret+
		"\r\nConnection: Upgrade\r\nUpgrade: "+UpgradeProtocol+"\r\n\r\n")
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || br.Buffered() != 0 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	return nc
}

// FuzzReplicaMessage: hostile bytes never panic the message reader or
// make it allocate past its limit, and what it accepts encodes back to the
// bytes it consumed.
func FuzzReplicaMessage(f *testing.F) {
	f.Add(appendMessage(nil, kindAppend, 1, stream.AppendReplicaFrames(nil, []stream.ReplicaFrame{{StreamID: 1, Name: "/s", Epoch: 1}})))
	f.Add(appendMessage(nil, kindResults, 7, stream.AppendReplicaResults(nil, []stream.ReplicaResult{{StreamID: 1, Status: stream.ReplicaOK, Next: 3}})))
	f.Add(appendMessage(nil, kindError, 2, []byte("disk full")))
	f.Add([]byte{0, 0, 0, 9, kindAppend, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		const limit = 1 << 16
		r := bytes.NewReader(b)
		var buf []byte
		for {
			off := len(b) - r.Len()
			kind, seq, body, nb, err := readMessage(r, buf, limit)
			buf = nb
			if err != nil {
				return
			}
			if len(body) > limit {
				t.Fatalf("a body of %d bytes past the limit %d", len(body), limit)
			}
			used := b[off : len(b)-r.Len()]
			if again := appendMessage(nil, kind, seq, body); !bytes.Equal(again, used) {
				t.Fatalf("message re-encodes to %x, read from %x", again, used)
			}
			if binary.BigEndian.Uint32(used) != uint32(len(used)-4) {
				t.Fatal("length field disagrees with the bytes read")
			}
		}
	})
}

// An owner shipping to a follower of the previous release (no replication
// connection: GET /_sys/replica/stream is 405 there, as its endpoints took
// POST only) falls back to one POST per request, in order.
func TestConnFallsBackToPostForAnOldFollower(t *testing.T) {
	rec := &recorder{}
	tr := New("s3cret")
	old := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "replication endpoints take POST", http.StatusMethodNotAllowed)
			return
		}
		tr.Route(http.NotFoundHandler()).ServeHTTP(w, r)
	})
	srv := httptest.NewServer(old)
	t.Cleanup(func() { tr.Close(); srv.Close() })
	rec.url = srv.URL
	tr.SetService(rec)
	owner := New("s3cret")
	owner.SetService(rec)
	c, err := owner.Dial(context.Background(), "f")
	if err != nil {
		t.Fatalf("dial an old follower: %v", err)
	}
	defer c.Close()
	for i := range 3 {
		f := stream.ReplicaFrame{StreamID: 4, Name: "/old", Epoch: 1, From: int64(i), Entries: [][]byte{entry(i)}}
		if err := c.Send([]stream.ReplicaFrame{f}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		res, err := c.Recv()
		if err != nil || len(res) != 1 || res[0].Next != int64(i)+1 {
			t.Fatalf("answer %d from an old follower: %+v %v", i, res, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.got) != 3 {
		t.Fatalf("the old follower applied %d frames, want 3", len(rec.got))
	}
}
