package stream_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/PicoMQ/picomq/meta"
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
