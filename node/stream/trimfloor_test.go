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

// TestTrimmedEmptyStreamAfterTakeover: the same stream, taken over by
// another node that rebuilds it from the object-storage listing alone
// (adopt), resumes at or above its start offset too: the new owner's
// first append does not reuse a trimmed offset, and a read at the start
// offset is not out of range.
func TestTrimmedEmptyStreamAfterTakeover(t *testing.T) {
	cli, _, a, b := startTwoNodes(t, "/tt/")
	ctx := context.Background()
	if _, _, err := a.svc.Create(ctx, "/t", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.Append(ctx, "/t", []record.Record{{Value: []byte("0")}}); err != nil {
		t.Fatal(err)
	}
	trim := int64(1)
	if _, err := a.svc.Configure(ctx, "/t", stream.ConfigChange{TrimBefore: &trim}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.CollectGarbage(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, a.sess.LeaseID()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	var res stream.AppendResult
	var err error
	for {
		res, err = b.svc.Append(ctx, "/t", []record.Record{{Value: []byte("1")}})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("append on b after takeover: %v", err)
	}
	info, err := b.svc.Head(ctx, "/t")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first offset %d; start %d next %d", res.FirstOffset, info.StartOffset, info.NextOffset)
	if res.FirstOffset < info.StartOffset || info.NextOffset < info.StartOffset {
		t.Fatalf("offsets below the start offset %d handed out again: first %d, next %d", info.StartOffset, res.FirstOffset, info.NextOffset)
	}
	page, err := b.svc.Read(ctx, "/t", stream.ReadOptions{Offset: info.StartOffset})
	if err != nil {
		t.Fatalf("read at the start offset: %v", err)
	}
	if len(page.Records) != 1 || string(page.Records[0].Value) != "1" {
		t.Fatalf("read at the start offset: %d records, want the one appended after the takeover", len(page.Records))
	}
}
