package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/wal/faultfs"
)

// startOnFS starts a whole node (serve flags args on a fresh data dir and
// loopback port, Kafka off) whose WAL goes through fs, shuts it down when
// the test ends, and returns a function that sends it one request: the
// status and body, or 0 and the error when the request could not be sent
// (it is called from other goroutines too, so it does not fail the test).
func startOnFS(t *testing.T, ctx context.Context, fs *faultfs.FS, args ...string) func(method, path, body string) (int, string) {
	t.Helper()
	n := startTestNode(t, ctx, t.TempDir(), func(cfg *Config) { cfg.walFS = fs }, args...)
	shutdownAtEnd(t, n)
	base := "http://" + n.Addr()
	return func(method, path, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, fmt.Sprintf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}

// TestDiskFaultFailsAppendsAndReadiness runs a whole node (embedded etcd,
// local object store) over the fault-injecting WAL filesystem and checks
// what docs/durability.md promises when the disk fails: once a WAL write
// meets ENOSPC or an fdatasync meets EIO, appends answer 503 and /readyz
// answers 503, for good, while what was acknowledged before stays readable.
func TestDiskFaultFailsAppendsAndReadiness(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    faultfs.Op
		errno syscall.Errno
	}{
		{"write ENOSPC", faultfs.OpWrite, syscall.ENOSPC},
		{"fdatasync EIO", faultfs.OpSync, syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := faultfs.New()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			call := startOnFS(t, ctx, fs, "--node-id", "diskfault")
			if code, body := call("PUT", "/disk", ""); code != 201 {
				t.Fatalf("create: %d %s", code, body)
			}
			if code, body := call("POST", "/disk", "before"); code/100 != 2 {
				t.Fatalf("append before the fault: %d %s", code, body)
			}
			if code, body := call("GET", "/readyz", ""); code != 200 {
				t.Fatalf("/readyz before the fault: %d %s", code, body)
			}

			fs.SetHook(func(op faultfs.Op, path string) error {
				if op == tc.op && strings.HasSuffix(path, ".wal") {
					return tc.errno
				}
				return nil
			})
			code, body := call("POST", "/disk", "meets the fault")
			if code != http.StatusServiceUnavailable {
				t.Fatalf("append meeting %s: %d %s, want 503", tc.name, code, body)
			}
			fs.SetHook(nil) // the disk is fine again; the WAL must stay failed
			if code, body := call("POST", "/disk", "after"); code != http.StatusServiceUnavailable {
				t.Fatalf("append after %s: %d %s, want 503 (the failure is sticky)", tc.name, code, body)
			}
			if code, body := call("GET", "/readyz", ""); code != http.StatusServiceUnavailable {
				t.Fatalf("/readyz after %s: %d %s, want 503", tc.name, code, body)
			}
		})
	}
}

// TestPausedOwnerDoesNotAcknowledge holds an append inside its WAL fdatasync
// while the node's etcd connection is frozen (keep-alives neither sent nor
// answered, as for a process stopped with SIGSTOP: nothing renews the lease)
// for longer than 80% of the lease TTL, then lets the fdatasync finish. The
// node must answer 503, not acknowledge: by then another node may own the
// stream and hand out the same offsets.
func TestPausedOwnerDoesNotAcknowledge(t *testing.T) {
	e, _ := metatest.StartEmbedded(t)
	u, err := url.Parse(e.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	fr := metatest.NewFreezer(t, u.Host)
	fs := faultfs.New()
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	post := startOnFS(t, ctx, fs,
		"--node-id", "paused", "--lease-ttl", ttl.String(), "--etcd-endpoints", "http://"+fr.Addr())
	t.Cleanup(func() { fr.Set(false) }) // runs before the node's shutdown
	if code, body := post("PUT", "/paused", ""); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := post("POST", "/paused", "before"); code/100 != 2 {
		t.Fatalf("append: %d %s", code, body)
	}

	held, release := fs.HoldSegmentSyncs(nil)
	type answer struct {
		code int
		body string
	}
	got := make(chan answer, 1)
	go func() {
		code, body := post("POST", "/paused", "during the pause")
		got <- answer{code, body}
	}()
	<-held
	fr.Set(true)
	// The condition under test is the passage of time itself: the last
	// renewal happened at most TTL/3 before the freeze.
	time.Sleep(ttl*8/10 + 300*time.Millisecond)
	close(release)
	a := <-got
	if a.code != http.StatusServiceUnavailable {
		t.Fatalf("append acknowledged after the lease went unrenewed for 0.8×TTL: %d %s, want 503", a.code, a.body)
	}
}
