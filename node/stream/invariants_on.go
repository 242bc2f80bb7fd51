//go:build picomq_invariants

package stream

import "fmt"

// checkInvariantsLocked panics when st breaks a rule the rest of the
// package relies on. Built only with the picomq_invariants tag, which
// `make test` sets for the unit tests: a production node does not pay
// for the walk over the chunks on every append. st.mu must be held.
func (st *streamState) checkInvariantsLocked() {
	if err := st.invariantError(); err != nil {
		panic(fmt.Sprintf("stream %q (id %d): invariant broken: %v", st.info.Name, st.info.ID, err))
	}
}
