package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// cannedPattern is what a net/http canned error answer looks like on the
// wire: a layer that recognised it by its bytes would rewrite a record
// holding it.
const cannedPattern = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"

// TestRecordBytesNeverRewritten (issue 27, finding 1): records holding
// the byte pattern of a net/http error answer at every body offset around
// net/http's 4 KiB flush boundary read back byte-equal, with the right
// Content-Length, over one keep-alive connection, fast path on and off.
func TestRecordBytesNeverRewritten(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "fastpath", false: "nethttp"}[on], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			n := startTestNode(t, ctx, t.TempDir(), nil, "--http-fast-path="+strconv.FormatBool(on))
			shutdownAtEnd(t, n)
			base := "http://" + n.Addr()
			client := &http.Client{Timeout: 30 * time.Second}
			if code, err := sendBytes(client, http.MethodPut, base+"/rec", nil); err != nil || code != http.StatusCreated {
				t.Fatalf("create: %d %v", code, err)
			}
			c, err := net.Dial("tcp", n.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			get := func(offset int) (*http.Response, []byte) {
				t.Helper()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				fmt.Fprintf(c, "GET /rec?offset=%d&limit=1&format=raw HTTP/1.1\r\nHost: x\r\n\r\n", offset)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("read of offset %d: %v (keep-alive broken)", offset, err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("read of offset %d: body: %v", offset, err)
				}
				return resp, b
			}
			// The head length of a raw read decides where net/http's
			// buffer is flushed inside the body; the records cover body
			// offsets well around it (head lengths vary by a few bytes
			// with the offset's digits).
			const size = 8000
			probe := bytes.Repeat([]byte{'p'}, size)
			if code, err := sendBytes(client, http.MethodPost, base+"/rec", probe); err != nil || code != http.StatusOK {
				t.Fatalf("append probe: %d %v", code, err)
			}
			resp, _ := get(0)
			var head bytes.Buffer
			_ = resp.Header.Write(&head)
			boundary := 4096 - (len("HTTP/1.1 200 OK\r\n") + head.Len() + 2)
			var want [][]byte
			for at := max(0, boundary-160); at <= boundary+96; at++ {
				rec := bytes.Repeat([]byte{'r'}, size)
				copy(rec[at:], cannedPattern)
				want = append(want, rec)
				if code, err := sendBytes(client, http.MethodPost, base+"/rec", rec); err != nil || code != http.StatusOK {
					t.Fatalf("append with the pattern at %d: %d %v", at, code, err)
				}
			}
			for i, rec := range want {
				resp, got := get(i + 1)
				if resp.StatusCode != http.StatusOK || resp.ContentLength != size || !bytes.Equal(got, rec) {
					at := bytes.Index(rec, []byte("HTTP/1.1"))
					t.Fatalf("record %d (pattern at body offset %d): status %d, Content-Length %d, %d bytes read, equal %v",
						i+1, at, resp.StatusCode, resp.ContentLength, len(got), bytes.Equal(got, rec))
				}
			}
		})
	}
}
