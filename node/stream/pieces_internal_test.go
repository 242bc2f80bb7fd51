package stream

import "testing"

// TestApplyPiecesRetriedTakeover: a replicated stream's takeover that is
// retried can leave two manifests for one range start: the first
// attempt's upload [10,18) (committed after the retry listed the
// manifests) and the retry's longer copy [10,20). A view built from the
// manifests (a history read through a non-owner, a fork's remote source)
// must hold what the owner serves, [0,20), in either commit order,
// instead of refusing the stream as overlapping.
func TestApplyPiecesRetriedTakeover(t *testing.T) {
	obj := func(k string) *ObjectRef { return &ObjectRef{Key: k} }
	for _, tc := range []struct {
		name string
		ps   []piece
	}{
		{"shorter committed first", []piece{
			{ref: obj("a"), first: 0, next: 10, order: 0},
			{ref: obj("b1"), first: 10, next: 18, order: 1},
			{ref: obj("b2"), first: 10, next: 20, order: 2},
		}},
		{"longer committed first", []piece{
			{ref: obj("a"), first: 0, next: 10, order: 0},
			{ref: obj("b2"), first: 10, next: 20, order: 1},
			{ref: obj("b1"), first: 10, next: 18, order: 2},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &streamState{}
			st.info.Name = "/s"
			if err := st.applyPieces(tc.ps); err != nil {
				t.Fatalf("applyPieces: %v", err)
			}
			if st.next != 20 || st.uploaded != 20 {
				t.Fatalf("next %d uploaded %d, want 20", st.next, st.uploaded)
			}
			if len(st.chunks) != 2 || st.chunks[1].base != 10 || st.chunks[1].next != 20 || st.chunks[1].obj.Key != "b2" {
				t.Fatalf("chunks %+v, want [0,10) a and [10,20) b2", st.chunks)
			}
		})
	}
	// Two histories that disagree (a range starting inside an applied
	// chunk) are still refused.
	st := &streamState{}
	st.info.Name = "/s"
	err := st.applyPieces([]piece{{ref: obj("a"), first: 0, next: 10}, {ref: obj("c"), first: 5, next: 15, order: 1}})
	if err == nil {
		t.Fatal("a range starting inside an applied chunk was accepted")
	}
}
