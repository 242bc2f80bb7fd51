package ds

import (
	"strconv"
	"testing"
)

// FuzzReadQuery: any query string is accepted or refused without a
// panic; live reads always carry an offset.
func FuzzReadQuery(f *testing.F) {
	for _, s := range []string{"offset=-1", "offset=now&live=sse", "offset=0000000000000000_0000000000000005&live=long-poll&cursor=7",
		"live=sse", "offset=&live=sse", "offset=1&offset=2", "%zz", "offset=-1&live=bogus"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := parseReadQuery(raw)
		if err != nil {
			return
		}
		if q.live != "" && !q.hasOffset {
			t.Fatalf("%q: live read without an offset", raw)
		}
		if q.live != "" && q.live != liveLongPoll && q.live != liveSSE {
			t.Fatalf("%q: live %q", raw, q.live)
		}
	})
}

// FuzzProducerHeaders: Producer-Epoch/Producer-Seq and Stream-Seq style
// numbers are accepted only as canonical decimals within JSON's safe
// integer range.
func FuzzProducerHeaders(f *testing.F) {
	for _, s := range []string{"0", "1", "007", "-1", "+1", "9007199254740991", "9007199254740992", "1e3", " 1", "18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseProducerNumber(s)
		if err != nil {
			return
		}
		if n > maxSafeInteger {
			t.Fatalf("%q accepted as %d, above the safe integer range", s, n)
		}
		back, perr := strconv.ParseUint(s, 10, 64)
		if perr != nil || back != n {
			t.Fatalf("%q accepted as %d", s, n)
		}
		if isDecimal(s) != (strconv.FormatUint(n, 10) == s) {
			t.Fatalf("isDecimal(%q) disagrees with the canonical form", s)
		}
	})
}
