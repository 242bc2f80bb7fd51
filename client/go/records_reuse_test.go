package picomq_test

import (
	"context"
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// appendCountingBatches appends n records of size bytes to s, record i's body
// starting with i (big-endian uint64), in batches of 1,024.
func appendCountingBatches(t testing.TB, ctx context.Context, s picomq.Stream, n, size int) {
	t.Helper()
	for i := 0; i < n; i += 1024 {
		batch := make([]picomq.AppendRecord, min(1024, n-i))
		for j := range batch {
			batch[j].Body = binary.BigEndian.AppendUint64(make([]byte, 0, size), uint64(i+j))[:size:size]
		}
		if _, err := s.Append(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
}

// readCounting reads s from the start with opts, checks that record i
// holds i while it is the current one, and returns the bytes this
// process allocated over the read.
func readCounting(t testing.TB, ctx context.Context, c picomq.Client, s picomq.Stream, n, size int, opts picomq.RecordsOptions) uint64 {
	t.Helper()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	it := s.Records(c.Beginning(), opts)
	i := 0
	for it.Next(ctx) {
		if b := it.Record().Body; len(b) != size || binary.BigEndian.Uint64(b) != uint64(i) {
			t.Fatalf("record %d: %d bytes holding %d", i, len(b), binary.BigEndian.Uint64(b))
		}
		i++
	}
	if err := it.Err(); err != nil || i != n {
		t.Fatalf("read %d of %d records: %v", i, n, err)
	}
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// TestRecordsReuseBuffers: a catch-up with RecordsOptions.ReuseBuffers
// reads its 16 pages into a few reused page buffers, so the client
// allocates under half the stream's bytes over the read; without it every
// page is fresh memory, more than the stream's bytes (measured in the same
// test, so the bound is known to separate the two). The client keeps the
// free buffers for its next such iterator, whose catch-up then allocates
// no page buffer at all. Every record is right while it is the current
// one, pages read ahead included.
func TestRecordsReuseBuffers(t *testing.T) {
	ctx := ctxTimeout(t, 3*time.Minute)
	c := newClient(t, picomq.ProtocolPico, picoURL)
	s := c.Stream(createStream(t, ctx, c, "application/octet-stream"))
	const n, size = 64 << 10, 1024 // 64 MiB: 16 pages of 4 MiB
	appendCountingBatches(t, ctx, s, n, size)
	fresh := readCounting(t, ctx, c, s, n, size, picomq.RecordsOptions{})
	reused := readCounting(t, ctx, c, s, n, size, picomq.RecordsOptions{ReuseBuffers: true})
	// The smaller of two later catch-ups: a page larger than every free
	// buffer (cut elsewhere, say once the node has flushed the stream
	// meanwhile) makes the client allocate one bigger buffer once (6.8
	// MiB in one CI run), while a []Record per page, or page buffers not
	// reused, shows in both.
	again := min(readCounting(t, ctx, c, s, n, size, picomq.RecordsOptions{ReuseBuffers: true}),
		readCounting(t, ctx, c, s, n, size, picomq.RecordsOptions{ReuseBuffers: true}))
	t.Logf("allocated over a %d MiB catch-up: %.1f MiB fresh pages, %.1f MiB reused, %.1f MiB by the client's next catch-up", n*size>>20, float64(fresh)/(1<<20), float64(reused)/(1<<20), float64(again)/(1<<20))
	if fresh < n*size {
		t.Errorf("fresh pages: %d bytes allocated for %d bytes read; the bound below would not tell", fresh, n*size)
	}
	if reused > n*size/2 {
		t.Errorf("ReuseBuffers: %d bytes allocated for %d bytes read, want at most half", reused, n*size)
	}
	// The client keeps the buffers the first iterator left: the next
	// catch-up allocates no page buffer (one would be 6 MiB).
	if again > n*size/8 {
		t.Errorf("the client's next catch-up with ReuseBuffers: %d bytes allocated, want at most %d", again, n*size/8)
	}
	// Nor a []Record per page: the iterator decodes each record as Next
	// hands it out (lazyPage). With a slice per page it was 7.9 MiB.
	if again > n*size/32 {
		t.Errorf("the client's next catch-up with ReuseBuffers: %d bytes allocated, want at most %d (no []Record per page)", again, n*size/32)
	}
}

// BenchmarkRecordsCatchUp: a 16 MiB catch-up of 1 KiB records through a
// Records iterator, with a fresh buffer per page and with ReuseBuffers;
// B/op is the client's memory per catch-up, ns/op its time (the node's
// included: same machine).
func BenchmarkRecordsCatchUp(b *testing.B) {
	ctx := context.Background()
	c, err := picomq.NewPico(picoURL)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s := c.Stream(benchStream(b))
	const n, size = 16 << 10, 1024
	appendCountingBatches(b, ctx, s, n, size)
	for _, bc := range []struct {
		name string
		opts picomq.RecordsOptions
	}{{"fresh", picomq.RecordsOptions{}}, {"reuse", picomq.RecordsOptions{ReuseBuffers: true}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(n * size)
			b.ReportAllocs()
			for b.Loop() {
				it := s.Records(c.Beginning(), bc.opts)
				got := 0
				for it.Next(ctx) {
					got++
				}
				if err := it.Err(); err != nil || got != n {
					b.Fatalf("%d of %d records: %v", got, n, err)
				}
			}
		})
	}
}
