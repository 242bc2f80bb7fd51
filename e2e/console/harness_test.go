package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/chromedp/chromedp"
)

var (
	picomqBin string
	binDir    string
)

func TestMain(m *testing.M) {
	testproc.PicomqMain("console", func(p *testproc.Picomqs) int {
		picomqBin, binDir = p.Bin, p.Dir
		return m.Run()
	})
}

// need fails under CI (a missing tool is a broken CI machine) and skips
// elsewhere.
func need(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true", what)
	}
	t.Skipf("%s not available", what)
}

// chromium returns Debian's chromium: $PICOMQ_CHROMIUM or the first of
// chromium, chromium-browser on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PICOMQ_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	need(t, "chromium (apt-get install -y chromium)")
	return ""
}

// browser starts a headless chromium with a fresh profile and the flags
// this project runs it with, and returns a tab's context; everything
// ends with the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// do runs steps within limit.
func do(t *testing.T, ctx context.Context, limit time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v\npage: %s", what, err, pageText(ctx))
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits until expr is truthy in the page.
func waitJS(expr string, within time.Duration) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(within), chromedp.WithPollingInterval(20*time.Millisecond))
}

func pageText(ctx context.Context) string {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(c, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return s
}

// screenshot keeps a PNG of the page as a test artefact: under
// $PICOMQ_REPORT_DIR/console when set, else in the test's temporary
// directory, and logs where.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := t.TempDir()
	if r := os.Getenv("PICOMQ_REPORT_DIR"); r != "" {
		dir = filepath.Join(r, "console")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// node is one `picomq serve` child.
type node struct {
	id, url, kafka string
	proc           *testproc.Proc
}

// serve starts a node with args on free loopback ports and waits for
// /readyz.
func serve(t *testing.T, id string, env []string, args ...string) *node {
	t.Helper()
	addr, err := testproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	kafka, err := testproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	n := &node{id: id, url: "http://" + addr, kafka: kafka}
	args = append([]string{"serve", "--node-id", id, "--data-dir", filepath.Join(t.TempDir(), id),
		"--http-addr", addr, "--advertise-url", n.url, "--kafka-addr", kafka}, args...)
	cmd := exec.Command(picomqBin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if n.proc, err = testproc.Start(cmd, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n.proc.Stop(20*time.Second) != nil || t.Failed() {
			t.Logf("%s log:\n%s", id, tailOf(n.proc.Logs.String(), 4000))
		}
	})
	if err := testproc.WaitReady(n.url+"/readyz", n.proc.Exited, 60*time.Second); err != nil {
		t.Fatalf("%s: %v\n%s", id, err, n.proc.Logs.String())
	}
	return n
}

func tailOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// request sends one HTTP request with an optional bearer token and
// returns the status, a header and the body.
func request(t *testing.T, method, url, token, contentType, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func mustStatus(t *testing.T, want int, method, url, token, contentType, body string) http.Header {
	t.Helper()
	got, h, b := request(t, method, url, token, contentType, body)
	if got != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, got, b, want)
	}
	return h
}

// tokenFile writes an auth token file granting token admin:/.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(token))
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	y := fmt.Sprintf("tokens:\n  - name: console-admin\n    sha256: %s\n    scopes: [\"admin:/\"]\n", hex.EncodeToString(sum[:]))
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
