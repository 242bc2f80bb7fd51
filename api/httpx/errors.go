package httpx

import (
	"errors"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// Detail is the JSON error detail of a service error: code and message,
// plus the numbers the typed errors in err's chain carry, so a client acts
// on them without parsing the message. Both HTTP frontends build their
// error bodies here; each copies the numbers into its own headers.
func Detail(err error, code, msg string) wire.ErrorDetail {
	d := wire.ErrorDetail{Code: code, Message: msg}
	var pe *stream.ProducerError
	if errors.As(err, &pe) {
		switch stream.KindOf(err) {
		case stream.KindProducerSeqGap:
			exp, rec := pe.ExpectedSeq, pe.ReceivedSeq
			d.ExpectedSeq, d.ReceivedSeq = &exp, &rec
		case stream.KindProducerFenced, stream.KindProducerEpochSeq:
			cur := pe.CurrentEpoch
			d.CurrentEpoch = &cur
		}
	}
	var te *stream.TrimmedError
	if errors.As(err, &te) {
		so := te.StartOffset
		d.StartOffset = &so
	}
	var ce *stream.ClosedError
	if errors.As(err, &ce) {
		next := ce.NextOffset
		d.NextOffset = &next
	}
	return d
}
