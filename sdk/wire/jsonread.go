package wire

import (
	"encoding/json"
	"fmt"
)

// JSONRecord is one element of a JSON read (docs/api.md#formats) and of an
// SSE data event: the shape the server writes (api/pico renders it by hand,
// for speed) and clients decode. Key and header values are text, UTF-8 or
// base64 as their encoding field says; nil is a null key or header value.
// Value is kept as raw JSON because its form depends on the stream: a
// string (text per ValueEncoding), null (a null value), or on a JSON
// stream the value itself embedded as JSON (ValueEncoding EncodingJSON
// where that would be ambiguous).
type JSONRecord struct {
	Offset        int64           `json:"offset"`
	Timestamp     int64           `json:"timestamp"`
	Key           *string         `json:"key"`
	KeyEncoding   string          `json:"keyEncoding"`
	Value         json.RawMessage `json:"value"`
	ValueEncoding string          `json:"valueEncoding"`
	Headers       []JSONHeader    `json:"headers"`
}

// ValueEmbedded reports whether the value is embedded as JSON, its own JSON
// text, rather than a string or null: on a JSON stream the server embeds
// values as JSON, so an object, array, number or boolean is the value's
// JSON text, and so is a string or null flagged valueEncoding "json"
// (docs/api.md#formats). Otherwise null is a null value (a tombstone) and
// a string is UTF-8 or base64 text.
func (r JSONRecord) ValueEmbedded() bool {
	v := r.Value
	return r.ValueEncoding == EncodingJSON || (len(v) > 0 && v[0] != '"' && string(v) != "null")
}

// ValueText is the stored value as text: an embedded value's JSON text, a
// string value's string (still in ValueEncoding: base64 stays encoded), or
// nil for a null value.
func (r JSONRecord) ValueText() (*string, error) {
	if r.ValueEmbedded() {
		v := string(r.Value)
		return &v, nil
	}
	if len(r.Value) == 0 || string(r.Value) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(r.Value, &s); err != nil {
		return nil, fmt.Errorf("wire: record value: %w", err)
	}
	return &s, nil
}

// JSONHeader is one record header of a JSONRecord.
type JSONHeader struct {
	Key           string  `json:"key"`
	Value         *string `json:"value"`
	ValueEncoding string  `json:"valueEncoding"`
}

// ControlEvent is the data of an SSE control event of a live=sse read
// (docs/api.md): the offset after the events so far, whether the reader has
// caught up, whether the stream is closed, and the cursor to echo.
type ControlEvent struct {
	NextOffset int64  `json:"nextOffset"`
	UpToDate   bool   `json:"upToDate"`
	Closed     bool   `json:"closed"`
	Cursor     string `json:"cursor"`
}
