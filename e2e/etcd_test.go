package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The cluster tests run a real etcd 3.6 daemon (the version go.mod pins),
// built from this module by e2e/cmd/etcd: a separate process the tests can
// stop and start like an operator would, unlike an in-process embedded etcd.
// PICOMQ_ETCD_BIN points at a prebuilt one (deploy/local-cluster.sh builds
// bin/etcd); otherwise it is built once per test binary next to picomq.
var (
	etcdBuildOnce sync.Once
	etcdBin       string
	etcdBuildErr  error
)

func etcdBinary(t testing.TB) string {
	t.Helper()
	etcdBuildOnce.Do(func() {
		if p := os.Getenv("PICOMQ_ETCD_BIN"); p != "" {
			etcdBin = p
			return
		}
		etcdBin = filepath.Join(filepath.Dir(picomqBin), "etcd")
		build := exec.Command("go", "build", "-o", etcdBin, "github.com/PicoMQ/picomq/e2e/cmd/etcd")
		out, err := build.CombinedOutput()
		if err != nil {
			etcdBuildErr = fmt.Errorf("building the etcd wrapper: %v\n%s", err, out)
		}
	})
	if etcdBuildErr != nil {
		t.Fatal(etcdBuildErr)
	}
	return etcdBin
}

// etcdServer is one single-member etcd process owned by one test. stop and
// start keep its ports and data dir, so a test can take etcd away and give
// the same cluster back.
type etcdServer struct {
	t          testing.TB
	bin        string
	dataDir    string
	clientAddr string
	peerAddr   string
	cmd        *exec.Cmd
	exited     chan struct{}
	exitErr    error
	logs       *syncBuffer
	running    bool
}

// startEtcd runs etcd on two free loopback ports with a fresh data dir and
// waits until /health reports healthy. It is killed at the end of the test.
func startEtcd(t testing.TB) *etcdServer {
	t.Helper()
	e := &etcdServer{
		t:          t,
		bin:        etcdBinary(t),
		dataDir:    filepath.Join(t.TempDir(), "etcd"), // etcd creates it with mode 0700
		clientAddr: freeAddr(t),
		peerAddr:   freeAddr(t),
		logs:       &syncBuffer{},
	}
	e.start()
	t.Cleanup(e.kill)
	return e
}

// Endpoint is the --etcd-endpoints value for picomq.
func (e *etcdServer) Endpoint() string { return e.clientAddr }

func (e *etcdServer) clientURL() string { return "http://" + e.clientAddr }

func (e *etcdServer) start() {
	e.t.Helper()
	if e.running {
		e.t.Fatal("etcd: start while running")
	}
	peer := "http://" + e.peerAddr
	e.cmd = exec.Command(e.bin,
		"--name", "e2e",
		"--data-dir", e.dataDir,
		"--listen-client-urls", e.clientURL(), "--advertise-client-urls", e.clientURL(),
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "e2e="+peer,
		// One member: fast timing only shortens the first election.
		"--heartbeat-interval", "10", "--election-timeout", "100",
		"--log-level", "warn")
	e.cmd.Stdout, e.cmd.Stderr = e.logs, e.logs
	if err := e.cmd.Start(); err != nil {
		e.t.Fatalf("start etcd: %v", err)
	}
	e.running = true
	exited := make(chan struct{})
	e.exited = exited
	cmd := e.cmd
	go func() {
		e.exitErr = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !e.healthy() {
		select {
		case <-exited:
			e.running = false
			e.t.Fatalf("etcd exited during start: %v\n%s", e.exitErr, e.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("etcd not healthy after 30s\n%s", e.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// healthy reports whether etcd's /health endpoint says so (it needs a
// leader and a working store, not just an open port).
func (e *etcdServer) healthy() bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(e.clientURL() + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&h) == nil && h.Health == "true"
}

// stop shuts etcd down with SIGTERM (an operator stopping it) and waits for
// the process to be gone; SIGKILL if it takes longer than 10s.
func (e *etcdServer) stop() {
	e.t.Helper()
	if !e.running {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(10 * time.Second):
		_ = e.cmd.Process.Signal(syscall.SIGKILL)
		<-e.exited
	}
	e.running = false
}

// kill is an abrupt loss of etcd (and the test's cleanup).
func (e *etcdServer) kill() {
	if !e.running {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGKILL)
	<-e.exited
	e.running = false
}

// put and get use etcd's JSON gateway (keys and values base64), so the
// helper's own test needs no etcd client library.
func (e *etcdServer) put(key, value string) error {
	body := fmt.Sprintf(`{"key":%q,"value":%q}`, b64(key), b64(value))
	_, err := e.gateway("/v3/kv/put", body)
	return err
}

func (e *etcdServer) get(key string) (string, bool, error) {
	out, err := e.gateway("/v3/kv/range", fmt.Sprintf(`{"key":%q}`, b64(key)))
	if err != nil {
		return "", false, err
	}
	var r struct {
		Kvs []struct {
			Value string `json:"value"`
		} `json:"kvs"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return "", false, fmt.Errorf("range reply %s: %v", out, err)
	}
	if len(r.Kvs) == 0 {
		return "", false, nil
	}
	v, err := base64.StdEncoding.DecodeString(r.Kvs[0].Value)
	return string(v), true, err
}

func (e *etcdServer) gateway(path, body string) ([]byte, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post(e.clientURL()+path, "application/json", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: %d %s", path, resp.StatusCode, bytes.TrimSpace(out))
	}
	return out, nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestEtcdHelper checks the harness itself: etcd starts, keeps its data
// across stop/start on the same ports, and is really gone while stopped.
// It does not need PicoMQ's cluster code.
func TestEtcdHelper(t *testing.T) {
	e := startEtcd(t)
	if err := e.put("/e2e/k", "v1"); err != nil {
		t.Fatal(err)
	}
	e.stop()
	if e.healthy() {
		t.Fatal("etcd still answers /health after stop")
	}
	if err := e.put("/e2e/k", "v2"); err == nil {
		t.Fatal("a put succeeded while etcd was stopped")
	}
	e.start()
	v, ok, err := e.get("/e2e/k")
	if err != nil || !ok || v != "v1" {
		t.Fatalf("after restart: %q %v %v, want v1", v, ok, err)
	}
	out, err := exec.Command(e.bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "etcd Version: 3.6.") {
		t.Fatalf("etcd --version: %v %s", err, out)
	}
}
