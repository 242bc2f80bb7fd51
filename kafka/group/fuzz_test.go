package group

import (
	"bytes"
	"testing"
)

// FuzzOffsetRecord: the decoders of the offsets stream's records never
// panic, and whatever they accept encodes back to the same bytes.
func FuzzOffsetRecord(f *testing.F) {
	meta := "m"
	f.Add(encodeKey(tp{"topic", 3}), encodeCommit(committed{offset: 42, epoch: 7, at: 1, metadata: &meta}))
	f.Add(encodeKey(tp{"", 0}), encodeCommit(committed{offset: -1, epoch: -1}))
	f.Add(encodeKey(tp{"t", -1}), []byte{kindDelete})
	f.Add([]byte{0xff}, []byte{0, 1, 2})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		if p, err := decodeKey(key); err == nil && !bytes.Equal(encodeKey(p), key) {
			t.Fatalf("key %x decodes to %+v, which encodes to %x", key, p, encodeKey(p))
		}
		c, ok, err := decodeValue(value)
		if err != nil {
			return
		}
		want := []byte{kindDelete}
		if ok {
			want = encodeCommit(c)
		}
		if !bytes.Equal(want, value) {
			t.Fatalf("value %x decodes to %+v, which encodes to %x", value, c, want)
		}
	})
}

// FuzzGroupID: stream names of group ids decode back to the id.
func FuzzGroupID(f *testing.F) {
	for _, s := range []string{"g", ".", "a b/c~d", "\x00\xff", "~41"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		name, err := streamName(id)
		if err != nil {
			return
		}
		if back, ok := groupID(name); !ok || back != id {
			t.Fatalf("%q → %q → %q %v", id, name, back, ok)
		}
		groupID(groupsRoot + id) // arbitrary input: must not panic
	})
}
