package wire

import (
	"mime"
	"strings"
)

// MediaType returns the media type of a Content-Type value: lower-cased,
// parameters dropped. A value mime cannot parse is cut at its first ';' and
// trimmed, so a sloppy header still names its type the same way on every
// side (server, Go client, CLI).
func MediaType(ct string) string {
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
