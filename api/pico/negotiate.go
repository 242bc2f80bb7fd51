package pico

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// readFormat is the representation of a read response.
type readFormat int

const (
	formatJSON readFormat = iota
	formatBinary
	formatRaw
	formatBatches
)

func (f readFormat) String() string {
	switch f {
	case formatBinary:
		return wire.FormatBinary
	case formatRaw:
		return wire.FormatRaw
	case formatBatches:
		return wire.FormatBatches
	}
	return wire.FormatJSON
}

var errNotAcceptable = errors.New("not acceptable")

// chooseFormat picks the read format: the format query parameter if given,
// else the Accept header. Accept is matched per media range, best q first
// (ties in the client's order):
//
//	application/vnd.picomq.batch     binary (the Pico record codec)
//	application/vnd.picomq.recordbatches  stored batches (binary where a page cannot be)
//	application/json                 JSON records
//	the stream's own content type    raw values (unless it is a JSON type)
//	*/*, application/*, or no Accept JSON records
//
// A client whose Accept matches nothing gets 406: a server that silently
// answered JSON to "Accept: text/csv" would be guessing.
func chooseFormat(query, accept, streamCT string) (readFormat, error) {
	switch query {
	case wire.FormatJSON:
		return formatJSON, nil
	case wire.FormatBinary:
		return formatBinary, nil
	case wire.FormatRaw:
		return formatRaw, nil
	case wire.FormatBatches:
		return formatBatches, nil
	case "":
	default:
		return 0, fmt.Errorf("format=%q: want json, binary, raw or batches", query)
	}
	if strings.TrimSpace(accept) == "" {
		return formatJSON, nil
	}
	own := baseType(streamCT)
	best, bestQ := readFormat(-1), 0.0
	for _, part := range strings.Split(accept, ",") {
		mt, q, ok := parseMediaRange(part)
		if !ok || q <= 0 || q <= bestQ {
			continue
		}
		f := readFormat(-1)
		switch {
		case mt == wire.MediaBatch:
			f = formatBinary
		case mt == wire.MediaRecordBatches:
			f = formatBatches
		case mt == wire.MediaJSON, mt == "*/*", mt == "application/*":
			f = formatJSON
		case mt == own && !wire.IsJSON(own):
			// Concatenated JSON values are not one JSON document, so a raw
			// read never answers a request for a JSON type.
			f = formatRaw
		}
		if f >= 0 {
			best, bestQ = f, q
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("%w: Accept %q: this endpoint serves %s, %s, %s or the stream's %s",
			errNotAcceptable, accept, wire.MediaJSON, wire.MediaBatch, wire.MediaRecordBatches, streamCT)
	}
	return best, nil
}

// parseMediaRange parses one element of an Accept header into its
// lower-cased type/subtype and q (default 1). Malformed elements are
// skipped by the caller rather than failing the request, as RFC 9110
// recommends for robustness.
func parseMediaRange(s string) (string, float64, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", 0, false
	}
	mt, params, err := mime.ParseMediaType(s)
	if err != nil {
		return "", 0, false
	}
	q := 1.0
	if v, ok := params["q"]; ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1 {
			return "", 0, false
		}
		q = f
	}
	return mt, q, true
}

// baseType is the lower-cased type/subtype of a content type, without
// parameters ("" if it does not parse).
func baseType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return mt
}

// bodyShape is how an append body is to be read.
type bodyShape int

const (
	shapeSingle bodyShape = iota
	shapeJSONBatch
	shapeBinaryBatch
)

var errUnsupportedMedia = errors.New("unsupported media type")

// appendShape decides from the request Content-Type whether the body is one
// record or a batch envelope. The batch media types are envelopes: their
// record values are checked against the stream's content type instead.
func appendShape(ct string) (bodyShape, string, error) {
	if strings.TrimSpace(ct) == "" {
		return shapeSingle, "", nil
	}
	mt := ct // a plain type/subtype is its own media type: no parse, no map
	if !wire.IsPlainMediaType(ct) {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return 0, "", fmt.Errorf("%w: Content-Type %q: %v", errUnsupportedMedia, ct, err)
		}
	}
	switch mt {
	case wire.MediaBatchJSON:
		return shapeJSONBatch, mt, nil
	case wire.MediaBatch:
		return shapeBinaryBatch, mt, nil
	}
	if strings.HasPrefix(mt, "application/vnd.picomq.") {
		return 0, "", fmt.Errorf("%w: %s is not a Pico media type (batches are %s or %s)", errUnsupportedMedia, mt, wire.MediaBatchJSON, wire.MediaBatch)
	}
	return shapeSingle, mt, nil
}

// isEnvelope reports whether a content type is one of the Pico batch
// envelopes, which a stream cannot hold as its own content type: an append
// with that Content-Type would be ambiguous.
func isEnvelope(ct string) bool {
	mt := baseType(ct)
	return strings.HasPrefix(mt, "application/vnd.picomq.")
}

// maxProducerIDLen bounds Pico-Producer-Id: it is stored in every WAL entry
// of the producer, so it must stay small.
const maxProducerIDLen = 256

var errBadProducer = errors.New("invalid producer headers")

// parseProducer reads the three Pico-Producer-* headers. All three or none:
// a request with only some of them would be silently non-idempotent.
func parseProducer(h http.Header) (*stream.Producer, error) {
	id, hasID := headerValue(h, wire.HeaderProducerID)
	ep, hasEpoch := headerValue(h, wire.HeaderProducerEpoch)
	sq, hasSeq := headerValue(h, wire.HeaderProducerSeq)
	if !hasID && !hasEpoch && !hasSeq {
		return nil, nil
	}
	if !hasID || !hasEpoch || !hasSeq {
		return nil, fmt.Errorf("%w: %s, %s and %s go together", errBadProducer,
			wire.HeaderProducerID, wire.HeaderProducerEpoch, wire.HeaderProducerSeq)
	}
	if id == "" || len(id) > maxProducerIDLen {
		return nil, fmt.Errorf("%w: %s must be 1 to %d bytes", errBadProducer, wire.HeaderProducerID, maxProducerIDLen)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return nil, fmt.Errorf("%w: %s must be visible ASCII", errBadProducer, wire.HeaderProducerID)
		}
	}
	epoch, err := httpx.ParseUint(ep)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %q: %v", errBadProducer, wire.HeaderProducerEpoch, ep, err)
	}
	seq, err := httpx.ParseUint(sq)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %q: %v", errBadProducer, wire.HeaderProducerSeq, sq, err)
	}
	return &stream.Producer{ID: producerNamespace + id, Epoch: epoch, Seq: seq}, nil
}

// producerNamespace keeps Pico producer ids apart from other protocols'.
const producerNamespace = "pico:"

// headerValue returns the single value of a header; a repeated header is
// treated as its first value (RFC 9110 forbids repeating singleton fields).
func headerValue(h http.Header, name string) (string, bool) {
	vs, ok := h[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return strings.TrimSpace(vs[0]), true
}

// parseNonNegativeHeader reads an optional non-negative int64 header.
func parseNonNegativeHeader(h http.Header, name string) (int64, bool, error) {
	v, ok := headerValue(h, name)
	if !ok {
		return 0, false, nil
	}
	n, err := httpx.ParseUint(v)
	if err != nil || n > 1<<62 {
		return 0, true, fmt.Errorf("%s %q: want a non-negative integer", name, v)
	}
	return int64(n), true, nil
}
