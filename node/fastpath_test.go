package node

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHTTPFastPathSwitch: with --http-fast-path on (the default) and off,
// the node creates, appends, reads and answers a malformed request with
// the same 400 (net/http's own, plain text: docs/api.md), and shuts down with keep-alive connections open.
func TestHTTPFastPathSwitch(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[on], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := []string{}
			if !on {
				args = append(args, "--http-fast-path=false")
			}
			n := startTestNode(t, ctx, t.TempDir(), nil, args...)
			if (n.lane != nil) != on {
				t.Fatalf("lane running = %v, want %v", n.lane != nil, on)
			}
			base := "http://" + n.Addr()
			client := &http.Client{Timeout: 30 * time.Second}
			if code, err := sendBytes(client, http.MethodPut, base+"/fast", nil); err != nil || code != http.StatusCreated {
				t.Fatalf("create: %d %v", code, err)
			}
			for i := range 3 {
				if code, err := sendBytes(client, http.MethodPost, base+"/fast", []byte{'a' + byte(i)}); err != nil || code != http.StatusOK {
					t.Fatalf("append %d: %d %v", i, code, err)
				}
			}
			resp, err := client.Get(base + "/fast?offset=0")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(b), `"value":"a"`) || !strings.Contains(string(b), `"value":"c"`) {
				t.Fatalf("read: %d %s", resp.StatusCode, b)
			}

			c, err := net.Dial("tcp", n.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			_, _ = io.WriteString(c, "POST /fast HTTP/1.1\r\nHost: x\r\nBad Header: v\r\nContent-Length: 0\r\n\r\n")
			bad, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			eb, _ := io.ReadAll(bad.Body)
			if bad.StatusCode != 400 || !bad.Close || !strings.Contains(string(eb), "invalid header name") {
				t.Fatalf("malformed request: %d %q %s", bad.StatusCode, bad.Header.Get("Content-Type"), eb)
			}

			// An idle keep-alive connection does not hold up the shutdown.
			sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer scancel()
			if err := n.Shutdown(sctx); err != nil {
				t.Fatalf("shutdown with an idle connection: %v", err)
			}
			client.CloseIdleConnections()
		})
	}
}
