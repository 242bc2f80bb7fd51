package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
)

// serveOnce runs `picomq serve args…` to its end (bounded by within) and
// returns its exit code, its output and how long it ran.
func serveOnce(t *testing.T, within time.Duration, args ...string) (int, string, time.Duration) {
	t.Helper()
	cmd := exec.Command(picomqBin, append([]string{"serve", "--kafka-addr", "off", "--node-id", "e2e"}, args...)...)
	var out testproc.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(within):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("picomq serve %v still running after %v; output:\n%s", args, within, out.String())
	}
	return cmd.ProcessState.ExitCode(), out.String(), time.Since(start)
}

// assertFreed checks that nothing is left listening on addr.
func assertFreed(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s still held after the failed start: %v", addr, err)
	}
	ln.Close()
}

// TestStartupFailures: a start that cannot succeed ends at once with exit 2,
// one line on stderr naming the setting, no panic, and nothing left
// listening or locked.
func TestStartupFailures(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"port in use", []string{"--http-addr", busy.Addr().String()}, []string{"--http-addr", "address already in use"}},
		{"object store unusable", []string{"--http-addr", freeAddr(t), "--object-store", "file:///proc/nope"}, []string{"--object-store", "/proc/nope"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			code, out, took := serveOnce(t, 20*time.Second, append([]string{"--data-dir", dir}, c.args...)...)
			if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Fatalf("start-up failure panicked:\n%s", out)
			}
			if code != 2 {
				t.Errorf("exit %d, want 2; output:\n%s", code, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if len(lines) != 1 {
				t.Errorf("%d lines of output, want one:\n%s", len(lines), out)
			}
			for _, w := range c.want {
				if !strings.Contains(last, w) {
					t.Errorf("reason %q does not name %q", last, w)
				}
			}
			if took > 10*time.Second {
				t.Errorf("failed start took %v", took)
			}
			// The data dir is not left locked: a node starts on it now.
			p := startNode(t, dir)
			p.stop(t)
		})
	}
}

// TestDataDirInUse: a second node on a data dir in use exits at once with
// the owner's pid, holding no port, and the first node keeps serving.
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	first := startNode(t, dir)
	addr := freeAddr(t)
	code, out, took := serveOnce(t, 20*time.Second, "--data-dir", dir, "--http-addr", addr)
	want := fmt.Sprintf("data dir %s in use by pid %d", dir, first.Cmd.Process.Pid)
	if code != 2 || !strings.Contains(out, want) {
		t.Fatalf("second node: exit %d, output %q; want exit 2 and %q", code, out, want)
	}
	if took > 5*time.Second {
		t.Errorf("second node took %v to give up, want at once", took)
	}
	assertFreed(t, addr)
	wantStatus(t, do(t, "GET", first.URL+"/readyz", nil), 200, "first node after the second one's attempt")
	first.stop(t)
	// kill -9 releases the lock too (the kernel drops it with the process).
	again := startNode(t, dir)
	again.Kill()
	startNode(t, dir).stop(t)
}

// TestSIGTERMBoundedInAnyState: SIGTERM ends a node within
// --shutdown-timeout while it is stuck starting (an etcd endpoint that
// accepts connections and never answers) and while it serves a long-poll
// that would outlive the timeout.
func TestSIGTERMBoundedInAnyState(t *testing.T) {
	const timeout = 2 * time.Second
	const slack = 2 * time.Second // process exit and scheduling on a loaded machine

	t.Run("starting", func(t *testing.T) {
		mute, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer mute.Close()
		go func() {
			for {
				c, err := mute.Accept()
				if err != nil {
					return
				}
				defer c.Close() // held open, never answered
			}
		}()
		httpAddr := freeAddr(t)
		cmd := exec.Command(picomqBin, "serve", "--kafka-addr", "off", "--data-dir", t.TempDir(),
			"--http-addr", httpAddr, "--etcd-endpoints", mute.Addr().String(),
			"--shutdown-timeout", timeout.String())
		var out testproc.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		// Wait until it is stuck in start-up: its port is taken (the
		// listener is opened first) and it has not exited.
		deadline := time.Now().Add(20 * time.Second)
		for {
			if c, err := net.Dial("tcp", httpAddr); err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node never opened its listener:\n%s", out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		sent := time.Now()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(timeout + slack + 10*time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("still running %v after SIGTERM during start-up:\n%s", time.Since(sent), out.String())
		}
		if took := time.Since(sent); took > timeout+slack {
			t.Errorf("exit took %v after SIGTERM, want within --shutdown-timeout %v", took, timeout)
		}
		if strings.Contains(out.String(), "panic") {
			t.Errorf("panicked:\n%s", out.String())
		}
		assertFreed(t, httpAddr)
	})

	t.Run("serving a long-poll", func(t *testing.T) {
		n := startNode(t, t.TempDir(), "--shutdown-timeout", timeout.String(), "--long-poll-timeout", "60s")
		wantStatus(t, do(t, "PUT", n.URL+"/lp", nil, "Content-Type", "text/plain"), 201, "create")
		polling := make(chan struct{})
		go func() {
			close(polling)
			_, _ = tryDo(t.Context(), "GET", n.URL+"/lp?offset=0&live=long-poll", nil)
		}()
		<-polling
		// The long-poll is in flight once the node counts it next to the
		// /metrics request that asks.
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(string(do(t, "GET", n.URL+"/metrics", nil).Body), "\npicomq_http_inflight_requests 2\n") {
			if time.Now().After(deadline) {
				t.Fatal("long-poll never reached the node")
			}
			time.Sleep(10 * time.Millisecond)
		}
		sent := time.Now()
		_ = n.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.Exited:
		case <-time.After(timeout + slack + 10*time.Second):
			t.Fatalf("still running %v after SIGTERM with a long-poll in flight", time.Since(sent))
		}
		if took := time.Since(sent); took > timeout+slack {
			t.Errorf("exit took %v after SIGTERM, want within --shutdown-timeout %v", took, timeout)
		}
	})
}
