package tiering

import (
	"bytes"
	"testing"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering/segment/segmenttest"
)

// TestReadBatchPiecesReleaseRecycles: pages of stored batches read with
// ReadBatchPieces through a cache far smaller than the object come with
// a release; released pages' GET buffers are recycled into later GETs,
// while the page a reader still holds stays the batches written however
// much the cache turns over. A read path that lent the cache's memory
// without a reference (SlicePieces) recycles nothing.
func TestReadBatchPiecesReleaseRecycles(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			batches := segmenttest.Stream(0, 800, 64, 1000, 1) // 800 batches of ~64 KiB: ~50 MiB
			whole := bytes.Join(batches, nil)
			tier, err := NewTier(newStore(t), TierOptions{CacheBytes: 1 << 20, ReadAheadBytes: 8 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer tier.Close()
			refs, _, err := tier.Upload(t.Context(), L1Key(7, 0), []StreamBatches{{Stream: 7, Batches: batches}})
			if err != nil {
				t.Fatal(err)
			}
			ref := refs[0]
			held, holdRelease, err := tier.ReadBatchPieces(t.Context(), &ref, ref.First, 4<<20)
			if err != nil {
				t.Fatal(err)
			}
			if holdRelease == nil {
				t.Fatal("ReadBatchPieces through the block cache returned no release")
			}
			heldBytes := bytes.Join(held, nil)
			var got []byte
			for off := ref.First; off < ref.Next; {
				pieces, release, err := tier.ReadBatchPieces(t.Context(), &ref, off, 4<<20)
				if err != nil {
					t.Fatal(err)
				}
				if err := record.WalkPieces(pieces, func(_ [][]byte, h record.BatchHeader, _ int) error {
					off = h.LastOffset() + 1
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				got = append(got, bytes.Join(pieces, nil)...)
				release()
			}
			if !bytes.Equal(got, whole) {
				t.Fatalf("pages hold %d bytes, not the %d written", len(got), len(whole))
			}
			if !bytes.Equal(bytes.Join(held, nil), heldBytes) || !bytes.HasPrefix(whole, heldBytes) {
				t.Fatal("a page held unreleased changed while the cache turned over")
			}
			holdRelease()
			s := tier.CacheStats()
			if s.RecycledBytes == 0 || s.ReusedBytes == 0 {
				t.Errorf("recycled %d, reused %d bytes: released pages' buffers were not recycled", s.RecycledBytes, s.ReusedBytes)
			}
			if s.EscapedRuns != 0 {
				t.Errorf("%d runs escaped on the leased path", s.EscapedRuns)
			}
		})
	}
}
