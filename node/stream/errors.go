package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/PicoMQ/picomq/record"
)

// Sentinel errors of the stream service. Callers inside the service wrap
// them with the stream and value that was wrong; frontends do not test them
// one by one but ask KindOf, and map the Kind to their protocol.
var (
	ErrNotFound         = errors.New("stream: not found")
	ErrConflict         = errors.New("stream: exists with a different configuration")
	ErrInvalidName      = errors.New("stream: invalid name")
	ErrReservedName     = errors.New("stream: reserved name")
	ErrInvalidArgument  = errors.New("stream: invalid argument")
	ErrOffsetOutOfRange = errors.New("stream: offset out of range")
	// ErrKeyRequired: an append of a record without a key to a compacted
	// stream (as Kafka refuses it). An ErrInvalidArgument.
	ErrKeyRequired = fmt.Errorf("%w: a compacted stream needs a key on every record", ErrInvalidArgument)
	// ErrContentTypeMismatch: an append's records are of another media
	// type than the stream's.
	ErrContentTypeMismatch = errors.New("stream: content type mismatch")
	// ErrUnavailable means the node cannot accept the operation right now
	// (log failed, shutting down, registry unreachable). Clients may retry,
	// possibly on another node.
	ErrUnavailable = errors.New("stream: unavailable")
	// ErrNotEnoughReplicas: a `replicated` append cannot reach the
	// stream's minimum of in-sync copies; nothing was acknowledged. It is
	// also ErrUnavailable (retry later).
	ErrNotEnoughReplicas = fmt.Errorf("%w: not enough in-sync replicas", ErrUnavailable)
)

// Kind is the one classification of a service error that every frontend
// maps: Pico and Durable Streams to an HTTP status and error code (their
// tables are in api/pico/errors.go and api/ds/errors.go), the Kafka frontend
// to a Kafka error code. A new error condition gets a Kind here, and each
// frontend's table gets one row; nothing else in a frontend tests sentinel
// errors. The numbers a client acts on travel in the typed errors
// (*ProducerError, *TrimmedError, *ClosedError, *RedirectError), found with
// errors.As.
type Kind int

const (
	// KindInternal is no known condition: a server fault (logged, answered
	// as an internal error).
	KindInternal Kind = iota
	// KindNotFound: no such stream (or it expired).
	KindNotFound
	// KindGone: the stream was deleted but forks still read its history
	// (ErrGone). Frontends without the notion answer it as KindNotFound.
	KindGone
	// KindConflict: a create names an existing stream with another
	// configuration (ErrConflict).
	KindConflict
	// KindInvalidName: the stream name breaks the name grammar.
	KindInvalidName
	// KindReservedName: the name is reserved for the system (ErrReservedName).
	KindReservedName
	// KindInvalidArgument: a request value or record batch is malformed
	// (ErrInvalidArgument, record.ErrInvalid), including invalid JSON on a
	// JSON stream.
	KindInvalidArgument
	// KindContentTypeMismatch: an append names another media type than
	// the stream's.
	KindContentTypeMismatch
	// KindOffsetOutOfRange: an offset past the stream's end.
	KindOffsetOutOfRange
	// KindOffsetTrimmed: an offset below the stream's start (*TrimmedError).
	KindOffsetTrimmed
	// KindTopicConflict: the Kafka topic alias belongs to another stream.
	KindTopicConflict
	// KindInvalidTopic: the Kafka topic alias is not a valid topic name.
	KindInvalidTopic
	// KindProducerFenced: the producer's epoch is stale (*ProducerError
	// carries the current epoch).
	KindProducerFenced
	// KindProducerSeqGap: the producer's sequence skips ahead
	// (*ProducerError carries the expected and received sequence).
	KindProducerSeqGap
	// KindProducerEpochSeq: a new producer epoch did not start at 0.
	KindProducerEpochSeq
	// KindWriterSeq: a Durable Streams Stream-Seq did not increase.
	KindWriterSeq
	// KindStreamClosed: the stream is closed (*ClosedError carries its end).
	KindStreamClosed
	// KindRedirect: another node owns the stream (*RedirectError says
	// which).
	KindRedirect
	// KindProtocolMismatch: another node owns the stream and its HTTP
	// listener speaks the other protocol.
	KindProtocolMismatch
	// KindUnavailable: the node cannot serve this now; retry, perhaps
	// elsewhere.
	KindUnavailable
	// KindCanceled: the caller's context ended (went away or timed out);
	// a write's outcome is unknown.
	KindCanceled
	// KindNotEnoughReplicas: fewer in-sync copies of a `replicated`
	// stream than its minimum are possible (ErrNotEnoughReplicas).
	KindNotEnoughReplicas
)

// kinds is the classification order: the first sentinel err matches wins.
// ErrGone matches ErrNotFound too, so it comes first.
var kinds = []struct {
	err  error
	kind Kind
}{
	{ErrGone, KindGone},
	{ErrReservedName, KindReservedName},
	{ErrInvalidName, KindInvalidName},
	{ErrNotFound, KindNotFound},
	{ErrTopicConflict, KindTopicConflict},
	{ErrInvalidTopic, KindInvalidTopic},
	{ErrConflict, KindConflict},
	{ErrContentTypeMismatch, KindContentTypeMismatch},
	{ErrOffsetTrimmed, KindOffsetTrimmed},
	{ErrOffsetOutOfRange, KindOffsetOutOfRange},
	{ErrProducerFenced, KindProducerFenced},
	{ErrProducerSeqGap, KindProducerSeqGap},
	{ErrProducerEpochSeq, KindProducerEpochSeq},
	{ErrWriterSeq, KindWriterSeq},
	{ErrStreamClosed, KindStreamClosed},
	{ErrInvalidArgument, KindInvalidArgument},
	{record.ErrInvalid, KindInvalidArgument},
	{ErrProtocolMismatch, KindProtocolMismatch},
	{ErrRedirect, KindRedirect},
	{ErrNotEnoughReplicas, KindNotEnoughReplicas},
	{ErrUnavailable, KindUnavailable},
	{context.Canceled, KindCanceled},
	{context.DeadlineExceeded, KindCanceled},
}

// KindOf classifies err; nil and unknown errors are KindInternal.
func KindOf(err error) Kind {
	if err == nil {
		return KindInternal
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return KindInternal
}
