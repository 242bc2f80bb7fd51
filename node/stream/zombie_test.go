package stream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/wal"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// gatedTier holds uploads at a gate while armed: a flush that is in the
// middle of its upload when the node is paused.
type gatedTier struct {
	*dirTier
	mu      sync.Mutex
	armed   bool
	entered chan struct{} // closed when an upload reaches the armed gate
	release chan struct{} // closing it lets held uploads through
}

func newGatedTier(d *dirTier) *gatedTier {
	return &gatedTier{dirTier: d, entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedTier) Upload(ctx context.Context, key string, streams []tiering.StreamBatches) ([]stream.ObjectRef, int64, error) {
	g.mu.Lock()
	armed := g.armed
	if armed {
		g.armed = false
		close(g.entered)
	}
	g.mu.Unlock()
	if armed {
		<-g.release
	}
	return g.dirTier.Upload(ctx, key, streams)
}

// sessionNode is a stream service whose membership session the test
// replaces, as node/membership.go does when a node rejoins.
type sessionNode struct {
	id   string
	sess atomic.Pointer[meta.Session]
	svc  *stream.Service
	dir  string // the WAL's
	stop func()
	// manifests, if set, stands between the service and the registry's
	// manifests (a slow etcd).
	manifests stream.Manifests
	fresh     bool // the WAL is new: the node's disk was lost (Config.FreshLog)
	// cluster, if set, stands between the service and the registry's
	// ownership and reservation calls (a failing etcd read).
	cluster stream.Cluster
}

func startSessionNode(t *testing.T, reg *meta.Registry, tier stream.Tier, id string) *sessionNode {
	t.Helper()
	n := &sessionNode{id: id}
	n.join(t, reg)
	n.dir = t.TempDir()
	n.open(t, reg, tier)
	return n
}

// open starts the service over the WAL in n.dir (again after stop: a
// restart with the same session).
func (n *sessionNode) open(t *testing.T, reg *meta.Registry, tier stream.Tier) {
	t.Helper()
	ctx := context.Background()
	w, _, err := wal.Open(wal.Options{Dir: n.dir})
	if err != nil {
		t.Fatal(err)
	}
	n.svc, err = stream.Open(ctx, stream.Config{
		NodeID: n.id, Cluster: n.clusterOr(reg), DefaultDurability: stream.DurabilityObject, FreshLog: n.fresh,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tier:   stream.TierConfig{Tier: tier, Manifests: n.manifestsOr(reg), Session: func() metadata.Lease { return meta.LeaseOf(n.sess.Load()) }, SealMaxAge: 20 * time.Millisecond},
	}, w, reg)
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { n.svc.RunFlusher(fctx); close(done) }()
	var once sync.Once
	n.stop = func() {
		once.Do(func() { cancel(); <-done; n.svc.Close(); w.Close() })
	}
	t.Cleanup(n.stop)
}

func (n *sessionNode) clusterOr(reg *meta.Registry) stream.Cluster {
	if n.cluster != nil {
		return n.cluster
	}
	return reg
}

func (n *sessionNode) manifestsOr(reg *meta.Registry) stream.Manifests {
	if n.manifests != nil {
		return n.manifests
	}
	return reg
}

// loseLeaseAndAppend revokes a's lease and appends value to name on b
// until b has taken the stream over and acknowledges (at most 10 s); it
// returns b's first answer that is not a refusal, or the last refusal.
func loseLeaseAndAppend(t *testing.T, cli *clientv3.Client, a, b *sessionNode, name, value string) (stream.AppendResult, error) {
	t.Helper()
	ctx := context.Background()
	if _, err := cli.Revoke(ctx, a.sess.Load().LeaseID()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, err := b.svc.Append(ctx, name, []record.Record{{Value: []byte(value)}})
		if err == nil || time.Now().After(deadline) {
			return res, err
		}
	}
}

func (n *sessionNode) join(t *testing.T, reg *meta.Registry) {
	t.Helper()
	sess, err := reg.Join(context.Background(), metadata.Member{NodeID: n.id, AdvertiseURL: "http://" + n.id}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	n.sess.Store(sess)
}

// TestZombieFlushCommitsNothingAfterRejoin is the acknowledged-record loss
// the soak found (an `object` record replaced at its offset after a zombie
// owner came back): an owner is paused in the middle of a flush, loses its
// lease, another node takes the stream over and acknowledges a record at
// the offset the paused flush also holds; the old owner resumes, rejoins
// with a new session and drops the stream, and then its flush reaches the
// commit. Committed under the new session it succeeded, and the manifests
// held two copies of the offset, the zombie's winning. It must be
// committed under the session the flush started with, and fail.
func TestZombieFlushCommitsNothingAfterRejoin(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/zf/")
	shared := &dirTier{dir: t.TempDir()}
	gate := newGatedTier(shared)
	a := startSessionNode(t, reg, gate, "a")
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(gate.release) }) }
	t.Cleanup(release) // before a's flusher is stopped
	b := startSessionNode(t, reg, shared, "b")
	ctx := context.Background()
	if _, _, err := a.svc.Create(ctx, "/s", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if res, err := a.svc.Append(ctx, "/s", []record.Record{{Value: []byte("a0")}}); err != nil || res.FirstOffset != 0 {
		t.Fatalf("first append: %+v %v", res, err)
	}

	// a's next flush stops in the middle of its upload: "paused".
	gate.mu.Lock()
	gate.armed = true
	gate.mu.Unlock()
	zombie := make(chan error, 1)
	go func() {
		_, err := a.svc.Append(ctx, "/s", []record.Record{{Value: []byte("zombie")}})
		zombie <- err
	}()
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("a's flush never reached the upload")
	}

	// a's lease expires while it is paused; b takes the stream over and
	// acknowledges its own record, at offset 1 or, past a's offset
	// reservation, later (reserve.go).
	res, err := loseLeaseAndAppend(t, cli, a, b, "/s", "b1")
	if err != nil || res.FirstOffset < 1 {
		t.Fatalf("append on b after the takeover: %+v %v", res, err)
	}
	bOffset := res.FirstOffset

	// a resumes: membership notices the lost lease (fence), joins with a
	// new session and re-checks ownership, dropping /s. Then the paused
	// flush goes on to its commit.
	a.svc.Fence(metadata.ErrLeaseLost)
	a.join(t, reg)
	if err := a.svc.Rejoined(ctx); err != nil {
		t.Fatal(err)
	}
	release()
	select {
	case err := <-zombie:
		if err == nil {
			t.Fatal("the zombie's append was acknowledged")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the zombie's append never returned")
	}
	// Let a's flusher finish whatever it does with the released upload.
	if err := a.svc.Flush(ctx); err != nil && !errors.Is(err, metadata.ErrLeaseLost) {
		t.Logf("a's flush after the rejoin: %v", err)
	}

	ms, err := reg.Manifests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for _, r := range m.Streams {
			if m.Node == "a" && r.Next > bOffset {
				t.Errorf("the zombie committed manifest %s with offsets [%d, %d) of stream %d", m.Key, r.First, r.Next, r.StreamID)
			}
		}
	}
	// A node that rebuilds the stream from the manifests (c, which never
	// served it) reads b's acknowledged record at its offset.
	c := startSessionNode(t, reg, shared, "c")
	page, err := c.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range page.Records {
		got = append(got, fmt.Sprintf("%d:%s", r.Offset, r.Value))
	}
	if want := []string{"0:a0", fmt.Sprintf("%d:b1", bOffset)}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stream read from the manifests on c: %q, want %q", got, want)
	}
}
