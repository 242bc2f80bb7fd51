package tiering

import (
	"bytes"
	"testing"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering/segment/segmenttest"
)

// TestReadBatchPiecesUncopied: a page of stored batches that spans two of
// the block cache's GETs comes back from ReadBatchPieces as the cache's
// own memory, one piece per GET, with the bytes ReadBatches returns
// joined; ReadBatches copies that page into a fresh buffer each time.
// This is the copy an HTTP page of stored batches no longer pays.
func TestReadBatchPiecesUncopied(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			batches := segmenttest.Stream(0, 160, 64, 1000, 1) // 160 batches of ~64 KiB: ~10 MiB
			tier, err := NewTier(newStore(t), TierOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tier.Close()
			refs, _, err := tier.Upload(t.Context(), L1Key(7, 0), []StreamBatches{{Stream: 7, Batches: batches}})
			if err != nil {
				t.Fatal(err)
			}
			ref := refs[0]
			const page = 6 << 20 // more than one 4 MiB GET of the cache
			pieces, err := tier.ReadBatchPieces(t.Context(), &ref, ref.First, page)
			if err != nil {
				t.Fatal(err)
			}
			if len(pieces) < 2 {
				t.Fatalf("%d pieces for a %d-byte page; want one per cache GET it spans", len(pieces), page)
			}
			joined := bytes.Join(pieces, nil)
			if n := len(joined); n < page-(64<<10) || n > page {
				t.Fatalf("pieces hold %d bytes, want about %d", n, page)
			}
			if !bytes.HasPrefix(bytes.Join(batches, nil), joined) {
				t.Fatal("pieces differ from the batches written")
			}
			data, err := tier.ReadBatches(t.Context(), &ref, ref.First, page)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(data, joined) {
				t.Fatalf("ReadBatches returned %d bytes, the pieces %d, or other bytes", len(data), len(joined))
			}
			again, err := tier.ReadBatchPieces(t.Context(), &ref, ref.First, page)
			if err != nil {
				t.Fatal(err)
			}
			if len(again) != len(pieces) {
				t.Fatalf("second read: %d pieces, first %d", len(again), len(pieces))
			}
			// The first and the last piece lie in the cache's runs (a batch
			// straddling the two runs is still copied by the cache, and is a
			// piece of its own between them).
			for _, i := range []int{0, len(pieces) - 1} {
				if &again[i][0] != &pieces[i][0] {
					t.Fatalf("piece %d of %d of a second read is other memory: the pieces are copies, not the cache's runs", i, len(pieces))
				}
			}
			if &data[0] == &pieces[0][0] {
				t.Fatal("ReadBatches of a page spanning two GETs aliases the first one; expected its joined copy")
			}
			// The next page resumes after the pieces' last batch, from the
			// mark the pieces left (no footer opened).
			var last record.BatchHeader
			for p := 0; p < len(joined); p += last.Size() {
				if last, err = record.ParseHeader(joined[p:]); err != nil {
					t.Fatal(err)
				}
			}
			next, err := tier.ReadBatchPieces(t.Context(), &ref, last.LastOffset()+1, 1<<20)
			if err != nil || len(next) == 0 {
				t.Fatalf("next page: %d pieces, %v", len(next), err)
			}
			if h, err := record.ParseHeader(next[0]); err != nil || h.BaseOffset != last.LastOffset()+1 {
				t.Fatalf("next page starts with batch %d (%v), want %d", h.BaseOffset, err, last.LastOffset()+1)
			}
			tier.mu.Lock()
			opened := len(tier.readers)
			tier.mu.Unlock()
			if opened != 0 {
				t.Errorf("the next page opened the footer; it should resume where the pieces stopped")
			}
		})
	}
}
