//go:build !picomq_invariants

package stream

// checkInvariantsLocked is a no-op without the picomq_invariants tag (see
// invariants_on.go and invariants.go).
func (st *streamState) checkInvariantsLocked() {}
