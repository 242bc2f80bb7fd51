package node

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPprofListener: --pprof-addr serves the runtime profiles on its own
// loopback listener, never on the stream listener, and stops with the node.
func TestPprofListener(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startTestNode(t, ctx, t.TempDir(), nil, "--pprof-addr", "127.0.0.1:0")
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://" + n.pprof.Addr() + "/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Fatalf("heap profile: %d %.200s", code, body)
	}
	if code, _ := get("http://" + n.Addr() + "/debug/pprof/heap?debug=1"); code == 200 {
		t.Fatal("the stream listener serves profiles")
	}
	addr := n.pprof.Addr()
	sctx, c := context.WithTimeout(context.Background(), 30*time.Second)
	defer c()
	if err := n.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/debug/pprof/"); err == nil {
		t.Fatal("profiling listener still answers after Shutdown")
	}
}

// TestConfigPprofLoopbackOnly: the profiling listener has no
// authentication, so --pprof-addr must be loopback, with or without auth.
func TestConfigPprofLoopbackOnly(t *testing.T) {
	cases := []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--pprof-addr", "127.0.0.1:6060"}, true},
		{[]string{"--pprof-addr", "localhost:6060"}, true},
		{[]string{"--pprof-addr", "[::1]:6060"}, true},
		{[]string{"--pprof-addr", ":6060"}, false},
		{[]string{"--pprof-addr", "0.0.0.0:6060", "--auth-tokens", "/t.yaml"}, false},
		{[]string{"--pprof-addr", "10.0.0.1:6060", "--insecure-no-auth"}, false},
	}
	for _, c := range cases {
		_, err := parseWith(t, "", c.args...)
		if (err == nil) != c.ok {
			t.Errorf("%v: err = %v, want ok=%v", c.args, err, c.ok)
		}
	}
}
