package picomq

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// Kind classifies an error so programs can act on it without comparing
// status codes or protocol-specific error codes. See IsKind.
type Kind int

// Error kinds. A server error has exactly one kind, derived from its error
// code when the SDK knows it and from the HTTP status otherwise.
const (
	KindUnknown          Kind = iota
	KindBadRequest            // 400: the request was malformed (bad name, bad offset, invalid JSON, …)
	KindUnauthorized          // 401: missing or wrong token
	KindForbidden             // 403 other than a fenced producer (e.g. a reserved name)
	KindNotFound              // 404: no such stream (or endpoint)
	KindConflict              // 409: exists with another configuration, content type mismatch, Stream-Seq regression
	KindClosed                // 409 stream_closed: the stream accepts no more appends
	KindFenced                // 403 producer_fenced: a producer with a higher epoch took over
	KindSequenceGap           // 409 producer sequence gap
	KindGone                  // 410: the offset was trimmed, or the stream is soft-deleted (Durable Streams)
	KindTooLarge              // 413: body, record or batch above a server limit
	KindUnsupportedMedia      // 415 or 406: content type not accepted
	KindOutOfRange            // 416 (Pico) or 400 offset_out_of_range: the position is past the stream's end
	KindUnavailable           // 429, 502, 503, 504: overload, routing unavailable, shutting down
	KindInternal              // 500: a server bug
	KindUnsupported           // the operation has no equivalent in the client's protocol (client-side)
)

var kindNames = [...]string{
	KindUnknown:          "unknown",
	KindBadRequest:       "bad_request",
	KindUnauthorized:     "unauthorized",
	KindForbidden:        "forbidden",
	KindNotFound:         "not_found",
	KindConflict:         "conflict",
	KindClosed:           "closed",
	KindFenced:           "fenced",
	KindSequenceGap:      "sequence_gap",
	KindGone:             "gone",
	KindTooLarge:         "too_large",
	KindUnsupportedMedia: "unsupported_media",
	KindOutOfRange:       "out_of_range",
	KindUnavailable:      "unavailable",
	KindInternal:         "internal",
	KindUnsupported:      "unsupported",
}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// ClientError is an error response from the server: its HTTP status, its
// stable error code (wire.Code* for Pico; the facade's codes for Durable
// Streams) and its human-readable message. Use errors.As to get it, or
// IsKind to test its Kind.
type ClientError struct {
	Status  int    // HTTP status code
	Code    string // stable error code; empty when the response had none (e.g. a HEAD error on Durable Streams)
	Message string // for humans
	Kind    Kind

	Method string // the request that failed
	URL    string

	// RetryAfter is the server's Retry-After, if it sent one.
	RetryAfter time.Duration

	// Details some errors carry (nil when absent).
	ExpectedSeq  *uint64 // producer sequence gap: the sequence the server expected
	ReceivedSeq  *uint64 // producer sequence gap: the sequence it received
	CurrentEpoch *uint64 // fenced producer: the producer's current epoch on the server
	// StartPosition is the first readable position (offset trimmed);
	// NextPosition the stream's end (closed stream, out of range).
	StartPosition string
	NextPosition  string
}

func (e *ClientError) Error() string {
	var b strings.Builder
	b.WriteString("picomq: ")
	if e.Method != "" {
		b.WriteString(e.Method)
		b.WriteByte(' ')
		b.WriteString(e.URL)
		b.WriteString(": ")
	}
	b.WriteString(strconv.Itoa(e.Status))
	if e.Code != "" {
		b.WriteByte(' ')
		b.WriteString(e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// ErrUnsupported is matched (errors.Is) by every *UnsupportedError.
var ErrUnsupported = errors.New("picomq: operation not supported by this protocol")

// UnsupportedError reports an operation the client's protocol has no
// equivalent for, such as listing streams over Durable Streams. It is
// returned before anything is sent.
type UnsupportedError struct {
	Op       string   // the operation, e.g. "List"
	Protocol Protocol // the client's protocol
	Reason   string   // why, in a few words
}

func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("picomq: %s is not supported over %s", e.Op, e.Protocol)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

func unsupported(p Protocol, op, reason string) error {
	return &UnsupportedError{Op: op, Protocol: p, Reason: reason}
}

// IsKind reports whether err (or an error it wraps) is a *ClientError of
// kind k, or, for KindUnsupported, an *UnsupportedError.
func IsKind(err error, k Kind) bool {
	if k == KindUnsupported {
		var ue *UnsupportedError
		if errors.As(err, &ue) {
			return true
		}
	}
	var ce *ClientError
	return errors.As(err, &ce) && ce.Kind == k
}

// ErrorKind returns the Kind of err: that of the *ClientError it wraps,
// KindUnsupported for an *UnsupportedError, else KindUnknown.
func ErrorKind(err error) Kind {
	var ue *UnsupportedError
	if errors.As(err, &ue) {
		return KindUnsupported
	}
	var ce *ClientError
	if errors.As(err, &ce) {
		return ce.Kind
	}
	return KindUnknown
}

// kindOf derives the kind from the error code first (codes are precise),
// then from the status.
func kindOf(status int, code string) Kind {
	switch code {
	case wire.CodeNotFound, wire.CodeNotFoundRoute:
		return KindNotFound
	case wire.CodeProducerFenced:
		return KindFenced
	case wire.CodeProducerSeqGap, "producer_sequence_gap":
		return KindSequenceGap
	case wire.CodeStreamClosed:
		return KindClosed
	case wire.CodeOffsetTrimmed, "stream_gone":
		return KindGone
	case wire.CodeOffsetOutOfRange:
		return KindOutOfRange
	case wire.CodeProducerEpochSeq, "producer_epoch_must_start_at_zero":
		return KindBadRequest
	case wire.CodeRequestTimeout:
		return KindUnavailable
	}
	switch status {
	case http.StatusBadRequest:
		return KindBadRequest
	case http.StatusUnauthorized:
		return KindUnauthorized
	case http.StatusForbidden:
		return KindForbidden
	case http.StatusNotFound:
		return KindNotFound
	case http.StatusConflict:
		return KindConflict
	case http.StatusGone:
		return KindGone
	case http.StatusRequestEntityTooLarge:
		return KindTooLarge
	case http.StatusUnsupportedMediaType, http.StatusNotAcceptable:
		return KindUnsupportedMedia
	case http.StatusRequestedRangeNotSatisfiable:
		return KindOutOfRange
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return KindUnavailable
	case http.StatusInternalServerError:
		return KindInternal
	}
	return KindUnknown
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// newClientError builds the error for a non-success response. body may be
// nil (HEAD). Pico puts the code of HEAD errors in Pico-Error-Code.
func newClientError(method, url string, resp *http.Response, body []byte, p Protocol) *ClientError {
	e := &ClientError{Status: resp.StatusCode, Method: method, URL: url}
	var eb wire.ErrorBody
	if len(body) > 0 && json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		d := eb.Error
		e.Code, e.Message = d.Code, d.Message
		e.ExpectedSeq, e.ReceivedSeq, e.CurrentEpoch = d.ExpectedSeq, d.ReceivedSeq, d.CurrentEpoch
		if d.StartOffset != nil {
			e.StartPosition = strconv.FormatInt(*d.StartOffset, 10)
		}
		if d.NextOffset != nil {
			e.NextPosition = strconv.FormatInt(*d.NextOffset, 10)
		}
	} else if len(body) > 0 {
		e.Message = strings.TrimSpace(string(body))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200] + "…"
		}
	}
	h := resp.Header
	if e.Code == "" {
		e.Code = h.Get(wire.HeaderErrorCode)
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if p == ProtocolDurableStreams {
		// The facade reports the numbers in Producer-* / Stream-* headers.
		if v, err := strconv.ParseUint(h.Get(wire.DSHeaderProducerExpected), 10, 64); err == nil {
			e.ExpectedSeq = &v
		}
		if v, err := strconv.ParseUint(h.Get(wire.DSHeaderProducerReceived), 10, 64); err == nil {
			e.ReceivedSeq = &v
		}
		if resp.StatusCode == http.StatusForbidden {
			if v, err := strconv.ParseUint(h.Get(wire.DSHeaderProducerEpoch), 10, 64); err == nil {
				e.CurrentEpoch = &v
			}
		}
		if v := h.Get(wire.DSHeaderNextOffset); v != "" {
			e.NextPosition = v
		}
		if e.Code == "" && resp.StatusCode == http.StatusConflict && strings.EqualFold(h.Get(wire.DSHeaderClosed), "true") {
			e.Code = wire.CodeStreamClosed
		}
	} else {
		if e.ExpectedSeq == nil {
			if v, err := strconv.ParseUint(h.Get(wire.HeaderProducerExpectedSeq), 10, 64); err == nil {
				e.ExpectedSeq = &v
			}
		}
		if e.NextPosition == "" && h.Get(wire.HeaderClosed) == "true" {
			e.NextPosition = h.Get(wire.HeaderNextOffset)
		}
	}
	e.RetryAfter = parseRetryAfter(h.Get("Retry-After"))
	e.Kind = kindOf(e.Status, e.Code)
	return e
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 if absent or bad.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 {
		return time.Duration(min(n, 3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return min(d, time.Hour)
		}
	}
	return 0
}
