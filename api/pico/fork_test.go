package pico

import (
	"net/http"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// TestForkByCreateHeaders: PUT with Pico-Fork-Source (and optionally
// Pico-Fork-Offset) creates a stream that starts with the source's records
// below the fork point and continues with its own; deleting the source
// leaves the fork whole; bad fork headers are 400, a missing source 404.
func TestForkByCreateHeaders(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/src", "text/plain")
	for _, v := range []string{"a", "b", "c"} {
		wantStatus(t, s.do("POST", "/src", []byte(v), "Content-Type", "text/plain"), 200, "append "+v)
	}
	r := s.do("PUT", "/fork", nil, wire.HeaderForkSource, "/src", wire.HeaderForkOffset, "2")
	wantStatus(t, r, http.StatusCreated, "fork at 2")
	wantHeader(t, r, wire.HeaderNextOffset, "2", "fork at 2")
	wantHeader(t, r, "Content-Type", "application/json", "fork at 2") // the JSON description
	wantStatus(t, s.do("POST", "/fork", []byte("F"), "Content-Type", "text/plain"), 200, "append to the fork")
	r = s.do("PUT", "/tail", nil, wire.HeaderForkSource, "/src")
	wantStatus(t, r, http.StatusCreated, "fork at the tail")
	wantHeader(t, r, wire.HeaderNextOffset, "3", "fork at the tail")

	wantStatus(t, s.do("DELETE", "/src", nil), http.StatusNoContent, "delete the source")
	wantError(t, s.do("GET", "/src?offset=0", nil), http.StatusNotFound, wire.CodeNotFound, "read the deleted source")
	recs, r := s.readJSON("/fork?offset=0")
	wantStatus(t, r, 200, "read the fork")
	var got []string
	for _, rec := range recs {
		got = append(got, *rec.Value)
	}
	if len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "F" || recs[2].Offset != 2 {
		t.Fatalf("fork reads %v, want [a b F] at offsets 0..2", got)
	}

	wantError(t, s.do("PUT", "/x", nil, wire.HeaderForkOffset, "1"), 400, wire.CodeBadRequest, "fork offset without a source")
	wantError(t, s.do("PUT", "/x", nil, wire.HeaderForkSource, "/fork", wire.HeaderForkOffset, "-1"), 400, wire.CodeBadRequest, "negative fork offset")
	wantError(t, s.do("PUT", "/x", nil, wire.HeaderForkSource, "/fork", wire.HeaderForkOffset, "9"), 400, wire.CodeBadRequest, "fork offset beyond the tail")
	wantError(t, s.do("PUT", "/x", nil, wire.HeaderForkSource, "/nope"), 404, wire.CodeNotFound, "missing source")
}
