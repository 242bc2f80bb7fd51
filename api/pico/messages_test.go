package pico

import (
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// TestErrorMessagesSayWhatIsWrong: the messages a new user meets name the
// character, the real readable range, the expected shape and the parameter
// at fault, never a Go type or a mis-decoded byte.
func TestErrorMessagesSayWhatIsWrong(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})

	// A percent-encoded UTF-8 name is judged after decoding: the message
	// names the character itself.
	d := wantError(t, s.do("PUT", "/a/caf%C3%A9", nil, "Content-Type", "text/plain"), 400, wire.CodeInvalidName, "non-ASCII name")
	if !strings.Contains(d.Message, "é") || strings.Contains(d.Message, "Ã") || !strings.Contains(d.Message, "ASCII") {
		t.Errorf("non-ASCII name: message %q should name 'é' and the ASCII rule", d.Message)
	}

	// After a trim the range starts at the start offset, not 0.
	s.create("/t", "text/plain")
	for range 10 {
		wantStatus(t, s.do("POST", "/t", []byte("x"), "Content-Type", "text/plain"), 200, "append")
	}
	wantStatus(t, s.do("PATCH", "/_streams/t", []byte(`{"trimBefore":4}`), "Content-Type", "application/json"), 200, "trim")
	d = wantError(t, s.do("GET", "/t?offset=11", nil), 416, wire.CodeOffsetOutOfRange, "read past the end")
	if !strings.Contains(d.Message, "[4, 10]") {
		t.Errorf("offset out of range after a trim: message %q, want the range [4, 10]", d.Message)
	}

	// A JSON batch that is not an array says what shape was expected.
	d = wantError(t, s.do("POST", "/t", []byte(`{}`), "Content-Type", wire.MediaBatchJSON), 400, wire.CodeInvalidBatch, "object as a batch")
	if strings.Contains(d.Message, "jsonInRecord") || strings.Contains(d.Message, "Go value") || !strings.Contains(d.Message, "array of records") {
		t.Errorf("batch {}: message %q should describe the expected array of records, not a Go type", d.Message)
	}
	d = wantError(t, s.do("POST", "/t", []byte(`[{"value":"a","key":5}]`), "Content-Type", wire.MediaBatchJSON), 400, wire.CodeInvalidBatch, "number as a key")
	if strings.Contains(d.Message, "Go ") || !strings.Contains(d.Message, "key") {
		t.Errorf("batch with a number key: message %q should name the field", d.Message)
	}

	// limit=0 is refused, not read as "everything".
	d = wantError(t, s.do("GET", "/t?offset=4&limit=0", nil), 400, wire.CodeBadRequest, "limit=0")
	if !strings.Contains(d.Message, "limit") {
		t.Errorf("limit=0: message %q does not name limit", d.Message)
	}

	// Unknown query parameters are refused by name.
	for _, q := range []string{"/t?timeout=5", "/t?offset=4&limt=2", "/_streams?pefix=/t"} {
		d = wantError(t, s.do("GET", q, nil), 400, wire.CodeBadRequest, q)
		name := strings.SplitN(q[strings.LastIndexAny(q, "?&")+1:], "=", 2)[0]
		if !strings.Contains(d.Message, `"`+name+`"`) {
			t.Errorf("%s: message %q does not name the parameter %q", q, d.Message, name)
		}
	}
}
