package pico

import (
	"encoding/base64"
	"strconv"
	"unicode/utf8"

	"github.com/PicoMQ/picomq/record"
)

// appendRecordsJSON renders records as a JSON array, by hand: reads are a hot
// path and reflection-based encoding allocates per field.
//
// Each element is
//
//	{"offset":N,"timestamp":MS,"key":"…","value":"…","headers":[{"key":"…","value":"…"}]}
//
// A key or value that is not valid UTF-8 (or every one, with forceBase64) is
// base64 and flagged with "keyEncoding"/"valueEncoding":"base64", so a client
// can always recover the exact bytes. A null key is omitted; a null value
// (a Kafka tombstone) is JSON null.
func appendRecordsJSON(dst []byte, recs []record.Record, forceBase64 bool) []byte {
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
		if r.Value == nil {
			dst = append(dst, `,"value":null`...)
		} else {
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

func appendBytesField(dst []byte, name string, b []byte, forceBase64 bool) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	if !forceBase64 && utf8.Valid(b) {
		return appendJSONString(dst, string(b))
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
