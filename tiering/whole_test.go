package tiering

import (
	"bytes"
	"errors"
	"testing"

	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
	"github.com/PicoMQ/picomq/tiering/segment"
)

// TestWholeObjectReadsLikeTheCache: every stream range read from an object
// read whole equals what Tier.ReadBatches returns through the cache, the
// read costs no cache request, and a damaged byte is a segment.ErrCorrupt.
func TestWholeObjectReadsLikeTheCache(t *testing.T) {
	store := objstoretest.FileStore(t)
	tier, err := NewTier(store, TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	refs, size, err := tier.Upload(t.Context(), L1Key(1, 0), manyStreams(50))
	if err != nil {
		t.Fatal(err)
	}
	for _, known := range []int64{size, 0} { // size from the manifest, or asked
		before := tier.CacheStats().Requests
		o, err := tier.ReadWholeObject(t.Context(), refs[0].Key, known)
		if err != nil {
			t.Fatal(err)
		}
		got := make([][]byte, len(refs))
		for i := range refs {
			r := &refs[i]
			if got[i], err = o.ReadBatches(t.Context(), r, r.First, int(r.Length)); err != nil {
				t.Fatalf("stream %d: %v", r.StreamID, err)
			}
		}
		if n := tier.CacheStats().Requests - before; n != 0 {
			t.Fatalf("reading an object whole made %d cache requests", n)
		}
		for i := range refs {
			r := &refs[i]
			want, err := tier.ReadBatches(t.Context(), r, r.First, int(r.Length))
			if err != nil || !bytes.Equal(got[i], want) {
				t.Fatalf("stream %d: %d bytes whole, %d through the cache (%v)", r.StreamID, len(got[i]), len(want), err)
			}
		}
		tier.cache.Forget(refs[0].Key)
	}
	if _, err := tier.ReadWholeObject(t.Context(), "no/such/object", 0); !errors.Is(err, ErrObjectMissing) {
		t.Errorf("missing object: %v, want ErrObjectMissing", err)
	}
}

// TestWholeObjectVerifiesBatches: a flipped byte inside a stream's range
// fails that range's read with segment.ErrCorrupt.
func TestWholeObjectVerifiesBatches(t *testing.T) {
	tier, err := NewTier(objstoretest.FileStore(t), TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	refs, _, err := tier.Upload(t.Context(), L1Key(1, 0), manyStreams(5))
	if err != nil {
		t.Fatal(err)
	}
	o, err := tier.ReadWholeObject(t.Context(), refs[0].Key, refs[0].ObjectSize)
	if err != nil {
		t.Fatal(err)
	}
	r := &refs[2]
	o.data[r.Offset+r.Length/2] ^= 0x40
	if _, err := o.ReadBatches(t.Context(), r, r.First, int(r.Length)); !errors.Is(err, segment.ErrCorrupt) {
		t.Fatalf("damaged range: %v, want ErrCorrupt", err)
	}
	if _, err := o.ReadBatches(t.Context(), &refs[0], refs[0].First, int(refs[0].Length)); err != nil {
		t.Fatalf("undamaged range: %v", err)
	}
}
