package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
)

// pieceCounter is the real tier, counting the most pieces one
// ReadBatchPieces returned.
type pieceCounter struct {
	*tiering.Tier
	most atomic.Int64
}

func (p *pieceCounter) ReadBatchPieces(ctx context.Context, ref *stream.ObjectRef, from int64, maxBytes int) ([][]byte, func(), error) {
	pieces, release, err := p.Tier.ReadBatchPieces(ctx, ref, from, maxBytes)
	if n := int64(len(pieces)); n > p.most.Load() {
		p.most.Store(n)
	}
	return pieces, release, err
}

// TestBatchesPageOverCachePieces: a page of stored batches read from an
// object through tiering.Tier (a PieceReader) spans two of the block
// cache's 4 MiB GETs, so it comes to the service as several pieces; the
// page holds every batch once, whole (one straddling the GETs in two
// pieces), in offset order, and its records are those of a page of
// records over the same range.
func TestBatchesPageOverCachePieces(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityLocal)
	h.close()
	real, err := tiering.NewTier(objstoretest.FileStore(t), tiering.TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	pc := &pieceCounter{Tier: real}
	// No flush until close: the final flush puts every batch in one
	// object (timing-free).
	h.real, h.seal, h.sealB = pc, time.Hour, 1<<30
	h.open()
	ctx := context.Background()
	mustCreate(t, h.svc, "/p", stream.CreateOptions{})
	const appends, perAppend = 96, 64 // 96 batches of 64 x 1 KiB: ~6 MiB
	for i := range appends {
		rs := make([]record.Record, perAppend)
		for j := range rs {
			rs[j].Value = bytes.Repeat([]byte{byte(i)}, 1024)
			rs[j].Key = fmt.Appendf(nil, "%d-%d", i, j)
		}
		if _, err := h.svc.Append(ctx, "/p", rs); err != nil {
			t.Fatal(err)
		}
	}
	h.close()
	h.open()
	page, err := h.svc.Read(ctx, "/p", stream.ReadOptions{Offset: 0, Batches: true, MaxBytes: 8 << 20, MaxRecords: appends * perAppend})
	if err != nil {
		t.Fatal(err)
	}
	if pc.most.Load() < 2 {
		t.Fatalf("the tier returned at most %d pieces per read; the page should span two cache GETs", pc.most.Load())
	}
	// A batch that straddles the two GETs comes in two entries
	// (ReadResult.Batches are pieces of one byte string).
	var fromBatches []record.Record
	next, n := int64(0), 0
	err = record.WalkPieces(page.Batches, func(b [][]byte, _ record.BatchHeader, _ int) error {
		h, err := record.ValidatePieces(b)
		if err != nil || h.BaseOffset != next {
			t.Fatalf("batch %d: base offset %d, want %d (%v)", n, h.BaseOffset, next, err)
		}
		next = h.LastOffset() + 1
		n++
		rs, err := record.DecodeRecords(bytes.Join(b, nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		fromBatches = append(fromBatches, rs...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != appends || page.BatchRecords != appends*perAppend || page.NextOffset != appends*perAppend {
		t.Fatalf("page of %d batches, %d records, next offset %d; want %d batches, %d records", n, page.BatchRecords, page.NextOffset, appends, appends*perAppend)
	}
	recs, err := h.svc.Read(ctx, "/p", stream.ReadOptions{Offset: 0, MaxBytes: 8 << 20, MaxRecords: appends * perAppend})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs.Records) != len(fromBatches) {
		t.Fatalf("records page %d records, batches page %d", len(recs.Records), len(fromBatches))
	}
	for i := range fromBatches {
		a, b := fromBatches[i], recs.Records[i]
		if a.Offset != b.Offset || !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Value, b.Value) {
			t.Fatalf("record %d: batches page has offset %d key %q, records page offset %d key %q", i, a.Offset, a.Key, b.Offset, b.Key)
		}
	}
}
