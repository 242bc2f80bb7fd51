package kafka

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/node/stream/streamtest"
)

// heldSubmit holds the first SubmitBatch until released: a produce that is
// in the middle of being handled.
type heldSubmit struct {
	Streams
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (h *heldSubmit) SubmitBatch(ctx context.Context, name string, req stream.AppendRequest) (stream.Submitted, error) {
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.entered)
		select {
		case <-h.release:
		case <-ctx.Done():
			return stream.Submitted{}, ctx.Err()
		}
	}
	return h.Streams.SubmitBatch(ctx, name, req)
}

// TestProduceInProgressOutlastsClose: a produce the server is handling
// when it closes (a drained node stopping) is completed and answered
// with its offset. Its context used to be cancelled by the Close, so its
// routing and its wait for durability failed and the client got a bare
// NOT_LEADER_OR_FOLLOWER: after a drain, without the KIP-951 hint that
// sends it to the new leader at once, so it waited for its metadata
// back-off (the rolling drill's 4.9 s pause).
func TestProduceInProgressOutlastsClose(t *testing.T) {
	ts, held, rc := produceHeldInService(t, 3, 7)
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- ts.srv.Close(ctx)
	}()
	// Close has ended the connection's waits by the time it waits for
	// the request in progress; then the produce goes on.
	waitForClosed(t, ts.srv)
	close(held.release)
	resp := kmsg.NewProduceResponse()
	resp.SetVersion(9)
	corr, body, err := rc.recv(true, 10*time.Second) // v9 is flexible
	if err != nil {
		t.Fatalf("no answer to the produce in progress at Close: %v", err)
	}
	if err := resp.ReadFrom(body); err != nil || corr != 7 {
		t.Fatalf("decode the produce response (correlation %d): %v", corr, err)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("the produce in progress at Close: error %d, base offset %d; want it written at 0", p.ErrorCode, p.BaseOffset)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// produceHeldInService starts a server whose service holds the first
// SubmitBatch, and sends it a produce of n records (correlation id corr)
// that is held there when this returns.
func produceHeldInService(t *testing.T, n int, corr int32) (*testServer, *heldSubmit, *rawConn) {
	t.Helper()
	held := &heldSubmit{entered: make(chan struct{}), release: make(chan struct{})}
	ts := &testServer{t: t, env: streamtest.New(t, stream.Config{}), wrap: func(s Streams) Streams { held.Streams = s; return held }}
	ts.serve()
	ts.createTopic("held", 1)
	rc := ts.raw()
	rc.send(produceRequest("held", -1, -1, -1, n), corr)
	select {
	case <-held.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the produce never reached the service")
	}
	return ts, held, rc
}

// waitForClosed waits until Close has marked s closed.
func waitForClosed(t *testing.T, s *Server) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed && s.ctx.Err() != nil {
			return
		}
	}
	t.Fatal("Close never started")
}

// TestCloseDeadlineEndsAProduceInProgress: what outlasts Close's first
// step still ends at its deadline (the hard stop), so a produce that
// never completes cannot hold a node's shutdown past --shutdown-timeout.
func TestCloseDeadlineEndsAProduceInProgress(t *testing.T) {
	ts, _, _ := produceHeldInService(t, 1, 9)
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := ts.srv.Close(ctx)
	if took := time.Since(start); err == nil || took > deadline+5*time.Second {
		t.Fatalf("Close with a produce that never completes: %v after %v; want its deadline's error, soon after %v", err, took, deadline)
	}
}
