package ds

import (
	"net/http"
	"strconv"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// errorTable maps every stream.Kind to a status and error code. The
// statuses are the protocol's (404 absent, 410 soft-deleted or trimmed, 409
// conflicts, 403 fenced); the protocol fixes no code names, so each code is
// the Pico protocol's code for the same condition (api/pico/errors.go). A
// kind missing here is a server fault: 500, logged.
var errorTable = httpx.ErrorTable{
	stream.KindGone:                {Status: http.StatusGone, Code: wire.CodeStreamGone},
	stream.KindReservedName:        {Status: http.StatusBadRequest, Code: wire.CodeInvalidName},
	stream.KindInvalidName:         {Status: http.StatusBadRequest, Code: wire.CodeInvalidName},
	stream.KindNotFound:            {Status: http.StatusNotFound, Code: wire.CodeNotFound},
	stream.KindStreamClosed:        {Status: http.StatusConflict, Code: wire.CodeStreamClosed},
	stream.KindProducerFenced:      {Status: http.StatusForbidden, Code: wire.CodeProducerFenced},
	stream.KindProducerSeqGap:      {Status: http.StatusConflict, Code: wire.CodeProducerSeqGap},
	stream.KindProducerEpochSeq:    {Status: http.StatusBadRequest, Code: wire.CodeProducerEpochSeq},
	stream.KindWriterSeq:           {Status: http.StatusConflict, Code: wire.CodeWriterSeqConflict},
	stream.KindConflict:            {Status: http.StatusConflict, Code: wire.CodeExists},
	stream.KindContentTypeMismatch: {Status: http.StatusConflict, Code: wire.CodeContentTypeMismatch},
	stream.KindTopicConflict:       {Status: http.StatusConflict, Code: wire.CodeTopicConflict},
	stream.KindInvalidTopic:        {Status: http.StatusBadRequest, Code: wire.CodeInvalidTopic},
	stream.KindOffsetOutOfRange:    {Status: http.StatusBadRequest, Code: wire.CodeOffsetOutOfRange},
	stream.KindOffsetTrimmed:       {Status: http.StatusGone, Code: wire.CodeOffsetTrimmed},
	stream.KindInvalidArgument:     {Status: http.StatusBadRequest, Code: wire.CodeBadRequest},
	stream.KindRedirect:            {Status: http.StatusTemporaryRedirect, Code: httpx.CodeRedirect},
	stream.KindProtocolMismatch:    {Status: http.StatusMisdirectedRequest, Code: httpx.CodeProtocolMismatch},
	stream.KindNotEnoughReplicas:   {Status: http.StatusServiceUnavailable, Code: wire.CodeNotEnoughReplicas},
	stream.KindUnavailable:         {Status: http.StatusServiceUnavailable, Code: wire.CodeUnavailable},
	// The client went away or its deadline passed: the outcome of a write
	// is unknown, which 503 tells a retrying client.
	stream.KindCanceled: {Status: http.StatusServiceUnavailable, Code: wire.CodeRequestTimeout},
}

// serviceError answers a stream-service error: the table's status and
// code, the producer numbers in Producer-* headers and the body, and for a
// closed stream Stream-Closed with the final offset.
func (h *Handler) serviceError(w http.ResponseWriter, r *http.Request, err error) {
	status, d := errorTable.Detail(h.cfg.Logger, w, r, err)
	hd := w.Header()
	if d.ExpectedSeq != nil {
		hd.Set(wire.DSHeaderProducerExpected, strconv.FormatUint(*d.ExpectedSeq, 10))
		hd.Set(wire.DSHeaderProducerReceived, strconv.FormatUint(*d.ReceivedSeq, 10))
	}
	if d.CurrentEpoch != nil && d.Code == wire.CodeProducerFenced {
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
	h.failDetail(w, r, status, d)
}
