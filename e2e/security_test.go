package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// h2cClient speaks cleartext HTTP/2 with prior knowledge only, so a reply
// proves the listener accepts h2c.
func h2cClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

// TestH2COnLoopback: a loopback listener speaks h2c by default, and not
// with --h2c=false.
func TestH2COnLoopback(t *testing.T) {
	p := startNode(t, t.TempDir())
	resp, err := h2cClient().Get(p.URL + "/healthz")
	if err != nil {
		t.Fatalf("h2c request: %v", err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("h2c: %s %d", resp.Proto, resp.StatusCode)
	}

	off := startNode(t, t.TempDir(), "--h2c=false")
	if resp, err := h2cClient().Get(off.URL + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("--h2c=false still answered HTTP/2 prior knowledge: %s", resp.Proto)
	}
}

// testToken is one token of a test token file.
type testToken struct {
	name, secret string
	scopes       []string
	extra        string // more YAML lines of the entry (rate, burst)
}

// writeTokenFile writes a token file holding only the tokens' hashes, as
// docs/security.md prescribes, and returns its path.
func writeTokenFile(t testing.TB, path string, tokens ...testToken) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("tokens:\n")
	for _, tk := range tokens {
		h := sha256.Sum256([]byte(tk.secret))
		fmt.Fprintf(&b, "  - name: %s\n    sha256: %s\n    scopes: [%s]\n%s", tk.name, hex.EncodeToString(h[:]), strings.Join(tk.scopes, ", "), tk.extra)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var matrixTokens = []testToken{
	{name: "reader", secret: "tok-reader-0123456789", scopes: []string{"read:/a/"}},
	{name: "writer", secret: "tok-writer-0123456789", scopes: []string{"write:/a/"}},
	{name: "a-admin", secret: "tok-a-admin-0123456789", scopes: []string{"admin:/a/"}},
	{name: "root", secret: "tok-root-0123456789", scopes: []string{"admin:/"}},
	{name: "scraper", secret: "tok-scraper-0123456789", scopes: []string{"metrics"}},
}

const rootToken = "tok-root-0123456789"

func bearerHdr(tok string) []string {
	if tok == "" {
		return nil
	}
	return []string{"Authorization", "Bearer " + tok}
}

// TestAuthScopeMatrix: every endpoint class against every kind of token:
// no token and a wrong token get 401 (JSON error), a token whose scopes do
// not cover the request gets 403, a covering token gets through to the
// handler; probes stay open.
func TestAuthScopeMatrix(t *testing.T) {
	dir := t.TempDir()
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	p := startNode(t, filepath.Join(dir, "data"), "--auth-tokens", tokens)

	// Each case runs on a fresh stream made by root, so destructive
	// requests do not disturb the next case.
	n := 0
	fresh := func(prefix string) string {
		n++
		name := fmt.Sprintf("%ss%d", prefix, n)
		wantStatus(t, do(t, "PUT", p.URL+name, nil, append(bearerHdr(rootToken), "Content-Type", "text/plain")...), 201, "root creates "+name)
		return name
	}
	type endpoint struct {
		what   string
		method string
		path   func(name string) string
		body   []byte
		hdrs   []string
		// who may: the tokens (by name) that pass
		allowed map[string]bool
	}
	set := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, s := range names {
			m[s] = true
		}
		return m
	}
	stream := func(name string) string { return name }
	readers, writers, admins := set("reader", "a-admin", "root"), set("writer", "a-admin", "root"), set("a-admin", "root")
	eps := []endpoint{
		{"read", "GET", stream, nil, nil, readers},
		{"long-poll read", "GET", func(s string) string { return s + "?offset=0&live=long-poll" }, nil, nil, readers},
		{"head", "HEAD", stream, nil, nil, readers},
		{"append", "POST", stream, []byte("x"), []string{"Content-Type", "text/plain"}, writers},
		{"create", "PUT", func(s string) string { return s + "-new" }, nil, []string{"Content-Type", "text/plain"}, writers},
		{"delete", "DELETE", stream, nil, nil, admins},
		{"describe", "GET", func(s string) string { return "/_streams" + s }, nil, nil, readers},
		{"reconfigure", "PATCH", func(s string) string { return "/_streams" + s }, []byte(`{"retentionMs":3600000}`), []string{"Content-Type", "application/merge-patch+json"}, admins},
		{"trim", "PATCH", func(s string) string { return "/_streams" + s }, []byte(`{"trimBefore":0}`), []string{"Content-Type", "application/merge-patch+json"}, admins},
		{"list under /a/", "GET", func(string) string { return "/_streams?prefix=/a/" }, nil, nil, readers},
		{"list everything", "GET", func(string) string { return "/_streams" }, nil, nil, set("root")},
		{"cluster view", "GET", func(string) string { return "/_sys/cluster" }, nil, nil, set("reader", "writer", "a-admin", "root")},
		{"cluster view with figures", "GET", func(string) string { return "/_sys/cluster?figures=true" }, nil, nil, set("reader", "writer", "a-admin", "root")},
		{"node figures", "GET", func(string) string { return "/_sys/node" }, nil, nil, set("reader", "writer", "a-admin", "root")},
		{"stream heads", "GET", func(s string) string { return "/_sys/node?head=" + s }, nil, nil, set("root")},
		{"read through follow", "GET", func(s string) string { return "/_sys/follow" + s + "?offset=0" }, nil, nil, readers},
		{"groups", "GET", func(string) string { return "/_sys/groups" }, nil, nil, set("root")},
		{"metrics", "GET", func(string) string { return "/metrics" }, nil, nil, set("reader", "writer", "a-admin", "root", "scraper")},
	}
	for _, ep := range eps {
		for _, tk := range append([]testToken{{name: "none"}, {name: "wrong", secret: "tok-wrong-0123456789"}}, matrixTokens...) {
			for _, prefix := range []string{"/a/", "/b/"} {
				name := fresh(prefix)
				path := ep.path(name)
				r := do(t, ep.method, p.URL+path, ep.body, append(append([]string{}, ep.hdrs...), bearerHdr(tk.secret)...)...)
				what := fmt.Sprintf("%s %s %s with token %s", ep.what, ep.method, path, tk.name)
				covered := prefix == "/a/" || tk.name == "root" || !strings.Contains(path, prefix)
				switch {
				case tk.name == "none" || tk.name == "wrong":
					wantStatus(t, r, 401, what)
					if !strings.Contains(r.Header.Get("WWW-Authenticate"), "Bearer") {
						t.Fatalf("%s: 401 without WWW-Authenticate: Bearer", what)
					}
				case ep.allowed[tk.name] && covered:
					if r.Status == 401 || r.Status == 403 {
						t.Fatalf("%s: refused with %d: %s", what, r.Status, r.Body)
					}
				default:
					wantStatus(t, r, 403, what)
				}
				if r.Status == 401 || r.Status == 403 {
					if ep.method != "HEAD" && !strings.Contains(string(r.Body), `"code"`) {
						t.Fatalf("%s: %d body is not a JSON error: %s", what, r.Status, r.Body)
					}
				}
			}
		}
	}
	// Probes answer without a token; drain needs admin on "/".
	wantStatus(t, do(t, "GET", p.URL+"/healthz", nil), 200, "healthz without token")
	wantStatus(t, do(t, "GET", p.URL+"/readyz", nil), 200, "readyz without token")
	wantStatus(t, do(t, "POST", p.URL+"/_sys/drain", nil, bearerHdr("tok-a-admin-0123456789")...), 403, "drain with admin:/a/")
	wantStatus(t, do(t, "POST", p.URL+"/_sys/drain", nil, bearerHdr("tok-reader-0123456789")...), 403, "drain with a reader")
	wantStatus(t, do(t, "POST", p.URL+"/_sys/drain", nil), 401, "drain without a token")
	if r := do(t, "POST", p.URL+"/_sys/drain", nil, bearerHdr(rootToken)...); r.Status == 401 || r.Status == 403 {
		t.Fatalf("drain with admin:/ refused: %d", r.Status)
	}
}

// TestAuthDurableStreams: the Durable Streams listener maps the same
// scopes onto /v1/stream/{name}.
func TestAuthDurableStreams(t *testing.T) {
	dir := t.TempDir()
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	p := startNode(t, filepath.Join(dir, "data"), "--protocol", "durable-streams", "--auth-tokens", tokens)
	u := p.URL + "/v1/stream/a/ds"
	ct := []string{"Content-Type", "text/plain"}
	wantStatus(t, do(t, "PUT", u, nil, ct...), 401, "DS create without token")
	wantStatus(t, do(t, "PUT", u, nil, append(ct, bearerHdr("tok-reader-0123456789")...)...), 403, "DS create by a reader")
	wantStatus(t, do(t, "PUT", u, nil, append(ct, bearerHdr("tok-writer-0123456789")...)...), 201, "DS create by a writer")
	wantStatus(t, do(t, "POST", u, []byte("hello"), append(ct, bearerHdr("tok-writer-0123456789")...)...), 204, "DS append by a writer")
	wantStatus(t, do(t, "GET", u+"?offset=-1", nil, bearerHdr("tok-writer-0123456789")...), 403, "DS read by a writer")
	wantStatus(t, do(t, "GET", u+"?offset=-1", nil, bearerHdr("tok-scraper-0123456789")...), 403, "DS read by a scrape-only token")
	wantStatus(t, do(t, "GET", p.URL+"/metrics", nil, bearerHdr("tok-scraper-0123456789")...), 200, "DS node /metrics by a scrape-only token")
	r := do(t, "GET", u+"?offset=-1", nil, bearerHdr("tok-reader-0123456789")...)
	wantStatus(t, r, 200, "DS read by a reader")
	if string(r.Body) != "hello" {
		t.Fatalf("DS read: %q", r.Body)
	}
	wantStatus(t, do(t, "GET", p.URL+"/v1/stream/b/x?offset=-1", nil, bearerHdr("tok-reader-0123456789")...), 403, "DS read outside the prefix")
	wantStatus(t, do(t, "DELETE", u, nil, bearerHdr("tok-writer-0123456789")...), 403, "DS delete by a writer")
	wantStatus(t, do(t, "DELETE", u, nil, bearerHdr("tok-a-admin-0123456789")...), 204, "DS delete by an admin")
	// CORS preflight carries no credentials and is answered.
	wantStatus(t, do(t, "OPTIONS", u, nil), 204, "DS preflight without token")
}

// TestAuthReloadOnSIGHUP: a revoked token stops working and a new one
// starts working after SIGHUP, without a restart; a broken file keeps the
// tokens in force.
func TestAuthReloadOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.yaml")
	writeTokenFile(t, path, testToken{name: "old", secret: "tok-old-0123456789", scopes: []string{"admin:/"}})
	p := startNode(t, filepath.Join(dir, "data"), "--auth-tokens", path)
	wantStatus(t, do(t, "GET", p.URL+"/_streams", nil, bearerHdr("tok-old-0123456789")...), 200, "old token before reload")
	wantStatus(t, do(t, "GET", p.URL+"/_streams", nil, bearerHdr("tok-new-0123456789")...), 401, "new token before reload")

	writeTokenFile(t, path, testToken{name: "new", secret: "tok-new-0123456789", scopes: []string{"admin:/"}})
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !pollUntil(20*time.Second, 20*time.Millisecond, func() bool {
		return do(t, "GET", p.URL+"/_streams", nil, bearerHdr("tok-new-0123456789")...).Status == 200
	}) {
		t.Fatalf("new token not accepted after SIGHUP\n%s", p.logs.String())
	}
	wantStatus(t, do(t, "GET", p.URL+"/_streams", nil, bearerHdr("tok-old-0123456789")...), 401, "revoked token after reload")

	if err := os.WriteFile(path, []byte("tokens: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = p.Cmd.Process.Signal(syscall.SIGHUP)
	if !pollUntil(20*time.Second, 20*time.Millisecond, func() bool {
		return strings.Contains(p.logs.String(), "reload on SIGHUP failed")
	}) {
		t.Fatalf("broken token file: no reload error logged\n%s", p.logs.String())
	}
	wantStatus(t, do(t, "GET", p.URL+"/_streams", nil, bearerHdr("tok-new-0123456789")...), 200, "tokens in force after a failed reload")
}

// TestAuthRateLimit: a token over its rate gets 429 with Retry-After.
func TestAuthRateLimit(t *testing.T) {
	dir := t.TempDir()
	path := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"),
		testToken{name: "slow", secret: "tok-slow-0123456789", scopes: []string{"admin:/"}, extra: "    rate: 0.5\n    burst: 3\n"})
	p := startNode(t, filepath.Join(dir, "data"), "--auth-tokens", path)
	var last response
	for range 10 {
		if last = do(t, "GET", p.URL+"/_streams", nil, bearerHdr("tok-slow-0123456789")...); last.Status == 429 {
			break
		}
	}
	wantStatus(t, last, 429, "request past the burst")
	if ra := last.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("429 without a usable Retry-After: %q", ra)
	}
}

// TestRefusesOpenListenerWithoutAuth: a listener on every interface
// without a token file does not start; --insecure-no-auth overrides.
func TestRefusesOpenListenerWithoutAuth(t *testing.T) {
	_, port, _ := net.SplitHostPort(freeAddr(t))
	out, err := exec.Command(picomqBin, "serve", "--data-dir", t.TempDir(), "--http-addr", "0.0.0.0:"+port, "--kafka-addr", "off").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--auth-tokens") {
		t.Fatalf("open listener without auth: err %v, output %s", err, out)
	}
}

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "picomq test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a server certificate for 127.0.0.1 with serial to
// certFile/keyFile.
func (ca *testCA) issue(t testing.TB, serial int64, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "picomq test node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// Write to temp files and rename, as a certificate manager does, so
	// the node never reads a half-written pair.
	for file, data := range map[string][]byte{
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}),
	} {
		if err := os.WriteFile(file+".tmp", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
}

func (ca *testCA) client() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// startTLSNode starts a node serving TLS with a fresh certificate of ca and
// waits until it answers over https.
func startTLSNode(t *testing.T, ca *testCA, dir string, extra ...string) (*proc, string, string) {
	t.Helper()
	certFile, keyFile := filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem")
	ca.issue(t, 100, certFile, keyFile)
	addr := freeAddr(t)
	args := append([]string{"serve", "--data-dir", filepath.Join(dir, "data"), "--http-addr", addr, "--kafka-addr", "off",
		"--node-id", "tls", "--tls-cert", certFile, "--tls-key", keyFile}, extra...)
	p := startProc(t, &proc{t: t, URL: "https://" + addr, args: args, logs: &syncBuffer{}, client: ca.client()})
	return p, certFile, keyFile
}

// TestTLSRoundTrip: with a CA made here, the node serves HTTP/2 over TLS,
// the Go client appends and reads back through it with a token, plain
// HTTP is refused, and a renewed certificate is served after SIGHUP
// without a restart.
func TestTLSRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	p, certFile, keyFile := startTLSNode(t, ca, dir, "--auth-tokens", tokens)

	c := ca.client()
	resp, err := c.Get(p.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.TLS == nil || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 100 {
		t.Fatalf("https: proto %s, TLS %v", resp.Proto, resp.TLS != nil)
	}

	cl, err := picomq.NewPico(p.URL, picomq.WithHTTPClient(c), picomq.WithToken(rootToken))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := cl.Stream("/a/tls")
	if _, err := s.Create(ctx, "text/plain", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, picomq.AppendRecord{Body: []byte("over tls")}); err != nil {
		t.Fatal(err)
	}
	page, err := s.Read(ctx, "0", picomq.ReadOptions{})
	if err != nil || len(page.Records) != 1 || string(page.Records[0].Body) != "over tls" {
		t.Fatalf("read over TLS: %+v %v", page, err)
	}

	// Plain HTTP to the TLS port is not served.
	if r, err := http.Get("http://" + strings.TrimPrefix(p.URL, "https://") + "/a/tls"); err == nil {
		r.Body.Close()
		if r.StatusCode == 200 {
			t.Fatal("plain HTTP served on the TLS listener")
		}
	}

	// Certificate renewal: new pair on disk, SIGHUP, new serial served.
	ca.issue(t, 200, certFile, keyFile)
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !pollUntil(20*time.Second, 20*time.Millisecond, func() bool {
		c := ca.client() // a new connection, a new handshake
		resp, err := c.Get(p.URL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64() == 200
	}) {
		t.Fatalf("renewed certificate not served after SIGHUP\n%s", p.logs.String())
	}
}

// TestAuthClientAndCLIAcrossRedirect: the Go client (WithToken) and the
// CLI (--token and PICOMQ_TOKEN) work against auth-on nodes, including a
// 307 from the node they asked to the stream's owner.
func TestAuthClientAndCLIAcrossRedirect(t *testing.T) {
	dir := t.TempDir()
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	c := startCluster(t, 2, clusterOpts{Extra: []string{"--auth-tokens", tokens}, Token: rootToken})
	owner, other := c.nodes[0], c.nodes[1]
	const name = "/a/redirected"
	wantStatus(t, do(t, "PUT", owner.URL+name, nil, append(bearerHdr(rootToken), "Content-Type", "text/plain")...), 201, "create on the owner")

	// The other node redirects, and refuses without a token first.
	r, err := send(context.Background(), noRedirect, "POST", other.URL+name, []byte("x"), "Content-Type", "text/plain")
	if err != nil || r.Status != 401 {
		t.Fatalf("append without a token via the other node: %v %d", err, r.Status)
	}
	r, err = send(context.Background(), noRedirect, "GET", other.URL+name+"?offset=0", nil, bearerHdr(rootToken)...)
	if err != nil || r.Status != 307 || !strings.HasPrefix(r.Header.Get("Location"), owner.URL) {
		t.Fatalf("the other node must redirect to the owner: %v %d %v", err, r.Status, r.Header)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := picomq.NewPico(other.URL, picomq.WithToken("tok-writer-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := cl.Stream(name).Append(ctx, picomq.AppendRecord{Body: []byte("from the go client")})
	if err != nil {
		t.Fatalf("Go client append across the redirect: %v", err)
	}
	_ = ack
	// The writer cannot read; the reader can, through the other node.
	if _, err := cl.Stream(name).Read(ctx, "0", picomq.ReadOptions{}); !picomq.IsKind(err, picomq.KindForbidden) {
		t.Fatalf("writer token reading: %v, want forbidden", err)
	}
	rd, _ := picomq.NewPico(other.URL, picomq.WithToken("tok-reader-0123456789"))
	page, err := rd.Stream(name).Read(ctx, "0", picomq.ReadOptions{})
	if err != nil || len(page.Records) != 1 || string(page.Records[0].Body) != "from the go client" {
		t.Fatalf("reader across the redirect: %+v %v", page, err)
	}
	bad, _ := picomq.NewPico(other.URL, picomq.WithToken("tok-wrong-0123456789"))
	if _, err := bad.Stream(name).Append(ctx, picomq.AppendRecord{Body: []byte("no")}); !picomq.IsKind(err, picomq.KindUnauthorized) {
		t.Fatalf("wrong token: %v, want unauthorized", err)
	}

	cli := func(env []string, stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, picomqBin, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cli([]string{"PICOMQ_TOKEN=tok-writer-0123456789"}, "from the cli env\n", "append", "--server", other.URL, name); err != nil {
		t.Fatalf("CLI append with PICOMQ_TOKEN: %v\n%s", err, out)
	}
	if out, err := cli(nil, "from the cli flag\n", "append", "--server", other.URL, "--token", "tok-writer-0123456789", name); err != nil {
		t.Fatalf("CLI append with --token: %v\n%s", err, out)
	}
	out, err := cli([]string{"PICOMQ_TOKEN=tok-reader-0123456789"}, "", "read", "--server", other.URL, name)
	if err != nil || !strings.Contains(out, "from the go client") || !strings.Contains(out, "from the cli env") || !strings.Contains(out, "from the cli flag") {
		t.Fatalf("CLI read with PICOMQ_TOKEN: %v\n%s", err, out)
	}
	if out, err := cli(nil, "", "read", "--server", other.URL, name); err == nil {
		t.Fatalf("CLI read without a token succeeded:\n%s", out)
	}
}
