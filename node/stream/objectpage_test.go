package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
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
		value := appendNumbered(t, h.svc, "/h", batches, perBatch, size)
		const off = batches * perBatch // the stream's end
		h.restartWithoutWAL()          // every byte from now on comes from the object store

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

// TestReadBatchPiecesCopiesNothing: the Kafka fetch's read of history
// (ReadBatchPieces) hands on the block cache's memory: reading 10 MiB of
// history again from a warm cache allocates far less than the bytes read,
// while ReadBatches, which joins a page's pieces into one buffer, allocates
// about them (the control: it shows the measure sees a copy). The pieces
// joined are ReadBatches' page, byte for byte. On MinIO and a file store.
func TestReadBatchPiecesCopiesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) objstore.Store
	}{
		{"file", objstoretest.FileStore},
		{"s3", func(t *testing.T) objstore.Store { return objstoretest.S3FromEnv(t)(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := tc.store(t)
			h := newTierHarness(t, stream.DurabilityObject)
			h.close()
			real, err := tiering.NewTier(store, tiering.TierOptions{CacheBytes: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { real.Close() })
			h.real = real
			h.open()
			ctx := context.Background()
			if _, _, err := h.svc.Create(ctx, "/p", stream.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			const batches, perBatch, size = 40, 32, 8 << 10 // 10 MiB
			var off int64
			for range batches {
				recs := make([]record.Record, perBatch)
				for i := range recs {
					recs[i].Value = bytes.Repeat([]byte{byte(off)}, size)
					off++
				}
				if _, err := h.svc.AppendBatch(ctx, "/p", stream.AppendRequest{Records: recs}); err != nil {
					t.Fatal(err)
				}
			}
			h.restartWithoutWAL()
			// readAll reads the history with read and returns the bytes read
			// and allocated meanwhile.
			readAll := func(read func(int64) (int64, int)) (got, alloc uint64) {
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				for next, pages := int64(0), 0; next < off; pages++ {
					if pages > 2*batches {
						t.Fatalf("no progress at offset %d", next)
					}
					n, b := read(next)
					next = n
					got += uint64(b)
				}
				runtime.ReadMemStats(&m1)
				return got, m1.TotalAlloc - m0.TotalAlloc
			}
			pieces := func(from int64) (int64, int) {
				br, err := h.svc.ReadBatchPieces(ctx, "/p", from, 16<<20)
				if err != nil {
					t.Fatalf("pieces at %d: %v", from, err)
				}
				joined, err := h.svc.ReadBatches(ctx, "/p", from, 16<<20)
				if err != nil || !bytes.Equal(bytes.Join(br.Pieces, nil), joined.Batches) {
					t.Fatalf("at %d: %d pieces differ from ReadBatches' page of %d bytes (%v)", from, len(br.Pieces), len(joined.Batches), err)
				}
				return lastOffset(t, br.Pieces) + 1, 0
			}
			readAll(pieces) // warm the cache, and the pieces are the page
			got, alloc := readAll(func(from int64) (int64, int) {
				br, err := h.svc.ReadBatchPieces(ctx, "/p", from, 16<<20)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, p := range br.Pieces {
					n += len(p)
				}
				return lastOffset(t, br.Pieces) + 1, n
			})
			gotJ, allocJ := readAll(func(from int64) (int64, int) {
				br, err := h.svc.ReadBatches(ctx, "/p", from, 16<<20)
				if err != nil {
					t.Fatal(err)
				}
				return lastOffset(t, [][]byte{br.Batches}) + 1, len(br.Batches)
			})
			t.Logf("warm history of %d bytes: pieces allocated %d bytes, joined pages %d", got, alloc, allocJ)
			if got < 10<<20 || gotJ != got {
				t.Fatalf("read %d bytes as pieces, %d joined, want the 10 MiB appended", got, gotJ)
			}
			if alloc > got/8 || allocJ < got/2 {
				t.Fatalf("reading %d bytes of warm history allocated %d bytes as pieces (want under %d: no copy) and %d joined (want over %d)", got, alloc, got/8, allocJ, got/2)
			}
		})
	}
}

// lastOffset is the last offset of the batches in pieces.
func lastOffset(t *testing.T, pieces [][]byte) int64 {
	t.Helper()
	last := int64(-1)
	for _, p := range pieces {
		if err := record.SplitBatches(p, func(_ []byte, h record.BatchHeader) error { last = h.LastOffset(); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if last < 0 {
		t.Fatal("empty page")
	}
	return last
}

// appendNumbered appends batches batches of perBatch records of size bytes
// each to name and returns the value it gave the record at each offset
// (size bytes of the offset's low byte, starting with the offset in
// decimal), for checking what a read returns.
func appendNumbered(t *testing.T, svc *stream.Service, name string, batches, perBatch, size int) func(int64) []byte {
	t.Helper()
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
		if _, err := svc.AppendBatch(context.Background(), name, stream.AppendRequest{Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	return value
}
