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
	} {
		f.Add(m.encode())
	}
	f.Add([]byte(`{"id":"","state":9}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		back, err := decodeMeta(m.encode())
		// Compared as encoded: an empty list and none are the same state.
		if err != nil || !reflect.DeepEqual(back.encode(), m.encode()) {
			t.Fatalf("round trip of %q: %+v %v, want %+v", b, back, err, m)
		}
	})
}
