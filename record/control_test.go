package record

import "testing"

func TestControlBatchRoundTrip(t *testing.T) {
	for _, m := range []Marker{MarkerAbort, MarkerCommit} {
		b := AppendControlBatch(nil, 42, 1700000000000, 7, 3, 1, m)
		h, err := Validate(b)
		if err != nil {
			t.Fatal(err)
		}
		if !h.Control() || !h.Transactional() || h.ProducerID != 7 || h.ProducerEpoch != 3 || h.BaseOffset != 42 || h.BaseSequence != -1 {
			t.Fatalf("header %+v", h)
		}
		got, err := ControlMarker(b)
		if err != nil || got != m {
			t.Fatalf("marker %v %v, want %v", got, err, m)
		}
	}
}

// FuzzControlMarker: any bytes give a marker or an error, never a panic,
// and a marker read back from AppendControlBatch is the one written.
func FuzzControlMarker(f *testing.F) {
	f.Add(AppendControlBatch(nil, 0, 1, 1, 0, 0, MarkerCommit))
	f.Add(AppendControlBatch(nil, 9, 1, 2, 5, 3, MarkerAbort))
	f.Add([]byte{0, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := Validate(b); err != nil {
			return
		}
		_, _ = ControlMarker(b)
	})
}
