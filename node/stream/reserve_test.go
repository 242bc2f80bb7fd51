package stream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// TestTakeoverNeverReusesLocalOffsets: an owner acknowledges `local`
// records it never uploads (object storage refuses its uploads) and is
// lost; the node that takes the stream over must not hand those offsets
// out again. It starts past the old owner's reservation, readers (Pico
// and Kafka paths) positioned in the gap are moved past it, and a restart
// of the new owner continues where it was, without a second gap.
func TestTakeoverNeverReusesLocalOffsets(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/ro/")
	shared := &dirTier{dir: t.TempDir()}
	a := startSessionNode(t, reg, &dirTier{dir: t.TempDir(), fail: true}, "a")
	b := startSessionNode(t, reg, shared, "b")
	ctx := context.Background()
	if _, _, err := a.svc.Create(ctx, "/s", stream.CreateOptions{Durability: stream.DurabilityLocal}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		res, err := a.svc.Append(ctx, "/s", []record.Record{{Value: []byte(fmt.Sprint("a", i))}})
		if err != nil || res.FirstOffset != int64(i) {
			t.Fatalf("append %d on a: %+v %v", i, res, err)
		}
	}
	// a is lost with its disk: its lease ends and b takes over (its
	// uploads fail for now, so what it writes stays in its WAL).
	shared.mu.Lock()
	shared.fail = true
	shared.mu.Unlock()
	first, err := loseLeaseAndAppend(t, cli, a, b, "/s", "b0")
	if err != nil || first.FirstOffset < 10 {
		t.Fatalf("first append on b: %+v %v: offsets below 10 were acknowledged by a", first, err)
	}
	gapEnd := first.FirstOffset
	t.Logf("a acknowledged [0, 10) and was lost; b starts at %d", gapEnd)

	for _, from := range []int64{0, 5, 10, gapEnd - 1} {
		page, err := b.svc.Read(ctx, "/s", stream.ReadOptions{Offset: from})
		if err != nil {
			t.Fatalf("read from %d: %v", from, err)
		}
		if len(page.Records) != 1 || page.Records[0].Offset != gapEnd || string(page.Records[0].Value) != "b0" || page.NextOffset != gapEnd+1 || !page.UpToDate {
			t.Fatalf("read from %d (in the gap): %+v, want only b0 at %d", from, page, gapEnd)
		}
		batches, err := b.svc.ReadBatches(ctx, "/s", from, 1<<20)
		if err != nil {
			t.Fatalf("Kafka read from %d: %v", from, err)
		}
		h, err := record.ParseHeader(batches.Batches)
		if err != nil || h.BaseOffset != gapEnd {
			t.Fatalf("Kafka read from %d: first batch %+v %v, want base offset %d", from, h, err, gapEnd)
		}
	}
	// b restarts (same lease, same epoch) with b0 only in its WAL (its
	// uploads fail too): the WAL replay starts past the gap, and b
	// continues at gapEnd+1.
	b.stop()
	b.open(t, reg, shared)
	res, err := b.svc.Append(ctx, "/s", []record.Record{{Value: []byte("b1")}})
	if err != nil || res.FirstOffset != gapEnd+1 {
		t.Fatalf("append on b after its restart: %+v %v, want offset %d", res, err, gapEnd+1)
	}

	// Once b has flushed, the gap is the space between object ranges: a
	// node that only reads object storage moves past it too.
	shared.mu.Lock()
	shared.fail = false
	shared.mu.Unlock()
	if err := b.svc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c := startSessionNode(t, reg, shared, "c")
	page, err := c.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 3})
	if err != nil || len(page.Records) != 2 || page.Records[0].Offset != gapEnd || page.Records[1].Offset != gapEnd+1 {
		t.Fatalf("history read on c from 3: %+v %v", page, err)
	}
}

// TestBusyStreamsShareReservationTransactions: when one stream's
// reservation is extended, every other stream that has used a quarter of
// its own is extended in the same etcd transaction, so a node with many
// busy streams writes about one reservation transaction per round instead
// of one per stream (each is an fsync of etcd's, on the disk the WAL uses).
func TestBusyStreamsShareReservationTransactions(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/rs/")
	n := startSessionNode(t, reg, &dirTier{dir: t.TempDir()}, "a")
	ctx := context.Background()
	ids := map[string]uint64{}
	for _, name := range []string{"/a", "/b", "/idle"} {
		info, _, err := n.svc.Create(ctx, name, stream.CreateOptions{Durability: stream.DurabilityLocal})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = info.ID
	}
	recs := make([]record.Record, 100)
	appendN := func(name string, n2 int) {
		t.Helper()
		for range n2 {
			if _, err := n.svc.Append(ctx, name, recs); err != nil {
				t.Fatalf("append to %s: %v", name, err)
			}
		}
	}
	res := func(name string) metadata.Reservation {
		t.Helper()
		r, err := reg.Reservation(ctx, ids[name])
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Each stream's first append waits for its first reservation (at
	// least minReserve = 1024 offsets past it).
	appendN("/a", 1)
	appendN("/idle", 1)
	appendN("/b", 4) // b uses 300 of its 1024 reserved offsets: over a quarter
	a0, b0, idle0 := res("/a"), res("/b"), res("/idle")
	if a0.End < 1024 || b0.End < 1024 || idle0.End < 1024 {
		t.Fatalf("first reservations %+v %+v %+v, want each to end at 1024 or later", a0, b0, idle0)
	}
	// a passes half of its reservation: it asks for more, and b's
	// reservation is extended in the same transaction; idle's is not.
	appendN("/a", (int(a0.End)+100)/2/100)
	var a1 metadata.Reservation
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if a1 = res("/a"); a1.Rev != a0.Rev {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's reservation %+v was not extended after half of it was used", a0)
		}
	}
	b1, idle1 := res("/b"), res("/idle")
	if b1.Rev != a1.Rev || b1.End <= b0.End {
		t.Fatalf("b's reservation %+v (was %+v) was not extended in a's transaction (revision %d)", b1, b0, a1.Rev)
	}
	if idle1 != idle0 {
		t.Fatalf("idle's reservation changed from %+v to %+v: it has used none of it", idle0, idle1)
	}
}
