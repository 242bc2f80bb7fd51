package stream_test

import (
	"context"
	"errors"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
)

// TestJSONStreamRefusesInvalidUTF8 (issue 27, finding 6): a JSON stream
// takes only JSON texts, and a JSON text is UTF-8: a string holding bytes
// that are not is refused like any other invalid JSON, on append and in
// a create's initial records.
func TestJSONStreamRefusesInvalidUTF8(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	mustCreate(t, h.svc, "/j", stream.CreateOptions{ContentType: "application/json"})
	for _, v := range []string{"\"\xff\"", "{\"k\xc3\":1}", "[\"\xed\xa0\x80\"]"} {
		_, err := h.svc.AppendBatch(ctx, "/j", stream.AppendRequest{Records: recs(v)})
		if !errors.Is(err, stream.ErrInvalidArgument) {
			t.Errorf("append %q: %v, want ErrInvalidArgument", v, err)
		}
	}
	if _, err := h.svc.AppendBatch(ctx, "/j", stream.AppendRequest{Records: recs(`"é"`)}); err != nil {
		t.Fatalf("valid UTF-8: %v", err)
	}
	if _, _, err := h.svc.Create(ctx, "/j2", stream.CreateOptions{ContentType: "application/json", Initial: recs("\"\xff\"")}); !errors.Is(err, stream.ErrInvalidArgument) {
		t.Errorf("create with an invalid initial record: %v, want ErrInvalidArgument", err)
	}
}
