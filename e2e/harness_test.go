// Package e2e holds black-box tests: they build the real picomq binary, run
// it as a child process on loopback, talk to it over HTTP and kill it with
// SIGKILL. Nothing here imports server internals except through the binary.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
)

var picomqBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "picomq-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	picomqBin = filepath.Join(dir, "picomq")
	if err := testproc.Build(picomqBin, testproc.Picomq); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building picomq:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := testproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// proc is one running picomq process; restart runs it again with the same
// arguments and log buffer.
type proc struct {
	t              testing.TB
	name           string // in the failure log's heading; empty: the URL only
	URL            string
	dataDir        string
	args           []string
	env            []string
	logs           *syncBuffer
	bin            string       // the binary to run; empty = the picomq built by TestMain
	client         *http.Client // polls /readyz; nil = plain HTTP (a TLS node needs one trusting its CA)
	*testproc.Proc              // the running (or last) process
}

type syncBuffer = testproc.SyncBuffer

// startNode runs `picomq serve` on a fresh loopback port with dataDir and
// waits until /readyz answers 200.
func startNode(t testing.TB, dataDir string, extra ...string) *proc {
	t.Helper()
	return startNodeEnv(t, dataDir, nil, extra...)
}

// startNodeEnv is startNode with extra environment variables.
func startNodeEnv(t testing.TB, dataDir string, env []string, extra ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	args := append([]string{"serve", "--data-dir", dataDir, "--http-addr", addr, "--kafka-addr", "off", "--node-id", "e2e"}, extra...)
	return startProc(t, &proc{t: t, URL: "http://" + addr, dataDir: dataDir, args: args, env: env, logs: &syncBuffer{}})
}

// startProc starts p and, when the test ends, kills it and logs the tail
// of its output if the test failed.
func startProc(t testing.TB, p *proc) *proc {
	t.Helper()
	p.start()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			who := p.URL
			if p.name != "" {
				who = p.name + " (" + p.URL + ")"
			}
			logs := p.logs.String()
			t.Logf("node %s log (last 8 KiB):\n%s", who, logs[max(0, len(logs)-8192):])
			if dir := os.Getenv("PICOMQ_E2E_LOG_DIR"); dir != "" {
				// The whole log, for a failure a tail does not explain
				// (a soak's violation happened minutes earlier).
				name := strings.NewReplacer("/", "_", ":", "_").Replace(t.Name() + "-" + p.name + "-" + strings.TrimPrefix(p.URL, "http://"))
				if err := os.WriteFile(filepath.Join(dir, name+".log"), []byte(logs), 0o644); err == nil {
					t.Logf("node %s: whole log in %s", who, filepath.Join(dir, name+".log"))
				}
			}
		}
	})
	return p
}

func (p *proc) start() {
	p.t.Helper()
	bin := picomqBin
	if p.bin != "" {
		bin = p.bin
	}
	cmd := exec.Command(bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	started, err := testproc.Start(cmd, p.logs)
	if err != nil {
		p.t.Fatalf("start picomq: %v", err)
	}
	p.Proc = started
	if err := testproc.WaitReadyWith(p.client, p.URL+"/readyz", p.Exited, 60*time.Second); err != nil {
		p.t.Fatalf("picomq: %v\n%s", err, p.logs.String())
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(t testing.TB) {
	t.Helper()
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("picomq: %v\n%s", err, p.logs.String())
	}
	if p.ExitErr != nil {
		t.Fatalf("picomq exited uncleanly after SIGTERM: %v\n%s", p.ExitErr, p.logs.String())
	}
}

// restart starts the same node again on the same data dir and port.
func (p *proc) restart() { p.start() }

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func do(t testing.TB, method, url string, body []byte, headers ...string) response {
	t.Helper()
	r, err := tryDo(context.Background(), method, url, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}

func tryDo(ctx context.Context, method, url string, body []byte, headers ...string) (response, error) {
	r, err := send(ctx, http.DefaultClient, method, url, body, headers...)
	return r.response, err
}

func wantStatus(t testing.TB, r response, status int, what string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, r.Status, status, strings.TrimSpace(string(r.Body)))
	}
}
