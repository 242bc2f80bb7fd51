package pico

import (
	"net/http"
	"strconv"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// errorTable maps every stream.Kind to the Pico status and error code
// (docs/api.md lists them). A kind missing here is a server fault: 500,
// logged. The Durable Streams table (api/ds/errors.go) uses the same code
// for the same condition.
var errorTable = httpx.ErrorTable{
	stream.KindReservedName:        {Status: http.StatusForbidden, Code: wire.CodeReservedName},
	stream.KindInvalidName:         {Status: http.StatusBadRequest, Code: wire.CodeInvalidName},
	stream.KindNotFound:            {Status: http.StatusNotFound, Code: wire.CodeNotFound},
	stream.KindGone:                {Status: http.StatusNotFound, Code: wire.CodeNotFound},
	stream.KindTopicConflict:       {Status: http.StatusConflict, Code: wire.CodeTopicConflict},
	stream.KindInvalidTopic:        {Status: http.StatusBadRequest, Code: wire.CodeInvalidTopic},
	stream.KindConflict:            {Status: http.StatusConflict, Code: wire.CodeExists},
	stream.KindContentTypeMismatch: {Status: http.StatusConflict, Code: wire.CodeContentTypeMismatch},
	stream.KindOffsetTrimmed:       {Status: http.StatusGone, Code: wire.CodeOffsetTrimmed},
	stream.KindOffsetOutOfRange:    {Status: http.StatusRequestedRangeNotSatisfiable, Code: wire.CodeOffsetOutOfRange},
	stream.KindProducerFenced:      {Status: http.StatusForbidden, Code: wire.CodeProducerFenced},
	stream.KindProducerSeqGap:      {Status: http.StatusConflict, Code: wire.CodeProducerSeqGap},
	stream.KindProducerEpochSeq:    {Status: http.StatusBadRequest, Code: wire.CodeProducerEpochSeq},
	stream.KindStreamClosed:        {Status: http.StatusConflict, Code: wire.CodeStreamClosed},
	stream.KindInvalidArgument:     {Status: http.StatusBadRequest, Code: wire.CodeBadRequest},
	stream.KindRedirect:            {Status: http.StatusTemporaryRedirect, Code: httpx.CodeRedirect},
	stream.KindProtocolMismatch:    {Status: http.StatusMisdirectedRequest, Code: httpx.CodeProtocolMismatch},
	stream.KindNotEnoughReplicas:   {Status: http.StatusServiceUnavailable, Code: wire.CodeNotEnoughReplicas},
	stream.KindUnavailable:         {Status: http.StatusServiceUnavailable, Code: wire.CodeUnavailable},
	// The client went away or its deadline passed: the outcome of a write
	// is unknown, which 503 tells a retrying idempotent client.
	stream.KindCanceled: {Status: http.StatusServiceUnavailable, Code: wire.CodeRequestTimeout},
}

// errorDetail builds the JSON error for err, with the numbers a client needs
// to act on it (expected sequence, start offset, …) both in the body and in
// Pico-* response headers.
func (h *Handler) errorDetail(w http.ResponseWriter, r *http.Request, err error) (int, wire.ErrorDetail) {
	status, d := errorTable.Detail(h.cfg.Logger, w, r, err)
	hd := w.Header()
	if d.ExpectedSeq != nil {
		hd.Set(wire.HeaderProducerExpectedSeq, strconv.FormatUint(*d.ExpectedSeq, 10))
		hd.Set(wire.HeaderProducerReceivedSeq, strconv.FormatUint(*d.ReceivedSeq, 10))
	}
	if d.CurrentEpoch != nil {
		hd.Set(wire.HeaderProducerEpoch, strconv.FormatUint(*d.CurrentEpoch, 10))
	}
	if d.StartOffset != nil {
		hd.Set(wire.HeaderStartOffset, strconv.FormatInt(*d.StartOffset, 10))
	}
	if d.NextOffset != nil {
		hd.Set(wire.HeaderNextOffset, strconv.FormatInt(*d.NextOffset, 10))
		hd.Set(wire.HeaderClosed, "true")
	}
	return status, d
}

func (h *Handler) writeServiceError(w http.ResponseWriter, r *http.Request, err error) {
	status, d := h.errorDetail(w, r, err)
	httpx.WriteErrorDetail(w, status, d)
}
