package node

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/auth"
)

// FuzzConfigFile: any config file gives a config or a one-line error,
// never a panic, and an accepted config passes Validate (including the
// refusal of an open listener without auth).
func FuzzConfigFile(f *testing.F) {
	f.Add([]byte("node-id: n1\nhttp-addr: 127.0.0.1:4437\nlog-format: json\n"))
	f.Add([]byte("auth_tokens: /t.yaml\nhttp_addr: 0.0.0.0:4437\ntls-cert: /c\ntls-key: /k\nh2c: true\n"))
	f.Add([]byte("etcd-endpoints: [a:1, b:2]\nmax-connections: 10\n"))
	f.Add([]byte("http-addr: 0.0.0.0:1\n"))
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte("seal-max-bytes: {a: b}\n"))
	path := filepath.Join(f.TempDir(), "c.yaml")
	dataDir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := ParseServeFlags([]string{"--config", path, "--data-dir", dataDir}, func(string) string { return "" }, io.Discard)
		if err != nil {
			if strings.Contains(err.Error(), "\n") && !strings.Contains(err.Error(), "yaml") {
				t.Fatalf("multi-line error: %q", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate: %v", err)
		}
		if cfg.AuthTokens == "" && !cfg.InsecureNoAuth && !isLoopbackAddr(cfg.HTTPAddr) {
			t.Fatalf("accepted an open listener %q without auth", cfg.HTTPAddr)
		}
	})
}

// FuzzClassify: whatever the method and path, only the probes and CORS
// preflights are public, a request on a stream needs a scope on that very
// stream name, and a reserved path no route names needs admin on "/".
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"/healthz", "/readyz", "/metrics", "/_streams", "/_streams/a/b", "/a/b", "/v1/stream/a", "/_sys/drain", "/_sys/new", "/_x", "/_sys/replica/append", "/%2e%2e/x", "//x"} {
		f.Add("GET", s, "prefix=/a/")
		f.Add("PATCH", s, "")
	}
	f.Fuzz(func(t *testing.T, method, path, query string) {
		for _, proto := range []string{ProtocolPico, ProtocolDurableStreams} {
			r := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: query}}
			table := newRouteTable(proto, nodeHandlers{}, nil)
			a := table.classify(r)
			rt, known := table.lookup(path)
			if strings.HasPrefix(path, "/_") && !known && (a.public || a.level != auth.Admin || a.name != "/") {
				t.Fatalf("%s %s (%s): unknown reserved route needs %+v, want admin on /", method, path, proto, a)
			}
			if a.public && path != "/healthz" && path != "/readyz" && method != http.MethodOptions && !(known && rt.direct) {
				t.Fatalf("%s %s %q (%s) is public", method, path, query, proto)
			}
			if a.level != 0 && a.name == "" {
				t.Fatalf("%s %s: level %v on an empty name", method, path, a.level)
			}
			if proto == ProtocolPico && !strings.HasPrefix(path, "/_") && path != "/healthz" && path != "/readyz" && path != "/metrics" &&
				method != http.MethodOptions && a.level != 0 && a.name != path {
				t.Fatalf("%s %s: checked %q instead of the stream name", method, path, a.name)
			}
			if a.level != 0 && a.level != auth.Read && a.level != auth.Write && a.level != auth.Admin {
				t.Fatalf("level %v", a.level)
			}
		}
	})
}
