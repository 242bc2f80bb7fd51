package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
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

// writeTokenFile writes a token file granting token every scope on "/",
// and each further token=scope pair its scope.
func writeTokenFile(t *testing.T, token string, more ...string) string {
	t.Helper()
	entry := func(name, token, scope string) string {
		sum := sha256.Sum256([]byte(token))
		return "  - name: \"" + name + "\"\n    sha256: " + hex.EncodeToString(sum[:]) + "\n    scopes: [\"" + scope + "\"]\n"
	}
	y := "tokens:\n" + entry("admin", token, "admin:/")
	for i := 0; i+1 < len(more); i += 2 {
		y += entry("t"+strconv.Itoa(i), more[i], more[i+1])
	}
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUnknownReservedRouteDenied (issue 27, finding 7): a reserved path
// ("/_…") that the route table does not name is denied to a token that is
// not an admin of "/" (it was open to any valid token), while the table's
// routes keep their access.
func TestUnknownReservedRouteDenied(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const admin, reader = "pmq_edge_admin", "pmq_edge_reader"
	n := startTestNode(t, ctx, t.TempDir(), nil, "--auth-tokens", writeTokenFile(t, admin, reader, "read:/"))
	shutdownAtEnd(t, n)
	client := &http.Client{Timeout: 30 * time.Second}
	get := func(token, path string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+n.Addr()+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		token, path string
		want        int
	}{
		{reader, "/_sys/new-endpoint", http.StatusForbidden},
		{reader, "/_internal", http.StatusForbidden},
		{admin, "/_sys/new-endpoint", http.StatusNotFound},
		{reader, "/_sys/cluster", http.StatusOK},
		{reader, "/_streams", http.StatusOK},
		{reader, "/metrics", http.StatusOK},
	} {
		if got := get(c.token, c.path); got != c.want {
			t.Errorf("GET %s with %s: %d, want %d", c.path, c.token, got, c.want)
		}
	}
}

// closedWithin dials addr, lets attack write to the connection, then
// reads (discarding any answer) until the server closes it, and fails
// unless that happened within limit + 2 s of the dial. It returns what
// the server sent.
func closedWithin(t *testing.T, addr string, limit time.Duration, attack func(c net.Conn)) []byte {
	t.Helper()
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	attack(c)
	_ = c.SetReadDeadline(start.Add(limit + 10*time.Second))
	got, err := io.ReadAll(c)
	took := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("still open after %s (limit %s); got %q", took.Round(time.Millisecond), limit, got[:min(len(got), 200)])
	}
	if took > limit+2*time.Second {
		t.Fatalf("closed after %s, limit %s + 2 s; got %q", took.Round(time.Millisecond), limit, got[:min(len(got), 200)])
	}
	return got
}

// TestConnectionStagesBounded (issue 27, findings 2-4 and 8): at every
// stage of a connection a client that stops sending is closed within the
// stage's documented limit (node/edge.go, docs/security.md), auth on,
// fast path on and off, and on the Kafka listener before login.
func TestConnectionStagesBounded(t *testing.T) {
	const rht, bodyTO = 2 * time.Second, 5 * time.Second
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "fastpath", false: "nethttp"}[on], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			n := startTestNode(t, ctx, t.TempDir(), nil, "--http-fast-path="+strconv.FormatBool(on),
				"--auth-tokens", writeTokenFile(t, "pmq_edge_test_token"), "--kafka-addr", "127.0.0.1:0",
				"--read-header-timeout", rht.String(), "--body-timeout", bodyTO.String(), "--idle-timeout", "30s")
			shutdownAtEnd(t, n)
			addr := n.Addr()
			send := func(s string) func(net.Conn) {
				return func(c net.Conn) { _, _ = io.WriteString(c, s) }
			}
			t.Run("silent new connection", func(t *testing.T) {
				t.Parallel()
				closedWithin(t, addr, rht, func(net.Conn) {})
			})
			t.Run("slowloris head", func(t *testing.T) {
				t.Parallel()
				closedWithin(t, addr, rht, func(c net.Conn) {
					for _, b := range []byte("POST /s HTTP/1.1\r\nHost: x\r\nX-A: ") {
						_, _ = c.Write([]byte{b})
						time.Sleep(100 * time.Millisecond)
					}
				})
			})
			t.Run("partial head then a hand-off", func(t *testing.T) {
				t.Parallel()
				// Most of the head within the limit, then a bare LF: the
				// lane hands off, net/http must not restart the clock.
				closedWithin(t, addr, rht, func(c net.Conn) {
					_, _ = io.WriteString(c, "POST /s HTTP/1.1\r\nHost: x\r\n")
					time.Sleep(rht - 500*time.Millisecond)
					_, _ = io.WriteString(c, "X-A: 1\n")
				})
			})
			for _, tc := range []struct{ name, req, status string }{
				{"public GET with a withheld body", "GET /healthz HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\nx", ""},
				{"401 with a withheld body", "POST /s HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\nx", "401"},
				{"401 with a short withheld body", "POST /s HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nx", "401"},
				{"401 chunked", "POST /s HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nx", "401"},
				{"404 with a withheld body", "DELETE /_nope HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer pmq_edge_test_token\r\nContent-Length: 1000\r\n\r\nx", ""},
			} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					got := closedWithin(t, addr, bodyTO, send(tc.req))
					if tc.status != "" && !bytes.HasPrefix(got, []byte("HTTP/1.1 "+tc.status)) {
						t.Fatalf("answer %q, want %s", got, tc.status)
					}
				})
			}
			t.Run("keep-alive connection then a withheld body", func(t *testing.T) {
				t.Parallel()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				br := bufio.NewReader(c)
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n")
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("healthz: %v %v", resp, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				start := time.Now()
				_, _ = io.WriteString(c, "POST /s HTTP/1.1\r\nHost: h\r\nContent-Length: 5000\r\n\r\nxx")
				_, err = io.ReadAll(br)
				if took := time.Since(start); err != nil || took > bodyTO+2*time.Second {
					t.Fatalf("closed after %s (%v), limit %s + 2 s", took, err, bodyTO)
				}
			})

			kafkaAddr := n.kafkaLn.Addr().String()
			t.Run("kafka frame withheld before login", func(t *testing.T) {
				t.Parallel()
				closedWithin(t, kafkaAddr, rht, send("\x00\x00\x01\x00\x00"))
			})
			t.Run("kafka ApiVersions without login", func(t *testing.T) {
				t.Parallel()
				// ApiVersions v0 every half limit: served each time, closed
				// all the same once the login bound is over.
				req := []byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0}
				closedWithin(t, kafkaAddr, rht, func(c net.Conn) {
					go func() {
						for i := 0; i < 20; i++ {
							if _, err := c.Write(req); err != nil {
								return
							}
							time.Sleep(rht / 2)
						}
					}()
				})
			})
		})
	}
}

// TestH2CUnauthenticatedPostGets401 (issue 27, finding 8): an h2c POST
// without a token gets its 401, not a stream error, whatever its body
// size, and the connection keeps serving.
func TestH2CUnauthenticatedPostGets401(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startTestNode(t, ctx, t.TempDir(), nil, "--auth-tokens", writeTokenFile(t, "pmq_edge_admin"))
	shutdownAtEnd(t, n)
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: protocols}}
	defer client.CloseIdleConnections()
	for _, size := range []int{0, 10, 64 << 10, 1 << 20, 4 << 20} {
		for i := range 5 {
			resp, err := client.Post("http://"+n.Addr()+"/s", "application/octet-stream", bytes.NewReader(make([]byte, size)))
			if err != nil {
				t.Fatalf("body %d, try %d: %v", size, i, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("body %d, try %d: %s %d, want HTTP/2 401", size, i, resp.Proto, resp.StatusCode)
			}
		}
	}
}

// TestKafkaFirstRequestBounded: with authentication off, a new Kafka
// connection's first request is due within --read-header-timeout of the
// accept (it was held for the 10 min idle timeout), while a connection
// that sent one may then idle.
func TestKafkaFirstRequestBounded(t *testing.T) {
	const rht = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startTestNode(t, ctx, t.TempDir(), nil, "--kafka-addr", "127.0.0.1:0", "--read-header-timeout", rht.String())
	shutdownAtEnd(t, n)
	addr := n.kafkaLn.Addr().String()
	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		closedWithin(t, addr, rht, func(net.Conn) {})
	})
	t.Run("size withheld", func(t *testing.T) {
		t.Parallel()
		closedWithin(t, addr, rht, func(c net.Conn) { _, _ = c.Write([]byte{0, 0, 1, 0, 0}) })
	})
	t.Run("idle after a request", func(t *testing.T) {
		t.Parallel()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		for i := byte(1); i <= 2; i++ {
			if _, err := c.Write([]byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, i, 0, 0}); err != nil {
				t.Fatal(err)
			}
			var size [4]byte
			if _, err := io.ReadFull(c, size[:]); err != nil {
				t.Fatalf("ApiVersions %d: %v", i, err)
			}
			if _, err := io.CopyN(io.Discard, c, int64(size[0])<<24|int64(size[1])<<16|int64(size[2])<<8|int64(size[3])); err != nil {
				t.Fatal(err)
			}
			if i == 1 {
				time.Sleep(rht + time.Second) // the idle the connection may spend: what is tested
			}
		}
	})
}
