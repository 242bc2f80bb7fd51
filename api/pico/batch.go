package pico

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

// errBadBatch marks every error of the three append body parsers, so the
// handler answers 400 invalid_batch (or invalid_header) with the parser's
// message, never 500.
var errBadBatch = errors.New("invalid batch")

// errBadHeader marks a malformed Pico-Header-* field.
var errBadHeader = errors.New("invalid record header")

func batchErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadBatch, fmt.Sprintf(format, args...))
}

// batchLimits bound what one append may carry. They are checked while
// parsing, before anything is written, so a rejected append writes nothing.
type batchLimits struct {
	maxRecords     int // records per append
	maxRecordBytes int // key + value + header keys and values of one record
	maxHeaders     int // headers per record
}

// recordSize is what maxRecordBytes limits.
func recordSize(r *record.Record) int {
	n := len(r.Key) + len(r.Value)
	for i := range r.Headers {
		n += len(r.Headers[i].Key) + len(r.Headers[i].Value)
	}
	return n
}

// errTooLarge and errTooMany mark limit violations (413).
var (
	errRecordTooLarge = errors.New("record too large")
	errTooManyRecords = errors.New("too many records")
)

func (l batchLimits) check(recs []record.Record) error {
	if len(recs) == 0 {
		return batchErrorf("an append needs at least one record")
	}
	if len(recs) > l.maxRecords {
		return fmt.Errorf("%w: %d records in one append, the limit is %d", errTooManyRecords, len(recs), l.maxRecords)
	}
	for i := range recs {
		if len(recs[i].Headers) > l.maxHeaders {
			return batchErrorf("record %d has %d headers, the limit is %d", i, len(recs[i].Headers), l.maxHeaders)
		}
		if n := recordSize(&recs[i]); n > l.maxRecordBytes {
			return fmt.Errorf("%w: record %d is %d bytes (key, value and headers), the limit is %d", errRecordTooLarge, i, n, l.maxRecordBytes)
		}
	}
	return nil
}

// parseRecordHeaders turns the Pico-Header-<name> fields of a single-body
// append into record headers. HTTP field names are case-insensitive and Go
// canonicalises them, so the record header name is the lower-cased rest of
// the field name; values are taken byte for byte. Names are sorted so the
// stored order does not depend on map iteration; repeated fields of one name
// keep their order. Clients that need exact case, order or binary values
// use a batch body instead.
func parseRecordHeaders(h http.Header, maxHeaders int) ([]record.Header, error) {
	var names []string
	n := 0
	for k, vs := range h {
		if len(k) >= len(wire.HeaderRecordHeaderPrefix) && strings.EqualFold(k[:len(wire.HeaderRecordHeaderPrefix)], wire.HeaderRecordHeaderPrefix) {
			if len(k) == len(wire.HeaderRecordHeaderPrefix) {
				return nil, fmt.Errorf("%w: %q has no name after the prefix", errBadHeader, k)
			}
			names = append(names, k)
			n += len(vs)
		}
	}
	if n == 0 {
		return nil, nil
	}
	if n > maxHeaders {
		return nil, fmt.Errorf("%w: %d record headers, the limit is %d", errBadHeader, n, maxHeaders)
	}
	sort.Strings(names)
	out := make([]record.Header, 0, n)
	for _, k := range names {
		key := strings.ToLower(k[len(wire.HeaderRecordHeaderPrefix):])
		for _, v := range h[k] {
			out = append(out, record.Header{Key: key, Value: []byte(v)})
		}
	}
	return out, nil
}

// jsonInRecord is one element of a JSON batch. It mirrors what JSON reads
// return, so a page read from one stream can be posted to another as is:
// offset and timestamp are accepted and ignored (the server assigns both).
type jsonInRecord struct {
	Offset        *int64          `json:"offset"`
	Timestamp     *int64          `json:"timestamp"`
	Key           json.RawMessage `json:"key"`
	KeyEncoding   string          `json:"keyEncoding"`
	Value         json.RawMessage `json:"value"`
	ValueEncoding string          `json:"valueEncoding"`
	Headers       []jsonInHeader  `json:"headers"`
}

type jsonInHeader struct {
	Key           *string         `json:"key"`
	Value         json.RawMessage `json:"value"`
	ValueEncoding string          `json:"valueEncoding"`
}

// parseJSONBatch parses an application/vnd.picomq.batch+json body: a JSON
// array of records
//
//	{"key": "k", "value": …, "headers": [{"key": "h", "value": "v"}],
//	 "keyEncoding": "utf8"|"base64", "valueEncoding": "utf8"|"base64"|"json"}
//
// value is required (null is a null value, a Kafka tombstone). A string
// value is its UTF-8 bytes, or base64 with valueEncoding "base64"; any
// other JSON value (object, array, number, boolean) is stored as its JSON
// text, as is a string with valueEncoding "json". Keys and header values
// are strings (utf8 or base64) or null. Unknown fields are errors, so a
// typo never silently drops data. The body must be a JSON text, UTF-8
// included (wire.IsJSONText): the decoder would otherwise turn invalid
// bytes in a key or value string into U+FFFD, storing other bytes than
// were sent.
func parseJSONBatch(body []byte, lim batchLimits) ([]record.Record, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var in []jsonInRecord
	if err := dec.Decode(&in); err != nil {
		return nil, batchErrorf("JSON batch: %s", describeJSONError(err))
	}
	if !wire.IsJSONText(body) { // after Decode, whose errors say where the syntax fails
		return nil, batchErrorf("JSON batch: invalid UTF-8 in a string")
	}
	if in == nil {
		return nil, batchErrorf("JSON batch: want an array of records, got null")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, batchErrorf("JSON batch: data after the array")
	}
	if len(in) > lim.maxRecords {
		return nil, fmt.Errorf("%w: %d records in one append, the limit is %d", errTooManyRecords, len(in), lim.maxRecords)
	}
	recs := make([]record.Record, len(in))
	nh := 0
	for i := range in {
		nh += len(in[i].Headers)
	}
	hdrs := make([]record.Header, nh)
	for i := range in {
		r := &in[i]
		var err error
		if recs[i].Key, err = jsonBytes(r.Key, r.KeyEncoding, false); err != nil {
			return nil, batchErrorf("record %d: key: %v", i, err)
		}
		if r.Value == nil {
			return nil, batchErrorf("record %d: value is required (null for a null value)", i)
		}
		if recs[i].Value, err = jsonBytes(r.Value, r.ValueEncoding, true); err != nil {
			return nil, batchErrorf("record %d: value: %v", i, err)
		}
		if len(r.Headers) > lim.maxHeaders {
			return nil, batchErrorf("record %d has %d headers, the limit is %d", i, len(r.Headers), lim.maxHeaders)
		}
		if len(r.Headers) > 0 {
			recs[i].Headers = hdrs[:len(r.Headers):len(r.Headers)]
			hdrs = hdrs[len(r.Headers):]
		}
		for j, h := range r.Headers {
			if h.Key == nil {
				return nil, batchErrorf("record %d header %d: key is required", i, j)
			}
			v, err := jsonBytes(h.Value, h.ValueEncoding, false)
			if err != nil {
				return nil, batchErrorf("record %d header %q: value: %v", i, *h.Key, err)
			}
			recs[i].Headers[j] = record.Header{Key: *h.Key, Value: v}
		}
	}
	if err := lim.check(recs); err != nil {
		return nil, err
	}
	return recs, nil
}

// jsonBytes decodes one bytes field of a JSON batch (see parseJSONBatch).
// Absent and null are nil; anyJSON allows non-string values as JSON text.
func jsonBytes(raw json.RawMessage, enc string, anyJSON bool) ([]byte, error) {
	if raw == nil || string(raw) == "null" {
		if raw != nil && anyJSON && enc == wire.EncodingJSON {
			// The JSON value null, stored as its text: what a JSON read
			// of a JSON stream returns for one, unlike a tombstone.
			return []byte("null"), nil
		}
		if enc != "" && enc != wire.EncodingUTF8 && enc != wire.EncodingBase64 {
			return nil, fmt.Errorf("unknown encoding %q", enc)
		}
		return nil, nil
	}
	if raw[0] != '"' {
		if !anyJSON {
			return nil, fmt.Errorf("want a string or null, got %s", firstBytes(raw))
		}
		if enc != "" && enc != wire.EncodingJSON {
			return nil, fmt.Errorf("a non-string value cannot have encoding %q", enc)
		}
		return []byte(raw), nil
	}
	switch enc {
	case wire.EncodingJSON:
		if anyJSON {
			return []byte(raw), nil
		}
		return nil, fmt.Errorf("unknown encoding %q (want utf8 or base64)", enc)
	case "", wire.EncodingUTF8, wire.EncodingBase64:
	default:
		return nil, fmt.Errorf("unknown encoding %q", enc)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	if enc == wire.EncodingBase64 {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("invalid base64: %v", err)
		}
		return b, nil
	}
	return []byte(s), nil
}

func firstBytes(b []byte) string {
	if len(b) > 20 {
		return string(b[:20]) + "…"
	}
	return string(b)
}

// parseBinaryBatch decodes an application/vnd.picomq.batch body (the Pico
// record codec) into records that alias body. dst is reused if large
// enough.
func parseBinaryBatch(body []byte, lim batchLimits, scratch []codec.Record) ([]record.Record, []codec.Record, error) {
	// The record count is checked before decoding, so a batch over the
	// limit gets 413 too_many_records like the other shapes, not a decode
	// error.
	if len(body) >= codec.FrameHeaderSize && [4]byte(body[:4]) == codec.Magic {
		if n := binary.BigEndian.Uint32(body[4:8]); uint64(n) > uint64(lim.maxRecords) {
			return nil, scratch, fmt.Errorf("%w: %d records in one append, the limit is %d", errTooManyRecords, n, lim.maxRecords)
		}
	}
	crecs, err := codec.Decode(body, scratch, codec.Limits{MaxRecords: lim.maxRecords, MaxHeaders: lim.maxHeaders})
	if err != nil {
		return nil, crecs, fmt.Errorf("%w: %v", errBadBatch, err)
	}
	recs := make([]record.Record, len(crecs))
	nh := 0
	for i := range crecs {
		nh += len(crecs[i].Headers)
	}
	var hdrs []record.Header
	if nh > 0 {
		hdrs = make([]record.Header, nh)
	}
	for i := range crecs {
		c := &crecs[i]
		recs[i] = record.Record{Key: c.Key, Value: c.Value}
		if len(c.Headers) > 0 {
			hs := hdrs[:len(c.Headers):len(c.Headers)]
			hdrs = hdrs[len(c.Headers):]
			for j := range c.Headers {
				hs[j] = record.Header{Key: c.Headers[j].Key, Value: c.Headers[j].Value}
			}
			recs[i].Headers = hs
		}
	}
	if err := lim.check(recs); err != nil {
		return nil, crecs, err
	}
	return recs, crecs, nil
}

// appendRecordsBinary renders records as one Pico codec frame.
func appendRecordsBinary(dst []byte, recs []record.Record) []byte {
	dst = codec.AppendFrameHeader(dst, len(recs))
	for i := range recs {
		dst = appendRecordsBinaryOne(dst, &recs[i])
	}
	return dst
}

// appendRecordsBinaryOne appends one record of the binary frame.
func appendRecordsBinaryOne(dst []byte, r *record.Record) []byte {
	dst, start := codec.BeginRecord(dst, r.Offset, r.Timestamp, r.Key, r.Value, len(r.Headers))
	for j := range r.Headers {
		dst = codec.AppendHeader(dst, r.Headers[j].Key, r.Headers[j].Value)
	}
	return codec.EndRecord(dst, start)
}

// binarySize / rawSize size the output buffers exactly.
func binarySize(recs []record.Record) int {
	n := codec.FrameHeaderSize
	for i := range recs {
		n += codec.RecordOverhead + len(recs[i].Key) + len(recs[i].Value)
		for j := range recs[i].Headers {
			n += codec.HeaderOverhead + len(recs[i].Headers[j].Key) + len(recs[i].Headers[j].Value)
		}
	}
	return n
}

func rawSize(recs []record.Record) int {
	n := 0
	for i := range recs {
		n += len(recs[i].Value)
	}
	return n
}

// describeJSONError says what a JSON batch should have looked like where
// encoding/json would name a Go type ("cannot unmarshal object into Go
// value of type []pico.jsonInRecord").
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	if te.Field == "" {
		if strings.HasPrefix(te.Type.String(), "[]") {
			return fmt.Sprintf("want an array of records, [{\"value\": …}, …], got a JSON %s", te.Value)
		}
		return fmt.Sprintf("each record must be a JSON object with a \"value\", got a JSON %s (at byte %d)", te.Value, te.Offset)
	}
	want := "a string or null"
	if te.Field == "headers" {
		want = "an array of {\"key\": string, \"value\": string or null}"
	}
	return fmt.Sprintf("field %q: want %s, got a JSON %s (at byte %d)", te.Field, want, te.Value, te.Offset)
}
