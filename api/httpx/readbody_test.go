package httpx

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReadBody: bodies with and without a Content-Length come back whole
// up to the limit; a chunked body past it is an *http.MaxBytesError; the
// buffer given is reused when large enough.
func TestReadBody(t *testing.T) {
	const limit = 1000
	type result struct {
		body   []byte
		reused bool
		err    error
	}
	got := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dst := make([]byte, 0, 2*limit)
		b, err := ReadBody(w, r, dst, limit)
		got <- result{append([]byte(nil), b...), len(b) > 0 && &b[0] == &dst[:1][0], err}
	}))
	defer srv.Close()
	post := func(body io.Reader, size int64) result {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = size
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return <-got
	}
	full := bytes.Repeat([]byte("x"), limit)
	for _, c := range []struct {
		name string
		body []byte
		size int64
	}{
		{"length", full, limit},
		{"empty", nil, 0},
		{"chunked", full, -1},
	} {
		var rd io.Reader = bytes.NewReader(c.body)
		if c.size < 0 {
			rd = io.MultiReader(rd) // hides the length: sent chunked
		}
		r := post(rd, c.size)
		if r.err != nil || !bytes.Equal(r.body, c.body) {
			t.Errorf("%s: %d bytes, %v; want %d", c.name, len(r.body), r.err, len(c.body))
		}
		if len(c.body) > 0 && !r.reused {
			t.Errorf("%s: the buffer given was not used", c.name)
		}
	}
	r := post(io.MultiReader(strings.NewReader(strings.Repeat("y", limit+1))), -1)
	var tooBig *http.MaxBytesError
	if !errors.As(r.err, &tooBig) {
		t.Errorf("chunked body past the limit: %v, want *http.MaxBytesError", r.err)
	}
}
