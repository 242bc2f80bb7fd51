//go:build !picomq_broken_ack

package stream

// ackBeforeCommit is false in every real build. Only the history checker's
// own test compiles picomq with the build tag picomq_broken_ack, to prove
// the checker catches an `object` append acknowledged before its flush is
// committed (e2e TestSoakCatchesBrokenBuild).
const ackBeforeCommit = false
