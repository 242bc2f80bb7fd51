package h1

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"reflect"
	"testing"
)

// sentinel is a response appended after the fuzzed bytes: when the first
// response leaves its connection reusable, the next read must find exactly
// this one, or the body's framing was wrong.
const sentinel = "HTTP/1.1 200 OK\r\nX-Sentinel: 1\r\nContent-Length: 4\r\n\r\nnext"

// reference reads data as net/http's Transport would: http.ReadResponse,
// skipping interim responses.
func reference(data []byte, method string) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(method, "http://h/x", nil)
	br := bufio.NewReader(bytes.NewReader(data))
	for interim := 0; ; interim++ {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode < 100 {
			b, err := io.ReadAll(resp.Body)
			return resp, b, err
		}
		if resp.StatusCode == 101 || interim >= maxInterim {
			return nil, nil, io.ErrUnexpectedEOF
		}
	}
}

// lean reads data as the transport does; reused reports that the
// connection went back to the pool, and br is left where the next
// response would start.
func lean(data []byte, method string) (resp *http.Response, body []byte, reused bool, br *bufio.Reader, err error) {
	req, _ := http.NewRequest(method, "http://h/x", nil)
	br = bufio.NewReader(bytes.NewReader(data))
	resp, err = readResponse(br, req)
	if err != nil {
		return nil, nil, false, br, err
	}
	released := false
	resp = wrapBody(context.Background(), resp, nil, func(reuse bool) {
		if released {
			panic("released twice")
		}
		released, reused = true, reuse
	})
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !released {
		panic("connection never released")
	}
	return resp, body, reused, br, err
}

func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 45\r\n\r\n{\"error\":{\"code\":\"not_found\",\"message\":\"no\"}}",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\n\r\n",
		"HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nA: 1\r\n  continued\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://other/x\r\nContent-Length: 0\r\n\r\n",
		"garbage\r\n\r\n",
		// Plain answers, parseSimple's shape, and near misses.
		cannedAck,
		"HTTP/1.1 201 Created\r\nLocation: /s\r\ncontent-type: text/plain\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 \r\nContent-Length:   0  \r\n\r\n",
		"HTTP/1.1 200 OK\r\nA:\t b \t\r\nContent-Length: 007\r\n\r\n1234567",
		"HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\nX: y\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nBad Name: 1\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\n:x\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nX: caf\xc3\xa9\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 600 Odd\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 404 Not Found\r\nContent-Length: 99999999999999999999\r\n\r\n",
		"",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		method := "POST"
		if head {
			method = "HEAD"
		}
		want, wantBody, wantErr := reference(data, method)
		got, gotBody, reused, br, gotErr := lean(data, method)
		if (wantErr != nil) != (gotErr != nil) {
			t.Fatalf("net/http error %v, lean error %v", wantErr, gotErr)
		}
		if want == nil || got == nil {
			if (want == nil) != (got == nil) {
				t.Fatalf("net/http response %v, lean response %v", want, got)
			}
			return
		}
		if want.Status != got.Status || want.Proto != got.Proto || want.ProtoMajor != got.ProtoMajor || want.ProtoMinor != got.ProtoMinor ||
			!reflect.DeepEqual(want.TransferEncoding, got.TransferEncoding) || !reflect.DeepEqual(want.Trailer, got.Trailer) {
			t.Fatalf("net/http %q %q %d.%d te=%v trailer=%v\nlean     %q %q %d.%d te=%v trailer=%v",
				want.Status, want.Proto, want.ProtoMajor, want.ProtoMinor, want.TransferEncoding, want.Trailer,
				got.Status, got.Proto, got.ProtoMajor, got.ProtoMinor, got.TransferEncoding, got.Trailer)
		}
		if want.StatusCode != got.StatusCode || !reflect.DeepEqual(want.Header, got.Header) ||
			!bytes.Equal(wantBody, gotBody) || want.Close != got.Close || want.ContentLength != got.ContentLength {
			t.Fatalf("net/http %d %v %q close=%v len=%d\nlean     %d %v %q close=%v len=%d",
				want.StatusCode, want.Header, wantBody, want.Close, want.ContentLength,
				got.StatusCode, got.Header, gotBody, got.Close, got.ContentLength)
		}
		if reused && (gotErr != nil || got.Close) {
			t.Fatalf("connection reused after error %v / close %v", gotErr, got.Close)
		}
		if !reused || gotErr != nil || len(readRest(br)) > 0 {
			return
		}
		// The response took all of data and left the connection
		// reusable: followed by another response, the next read must
		// start exactly at it.
		_, _, _, br, err := lean(append(append([]byte{}, data...), sentinel...), method)
		if err != nil {
			t.Fatalf("with a following response: %v", err)
		}
		next, nextBody, _, _, err := lean(readRest(br), "POST")
		if err != nil || next.Header.Get("X-Sentinel") != "1" || string(nextBody) != "next" {
			t.Fatalf("the following response was misread: %v %v %q", err, next, nextBody)
		}
	})
}

func readRest(br *bufio.Reader) []byte {
	b, _ := io.ReadAll(br)
	return b
}
