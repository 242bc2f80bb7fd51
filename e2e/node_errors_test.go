package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReservedPathsRefuseWrites: PUT, POST and DELETE on the node's own
// endpoints are 405 with Allow and a JSON error on both protocols, never a
// 200 a create script would read as "exists".
func TestReservedPathsRefuseWrites(t *testing.T) {
	for _, proto := range []string{"pico", "durable-streams"} {
		n := startNode(t, t.TempDir(), "--protocol", proto)
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			for _, method := range []string{"PUT", "POST", "DELETE"} {
				r := do(t, method, n.URL+path, []byte("x"), "Content-Type", "text/plain")
				wantStatus(t, r, 405, proto+" "+method+" "+path)
				if allow := r.Header.Get("Allow"); !strings.Contains(allow, "GET") {
					t.Errorf("%s %s %s: Allow %q, want GET listed", proto, method, path, allow)
				}
				assertErrorBody(t, r, "method_not_allowed")
			}
			wantStatus(t, do(t, "GET", n.URL+path, nil), 200, proto+" GET "+path)
		}
	}
}

// rawHTTP sends req as is on a new connection and reads one response.
func rawHTTP(t *testing.T, url, req string) response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	go func() { _, _ = io.WriteString(c, req) }() // the server may answer before reading it all
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to a raw request: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// TestServerGeneratedErrors: the few errors net/http answers itself,
// before any handler runs (header block too large, a request line that
// does not parse, no Host), are its own plain-text answers with the right
// status, as docs/api.md says: no layer rewrites
// response bytes (issue 27), so they are not JSON.
func TestServerGeneratedErrors(t *testing.T) {
	n := startNode(t, t.TempDir(), "--max-header-bytes", "4096")
	big := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n"
	for _, c := range []struct {
		name, req string
		status    int
	}{
		{"header too large", big, 431},
		{"bad request line", "NOT AN HTTP REQUEST\r\n\r\n", 400},
		{"missing Host", "GET /healthz HTTP/1.1\r\n\r\n", 400},
	} {
		r := rawHTTP(t, n.URL, c.req)
		wantStatus(t, r, c.status, c.name)
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("%s: Content-Type %q, want net/http's text/plain", c.name, ct)
		}
		if !strings.HasPrefix(string(r.Body), strconv.Itoa(c.status)) {
			t.Errorf("%s: body %q, want net/http's text", c.name, r.Body)
		}
	}
	// An ordinary request on a new connection still works.
	wantStatus(t, do(t, "GET", n.URL+"/healthz", nil), 200, "healthz after the bad requests")
}
