package pico

import (
	"bytes"
	"encoding/json"
	"net/url"
	"testing"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// FuzzReadQuery: any query string gives read parameters or a 400 with an
// error code, never a panic, and accepted parameters are in range.
func FuzzReadQuery(f *testing.F) {
	for _, s := range []string{"offset=0", "offset=5&limit=10&live=long-poll&cursor=abc", "live=sse&encoding=base64",
		"offset=-1", "offset=99999999999999999999", "limit=1e3", "offset=1&offset=2", "max_bytes=%FF", "live=bogus", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		p, status, code, err := parseReadParams(q)
		if err != nil {
			if status != 400 || code == "" {
				t.Fatalf("%q: error %v with status %d code %q", raw, err, status, code)
			}
			return
		}
		if p.offset < 0 || p.limit < 0 || p.maxBytes < 0 {
			t.Fatalf("%q: negative parameters %+v", raw, p)
		}
		if p.live != "" && p.live != wire.LiveLongPoll && p.live != wire.LiveSSE {
			t.Fatalf("%q: live %q", raw, p.live)
		}
	})
}

// FuzzSSEPage: record bytes of any kind render as one JSON line, so a
// record can never end an SSE event or inject a field; the control event
// is one line too, whatever cursor the client sent.
func FuzzSSEPage(f *testing.F) {
	f.Add([]byte("v"), []byte("k"), "h", []byte("hv"), "cursor")
	f.Add([]byte("a\n\nevent: control\ndata: {}\n\n"), []byte("\r\n"), "x\ny", []byte{0xff, 0, '\n'}, "c\r\nevent: x")
	f.Add([]byte{0xe2, 0x80, 0xa8}, []byte(nil), "", []byte(nil), "\u2028")
	f.Add([]byte("{\"a\":\r\n[1,\n2]}\n"), []byte("k"), "h", []byte(nil), "")
	f.Add([]byte("v"), []byte(nil), "", []byte(nil), "4611686018427387903")
	h := New(nil, Config{})
	f.Fuzz(func(t *testing.T, value, key []byte, hk string, hv []byte, cursor string) {
		recs := []record.Record{{Offset: 1, Timestamp: 2, Key: key, Value: value, Headers: []record.Header{{Key: hk, Value: hv}}}}
		for _, b64 := range []bool{false, true} {
			for _, jsonValues := range []bool{false, true} {
				out := appendRecordsJSON(nil, recs, b64, jsonValues)
				if bytes.ContainsAny(out, "\r\n") {
					t.Fatalf("page %q holds a line break", out)
				}
				if !json.Valid(out) {
					t.Fatalf("page %q is not JSON", out)
				}
			}
		}
		ctl := appendControl(nil, ssePage{next: 3}, h.nextCursorValue(cursor))
		if bytes.ContainsAny(ctl, "\r\n") || !json.Valid(ctl) {
			t.Fatalf("control %q", ctl)
		}
	})
}
