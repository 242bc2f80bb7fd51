package segment

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering/extent"
)

// TestSampleObject opens the checked-in object with today's reader and
// compares its footer entries with the numbers below and every record
// with what was written.
func TestSampleObject(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "formats", "object.seg"))
	if err != nil {
		t.Fatalf("%v (written once by: go test -tags picomq_samples -run TestWriteSamples ./tiering/segment/)", err)
	}
	ctx := context.Background()
	r, err := Open(ctx, memObject(data), "object.seg", int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != 343 {
		t.Errorf("object of %d bytes, want 343 (255 of data, 56 of footer, 32 of trailer)", r.Size())
	}
	// Lengths are the sum of the ranges' RecordBatch v2 sizes;
	// the CRCs are CRC-32C of each range, as the manifests record them.
	want := []extent.Extent{
		{StreamID: 3, First: 100, Next: 103, Offset: 0, Length: 161, CRC: 0x58adc7c7, Batches: 2,
			FirstTimestamp: 1764621000000, MaxTimestamp: 1764621000500},
		{StreamID: 8, First: 0, Next: 3, Offset: 161, Length: 94, CRC: 0xd1a29a7a, Batches: 1,
			FirstTimestamp: 1764621000999, MaxTimestamp: 1764621000999},
	}
	got := r.Streams()
	if len(got) != len(want) {
		t.Fatalf("%d streams %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("stream entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, s := range want {
		b, err := r.ReadBatches(ctx, s.StreamID, s.First, 0)
		if err != nil {
			t.Fatalf("stream %d: %v", s.StreamID, err)
		}
		if b.FirstOffset != s.First || b.NextOffset != s.Next || b.Count != s.Batches {
			t.Errorf("stream %d: read %d batches [%d, %d), want %d [%d, %d)", s.StreamID,
				b.Count, b.FirstOffset, b.NextOffset, s.Batches, s.First, s.Next)
		}
		off := s.First
		if err := record.SplitBatches(b.Data, func(batch []byte, _ record.BatchHeader) error {
			recs, err := record.DecodeRecords(batch, nil)
			for _, rec := range recs {
				if w := fmt.Sprintf("s%d-%d", s.StreamID, off); rec.Offset != off || string(rec.Value) != w {
					t.Errorf("record at %d = %q, want %q at %d", rec.Offset, rec.Value, w, off)
				}
				off++
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if off != s.Next {
			t.Errorf("stream %d: records up to %d, want %d", s.StreamID, off, s.Next)
		}
	}
}
