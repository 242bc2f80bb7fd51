package h1lane

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// headSeeds are request heads of every kind the lane meets: served ones
// and ones it must hand off.
var headSeeds = []string{
	"POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Type: application/octet-stream\r\n\r\n",
	"PUT /a/b?x=1&y=%20 HTTP/1.1\r\nHost: 127.0.0.1:4437\r\nContent-Length: 0\r\n\r\n",
	"DELETE /s HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Close\r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a: 2\r\nauthorization:   Bearer t  \r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
	"GET /s?offset=0&live=long-poll HTTP/1.1\r\nHost: h\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
	"POST /s HTTP/1.0\r\nHost: h\r\n\r\n",
	"POST /s HTTP/1.1\r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: h\r\nBad Name: v\r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n",
	"POST /s HTTP/1.1\nHost: h\n\n",
	"POST  /s HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST http://h/s HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST //h/s HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST /s%zz HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: h\r\nX: \xff\xfe\r\n\r\n",
	"GARBAGE\r\n\r\n",
	"POST /s HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\nI: 9\r\nJ: 10\r\nK: 11\r\nL: 12\r\nM: 13\r\nA: 14\r\n\r\n",
}

// FuzzParseHead checks the head parser against net/http's own: whatever
// the lane serves, net/http reads as the same request (method, target,
// URL, host, headers, length, close); everything else is handed off, so
// net/http answers it as before. It must never panic.
func FuzzParseHead(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var h head
		hdr := http.Header{}
		if !parseHead(b, &h, hdr) {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			t.Fatalf("lane serves %q, net/http rejects it: %v", b, err)
		}
		if r.Method != h.method || r.RequestURI != h.target || r.Host != h.host || r.Close != h.close ||
			r.ContentLength != h.contentLength || r.Proto != "HTTP/1.1" || len(r.TransferEncoding) != 0 {
			t.Fatalf("%q: lane %+v, net/http method %q uri %q host %q close %v length %d",
				b, h, r.Method, r.RequestURI, r.Host, r.Close, r.ContentLength)
		}
		if *r.URL != *h.url {
			t.Fatalf("%q: URL lane %#v, net/http %#v", b, *h.url, *r.URL)
		}
		if len(hdr) != len(r.Header) || (len(hdr) > 0 && !reflect.DeepEqual(hdr, r.Header)) {
			t.Fatalf("%q: header lane %v, net/http %v", b, hdr, r.Header)
		}
		// The same target again on the connection: the URL is the
		// previous one's parse, in a copy of its own.
		first := h.url
		first.Path += "/changed by a handler"
		if !parseHead(b, &h, hdr) || h.url == first || *r.URL != *h.url {
			t.Fatalf("%q again: URL lane %#v, net/http %#v", b, *h.url, *r.URL)
		}
	})
}

func TestParseHeadClassifies(t *testing.T) {
	served := map[string]bool{}
	for _, s := range headSeeds[:4] {
		served[s] = true
	}
	// Valid, if unusual: a path that starts with two slashes, and a
	// header value with bytes above 0x7f (obs-text).
	served["POST //h/s HTTP/1.1\r\nHost: h\r\n\r\n"] = true
	served["POST /s HTTP/1.1\r\nHost: h\r\nX: \xff\xfe\r\n\r\n"] = true
	served[headSeeds[len(headSeeds)-1]] = true // more header lines than headMem holds
	for _, s := range headSeeds {
		var h head
		if got := parseHead([]byte(s), &h, http.Header{}); got != served[s] {
			t.Errorf("%q: served = %v, want %v", s, got, served[s])
		}
	}
	var h head
	hdr := http.Header{}
	if !parseHead([]byte(headSeeds[3]), &h, hdr) {
		t.Fatal("not served")
	}
	if got := hdr["X-A"]; len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Errorf("repeated header = %q", got)
	}
	if got := hdr.Get("Authorization"); got != "Bearer t" {
		t.Errorf("value not trimmed: %q", got)
	}
	if _, ok := hdr["Host"]; ok || h.host != "h" {
		t.Errorf("Host in header map or host %q", h.host)
	}
	// A handler appending to one header must not change another.
	hdr["X-A"] = append(hdr["X-A"][:1:1], "z")
	if hdr.Get("Authorization") != "Bearer t" {
		t.Error("headers share a backing array")
	}
	if strings.Contains(headSeeds[0], "\n\n") {
		t.Fatal("seed broken")
	}
}

// TestParseHeadAllocations: a head whose target the connection parsed
// before costs two allocations: its bytes as a string (the header values
// outlive the buffer) and one for the URL and the values' backing array;
// the URL used to be an allocation of its own. A head with more header
// lines than that array holds still parses whole.
func TestParseHeadAllocations(t *testing.T) {
	b := []byte(headSeeds[0])
	var h head
	hdr := http.Header{}
	if n := testing.AllocsPerRun(100, func() {
		if !parseHead(b, &h, hdr) {
			t.Fatal("not served")
		}
	}); n != 2 {
		t.Fatalf("parseHead allocates %v times, want 2", n)
	}
	var long strings.Builder
	long.WriteString("POST /s?a=1 HTTP/1.1\r\nHost: h\r\n")
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&long, "X-H%d: v%d\r\n", i, i)
	}
	long.WriteString("\r\n")
	if !parseHead([]byte(long.String()), &h, hdr) || len(hdr) != 20 || h.url.RawQuery != "a=1" {
		t.Fatalf("long head: %d headers, URL %v", len(hdr), h.url)
	}
	for i := 0; i < 20; i++ {
		if got := hdr.Get(fmt.Sprintf("X-H%d", i)); got != fmt.Sprintf("v%d", i) {
			t.Fatalf("X-H%d = %q", i, got)
		}
	}
}
