package stream_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// TestTrimmedEmptyStreamAfterDiskLoss: an object stream trimmed past all
// its records, whose objects the collector deleted, keeps its next offset
// at or above its start offset when its owner comes back with an empty
// disk: a read at the start offset is an empty page, not out of range.
func TestTrimmedEmptyStreamAfterDiskLoss(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityObject)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/t", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Append(ctx, "/t", []record.Record{{Value: []byte("0")}}); err != nil {
		t.Fatal(err)
	}
	trim := int64(1)
	if _, err := h.svc.Configure(ctx, "/t", stream.ConfigChange{TrimBefore: &trim}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.CollectGarbage(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	h.close()
	if err := os.RemoveAll(h.dir); err != nil {
		t.Fatal(err)
	}
	h.open()
	info, err := h.svc.Head(ctx, "/t")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start %d next %d", info.StartOffset, info.NextOffset)
	if info.NextOffset < info.StartOffset {
		t.Fatalf("next offset %d below start offset %d", info.NextOffset, info.StartOffset)
	}
	if _, err := h.svc.Read(ctx, "/t", stream.ReadOptions{Offset: info.StartOffset}); err != nil {
		t.Fatalf("read at the start offset: %v", err)
	}
}
