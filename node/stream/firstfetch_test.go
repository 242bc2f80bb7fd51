package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
)

// heldStore is a real store whose reads of bytes at or past holdFrom of
// any object wait, once armed, until released: the GETs after a cold
// read's first one have not arrived yet, deterministically.
type heldStore struct {
	objstore.Store
	holdFrom int64
	armed    atomic.Bool
	held     atomic.Int64 // reads that waited
	release  chan struct{}
	once     sync.Once
}

func (s *heldStore) open() { s.once.Do(func() { close(s.release) }) }

func (s *heldStore) wait(ctx context.Context, off int64) error {
	if !s.armed.Load() || off < s.holdFrom {
		return nil
	}
	s.held.Add(1)
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *heldStore) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	if err := s.wait(ctx, off); err != nil {
		return 0, err
	}
	return s.Store.ReadAt(ctx, key, p, off)
}

func (s *heldStore) ReadRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := s.wait(ctx, off); err != nil {
		return nil, err
	}
	return s.Store.(objstore.RangeStreamer).ReadRange(ctx, key, off, length)
}

// TestFirstPageAfterRestartTakesOneGET: the first stored-batch page of
// a restarted node (the Kafka consumer's first fetch, and a Pico page of
// stored batches) is answered with the batches of the cache's first GET,
// without waiting for the GET after it: 1 MiB batches, four of which
// overrun the 4 MiB page, so the fourth (which lies in the second GET)
// belongs to the next page. The read used to ask the tier again for it and
// wait for the second GET only to drop the batch (it fails without the
// change: the read waits for the held GET until its deadline). Once
// released, paging on returns every record once, in order. On MinIO and a
// file store.
func TestFirstPageAfterRestartTakesOneGET(t *testing.T) {
	stores := []struct {
		name  string
		store func(t *testing.T) objstore.Store
	}{
		{"file", objstoretest.FileStore},
		{"s3", func(t *testing.T) objstore.Store { return objstoretest.S3FromEnv(t)(t) }},
	}
	// A page reader: the batches of the page at offset from, its records
	// decoded.
	readers := []struct {
		name string
		page func(ctx context.Context, svc *stream.Service, from int64) ([]record.Record, error)
	}{
		{"kafka-fetch", func(ctx context.Context, svc *stream.Service, from int64) ([]record.Record, error) {
			br, err := svc.ReadBatchPieces(ctx, "/f", from, 16<<20)
			if err != nil {
				return nil, err
			}
			return collect(br.Pieces)
		}},
		{"pico-batches", func(ctx context.Context, svc *stream.Service, from int64) ([]record.Record, error) {
			res, err := svc.Read(ctx, "/f", stream.ReadOptions{Offset: from, Batches: true, MaxBytes: 4 << 20, MaxRecords: 1 << 20})
			if err != nil {
				return nil, err
			}
			if len(res.Records) > 0 {
				return nil, fmt.Errorf("page at %d: %d records instead of stored batches", from, len(res.Records))
			}
			return collect(res.Batches)
		}},
	}
	for _, sc := range stores {
		for _, rc := range readers {
			t.Run(sc.name+"/"+rc.name, func(t *testing.T) {
				firstPageTakesOneGET(t, sc.store(t), rc.page)
			})
		}
	}
}

func firstPageTakesOneGET(t *testing.T, inner objstore.Store, page func(context.Context, *stream.Service, int64) ([]record.Record, error)) {
	store := &heldStore{Store: inner, holdFrom: 4 << 20, release: make(chan struct{})}
	t.Cleanup(store.open)
	h := newTierHarness(t, stream.DurabilityLocal)
	h.close()
	real, err := tiering.NewTier(store, tiering.TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	// No flush until close: the final flush puts every batch in one
	// object (timing-free).
	h.real, h.seal, h.sealB = real, time.Hour, 1<<30
	h.open()
	ctx := context.Background()
	mustCreate(t, h.svc, "/f", stream.CreateOptions{})
	const batches, perBatch, size = 6, 32, 32 << 10 // 1 MiB batches
	value := appendNumbered(t, h.svc, "/f", batches, perBatch, size)
	const off = batches * perBatch // the stream's end
	h.restartWithoutWAL()          // every byte from now on comes from the object store
	store.armed.Store(true)

	// Generous: one local GET of 4 MiB, on a loaded machine.
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	recs, err := page(fctx, h.svc, 0)
	cancel()
	if err != nil {
		t.Fatalf("first page with the second GET held (%d reads held): %v", store.held.Load(), err)
	}
	if len(recs) != 3*perBatch {
		t.Fatalf("first page: %d records, want the 3 batches (%d records) of the first GET", len(recs), 3*perBatch)
	}

	store.open()
	var next int64
	for pages := 0; next < off; pages++ {
		if pages > 2*batches {
			t.Fatalf("no progress: %d pages, at offset %d of %d", pages, next, off)
		}
		recs, err := page(ctx, h.svc, next)
		if err != nil {
			t.Fatalf("page at %d: %v", next, err)
		}
		for _, r := range recs {
			if r.Offset < next {
				continue
			}
			if r.Offset != next || !bytes.Equal(r.Value, value(r.Offset)) {
				t.Fatalf("record at %d (want offset %d): %.20q", r.Offset, next, r.Value)
			}
			next++
		}
	}
	if next != off {
		t.Fatalf("read %d records, appended %d", next, off)
	}
}

// collect decodes the records of a page of stored batches in pieces.
func collect(pieces [][]byte) ([]record.Record, error) {
	var out []record.Record
	err := record.WalkPieces(pieces, func(b [][]byte, _ record.BatchHeader, _ int) error {
		recs, err := record.DecodeRecords(bytes.Join(b, nil), nil)
		out = append(out, recs...)
		return err
	})
	return out, err
}
