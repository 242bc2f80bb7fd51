package httpx

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// detail is the JSON error detail of a service error: code and message,
// plus the numbers the typed errors in err's chain carry, so a client acts
// on them without parsing the message.
func detail(err error, code, msg string) wire.ErrorDetail {
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

// Answer is a frontend's answer to one kind of service error.
type Answer struct {
	Status int
	Code   string
}

// ErrorTable is one frontend's map from service error kind to its answer
// (api/pico/errors.go, api/ds/errors.go).
type ErrorTable map[stream.Kind]Answer

// Lookup returns the answer to err and its message. An error whose kind is
// not in the table is a server fault: logged with logMsg and attrs, and
// answered 500 without its text, which may name internals.
func (t ErrorTable) Lookup(log *slog.Logger, err error, logMsg string, attrs ...any) (Answer, string) {
	if a, ok := t[stream.KindOf(err)]; ok {
		return a, err.Error()
	}
	log.Error(logMsg, append(attrs, "err", err)...)
	return Answer{http.StatusInternalServerError, wire.CodeInternal}, "internal error"
}

// Detail answers a service error on a request: the table's status, and the
// JSON error detail with the numbers the typed errors in err's chain carry,
// so a client acts on them without parsing the message. A redirect sets
// Location and Pico-Owner on w. Both HTTP frontends build their error
// bodies here; each copies the numbers into its own headers.
func (t ErrorTable) Detail(log *slog.Logger, w http.ResponseWriter, r *http.Request, err error) (int, wire.ErrorDetail) {
	SetRedirect(w, r, err)
	a, msg := t.Lookup(log, err, "request failed", "method", r.Method, "path", r.URL.Path)
	return a.Status, detail(err, a.Code, msg)
}

// StreamMethods are a frontend's handlers of the five methods on a stream
// URL; both HTTP protocols give them the same meaning.
type StreamMethods struct {
	Create, Append, Read, Head, Delete func(http.ResponseWriter, *http.Request, string)
}

// Serve calls the handler of r's method on stream name; false means the
// method is none of them (the caller answers 405 its own way).
func (m StreamMethods) Serve(w http.ResponseWriter, r *http.Request, name string) bool {
	var f func(http.ResponseWriter, *http.Request, string)
	switch r.Method {
	case http.MethodPut:
		f = m.Create
	case http.MethodPost:
		f = m.Append
	case http.MethodGet:
		f = m.Read
	case http.MethodHead:
		f = m.Head
	case http.MethodDelete:
		f = m.Delete
	default:
		return false
	}
	f(w, r, name)
	return true
}
