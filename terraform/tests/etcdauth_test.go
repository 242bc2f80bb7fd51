package tftests

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEtcdAuthNodeRoles runs deploy/etcd-auth.sh against a real etcd with
// client-certificate TLS, then checks etcd's answers as each identity:
// a PicoMQ node started with its own etcd client certificate (common name
// = node name) joins and serves; that certificate cannot write another
// node's membership key nor anything outside the registry prefix; a
// certificate of the CA whose name is no user is refused; the member
// certificate still takes snapshots (etcd-backup.sh); and the script runs
// again without error (adding a node).
func TestEtcdAuthNodeRoles(t *testing.T) {
	etcdctl := etcdTool(t, "etcdctl")
	dir := t.TempDir()
	etcdBin := os.Getenv("PICOMQ_ETCD_BIN")
	if etcdBin == "" {
		etcdBin = buildRepo(t, filepath.Join(dir, "etcd"), "./e2e/cmd/etcd")
	}
	picomq := buildRepo(t, filepath.Join(dir, "picomq"), "./cmd/picomq")
	pki := newPKI(t, filepath.Join(dir, "pki"))
	pki.issue("test-node-0", 20)
	pki.issue("test-node-1", 21)
	url := startEtcd(t, etcdBin, filepath.Join(dir, "etcd-data"), pki)

	tlsDir := filepath.Join(dir, "tls") // the member's /etc/etcd/tls
	for from, to := range map[string]string{"ca.crt": "ca.crt", "etcd.crt": "member.crt", "etcd.key": "member.key"} {
		writeFile(t, filepath.Join(tlsDir, to), pki.read(from))
	}
	auth := func(nodes string) {
		t.Helper()
		cmd := exec.Command("bash", filepath.Join(repo, "deploy/etcd-auth.sh"), url)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(etcdctl)+":"+os.Getenv("PATH"), "ETCD_AUTH_TLS_DIR="+tlsDir,
			"PICOMQ_NODES="+nodes, "ETCD_MEMBERS=etcd")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("etcd-auth.sh: %v\n%s", err, out)
		}
		t.Logf("etcd-auth.sh: %s", strings.TrimSpace(string(out)))
	}
	auth("test-node-0")

	as := func(cert string, args ...string) (string, error) {
		cmd := exec.Command(etcdctl, append([]string{"--endpoints", url, "--cacert", pki.file("ca.crt"),
			"--cert", pki.file(cert + ".crt"), "--key", pki.file(cert + ".key")}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	denied := func(what string, out string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: allowed, want refused", what)
		} else if !strings.Contains(out, "permission denied") && !strings.Contains(out, "user name not found") &&
			!strings.Contains(out, "invalid auth") && !strings.Contains(out, "authentication failed") {
			t.Errorf("%s: %v %s, want a permission error", what, err, out)
		}
	}

	// A node with its own certificate joins and serves.
	addr := freeAddr(t)
	startProcess(t, "node", filepath.Join(dir, "node.log"), os.Environ(), picomq, "serve",
		"--node-id", "test-node-0", "--data-dir", filepath.Join(dir, "node"), "--http-addr", addr, "--kafka-addr", "off",
		"--etcd-endpoints", url, "--object-store", "file://"+filepath.Join(dir, "objects"),
		"--etcd-ca", pki.file("ca.crt"), "--etcd-cert", pki.file("test-node-0.crt"), "--etcd-key", pki.file("test-node-0.key"))
	plain := &http.Client{}
	waitReady(t, plain, "http://"+addr+"/readyz")
	for _, req := range []struct{ method, path, body string }{{"PUT", "/auth/s", ""}, {"POST", "/auth/s", "under rbac"}} {
		r, _ := http.NewRequest(req.method, "http://"+addr+req.path, strings.NewReader(req.body))
		r.Header.Set("Content-Type", "text/plain")
		resp, err := plain.Do(r)
		if err != nil || resp.StatusCode >= 300 {
			t.Fatalf("%s %s under etcd auth: %v %v\n%s", req.method, req.path, err, resp, readFile(t, filepath.Join(dir, "node.log")))
		}
		resp.Body.Close()
	}
	if out, err := as("test-node-0", "get", "--prefix", "--keys-only", "/picomq/members/"); err != nil || !strings.Contains(out, "/picomq/members/test-node-0") {
		t.Errorf("node 0 reading the membership keys: %v %s", err, out)
	}

	// What the node's certificate may not do.
	out, err := as("test-node-0", "put", "/picomq/members/test-node-1", "x")
	denied("node 0 writing node 1's membership key", out, err)
	out, err = as("test-node-0", "put", "/elsewhere", "x")
	denied("node 0 writing outside the registry prefix", out, err)
	out, err = as("test-node-1", "put", "/picomq/members/test-node-1", "x")
	denied("node 1 before it has a user", out, err)
	out, err = as("peer", "get", "/picomq/", "--prefix", "--keys-only")
	denied("a CA certificate whose name is no user", out, err)

	// Adding a node: the script again.
	auth("test-node-0 test-node-1")
	if out, err := as("test-node-1", "put", "/picomq/members/test-node-1", "x"); err != nil {
		t.Errorf("node 1 after the rerun: %v %s", err, out)
	}

	// The member certificate keeps its snapshots.
	if out, err := as("etcd", "snapshot", "save", filepath.Join(dir, "snap.db")); err != nil {
		t.Errorf("snapshot with the member certificate under auth: %v %s", err, out)
	}
}
