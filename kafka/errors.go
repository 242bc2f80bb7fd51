package kafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// kindCodes maps the stream service's error kinds (stream.KindOf) to Kafka
// error codes: the one table of this frontend. A kind missing here is
// UNKNOWN_SERVER_ERROR. Retriable codes make clients refresh metadata and
// retry, which is what they must do when a partition moved or a node is
// briefly unable to write.
var kindCodes = map[stream.Kind]*kerr.Error{
	stream.KindRedirect:          kerr.NotLeaderForPartition,
	stream.KindProtocolMismatch:  kerr.NotLeaderForPartition, // Kafka is served by every node alike
	stream.KindNotFound:          kerr.UnknownTopicOrPartition,
	stream.KindGone:              kerr.UnknownTopicOrPartition,
	stream.KindOffsetTrimmed:     kerr.OffsetOutOfRange,
	stream.KindOffsetOutOfRange:  kerr.OffsetOutOfRange,
	stream.KindProducerFenced:    kerr.InvalidProducerEpoch,
	stream.KindProducerSeqGap:    kerr.OutOfOrderSequenceNumber,
	stream.KindProducerEpochSeq:  kerr.OutOfOrderSequenceNumber,
	stream.KindStreamClosed:      kerr.InvalidRecord,
	stream.KindTopicConflict:     kerr.TopicAlreadyExists,
	stream.KindConflict:          kerr.TopicAlreadyExists,
	stream.KindInvalidTopic:      kerr.InvalidTopicException,
	stream.KindInvalidName:       kerr.InvalidTopicException,
	stream.KindReservedName:      kerr.InvalidTopicException,
	stream.KindInvalidArgument:   kerr.InvalidRequest,
	stream.KindNotEnoughReplicas: kerr.NotEnoughReplicas,
	stream.KindUnavailable:       kerr.NotLeaderForPartition,
	stream.KindCanceled:          kerr.RequestTimedOut,
}

// batchCodes refine KindInvalidArgument for a bad record batch (one of
// record's kinds rather than stream.ErrInvalidArgument): Kafka has a code
// per kind. A record kind missing here is UNKNOWN_SERVER_ERROR.
var batchCodes = []struct {
	err  error
	code *kerr.Error
}{
	{record.ErrBadMagic, kerr.UnsupportedForMessageFormat},
	{record.ErrUnsupportedCodec, kerr.UnsupportedCompressionType},
	{record.ErrBadCRC, kerr.CorruptMessage},
	{record.ErrTruncated, kerr.CorruptMessage},
	{record.ErrCorrupt, kerr.CorruptMessage},
}

// errCode is the Kafka error code for err (0 for nil).
func errCode(err error) int16 {
	if err == nil {
		return 0
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	if errors.Is(err, stream.ErrKeyRequired) {
		return kerr.InvalidRecord.Code // Kafka: "Compacted topic cannot accept message without key"
	}
	kind := stream.KindOf(err)
	if kind == stream.KindInvalidArgument && !errors.Is(err, stream.ErrInvalidArgument) {
		for _, b := range batchCodes {
			if errors.Is(err, b.err) {
				return b.code.Code
			}
		}
		return kerr.UnknownServerError.Code
	}
	if c, ok := kindCodes[kind]; ok {
		return c.Code
	}
	return kerr.UnknownServerError.Code
}

// errMessage is err's text for the responses that carry one (nil for nil).
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	m := err.Error()
	return &m
}
