package stream

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/PicoMQ/picomq/record"
)

func TestKindOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Kind
	}{
		{nil, KindInternal},
		{errors.New("disk on fire"), KindInternal},
		{fmt.Errorf("%w: /a", ErrNotFound), KindNotFound},
		{fmt.Errorf("%w: /a", ErrGone), KindGone},
		{fmt.Errorf("%w: /_x", ErrReservedName), KindReservedName},
		{&TrimmedError{Name: "/a", Offset: 1, StartOffset: 5}, KindOffsetTrimmed},
		{&ClosedError{Name: "/a", NextOffset: 9}, KindStreamClosed},
		{&ProducerError{Err: ErrProducerSeqGap, ExpectedSeq: 3, ReceivedSeq: 5}, KindProducerSeqGap},
		{&ProducerError{Err: ErrProducerFenced}, KindProducerFenced},
		{fmt.Errorf("%w: topic", ErrTopicConflict), KindTopicConflict},
		{fmt.Errorf("decoding: %w", record.ErrInvalid), KindInvalidArgument},
		{&RedirectError{NodeID: "n2", URL: "http://127.0.0.1:1"}, KindRedirect},
		{fmt.Errorf("append: %w", context.DeadlineExceeded), KindCanceled},
		{fmt.Errorf("%w: shutting down", ErrUnavailable), KindUnavailable},
	} {
		if got := KindOf(c.err); got != c.want {
			t.Errorf("KindOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
