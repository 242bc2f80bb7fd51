package stream

import "testing"

// TestInvariantErrorNamesEachRule: each broken rule is reported, and a
// well-formed state passes.
func TestInvariantErrorNamesEachRule(t *testing.T) {
	good := func() *streamState {
		return &streamState{next: 30, hwm: 30, uploaded: 10, closed: true, closedVisible: true,
			chunks: []chunk{{base: 0, next: 10}, {base: 10, next: 20}, {base: 20, next: 30}}}
	}
	if err := good().invariantError(); err != nil {
		t.Fatalf("well-formed state: %v", err)
	}
	for name, breakIt := range map[string]func(*streamState){
		"inverted chunk":     func(st *streamState) { st.chunks[1] = chunk{base: 21, next: 20} },
		"hole between":       func(st *streamState) { st.chunks[2].base = 21 },
		"chunk beyond next":  func(st *streamState) { st.next, st.hwm = 25, 25 },
		"hwm beyond next":    func(st *streamState) { st.hwm = 31 },
		"uploaded past next": func(st *streamState) { st.uploaded = 31 },
		"visible close":      func(st *streamState) { st.closed = false },
		"negative unflushed": func(st *streamState) { st.unflushed = -1 },
	} {
		st := good()
		breakIt(st)
		if err := st.invariantError(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
