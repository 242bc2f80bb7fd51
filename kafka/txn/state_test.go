package txn

import (
	"reflect"
	"testing"
)

// FuzzDecodeMeta: any bytes decode to a valid state or an error, never a
// panic, and a decoded state encodes back to one that decodes equal.
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []Meta{
		{ID: "a", ProducerID: 7, Epoch: 2, TimeoutMs: 60000, State: Ongoing, Partitions: []Partition{{"t", 0}, {"t", 3}}, Groups: []string{"g"}, StartMs: 1, UpdateMs: 2},
		{ID: "b", ProducerID: 1, State: CompleteCommit},
		{ID: "c", ProducerID: 9, Epoch: 1, TimeoutMs: 1000, State: Ongoing, Partitions: []Partition{{"t", 1}}, Reserved: []Partition{{"t", 0}, {"t", 1}, {"t", 2}}, StartMs: 3, UpdateMs: 3},
	} {
		f.Add(m.encode())
	}
	f.Add([]byte(`{"id":"","state":9}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		// What a coordinator loading it makes of it: every reserved
		// partition added, none left reserved.
		if l := m.loaded(); len(l.Reserved) != 0 || len(l.Partitions) < len(m.Partitions) {
			t.Fatalf("loaded %+v from %+v", l, m)
		}
		back, err := decodeMeta(m.encode())
		// Compared as encoded: an empty list and none are the same state.
		if err != nil || !reflect.DeepEqual(back.encode(), m.encode()) {
			t.Fatalf("round trip of %q: %+v %v, want %+v", b, back, err, m)
		}
	})
}
