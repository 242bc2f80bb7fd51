package stream

import "errors"

// Sentinel errors of the stream service. Frontends map them to protocol
// errors (HTTP status + code, Kafka error codes) with errors.Is; the wrapped
// message says which stream and which value was wrong.
var (
	ErrNotFound         = errors.New("stream: not found")
	ErrConflict         = errors.New("stream: exists with a different configuration")
	ErrInvalidName      = errors.New("stream: invalid name")
	ErrReservedName     = errors.New("stream: reserved name")
	ErrInvalidArgument  = errors.New("stream: invalid argument")
	ErrOffsetOutOfRange = errors.New("stream: offset out of range")
	// ErrUnavailable means the node cannot accept the operation right now
	// (log failed, shutting down, registry unreachable). Clients may retry,
	// possibly on another node.
	ErrUnavailable = errors.New("stream: unavailable")
)
