package pico

import (
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// TestOneLookupPerRequest holds the Pico frontend to one stream lookup per
// append and per read: the service checks the stream's rules and returns
// the stream with the page, so no Head comes first.
func TestOneLookupPerRequest(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/j", "application/json")
	s.create("/b", "application/octet-stream")
	for _, c := range []struct {
		what, method, path, ct, body string
		status                       int
	}{
		{"single append", "POST", "/j", "application/json", `{"a":1}`, 200},
		{"batch append", "POST", "/b", wire.MediaBatchJSON, `[{"value":"x"},{"value":"y"}]`, 200},
		{"invalid JSON append", "POST", "/j", "application/json", `{"a":`, 400},
		{"wrong content type", "POST", "/j", "text/plain", `x`, 409},
		{"read at an offset", "GET", "/j?offset=0", "", "", 200},
		{"read from the start", "GET", "/b", "", "", 200},
		{"binary read", "GET", "/b?format=binary", "", "", 200},
		{"read of a missing stream", "GET", "/nope", "", "", 404},
	} {
		before := s.env.Svc.Lookups()
		var h []string
		if c.ct != "" {
			h = []string{"Content-Type", c.ct}
		}
		wantStatus(t, s.do(c.method, c.path, []byte(c.body), h...), c.status, c.what)
		if n := s.env.Svc.Lookups() - before; n != 1 {
			t.Errorf("%s: %d stream lookups, want 1", c.what, n)
		}
	}
}
