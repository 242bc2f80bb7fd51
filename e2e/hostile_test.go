package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// rssBytes is a process's resident set size from /proc.
func rssBytes(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading RSS: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// raiseFileLimit lets this process hold the idle-connection flood.
func raiseFileLimit(t testing.TB, want uint64) {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur >= want {
		return
	}
	rl.Cur = min(want, rl.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < want {
		t.Fatalf("need %d open files for the connection flood; limit %d (%v)", want, rl.Cur, err)
	}
}

// goodClient appends numbered records through the Go client for as long
// as the test runs and remembers what was acknowledged.
type goodClient struct {
	mu    sync.Mutex
	acked map[int]bool
	errs  int
}

func (g *goodClient) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.acked)
}

func (g *goodClient) run(ctx context.Context, s picomq.Stream) {
	for i := 0; ctx.Err() == nil; i++ {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := s.Append(actx, picomq.AppendRecord{Body: []byte("good-" + strconv.Itoa(i))})
		cancel()
		g.mu.Lock()
		if err == nil {
			g.acked[i] = true
		} else {
			g.errs++
		}
		g.mu.Unlock()
		if err != nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// progressed waits until the good client has more acks than before.
func (g *goodClient) progressed(t *testing.T, what string) {
	t.Helper()
	before := g.count()
	if !pollUntil(30*time.Second, 10*time.Millisecond, func() bool { return g.count() >= before+5 }) {
		t.Fatalf("%s: the well-behaved client made no progress (%d acks, %d errors)", what, g.count(), g.errs)
	}
}

// TestHostileInput attacks one real node with what the issue lists —
// garbage and truncated frames and 2 GiB length prefixes on the Kafka
// port, slowloris headers and bodies, 10,000 idle connections, malformed
// and deeply nested JSON, invalid UTF-8 and traversal in names, oversized
// records, bodies and headers — while a well-behaved client keeps
// appending. The node must stay up, its RSS bounded, the client served,
// and every acknowledged record readable intact afterwards.
func TestHostileInput(t *testing.T) {
	if testing.Short() {
		t.Skip("hostile-input suite is long")
	}
	raiseFileLimit(t, 12000)
	dir := t.TempDir()
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	p, kafkaAddr := startKafkaNode(t, filepath.Join(dir, "data"), "--auth-tokens", tokens,
		"--read-header-timeout", "2s", "--body-timeout", "3s", "--long-poll-timeout", "6s", "--sse-timeout", "20s",
		"--max-append-bytes", "1048576", "--max-record-bytes", "65536")
	pid := p.Cmd.Process.Pid
	auth := bearerHdr(rootToken)
	authCT := func(contentType string) []string { return append(bearerHdr(rootToken), "Content-Type", contentType) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	wantStatus(t, do(t, "PUT", p.URL+"/h/good", nil, authCT("text/plain")...), 201, "create the good stream")
	wantStatus(t, do(t, "PUT", p.URL+"/h/json", nil, authCT("application/json")...), 201, "create a JSON stream")
	wantStatus(t, do(t, "PUT", p.URL+"/h/batch", nil, authCT("application/octet-stream")...), 201, "create a stream for batches")
	cl, err := picomq.NewPico(p.URL, picomq.WithToken(rootToken))
	if err != nil {
		t.Fatal(err)
	}
	good := &goodClient{acked: map[int]bool{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); good.run(ctx, cl.Stream("/h/good")) }()
	good.progressed(t, "start")
	rssStart := rssBytes(t, pid)

	// A long-poll outlives the header and body timeouts: it ends with
	// 204 at --long-poll-timeout, not with a cut connection.
	longPoll := make(chan error, 1)
	go func() {
		r, err := tryDo(ctx, "GET", p.URL+"/h/json?offset=0&live=long-poll", nil, auth...)
		if err == nil && r.Status != 204 {
			err = fmt.Errorf("long-poll: status %d %s", r.Status, r.Body)
		}
		longPoll <- err
	}()

	t.Run("kafka garbage", func(t *testing.T) {
		var huge [4]byte
		binary.BigEndian.PutUint32(huge[:], 0x7fffffff) // 2 GiB - 1
		var neg [4]byte
		binary.BigEndian.PutUint32(neg[:], 0xffffffff)
		var trunc bytes.Buffer
		binary.Write(&trunc, binary.BigEndian, int32(1000))
		trunc.WriteString("short")
		var bigUnauth [4]byte // within --kafka-max-frame-bytes but before SASL
		binary.BigEndian.PutUint32(bigUnauth[:], 50<<20)
		rng := rand.New(rand.NewPCG(1, 2))
		payloads := [][]byte{huge[:], neg[:], trunc.Bytes(), bigUnauth[:], []byte("GET / HTTP/1.1\r\n\r\n")}
		for range 50 {
			g := make([]byte, rng.IntN(4096))
			for i := range g {
				g[i] = byte(rng.Uint32())
			}
			payloads = append(payloads, g)
		}
		for i := 0; i < 200; i++ {
			// Many 2 GiB prefixes at once: nothing may be allocated for them.
			payloads = append(payloads, huge[:])
		}
		var conns sync.WaitGroup
		for i, pl := range payloads {
			conns.Add(1)
			go func() {
				defer conns.Done()
				c, err := net.Dial("tcp", kafkaAddr)
				if err != nil {
					t.Errorf("payload %d: dial: %v", i, err)
					return
				}
				defer c.Close()
				_, _ = c.Write(pl)
				// The node closes the connection (or times it out) rather
				// than waiting for gigabytes.
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				_, err = io.Copy(io.Discard, c)
				if isTimeoutErr(err) {
					t.Errorf("payload %d (%d bytes): connection still open after 20s", i, len(pl))
				}
			}()
		}
		conns.Wait()
		good.progressed(t, "after Kafka garbage")
	})

	t.Run("slowloris", func(t *testing.T) {
		var conns sync.WaitGroup
		start := time.Now()
		for i := range 100 {
			conns.Add(1)
			go func() {
				defer conns.Done()
				c, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
				if err != nil {
					t.Errorf("dial: %v", err)
					return
				}
				defer c.Close()
				if i%2 == 0 {
					// Headers, one byte at a time, forever.
					_, _ = io.WriteString(c, "GET /h/good HTTP/1.1\r\nHost: x\r\n")
					for ; time.Since(start) < 30*time.Second; time.Sleep(200 * time.Millisecond) {
						if _, err := io.WriteString(c, "X"); err != nil {
							return // closed by the server: what we want
						}
					}
				} else {
					// Complete headers, then a body that never arrives.
					_, _ = io.WriteString(c, "POST /h/good HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+rootToken+
						"\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\nab")
					for ; time.Since(start) < 30*time.Second; time.Sleep(200 * time.Millisecond) {
						if _, err := io.WriteString(c, "b"); err != nil {
							return
						}
					}
				}
				t.Errorf("slowloris connection %d still open after 30s", i)
			}()
		}
		conns.Wait()
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("slowloris connections took %s to be closed (header timeout 2s, body timeout 3s)", d)
		}
		good.progressed(t, "after slowloris")
	})

	var rssFlood int64
	t.Run("10000 idle connections", func(t *testing.T) {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		addr := strings.TrimPrefix(p.URL, "http://")
		dialErrs := 0
		for range 10000 {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				dialErrs++
				continue
			}
			conns = append(conns, c)
		}
		rssFlood = rssBytes(t, pid)
		t.Logf("10,000 idle connections: %d dialled, %d dial errors; node RSS %.1f MiB (%.1f MiB before the attacks)",
			len(conns), dialErrs, float64(rssFlood)/(1<<20), float64(rssStart)/(1<<20))
		good.progressed(t, "during the idle-connection flood")
	})

	t.Run("malformed input", func(t *testing.T) {
		jsonCT, batchCT := authCT("application/json"), authCT("application/vnd.picomq.batch+json")
		deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
		for _, c := range []struct {
			body  string
			batch bool
			okToo bool // valid input the node may accept
		}{
			{body: `{"item":`}, {body: "\xff\xfe"}, {body: `{"a":"\xff"}`}, {body: strings.Repeat("[", 1_000_000)},
			{body: strings.Repeat(`{"a":`, 200_000)}, {body: deep, okToo: true},
			{body: `[{"value":`, batch: true}, {body: `{"value": 1}`, batch: true}, {body: `[{"key": 7}]`, batch: true},
			{body: `[1,2,3]`, batch: true}, {body: `[{"value": "!", "valueEncoding": "base64"}]`, batch: true},
			{body: `[{"headers": [{"key": null}]}]`, batch: true}, {body: `[{"value": ` + deep + `}]`, batch: true, okToo: true},
			{body: `[{"value": "\xff"}]`, batch: true},
		} {
			ct, target := jsonCT, "/h/json"
			if c.batch {
				ct, target = batchCT, "/h/batch"
			}
			r := do(t, "POST", p.URL+target, []byte(c.body), ct...)
			if r.Status != 400 && r.Status != 413 && !(c.okToo && r.Status == 200) {
				t.Errorf("malformed JSON %.40q (batch %v): status %d, want 400/413; %s", c.body, c.batch, r.Status, r.Body)
			}
		}
		for _, path := range []string{"/h/%FF%FE", "/h/a%00b", "/h/../../etc/passwd", "/h/%2e%2e/x", "/h/a%0Ab", "/" + strings.Repeat("n", 5000), "/_streams/../x", "/h//x"} {
			r := do(t, "PUT", p.URL+path, nil, authCT("text/plain")...)
			if r.Status < 400 || r.Status >= 500 {
				t.Errorf("PUT %.60s: status %d, want a 4xx", path, r.Status)
			}
		}
		for _, q := range []string{"offset=-5", "offset=99999999999999999999", "offset=abc", "limit=-1", "live=bogus", "offset=0&live=sse&cursor=%FF", "format=%00"} {
			r := do(t, "GET", p.URL+"/h/good?"+q, nil, auth...)
			if r.Status >= 500 {
				t.Errorf("GET ?%s: status %d", q, r.Status)
			}
		}
		// Oversized: a record over --max-record-bytes, a body over
		// --max-append-bytes, a 2 GiB Content-Length, a header block over
		// --max-header-bytes.
		big := bytes.Repeat([]byte("x"), 100_000)
		r := do(t, "POST", p.URL+"/h/json", []byte(`[{"value":"`+string(big)+`"}]`), jsonCT...)
		if r.Status != 413 && r.Status != 400 {
			t.Errorf("oversized record: %d", r.Status)
		}
		r = do(t, "POST", p.URL+"/h/good", bytes.Repeat([]byte("y"), 2<<20), authCT("text/plain")...)
		wantStatus(t, r, 413, "body over --max-append-bytes")
		c, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "POST /h/good HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+rootToken+
			"\r\nContent-Type: text/plain\r\nContent-Length: 2147483648\r\n\r\nxyz")
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 413 {
			t.Errorf("2 GiB Content-Length: %v %v", err, resp)
		}
		c.Close()
		// A header block over --max-header-bytes: 431, or the connection
		// reset while the client is still sending it; never served.
		c, err = net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, _ = io.WriteString(c, "GET /h/good HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+rootToken+
				"\r\nX-Big: "+strings.Repeat("h", 100<<10)+"\r\n\r\n")
		}()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode != 431 {
			t.Errorf("header block over --max-header-bytes: status %d, want 431", resp.StatusCode)
		} else if isTimeoutErr(err) {
			t.Errorf("header block over --max-header-bytes: no answer")
		}
		c.Close()
		good.progressed(t, "after malformed input")
	})

	t.Run("sse outlives timeouts", func(t *testing.T) {
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		req, _ := http.NewRequestWithContext(sctx, "GET", p.URL+"/h/json?offset=0&live=sse", nil)
		req.Header.Set("Authorization", "Bearer "+rootToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("SSE: %d", resp.StatusCode)
		}
		// Quiet for longer than the header and body timeouts, then data.
		time.Sleep(4 * time.Second)
		wantStatus(t, do(t, "POST", p.URL+"/h/json", []byte(`[{"value":"late"}]`), authCT("application/json")...), 200, "append for SSE")
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data:") && strings.Contains(sc.Text(), "late") {
				return
			}
		}
		t.Fatalf("SSE ended before the event: %v", sc.Err())
	})

	if err := <-longPoll; err != nil {
		t.Errorf("long-poll across the attacks: %v", err)
	}
	cancel()
	wg.Wait()

	// Still up, memory bounded, nothing acknowledged lost.
	wantStatus(t, do(t, "GET", p.URL+"/healthz", nil), 200, "healthz after the attacks")
	rssEnd := rssBytes(t, pid)
	t.Logf("node RSS: %.1f MiB at start, %.1f MiB with 10,000 idle connections, %.1f MiB at the end",
		float64(rssStart)/(1<<20), float64(rssFlood)/(1<<20), float64(rssEnd)/(1<<20))
	if rssFlood > 1<<30 || rssEnd > 1<<30 {
		t.Errorf("node RSS above 1 GiB")
	}
	rcl, _ := picomq.NewPico(p.URL, picomq.WithToken(rootToken))
	seen := map[string]bool{}
	from := "0"
	for {
		page, err := rcl.Stream("/h/good").Read(context.Background(), from, picomq.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			seen[string(r.Body)] = true
		}
		if page.UpToDate || len(page.Records) == 0 {
			break
		}
		from = page.Next
	}
	good.mu.Lock()
	defer good.mu.Unlock()
	for i := range good.acked {
		if !seen["good-"+strconv.Itoa(i)] {
			t.Errorf("acknowledged record good-%d missing after the attacks", i)
		}
	}
	t.Logf("well-behaved client: %d records acknowledged and read back intact, %d failed attempts", len(good.acked), good.errs)
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
