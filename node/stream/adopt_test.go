package stream_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// heldReservation is the registry with one offset-reservation read that,
// once armed, waits until released and then fails, as a read from an
// etcd that went away in the middle of a takeover does.
type heldReservation struct {
	*meta.Registry
	armed   atomic.Bool
	entered chan struct{} // closed when the armed read starts
	release chan struct{} // closing it fails the held read
}

func (h *heldReservation) Reservation(ctx context.Context, id uint64) (metadata.Reservation, error) {
	if h.armed.CompareAndSwap(true, false) {
		close(h.entered)
		<-h.release
		return metadata.Reservation{}, errors.New("etcd unreachable (test)")
	}
	return h.Registry.Reservation(ctx, id)
}

// TestFailedAdoptNeverServesItsHalfBuiltState: a takeover's adopt
// publishes the stream's state before it has read the offset reservation
// that moves the new owner past every offset the lost owner handed out.
// An append that finds the stream meanwhile waits for the adopt; if the
// adopt then fails, that append must get a retryable "moving" answer, not
// an offset from the half-built state (here 10, which the lost owner may
// have acknowledged from its WAL), and the next append, routed afresh,
// starts past the reservation.
func TestFailedAdoptNeverServesItsHalfBuiltState(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/fa/")
	shared := &dirTier{dir: t.TempDir(), fail: true} // nothing reaches object storage
	a := startSessionNode(t, reg, &dirTier{dir: t.TempDir(), fail: true}, "a")
	held := &heldReservation{Registry: reg, entered: make(chan struct{}), release: make(chan struct{})}
	b := &sessionNode{id: "b", cluster: held}
	b.join(t, reg)
	b.dir = t.TempDir()
	b.open(t, reg, shared)
	ctx := context.Background()
	if _, _, err := a.svc.Create(ctx, "/s", stream.CreateOptions{Durability: stream.DurabilityLocal}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if res, err := a.svc.Append(ctx, "/s", []record.Record{{Value: []byte("a")}}); err != nil || res.FirstOffset != int64(i) {
			t.Fatalf("append %d on a: %+v %v", i, res, err)
		}
	}
	if _, err := cli.Revoke(ctx, a.sess.Load().LeaseID()); err != nil {
		t.Fatal(err)
	}
	// b's claim is routed once a's lease is gone; its adopt then holds
	// in the reservation read.
	held.armed.Store(true)
	claimer := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, err := b.svc.Append(ctx, "/s", []record.Record{{Value: []byte("claim")}})
			select {
			case <-held.entered:
				claimer <- err
				return
			default:
			}
			if time.Now().After(deadline) {
				claimer <- errors.New("b never reached the reservation read of its adopt")
				return
			}
		}
	}()
	select {
	case <-held.entered:
	case err := <-claimer:
		t.Fatal(err)
	case <-time.After(15 * time.Second):
		t.Fatal("b never adopted /s")
	}
	// An append that finds the half-built stream waits for it.
	waiter := make(chan struct {
		res stream.AppendResult
		err error
	}, 1)
	go func() {
		res, err := b.svc.Append(ctx, "/s", []record.Record{{Value: []byte("waiter")}})
		waiter <- struct {
			res stream.AppendResult
			err error
		}{res, err}
	}()
	waitForGoroutineIn(t, "node/stream.(*Service).submit", "sync.(*Mutex).Lock")
	close(held.release)
	if err := <-claimer; err == nil || !errors.Is(err, stream.ErrUnavailable) {
		t.Fatalf("the claiming append: %v, want unavailable (its adopt failed)", err)
	}
	w := <-waiter
	var moving *stream.MovingError
	if !errors.As(w.err, &moving) {
		t.Fatalf("the append that waited for the failed adopt: %+v %v, want a moving error (retry)", w.res, w.err)
	}
	// Routed afresh, the next append adopts with the reservation read and
	// starts past every offset a handed out.
	res, err := b.svc.Append(ctx, "/s", []record.Record{{Value: []byte("b0")}})
	if err != nil || res.FirstOffset < 10 {
		t.Fatalf("append after the failed adopt: %+v %v, want an offset past a's 10", res, err)
	}
}

// waitForGoroutineIn waits until some goroutine's stack holds every one
// of frames: a goroutine parked where the test needs it to be.
func waitForGoroutineIn(t *testing.T, frames ...string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			all := true
			for _, f := range frames {
				all = all && strings.Contains(g, f)
			}
			if all {
				return
			}
		}
	}
	t.Fatalf("no goroutine reached %v", frames)
}
