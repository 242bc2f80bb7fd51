package wire

import "encoding/json"

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
