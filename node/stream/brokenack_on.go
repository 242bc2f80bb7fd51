//go:build picomq_broken_ack

package stream

// ackBeforeCommit deliberately breaks `object` durability: see
// brokenack_off.go. Never built outside that test.
const ackBeforeCommit = true
