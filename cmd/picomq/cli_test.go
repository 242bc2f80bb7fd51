package main

// CLI tests run the real binary, built in TestMain (PICOMQ_TEST_BIN points
// at a prebuilt one), against real `picomq serve` processes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

var (
	picomqs *testproc.Picomqs
	cliBin  string
	servers = map[string]string{} // protocol -> URL ("kafka": the pico node's Kafka HOST:PORT)
)

func TestMain(m *testing.M) {
	testproc.PicomqMain("cli", func(p *testproc.Picomqs) int { return testMain(m, p) })
}

func testMain(m *testing.M, p *testproc.Picomqs) int {
	picomqs, cliBin = p, p.Bin
	for _, proto := range []string{"pico", "durable-streams"} {
		srv, err := startServer(proto)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cli tests:", err)
			return 1
		}
		defer srv.Kill()
		servers[proto] = srv.url
		if srv.kafkaAddr != "" {
			servers["kafka"] = srv.kafkaAddr
		}
	}
	return m.Run()
}

type server struct {
	*testproc.Proc
	url       string
	kafkaAddr string // the pico node's Kafka listener (picomq bench --protocol kafka)
}

func startServer(proto string) (*server, error) {
	addr, err := testproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	kafkaAddr := "off"
	if proto == "pico" {
		if kafkaAddr, err = testproc.FreeAddr(); err != nil {
			return nil, err
		}
	}
	p, err := picomqs.Serve(addr, 60*time.Second, "--kafka-addr", kafkaAddr,
		"--protocol", proto, "--log-level", "warn", "--sse-timeout", "2s")
	if err != nil {
		return nil, err
	}
	s := &server{Proc: p, url: "http://" + addr}
	if kafkaAddr != "off" {
		s.kafkaAddr = kafkaAddr
	}
	return s, nil
}

type result struct {
	code           int
	stdout, stderr string
}

// cli runs the binary with args against the server of proto.
func cli(t *testing.T, proto, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(cliBin, args...)
	cmd.Env = append(os.Environ(), "PICOMQ_SERVER="+servers[proto], "PICOMQ_PROTOCOL="+proto, "PICOMQ_TOKEN=")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (r result) want(t *testing.T, code int, what string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	return r
}

var nameN struct {
	sync.Mutex
	n int
}

func streamName(t *testing.T) string {
	nameN.Lock()
	defer nameN.Unlock()
	nameN.n++
	return fmt.Sprintf("/cli/%s/%d-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano()%1e9, nameN.n)
}

func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestCLIRoundTrip(t *testing.T) {
	for _, proto := range []string{"pico", "durable-streams"} {
		t.Run(proto, func(t *testing.T) {
			name := streamName(t)
			pos := func(n int) string {
				if proto == "pico" {
					return fmt.Sprint(n)
				}
				return fmt.Sprintf("%016d_%016d", 0, n)
			}
			r := cli(t, proto, "", "create", name, "--content-type", "text/plain").want(t, 0, "create")
			if !strings.HasPrefix(r.stdout, "created "+name) {
				t.Fatalf("create printed %q", r.stdout)
			}
			r = cli(t, proto, "", "create", "--json", name, "--content-type", "text/plain").want(t, 0, "identical create")
			if m := jsonLines(t, r.stdout); m[0]["created"] != false || m[0]["contentType"] != "text/plain" {
				t.Fatalf("identical create: %s", r.stdout)
			}
			cli(t, proto, "", "create", name, "--content-type", "application/json").want(t, exitConflict, "create with another type")

			// Line by line: empty lines skipped, CRLF and a last line
			// without newline handled.
			// A long linger keeps the three lines in one batch (stdin's EOF
			// sends it at once); without it the producer may send the first
			// line alone before the others are read.
			start := time.Now()
			r = cli(t, proto, "one\r\ntwo\n\nthree", "append", name, "--json", "--linger", "30s").want(t, 0, "append")
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("append waited %v: closing the producer must not wait for the linger", d)
			}
			// Over Durable Streams a byte stream has no record boundaries:
			// the producer's batch of three lines is one message.
			stored := 3
			if proto != "pico" {
				stored = 1
			}
			if m := jsonLines(t, r.stdout); m[0]["records"] != float64(3) || m[0]["first"] != pos(0) || m[0]["next"] != pos(stored) {
				t.Fatalf("append printed %s", r.stdout)
			}
			r = cli(t, proto, "", "read", name).want(t, 0, "read")
			want := "one\ntwo\nthree\n"
			if proto != "pico" {
				want = "one\r\ntwo\nthree\n" // the input's bytes, each line ended
			}
			if r.stdout != want {
				t.Fatalf("read printed %q", r.stdout)
			}
			r = cli(t, proto, "", "read", name, "--json").want(t, 0, "read --json")
			recs := jsonLines(t, r.stdout)
			if proto == "pico" {
				if len(recs) != 3 || recs[2]["value"] != "three" || recs[2]["position"] != pos(2) || recs[0]["timestamp"] == nil {
					t.Fatalf("read --json: %s", r.stdout)
				}
				r = cli(t, proto, "", "read", name, "--from", "1", "--limit", "1").want(t, 0, "read --from --limit")
				if r.stdout != "two\n" {
					t.Fatalf("read --from 1 --limit 1: %q", r.stdout)
				}
				r = cli(t, proto, "", "tail", "-n", "2", name).want(t, 0, "tail -n 2")
				if r.stdout != "two\nthree\n" {
					t.Fatalf("tail -n 2: %q", r.stdout)
				}
			} else {
				// A Durable Streams byte stream keeps the input's bytes.
				if len(recs) != 1 || recs[0]["value"] != want || recs[0]["position"] != "-1" {
					t.Fatalf("read --json: %s", r.stdout)
				}
				r = cli(t, proto, "", "tail", "-n", "1", name).want(t, 0, "tail -n 1")
				if r.stdout != want {
					t.Fatalf("tail -n 1: %q", r.stdout)
				}
			}
			cli(t, proto, "a whole\nbody\n", "append", "--whole", name).want(t, 0, "append --whole")
			r = cli(t, proto, "", "describe", name, "--json").want(t, 0, "describe")
			if m := jsonLines(t, r.stdout); m[0]["next"] != pos(stored+1) || m[0]["contentType"] != "text/plain" {
				t.Fatalf("describe: %s", r.stdout)
			}
			r = cli(t, proto, "", "describe", name).want(t, 0, "describe (human)")
			if !strings.Contains(r.stdout, "next:") || !strings.Contains(r.stdout, pos(stored+1)) {
				t.Fatalf("describe: %s", r.stdout)
			}

			if proto == "pico" {
				r = cli(t, proto, "", "ls", "--json", "--prefix", name).want(t, 0, "ls")
				if m := jsonLines(t, r.stdout); len(m) != 1 || m[0]["name"] != name {
					t.Fatalf("ls: %s", r.stdout)
				}
				r = cli(t, proto, "", "ls", name).want(t, 0, "ls (human)")
				if !strings.Contains(r.stdout, "NAME") || !strings.Contains(r.stdout, name) {
					t.Fatalf("ls: %s", r.stdout)
				}
			} else {
				cli(t, proto, "", "ls").want(t, exitUnsupported, "ls over Durable Streams")
				cli(t, proto, "x\n", "append", name, "--key", "k").want(t, exitUnsupported, "a key over Durable Streams")
			}

			cli(t, proto, "", "rm", name).want(t, 0, "rm")
			cli(t, proto, "", "rm", name).want(t, exitNotFound, "rm of a missing stream")
			cli(t, proto, "", "rm", "--force", name).want(t, 0, "rm --force of a missing stream")
			cli(t, proto, "", "read", name).want(t, exitNotFound, "read of a missing stream")
			cli(t, proto, "x\n", "append", name).want(t, exitNotFound, "append to a missing stream")
		})
	}
}

func TestCLIKeysAndBinary(t *testing.T) {
	name := streamName(t)
	cli(t, "pico", "", "create", name).want(t, 0, "create")
	cli(t, "pico", "a\nb\n", "append", name, "--key", "user-7").want(t, 0, "append --key")
	cli(t, "pico", "\xff\x00", "append", name, "--whole").want(t, 0, "append binary")
	r := cli(t, "pico", "", "read", name, "--json").want(t, 0, "read")
	recs := jsonLines(t, r.stdout)
	if len(recs) != 3 || recs[0]["key"] != "user-7" || recs[2]["valueEncoding"] != "base64" || recs[2]["value"] != "/wA=" {
		t.Fatalf("read --json: %s", r.stdout)
	}
}

// withJSONStream runs body once per HTTP protocol, as a subtest, on a new
// application/json stream.
func withJSONStream(t *testing.T, body func(t *testing.T, proto, name string)) {
	for _, proto := range []string{"pico", "durable-streams"} {
		t.Run(proto, func(t *testing.T) {
			name := streamName(t)
			cli(t, proto, "", "create", name, "--content-type", "application/json").want(t, 0, "create")
			body(t, proto, name)
		})
	}
}

// TestCLIJSONValues: read --json and tail --json of a JSON stream print each
// value that is JSON as JSON ("value":{"item":"widget"}, so jq
// '.value.item' works), flag a JSON string with valueEncoding "json", and
// print a text stream's values as strings, over both protocols.
func TestCLIJSONValues(t *testing.T) {
	withJSONStream(t, func(t *testing.T, proto, name string) {
		cli(t, proto, "{\"item\":\"widget\",\"qty\":2}\n\"s\"\n[1,2]\n", "append", name).want(t, 0, "append")
		for _, cmd := range [][]string{{"read", name, "--json"}, {"tail", name, "--json"}} {
			r := cli(t, proto, "", cmd...).want(t, 0, cmd[0])
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(lines) != 3 || !strings.Contains(lines[0], `"value":{"item":"widget","qty":2}`) ||
				!strings.Contains(lines[1], `"value":"s","valueEncoding":"json"`) || !strings.Contains(lines[2], `"value":[1,2]`) {
				t.Fatalf("%s --json of a JSON stream:\n%s", cmd[0], r.stdout)
			}
		}
		text := streamName(t)
		cli(t, proto, "", "create", text, "--content-type", "text/plain").want(t, 0, "create text")
		cli(t, proto, "{\"a\":1}\n", "append", text).want(t, 0, "append text")
		r := cli(t, proto, "", "read", text, "--json").want(t, 0, "read text")
		recs := jsonLines(t, r.stdout)
		if len(recs) != 1 || !strings.HasPrefix(fmt.Sprint(recs[0]["value"]), `{"a":1}`) {
			t.Fatalf("read --json of a text stream: %s", r.stdout)
		}
	})
}

// TestCLIEncodeAndAppendBinary: picomq encode writes a Pico binary batch
// that the server takes as an application/vnd.picomq.batch body (the curl
// of docs/api.md), and append --format binary appends such a batch as one
// append, keys and headers kept.
func TestCLIEncodeAndAppendBinary(t *testing.T) {
	enc := cli(t, "pico", "one\ntwo\n", "encode", "--key", "k7").want(t, 0, "encode")
	recs, err := codec.Decode([]byte(enc.stdout), nil, codec.Limits{})
	if err != nil || len(recs) != 2 || string(recs[0].Key) != "k7" || string(recs[1].Value) != "two" {
		t.Fatalf("encode wrote %q: %v %+v", enc.stdout, err, recs)
	}
	name := streamName(t)
	cli(t, "pico", "", "create", name, "--content-type", "text/plain").want(t, 0, "create")
	res, err := http.Post(servers["pico"]+name, wire.MediaBatch, strings.NewReader(enc.stdout))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get(wire.HeaderRecordCount) != "2" {
		t.Fatalf("POST of the encoded batch: %d, %s records", res.StatusCode, res.Header.Get(wire.HeaderRecordCount))
	}
	frame := codec.Encode([]codec.Record{{Key: []byte("k8"), Value: []byte("three"), Headers: []codec.Header{{Key: "h", Value: []byte("v")}}}, {Value: []byte("four")}})
	r := cli(t, "pico", string(frame), "append", name, "--format", "binary").want(t, 0, "append --format binary")
	if !strings.Contains(r.stdout, "appended 2 records") || !strings.Contains(r.stdout, "first position 2") {
		t.Fatalf("append --format binary: %s", r.stdout)
	}
	out := jsonLines(t, cli(t, "pico", "", "read", name, "--json").want(t, 0, "read").stdout)
	if len(out) != 4 || out[0]["key"] != "k7" || out[2]["key"] != "k8" || out[2]["value"] != "three" || out[3]["value"] != "four" ||
		len(out[2]["headers"].([]any)) != 1 {
		t.Fatalf("read after the binary appends: %v", out)
	}
	cli(t, "pico", "not a batch", "append", name, "--format", "binary").want(t, exitError, "append --format binary of garbage")
	cli(t, "pico", "x", "append", name, "--format", "xml").want(t, exitUsage, "unknown --format")
	cli(t, "pico", "", "encode").want(t, exitError, "encode of empty input")
	cli(t, "pico", "", "encode", "extra").want(t, exitUsage, "encode with an argument")
}

func TestCLIUsageAndErrors(t *testing.T) {
	cli(t, "pico", "", "read").want(t, exitUsage, "read without a name")
	cli(t, "pico", "", "read", "no-slash").want(t, exitUsage, "a name without /")
	cli(t, "pico", "", "read", "/a", "--bogus").want(t, exitUsage, "unknown flag")
	cli(t, "pico", "", "read", "/a", "--protocol", "kafka").want(t, exitUsage, "bad protocol")
	cli(t, "pico", "", "read", "/a", "--limit", "-1").want(t, exitUsage, "negative limit")
	cli(t, "pico", "", "frobnicate").want(t, exitUsage, "unknown command")
	cli(t, "pico", "", "read", "/a", "--server", "http://127.0.0.1:1").want(t, exitUnavailable, "unreachable server")
	cli(t, "pico", "", "read", "-h").want(t, exitOK, "help")
}

// TestCLIAppendLarge: a large input goes through the batching producer in
// a handful of requests; without a terminal on stderr there is no
// progress output.
func TestCLIAppendLarge(t *testing.T) {
	name := streamName(t)
	cli(t, "pico", "", "create", name).want(t, 0, "create")
	var in strings.Builder
	const n = 50000
	for i := range n {
		fmt.Fprintf(&in, "record number %d\n", i)
	}
	r := cli(t, "pico", in.String(), "append", name, "--json").want(t, 0, "append")
	if m := jsonLines(t, r.stdout); m[0]["records"] != float64(n) || m[0]["next"] != fmt.Sprint(n) {
		t.Fatalf("append: %s", r.stdout)
	}
	if r.stderr != "" {
		t.Fatalf("stderr is not a terminal, yet append wrote %q", r.stderr)
	}
	r = cli(t, "pico", "", "tail", "-n", "1", name).want(t, 0, "tail")
	if r.stdout != fmt.Sprintf("record number %d\n", n-1) {
		t.Fatalf("last record %q", r.stdout)
	}
}

// TestCLITailFollow: tail -f prints records as they are appended and exits
// 0 on SIGINT.
func TestCLITailFollow(t *testing.T) {
	withJSONStream(t, func(t *testing.T, proto, name string) {
		cli(t, proto, `{"n":0}`+"\n", "append", name).want(t, 0, "append")

		cmd := exec.Command(cliBin, "tail", "-f", "-n", "1", name)
		cmd.Env = append(os.Environ(), "PICOMQ_SERVER="+servers[proto], "PICOMQ_PROTOCOL="+proto)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
			exited <- cmd.Wait()
		}()
		defer cmd.Process.Kill()
		expect := func(want string) {
			t.Helper()
			select {
			case l := <-lines:
				if l != want {
					t.Fatalf("tail -f printed %q, want %q", l, want)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("tail -f did not print %q within 15s; stderr: %s", want, stderr.String())
			}
		}
		expect(`{"n":0}`) // the last existing record: tail is following now
		for i := 1; i <= 3; i++ {
			cli(t, proto, fmt.Sprintf(`{"n":%d}`, i)+"\n", "append", name).want(t, 0, "append")
			expect(fmt.Sprintf(`{"n":%d}`, i))
		}
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		for range lines {
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("tail -f after SIGINT: %v; stderr: %s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("tail -f did not exit within 10s of SIGINT")
		}
	})
}

// TestCLIToken: the token (flag or env) reaches the server; what the CLI
// writes, the SDK reads.
func TestCLIToken(t *testing.T) {
	// A recording proxy in front of the server checks the token arrives.
	var mu sync.Mutex
	var auths []string
	target := servers["pico"]
	px := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		req, _ := http.NewRequest(r.Method, target+r.URL.RequestURI(), r.Body)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go px.Serve(ln)
	defer px.Close()
	name := streamName(t)
	cmd := exec.Command(cliBin, "create", name, "--token", "tok-123", "--server", "http://"+ln.Addr().String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("create: %v %s", err, out)
	}
	cmd = exec.Command(cliBin, "append", name, "--server", "http://"+ln.Addr().String())
	cmd.Env = append(os.Environ(), "PICOMQ_TOKEN=tok-env")
	cmd.Stdin = strings.NewReader("x\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("append: %v %s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auths) < 2 || auths[0] != "Bearer tok-123" || auths[len(auths)-1] != "Bearer tok-env" {
		t.Fatalf("Authorization headers seen: %q", auths)
	}
	c, _ := picomq.NewPico(servers["pico"])
	page, err := c.Stream(name).Read(context.Background(), "0", picomq.ReadOptions{})
	if err != nil || len(page.Records) != 1 || string(page.Records[0].Body) != "x" {
		t.Fatalf("SDK read of the CLI's record: %+v %v", page, err)
	}
}

// Unit tests of the CLI's helpers.

func TestForEachLine(t *testing.T) {
	var got []string
	err := forEachLine(strings.NewReader("a\r\nb\n\nc"), false, func(l []byte) error {
		got = append(got, string(l))
		return nil
	})
	if err != nil || fmt.Sprintf("%q", got) != `["a" "b" "" "c"]` {
		t.Fatalf("%q %v", got, err)
	}
	got = nil
	forEachLine(strings.NewReader("a\nb"), true, func(l []byte) error {
		got = append(got, string(l))
		return nil
	})
	if fmt.Sprintf("%q", got) != `["a\n" "b"]` {
		t.Fatalf("keeping newlines: %q", got)
	}
	long := strings.Repeat("x", maxLine+10) + "\n"
	if err := forEachLine(strings.NewReader(long), false, func([]byte) error { return nil }); err == nil {
		t.Fatal("a line above the limit was accepted")
	}
	mid := strings.Repeat("y", 200<<10) // longer than the reader's buffer
	got = nil
	forEachLine(strings.NewReader(mid+"\nz\n"), false, func(l []byte) error {
		got = append(got, string(l))
		return nil
	})
	if len(got) != 2 || got[0] != mid || got[1] != "z" {
		t.Fatalf("long line split wrongly: %d lines", len(got))
	}
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(0, 0)
	p := newProgress(&buf, true, "/s")
	p.start, p.last, p.now = clock, clock, func() time.Time { return clock }
	for range 256 {
		p.add(10)
	}
	if buf.Len() != 0 {
		t.Fatal("progress shown before a second passed")
	}
	clock = clock.Add(2 * time.Second)
	for range 256 {
		p.add(10)
	}
	p.done()
	if out := buf.String(); !strings.Contains(out, "512 records") || !strings.Contains(out, "5.0 KiB") || !strings.HasSuffix(out, "\n") {
		t.Fatalf("progress output %q", out)
	}
	buf.Reset()
	q := newProgress(&buf, false, "/s")
	q.start = time.Unix(0, 0)
	for range 10000 {
		q.add(10)
	}
	q.done()
	if buf.Len() != 0 {
		t.Fatalf("progress shown without a terminal: %q", buf.String())
	}
}

func TestExitCode(t *testing.T) {
	for err, code := range map[error]int{
		usagef("x"): exitUsage,
		&picomq.ClientError{Kind: picomq.KindNotFound}:       exitNotFound,
		&picomq.ClientError{Kind: picomq.KindFenced}:         exitConflict,
		&picomq.ClientError{Kind: picomq.KindUnavailable}:    exitUnavailable,
		&picomq.UnsupportedError{Op: "List"}:                 exitUnsupported,
		errors.New("other"):                                  exitError,
		&net.OpError{Op: "dial", Err: errors.New("refused")}: exitUnavailable,
	} {
		if got := exitCode(fmt.Errorf("wrapped: %w", err)); got != code {
			t.Errorf("%v: exit %d, want %d", err, got, code)
		}
	}
}
