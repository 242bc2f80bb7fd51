package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// TestReadBatchesObjectPage: a stored-batch read (the Kafka fetch) of
// history in object storage returns about one cache GET
// (stream.ObjectPageBytes) even when the caller allows far more, so a
// consumer with one fetch in flight gets its first bytes after one GET,
// not after 16 MiB of them; paging on returns every record once, in order.
// It fails without the bound: the first page is the whole 10 MiB.
func TestReadBatchesObjectPage(t *testing.T) {
	eachRealStore(t, func(t *testing.T, h *tierHarness) {
		ctx := context.Background()
		if _, _, err := h.svc.Create(ctx, "/h", stream.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		const batches, perBatch, size = 40, 32, 8 << 10 // 40 batches of 256 KiB
		value := func(off int64) []byte {
			v := bytes.Repeat([]byte{byte(off)}, size)
			copy(v, fmt.Sprint(off))
			return v
		}
		var off int64
		for range batches {
			recs := make([]record.Record, perBatch)
			for i := range recs {
				recs[i].Value = value(off)
				off++
			}
			if _, err := h.svc.AppendBatch(ctx, "/h", stream.AppendRequest{Records: recs}); err != nil {
				t.Fatal(err)
			}
		}
		h.restartWithoutWAL() // every byte from now on comes from the object store

		br, err := h.svc.ReadBatches(ctx, "/h", 0, 16<<20)
		if err != nil {
			t.Fatal(err)
		}
		batchSize := len(br.Batches) / max(countBatches(t, br.Batches), 1)
		if len(br.Batches) > stream.ObjectPageBytes || len(br.Batches) < stream.ObjectPageBytes-batchSize {
			t.Fatalf("first page of history: %d bytes, want about %d (one GET), not up to the 16 MiB asked for", len(br.Batches), stream.ObjectPageBytes)
		}

		var next int64
		for pages := 0; next < off; pages++ {
			if pages > 2*batches {
				t.Fatalf("no progress: %d pages, at offset %d of %d", pages, next, off)
			}
			br, err := h.svc.ReadBatches(ctx, "/h", next, 16<<20)
			if err != nil {
				t.Fatalf("page at %d: %v", next, err)
			}
			if len(br.Batches) == 0 || len(br.Batches) > stream.ObjectPageBytes {
				t.Fatalf("page at %d: %d bytes", next, len(br.Batches))
			}
			if err := record.SplitBatches(br.Batches, func(b []byte, _ record.BatchHeader) error {
				recs, err := record.DecodeRecords(b, nil)
				for _, r := range recs {
					if r.Offset < next {
						continue
					}
					if r.Offset != next || !bytes.Equal(r.Value, value(r.Offset)) {
						return fmt.Errorf("record at %d (want offset %d): %.20q", r.Offset, next, r.Value)
					}
					next++
				}
				return err
			}); err != nil {
				t.Fatalf("page: %v", err)
			}
		}
		if next != off {
			t.Fatalf("read %d records, appended %d", next, off)
		}
	})
}

func countBatches(t *testing.T, b []byte) int {
	t.Helper()
	n := 0
	if err := record.SplitBatches(b, func([]byte, record.BatchHeader) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}
