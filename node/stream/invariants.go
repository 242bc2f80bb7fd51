package stream

import "fmt"

// invariantError is the first rule of streamState that st breaks, or nil.
// The rules (the comments on streamState's fields, as code):
//
//   - chunks are in offset order and contiguous: each covers [base, next)
//     with base <= next, and chunks[i].next == chunks[i+1].base;
//   - no chunk reaches past next, the next offset to assign;
//   - readers stop at hwm, and what is committed in object storage
//     (uploaded) was assigned: hwm <= next and uploaded <= next;
//   - a close is visible to readers only once the stream is closed;
//   - unflushed, the stream's WAL bytes not yet in a flush, is never
//     negative.
//
// checkInvariantsLocked calls it where these fields change, when built
// with the picomq_invariants tag. st.mu must be held.
func (st *streamState) invariantError() error {
	for i, c := range st.chunks {
		if c.base > c.next {
			return fmt.Errorf("chunk %d covers [%d, %d)", i, c.base, c.next)
		}
		if i > 0 && st.chunks[i-1].next != c.base {
			return fmt.Errorf("chunk %d starts at %d, chunk %d ends at %d", i, c.base, i-1, st.chunks[i-1].next)
		}
	}
	if n := len(st.chunks); n > 0 && st.chunks[n-1].next > st.next {
		return fmt.Errorf("last chunk ends at %d, beyond next %d", st.chunks[n-1].next, st.next)
	}
	if st.hwm > st.next {
		return fmt.Errorf("hwm %d beyond next %d", st.hwm, st.next)
	}
	if st.uploaded > st.next {
		return fmt.Errorf("uploaded %d beyond next %d", st.uploaded, st.next)
	}
	if st.closedVisible && !st.closed {
		return fmt.Errorf("close visible but the stream is not closed")
	}
	if st.unflushed < 0 {
		return fmt.Errorf("unflushed %d < 0", st.unflushed)
	}
	return nil
}
