package tiering

import (
	"bytes"
	"errors"
	"testing"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/segment"
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
			pieces, _, err := tier.ReadBatchPieces(t.Context(), &ref, ref.First, page)
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
			again, _, err := tier.ReadBatchPieces(t.Context(), &ref, ref.First, page)
			if err != nil {
				t.Fatal(err)
			}
			if len(again) != len(pieces) {
				t.Fatalf("second read: %d pieces, first %d", len(again), len(pieces))
			}
			// The first and the last piece lie in the cache's runs (a batch
			// straddling the two runs is in both).
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
			next, _, err := tier.ReadBatchPieces(t.Context(), &ref, last.LastOffset()+1, 1<<20)
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

// readAllPieces reads ref's range in pages of page bytes with
// ReadBatchPieces and returns the bytes, and where (in bytes from the
// range's start) each batch that came in more than one piece begins and
// the length of its first piece.
func readAllPieces(t *testing.T, tier *Tier, ref *ObjectRef, page int) ([]byte, [][2]int, error) {
	t.Helper()
	var got []byte
	var split [][2]int
	for off := ref.First; off < ref.Next; {
		pieces, _, err := tier.ReadBatchPieces(t.Context(), ref, off, page)
		if err != nil {
			return got, split, err
		}
		at := len(got)
		err = record.WalkPieces(pieces, func(b [][]byte, h record.BatchHeader, pos int) error {
			if len(b) > 1 {
				split = append(split, [2]int{at + pos, len(b[0])})
			}
			off = h.LastOffset() + 1
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, bytes.Join(pieces, nil)...)
	}
	return got, split, nil
}

// TestStraddlingBatchesServedInPieces: a cold read of 1 MiB batches in
// 4 MiB pages (the Pico and Kafka page of history) through the block
// cache gets every batch that straddles two GETs as two pieces of the
// GETs' memory: the bytes are the batches written, and the cache copies
// none of them (StraddleCopyBytes, picomq_cache_straddle_copy_bytes_total,
// stays 0; before SlicePieces each such batch was copied whole). A bit
// flipped on either side of such a batch's split is refused (ErrCorrupt)
// and no page holding it is served.
func TestStraddlingBatchesServedInPieces(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			batches := segmenttest.Stream(0, 14, 1, 1100<<10, 1) // ~1.07 MiB batches: ~15 MiB
			all := bytes.Join(batches, nil)
			store := newStore(t)
			tier, err := NewTier(store, TierOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tier.Close()
			key := L1Key(9, 0)
			refs, _, err := tier.Upload(t.Context(), key, []StreamBatches{{Stream: 9, Batches: batches}})
			if err != nil {
				t.Fatal(err)
			}
			ref := refs[0]
			got, split, err := readAllPieces(t, tier, &ref, 4<<20)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, all) {
				t.Fatalf("read %d bytes, not the %d written", len(got), len(all))
			}
			if n := tier.CacheStats().StraddleCopyBytes; n != 0 {
				t.Fatalf("%d bytes of straddling batches copied; want them served in pieces", n)
			}
			if len(split) == 0 {
				t.Fatal("no batch straddled two GETs: the test reads nothing it is about")
			}
			t.Logf("%d of %d batches came in two pieces", len(split), len(batches))

			obj := make([]byte, ref.ObjectSize)
			if _, err := store.ReadAt(t.Context(), key, obj, 0); err != nil {
				t.Fatal(err)
			}
			s := split[0]
			for _, at := range []int{s[0] + s[1] - 10, s[0] + s[1] + 10} { // before and after the split
				bad := bytes.Clone(obj)
				bad[int(ref.Offset)+at] ^= 0x08
				if err := objstore.Put(t.Context(), store, key, bad, objstore.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				tier.cache.Forget(key) // as a restart would: the cache must fetch the bad bytes
				tier.mu.Lock()
				clear(tier.marks)
				tier.mu.Unlock()
				served, _, err := readAllPieces(t, tier, &ref, 4<<20)
				if !errors.Is(err, segment.ErrCorrupt) {
					t.Fatalf("flipped byte %d of the range: %v, want ErrCorrupt", at, err)
				}
				if len(served) > s[0] {
					t.Fatalf("flipped byte %d: %d bytes served, past the corrupt batch at %d", at, len(served), s[0])
				}
			}
		})
	}
}
