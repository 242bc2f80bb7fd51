package wire

import (
	"encoding/json"
	"mime"
	"strings"
	"unicode/utf8"
)

// MediaType returns the media type of a Content-Type value: lower-cased,
// parameters dropped. A value mime cannot parse is cut at its first ';' and
// trimmed, so a sloppy header still names its type the same way on every
// side (server, Go client, CLI).
func MediaType(ct string) string {
	if IsPlainMediaType(ct) {
		return ct // what mime would return, without its parameter map
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		mt, _, _ = strings.Cut(ct, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
	}
	return mt
}

// IsJSON reports whether a stream of content type ct holds JSON values:
// application/json or a +json structured-syntax suffix (RFC 6839), such as
// application/ld+json. Appends to such a stream must be valid JSON, whatever
// protocol they arrive on. This is the one place that decides it.
func IsJSON(ct string) bool {
	mt := MediaType(ct)
	return mt == MediaJSON || strings.HasSuffix(mt, "+json")
}

// IsDSJSONMode reports whether a Durable Streams stream of content type ct
// is in the protocol's JSON mode (an appended top-level array is flattened
// one level, reads return one JSON array, fork sub-offsets count values).
// The protocol fixes this to application/json alone, parameters ignored, so
// it is narrower than IsJSON.
func IsDSJSONMode(ct string) bool { return MediaType(ct) == MediaJSON }

// IsJSONText reports whether a record value v can be embedded as JSON in a
// JSON read of a JSON stream (docs/api.md#formats): valid JSON and valid
// UTF-8 (encoding/json's validator does not check the bytes inside
// strings). Records written by Kafka producers into a JSON stream may be
// neither; they are rendered as strings or base64 as on any stream.
func IsJSONText(v []byte) bool {
	return utf8.Valid(v) && json.Valid(v)
}

// JSONValueFlagged reports whether a JSON text embedded as a record value
// needs "valueEncoding":"json": a JSON string or null would otherwise read
// as a text value or a tombstone. Objects, arrays, numbers and booleans are
// unambiguous. v must satisfy IsJSONText.
func JSONValueFlagged(v []byte) bool {
	for _, c := range v {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '"' || c == 'n'
	}
	return false
}

// IsPlainMediaType reports whether ct is a bare lower-case "type/subtype"
// of RFC 2045 token characters: no parameters, spaces or upper case. Such a
// value is its own media type, and mime.ParseMediaType accepts it with no
// parameters, so the append path compares it without parsing (most
// Content-Types a client sends look like this).
func IsPlainMediaType(ct string) bool {
	slash := -1
	for i := 0; i < len(ct); i++ {
		c := ct[i]
		switch {
		case c == '/':
			if slash >= 0 {
				return false
			}
			slash = i
		case c <= ' ' || c >= 0x7f || ('A' <= c && c <= 'Z') || strings.IndexByte(`()<>@,;:\"[]?=`, c) >= 0:
			return false
		}
	}
	return slash > 0 && slash < len(ct)-1
}
