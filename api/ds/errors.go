package ds

import (
	"net/http"
	"strconv"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// answer is the Durable Streams answer to one kind of service error.
type answer struct {
	status int
	code   string
}

// errorTable maps every stream.Kind to a status and error code. The
// statuses are the protocol's (404 absent, 410 soft-deleted or trimmed, 409
// conflicts, 403 fenced); the protocol fixes no code names, so each code is
// the Pico protocol's code for the same condition (api/pico/errors.go). A
// kind missing here is a server fault: 500, logged.
var errorTable = map[stream.Kind]answer{
	stream.KindGone:                {http.StatusGone, wire.CodeStreamGone},
	stream.KindReservedName:        {http.StatusBadRequest, wire.CodeInvalidName},
	stream.KindInvalidName:         {http.StatusBadRequest, wire.CodeInvalidName},
	stream.KindNotFound:            {http.StatusNotFound, wire.CodeNotFound},
	stream.KindStreamClosed:        {http.StatusConflict, wire.CodeStreamClosed},
	stream.KindProducerFenced:      {http.StatusForbidden, wire.CodeProducerFenced},
	stream.KindProducerSeqGap:      {http.StatusConflict, wire.CodeProducerSeqGap},
	stream.KindProducerEpochSeq:    {http.StatusBadRequest, wire.CodeProducerEpochSeq},
	stream.KindWriterSeq:           {http.StatusConflict, wire.CodeWriterSeqConflict},
	stream.KindConflict:            {http.StatusConflict, wire.CodeExists},
	stream.KindContentTypeMismatch: {http.StatusConflict, wire.CodeContentTypeMismatch},
	stream.KindTopicConflict:       {http.StatusConflict, wire.CodeTopicConflict},
	stream.KindInvalidTopic:        {http.StatusBadRequest, wire.CodeInvalidTopic},
	stream.KindOffsetOutOfRange:    {http.StatusBadRequest, wire.CodeOffsetOutOfRange},
	stream.KindOffsetTrimmed:       {http.StatusGone, wire.CodeOffsetTrimmed},
	stream.KindInvalidArgument:     {http.StatusBadRequest, wire.CodeBadRequest},
	stream.KindRedirect:            {http.StatusTemporaryRedirect, httpx.CodeRedirect},
	stream.KindUnavailable:         {http.StatusServiceUnavailable, wire.CodeUnavailable},
	// The client went away or its deadline passed: the outcome of a write
	// is unknown, which 503 tells a retrying client.
	stream.KindCanceled: {http.StatusServiceUnavailable, wire.CodeRequestTimeout},
}

// serviceError answers a stream-service error: the table's status and
// code, the producer numbers in Producer-* headers and the body, and for a
// closed stream Stream-Closed with the final offset.
func (h *Handler) serviceError(w http.ResponseWriter, r *http.Request, err error) {
	httpx.SetRedirect(w, r, err)
	a, ok := errorTable[stream.KindOf(err)]
	msg := err.Error()
	if !ok {
		h.cfg.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		a, msg = answer{http.StatusInternalServerError, wire.CodeInternal}, "internal error"
	}
	d := httpx.Detail(err, a.code, msg)
	hd := w.Header()
	if d.ExpectedSeq != nil {
		hd.Set(wire.DSHeaderProducerExpected, strconv.FormatUint(*d.ExpectedSeq, 10))
		hd.Set(wire.DSHeaderProducerReceived, strconv.FormatUint(*d.ReceivedSeq, 10))
	}
	if d.CurrentEpoch != nil && a.code == wire.CodeProducerFenced {
		hd.Set(wire.DSHeaderProducerEpoch, strconv.FormatUint(*d.CurrentEpoch, 10))
	}
	// Offsets are Pico integers in the detail; the protocol's offsets are
	// strings, so they travel in headers only.
	d.StartOffset = nil
	if d.NextOffset != nil {
		hd.Set(wire.DSHeaderClosed, "true")
		hd.Set(wire.DSHeaderNextOffset, formatOffset(*d.NextOffset))
		d.NextOffset, d.Message = nil, "the stream is closed; it accepts no more appends"
	}
	h.failDetail(w, r, a.status, d)
}
