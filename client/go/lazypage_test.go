package picomq

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/recordbatch"
)

// TestRecordsLazyPageBrokenBatch: a Records iterator decodes a page of
// stored batches as it hands the records out, checking each batch's
// CRC-32C before any of its records. A page whose second batch is
// corrupted gives the first batch's records, each with its position,
// then the *recordbatch.Error, and Position is where the broken batch
// starts (a whole-page decode gave no record and left Position at 0).
func TestRecordsLazyPageBrokenBatch(t *testing.T) {
	const n, size = 3, 10
	first := recordBatchPage(n, size)
	second := recordBatchPage(n, size)
	binary.BigEndian.PutUint64(second, n) // its base offset (outside the CRC)
	second[len(second)-1] ^= 1            // a value byte: only the CRC tells
	body := append(append([]byte(nil), first...), second...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", wire.MediaRecordBatches)
		w.Header().Set(wire.HeaderNextOffset, strconv.Itoa(2*n))
		w.Header().Set(wire.HeaderUpToDate, "true")
		w.Header().Set(wire.HeaderRecordCount, strconv.Itoa(2*n))
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c, err := NewPico(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := c.Stream("/t").Records(c.Beginning(), RecordsOptions{})
	var got []string
	for it.Next(ctx) {
		if r := it.Record(); len(r.Body) != size {
			t.Fatalf("record %q: %d-byte body", r.Position, len(r.Body))
		}
		got = append(got, it.Record().Position)
	}
	var e *recordbatch.Error
	if len(got) != n || got[0] != "0" || got[n-1] != strconv.Itoa(n-1) || !errors.As(it.Err(), &e) {
		t.Fatalf("records %q, then %v; want positions 0..%d, then a *recordbatch.Error", got, it.Err(), n-1)
	}
	if p := it.Position(); p != strconv.Itoa(n) {
		t.Errorf("Position after the broken batch: %q, want %d", p, n)
	}
	if it.Next(ctx) {
		t.Errorf("a record after the error")
	}
}

// TestLazyPagePositions: the positions a lazy page hands out stay right
// after later records are decoded (each is a string over bytes never
// written again), across digit chunks.
func TestLazyPagePositions(t *testing.T) {
	const n = 5000
	page := recordBatchPage(n, 1)
	p, err := newLazyPage("/t", page, 0, 1, 1) // a hint too small: many chunks
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for r, ok := p.next(); ok; r, ok = p.next() {
		recs = append(recs, r)
	}
	if err := p.err(); err != nil || len(recs) != n {
		t.Fatalf("%d records: %v", len(recs), err)
	}
	for i, r := range recs {
		if r.Position != strconv.Itoa(i) {
			t.Fatalf("record %d: position %q", i, r.Position)
		}
	}
}

// BenchmarkPageDecode: handing out the records of a 1 MiB page of 1 KiB
// records, decoded into a []Record first (Stream.Read's page) or as they
// are handed out (a Records iterator's lazyPage). Both check every
// batch's CRC.
func BenchmarkPageDecode(b *testing.B) {
	const n, size = 1024, 1024
	page := recordBatchPage(n, size)
	b.Run("slice", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		for b.Loop() {
			recs, _, err := decodeBatchesPage(page, 0, n, 4)
			if err != nil || len(recs) != n {
				b.Fatalf("%d records: %v", len(recs), err)
			}
			for i := range recs {
				_ = recs[i].Body
			}
		}
	})
	b.Run("lazy", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		for b.Loop() {
			p, err := newLazyPage("/t", page, 0, n, 4)
			if err != nil {
				b.Fatal(err)
			}
			got := 0
			for _, ok := p.next(); ok; _, ok = p.next() {
				got++
			}
			if got != n {
				b.Fatalf("%d records", got)
			}
		}
	})
}
