package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

// wantRefusedWhole checks that an append answered status with the
// project's JSON error body carrying code.
func wantRefusedWhole(t *testing.T, r response, status int, code, what string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, r.Status, status, r.Body)
	}
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || body.Error.Code != code || body.Error.Message == "" {
		t.Fatalf("%s: body %s, want a JSON error with code %q and a message", what, r.Body, code)
	}
}

// TestPicoBatchWithBadMiddleElementWritesNothing: an append is one unit. A
// JSON or binary batch whose second of three records is bad is refused
// with 4xx, and neither the records before it nor after it are written:
// the next offset is unchanged and a read returns only what was there.
func TestPicoBatchWithBadMiddleElementWritesNothing(t *testing.T) {
	n := startNode(t, t.TempDir(), "--max-record-bytes", "2048")
	u := n.URL + "/atomic/pico"
	wantStatus(t, do(t, "PUT", u, nil, "Content-Type", "application/octet-stream"), 201, "create")
	r := do(t, "POST", u, []byte("first"))
	wantStatus(t, r, 200, "first append")
	wantPicoHeader(t, r, wire.HeaderNextOffset, "1", "first append")

	big := strings.Repeat("x", 4096)
	for _, tc := range []struct {
		what, ct string
		body     []byte
		status   int
		code     string
	}{
		{"JSON: unknown field", wire.MediaBatchJSON, []byte(`[{"value":"a"},{"value":"b","vlaue":"c"},{"value":"c"}]`), 400, wire.CodeInvalidBatch},
		{"JSON: missing value", wire.MediaBatchJSON, []byte(`[{"value":"a"},{"key":"k"},{"value":"c"}]`), 400, wire.CodeInvalidBatch},
		{"JSON: bad base64", wire.MediaBatchJSON, []byte(`[{"value":"a"},{"value":"!!","valueEncoding":"base64"},{"value":"c"}]`), 400, wire.CodeInvalidBatch},
		{"JSON: unknown encoding", wire.MediaBatchJSON, []byte(`[{"value":"a"},{"value":"b","valueEncoding":"hex"},{"value":"c"}]`), 400, wire.CodeInvalidBatch},
		{"JSON: header without key", wire.MediaBatchJSON, []byte(`[{"value":"a"},{"value":"b","headers":[{"value":"v"}]},{"value":"c"}]`), 400, wire.CodeInvalidBatch},
		{"JSON: syntax error", wire.MediaBatchJSON, []byte(`[{"value":"a"},{"value":},{"value":"c"}]`), 400, wire.CodeInvalidBatch},
		{"JSON: record too large", wire.MediaBatchJSON, []byte(`[{"value":"a"},{"value":"` + big + `"},{"value":"c"}]`), 413, wire.CodeRecordTooLarge},
		{"binary: record too large", wire.MediaBatch, codec.Encode([]codec.Record{{Value: []byte("a")}, {Value: []byte(big)}, {Value: []byte("c")}}), 413, wire.CodeRecordTooLarge},
		{"binary: truncated after two records", wire.MediaBatch, truncated(codec.Encode([]codec.Record{{Value: []byte("a")}, {Value: []byte("b")}, {Value: []byte("c")}})), 400, wire.CodeInvalidBatch},
	} {
		wantRefusedWhole(t, do(t, "POST", u, tc.body, "Content-Type", tc.ct), tc.status, tc.code, tc.what)
		r := do(t, "HEAD", u, nil)
		wantStatus(t, r, 200, "head after "+tc.what)
		wantPicoHeader(t, r, wire.HeaderNextOffset, "1", "next offset after "+tc.what)
		recs := readAll(t, n.URL, "/atomic/pico")
		if len(recs) != 1 || recs[0].Value == nil || *recs[0].Value != "first" {
			t.Fatalf("after %s the stream holds %d records, want only the first", tc.what, len(recs))
		}
	}
	// Not vacuous: the same batches without the bad element are written.
	r = do(t, "POST", u, []byte(`[{"value":"a"},{"value":"b"},{"value":"c"}]`), "Content-Type", wire.MediaBatchJSON)
	wantStatus(t, r, 200, "good JSON batch")
	wantPicoHeader(t, r, wire.HeaderNextOffset, "4", "good JSON batch")
}

// truncated cuts the last byte off an encoded batch: its first records are
// whole, the last is not.
func truncated(b []byte) []byte { return b[:len(b)-1] }

// TestDSJSONArrayWithBadMiddleElementWritesNothing: on a Durable Streams
// JSON stream an array append stores one message per element; an array
// whose middle element is not valid JSON is refused with 400 and stores
// none of them, and a create with such an initial body creates nothing.
func TestDSJSONArrayWithBadMiddleElementWritesNothing(t *testing.T) {
	n := startDS(t)
	u := dsURL(n, "/atomic/ds")
	wantStatus(t, do(t, "PUT", u, nil, "Content-Type", "application/json"), 201, "create")
	r := do(t, "POST", u, []byte(`[{"n":0}]`), "Content-Type", "application/json")
	wantStatus(t, r, 204, "first append")
	wantHeader(t, r, "Stream-Next-Offset", off(1))

	for _, tc := range []struct{ what, body string }{
		{"syntax error in the middle element", `[{"n":1},{"n":},{"n":3}]`},
		{"bare word in the middle", `[{"n":1},nul,{"n":3}]`},
		{"unterminated string in the middle", `[{"n":1},"abc,{"n":3}]`},
		{"missing comma after the first", `[{"n":1} {"n":2},{"n":3}]`},
		{"trailing comma", `[{"n":1},{"n":2},]`},
	} {
		wantRefusedWhole(t, do(t, "POST", u, []byte(tc.body), "Content-Type", "application/json"), 400, wire.CodeBadRequest, tc.what)
		r := do(t, "HEAD", u, nil)
		wantStatus(t, r, 200, "head after "+tc.what)
		wantHeader(t, r, "Stream-Next-Offset", off(1))
		r = do(t, "GET", u+"?offset=-1", nil)
		wantStatus(t, r, 200, "read after "+tc.what)
		if got := strings.TrimSpace(string(r.Body)); got != `[{"n":0}]` {
			t.Fatalf("after %s the stream reads %s, want only the first message", tc.what, got)
		}
	}
	cu := dsURL(n, "/atomic/ds-create")
	r = do(t, "PUT", cu, []byte(`[{"n":1},{"n":},{"n":3}]`), "Content-Type", "application/json")
	wantRefusedWhole(t, r, 400, wire.CodeBadRequest, "create with a bad middle element")
	wantStatus(t, do(t, "HEAD", cu, nil), 404, "head of the refused create")

	// Not vacuous: a well-formed array of three is three messages.
	r = do(t, "POST", u, []byte(`[{"n":1},{"n":2},{"n":3}]`), "Content-Type", "application/json")
	wantStatus(t, r, 204, "good array")
	wantHeader(t, r, "Stream-Next-Offset", off(4))
}
