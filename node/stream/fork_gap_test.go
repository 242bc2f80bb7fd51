package stream_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// TestForkReadWalksPastAGapAtTheForkPoint: a fork whose inherited range
// ends in offsets a takeover skipped (a `local` owner lost with records it
// never uploaded) reads past them to its own records. Before (found while
// building the soak's deletion workload) the fork answered an empty page,
// not up to date, at the same offset forever: a reader never reached the
// fork's records.
func TestForkReadWalksPastAGapAtTheForkPoint(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/ro/")
	shared := &dirTier{dir: t.TempDir()}
	a := startSessionNode(t, reg, &dirTier{dir: t.TempDir(), fail: true}, "a")
	b := startSessionNode(t, reg, shared, "b")
	ctx := context.Background()
	if _, _, err := a.svc.Create(ctx, "/s", stream.CreateOptions{Durability: stream.DurabilityLocal}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := a.svc.Append(ctx, "/s", []record.Record{{Value: []byte(fmt.Sprint("a", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := loseLeaseAndAppend(t, cli, a, b, "/s", "b0")
	if err != nil || first.FirstOffset < 3 {
		t.Fatalf("first append after the takeover: %+v %v", first, err)
	}
	gapEnd := first.FirstOffset // [0, gapEnd) is a gap on b
	mustCreate(t, b.svc, "/f", stream.CreateOptions{Fork: fork("/s", gapEnd, 0)})
	if _, err := b.svc.Append(ctx, "/f", recs("F")); err != nil {
		t.Fatal(err)
	}
	for _, from := range []int64{0, 1, gapEnd - 1, gapEnd} {
		page, err := b.svc.Read(ctx, "/f", stream.ReadOptions{Offset: from})
		if err != nil || len(page.Records) != 1 || page.Records[0].Offset != gapEnd || string(page.Records[0].Value) != "F" || !page.UpToDate {
			t.Fatalf("fork read from %d: %v at next offset %d, up to date %v, err %v; want F at %d, up to date",
				from, vals(page.Records), page.NextOffset, page.UpToDate, err, gapEnd)
		}
	}
}

// TestForkReadsASourceAnotherNodeServes: a takeover places each stream on
// its own, so a fork can end up on another node than its source. The fork
// then reads its inherited records from object storage. Found by the
// 10-minute soak with the deletion workload: a fork of a long-lived stream
// answered 503 "fork source /soak/object/2 (id 2050) of /soak/churn/f-15
// is missing" for the 3 minutes of its final reads, on every node.
func TestForkReadsASourceAnotherNodeServes(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/rs/")
	shared := &dirTier{dir: t.TempDir()}
	a := startSessionNode(t, reg, shared, "a")
	b := startSessionNode(t, reg, shared, "b")
	ctx := context.Background()
	mustCreate(t, a.svc, "/src", stream.CreateOptions{Durability: stream.DurabilityObject, Initial: recs("s0", "s1")})
	mustCreate(t, a.svc, "/f", stream.CreateOptions{Fork: fork("/src", -1, 0), Durability: stream.DurabilityObject})
	if _, err := a.svc.Append(ctx, "/f", recs("f2")); err != nil {
		t.Fatal(err)
	}
	// a is lost; b takes over the fork only (nobody asked for the source).
	if _, err := loseLeaseAndAppend(t, cli, a, b, "/f", "f3"); err != nil {
		t.Fatalf("append to the fork on b after the takeover: %v", err)
	}
	page, err := b.svc.Read(ctx, "/f", stream.ReadOptions{Offset: 0})
	if err != nil || fmt.Sprint(vals(page.Records)) != "[s0 s1 f2 f3]" || !page.UpToDate {
		t.Fatalf("fork on b, its source served by no node: %v up to date %v, err %v; want [s0 s1 f2 f3]", vals(page.Records), page.UpToDate, err)
	}
}

// TestForkOfALostSourceOnAnotherNode: a `local` source whose owner is lost
// with records it never uploaded, and a fork of it (point past those
// records) that another node takes over on its own. Reading the fork there
// must not fail forever because nobody serves the source: the node serves
// the source itself (it is the takeover target), which records the lost
// records as a gap, and the fork reads past it to its own records. Found
// by the 10-minute soak: "no record of /soak/churn/s-43 holds offset 7"
// for the 3 minutes of its final reads, on every node.
func TestForkOfALostSourceOnAnotherNode(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/rl/")
	shared := &dirTier{dir: t.TempDir()}
	a := startSessionNode(t, reg, &dirTier{dir: t.TempDir(), fail: true}, "a")
	b := startSessionNode(t, reg, shared, "b")
	ctx := context.Background()
	mustCreate(t, a.svc, "/src", stream.CreateOptions{Durability: stream.DurabilityLocal, Initial: recs("s0", "s1", "s2")})
	mustCreate(t, a.svc, "/f", stream.CreateOptions{Fork: fork("/src", -1, 0), Durability: stream.DurabilityLocal})
	if _, err := loseLeaseAndAppend(t, cli, a, b, "/f", "f3"); err != nil {
		t.Fatalf("append to the fork on b after the takeover: %v", err)
	}
	var page stream.ReadResult
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if page, err = b.svc.Read(ctx, "/f", stream.ReadOptions{Offset: 0}); err == nil {
			break
		}
	}
	if err != nil || fmt.Sprint(vals(page.Records)) != "[f3]" || page.Records[0].Offset != 3 || !page.UpToDate {
		t.Fatalf("fork on b, its `local` source lost with a: %v up to date %v, err %v; want [f3] at 3 (s0-s2 lost with a)", vals(page.Records), page.UpToDate, err)
	}
}

// slowManifests is a registry whose manifest listing takes longer than a
// history read waits for it (thousands of manifests on a loaded node).
type slowManifests struct {
	*meta.Registry
	delay *atomic.Int64 // nanoseconds
}

func (m slowManifests) Manifests(ctx context.Context) ([]metadata.Manifest, error) {
	select {
	case <-time.After(time.Duration(m.delay.Load())):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return m.Registry.Manifests(ctx)
}

// TestForkReadWithASlowManifestListing: a fork whose source another node
// serves reads the inherited records from object storage, through a
// listing of every manifest. When that listing takes longer than a read
// waits (routeTimeout), the read fails, but the listing goes on and the
// next reads use it. Before, each read cancelled its own listing at its
// deadline: the soak's fork of /soak/replicated/2 answered "fork source ...
// is missing: manifests: meta: list manifests: context deadline exceeded"
// for the 3 minutes of its final reads.
func TestForkReadWithASlowManifestListing(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/rm/")
	shared := &dirTier{dir: t.TempDir()}
	a := startSessionNode(t, reg, shared, "a")
	delay := new(atomic.Int64)
	b := &sessionNode{id: "b", manifests: slowManifests{reg, delay}}
	b.join(t, reg)
	b.dir = t.TempDir()
	b.open(t, reg, shared)
	ctx := context.Background()
	mustCreate(t, a.svc, "/src", stream.CreateOptions{Durability: stream.DurabilityObject, Initial: recs("s0", "s1")})
	mustCreate(t, a.svc, "/f", stream.CreateOptions{Fork: fork("/src", -1, 0), Durability: stream.DurabilityObject})
	// b takes the fork over (a's lease lost); a is not serving the source.
	if _, err := loseLeaseAndAppend(t, cli, a, b, "/f", "f2"); err != nil {
		t.Fatalf("append to the fork on b after the takeover: %v", err)
	}
	a.stop()
	delay.Store(int64(4 * time.Second))
	stream.ForgetManifests(b.svc)
	var page stream.ReadResult
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if page, err = b.svc.Read(ctx, "/f", stream.ReadOptions{Offset: 0}); err == nil {
			break
		}
	}
	if err != nil || fmt.Sprint(vals(page.Records)) != "[s0 s1 f2]" {
		t.Fatalf("fork on b with a 4 s manifest listing: %v, err %v; want [s0 s1 f2]", vals(page.Records), err)
	}
}

// TestForkOfASourceWhoseOwnerLostItsDisk: a `local` source's owner loses
// its disk with records it never uploaded and comes back (same node id, a
// fresh WAL): it owns the source again, with those offsets as a gap it
// knows of in memory only. A fork of the source served by another node
// must read past them. Before, nothing recorded the gap where that node
// looks (the manifests), so the fork answered "no record of /src holds
// offset 0" for as long as the source got no new appends: the soak's
// "no record of /soak/churn/s-43 holds offset 7", on every node, for the
// 9 minutes of its final reads.
func TestForkOfASourceWhoseOwnerLostItsDisk(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/rd/")
	shared := &dirTier{dir: t.TempDir()}
	a := startSessionNode(t, reg, &dirTier{dir: t.TempDir(), fail: true}, "a")
	b := startSessionNode(t, reg, shared, "b")
	ctx := context.Background()
	mustCreate(t, a.svc, "/src", stream.CreateOptions{Durability: stream.DurabilityLocal, Initial: recs("s0", "s1", "s2")})
	mustCreate(t, a.svc, "/f", stream.CreateOptions{Fork: fork("/src", -1, 0), Durability: stream.DurabilityLocal})
	if _, err := loseLeaseAndAppend(t, cli, a, b, "/f", "f3"); err != nil {
		t.Fatalf("append to the fork on b after the takeover: %v", err)
	}
	a.stop()
	a2 := &sessionNode{id: "a", fresh: true}
	a2.join(t, reg)
	a2.dir = t.TempDir()
	a2.open(t, reg, shared)
	var page stream.ReadResult
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if page, err = b.svc.Read(ctx, "/f", stream.ReadOptions{Offset: 0}); err == nil {
			break
		}
	}
	if err != nil || fmt.Sprint(vals(page.Records)) != "[f3]" || page.Records[0].Offset != 3 || !page.UpToDate {
		t.Fatalf("fork on b, its source's owner back with an empty disk: %v up to date %v, err %v; want [f3] at 3", vals(page.Records), page.UpToDate, err)
	}
}
