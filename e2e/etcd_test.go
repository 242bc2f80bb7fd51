package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
)

// The cluster tests run a real etcd daemon (testproc.EtcdPkg): a separate
// process the tests can stop and start like an operator would, unlike an
// in-process embedded etcd. PICOMQ_ETCD_BIN points at a prebuilt one
// (deploy/local-cluster.sh builds bin/etcd); otherwise it is built once
// per test binary next to picomq.

// etcdServer is one single-member etcd process owned by one test. stop and
// start keep its ports and data dir, so a test can take etcd away and give
// the same cluster back.
type etcdServer struct {
	t testing.TB
	testproc.Etcd
	running bool
}

// startEtcd runs etcd on two free loopback ports with a fresh data dir and
// waits until /health reports healthy. It is killed at the end of the test.
func startEtcd(t testing.TB) *etcdServer {
	t.Helper()
	bin, err := testproc.EtcdBinary(filepath.Dir(picomqBin))
	if err != nil {
		t.Fatalf("building the etcd wrapper: %v", err)
	}
	e := &etcdServer{t: t, Etcd: testproc.Etcd{
		Bin:        bin,
		Name:       "e2e",
		DataDir:    filepath.Join(t.TempDir(), "etcd"),
		ClientAddr: freeAddr(t),
		PeerAddr:   freeAddr(t),
	}}
	e.start()
	t.Cleanup(e.kill)
	return e
}

// newEtcd is startEtcd without the start: its ports are chosen, and start
// brings it up later (tests of a node booting before etcd).
func newEtcd(t testing.TB) *etcdServer {
	t.Helper()
	bin, err := testproc.EtcdBinary(filepath.Dir(picomqBin))
	if err != nil {
		t.Fatalf("building the etcd wrapper: %v", err)
	}
	e := &etcdServer{t: t, Etcd: testproc.Etcd{Bin: bin, Name: "e2e", DataDir: filepath.Join(t.TempDir(), "etcd"),
		ClientAddr: freeAddr(t), PeerAddr: freeAddr(t)}}
	t.Cleanup(e.kill)
	return e
}

// Endpoint is the --etcd-endpoints value for picomq.
func (e *etcdServer) Endpoint() string { return e.ClientAddr }

func (e *etcdServer) start() {
	e.t.Helper()
	if e.running {
		e.t.Fatal("etcd: start while running")
	}
	if err := e.Start(30 * time.Second); err != nil {
		e.t.Fatal(err)
	}
	e.running = true
}

// stop shuts etcd down with SIGTERM (an operator stopping it) and waits for
// the process to be gone; SIGKILL if it takes longer than 10s.
func (e *etcdServer) stop() {
	if e.running {
		_ = e.Stop(10 * time.Second)
		e.running = false
	}
}

// kill is an abrupt loss of etcd (and the test's cleanup).
func (e *etcdServer) kill() {
	if e.running {
		e.Kill()
		e.running = false
	}
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
	resp, err := c.Post(e.ClientURL()+path, "application/json", strings.NewReader(body))
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
	if e.Healthy() {
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
	out, err := exec.Command(e.Bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "etcd Version: 3.6.") {
		t.Fatalf("etcd --version: %v %s", err, out)
	}
}
