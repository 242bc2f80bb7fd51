package pico

import (
	"net/http"
	"strconv"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// answer is the Pico protocol's answer to one kind of service error.
type answer struct {
	status int
	code   string
}

// errorTable maps every stream.Kind to the Pico status and error code
// (docs/api.md lists them). A kind missing here is a server fault: 500,
// logged. The Durable Streams table (api/ds/errors.go) uses the same code
// for the same condition.
var errorTable = map[stream.Kind]answer{
	stream.KindReservedName:        {http.StatusForbidden, wire.CodeReservedName},
	stream.KindInvalidName:         {http.StatusBadRequest, wire.CodeInvalidName},
	stream.KindNotFound:            {http.StatusNotFound, wire.CodeNotFound},
	stream.KindGone:                {http.StatusNotFound, wire.CodeNotFound},
	stream.KindTopicConflict:       {http.StatusConflict, wire.CodeTopicConflict},
	stream.KindInvalidTopic:        {http.StatusBadRequest, wire.CodeInvalidTopic},
	stream.KindConflict:            {http.StatusConflict, wire.CodeExists},
	stream.KindContentTypeMismatch: {http.StatusConflict, wire.CodeContentTypeMismatch},
	stream.KindOffsetTrimmed:       {http.StatusGone, wire.CodeOffsetTrimmed},
	stream.KindOffsetOutOfRange:    {http.StatusRequestedRangeNotSatisfiable, wire.CodeOffsetOutOfRange},
	stream.KindProducerFenced:      {http.StatusForbidden, wire.CodeProducerFenced},
	stream.KindProducerSeqGap:      {http.StatusConflict, wire.CodeProducerSeqGap},
	stream.KindProducerEpochSeq:    {http.StatusBadRequest, wire.CodeProducerEpochSeq},
	stream.KindStreamClosed:        {http.StatusConflict, wire.CodeStreamClosed},
	stream.KindInvalidArgument:     {http.StatusBadRequest, wire.CodeBadRequest},
	stream.KindRedirect:            {http.StatusTemporaryRedirect, httpx.CodeRedirect},
	stream.KindUnavailable:         {http.StatusServiceUnavailable, wire.CodeUnavailable},
	// The client went away or its deadline passed: the outcome of a write
	// is unknown, which 503 tells a retrying idempotent client.
	stream.KindCanceled: {http.StatusServiceUnavailable, wire.CodeRequestTimeout},
}

// classify looks err up in errorTable. An unknown error is a server fault:
// logged with logMsg and attrs, answered 500 without its text.
func (h *Handler) classify(err error, logMsg string, attrs ...any) (answer, string) {
	if a, ok := errorTable[stream.KindOf(err)]; ok {
		return a, err.Error()
	}
	h.cfg.Logger.Error(logMsg, append(attrs, "err", err)...)
	return answer{http.StatusInternalServerError, wire.CodeInternal}, "internal error"
}

// errorDetail builds the JSON error for err, with the numbers a client needs
// to act on it (expected sequence, start offset, …) both in the body and in
// Pico-* response headers.
func (h *Handler) errorDetail(w http.ResponseWriter, r *http.Request, err error) (int, wire.ErrorDetail) {
	a, msg := h.classify(err, "request failed", "method", r.Method, "path", r.URL.Path)
	httpx.SetRedirect(w, r, err)
	d := httpx.Detail(err, a.code, msg)
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
	return a.status, d
}

func (h *Handler) writeServiceError(w http.ResponseWriter, r *http.Request, err error) {
	status, d := h.errorDetail(w, r, err)
	writeErrorDetail(w, status, d)
}

// writeErrorDetail is httpx.WriteError with the optional detail fields.
func writeErrorDetail(w http.ResponseWriter, status int, d wire.ErrorDetail) {
	hd := w.Header()
	if (status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests) && hd.Get("Retry-After") == "" {
		hd.Set("Retry-After", "1")
	}
	hd.Set("X-Content-Type-Options", "nosniff")
	httpx.WriteJSON(w, status, wire.ErrorBody{Error: d})
}
