package tiering

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
	"github.com/PicoMQ/picomq/tiering/segment/segmenttest"
)

// getCounter decorates a real store: it counts reads.
type getCounter struct {
	objstore.Store
	totalReads atomic.Int64
}

func (s *getCounter) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	s.totalReads.Add(1)
	return s.Store.ReadAt(ctx, key, p, off)
}

// TestPagesResumeWithoutFooter: a consumer paging through a large range
// (deeper than smallRange, where a read used to open the object's footer
// to find its offset) resumes each page where the previous one stopped,
// also inside a batch (a page cut by a record limit), so it never reads
// the footer, and gets every batch exactly once, in order.
func TestPagesResumeWithoutFooter(t *testing.T) {
	store := &getCounter{Store: objstoretest.FileStore(t)}
	batches := segmenttest.Stream(0, 512, 16, 1000, 1) // ~8 MiB, 16 records per batch
	tier, err := NewTier(store, TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	refs, _, err := tier.Upload(t.Context(), L1Key(1, 0), []StreamBatches{{Stream: 1, Batches: batches}})
	if err != nil {
		t.Fatal(err)
	}
	ref := refs[0]
	if ref.Length <= smallRange {
		t.Fatalf("range of %d bytes is not deeper than smallRange", ref.Length)
	}

	var got [][]byte
	from, page := ref.First, 0
	for from < ref.Next {
		data, err := tier.ReadBatches(t.Context(), &ref, from, 200<<10)
		if err != nil {
			t.Fatalf("page %d at offset %d: %v", page, from, err)
		}
		for p := 0; p < len(data); {
			h, err := record.ParseHeader(data[p:])
			if err != nil {
				t.Fatal(err)
			}
			if h.LastOffset() >= from { // a page resumed inside a batch repeats it
				got = append(got, data[p:p+h.Size()])
				from = h.LastOffset() + 1
			}
			p += h.Size()
		}
		if page%3 == 1 && from < ref.Next {
			// The page stopped at a record limit, 5 records into its last
			// batch: the next read asks for the offset inside it.
			from -= 11
			got = got[:len(got)-1]
		}
		page++
	}
	if !bytes.Equal(bytes.Join(got, nil), bytes.Join(batches, nil)) {
		t.Fatalf("paged read differs from what was written (%d batches of %d)", len(got), len(batches))
	}
	tier.mu.Lock()
	opened := len(tier.readers)
	tier.mu.Unlock()
	if opened != 0 {
		t.Errorf("%d pages opened %d footers; a consumer paging on should resume where it stopped", page, opened)
	}
	t.Logf("%d pages, %d GETs", page, store.totalReads.Load())
}
