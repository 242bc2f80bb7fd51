package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
)

// TestBootWaitsForDependencies: a node started before its object store and
// its etcd answer (a first boot on AWS: NAT, IAM propagation, etcd peers
// still booting) does not exit: it retries with backoff, says on /readyz
// and in its log what it waits for, and becomes ready once MinIO and then
// etcd come up, with the appends it then acknowledges stored.
func TestBootWaitsForDependencies(t *testing.T) {
	m := newMinio(t)
	e := newEtcd(t)
	addr := freeAddr(t)
	base := "http://" + addr
	cmd := exec.Command(picomqBin, "serve", "--node-id", "boot", "--kafka-addr", "off", "--http-addr", addr,
		"--data-dir", t.TempDir(), "--object-store", m.ObjectStoreURL(), "--etcd-endpoints", e.Endpoint())
	cmd.Env = append(os.Environ(), m.Env()...)
	logs := &syncBuffer{}
	p, err := testproc.Start(cmd, logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("node log:\n%s", lastBytes(logs.String(), 8192))
		}
	})

	// readyzSays waits until /readyz answers status with a body that
	// matches want.
	readyzSays := func(status int, want string, within time.Duration) {
		re := regexp.MustCompile(want)
		t.Helper()
		var last string
		ok := pollUntil(within, 50*time.Millisecond, func() bool {
			r, err := tryDo(context.Background(), "GET", base+"/readyz", nil)
			if err != nil {
				last = err.Error()
				return false
			}
			last = fmt.Sprintf("%d %s", r.Status, r.Body)
			return r.Status == status && re.Match(r.Body)
		})
		if !ok {
			t.Fatalf("/readyz: want %d with %q within %v; last answer: %s", status, want, within, last)
		}
	}
	// "(attempt N): error" is there once an attempt has failed (and been
	// logged); during the first, /readyz names the dependency alone.
	readyzSays(http.StatusServiceUnavailable, `object store \(attempt [0-9]+\): `, 30*time.Second)
	if r, err := tryDo(context.Background(), "GET", base+"/healthz", nil); err != nil || r.Status != 200 {
		t.Fatalf("/healthz while waiting: %v %+v, want 200 (the process is alive)", err, r)
	}
	if r, err := tryDo(context.Background(), "POST", base+"/boot/s1", []byte("x"), "Content-Type", "text/plain"); err != nil || r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("append while waiting: %v %+v, want a retryable 503", err, r)
	}
	m.up()
	readyzSays(http.StatusServiceUnavailable, `etcd \(attempt [0-9]+\): `, 60*time.Second)
	e.start()
	readyzSays(http.StatusOK, "ready", 90*time.Second)

	select {
	case <-p.Exited:
		t.Fatalf("node exited: %v", p.ExitErr)
	default:
	}
	for _, want := range []string{`waiting_for="object store"`, `waiting_for=etcd`, "retry_in="} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not report %s", want)
		}
	}
	wantStatus(t, do(t, "PUT", base+"/boot/s1", nil, "Content-Type", "text/plain"), 201, "create after boot")
	wantStatus(t, do(t, "POST", base+"/boot/s1", []byte("after boot"), "Content-Type", "text/plain"), 200, "append after boot")
	if err := p.Stop(30 * time.Second); err != nil || p.ExitErr != nil {
		t.Fatalf("stop: %v %v", err, p.ExitErr)
	}
	// The flush at shutdown went to the MinIO that came up late.
	out, err := runCurl(m, m.URL()+"/"+m.Bucket+"?list-type=2")
	if err != nil || !bytes.Contains(out, []byte("<Key>")) {
		t.Fatalf("no object in the bucket after the shutdown flush: %v %s", err, out)
	}
}

// TestBootExitCodes: a configuration error exits 2 at once (systemd does
// not restart it: RestartPreventExitStatus=2), while a dependency that is
// still unavailable when --start-retry runs out exits 1 (systemd restarts
// the unit) after having retried.
func TestBootExitCodes(t *testing.T) {
	t.Run("configuration error", func(t *testing.T) {
		code, out, took := serveOnce(t, 20*time.Second, "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
			"--object-store", "s3://bucket?sse=rot13&endpoint=http://"+freeAddr(t))
		if code != 2 || !strings.Contains(out, "--object-store") || took > 10*time.Second {
			t.Fatalf("exit %d after %v, want 2 at once naming --object-store:\n%s", code, took, out)
		}
	})
	t.Run("unavailable past --start-retry", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "boot-test")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "boot-test-secret")
		code, out, _ := serveOnce(t, 60*time.Second, "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
			"--start-retry", "3s", "--object-store", "s3://bucket?region=us-east-1&endpoint=http://"+freeAddr(t))
		if code != 1 || !strings.Contains(out, "--object-store") || !strings.Contains(out, "retrying") {
			t.Fatalf("exit %d, want 1 after retries, naming --object-store:\n%s", code, out)
		}
	})
}
