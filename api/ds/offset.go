package ds

import (
	"errors"
	"fmt"
	"strconv"
)

// Offsets on the wire. The protocol treats offsets as opaque, unique,
// strictly increasing, lexicographically sortable strings, and its
// conformance suite hard-codes the "%016d_%016d" shape (all zeros = the
// start). PicoMQ fills it as "<generation>_<record offset>":
//
//   - the record offset is the stream's Kafka-style offset of the next record
//     to read, so a DS offset, a Pico offset and a Kafka offset of the same
//     stream name the same position;
//   - the generation is always 0 today. It is reserved for a future history
//     rewrite, so offsets handed out before one can be told apart (and
//     refused) instead of silently meaning another record.
//
// Zero padding keeps lexicographic order equal to numeric order up to 10^16
// records. The sentinels "-1" (start) and "now" (tail) are never produced.
const offsetDigits = 16

// maxWireOffset is the largest record offset the fixed-width form can carry.
const maxWireOffset = 9999999999999999

// Sentinel offsets a client may send.
const (
	offsetStart = "-1"
	offsetNow   = "now"
)

var errBadOffset = errors.New("invalid offset")

// formatOffset renders record offset n in the wire form.
func formatOffset(n int64) string {
	var b [2*offsetDigits + 1]byte
	for i := range offsetDigits {
		b[i] = '0'
	}
	b[offsetDigits] = '_'
	for i := len(b) - 1; i > offsetDigits; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[:])
}

// offsetSpec is a parsed offset parameter.
type offsetSpec struct {
	now    bool  // "now": the tail at the time of the request
	record int64 // the record offset otherwise ("-1" is 0)
}

// parseOffset parses a client offset: "-1", "now", or "<generation>_<offset>"
// with 1 to 16 decimal digits on each side. Anything else — signs, spaces,
// separators, path tricks, control characters — is rejected, so an offset
// can never be mistaken for another value or smuggle characters into logs
// or cache keys.
func parseOffset(s string) (offsetSpec, error) {
	switch s {
	case offsetStart:
		return offsetSpec{record: 0}, nil
	case offsetNow:
		return offsetSpec{now: true}, nil
	}
	sep := -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' && sep < 0 {
			sep = i
			continue
		}
		if c < '0' || c > '9' {
			return offsetSpec{}, fmt.Errorf("%w %q: want -1, now, or an offset returned by this server", errBadOffset, truncateForMessage(s))
		}
	}
	if sep < 1 || sep > offsetDigits || len(s)-sep-1 < 1 || len(s)-sep-1 > offsetDigits {
		return offsetSpec{}, fmt.Errorf("%w %q: want -1, now, or an offset returned by this server", errBadOffset, truncateForMessage(s))
	}
	gen, err := strconv.ParseUint(s[:sep], 10, 64)
	if err != nil {
		return offsetSpec{}, fmt.Errorf("%w %q", errBadOffset, truncateForMessage(s))
	}
	if gen != 0 {
		return offsetSpec{}, fmt.Errorf("%w %q: unknown log generation %d", errBadOffset, truncateForMessage(s), gen)
	}
	n, err := strconv.ParseInt(s[sep+1:], 10, 64)
	if err != nil {
		return offsetSpec{}, fmt.Errorf("%w %q", errBadOffset, truncateForMessage(s))
	}
	return offsetSpec{record: n}, nil
}

// truncateForMessage keeps error messages bounded and printable: bad input is
// echoed with %q, which escapes control characters, but never in full.
func truncateForMessage(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
