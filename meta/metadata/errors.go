package metadata

import "errors"

// Sentinel errors of the registry (package meta). Every error it returns
// that matches one of these wraps it with context (the stream name, the
// IDs involved), so callers test with errors.Is and log the message as is.
var (
	// ErrNotFound: the stream does not exist (or was deleted concurrently).
	ErrNotFound = errors.New("meta: not found")

	// ErrConflict: the stored record is not the one the caller's operation
	// was conditioned on, e.g. DeleteStream with an ID that belongs to an
	// older or newer incarnation of the name.
	ErrConflict = errors.New("meta: conflict")

	// ErrCommitUnknown: a write's request failed in transit (context ended,
	// connection lost) and reading back could not prove it was applied.
	// It may still have been, so nothing it references may be deleted.
	ErrCommitUnknown = errors.New("meta: commit outcome unknown")

	// ErrTopicTaken: the Kafka topic alias a create or update asked for
	// already belongs to another stream. Nothing was written.
	ErrTopicTaken = errors.New("meta: kafka topic alias taken")

	// ErrInvalid: the caller passed an argument the registry cannot accept
	// (an empty or relative stream name, a zero ID, a non-positive page
	// limit, an update that changes a record's identity).
	ErrInvalid = errors.New("meta: invalid argument")

	// ErrCorrupt: a value stored in etcd could not be decoded. It means
	// something other than package meta wrote under the registry prefix, or
	// a newer incompatible version did; it is never retried.
	ErrCorrupt = errors.New("meta: corrupt record")

	// ErrLeaseLost is returned by commits attempted after a node's lease expired:
	// the node may have been declared dead and its streams taken over, so it must
	// not write anything until it has rejoined.
	ErrLeaseLost = errors.New("meta: node lease lost")
)
