package tftests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// TestCloudInitNodeJoinsCluster renders deploy/cloud-init/picomq-node.sh.tftpl
// the way terraform/modules/aws/nodes.tf does — every value that the module
// computes from its variables is computed here from the module's defaults —
// runs it with bash against a scratch root directory, then starts a node
// from the unit and config the script wrote and checks that it joins a
// cluster of a real etcd (mutual TLS), MinIO and a second node, with TLS
// and token auth on, as on AWS.
//
// What differs from a real instance, all through variables the template
// has: root_dir (the scratch directory), install_packages/mount_nvme/
// start_service off (no package manager, NVMe or systemd here), aws_cli (a
// script that serves the SSM parameters from files), loopback addresses
// and free ports, the binary served over loopback HTTP. The values AWS
// would provide (private IP, etcd endpoints, parameter names, the bucket
// URL) are listed explicitly, and the test fails if the template starts
// needing one it does not know about.
func TestCloudInitNodeJoinsCluster(t *testing.T) {
	s3env := lookupS3(t)
	for _, tool := range []string{"bash", "curl", "sha256sum", "install"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required: %v", tool, err)
		}
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	picomq := buildRepo(t, filepath.Join(dir, "picomq"), "./cmd/picomq")
	etcdBin := os.Getenv("PICOMQ_ETCD_BIN")
	if etcdBin == "" {
		etcdBin = buildRepo(t, filepath.Join(dir, "etcd"), "./e2e/cmd/etcd")
	}

	pki := newPKI(t, filepath.Join(dir, "pki"))
	token := "tok-" + randHex(16)
	sum := sha256.Sum256([]byte(token))
	tokenFile := fmt.Sprintf("tokens:\n  - name: admin\n    sha256: %s\n    scopes: [\"admin:/\"]\n", hex.EncodeToString(sum[:]))
	tokenPath := filepath.Join(dir, "tokens.yaml")
	writeFile(t, tokenPath, tokenFile)

	etcdURL := startEtcd(t, etcdBin, filepath.Join(dir, "etcd-data"), pki)
	objectStore := fmt.Sprintf("s3://%s/cloudinit-%s?endpoint=%s&region=us-east-1", s3env.bucket, randHex(6), s3env.endpoint)
	s3Creds := []string{"AWS_ACCESS_KEY_ID=" + s3env.access, "AWS_SECRET_ACCESS_KEY=" + s3env.secret, "AWS_EC2_METADATA_DISABLED=true"}

	// The peer: a node started by hand, already in the cluster.
	peerAddr := freeAddr(t)
	startProcess(t, "peer", filepath.Join(dir, "peer.log"), append(os.Environ(), s3Creds...), picomq, "serve",
		"--node-id", "peer", "--data-dir", filepath.Join(dir, "peer"), "--http-addr", peerAddr,
		"--kafka-addr", "off", "--etcd-endpoints", etcdURL, "--object-store", objectStore,
		"--etcd-ca", pki.file("ca.crt"), "--etcd-cert", pki.file("client.crt"), "--etcd-key", pki.file("client.key"),
		"--tls-cert", pki.file("peer.crt"), "--tls-key", pki.file("peer.key"), "--auth-tokens", tokenPath)
	client := pki.client()
	waitReady(t, client, "https://"+peerAddr+"/readyz")

	// SSM Parameter Store, as the fake AWS CLI serves it.
	params := map[string]string{
		"/test/nodes/auth-tokens":       tokenFile,
		"/test/nodes/test-node-0.crt":   pki.read("node.crt"),
		"/test/nodes/test-node-0.key":   pki.read("node.key"),
		"/test/nodes/ca.crt":            pki.read("ca.crt"),
		"/test/nodes/etcd-client.crt":   pki.read("client.crt"),
		"/test/nodes/etcd-client.key":   pki.read("client.key"),
		"/test/nodes/never-fetched.key": "",
	}
	awsCLI := fakeAWSCLI(t, filepath.Join(dir, "fake-aws"), params)

	// The binary, served like a release download.
	binBytes, err := os.ReadFile(picomq)
	if err != nil {
		t.Fatal(err)
	}
	binSum := sha256.Sum256(binBytes)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(binBytes) }))
	t.Cleanup(srv.Close)

	httpPort, kafkaPort := port(t, freeAddr(t)), port(t, freeAddr(t))
	unit, err := os.ReadFile(filepath.Join(repo, "deploy/picomq.service"))
	if err != nil {
		t.Fatal(err)
	}
	disksScript := readFile(t, filepath.Join(repo, "deploy/picomq-disks.sh"))
	disksUnit := readFile(t, filepath.Join(repo, "deploy/picomq-disks.service"))
	script := renderNodeTemplate(t, map[string]cty.Value{
		// Module variables without a default, and the binary location.
		"name": cty.StringVal("test"), "vpc_id": cty.StringVal("vpc-0"), "subnet_ids": cty.ListVal([]cty.Value{cty.StringVal("subnet-0")}),
		"allowed_cidrs": cty.ListVal([]cty.Value{cty.StringVal("127.0.0.1/32")}),
		"binary_sha256": cty.StringVal(hex.EncodeToString(binSum[:])), "etcd_sha256": cty.StringVal(strings.Repeat("0", 64)),
		"binary_url": cty.StringVal(srv.URL + "/picomq-linux-amd64"),
		// Free loopback ports instead of 4437/9092.
		"http_port": cty.NumberIntVal(int64(httpPort)), "kafka_port": cty.NumberIntVal(int64(kafkaPort)),
	}, map[string]cty.Value{
		// What AWS and the module's other resources provide.
		"region":                cty.StringVal("us-east-1"),
		"node_id":               cty.StringVal("test-node-0"),
		"private_ip":            cty.StringVal("127.0.0.1"),
		"etcd_endpoints":        cty.ListVal([]cty.Value{cty.StringVal(etcdURL)}),
		"object_store_url":      cty.StringVal(objectStore),
		"auth_tokens_parameter": cty.StringVal("/test/nodes/auth-tokens"),
		"tls_cert_parameter":    cty.StringVal("/test/nodes/test-node-0.crt"),
		"tls_key_parameter":     cty.StringVal("/test/nodes/test-node-0.key"),
		"etcd_ca_parameter":     cty.StringVal("/test/nodes/ca.crt"),
		"etcd_cert_parameter":   cty.StringVal("/test/nodes/etcd-client.crt"),
		"etcd_key_parameter":    cty.StringVal("/test/nodes/etcd-client.key"),
		"unit":                  cty.StringVal(string(unit)),
		"disks_script":          cty.StringVal(disksScript),
		"disks_unit":            cty.StringVal(disksUnit),
		"refresh_script":        cty.StringVal(readFile(t, filepath.Join(repo, "deploy/picomq-refresh.sh"))),
		"refresh_service":       cty.StringVal(readFile(t, filepath.Join(repo, "deploy/picomq-refresh.service"))),
		"refresh_timer":         cty.StringVal(readFile(t, filepath.Join(repo, "deploy/picomq-refresh.timer"))),
	}, map[string]cty.Value{
		// The test switches.
		"root_dir": cty.StringVal(root), "install_packages": cty.False, "mount_nvme": cty.False,
		"start_service": cty.False, "aws_cli": cty.StringVal(awsCLI), "listen_host": cty.StringVal("127.0.0.1"),
	})
	scriptPath := filepath.Join(dir, "user-data.sh")
	writeFile(t, scriptPath, script)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", scriptPath).CombinedOutput()
	if err != nil {
		t.Fatalf("user data failed: %v\n%s", err, out)
	}
	t.Logf("user data output:\n%s", out)

	// What it wrote.
	gotUnit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/picomq.service"))
	if err != nil || strings.TrimSpace(string(gotUnit)) != strings.TrimSpace(string(unit)) {
		t.Fatalf("unit not written as deploy/picomq.service: %v", err)
	}
	if got := readFile(t, filepath.Join(root, "usr/local/sbin/picomq-disks")); strings.TrimSpace(got) != strings.TrimSpace(disksScript) {
		t.Errorf("per-boot disk script not written as deploy/picomq-disks.sh")
	}
	if got := readFile(t, filepath.Join(root, "etc/systemd/system/picomq-disks.service")); strings.TrimSpace(got) != strings.TrimSpace(disksUnit) {
		t.Errorf("picomq-disks.service not written as deploy/picomq-disks.service")
	}
	for _, f := range []string{"etc/picomq/auth-tokens", "etc/picomq/tls/node.key", "etc/picomq/etcd/client.key", "etc/picomq/picomq.yaml"} {
		st, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o007 != 0 {
			t.Errorf("%s is readable by others: %v", f, st.Mode())
		}
	}
	config := readFile(t, filepath.Join(root, "etc/picomq/picomq.yaml"))
	t.Logf("picomq.yaml:\n%s", config)
	for _, want := range []string{"auth-tokens:", "tls-cert:", "etcd-ca:", "advertise-url: https://127.0.0.1:"} {
		if !strings.Contains(config, want) {
			t.Errorf("config lacks %q", want)
		}
	}

	// Start the node the way systemd would: ExecStart and EnvironmentFile
	// of the written unit, their absolute paths under the scratch root.
	execStart, envFile := unitCommand(t, string(gotUnit))
	args := strings.Fields(execStart)
	for i, a := range args {
		if strings.HasPrefix(a, "/") {
			args[i] = filepath.Join(root, a)
		}
	}
	env := append(os.Environ(), s3Creds...) // the instance profile's stand-in
	env = append(env, strings.Fields(readFile(t, filepath.Join(root, envFile)))...)
	startProcess(t, "cloud-init node", filepath.Join(dir, "node.log"), env, args[0], args[1:]...)
	nodeURL := fmt.Sprintf("https://127.0.0.1:%d", httpPort)
	waitReady(t, client, nodeURL+"/readyz")

	// It joined: the peer lists it as a live member.
	var members struct {
		Nodes []struct {
			NodeID       string `json:"nodeId"`
			AdvertiseURL string `json:"advertiseUrl"`
		} `json:"nodes"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		body := do(t, client, token, http.MethodGet, "https://"+peerAddr+"/_sys/cluster", "", http.StatusOK)
		if err := json.Unmarshal([]byte(body), &members); err != nil {
			t.Fatalf("cluster info %q: %v", body, err)
		}
		if slices.ContainsFunc(members.Nodes, func(n struct {
			NodeID       string `json:"nodeId"`
			AdvertiseURL string `json:"advertiseUrl"`
		}) bool {
			return n.NodeID == "test-node-0" && n.AdvertiseURL == nodeURL
		}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the peer does not list test-node-0 at %s: %s", nodeURL, body)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// And it serves: a stream created on it takes an append through the
	// peer (307 to the owner, token resent) and reads back from the peer.
	do(t, client, token, http.MethodPut, nodeURL+"/deploy/test", "", http.StatusCreated)
	do(t, client, token, http.MethodPost, "https://"+peerAddr+"/deploy/test", "hello from cloud-init", http.StatusNoContent, http.StatusOK)
	if got := do(t, client, token, http.MethodGet, "https://"+peerAddr+"/deploy/test?offset=0", "", http.StatusOK); !strings.Contains(got, "hello from cloud-init") {
		t.Errorf("read back %q", got)
	}
	// Without a token the listener refuses.
	req, _ := http.NewRequest(http.MethodGet, nodeURL+"/deploy/test", nil)
	if resp, err := client.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("request without a token: %v %v, want 401", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
}

// renderNodeTemplate evaluates the templatefile() arguments of
// terraform/modules/aws/nodes.tf with var = the module's defaults plus
// vars, takes fromAWS for exactly the arguments that need resources or
// locals, applies switches, and renders the template.
func renderNodeTemplate(t *testing.T, vars, fromAWS, switches map[string]cty.Value) string {
	t.Helper()
	m, err := Load("../modules/aws")
	if err != nil {
		t.Fatal(err)
	}
	varObj := map[string]cty.Value{}
	for name, v := range m.Variables {
		if v.HasDefault {
			varObj[name] = v.Default
		}
	}
	for k, v := range vars {
		if m.Variables[k] == nil {
			t.Fatalf("%q is not a module variable", k)
		}
		varObj[k] = v
	}
	for name := range m.Variables {
		if _, ok := varObj[name]; !ok {
			t.Fatalf("module variable %q has no default and the test gives no value", name)
		}
	}
	call := findTemplateCall(t, "../modules/aws/nodes.tf", "picomq-node.sh.tftpl")
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{"var": cty.ObjectVal(varObj)}}
	values := map[string]cty.Value{}
	var needAWS []string
	for _, item := range call.Args[1].(*hclsyntax.ObjectConsExpr).Items {
		k, _ := item.KeyExpr.Value(nil)
		v, diags := item.ValueExpr.Value(ctx)
		if diags.HasErrors() {
			needAWS = append(needAWS, k.AsString())
			continue
		}
		values[k.AsString()] = v
	}
	slices.Sort(needAWS)
	if got := sortedKeys(fromAWS); !slices.Equal(got, needAWS) {
		t.Fatalf("template arguments computed from resources/locals: %v; the test provides %v", needAWS, got)
	}
	for k, v := range fromAWS {
		values[k] = v
	}
	for k, v := range switches {
		if _, ok := values[k]; !ok {
			t.Fatalf("switch %q is not a template argument", k)
		}
		values[k] = v
	}
	path := filepath.Join(repo, "deploy/cloud-init/picomq-node.sh.tftpl")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	expr, diags := hclsyntax.ParseTemplate(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	out, diags := expr.Value(&hcl.EvalContext{Variables: values})
	if diags.HasErrors() {
		t.Fatalf("render: %s", diags.Error())
	}
	return out.AsString()
}

func findTemplateCall(t *testing.T, file, template string) *hclsyntax.FunctionCallExpr {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, diags := hclsyntax.ParseConfig(src, file, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	var found *hclsyntax.FunctionCallExpr
	hclsyntax.VisitAll(f.Body.(*hclsyntax.Body), func(n hclsyntax.Node) hcl.Diagnostics {
		if c, ok := n.(*hclsyntax.FunctionCallExpr); ok && c.Name == "templatefile" && len(c.Args) == 2 &&
			strings.Contains(string(c.Args[0].Range().SliceBytes(src)), template) {
			found = c
		}
		return nil
	})
	if found == nil {
		t.Fatalf("%s: no templatefile(%s) call", file, template)
	}
	return found
}

// unitCommand returns ExecStart and the EnvironmentFile path of a unit.
func unitCommand(t *testing.T, unit string) (execStart, envFile string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			execStart = v
		}
		if v, ok := strings.CutPrefix(line, "EnvironmentFile="); ok {
			envFile = strings.TrimPrefix(v, "-")
		}
	}
	if execStart == "" || envFile == "" {
		t.Fatalf("unit has no ExecStart or EnvironmentFile")
	}
	return execStart, envFile
}

type s3Env struct{ endpoint, access, secret, bucket string }

// lookupS3 reads the MinIO the test run uses (make test and .ci/run start
// one); missing, the test skips on a developer machine and fails under CI
// and make test (required).
func lookupS3(t *testing.T) s3Env {
	e := s3Env{os.Getenv("PICOMQ_S3_ENDPOINT"), os.Getenv("PICOMQ_S3_ACCESS_KEY"), os.Getenv("PICOMQ_S3_SECRET_KEY"), os.Getenv("PICOMQ_S3_BUCKET")}
	if e.endpoint == "" {
		if required() {
			t.Fatal("PICOMQ_S3_ENDPOINT is not set: make test and .ci/run start MinIO (deploy/local-minio.sh)")
		}
		t.Skip("PICOMQ_S3_ENDPOINT not set; run through `make test` or start MinIO with `make minio`")
	}
	if e.bucket == "" {
		e.bucket = "picomq-test"
	}
	return e
}

// buildRepo builds a package of the repository into out.
func buildRepo(t *testing.T, out, pkg string) string {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func startEtcd(t *testing.T, bin, dir string, pki *pki) string {
	t.Helper()
	client, peer := freeAddr(t), freeAddr(t)
	url := "https://" + client
	startProcess(t, "etcd", dir+".log", os.Environ(), bin, "--name", "e0", "--data-dir", dir,
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "e0=http://"+peer, "--log-level", "warn",
		"--client-cert-auth", "--trusted-ca-file", pki.file("ca.crt"),
		"--cert-file", pki.file("etcd.crt"), "--key-file", pki.file("etcd.key"))
	waitReady(t, pki.client(), url+"/health")
	return url
}

// startProcess starts a process, stops it (SIGTERM, then SIGKILL after
// 30 s) at cleanup, and prints its log if the test failed.
func startProcess(t *testing.T, name, logPath string, env []string, bin string, args ...string) {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
}

func waitReady(t *testing.T, c *http.Client, url string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 90 s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// do sends a request with the token and returns the body; the status must
// be one of want. Redirects are followed with the same method, body and
// token (Go re-sends the Authorization header to the same host).
func do(t *testing.T, c *http.Client, token, method, url, body string, want ...int) string {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !slices.Contains(want, resp.StatusCode) {
		t.Fatalf("%s %s: %d %s, want %v", method, url, resp.StatusCode, b, want)
	}
	return string(b)
}

func fakeAWSCLI(t *testing.T, dir string, params map[string]string) string {
	t.Helper()
	for name, v := range params {
		writeFile(t, filepath.Join(dir, "params", strings.ReplaceAll(strings.TrimPrefix(name, "/"), "/", "__")), v)
	}
	script := `#!/bin/bash
# Stand-in for the AWS CLI: "ssm get-parameter --name N ..." prints the
# parameter's value from a file; anything else fails.
set -euo pipefail
[ "$1 $2" = "ssm get-parameter" ] || { echo "fake aws: unsupported: $*" >&2; exit 2; }
shift 2
while [ $# -gt 0 ]; do
  if [ "$1" = --name ]; then n=${2#/}; cat "` + dir + `/params/${n//\//__}"; exit 0; fi
  shift
done
echo "fake aws: no --name" >&2; exit 2
`
	path := filepath.Join(dir, "aws")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// pki is a CA with the certificates the test cluster uses, as PEM files.
type pki struct {
	t   *testing.T
	dir string
	ca  *x509.Certificate
	key *ecdsa.PrivateKey
}

func newPKI(t *testing.T, dir string) *pki {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{t: t, dir: dir, ca: ca, key: key}
	writeFile(t, p.file("ca.crt"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	for i, name := range []string{"etcd", "client", "peer", "node"} {
		p.issue(name, int64(i+2))
	}
	return p
}

func (p *pki) issue(name string, serial int64) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	writeFile(p.t, p.file(name+".crt"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(p.t, p.file(name+".key"), string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})))
}

func (p *pki) file(name string) string { return filepath.Join(p.dir, name) }
func (p *pki) read(name string) string { return readFile(p.t, p.file(name)) }

// client trusts the CA and presents the client certificate (etcd wants it).
func (p *pki) client() *http.Client {
	cert, err := tls.LoadX509KeyPair(p.file("client.crt"), p.file("client.key"))
	if err != nil {
		p.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}, ForceAttemptHTTP2: true,
	}}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func port(t *testing.T, addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	var n int
	fmt.Sscan(p, &n)
	return n
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b)) + "\n"
}
