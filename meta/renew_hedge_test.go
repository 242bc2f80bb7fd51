package meta

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fakeKeepAlive answers the i-th renewal (from 0) with answer(i, ctx); it
// counts the calls and the calls still running.
type fakeKeepAlive struct {
	calls, running atomic.Int32
	answer         func(i int, ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error)
}

func (f *fakeKeepAlive) keepAliveOnce(ctx context.Context, _ clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	i := int(f.calls.Add(1)) - 1
	f.running.Add(1)
	defer f.running.Add(-1)
	return f.answer(i, ctx)
}

func hedgeSession(f *fakeKeepAlive) *Session {
	return &Session{base: time.Now(), keepAliveOnce: f.keepAliveOnce}
}

// TestRenewOnceHedgesASlowRenewal: a renewal with no answer after half its
// timeout gets a second one beside it; the second's success is returned,
// timed from its own send, long before the first would have timed out,
// and the first is cancelled.
func TestRenewOnceHedgesASlowRenewal(t *testing.T) {
	f := &fakeKeepAlive{answer: func(i int, ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		if i == 0 {
			<-ctx.Done() // a stalled stream: no answer until cancelled
			return nil, ctx.Err()
		}
		return &clientv3.LeaseKeepAliveResponse{TTL: 2}, nil
	}}
	// Long enough that scheduler delay on a loaded machine (hundreds of
	// milliseconds at load 30) cannot carry the hedged answer past it.
	const timeout = 4 * time.Second
	start := time.Now()
	sent, resp, err := hedgeSession(f).renewOnce(context.Background(), timeout)
	took := time.Since(start)
	if err != nil || resp == nil || resp.TTL != 2 {
		t.Fatalf("renewOnce = %v, %v; want the second renewal's answer", resp, err)
	}
	if f.calls.Load() != 2 {
		t.Fatalf("%d renewals sent, want 2", f.calls.Load())
	}
	if d := sent.Sub(start); d < timeout/2 {
		t.Fatalf("success timed from %v after the start, want the second send (>= %v): the first was never answered", d, timeout/2)
	}
	if took >= timeout {
		t.Fatalf("renewOnce took %v, want less than the first renewal's timeout %v", took, timeout)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.running.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled first renewal was not cancelled")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRenewOnceSendsOneWhenAnswered: a prompt answer sends no second
// renewal.
func TestRenewOnceSendsOneWhenAnswered(t *testing.T) {
	f := &fakeKeepAlive{answer: func(int, context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return &clientv3.LeaseKeepAliveResponse{TTL: 5}, nil
	}}
	s := hedgeSession(f)
	for range 20 {
		if _, _, err := s.renewOnce(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.calls.Load(); n != 20 {
		t.Fatalf("%d renewals sent for 20 prompt answers", n)
	}
}

// TestRenewOnceErrors: a lease etcd no longer has ends the attempt at
// once (no second renewal can help); two failures return the last error;
// one fast failure is returned without waiting for a hedge (the caller
// retries).
func TestRenewOnceErrors(t *testing.T) {
	notFound := &fakeKeepAlive{answer: func(int, context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return nil, rpctypes.ErrLeaseNotFound
	}}
	if _, _, err := hedgeSession(notFound).renewOnce(context.Background(), time.Minute); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("err = %v, want ErrLeaseNotFound", err)
	}
	if n := notFound.calls.Load(); n != 1 {
		t.Fatalf("%d renewals for a lost lease, want 1", n)
	}

	errFirst, errSecond := errors.New("first"), errors.New("second")
	both := &fakeKeepAlive{answer: func(i int, ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		if i == 0 {
			<-ctx.Done()
			return nil, errFirst
		}
		return nil, errSecond
	}}
	if _, _, err := hedgeSession(both).renewOnce(context.Background(), 200*time.Millisecond); !errors.Is(err, errFirst) {
		t.Fatalf("err = %v, want the last one to answer (the first, at its timeout)", err)
	}

	fast := &fakeKeepAlive{answer: func(int, context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return nil, errFirst
	}}
	start := time.Now()
	if _, _, err := hedgeSession(fast).renewOnce(context.Background(), time.Minute); !errors.Is(err, errFirst) {
		t.Fatalf("err = %v, want %v", err, errFirst)
	}
	if d := time.Since(start); d > 10*time.Second || fast.calls.Load() != 1 {
		t.Fatalf("a fast failure took %v and %d renewals", d, fast.calls.Load())
	}
}
