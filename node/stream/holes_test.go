package stream_test

// Holes in an owner's chunk index, and stale tails served after a lost
// lease: the ways the soak's "a read was moved past [F, R), but offset X
// holds" violations came about (docs/durability.md).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/wal"
)

func pageString(p stream.ReadResult) string {
	var s []string
	for _, r := range p.Records {
		s = append(s, fmt.Sprintf("%d:%s", r.Offset, r.Value))
	}
	return fmt.Sprint(s)
}

// TestNoStaleTailBeforeRejoinRechecks: node/membership.go stores the new
// session (join) before it calls onJoined (Rejoined). In between, the
// lease is Valid again, but the node still holds streams another node
// took over while it was paused: reads must stop at what object storage
// holds, not serve the un-uploaded tail the new owner made a gap.
func TestNoStaleTailBeforeRejoinRechecks(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/gr1/")
	shared := &dirTier{dir: t.TempDir()}
	a := startSessionNode(t, reg, &dirTier{dir: t.TempDir(), fail: true}, "a") // a's uploads fail: its tail stays in its WAL
	b := startSessionNode(t, reg, shared, "b")
	ctx := context.Background()
	if _, _, err := a.svc.Create(ctx, "/s", stream.CreateOptions{Durability: stream.DurabilityLocal}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := a.svc.Append(ctx, "/s", []record.Record{{Value: []byte(fmt.Sprint("a", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	// a is paused past its lease; b takes the stream over.
	first, err := loseLeaseAndAppend(t, cli, a, b, "/s", "b0")
	if err != nil {
		t.Fatal(err)
	}
	bPage, err := b.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new owner b: read from 0 -> %s (gap [0, %d))", pageString(bPage), first.FirstOffset)

	// a resumes: membership fences it, joins with a new lease (Store), and
	// only then calls Rejoined.
	a.svc.Fence(metadata.ErrLeaseLost)
	a.join(t, reg)
	_, appendErr := a.svc.Append(ctx, "/s", []record.Record{{Value: []byte("late")}})
	aPage, err := a.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 0})
	t.Logf("old owner a, new session stored, before Rejoined: append -> %v; read from 0 -> %s %v", appendErr, pageString(aPage), err)
	if appendErr == nil {
		t.Error("a acknowledged an append before re-checking its streams")
	}
	if err == nil && len(aPage.Records) > 0 {
		t.Errorf("a served %d records of the tail b made a gap ([0, %d)) after its rejoin", len(aPage.Records), first.FirstOffset)
	}
	// Rejoined drops the stream: reads are routed (here, nowhere: a has
	// no cluster routing to b), and a is unfenced.
	if err := a.svc.Rejoined(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 0}); err == nil {
		t.Error("a still serves /s after Rejoined found it taken over")
	}
}

// objMissingOnce is a tier whose next ReadBatches, once armed, answers
// ErrObjectMissing (an object replaced by compaction or collected).
type objMissingOnce struct {
	*dirTier
	mu    sync.Mutex
	armed bool
}

func (o *objMissingOnce) ReadBatches(ctx context.Context, ref *stream.ObjectRef, from int64, maxBytes int) ([]byte, error) {
	o.mu.Lock()
	armed := o.armed
	o.armed = false
	o.mu.Unlock()
	if armed {
		return nil, fmt.Errorf("%w: %s", stream.ErrObjectMissing, ref.Key)
	}
	return o.dirTier.ReadBatches(ctx, ref, from, maxBytes)
}

// hookManifests runs hook after its next listing was read from etcd and
// before it is returned: a flush that commits while the listing is on its
// way to refreshObjects.
type hookManifests struct {
	*meta.Registry
	mu   sync.Mutex
	hook func()
}

func (h *hookManifests) Manifests(ctx context.Context) ([]metadata.Manifest, error) {
	ms, err := h.Registry.Manifests(ctx)
	h.mu.Lock()
	hook := h.hook
	h.hook = nil
	h.mu.Unlock()
	if hook != nil {
		hook()
	}
	return ms, err
}

// TestRefreshObjectsBesideAFlushLeavesNoHole: a read that meets a
// missing object rebuilds the stream's index from a manifest listing; a
// flush that commits while the listing is on its way ends beyond it. The
// rebuilt index must splice the listing and the node's own chunks where
// the listing ends, not at the node's upload mark (which left the flush's
// range in neither: a hole readers were moved past).
func TestRefreshObjectsBesideAFlushLeavesNoHole(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/gr2/")
	sess, err := reg.Join(context.Background(), metadata.Member{NodeID: "a", AdvertiseURL: "http://a"}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	shared := &dirTier{dir: t.TempDir()}
	tier := &objMissingOnce{dirTier: shared}
	mans := &hookManifests{Registry: reg}
	w, _, err := wal.Open(wal.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	svc, err := stream.Open(context.Background(), stream.Config{
		NodeID: "a", Cluster: reg, DefaultDurability: stream.DurabilityLocal,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tier: stream.TierConfig{Tier: tier, Manifests: mans, Session: func() metadata.Lease { return meta.LeaseOf(sess) },
			SealMaxAge: time.Hour},
	}, w, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	ctx := context.Background()
	if _, _, err := svc.Create(ctx, "/s", stream.CreateOptions{Durability: stream.DurabilityLocal}); err != nil {
		t.Fatal(err)
	}
	app := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := svc.Append(ctx, "/s", []record.Record{{Value: []byte(fmt.Sprint("r", i))}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	app(0, 5)
	if err := svc.Flush(ctx); err != nil { // [0, 5) in an object
		t.Fatal(err)
	}
	app(5, 10) // [5, 10) in the WAL only

	// A read meets a missing object; while refreshObjects' listing is on
	// its way, the flusher commits [5, 10) and an append adds offset 10.
	tier.mu.Lock()
	tier.armed = true
	tier.mu.Unlock()
	mans.mu.Lock()
	mans.hook = func() {
		if err := svc.Flush(ctx); err != nil {
			t.Error(err)
		}
		app(10, 11)
	}
	mans.mu.Unlock()
	page, err := svc.Read(ctx, "/s", stream.ReadOptions{Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("owner's read from 0 (the one that refreshed): %s next %d", pageString(page), page.NextOffset)
	page, err = svc.Read(ctx, "/s", stream.ReadOptions{Offset: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("owner's read from 5: %s next %d", pageString(page), page.NextOffset)
	if len(page.Records) == 0 || page.Records[0].Offset != 5 {
		t.Errorf("the owner moved a reader past offsets it holds in object storage: read from 5 -> %s", pageString(page))
	}
	// A node rebuilding the stream from the manifests holds them.
	sessC, err := reg.Join(ctx, metadata.Member{NodeID: "c", AdvertiseURL: "http://c"}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wc, _, err := wal.Open(wal.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wc.Close() })
	c, err := stream.Open(ctx, stream.Config{NodeID: "c", Cluster: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tier: stream.TierConfig{Tier: shared, Manifests: reg, Session: func() metadata.Lease { return meta.LeaseOf(sessC) }, SealMaxAge: time.Hour}}, wc, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cp, err := c.Read(ctx, "/s", stream.ReadOptions{Offset: 5})
	if err != nil || len(cp.Records) == 0 || cp.Records[0].Offset != 5 {
		t.Errorf("non-owner c (object storage) read from 5: %s %v", pageString(cp), err)
	}
}
