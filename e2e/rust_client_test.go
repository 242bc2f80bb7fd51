package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRustClient runs the Rust client's tests (client/rust: `cargo test`,
// offline against Debian's packaged crates) and its documented usage
// example against real nodes: a Pico node, a Durable Streams node, and two
// Pico nodes sharing an etcd with token authentication on, each behind a
// recording proxy that is its advertise URL, so this test sees both hops of
// a redirect and checks that both carried the token, and a node serving
// https with a certificate of a private CA (tests/tls.rs). The workspace is
// built once: `cargo test` builds the examples too.
func TestRustClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the Rust workspace (minutes on a cold machine); run without -short")
	}
	cargo, err := exec.LookPath("cargo")
	if err != nil {
		t.Fatalf("cargo not found: the Rust client's tests need cargo and the Debian crates .ci/run installs (%v)", err)
	}
	workspace, err := filepath.Abs("../client/rust")
	if err != nil {
		t.Fatal(err)
	}

	pico := startNode(t, t.TempDir(), "--protocol", "pico")
	ds := startNode(t, t.TempDir(), "--protocol", "durable-streams")

	const token = "rust-e2e-token-0123456789abcdef"
	const redirectStream = "/rust/redirect/across-nodes"
	a, b := authPair(t, token)

	// A node serving https with a certificate of a CA made here; the Rust
	// test trusts it through ClientConfig::ca_pem (tests/tls.rs).
	tlsDir := t.TempDir()
	ca := newTestCA(t)
	caFile := filepath.Join(tlsDir, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	tlsNode, _, _ := startTLSNode(t, ca, tlsDir)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cargo, "test", "--offline", "--workspace")
	cmd.Dir = workspace
	cmd.Env = append(os.Environ(),
		"PICOMQ_TEST_PICO_URL="+pico.URL,
		"PICOMQ_TEST_DS_URL="+ds.URL,
		"PICOMQ_TEST_NODE_A_URL="+a.URL,
		"PICOMQ_TEST_NODE_B_URL="+b.URL,
		"PICOMQ_TEST_TOKEN="+token,
		"PICOMQ_TEST_REDIRECT_STREAM="+redirectStream,
		"PICOMQ_TEST_TLS_URL="+tlsNode.URL,
		"PICOMQ_TEST_TLS_CA="+caFile,
		"CARGO_TERM_COLOR=never",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("cargo test: %v\n%s", err, tail(out.String(), 12000))
	}
	t.Logf("cargo test passed in %v:\n%s", time.Since(start).Round(time.Second), testSummary(out.String()))

	// Both hops of the redirected append carried the token: node b
	// answered 307 to node a's advertise URL, node a wrote the record.
	var hopB, hopA *seenHop
	for _, h := range b.hops() {
		if h.Method == http.MethodPost && h.Path == redirectStream && hopB == nil {
			hopB = &h
		}
	}
	for _, h := range a.hops() {
		if h.Method == http.MethodPost && h.Path == redirectStream && hopA == nil {
			hopA = &h
		}
	}
	if hopB == nil || hopA == nil {
		t.Fatalf("the redirected append was not seen on both nodes (b: %v, a: %v)", hopB, hopA)
	}
	if hopB.Status != http.StatusTemporaryRedirect || !strings.HasPrefix(hopB.Location, a.URL) {
		t.Fatalf("node b answered %d, Location %q; want 307 to %s", hopB.Status, hopB.Location, a.URL)
	}
	if hopA.Status != http.StatusOK {
		t.Fatalf("node a answered the redirected append %d", hopA.Status)
	}
	// Every request carried the token, except the Rust test's deliberate
	// anonymous read, which the node refused.
	for _, h := range append(a.hops(), b.hops()...) {
		if h.Auth != "Bearer "+token && h.Status != http.StatusUnauthorized {
			t.Fatalf("%s %s carried Authorization %q and got %d", h.Method, h.Path, h.Auth, h.Status)
		}
	}

	// The documented example, built by cargo test above, against a fresh
	// node; the URL argument is its only change from the documentation.
	targetDir := filepath.Join(workspace, "target")
	if d := os.Getenv("CARGO_TARGET_DIR"); d != "" {
		targetDir = d
	}
	example := filepath.Join(targetDir, "debug", "examples", "quickstart")
	node := startNode(t, t.TempDir(), "--protocol", "pico")
	for run := 1; run <= 2; run++ {
		got, err := exec.CommandContext(ctx, example, node.URL).CombinedOutput()
		if err != nil {
			t.Fatalf("example run %d: %v\n%s", run, err, got)
		}
		want := "appended at " + []string{"", "0", "1"}[run] + "\n"
		for i := 0; i < run; i++ {
			want += []string{"0", "1"}[i] + ` {"item":"widget"}` + "\n"
		}
		if string(got) != want {
			t.Fatalf("example run %d printed\n%s\nwant\n%s", run, got, want)
		}
	}
}

// testSummary keeps cargo's per-binary result lines.
func testSummary(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "test result:") || strings.Contains(l, "Running ") {
			b.WriteString(strings.TrimSpace(l) + "\n")
		}
	}
	return b.String()
}

// seenHop is one request a recording proxy passed on, and the answer.
type seenHop struct {
	Method, Path, Auth string
	Status             int
	Location           string
}

// hopRecorder is a reverse proxy in front of one node that records what
// passes through it.
type hopRecorder struct {
	URL    string
	mu     sync.Mutex
	seen   []seenHop
	target *url.URL
}

func (p *hopRecorder) hops() []seenHop {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seenHop(nil), p.seen...)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func newHopRecorder(t *testing.T) *hopRecorder {
	p := &hopRecorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.FlushInterval = -1
		rp.ServeHTTP(rec, r)
		p.mu.Lock()
		p.seen = append(p.seen, seenHop{Method: r.Method, Path: r.URL.Path, Auth: r.Header.Get("Authorization"),
			Status: rec.status, Location: rec.Header().Get("Location")})
		p.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// authPair starts an etcd and two Pico nodes sharing it and a file object
// store, both requiring token (admin on every stream), each advertising its
// recording proxy. It returns once node b sees both members.
func authPair(t *testing.T, token string) (*hopRecorder, *hopRecorder) {
	t.Helper()
	etcd := startEtcd(t)
	sum := sha256.Sum256([]byte(token))
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	yaml := "tokens:\n  - name: rust-e2e\n    sha256: " + hex.EncodeToString(sum[:]) + "\n    scopes: [\"admin:/\"]\n"
	if err := os.WriteFile(tokens, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	objects := "file://" + filepath.Join(t.TempDir(), "objects")
	var proxies []*hopRecorder
	for _, id := range []string{"a", "b"} {
		px := newHopRecorder(t)
		n := startNode(t, t.TempDir(), "--protocol", "pico", "--node-id", "rust-"+id, "--advertise-url", px.URL,
			"--etcd-endpoints", etcd.Endpoint(), "--object-store", objects, "--lease-ttl", "3s", "--auth-tokens", tokens)
		u, err := url.Parse(n.URL)
		if err != nil {
			t.Fatal(err)
		}
		px.mu.Lock()
		px.target = u
		px.mu.Unlock()
		proxies = append(proxies, px)
	}
	ok := pollUntil(30*time.Second, 50*time.Millisecond, func() bool {
		req, _ := http.NewRequest(http.MethodGet, proxies[1].URL+"/_sys/cluster", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v clusterView
		return json.NewDecoder(resp.Body).Decode(&v) == nil && len(v.Nodes) == 2
	})
	if !ok {
		t.Fatal("node b did not see two members within 30s")
	}
	// The membership probes are not part of what the test checks.
	for _, px := range proxies {
		px.mu.Lock()
		px.seen = nil
		px.mu.Unlock()
	}
	return proxies[0], proxies[1]
}
