package pico

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// TestSSEPageRenderNoAllocs: rendering a live page's events (data and
// control, the cursor included) into a reused buffer allocates nothing.
// Every live reader does it once per append; the cursor used to be
// formatted into a string per event first.
func TestSSEPageRenderNoAllocs(t *testing.T) {
	h := New(nil, Config{})
	pg := ssePage{data: []byte(`[{"offset":7,"value":"x"}]`), count: 1, next: 8, upToDate: true}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() {
		buf = appendSSEPage(buf[:0], pg, h.nextCursorValue("12"))
	}); n != 0 {
		t.Fatalf("%v allocations per rendered page, want 0", n)
	}
}

// TestSSEControlEvent: the control event is the JSON of a
// wire.ControlEvent whose cursor is nextCursor's string, and moves past
// the client's cursor.
func TestSSEControlEvent(t *testing.T) {
	now := time.Unix(1000, 0)
	h := New(nil, Config{CursorInterval: time.Second, Now: func() time.Time { return now }})
	for _, client := range []string{"", "5", "1000", "2000", "x", "-3", "4611686018427387904"} {
		out := appendSSEPage(nil, ssePage{next: 8, upToDate: true, closed: true}, h.nextCursorValue(client))
		_, data, ok := strings.Cut(string(out), "\ndata: ")
		if !ok || !strings.HasPrefix(string(out), "event: control\nid: 8\n") || !strings.HasSuffix(data, "\n\n") {
			t.Fatalf("client cursor %q: events %q", client, out)
		}
		var ev wire.ControlEvent
		dec := json.NewDecoder(bytes.NewReader([]byte(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("client cursor %q: control %q: %v", client, data, err)
		}
		want := wire.ControlEvent{NextOffset: 8, UpToDate: true, Closed: true, Cursor: h.nextCursor(client)}
		if ev != want {
			t.Fatalf("client cursor %q: control %+v, want %+v", client, ev, want)
		}
		if c, err := strconv.ParseInt(client, 10, 64); err == nil && c >= 1000 && c < 1<<62 && ev.Cursor != strconv.FormatInt(c+1, 10) {
			t.Fatalf("client cursor %q: next cursor %q does not move past it", client, ev.Cursor)
		}
	}
}
