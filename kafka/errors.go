package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/PicoMQ/picomq/node/record"
	"github.com/PicoMQ/picomq/node/stream"
)

// errorCodes maps the stream service's errors to Kafka error codes: the one
// table of this frontend (first match wins, so specific errors come before
// the errors they wrap). Retriable codes make clients refresh metadata and
// retry, which is what they must do when a partition moved or a node is
// briefly unable to write.
var errorCodes = []struct {
	err  error
	code *kerr.Error
}{
	{stream.ErrRedirect, kerr.NotLeaderForPartition},
	{stream.ErrNotFound, kerr.UnknownTopicOrPartition},
	{stream.ErrOffsetTrimmed, kerr.OffsetOutOfRange},
	{stream.ErrOffsetOutOfRange, kerr.OffsetOutOfRange},
	{stream.ErrProducerFenced, kerr.InvalidProducerEpoch},
	{stream.ErrProducerSeqGap, kerr.OutOfOrderSequenceNumber},
	{stream.ErrProducerEpochSeq, kerr.OutOfOrderSequenceNumber},
	{stream.ErrStreamClosed, kerr.InvalidRecord},
	{stream.ErrTopicConflict, kerr.TopicAlreadyExists},
	{stream.ErrConflict, kerr.TopicAlreadyExists},
	{stream.ErrInvalidTopic, kerr.InvalidTopicException},
	{stream.ErrInvalidName, kerr.InvalidTopicException},
	{stream.ErrReservedName, kerr.InvalidTopicException},
	{stream.ErrInvalidArgument, kerr.InvalidRequest},
	{stream.ErrUnavailable, kerr.NotLeaderForPartition},
	{record.ErrBadMagic, kerr.UnsupportedForMessageFormat},
	{record.ErrUnsupportedCodec, kerr.UnsupportedCompressionType},
	{record.ErrBadCRC, kerr.CorruptMessage},
	{record.ErrTruncated, kerr.CorruptMessage},
	{record.ErrCorrupt, kerr.CorruptMessage},
	{context.DeadlineExceeded, kerr.RequestTimedOut},
	{context.Canceled, kerr.RequestTimedOut},
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
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			return e.code.Code
		}
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
