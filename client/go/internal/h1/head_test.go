package h1

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
)

// cannedAck is picomq serve's answer to a one-record append.
const cannedAck = "HTTP/1.1 200 OK\r\nPico-Offset: 0\r\nPico-Next-Offset: 1\r\nPico-Timestamp: 1796227362118\r\n" +
	"Pico-Record-Count: 1\r\nContent-Type: application/json\r\nPico-Served-By: vm\r\n" +
	"Date: Wed, 02 Dec 2026 16:02:42 GMT\r\nContent-Length: 64\r\n\r\n" +
	`{"offset":0,"nextOffset":1,"timestamp":1796227362118,"count":1}` + "\n"

// TestParseSimpleTakesPlainAnswers: a node's append answer (twice on one
// connection) goes through parseSimple, with http.ReadResponse's result;
// answers outside its shape are left unread for http.ReadResponse.
func TestParseSimpleTakesPlainAnswers(t *testing.T) {
	req, _ := http.NewRequest("POST", "http://h/s", nil)
	br := bufio.NewReaderSize(strings.NewReader(cannedAck+cannedAck), readBufSize)
	ref := bufio.NewReader(strings.NewReader(cannedAck + cannedAck))
	for i := range 2 {
		got, ok := parseSimple(br, req)
		if !ok {
			t.Fatalf("answer %d: not taken by parseSimple", i)
		}
		want, err := http.ReadResponse(ref, req)
		if err != nil {
			t.Fatal(err)
		}
		gb, err1 := io.ReadAll(got.Body)
		wb, err2 := io.ReadAll(want.Body)
		if err1 != nil || err2 != nil || string(gb) != string(wb) || got.Status != want.Status ||
			got.ContentLength != want.ContentLength || got.Header.Get("Pico-Next-Offset") != "1" || len(got.Header) != len(want.Header) || got.Request != req {
			t.Fatalf("answer %d: %+v %q %v\nwant %+v %q %v", i, got, gb, err1, want, wb, err2)
		}
	}
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\n" + cannedAck,
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\n",
		cannedAck[:40], // the head is not all there yet
	} {
		br := bufio.NewReaderSize(strings.NewReader(s), readBufSize)
		if _, ok := parseSimple(br, req); ok {
			t.Fatalf("%q: taken by parseSimple", s)
		}
		if rest, _ := io.ReadAll(br); string(rest) != s {
			t.Fatalf("%q: parseSimple consumed input, left %q", s, rest)
		}
	}
	head, _ := http.NewRequest("HEAD", "http://h/s", nil)
	if _, ok := parseSimple(bufio.NewReader(strings.NewReader(cannedAck)), head); ok {
		t.Fatal("the answer to a HEAD was taken by parseSimple")
	}
}

// BenchmarkReadAck is the parse of a node's append answer, body included:
// parseSimple against http.ReadResponse on the same bytes.
func BenchmarkReadAck(b *testing.B) {
	req, _ := http.NewRequest("POST", "http://h/s", nil)
	src := strings.NewReader("")
	br := bufio.NewReaderSize(src, readBufSize)
	for _, tc := range []struct {
		name  string
		parse func() (*http.Response, error)
	}{
		{"parseSimple", func() (*http.Response, error) {
			resp, ok := parseSimple(br, req)
			if !ok {
				return nil, io.ErrUnexpectedEOF
			}
			return resp, nil
		}},
		{"ReadResponse", func() (*http.Response, error) { return http.ReadResponse(br, req) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(cannedAck)
				br.Reset(src)
				resp, err := tc.parse()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
