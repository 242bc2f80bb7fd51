package pico

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// appendRecordsJSON renders records as a JSON array, by hand: reads are a hot
// path and reflection-based encoding allocates per field.
//
// Each element is a wire.JSONRecord:
//
//	{"offset":N,"timestamp":MS,"key":"…","value":"…","headers":[{"key":"…","value":"…"}]}
//
// A key or value that is not valid UTF-8 (or every one, with forceBase64) is
// base64 and flagged with "keyEncoding"/"valueEncoding":"base64", so a client
// can always recover the exact bytes. A null key is omitted; a null value
// (a Kafka tombstone) is JSON null.
//
// With jsonValues (the stream's content type is JSON) a value that is JSON
// text is embedded as JSON ("value":{"item":"widget"}), the shape a JSON
// batch append takes, so jq '.[].value.item' works; see appendJSONValue.
func appendRecordsJSON(dst []byte, recs []record.Record, forceBase64, jsonValues bool) []byte {
	dst = append(dst, '[')
	for i := range recs {
		r := &recs[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"offset":`...)
		dst = strconv.AppendInt(dst, r.Offset, 10)
		dst = append(dst, `,"timestamp":`...)
		dst = strconv.AppendInt(dst, r.Timestamp, 10)
		if r.Key != nil {
			dst = appendBytesField(dst, "key", r.Key, forceBase64)
		}
		switch {
		case r.Value == nil:
			dst = append(dst, `,"value":null`...)
		case jsonValues && !forceBase64 && wire.IsJSONText(r.Value):
			dst = appendJSONValue(dst, r.Value)
		default:
			dst = appendBytesField(dst, "value", r.Value, forceBase64)
		}
		if len(r.Headers) > 0 {
			dst = append(dst, `,"headers":[`...)
			for j, h := range r.Headers {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"key":`...)
				dst = appendJSONString(dst, h.Key)
				if h.Value == nil {
					dst = append(dst, `,"value":null`...)
				} else {
					dst = appendBytesField(dst, "value", h.Value, forceBase64)
				}
				dst = append(dst, '}')
			}
			dst = append(dst, ']')
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendJSONValue appends the field "value" holding the JSON text v as JSON.
// Objects, arrays, numbers and booleans are unambiguous; a JSON string or
// null would read like a text value or a tombstone, so those carry
// "valueEncoding":"json" (which a JSON batch append takes back as the same
// value). A value with raw line breaks between tokens is compacted, so an
// SSE data line never splits inside it; other whitespace is kept.
func appendJSONValue(dst []byte, v []byte) []byte {
	v = bytes.TrimSpace(v)
	dst = append(dst, `,"value":`...)
	if bytes.ContainsAny(v, "\r\n") {
		buf := bytes.NewBuffer(dst)
		_ = json.Compact(buf, v) // v is valid JSON (wire.IsJSONText)
		dst = buf.Bytes()
	} else {
		dst = append(dst, v...)
	}
	if wire.JSONValueFlagged(v) {
		dst = append(dst, `,"valueEncoding":"json"`...)
	}
	return dst
}

func appendBytesField(dst []byte, name string, b []byte, forceBase64 bool) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	if !forceBase64 && utf8.Valid(b) {
		// A view, not a copy (string(b) allocated once per record per
		// page): appendJSONString only reads s and keeps nothing of it.
		return appendJSONString(dst, unsafe.String(unsafe.SliceData(b), len(b)))
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	dst = append(dst, `","`...)
	dst = append(dst, name...)
	return append(dst, `Encoding":"base64"`...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string literal. s must be valid UTF-8
// (invalid bytes are replaced by U+FFFD, as encoding/json does).
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break JavaScript eval'd
		// as script; escape them as encoding/json does.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func estimateSize(recs []record.Record) int {
	n := 0
	for i := range recs {
		n += 64 + len(recs[i].Key) + len(recs[i].Value)
	}
	return n
}
