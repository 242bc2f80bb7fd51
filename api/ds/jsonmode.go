package ds

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// JSON mode. A stream whose content type is application/json (parameters
// ignored) stores one record per JSON value: an append body that is a
// top-level array is flattened exactly one level, anything else is one
// value. Values are stored compacted (insignificant whitespace removed), so
// a read can join them into one array without reparsing, SSE lines never
// split inside a value, and a value's bytes are what Pico and Kafka readers
// of the same stream see.

var (
	errInvalidJSON = errors.New("body is not valid JSON")
	errEmptyArray  = errors.New("an empty JSON array appends nothing")
)

// isText reports whether a stream's data is sent as text on SSE: text/* and
// JSON. Everything else is base64-encoded, as the protocol requires.
func isText(ct string) bool {
	mt := wire.MediaType(ct)
	return strings.HasPrefix(mt, "text/") || mt == wire.MediaJSON
}

// flattenJSON turns a JSON-mode body into the values to store. allowEmpty
// permits "[]" (a create with an empty initial array is an empty stream;
// an append of one is an error).
//
// The body must be a JSON text, UTF-8 included (wire.IsJSONText, the one
// JSON predicate of the service: json.Compact alone lets invalid UTF-8
// inside strings through); json.Compact then compacts it. An array's
// elements are then the
// top-level pieces of the compacted array between its commas, which are
// each element compacted. The values share the compacted copy (each
// capped, so an append to one cannot overwrite the next).
func flattenJSON(body []byte, allowEmpty bool) ([][]byte, error) {
	if !wire.IsJSONText(body) {
		return nil, errInvalidJSON
	}
	var buf bytes.Buffer
	buf.Grow(len(body))
	if err := json.Compact(&buf, body); err != nil {
		return nil, errInvalidJSON
	}
	c := buf.Bytes()
	if c[0] != '[' {
		return [][]byte{c}, nil
	}
	if len(c) == 2 { // "[]"
		if allowEmpty {
			return nil, nil
		}
		return nil, errEmptyArray
	}
	var out [][]byte
	depth, inString, escaped, from := 0, false, false, 1
	for i := 1; i < len(c)-1; i++ {
		b := c[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '[' || b == '{':
			depth++
		case b == ']' || b == '}':
			depth--
		case b == ',' && depth == 0:
			out = append(out, c[from:i:i])
			from = i + 1
		}
	}
	return append(out, c[from:len(c)-1:len(c)-1]), nil
}

// appendJSONArray appends the values of recs as one JSON array. Records
// written by other protocols into a JSON stream may hold anything: a null
// value (a Kafka or Pico tombstone) is JSON null, and a value that is not
// a JSON text (wire.IsJSONText) is embedded as a JSON string so the
// response stays parseable and valid UTF-8 (json.Marshal replaces invalid
// bytes with U+FFFD).
func appendJSONArray(dst []byte, recs []record.Record) []byte {
	dst = append(dst, '[')
	for i, r := range recs {
		if i > 0 {
			dst = append(dst, ',')
		}
		if r.Value == nil {
			dst = append(dst, "null"...)
			continue
		}
		if wire.IsJSONText(r.Value) {
			dst = append(dst, bytes.TrimSpace(r.Value)...)
			continue
		}
		s, _ := json.Marshal(string(r.Value))
		dst = append(dst, s...)
	}
	return append(dst, ']')
}

// appendConcat appends the values of recs back to back: a non-JSON stream
// is a byte stream and a read returns its bytes.
func appendConcat(dst []byte, recs []record.Record) []byte {
	for _, r := range recs {
		dst = append(dst, r.Value...)
	}
	return dst
}
