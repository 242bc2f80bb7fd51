package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAcceptSurvivesFDExhaustion (issue 27, finding 5): the node's file
// descriptor limit is lowered (prlimit on the child) until both accept
// loops fail with EMFILE; the node keeps running, /readyz on a connection
// opened before says 503 naming a listener, and once the limit is raised
// back both listeners accept the connections that waited and /readyz is
// 200 again.
func TestAcceptSurvivesFDExhaustion(t *testing.T) {
	kafkaAddr := freeAddr(t)
	n := startNode(t, t.TempDir(), "--kafka-addr", kafkaAddr)
	pid := n.Cmd.Process.Pid
	host := strings.TrimPrefix(n.URL, "http://")

	probe, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	pbr := bufio.NewReader(probe)
	readyz := func() (int, string) {
		t.Helper()
		_ = probe.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(probe, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatalf("readyz: %v", err)
		}
		resp, err := http.ReadResponse(pbr, nil)
		if err != nil {
			t.Fatalf("readyz: %v (node exited: %v)", err, exited(n))
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, body := readyz(); code != 200 {
		t.Fatalf("readyz before: %d %s", code, body)
	}

	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	// Descriptors 0-2 are always open: no new one can be made.
	low := unix.Rlimit{Cur: 3, Max: old.Max}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &low, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
				t.Errorf("prlimit restore: %v", err)
			}
		}
	}
	defer restore()

	// Both connections wait in the listeners' backlogs.
	hc, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	_, _ = io.WriteString(hc, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	kc, err := net.Dial("tcp", kafkaAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	_, _ = kc.Write([]byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0}) // ApiVersions v0

	down := map[string]bool{}
	for deadline := time.Now().Add(20 * time.Second); len(down) < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("readyz never reported both listeners down (saw %v)", down)
		}
		code, body := readyz()
		if code == 503 {
			for _, l := range []string{"http", "kafka"} {
				if strings.Contains(body, l+" listener cannot accept") {
					down[l] = true
				}
			}
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
	if err := exited(n); err != nil {
		t.Fatalf("node exited while out of descriptors: %v", err)
	}

	restore()
	_ = hc.SetDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(hc), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the waiting HTTP connection after the limit was raised: %v %v", resp, err)
	}
	_ = kc.SetDeadline(time.Now().Add(15 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(kc, size[:]); err != nil {
		t.Fatalf("the waiting Kafka connection after the limit was raised: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		code, body := readyz()
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz after the limit was raised: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The failures were counted.
	metrics := do(t, "GET", n.URL+"/metrics", nil)
	for _, l := range []string{"http", "kafka"} {
		line := "picomq_accept_errors_total{listener=\"" + l + "\"} "
		i := strings.Index(string(metrics.Body), line)
		if i < 0 || strings.HasPrefix(string(metrics.Body[i+len(line):]), "0\n") {
			t.Errorf("no accept errors counted for %s", l)
		}
	}
	// New connections on both listeners are served.
	wantStatus(t, do(t, "GET", n.URL+"/healthz", nil), 200, "healthz on a new connection")
	kc2, err := net.DialTimeout("tcp", kafkaAddr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer kc2.Close()
	_ = kc2.SetDeadline(time.Now().Add(15 * time.Second))
	_, _ = kc2.Write([]byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 2, 0, 0})
	if _, err := io.ReadFull(kc2, size[:]); err != nil {
		t.Fatalf("kafka on a new connection: %v", err)
	}
}

// exited is the process's exit error if it has exited, else nil.
func exited(p *proc) error {
	select {
	case <-p.Exited:
		if p.ExitErr == nil {
			return os.ErrProcessDone
		}
		return p.ExitErr
	default:
		return nil
	}
}

// TestH2CRefusedPostAnswersCurl (issue 27, finding 8): curl sending an
// h2c POST without a token gets its 401, not "stream error": the node
// reads a refused HTTP/2 body (up to 256 KiB) before answering, as
// net/http does for HTTP/1.1, instead of resetting the stream while curl
// is still sending. It failed for 64-200 KiB bodies before.
func TestH2CRefusedPostAnswersCurl(t *testing.T) {
	curl := needTool(t, "curl")
	dir := t.TempDir()
	n := startNode(t, filepath.Join(dir, "data"), "--auth-tokens", writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...))
	for _, size := range []int{16 << 10, 64 << 10, 200 << 10, 256 << 10} {
		body := filepath.Join(dir, "body")
		if err := os.WriteFile(body, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			out, _ := exec.Command(curl, "-s", "-o", "/dev/null", "-w", "%{http_code} %{http_version}", "--max-time", "20",
				"--http2-prior-knowledge", "-X", "POST", "--data-binary", "@"+body, n.URL+"/a/x").CombinedOutput()
			if string(out) != "401 2" {
				t.Fatalf("body %d B, try %d: curl says %q, want \"401 2\"", size, i, out)
			}
		}
	}
}
